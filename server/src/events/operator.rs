//! The admin's forced re-execution and retention's pruning of settled keys.

use sqlx::PgPool;

use super::State;

/// What a force did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forced {
    /// Queued again for the workers, forwarding this delivery's payload.
    Queued {
        delivery_id: i64,
    },
    /// Only a completed event is forced; this one is in another state.
    NotCompleted(State),
    /// No delivery of the event still holds its payload (retention pruned
    /// them): there is nothing to forward.
    NoPayload,
    NotFound,
}

/// An admin runs a completed event once more: it is queued for the workers,
/// forwarding the first delivery's payload, or the newest copy still stored
/// when retention pruned that (a copy posted under the event's own key: a
/// replay under another key carries headers its sender chose). Once per completion: concurrent forces
/// serialise on the row, and the second finds it queued. Never while
/// retention retires old partitions (`db::history`): the copy it picks
/// could be in one about to be dropped.
pub async fn force(
    pool: &PgPool,
    event_id: i64,
    by: Option<i64>,
    reason: &str,
) -> Result<Forced, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock_shared(hashtext('replaysafe history retirement'))")
        .execute(&mut *tx)
        .await?;
    let forced: Option<i64> = sqlx::query_scalar!(
        "UPDATE events e SET state = 'queued', forwarder = 'workers', state_changed_at = now(),
             next_attempt_at = now(), attempt_count = 0, completed_at = NULL, last_error = NULL,
             forced_by = $2, forced_at = now(), forced_reason = $3, first_delivery_id = p.id
         FROM (SELECT d.id FROM deliveries d JOIN events o ON o.id = d.event_id
               WHERE d.event_id = $1 AND d.body IS NOT NULL AND d.idem_key = o.idem_key
               ORDER BY d.id = o.first_delivery_id DESC, d.id DESC
               LIMIT 1) p
         WHERE e.id = $1 AND e.state = 'completed'
         RETURNING p.id",
        event_id,
        by,
        reason
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    if let Some(delivery_id) = forced {
        return Ok(Forced::Queued { delivery_id });
    }
    let state: Option<String> =
        sqlx::query_scalar!("SELECT state FROM events WHERE id = $1", event_id)
            .fetch_optional(pool)
            .await?;
    Ok(match state.as_deref().and_then(State::parse) {
        None => Forced::NotFound,
        Some(State::Completed) => Forced::NoPayload,
        Some(other) => Forced::NotCompleted(other),
    })
}

/// Retention forgets up to `limit` settled keys last seen more than
/// `dedup_ttl_days` ago; an event in flight keeps its claim. Returns how many
/// went.
pub async fn prune(pool: &PgPool, dedup_ttl_days: u32, limit: i64) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM events WHERE id IN (
             SELECT id FROM events
             WHERE last_seen_at < now() - make_interval(days => $1)
               AND state IN ('completed', 'dead')
             ORDER BY id
             LIMIT $2)",
        dedup_ttl_days as i32,
        limit
    )
    .execute(pool)
    .await?
    .rows_affected())
}
