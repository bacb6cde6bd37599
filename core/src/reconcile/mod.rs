//! Reconciliation (issue 34, spec section 10): a source's provider is asked
//! what it sent over a window, that is compared with what was claimed, and
//! what never reached replaysafe is recovered through the same claim as a
//! delivery (Stripe: from the list itself), so nothing runs twice. One run
//! at a time per source, across every process sharing the database; each
//! run's verdict is kept in `reconcile_runs`, updated page by page, so a run
//! stopped early keeps what it found.

mod github;
mod stripe;

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use replaysafe_types::reconcile::{ReconcileFinding, ReconcileRun};
use replaysafe_types::states::State;
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
        EventList::GitHub { .. } => github::compare(&run, window_from, window_to).await,
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
    /// Adds what `pages` more pages told to the run's row.
    async fn add_pages(&self, pages: u32, c: Counts) -> Result<(), String> {
        sqlx::query!(
            "UPDATE reconcile_runs SET pages = pages + $8, seen = seen + $2,
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
            c.provider_failed_we_completed,
            pages as i32
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

    /// Sends one request to the provider, retrying what a retry may fix
    /// (429 and a rate limit's 403 after the wait they ask for, 5xx, a
    /// timeout, a refused connection) within the run's budget; a 3xx is an
    /// error (no redirect is followed).
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Answer, Failed> {
        let mut attempt = 0;
        loop {
            // No request outlives the run's time.
            let left = self
                .limits
                .max_duration
                .saturating_sub(self.started.elapsed());
            if left.is_zero() {
                return Err(Failed::run(format!(
                    "stopped after {} s: run again with a later since",
                    self.limits.max_duration.as_secs()
                )));
            }
            let sent = request
                .try_clone()
                .expect("no request here streams its body")
                .timeout(self.limits.request_timeout.min(left))
                .send()
                .await;
            let wait = match sent {
                Ok(r) if r.status().is_success() => {
                    let headers = r.headers().clone();
                    return r
                        .bytes()
                        .await
                        .map(|b| Answer {
                            headers,
                            body: b.to_vec(),
                        })
                        .map_err(|e| Failed::run(format!("reading the provider's answer: {e}")));
                }
                Ok(r) => {
                    let status = r.status().as_u16();
                    let wait = asked_wait(r.headers(), status);
                    let body = r.text().await.unwrap_or_default();
                    let detail = provider_message(&body);
                    let retryable = wait.is_some() || status == 429 || status >= 500;
                    if !retryable || attempt >= self.limits.retries {
                        let message = match status {
                            401 => format!("the provider refused the credential (401): {detail}"),
                            403 if wait.is_some() => {
                                format!("the provider's rate limit (403): {detail}")
                            }
                            403 => format!("the credential is not allowed this (403): {detail}"),
                            s if (300..400).contains(&s) => {
                                format!("the provider answered {s}: redirects are not followed")
                            }
                            s => format!("the provider answered {s}: {detail}"),
                        };
                        return Err(Failed {
                            status: Some(status),
                            message,
                        });
                    }
                    wait.unwrap_or(Duration::from_secs(1 << attempt))
                }
                Err(e) => {
                    if attempt >= self.limits.retries {
                        return Err(Failed::run(format!(
                            "the provider could not be reached: {}",
                            plain(&e)
                        )));
                    }
                    Duration::from_secs(1 << attempt)
                }
            };
            let left = self
                .limits
                .max_duration
                .saturating_sub(self.started.elapsed());
            if wait >= left {
                return Err(Failed::run(format!(
                    "the provider asked to wait {} s, past the run's time: run again later",
                    wait.as_secs()
                )));
            }
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// Which of `keys` were claimed for the source, in which state.
    async fn claimed(&self, keys: &[String]) -> Result<HashMap<String, State>, String> {
        Ok(sqlx::query!(
            r#"SELECT idem_key AS "idem_key!", state AS "state!: State" FROM event_summaries
               WHERE source = $1 AND idem_key = ANY($2)"#,
            self.source.slug,
            keys
        )
        .fetch_all(&self.services.pool)
        .await
        .map_err(|e| format!("could not compare with the claimed events: {e}"))?
        .into_iter()
        .map(|r| (r.idem_key, r.state))
        .collect())
    }

    /// Records the keys a page found missing (a key's first finding counts
    /// it as missed, once): the view's list and GitHub's requests between
    /// runs. A weak finding (a dry run's, one not tried or waiting) never
    /// overwrites what an earlier run did.
    async fn note_findings(&self, found: &[Finding]) -> Result<(), String> {
        if found.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = found.iter().map(|f| f.key.clone()).collect();
        let types: Vec<Option<String>> = found.iter().map(|f| f.event_type.clone()).collect();
        let verdicts: Vec<String> = found
            .iter()
            .map(|f| f.verdict.as_str().to_owned())
            .collect();
        let whys: Vec<Option<String>> = found
            .iter()
            .map(|f| f.verdict.why().map(str::to_owned))
            .collect();
        let requested: Vec<bool> = found
            .iter()
            .map(|f| f.verdict == FindingVerdict::RedeliveryRequested)
            .collect();
        sqlx::query!(
            r#"WITH found AS (
                   INSERT INTO reconcile_findings AS f
                       (source, idem_key, event_type, first_run_id, last_run_id, verdict,
                        missing_why, redelivery_requests, last_requested_at)
                   SELECT $1, k, t, $2, $2, v, w, CASE WHEN r THEN 1 ELSE 0 END,
                          CASE WHEN r THEN now() END
                   FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bool[])
                        AS u(k, t, v, w, r)
                   ON CONFLICT (source, idem_key) DO UPDATE SET
                       last_run_id = EXCLUDED.last_run_id,
                       last_found_at = now(),
                       verdict = CASE WHEN EXCLUDED.missing_why IN ('dry_run', 'not_tried', 'waiting')
                                      THEN f.verdict ELSE EXCLUDED.verdict END,
                       missing_why = CASE WHEN EXCLUDED.missing_why IN ('dry_run', 'not_tried', 'waiting')
                                          THEN f.missing_why ELSE EXCLUDED.missing_why END,
                       event_type = coalesce(EXCLUDED.event_type, f.event_type),
                       redelivery_requests = f.redelivery_requests + EXCLUDED.redelivery_requests,
                       last_requested_at = coalesce(EXCLUDED.last_requested_at, f.last_requested_at)
                   RETURNING (xmax = 0) AS first
               )
               INSERT INTO reconcile_totals (source, missed)
               SELECT $1, count(*) FILTER (WHERE first) FROM found
               ON CONFLICT (source) DO UPDATE SET missed = reconcile_totals.missed + EXCLUDED.missed"#,
            self.source.slug,
            self.id,
            &keys,
            &types as &[Option<String>],
            &verdicts,
            &whys as &[Option<String>],
            &requested
        )
        .execute(&self.services.pool)
        .await
        .map_err(|e| format!("could not record the page's findings: {e}"))?;
        Ok(())
    }
}

/// A provider's successful answer.
struct Answer {
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

/// A request that failed for good: the provider's status if it answered.
struct Failed {
    status: Option<u16>,
    message: String,
}

impl Failed {
    fn run(message: String) -> Self {
        Self {
            status: None,
            message,
        }
    }
}

/// A key the provider had and replaysafe had not, and what the run did.
struct Finding {
    key: String,
    event_type: Option<String>,
    verdict: FindingVerdict,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FindingVerdict {
    Recovered,
    RedeliveryRequested,
    Missing(MissingWhy),
}

/// Why a key the provider had is still missing after a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MissingWhy {
    /// A dry run found it: a real run would act on it.
    DryRun,
    /// The provider cannot send it again (too old, gone).
    Refused,
    /// Asked for as often as a key is.
    GivenUp,
    /// The run stopped before it acted on it.
    NotTried,
    /// The listed event could not be keyed.
    Unkeyed,
    /// Asked for lately: the provider's redelivery may still come.
    Waiting,
}

impl FindingVerdict {
    fn as_str(self) -> &'static str {
        match self {
            Self::Recovered => "recovered",
            Self::RedeliveryRequested => "redelivery_requested",
            Self::Missing(_) => "missing",
        }
    }

    fn why(self) -> Option<&'static str> {
        match self {
            Self::Missing(why) => Some(match why {
                MissingWhy::DryRun => "dry_run",
                MissingWhy::Refused => "refused",
                MissingWhy::GivenUp => "given_up",
                MissingWhy::NotTried => "not_tried",
                MissingWhy::Unkeyed => "unkeyed",
                MissingWhy::Waiting => "waiting",
            }),
            _ => None,
        }
    }
}

/// How long a refusal asks to be waited out: `Retry-After` (seconds), or a
/// rate limit's reset time (GitHub: 403 or 429 with
/// `x-ratelimit-remaining: 0` and `x-ratelimit-reset` in Unix seconds).
fn asked_wait(headers: &reqwest::header::HeaderMap, status: u16) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(after) = header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(after));
    }
    if (status == 403 || status == 429) && header("x-ratelimit-remaining") == Some("0") {
        let reset = header("x-ratelimit-reset").and_then(|v| v.parse::<i64>().ok())?;
        let secs = reset.saturating_sub(Utc::now().timestamp()).max(0) as u64;
        return Some(Duration::from_secs(secs + 1));
    }
    None
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

/// A source's latest findings, newest first, each with the event it became
/// once claimed.
pub async fn findings(
    pool: &PgPool,
    source: &str,
    limit: i64,
) -> Result<Vec<ReconcileFinding>, sqlx::Error> {
    sqlx::query_as!(
        ReconcileFinding,
        r#"SELECT f.idem_key, f.event_type, f.verdict, f.missing_why,
                  f.found_at AS "found_at: Time", f.last_found_at AS "last_found_at: Time",
                  f.first_run_id, f.redelivery_requests, e.id AS "event_id?",
                  e.state AS "state?: State"
           FROM reconcile_findings f
           LEFT JOIN event_summaries e ON e.source = f.source AND e.idem_key = f.idem_key
           WHERE f.source = $1
           ORDER BY f.found_at DESC, f.idem_key
           LIMIT $2"#,
        source,
        limit
    )
    .fetch_all(pool)
    .await
}

/// Keys found missing for `source` since it was first reconciled.
pub async fn missed_total(pool: &PgPool, source: &str) -> Result<i64, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        "SELECT missed FROM reconcile_totals WHERE source = $1",
        source
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or(0))
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

/// Sets each reconciled source's metrics from the database (every process
/// reports the same): `replaysafe_reconcile_missed_total`, at 0 from the
/// start, and the last finished run's time.
pub async fn set_metrics(services: &Services) -> Result<(), sqlx::Error> {
    let sources: Vec<String> = services
        .config
        .sources
        .iter()
        .filter(|s| s.reconcile.is_some())
        .map(|s| s.slug.clone())
        .collect();
    if sources.is_empty() {
        return Ok(());
    }
    let rows = sqlx::query!(
        r#"SELECT s.source AS "source!", coalesce(t.missed, 0) AS "missed!",
                  extract(epoch FROM (SELECT max(r.finished_at) FROM reconcile_runs r
                                      WHERE r.source = s.source))::float8 AS last_run
           FROM unnest($1::text[]) AS s(source)
           LEFT JOIN reconcile_totals t ON t.source = s.source"#,
        &sources
    )
    .fetch_all(&services.pool)
    .await?;
    for r in rows {
        metrics::counter!("replaysafe_reconcile_missed_total", "source" => r.source.clone())
            .absolute(r.missed as u64);
        if let Some(at) = r.last_run {
            metrics::gauge!("replaysafe_reconcile_last_run_timestamp_seconds", "source" => r.source)
                .set(at);
        }
    }
    Ok(())
}
