//! Per-minute figures (`minute_stats`) folded in from new deliveries and
//! finished attempts, so the dashboard reads a few thousand small rows
//! instead of scanning history. Any number of processes may run this: the
//! progress row is locked for the fold, so each row is counted once.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub const INTERVAL: Duration = Duration::from_secs(2);
/// A row is folded in only once its id was seen this long ago, so that a
/// statement that drew a lower id has committed by then.
pub const SETTLE: Duration = Duration::from_secs(2);

/// Upper bounds (milliseconds) of the latency histogram buckets; one more
/// bucket holds everything above the last bound. Shared with the UI.
pub const LATENCY_BOUNDS_MS: &[f64] = app::api::LATENCY_BOUNDS_MS;

fn bucket_count() -> i32 {
    LATENCY_BOUNDS_MS.len() as i32 + 1
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    pub deliveries: u64,
    pub attempts: u64,
}

/// Folds in what has settled since the last call.
pub async fn fold(pool: &PgPool) -> Result<Folded, sqlx::Error> {
    Ok(Folded {
        deliveries: fold_deliveries(pool, SETTLE).await?,
        attempts: fold_attempts(pool, SETTLE).await?,
    })
}

/// Folds in everything at once (after `seed`, or in tests): the settle time
/// is waived because nothing else is writing.
pub async fn fold_all(pool: &PgPool) -> Result<Folded, sqlx::Error> {
    let mut total = Folded::default();
    // Two rounds: the first notes the highest ids, the second folds up to them.
    for _ in 0..2 {
        total.deliveries += fold_deliveries(pool, Duration::ZERO).await?;
        total.attempts += fold_attempts(pool, Duration::ZERO).await?;
    }
    Ok(total)
}

type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

/// Locks a table's progress row; None until its pending ids have settled.
async fn lock_progress(
    tx: &mut Tx,
    table: &str,
    settle: Duration,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let (last_id, pending_id, ripe): (i64, i64, bool) = sqlx::query_as(
        "SELECT last_id, pending_id, pending_at <= now() - make_interval(secs => $2)
         FROM rollup_progress WHERE name = $1 FOR UPDATE",
    )
    .bind(table)
    .bind(settle.as_secs_f64())
    .fetch_one(&mut **tx)
    .await?;
    Ok(ripe.then_some((last_id, pending_id)))
}

/// Records that ids up to `folded` are in, and notes the highest id now
/// present to fold in once it has settled. `table` is one of two constants.
async fn advance(tx: &mut Tx, table: &'static str, folded: i64) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "UPDATE rollup_progress SET last_id = greatest(last_id, $1),
             pending_id = greatest($1, (SELECT coalesce(max(id), 0) FROM {table})),
             pending_at = now()
         WHERE name = $2"
    ))
    .bind(folded)
    .bind(table)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn fold_deliveries(pool: &PgPool, settle: Duration) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let Some((last_id, pending_id)) = lock_progress(&mut tx, "deliveries", settle).await? else {
        return Ok(0);
    };
    let folded = if pending_id > last_id {
        sqlx::query(
            "INSERT INTO minute_stats AS m (source, minute, deliveries, claimed, completed,
                 in_progress, dead, rejected, bad_signature, redeliveries, ack_hist,
                 first_delivery_id, last_delivery_id, e2e_hist)
             SELECT source, minute, sum(n), sum(claimed), sum(completed), sum(in_progress),
                    sum(dead), sum(rejected), sum(bad_signature), sum(redeliveries),
                    histogram_of(array_agg(bucket), array_agg(n), $4),
                    min(lo), max(hi), array_fill(0, ARRAY[$4])
             FROM (SELECT source, date_trunc('minute', received_at) AS minute,
                          width_bucket(coalesce(ack_micros, 0) / 1000.0, $3::float8[]) + 1 AS bucket,
                          count(*) AS n,
                          count(*) FILTER (WHERE outcome = 'claimed') AS claimed,
                          count(*) FILTER (WHERE outcome = 'completed') AS completed,
                          count(*) FILTER (WHERE outcome = 'in_progress') AS in_progress,
                          count(*) FILTER (WHERE outcome = 'dead') AS dead,
                          count(*) FILTER (WHERE outcome = 'rejected') AS rejected,
                          count(*) FILTER (WHERE outcome = 'rejected' AND http_status = 401) AS bad_signature,
                          count(*) FILTER (WHERE redelivery_of IS NOT NULL) AS redeliveries,
                          min(id) AS lo, max(id) AS hi
                   FROM deliveries WHERE id > $1 AND id <= $2
                   GROUP BY 1, 2, 3) g
             GROUP BY source, minute
             ON CONFLICT (source, minute) DO UPDATE SET
                 deliveries = m.deliveries + EXCLUDED.deliveries,
                 claimed = m.claimed + EXCLUDED.claimed,
                 completed = m.completed + EXCLUDED.completed,
                 in_progress = m.in_progress + EXCLUDED.in_progress,
                 dead = m.dead + EXCLUDED.dead,
                 rejected = m.rejected + EXCLUDED.rejected,
                 bad_signature = m.bad_signature + EXCLUDED.bad_signature,
                 redeliveries = m.redeliveries + EXCLUDED.redeliveries,
                 ack_hist = histogram_add(m.ack_hist, EXCLUDED.ack_hist),
                 first_delivery_id = least(m.first_delivery_id, EXCLUDED.first_delivery_id),
                 last_delivery_id = greatest(m.last_delivery_id, EXCLUDED.last_delivery_id)",
        )
        .bind(last_id)
        .bind(pending_id)
        .bind(LATENCY_BOUNDS_MS)
        .bind(bucket_count())
        .execute(&mut *tx)
        .await?;
        (pending_id - last_id) as u64
    } else {
        0
    };
    advance(&mut tx, "deliveries", pending_id).await?;
    tx.commit().await?;
    Ok(folded)
}

/// Attempts are folded in once finished; the fold stops below the oldest
/// attempt still running.
async fn fold_attempts(pool: &PgPool, settle: Duration) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let Some((last_id, pending_id)) = lock_progress(&mut tx, "attempts", settle).await? else {
        return Ok(0);
    };
    let open: Option<i64> =
        sqlx::query_scalar("SELECT min(id) FROM attempts WHERE finished_at IS NULL")
            .fetch_one(&mut *tx)
            .await?;
    let upto = open.map_or(pending_id, |open| pending_id.min(open - 1));
    let folded = if upto > last_id {
        sqlx::query(
            "INSERT INTO minute_stats AS m (source, minute, attempts, attempts_failed,
                 events_completed, events_dead, e2e_hist, ack_hist)
             SELECT source, minute, sum(n), sum(failed), sum(completed), sum(dead),
                    histogram_of(array_agg(bucket) FILTER (WHERE completed > 0),
                                 array_agg(completed) FILTER (WHERE completed > 0), $4),
                    array_fill(0, ARRAY[$4])
             FROM (SELECT e.source, date_trunc('minute', a.finished_at) AS minute,
                          width_bucket(extract(epoch FROM a.finished_at - e.first_seen_at) * 1000,
                                       $3::float8[]) + 1 AS bucket,
                          count(*) AS n,
                          count(*) FILTER (WHERE a.status IS NULL OR a.status NOT BETWEEN 200 AND 299) AS failed,
                          count(*) FILTER (WHERE a.result = 'completed'
                                           OR (a.result IS NULL AND a.status BETWEEN 200 AND 299)) AS completed,
                          count(*) FILTER (WHERE a.result = 'dead') AS dead
                   FROM attempts a JOIN events e ON e.id = a.event_id
                   WHERE a.id > $1 AND a.id <= $2
                   GROUP BY 1, 2, 3) g
             GROUP BY source, minute
             ON CONFLICT (source, minute) DO UPDATE SET
                 attempts = m.attempts + EXCLUDED.attempts,
                 attempts_failed = m.attempts_failed + EXCLUDED.attempts_failed,
                 events_completed = m.events_completed + EXCLUDED.events_completed,
                 events_dead = m.events_dead + EXCLUDED.events_dead,
                 e2e_hist = histogram_add(m.e2e_hist, EXCLUDED.e2e_hist)",
        )
        .bind(last_id)
        .bind(upto)
        .bind(LATENCY_BOUNDS_MS)
        .bind(bucket_count())
        .execute(&mut *tx)
        .await?;
        (upto - last_id) as u64
    } else {
        0
    };
    advance(&mut tx, "attempts", upto.max(last_id)).await?;
    tx.commit().await?;
    Ok(folded)
}

/// Folds every `INTERVAL` until shutdown; errors are logged and retried.
pub async fn run(pool: PgPool, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
        if let Err(e) = fold(&pool).await {
            tracing::warn!(error = %e, "rollup: could not fold new rows; retrying");
        }
    }
}
