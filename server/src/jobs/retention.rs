//! Retention (spec section 8): deliveries and their payloads go after
//! `retention_days`, idempotency keys after `dedup_ttl_days`; sign-in
//! attempts that did not succeed (strangers' guesses) and finished bulk
//! re-delivery jobs with the deliveries,
//! the rest of the audit log after `audit_retention_days`. Deletes run in
//! small batches, each its own short statement, so no long lock is held.
//! Old rows are found along the primary key (ids grow with time), so no time
//! index slows every claim down.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub const BATCH: i64 = 1000;
pub const INTERVAL: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub deliveries: u64,
    pub events: u64,
    pub audit: u64,
    pub bulk_jobs: u64,
}

/// Prunes everything due, batch by batch.
pub async fn prune(
    pool: &PgPool,
    retention_days: u32,
    dedup_ttl_days: u32,
    audit_retention_days: u32,
) -> Result<Pruned, sqlx::Error> {
    let mut pruned = Pruned::default();
    // Nothing is due while the oldest row is young: no scan at all then.
    let oldest_delivery_due: Option<bool> = sqlx::query_scalar!(
r#"SELECT received_at < now() - make_interval(days => $1) AS "due!" FROM deliveries ORDER BY id LIMIT 1"#,
retention_days as i32
)
    .fetch_optional(pool)
    .await?;
    while oldest_delivery_due == Some(true) {
        // A payload whose event still waits to be forwarded is kept: losing it would lose the event.
        let n = sqlx::query!(
            "DELETE FROM deliveries WHERE id IN (
                 SELECT d.id FROM deliveries d
                 WHERE d.received_at < now() - make_interval(days => $1)
                   AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id
                                   AND e.first_delivery_id = d.id
                                   AND e.state IN ('queued', 'processing', 'retrying'))
                 ORDER BY d.id
                 LIMIT $2)",
            retention_days as i32,
            BATCH
        )
        .execute(pool)
        .await?
        .rows_affected();
        pruned.deliveries += n;
        if n < BATCH as u64 {
            break;
        }
    }
    let oldest_event_due: Option<bool> = sqlx::query_scalar!(
        r#"SELECT last_seen_at < now() - make_interval(days => $1) AS "due!" FROM events ORDER BY id LIMIT 1"#,
        dedup_ttl_days as i32
    )
    .fetch_optional(pool)
    .await?;
    while oldest_event_due == Some(true) {
        let n = crate::events::prune(pool, dedup_ttl_days, BATCH).await?;
        pruned.events += n;
        if n < BATCH as u64 {
            break;
        }
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
    loop {
        let n = sqlx::query!(
            "DELETE FROM bulk_jobs WHERE id IN (
                 SELECT id FROM bulk_jobs
                 WHERE finished_at < now() - make_interval(days => $1)
                 ORDER BY id LIMIT 10)",
            retention_days as i32
        )
        .execute(pool)
        .await?
        .rows_affected();
        pruned.bulk_jobs += n;
        if n < 10 {
            break;
        }
    }
    loop {
        let n = sqlx::query!(
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
        .await?
        .rows_affected();
        pruned.audit += n;
        if n < BATCH as u64 {
            break;
        }
    }
    Ok(pruned)
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
                tracing::info!(
                    deliveries = p.deliveries,
                    events = p.events,
                    audit = p.audit,
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
