//! The admin's forced re-execution, the operator's dead-letter by hand and
//! retention's pruning of settled keys.

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
                   AND d.received_at >= event_history_starts(e.first_seen_at)
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
    let found = lanes(&mut tx, event_id, destination).await?;
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

/// What a dead-letter by hand did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeadLettered {
    /// These dispatches (sorted) went from waiting to dead.
    Dead(Vec<String>),
    /// An attempt is in flight: its holder decides, and the operator may
    /// try again once it ended.
    InFlight,
    /// Nothing waits: the event's (or the destination's) dispatches are in
    /// this state.
    NotWaiting(State),
    NotFound,
}

/// An operator gives up on a waiting event (its queued or retrying
/// dispatches, or only `destination`'s): they go dead with the reason, so
/// that an ordered destination's key it held goes on. A dispatch in flight
/// is left to its holder; a dead one may be re-delivered later, as any.
pub async fn dead_letter(
    pool: &PgPool,
    event_id: i64,
    destination: Option<&str>,
    reason: &str,
) -> Result<DeadLettered, sqlx::Error> {
    let mut tx = pool.begin().await?;
    // Under the event's row lock, as a revive and a force: their moves and
    // this one serialise.
    let found = sqlx::query_scalar!(
        "SELECT id FROM events WHERE id = $1 FOR NO KEY UPDATE",
        event_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    if found.is_none() {
        return Ok(DeadLettered::NotFound);
    }
    let mut dead = sqlx::query_scalar!(
        "UPDATE dispatches SET state = 'dead', state_changed_at = now(),
             dead_reason = $3, last_error = $3, lease_owner = NULL, lease_expires_at = NULL
         WHERE event_id = $1 AND state IN ('queued', 'retrying')
           AND ($2::text IS NULL OR destination = $2)
         RETURNING destination",
        event_id,
        destination,
        reason
    )
    .fetch_all(&mut *tx)
    .await?;
    let left = lanes(&mut tx, event_id, destination).await?;
    tx.commit().await?;
    Ok(if !dead.is_empty() {
        dead.sort();
        DeadLettered::Dead(dead)
    } else if left.dispatches == 0 {
        DeadLettered::NotFound
    } else if left.in_flight > 0 {
        DeadLettered::InFlight
    } else {
        DeadLettered::NotWaiting(left.state.unwrap_or(State::Filtered))
    })
}

/// An event's dispatches (or only `destination`'s) as an action left them.
struct Lanes {
    dispatches: i64,
    completed: i64,
    in_flight: i64,
    /// The event's state over its dispatches that are not filtered; None
    /// when every one is.
    state: Option<State>,
}

async fn lanes(
    tx: &mut sqlx::PgConnection,
    event_id: i64,
    destination: Option<&str>,
) -> Result<Lanes, sqlx::Error> {
    sqlx::query_as!(
        Lanes,
        r#"SELECT count(*) AS "dispatches!",
                  count(*) FILTER (WHERE state = 'completed') AS "completed!",
                  count(*) FILTER (WHERE state = 'processing') AS "in_flight!",
                  CASE WHEN count(*) FILTER (WHERE state <> 'filtered') > 0
                       THEN event_state(array_agg(state) FILTER (WHERE state <> 'filtered'))
                  END AS "state: State"
           FROM dispatches
           WHERE event_id = $1 AND ($2::text IS NULL OR destination = $2)"#,
        event_id,
        destination
    )
    .fetch_one(tx)
    .await
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
