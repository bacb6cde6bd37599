//! Alerts pushed out (issue 17): the evaluator turns the rules that hold
//! (`replaysafe_types::alerts`) into alerts with a lifecycle, one process at a time,
//! and writes what each channel is to be sent in the same transaction; the
//! sender delivers those notifications with retries. Every `serve` process
//! runs both: the advisory lock makes one evaluate, the leases make one
//! send each notification.

pub mod channels;
mod evaluator;
pub mod rules;
mod sender;

use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

pub use evaluator::{evaluate_once, Transitions};
pub use sender::send_due;

/// Evaluates every `alerts.every`, and sends what is due every second,
/// until shutdown (two loops: a slow channel does not hold evaluation up).
pub async fn run(pool: PgPool, config: Arc<Config>, shutdown: CancellationToken) {
    let evaluating = {
        let (pool, config, shutdown) = (pool.clone(), config.clone(), shutdown.clone());
        async move {
            loop {
                if let Err(e) = evaluate_once(&pool, &config).await {
                    tracing::warn!(error = %e, "could not evaluate the alert rules; trying again");
                }
                // Jittered: processes on aligned timers would otherwise find
                // the lock taken by the same one every time, and another
                // config's sources would go unevaluated.
                let every = config
                    .alerts
                    .every
                    .mul_f64(rand::random::<f64>() * 0.4 + 0.8);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
            }
        }
    };
    let sending = async move {
        let http = channels::client();
        loop {
            if let Err(e) = send_due(&pool, &config, &http).await {
                tracing::warn!(error = %e, "could not send alert notifications; trying again");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(sender::POLL) => {}
            }
        }
    };
    tokio::join!(evaluating, sending);
}
