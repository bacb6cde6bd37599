//! Sends the queued notifications: each leased by one process, retried with
//! backoff, given up after `MAX_ATTEMPTS` (the reason kept).

use std::time::Duration;

use sqlx::PgPool;

use super::channels;
use crate::config::Config;

/// How often due notifications are looked for.
pub const POLL: Duration = Duration::from_secs(1);
/// A leased notification is another process's to send for this long.
const LEASE_SECS: f64 = 120.0;
pub const MAX_ATTEMPTS: i32 = 8;

/// Waits after a failed try: 5 s, 20 s, 80 s, ... up to an hour.
fn backoff(attempts: i32) -> f64 {
    (5.0 * 4f64.powi(attempts.saturating_sub(1).min(6))).min(3600.0)
}

/// Sends every notification due now; returns how many were sent.
pub async fn send_due(
    pool: &PgPool,
    config: &Config,
    http: &reqwest::Client,
) -> Result<usize, sqlx::Error> {
    let leased = sqlx::query!(
        r#"UPDATE alert_notifications n SET leased_until = now() + make_interval(secs => $1),
               attempts = attempts + 1
           FROM (SELECT id FROM alert_notifications
                 WHERE sent_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
                   AND (leased_until IS NULL OR leased_until < now())
                 ORDER BY id LIMIT 20
                 FOR UPDATE SKIP LOCKED) due
           WHERE n.id = due.id
           RETURNING n.id, n.alert_id, n.channel, n.kind, n.attempts"#,
        LEASE_SECS
    )
    .fetch_all(pool)
    .await?;
    let mut sent = 0;
    for n in leased {
        let message = match n.alert_id {
            Some(alert) => channels::message_of(pool, config, n.id, &n.kind, alert).await?,
            None => None,
        };
        let channel = config.alerts.channels.iter().find(|c| c.name == n.channel);
        let outcome = match (channel, message) {
            (None, _) => Err("the channel is no longer configured".to_owned()),
            (_, None) => Err("its alert is gone".to_owned()),
            (Some(channel), Some(message)) => channels::send(http, channel, &message).await,
        };
        match outcome {
            Ok(()) => {
                sqlx::query!(
                    "UPDATE alert_notifications SET sent_at = now(), leased_until = NULL, last_error = NULL
                     WHERE id = $1",
                    n.id
                )
                .execute(pool)
                .await?;
                sent += 1;
            }
            Err(why) => {
                tracing::warn!(
                    channel = n.channel,
                    attempt = n.attempts,
                    "alert notification not sent: {why}"
                );
                sqlx::query!(
                    "UPDATE alert_notifications SET leased_until = NULL, last_error = $2,
                         next_attempt_at = now() + make_interval(secs => $3),
                         failed_at = CASE WHEN attempts >= $4 THEN now() END
                     WHERE id = $1",
                    n.id,
                    why,
                    backoff(n.attempts),
                    MAX_ATTEMPTS
                )
                .execute(pool)
                .await?;
            }
        }
    }
    Ok(sent)
}
