//! The admin's forced re-execution and retention's pruning of settled keys.

use sqlx::PgPool;

use super::State;

/// What a force did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forced {
    /// Queued again for the workers, forwarding this delivery's payload to
    /// these destinations (sorted).
    Queued {
        delivery_id: i64,
        destinations: Vec<String>,
    },
    /// Only a completed dispatch is forced; the event's (or the chosen
    /// destination's) are in this state.
    NotCompleted(State),
    /// No destination wants the event (every dispatch is `filtered`).
    Unwanted,
    /// No delivery of the event still holds its payload (retention pruned
    /// them): there is nothing to forward.
    NoPayload,
    NotFound,
}

/// An admin runs a completed event once more: its completed dispatches (or
/// only `destination`'s) are queued for the workers, forwarding the first
/// delivery's payload, or the newest copy still stored when retention
/// pruned that (a copy posted under the event's own key: a replay under
/// another key carries headers its sender chose). Once per completion:
/// concurrent forces serialise on the event's row, and the second finds
/// its dispatches queued. Never while retention retires old partitions
/// (`db::history`): the copy it picks could be in one about to be dropped.
pub async fn force(
    pool: &PgPool,
    event_id: i64,
    destination: Option<&str>,
    by: Option<i64>,
    reason: &str,
) -> Result<Forced, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock_shared(hashtext('replaysafe history retirement'))")
        .execute(&mut *tx)
        .await?;
    // Settled dispatches change only under their event's row lock (see
    // `events::revive`).
    let payload: Option<Option<i64>> = sqlx::query_scalar!(
        "SELECT (SELECT d.id FROM deliveries d
                 WHERE d.event_id = e.id AND d.body IS NOT NULL AND d.idem_key = e.idem_key
                 ORDER BY d.id = e.first_delivery_id DESC, d.id DESC
                 LIMIT 1) AS payload
         FROM events e WHERE e.id = $1
         FOR NO KEY UPDATE",
        event_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(payload) = payload else {
        return Ok(Forced::NotFound);
    };
    let forced: Vec<String> = match payload {
        None => Vec::new(),
        Some(delivery_id) => {
            let mut forced = sqlx::query_scalar!(
                "UPDATE dispatches SET state = 'queued', forwarder = 'workers',
                     state_changed_at = now(), next_attempt_at = now(), attempt_count = 0,
                     completed_at = NULL, last_error = NULL,
                     forced_by = $2, forced_at = now(), forced_reason = $3
                 WHERE event_id = $1 AND state = 'completed'
                   AND ($4::text IS NULL OR destination = $4)
                 RETURNING destination",
                event_id,
                by,
                reason,
                destination
            )
            .fetch_all(&mut *tx)
            .await?;
            if !forced.is_empty() {
                sqlx::query!(
                    "UPDATE events SET first_delivery_id = $2 WHERE id = $1",
                    event_id,
                    delivery_id
                )
                .execute(&mut *tx)
                .await?;
            }
            forced.sort();
            forced
        }
    };
    let found = sqlx::query!(
        r#"SELECT count(*) AS "dispatches!",
                  count(*) FILTER (WHERE state = 'completed') AS "completed!",
                  CASE WHEN count(*) FILTER (WHERE state <> 'filtered') > 0
                       THEN event_state(array_agg(state) FILTER (WHERE state <> 'filtered'))
                  END AS "state: State"
           FROM dispatches
           WHERE event_id = $1 AND ($2::text IS NULL OR destination = $2)"#,
        event_id,
        destination
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    if let (Some(delivery_id), false) = (payload, forced.is_empty()) {
        return Ok(Forced::Queued {
            delivery_id,
            destinations: forced,
        });
    }
    Ok(if found.dispatches == 0 {
        Forced::NotFound
    } else if found.completed > 0 {
        Forced::NoPayload
    } else if found.state.is_none() {
        Forced::Unwanted
    } else {
        Forced::NotCompleted(found.state.unwrap_or(State::Queued))
    })
}

/// Retention forgets up to `limit` settled keys last seen more than
/// `dedup_ttl_days` ago (every dispatch completed, dead or filtered); an
/// event in flight keeps its claim. Settled dispatches change only under
/// their event's row lock (a revive, a force): the candidates are locked
/// first (skipping any an operator holds), then checked again in a fresh
/// snapshot, which sees what such an action committed before the lock.
/// Returns how many went.
pub async fn prune(pool: &PgPool, dedup_ttl_days: u32, limit: i64) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let candidates: Vec<i64> = sqlx::query_scalar!(
        "SELECT e.id FROM events e
         WHERE e.last_seen_at < now() - make_interval(days => $1)
           AND NOT EXISTS (SELECT 1 FROM dispatches p
                           WHERE p.event_id = e.id
                             AND p.state NOT IN ('completed', 'dead', 'filtered'))
         ORDER BY e.id
         LIMIT $2
         FOR UPDATE SKIP LOCKED",
        dedup_ttl_days as i32,
        limit
    )
    .fetch_all(&mut *tx)
    .await?;
    if candidates.is_empty() {
        return Ok(0);
    }
    let gone: i64 = sqlx::query_scalar!(
        r#"WITH gone AS (
             DELETE FROM events e
             WHERE e.id = ANY ($1)
               AND NOT EXISTS (SELECT 1 FROM dispatches p
                               WHERE p.event_id = e.id
                                 AND p.state NOT IN ('completed', 'dead', 'filtered'))
             RETURNING id
         ),
         forgotten AS (
             DELETE FROM dispatches WHERE event_id IN (SELECT id FROM gone)
         )
         SELECT count(*) AS "count!" FROM gone"#,
        &candidates
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(gone as u64)
}
