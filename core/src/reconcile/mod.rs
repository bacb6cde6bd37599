//! Reconciliation (issue 34, spec section 10): a source's provider is asked
//! what it sent over a window, that is compared with what was claimed, and
//! what never reached replaysafe is recovered through the same claim as a
//! delivery (Stripe: from the list itself), so nothing runs twice. One run
//! at a time per source, across every process sharing the database; each
//! run's verdict is kept in `reconcile_runs`, updated page by page, so a run
//! stopped early keeps what it found.

mod stripe;

use std::time::Duration;

use chrono::{DateTime, Utc};
use replaysafe_types::reconcile::ReconcileRun;
use replaysafe_types::time::Time;
use sqlx::PgPool;

use crate::config::reconcile::{EventList, Reconcile};
use crate::config::SourceConfig;
use crate::processing::Services;

/// How much a run may do: the issue's bounds, smaller in tests.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_pages: u32,
    pub max_duration: Duration,
    pub request_timeout: Duration,
    /// Retries of one page after a 429, a 5xx, a timeout or a refused
    /// connection.
    pub retries: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_pages: 200,
            max_duration: Duration::from_secs(300),
            request_timeout: Duration::from_secs(30),
            retries: 4,
        }
    }
}

/// Deliveries still on their way are not missing: the window ends this
/// long before the run starts.
pub const SETTLE: Duration = Duration::from_secs(300);

/// Why a run did not start.
#[derive(Debug, thiserror::Error)]
pub enum NotRun {
    #[error("the source has no [source.reconcile]")]
    NotConfigured,
    #[error("a reconciliation of this source is running")]
    Busy,
    /// A scheduled run found another process had made it.
    #[error("the source's scheduled run is not due")]
    NotDue,
    #[error("since must be in the past and within the source's lookback: {0}")]
    BadSince(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// What one page told, for the run's counts.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    seen: i64,
    already_received: i64,
    recovered: i64,
    redelivery_requested: i64,
    still_missing: i64,
    provider_failed_we_completed: i64,
}

/// Runs one reconciliation of `source` now: from `since` (default, and at
/// the earliest: its lookback ago) to `SETTLE` ago. `started_by`:
/// `schedule`, or who asked; `only_if_due`: the schedule's run, made only
/// if no run started by it within that long (checked under the lock).
pub async fn run(
    services: &Services,
    source: &SourceConfig,
    since: Option<DateTime<Utc>>,
    dry_run: bool,
    started_by: &str,
    limits: Limits,
    only_if_due: Option<Duration>,
) -> Result<ReconcileRun, NotRun> {
    let reconcile = source.reconcile.as_deref().ok_or(NotRun::NotConfigured)?;
    let now = Utc::now();
    let window_to = now - chrono::Duration::from_std(SETTLE).expect("small");
    let earliest = now - chrono::Duration::from_std(reconcile.lookback).expect("hours");
    // Earlier than the lookback is the lookback (the window says so): a
    // `--since 72h` is not refused for the seconds it took to arrive.
    let window_from = match since {
        None => earliest,
        Some(t) if t >= now => {
            return Err(NotRun::BadSince(format!(
                "{} is not in the past",
                t.to_rfc3339()
            )))
        }
        Some(t) => t.max(earliest),
    };
    let pool = &services.pool;
    let Some(lock) = SourceLock::take(pool, &source.slug).await? else {
        return Err(NotRun::Busy);
    };
    // Under the lock: a run left unfinished was stopped with its process.
    sqlx::query!(
        "UPDATE reconcile_runs SET finished_at = now(),
             error = coalesce(error, 'interrupted: the process running it stopped')
         WHERE source = $1 AND finished_at IS NULL",
        source.slug
    )
    .execute(pool)
    .await?;
    // A scheduled run another process made meanwhile is this one.
    if let Some(every) = only_if_due {
        if !due(pool, &source.slug, every).await? {
            lock.release().await;
            return Err(NotRun::NotDue);
        }
    }
    let outcome = run_locked(
        services,
        source,
        reconcile,
        window_from.min(window_to),
        window_to,
        dry_run,
        started_by,
        limits,
    )
    .await;
    lock.release().await;
    outcome
}

/// One source's run lock: a session advisory lock on a connection of its
/// own, for the whole run (a transaction held open for minutes would hold
/// back vacuum). A run dropped midway (its request gone, shutdown) closes
/// the connection, which releases the lock: it never goes back to the pool
/// holding it.
struct SourceLock {
    conn: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    slug: String,
}

impl SourceLock {
    async fn take(pool: &PgPool, slug: &str) -> Result<Option<Self>, sqlx::Error> {
        let mut conn = pool.acquire().await?;
        let taken: bool = sqlx::query_scalar!(
            r#"SELECT pg_try_advisory_lock(hashtext('replaysafe.reconcile'), hashtext($1)) AS "taken!""#,
            slug
        )
        .fetch_one(&mut *conn)
        .await?;
        Ok(taken.then(|| Self {
            conn: Some(conn),
            slug: slug.to_owned(),
        }))
    }

    async fn release(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let unlocked = sqlx::query_scalar!(
            r#"SELECT pg_advisory_unlock(hashtext('replaysafe.reconcile'), hashtext($1)) AS "unlocked!""#,
            self.slug
        )
        .fetch_one(&mut *conn)
        .await;
        if !matches!(unlocked, Ok(true)) {
            drop(conn.detach());
        }
    }
}

impl Drop for SourceLock {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_locked(
    services: &Services,
    source: &SourceConfig,
    reconcile: &Reconcile,
    window_from: DateTime<Utc>,
    window_to: DateTime<Utc>,
    dry_run: bool,
    started_by: &str,
    limits: Limits,
) -> Result<ReconcileRun, NotRun> {
    let pool = &services.pool;
    let id: i64 = sqlx::query_scalar!(
        "INSERT INTO reconcile_runs (source, started_by, dry_run, window_from, window_to)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
        source.slug,
        started_by,
        dry_run,
        window_from as _,
        window_to as _
    )
    .fetch_one(pool)
    .await?;
    let run = Run {
        services,
        source,
        reconcile,
        id,
        dry_run,
        limits,
        started: std::time::Instant::now(),
        client: crate::telemetry::outgoing_client()
            .timeout(limits.request_timeout)
            .build()
            .expect("building the HTTP client"),
    };
    let error = match &reconcile.list {
        EventList::Stripe { .. } => stripe::compare(&run, window_from, window_to).await,
        EventList::GitHub { .. } => Err("GitHub reconciliation is not built yet".to_owned()),
    }
    .err();
    if let Some(e) = &error {
        tracing::warn!(source = %source.slug, run = id, error = %e, "reconciliation stopped");
    }
    let finished = sqlx::query_as!(
        ReconcileRun,
        r#"UPDATE reconcile_runs SET finished_at = now(), error = $2 WHERE id = $1
           RETURNING id, source, started_by, dry_run, window_from AS "window_from: Time",
                     window_to AS "window_to: Time", started_at AS "started_at: Time",
                     finished_at AS "finished_at: Time", pages, seen, already_received,
                     recovered, redelivery_requested, still_missing,
                     provider_failed_we_completed, error"#,
        id,
        error
    )
    .fetch_one(pool)
    .await?;
    Ok(finished)
}

/// A run under way: what its providers' modules need.
struct Run<'a> {
    services: &'a Services,
    source: &'a SourceConfig,
    reconcile: &'a Reconcile,
    id: i64,
    dry_run: bool,
    limits: Limits,
    started: std::time::Instant,
    client: reqwest::Client,
}

impl Run<'_> {
    /// Adds a page's counts to the run's row.
    async fn add_page(&self, c: Counts) -> Result<(), String> {
        sqlx::query!(
            "UPDATE reconcile_runs SET pages = pages + 1, seen = seen + $2,
                 already_received = already_received + $3, recovered = recovered + $4,
                 redelivery_requested = redelivery_requested + $5,
                 still_missing = still_missing + $6,
                 provider_failed_we_completed = provider_failed_we_completed + $7
             WHERE id = $1",
            self.id,
            c.seen,
            c.already_received,
            c.recovered,
            c.redelivery_requested,
            c.still_missing,
            c.provider_failed_we_completed
        )
        .execute(&self.services.pool)
        .await
        .map_err(|e| format!("could not record the page's findings: {e}"))?;
        Ok(())
    }

    /// Whether the run may read another page after `pages`.
    fn over_budget(&self, pages: u32) -> Option<String> {
        if pages >= self.limits.max_pages {
            return Some(format!(
                "stopped after {} pages: run again with a later since",
                self.limits.max_pages
            ));
        }
        (self.started.elapsed() >= self.limits.max_duration).then(|| {
            format!(
                "stopped after {} s: run again with a later since",
                self.limits.max_duration.as_secs()
            )
        })
    }

    /// GETs one page, retrying what a retry may fix (429 after its
    /// Retry-After, 5xx, a timeout, a refused connection) within the run's
    /// budget; a 3xx is an error (no redirect is followed).
    async fn get(&self, request: reqwest::RequestBuilder) -> Result<Vec<u8>, String> {
        let mut attempt = 0;
        loop {
            // No request outlives the run's time.
            let left = self
                .limits
                .max_duration
                .saturating_sub(self.started.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "stopped after {} s: run again with a later since",
                    self.limits.max_duration.as_secs()
                ));
            }
            let sent = request
                .try_clone()
                .expect("a GET has no streamed body")
                .timeout(self.limits.request_timeout.min(left))
                .send()
                .await;
            let wait = match sent {
                Ok(r) if r.status().is_success() => {
                    return r
                        .bytes()
                        .await
                        .map(|b| b.to_vec())
                        .map_err(|e| format!("reading the provider's answer: {e}"))
                }
                Ok(r) => {
                    let status = r.status();
                    let after = r
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let body = r.text().await.unwrap_or_default();
                    let detail = provider_message(&body);
                    let retryable = status.as_u16() == 429 || status.is_server_error();
                    if !retryable || attempt >= self.limits.retries {
                        return Err(match status.as_u16() {
                            401 => format!("the provider refused the credential (401): {detail}"),
                            403 => format!("the credential may not list events (403): {detail}"),
                            s if (300..400).contains(&s) => {
                                format!("the provider answered {s}: redirects are not followed")
                            }
                            s => format!("the provider answered {s}: {detail}"),
                        });
                    }
                    after.unwrap_or(Duration::from_secs(1 << attempt))
                }
                Err(e) => {
                    if attempt >= self.limits.retries {
                        return Err(format!("the provider could not be reached: {}", plain(&e)));
                    }
                    Duration::from_secs(1 << attempt)
                }
            };
            let left = self
                .limits
                .max_duration
                .saturating_sub(self.started.elapsed());
            if wait >= left {
                return Err(format!(
                    "the provider asked to wait {} s, past the run's time: run again later",
                    wait.as_secs()
                ));
            }
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

/// A provider's error message from its JSON (Stripe's `error.message`,
/// GitHub's `message`), cut short.
fn provider_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.pointer("/message"))
        })
        .and_then(|m| m.as_str())
        .unwrap_or(body);
    message.chars().take(300).collect()
}

/// An HTTP client error without its URL (it carries no credential, but the
/// message reads better without it).
fn plain(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    match std::error::Error::source(e) {
        Some(cause) => format!("{kind}: {cause}"),
        None => kind.to_owned(),
    }
}

/// A source's past runs, newest first; `before`: the next page's cursor.
pub async fn runs(
    pool: &PgPool,
    source: &str,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<ReconcileRun>, sqlx::Error> {
    sqlx::query_as!(
        ReconcileRun,
        r#"SELECT id, source, started_by, dry_run, window_from AS "window_from: Time",
                  window_to AS "window_to: Time", started_at AS "started_at: Time",
                  finished_at AS "finished_at: Time", pages, seen, already_received,
                  recovered, redelivery_requested, still_missing,
                  provider_failed_we_completed, error
           FROM reconcile_runs
           WHERE source = $1 AND ($2::bigint IS NULL OR id < $2)
           ORDER BY id DESC LIMIT $3"#,
        source,
        before,
        limit
    )
    .fetch_all(pool)
    .await
}

/// How often the schedule looks for sources whose run is due.
const SCHEDULE_POLL: Duration = Duration::from_secs(60);

/// Runs each source's reconciliation every `every_minutes`, until shutdown:
/// a source is due when its last scheduled run started that long ago (in
/// any process: the runs' table says), and only one process runs it (the
/// run's lock). Provider errors end up in the run's verdict.
pub async fn run_on_schedule(services: Services, shutdown: tokio_util::sync::CancellationToken) {
    loop {
        for source in &services.config.sources {
            let Some(every) = source.reconcile.as_ref().and_then(|r| r.every) else {
                continue;
            };
            match due(&services.pool, &source.slug, every).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(source = %source.slug, error = %e, "could not read the reconciliation schedule");
                    continue;
                }
            }
            let ran = tokio::select! {
                _ = shutdown.cancelled() => return,
                ran = run(&services, source, None, false, "schedule", Limits::default(), Some(every)) => ran,
            };
            match ran {
                Ok(verdict) if verdict.recovered + verdict.still_missing > 0 => tracing::warn!(
                    source = %source.slug, run = verdict.id, recovered = verdict.recovered,
                    still_missing = verdict.still_missing,
                    "reconciliation found events that never reached replaysafe"
                ),
                Ok(_) | Err(NotRun::Busy | NotRun::NotDue) => {}
                Err(e) => {
                    tracing::warn!(source = %source.slug, error = %e, "reconciliation did not run")
                }
            }
        }
        // Jittered, as the alert evaluator: aligned processes would race.
        let wait = SCHEDULE_POLL.mul_f64(rand::random::<f64>() * 0.4 + 0.8);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Whether `source`'s last scheduled run started `every` ago or more.
async fn due(pool: &PgPool, source: &str, every: Duration) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT coalesce(max(started_at) < now() - make_interval(secs => $2), true) AS "due!"
           FROM reconcile_runs WHERE source = $1 AND started_by = 'schedule'"#,
        source,
        every.as_secs_f64()
    )
    .fetch_one(pool)
    .await
}
