//! Retention (spec section 8): deliveries, their payloads and attempts go
//! after `retention_days`, idempotency keys after `dedup_ttl_days`; sign-in
//! attempts that did not succeed (strangers' guesses), finished bulk
//! re-delivery jobs and resolved incidents with the deliveries, the rest of the audit log after
//! `audit_retention_days`. Deliveries and attempts retire a day at a time:
//! a day's partition is dropped once the whole day is past retention
//! (`db::history`), so a row stays up to a day longer than the setting.
//! The legacy partitions of an upgraded database and the other tables are
//! deleted in small batches, each its own short statement, so no long lock
//! is held; old rows are found along the primary key (ids grow with time),
//! so no time index slows every claim down.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub const BATCH: i64 = 1000;
pub const INTERVAL: Duration = Duration::from_secs(600);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Deliveries deleted row by row, from the legacy partition (those in
    /// dropped partitions are not counted).
    pub deliveries: u64,
    /// Attempts deleted row by row, from the legacy partition.
    pub attempts: u64,
    pub events: u64,
    pub audit: u64,
    pub bulk_jobs: u64,
    pub incidents: u64,
    /// Partitions made ahead, dropped, and kept past retention.
    pub partitions_made: i32,
    pub partitions: crate::db::history::Retired,
}

/// Prunes everything due, batch by batch.
pub async fn prune(
    pool: &PgPool,
    retention_days: u32,
    dedup_ttl_days: u32,
    audit_retention_days: u32,
) -> Result<Pruned, sqlx::Error> {
    // Partitions failing to be made or retired must not hold the rest up.
    let mut pruned = Pruned {
        partitions_made: crate::db::history::ensure(pool)
            .await
            .inspect_err(
                |e| tracing::warn!(error = %e, "making partitions ahead failed; will retry"),
            )
            .unwrap_or_default(),
        partitions: crate::db::history::retire_expired(pool, retention_days)
            .await
            .inspect_err(
                |e| tracing::warn!(error = %e, "retiring old partitions failed; will retry"),
            )
            .unwrap_or_default(),
        ..Default::default()
    };
    // Row by row only in the legacy partitions (an upgraded database's rows
    // from before its first daily partition), until their whole range is
    // past retention and they are dropped like the others.
    let legacy = sqlx::query!(
        r#"SELECT to_regclass('deliveries_legacy') IS NOT NULL AS "deliveries!",
                  to_regclass('attempts_legacy') IS NOT NULL AS "attempts!""#
    )
    .fetch_one(pool)
    .await?;
    // Nothing is due while the oldest row is young: no scan at all then.
    let oldest_delivery_due = legacy.deliveries
        && sqlx::query_scalar!(
            r#"SELECT received_at < now() - make_interval(days => $1) AS "due!"
               FROM deliveries_legacy ORDER BY id LIMIT 1"#,
            retention_days as i32
        )
        .fetch_optional(pool)
        .await?
            == Some(true);
    if oldest_delivery_due {
        // A payload whose event still waits to be forwarded is kept: losing it would lose the event.
        pruned.deliveries = in_batches(BATCH, || async {
            let deleted = sqlx::query!(
                "DELETE FROM deliveries_legacy WHERE id IN (
                     SELECT d.id FROM deliveries_legacy d
                     WHERE d.received_at < now() - make_interval(days => $1)
                       AND NOT EXISTS (SELECT 1 FROM events e JOIN dispatches p ON p.event_id = e.id
                                       WHERE e.id = d.event_id AND e.first_delivery_id = d.id
                                         AND p.state IN ('queued', 'processing', 'retrying'))
                     ORDER BY d.id
                     LIMIT $2)",
                retention_days as i32,
                BATCH
            )
            .execute(pool)
            .await?;
            Ok(deleted.rows_affected())
        })
        .await?;
    }
    if legacy.attempts {
        pruned.attempts = in_batches(BATCH, || async {
            let deleted = sqlx::query!(
                "DELETE FROM attempts_legacy WHERE id IN (
                     SELECT id FROM attempts_legacy
                     WHERE started_at < now() - make_interval(days => $1)
                     ORDER BY id
                     LIMIT $2)",
                retention_days as i32,
                BATCH
            )
            .execute(pool)
            .await?;
            Ok(deleted.rows_affected())
        })
        .await?;
    }
    let oldest_event_due: Option<bool> = sqlx::query_scalar!(
        r#"SELECT last_seen_at < now() - make_interval(days => $1) AS "due!" FROM events ORDER BY id LIMIT 1"#,
        dedup_ttl_days as i32
    )
    .fetch_optional(pool)
    .await?;
    if oldest_event_due == Some(true) {
        pruned.events = in_batches(BATCH, || async {
            crate::events::prune(pool, dedup_ttl_days, BATCH).await
        })
        .await?;
    }
    while crate::events::prune_guard(pool, dedup_ttl_days, BATCH).await? == BATCH as u64 {}
    sqlx::query!(
        "DELETE FROM unrecorded_rejections WHERE minute < now() - make_interval(days => $1)",
        retention_days as i32
    )
    .execute(pool)
    .await?;
    // Resolved alerts go with the deliveries (their notifications with
    // them), and so do the sent or abandoned notifications of older ones.
    sqlx::query!(
        "DELETE FROM alerts WHERE state = 'resolved' AND resolved_at < now() - make_interval(days => $1)",
        retention_days as i32
    )
    .execute(pool)
    .await?;
    sqlx::query!(
        "DELETE FROM alert_notifications
         WHERE coalesce(sent_at, failed_at) < now() - make_interval(days => $1)",
        retention_days as i32
    )
    .execute(pool)
    .await?;
    // Finished bulk jobs go with the deliveries they re-delivered; a few at
    // a time, as each takes its per-event outcomes along.
    pruned.bulk_jobs = in_batches(10, || async {
        let deleted = sqlx::query!(
            "DELETE FROM bulk_jobs WHERE id IN (
                 SELECT id FROM bulk_jobs
                 WHERE finished_at < now() - make_interval(days => $1)
                 ORDER BY id LIMIT 10)",
            retention_days as i32
        )
        .execute(pool)
        .await?;
        Ok(deleted.rows_affected())
    })
    .await?;
    // Reconciliation runs go with the deliveries they recovered.
    sqlx::query!(
        "DELETE FROM reconcile_runs
         WHERE finished_at < now() - make_interval(days => $1)",
        retention_days as i32
    )
    .execute(pool)
    .await?;
    // Findings no run has found since go with them (one still found stays,
    // so it is never counted missed twice); the missed count stays.
    sqlx::query!(
        "DELETE FROM reconcile_findings
         WHERE last_found_at < now() - make_interval(days => $1)",
        retention_days as i32
    )
    .execute(pool)
    .await?;
    // Incidents resolved before the retention window, with the events they held.
    pruned.incidents = in_batches(BATCH, || {
        crate::incidents::prune(pool, retention_days, BATCH)
    })
    .await?;
    // The sign-in throttle's counts past their window, of addresses not
    // tried since (one statement: a window's attempts are few).
    crate::accounts::prune_sign_in_attempts(pool).await?;
    pruned.audit = in_batches(BATCH, || async {
        let deleted = sqlx::query!(
            "DELETE FROM audit_log WHERE id IN (
                 SELECT id FROM audit_log
                 WHERE at < now() - make_interval(days => $1)
                    OR (action = 'login' AND outcome <> 'succeeded'
                        AND at < now() - make_interval(days => $2))
                 ORDER BY at
                 LIMIT $3)",
            audit_retention_days as i32,
            retention_days as i32,
            BATCH
        )
        .execute(pool)
        .await?;
        Ok(deleted.rows_affected())
    })
    .await?;
    Ok(pruned)
}

/// Runs `delete` (one statement, at most `size` rows) until a batch comes
/// back short; how many rows went in all.
async fn in_batches<F>(size: i64, mut delete: impl FnMut() -> F) -> Result<u64, sqlx::Error>
where
    F: std::future::Future<Output = Result<u64, sqlx::Error>>,
{
    let mut total = 0;
    loop {
        let n = delete().await?;
        total += n;
        if n < size as u64 {
            return Ok(total);
        }
    }
}

/// Prunes a minute after start (once migrations have run), then every
/// `INTERVAL`, until shutdown.
pub async fn run(
    pool: PgPool,
    retention_days: u32,
    dedup_ttl_days: u32,
    audit_retention_days: u32,
    shutdown: CancellationToken,
) {
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = tokio::time::sleep(Duration::from_secs(60)) => {}
    }
    loop {
        match prune(&pool, retention_days, dedup_ttl_days, audit_retention_days).await {
            Ok(p) if p != Pruned::default() => {
                for (partition, events) in &p.partitions.kept {
                    tracing::info!(
                        partition,
                        events,
                        "partition past retention kept: events waiting to be forwarded need its payloads"
                    );
                }
                tracing::info!(
                    deliveries = p.deliveries,
                    attempts = p.attempts,
                    events = p.events,
                    audit = p.audit,
                    partitions_dropped = ?p.partitions.dropped,
                    partitions_made = p.partitions_made,
                    "retention pruned"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention pruning failed; will retry"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
    }
}
