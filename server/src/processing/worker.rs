//! The worker pool. Each worker leases one due event at a time, forwards it
//! with no lock held, and records the outcome. Workers wake at once when this
//! process claims an event, and poll for work claimed by other processes.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::forward;
use super::queue::{self, Next};
use super::retry::{classify, RetryPolicy, Verdict};
use crate::config::Config;

/// How often idle workers look for work they were not told about.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Most events one worker leases and forwards at once.
pub const LEASE_BATCH: i64 = 32;

#[derive(Clone)]
pub struct Workers {
    pub pool: PgPool,
    pub config: Arc<Config>,
    pub client: reqwest::Client,
    pub policy: Arc<RetryPolicy>,
    /// Notified when this process queues an event.
    pub wake: Arc<Notify>,
}

impl Workers {
    pub fn new(pool: PgPool, config: Arc<Config>, wake: Arc<Notify>) -> Self {
        Self {
            pool,
            config,
            client: http_client(),
            policy: Arc::new(RetryPolicy::default()),
            wake,
        }
    }

    /// Starts `count` workers; they stop, finishing any attempt in flight, when
    /// `shutdown` is cancelled.
    pub fn spawn(&self, count: usize, shutdown: CancellationToken) -> JoinSet<()> {
        let process = format!("{}:{}", hostname(), std::process::id());
        let mut set = JoinSet::new();
        for n in 0..count {
            let worker = self.clone();
            let id = format!("{process}:{n}:{:08x}", rand::random::<u32>());
            let shutdown = shutdown.clone();
            set.spawn(async move { worker.run(id, shutdown).await });
        }
        set
    }

    async fn run(self, id: String, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            match self.run_once(&id).await {
                Ok(0) => {}
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(worker = %id, error = %e, "worker: database error; retrying")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(POLL_INTERVAL) => {}
            }
        }
    }

    /// Leases up to `LEASE_BATCH` due events, forwards them concurrently and
    /// records each; returns how many were processed (0 when none was due).
    /// One lease statement per batch: leasing, not forwarding, was the cost.
    pub async fn run_once(&self, worker: &str) -> Result<usize, sqlx::Error> {
        let leased = queue::lease_due(&self.pool, worker, LEASE_BATCH).await?;
        let count = leased.len();
        let attempts = leased.into_iter().map(|leased| {
            let span = tracing::info_span!("attempt", source = %leased.source, event = leased.event_id, attempt = leased.attempt);
            self.attempt(leased).instrument(span)
        });
        let done: Vec<_> = futures_util::future::join_all(attempts)
            .await
            .into_iter()
            .flatten()
            .collect();
        let moved = queue::finish_batch(&self.pool, worker, &done).await?;
        for (leased, record, next) in &done {
            crate::metrics_export::attempt(&leased.source, next.as_str(), record.latency_ms);
        }
        if moved < done.len() as u64 {
            tracing::warn!(
                lost = done.len() as u64 - moved,
                "leases lost before their attempts finished; their successors decide"
            );
        }
        Ok(count)
    }

    /// One forward; None when the event's source is no longer configured.
    async fn attempt(
        &self,
        leased: queue::Leased,
    ) -> Option<(queue::Leased, queue::AttemptRecord, Next)> {
        // Leasing only picks configured sources; a config reload could race it.
        let source = self
            .config
            .sources
            .iter()
            .find(|s| s.slug == leased.source)?;
        let answer = forward::forward(&self.client, source, &leased, forward::EXCERPT_BYTES).await;
        let (next, record) = decide(&self.policy, source.max_attempts, leased.attempt, answer);
        Some((leased, record, next))
    }
}

/// Where an event goes after an attempt's answer, and the attempt as recorded.
pub fn decide(
    policy: &RetryPolicy,
    max_attempts: u32,
    attempt: i32,
    answer: forward::Answer,
) -> (Next, queue::AttemptRecord) {
    let next = match classify(answer.record.status, answer.retry_after) {
        Verdict::Delivered => Next::Completed,
        Verdict::Fatal => Next::Dead(format!(
            "destination refused the event with {}",
            answer.record.status.unwrap_or_default()
        )),
        Verdict::Retry { .. } if attempt >= max_attempts as i32 => Next::Dead(format!(
            "gave up after {attempt} attempts; last: {}",
            describe(&answer.record)
        )),
        Verdict::Retry { retry_after } => Next::RetryIn(policy.delay(attempt as u32, retry_after)),
    };
    let mut record = answer.record;
    if record.error.is_none() && next != Next::Completed {
        record.error = Some(describe(&record));
    }
    (next, record)
}

fn describe(record: &queue::AttemptRecord) -> String {
    match (&record.error, record.status) {
        (Some(e), _) => e.clone(),
        (None, Some(status)) => format!("HTTP {status}"),
        (None, None) => "no answer".into(),
    }
}

/// The client for destinations: pooled connections, no redirects followed
/// (a redirect is the application's answer, not a new destination).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("building the HTTP client")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}
