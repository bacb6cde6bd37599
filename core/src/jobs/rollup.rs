//! Per-minute figures (`minute_stats`) folded in from new deliveries and
//! finished attempts, so the dashboard reads a few thousand small rows
//! instead of scanning history; and finished attempts grouped into
//! incidents (`crate::incidents::fold`), off the claim's and the
//! recorder's path. Any number of processes may run this: the
//! progress row is locked for the fold, so each row is counted once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Folds run often and small: a fold of several seconds' rows shows in the
/// receiver's latency tail (bench/README, "Why the tuning constants are what
/// they are").
pub const INTERVAL: Duration = Duration::from_millis(250);
/// A row is folded in only once an id at least as high was seen this long
/// ago, so that a statement that drew a lower id has committed by then.
pub const SETTLE: Duration = Duration::from_secs(2);
/// How often incidents that went quiet are resolved.
const QUIET_CHECK_EVERY: Duration = Duration::from_secs(15);
/// At most this many ids per fold, so catching up after downtime is a series
/// of short statements, not one long one.
const CHUNK: i64 = 20_000;

/// Upper bounds (milliseconds) of the latency histogram buckets; one more
/// bucket holds everything above the last bound. Shared with the UI.
pub const LATENCY_BOUNDS_MS: &[f64] = replaysafe_types::LATENCY_BOUNDS_MS;

fn bucket_count() -> i32 {
    LATENCY_BOUNDS_MS.len() as i32 + 1
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    pub deliveries: u64,
    pub attempts: u64,
    pub incidents: u64,
}

/// One table's highest ids as this process saw them over the last `SETTLE`,
/// oldest first. The progress row in the database says what is folded; the
/// settle marks only say how far it is safe to go, so any process's are good.
#[derive(Debug, Default)]
struct Settling {
    seen: VecDeque<(Instant, i64)>,
    /// The highest id seen at least `settle` ago.
    ripe: i64,
    /// How far the progress row was when this process last folded.
    folded: i64,
}

impl Settling {
    fn note(&mut self, now: Instant, max_id: i64, settle: Duration) {
        if self.seen.back().is_none_or(|&(_, id)| max_id > id) {
            self.seen.push_back((now, max_id));
        }
        while let Some(&(at, id)) = self.seen.front() {
            if now.saturating_duration_since(at) < settle {
                break;
            }
            self.ripe = self.ripe.max(id);
            self.seen.pop_front();
        }
    }
}

/// Folds deliveries and finished attempts into `minute_stats`.
#[derive(Debug, Default)]
pub struct Rollup {
    deliveries: Settling,
    attempts: Settling,
    /// The attempts again, as the incidents' fold has taken them.
    incidents: Settling,
}

impl Rollup {
    /// Notes the highest ids now and folds in what has settled, at most
    /// `CHUNK` ids per table.
    pub async fn step(&mut self, pool: &PgPool, settle: Duration) -> Result<Folded, sqlx::Error> {
        let highest = sqlx::query!(
            r#"SELECT (SELECT coalesce(max(id), 0) FROM deliveries) AS "deliveries!",
                      (SELECT coalesce(max(id), 0) FROM attempts) AS "attempts!""#
        )
        .fetch_one(pool)
        .await?;
        let (deliveries, attempts) = (highest.deliveries, highest.attempts);
        let now = Instant::now();
        self.deliveries.note(now, deliveries, settle);
        self.attempts.note(now, attempts, settle);
        self.incidents.note(now, attempts, settle);
        // The oldest attempt still running bounds both folds of attempts:
        // asked once a step, and only when either has something ripe.
        let open = if self.attempts.ripe > self.attempts.folded
            || self.incidents.ripe > self.incidents.folded
        {
            sqlx::query_scalar!("SELECT min(id) FROM attempts WHERE finished_at IS NULL")
                .fetch_one(pool)
                .await?
        } else {
            None
        };
        Ok(Folded {
            deliveries: fold_deliveries(pool, &mut self.deliveries).await?,
            attempts: fold_finished(pool, Table::Attempts, &mut self.attempts, open).await?,
            incidents: fold_finished(pool, Table::Incidents, &mut self.incidents, open).await?,
        })
    }
}

/// Folds in everything at once (after `seed`, or in tests): the settle time
/// is waived because nothing else is writing.
pub async fn fold_all(pool: &PgPool) -> Result<Folded, sqlx::Error> {
    let mut rollup = Rollup::default();
    let mut total = Folded::default();
    loop {
        let step = rollup.step(pool, Duration::ZERO).await?;
        if step == Folded::default() {
            return Ok(total);
        }
        total.deliveries += step.deliveries;
        total.attempts += step.attempts;
        total.incidents += step.incidents;
    }
}

/// The tables folded into `minute_stats`, each by its own statement in `core/sql/`.
#[derive(Clone, Copy)]
enum Table {
    Deliveries,
    Attempts,
    /// Finished attempts into incidents (`crate::incidents::fold`).
    Incidents,
}

impl Table {
    /// Its row in `rollup_progress`.
    fn name(self) -> &'static str {
        match self {
            Table::Deliveries => "deliveries",
            Table::Attempts => "attempts",
            Table::Incidents => "incidents",
        }
    }
}

/// Folds `table`'s ids after its progress up to `target` (at most `CHUNK`
/// of them), under the progress row's lock so each id counts once.
async fn fold_range(
    pool: &PgPool,
    table: Table,
    target: i64,
    settling: &mut Settling,
) -> Result<u64, sqlx::Error> {
    let name = table.name();
    if target <= settling.folded {
        return Ok(0);
    }
    let mut tx = pool.begin().await?;
    let last_id: i64 = sqlx::query_scalar!(
        "SELECT last_id FROM rollup_progress WHERE name = $1 FOR UPDATE",
        name
    )
    .fetch_one(&mut *tx)
    .await?;
    let upto = target.min(last_id + CHUNK);
    let folded = if upto > last_id {
        let (bounds, buckets) = (LATENCY_BOUNDS_MS, bucket_count());
        match table {
            Table::Deliveries => {
                sqlx::query_file!("sql/fold_deliveries.sql", last_id, upto, bounds, buckets)
                    .execute(&mut *tx)
                    .await?;
            }
            Table::Attempts => {
                sqlx::query_file!("sql/fold_attempts.sql", last_id, upto, bounds, buckets)
                    .execute(&mut *tx)
                    .await?;
            }
            Table::Incidents => {
                crate::incidents::fold(&mut tx, last_id, upto).await?;
            }
        };
        sqlx::query!(
            "UPDATE rollup_progress SET last_id = $1 WHERE name = $2",
            upto,
            name
        )
        .execute(&mut *tx)
        .await?;
        (upto - last_id) as u64
    } else {
        0
    };
    tx.commit().await?;
    settling.folded = upto.max(last_id);
    Ok(folded)
}

async fn fold_deliveries(pool: &PgPool, settling: &mut Settling) -> Result<u64, sqlx::Error> {
    fold_range(pool, Table::Deliveries, settling.ripe, settling).await
}

/// Attempts are folded in once finished (into `table`: the figures, or
/// the incidents); the fold stops below `open`, the oldest attempt still
/// running (only a sync-mode attempt is written as it begins; a finished
/// attempt stays finished, so reading that before taking the lock is safe).
async fn fold_finished(
    pool: &PgPool,
    table: Table,
    settling: &mut Settling,
    open: Option<i64>,
) -> Result<u64, sqlx::Error> {
    if settling.ripe <= settling.folded {
        return Ok(0);
    }
    let target = open.map_or(settling.ripe, |open| settling.ripe.min(open - 1));
    fold_range(pool, table, target, settling).await
}

/// Folds every `INTERVAL` until shutdown; errors are logged and retried.
pub async fn run(pool: PgPool, shutdown: CancellationToken) {
    let mut rollup = Rollup::default();
    let mut quiet_checked = Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
        // Incidents are judged quiet only once their fold has caught up.
        let caught_up = match rollup.step(&pool, SETTLE).await {
            Ok(folded) => folded.incidents < CHUNK as u64,
            Err(e) => {
                tracing::warn!(error = %e, "rollup: could not fold new rows; retrying");
                false
            }
        };
        if caught_up && quiet_checked.elapsed() >= QUIET_CHECK_EVERY {
            quiet_checked = Instant::now();
            match crate::incidents::resolve_quiet(&pool, crate::incidents::QUIET).await {
                Ok(ids) if !ids.is_empty() => {
                    tracing::info!(?ids, "incidents resolved by themselves")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "incidents: could not resolve quiet ones"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_ripens_once_it_was_seen_settle_ago() {
        let settle = Duration::from_secs(2);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut s = Settling::default();
        s.note(at(0), 10, settle);
        s.note(at(250), 15, settle);
        s.note(at(500), 15, settle);
        assert_eq!(s.ripe, 0, "nothing is two seconds old yet");
        assert_eq!(s.seen.len(), 2, "an unchanged maximum adds no mark");
        s.note(at(2_000), 20, settle);
        assert_eq!(s.ripe, 10);
        s.note(at(2_300), 20, settle);
        assert_eq!(s.ripe, 15, "the newest mark that has settled wins");
        s.note(at(9_000), 20, settle);
        assert_eq!(s.ripe, 20);
        assert!(s.seen.is_empty());
    }

    #[test]
    fn without_a_settle_time_the_current_maximum_is_ripe_at_once() {
        let mut s = Settling::default();
        s.note(Instant::now(), 42, Duration::ZERO);
        assert_eq!(s.ripe, 42);
    }
}
