//! The events table as the queue: due events are leased with `FOR UPDATE SKIP
//! LOCKED`, and every attempt is recorded. No transaction or row lock outlives
//! a statement, so none is held across the outgoing HTTP call.

use std::time::Duration;

use sqlx::PgPool;

use crate::receiver::claim::StoredResponse;

/// An event leased to one worker for one attempt, with what it forwards.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Leased {
    pub event_id: i64,
    pub attempt_id: i64,
    pub source: String,
    pub idem_key: String,
    /// 1-based number of this attempt.
    pub attempt: i32,
    /// None once retention pruned the payload.
    pub body: Option<Vec<u8>>,
    pub content_type: Option<String>,
    pub headers: Option<serde_json::Value>,
    /// An admin forced this completed event to run again (spec section 6).
    pub forced: bool,
}

/// Leases up to `limit` due events: queued or retrying ones whose time has
/// come, and processing ones whose worker lost its lease. Paused sources,
/// sources without a destination, sources no longer configured and sync-mode
/// sources (their deliveries forward inside the request) are left.
/// The lease lasts the source's attempt timeout plus a margin; a takeover
/// closes the abandoned attempt.
pub async fn lease_due(
    pool: &PgPool,
    worker: &str,
    limit: i64,
) -> Result<Vec<Leased>, sqlx::Error> {
    sqlx::query_as::<_, Leased>(
        "WITH runnable AS (
             SELECT slug FROM sources
             WHERE in_config AND destination IS NOT NULL AND mode = 'ack'
               AND NOT coalesce(paused_override, config_paused)
         ),
         candidates AS (
             (SELECT id FROM events
              WHERE state IN ('queued', 'retrying') AND next_attempt_at <= now()
                AND source IN (SELECT slug FROM runnable)
              ORDER BY next_attempt_at LIMIT $2)
             UNION ALL
             (SELECT id FROM events
              WHERE state = 'processing' AND lease_expires_at < now()
                AND source IN (SELECT slug FROM runnable)
              ORDER BY lease_expires_at LIMIT $2)
         ),
         locked AS (
             SELECT id FROM events
             WHERE id IN (SELECT id FROM candidates)
               AND ((state IN ('queued', 'retrying') AND next_attempt_at <= now())
                    OR (state = 'processing' AND lease_expires_at < now()))
             LIMIT $2
             FOR UPDATE SKIP LOCKED
         ),
         leased AS (
             UPDATE events e SET
                 state = 'processing', state_changed_at = now(),
                 lease_owner = $1,
                 lease_expires_at = now() + make_interval(secs => s.attempt_timeout_secs + $3),
                 attempt_count = e.attempt_count + 1
             FROM locked, sources s
             WHERE e.id = locked.id AND s.slug = e.source
             RETURNING e.id, e.source, e.idem_key, e.attempt_count, e.first_delivery_id,
                       CASE WHEN e.forced_at IS NOT NULL AND e.completed_at IS NULL
                            THEN e.forced_by END AS forced_by,
                       e.forced_at IS NOT NULL AND e.completed_at IS NULL AS forced
         ),
         abandoned AS (
             UPDATE attempts SET finished_at = now(), error = 'worker lost its lease; taken over'
             WHERE finished_at IS NULL AND event_id IN (SELECT id FROM leased)
         ),
         attempt AS (
             INSERT INTO attempts (event_id, number, worker, forced_by)
             SELECT id, attempt_count, $1, forced_by FROM leased
             RETURNING id, event_id
         )
         SELECT l.id AS event_id, a.id AS attempt_id, l.source, l.idem_key,
                l.attempt_count AS attempt, d.body, d.content_type, d.headers, l.forced
         FROM leased l
         JOIN attempt a ON a.event_id = l.id
         LEFT JOIN deliveries d ON d.id = l.first_delivery_id",
    )
    .bind(worker)
    .bind(limit)
    .bind(LEASE_MARGIN.as_secs_f64())
    .fetch_all(pool)
    .await
}

/// A lease outlives the attempt's timeout by this much, so that only a worker
/// that died (not a slow one) loses it: takeover within timeout + 30 s.
pub const LEASE_MARGIN: Duration = Duration::from_secs(25);

/// What one attempt saw.
#[derive(Clone, Debug, Default)]
pub struct AttemptRecord {
    pub status: Option<u16>,
    pub latency_ms: i32,
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
}

/// Where the event goes after the attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    Completed,
    RetryIn(Duration),
    Dead(String),
}

impl Next {
    /// The event state it leads to, as stored in `attempts.result`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Next::Completed => "completed",
            Next::RetryIn(_) => "retrying",
            Next::Dead(_) => "dead",
        }
    }
}

/// Records the attempt and moves the event on, if this worker still holds
/// its lease (a worker that lost it must not overwrite its successor).
/// Returns whether the event moved.
pub async fn finish(
    pool: &PgPool,
    worker: &str,
    leased: &Leased,
    record: &AttemptRecord,
    next: &Next,
    sync_response: Option<&StoredResponse>,
) -> Result<bool, sqlx::Error> {
    let state = next.as_str();
    let (delay_secs, reason) = match next {
        Next::Completed => (None, None),
        Next::RetryIn(d) => (Some(d.as_secs_f64()), record.error.clone()),
        Next::Dead(reason) => (None, Some(reason.clone())),
    };
    let moved: Option<i64> = sqlx::query_scalar(
        "WITH attempt AS (
             UPDATE attempts SET finished_at = now(), status = $4, latency_ms = $5,
                 response_excerpt = $6, error = $7,
                 next_attempt_at = now() + make_interval(secs => $8), result = $9
             WHERE id = $3
         )
         UPDATE events SET
             state = $9, state_changed_at = now(),
             lease_owner = NULL, lease_expires_at = NULL,
             next_attempt_at = CASE WHEN $8 IS NULL THEN next_attempt_at
                                    ELSE now() + make_interval(secs => $8) END,
             completed_at = CASE WHEN $9 = 'completed' THEN now() END,
             last_error = $10,
             dead_reason = CASE WHEN $9 = 'dead' THEN $10 END,
             response_status = coalesce($11, response_status),
             response_content_type = CASE WHEN $11 IS NULL THEN response_content_type ELSE $12 END,
             response_body = coalesce($13, response_body)
         WHERE id = $1 AND state = 'processing' AND lease_owner = $2
         RETURNING id",
    )
    .bind(leased.event_id)
    .bind(worker)
    .bind(leased.attempt_id)
    .bind(record.status.map(|s| s as i16))
    .bind(record.latency_ms)
    .bind(record.response_excerpt.as_deref())
    .bind(record.error.as_deref())
    .bind(delay_secs)
    .bind(state)
    .bind(reason.as_deref())
    .bind(sync_response.map(|r| r.status))
    .bind(sync_response.and_then(|r| r.content_type.as_deref()))
    .bind(sync_response.map(|r| r.body.as_slice()))
    .fetch_optional(pool)
    .await?;
    Ok(moved.is_some())
}

/// `finish` for a whole leased batch in one statement: each attempt is
/// recorded, and each event moves on if this worker still holds its lease.
/// Returns how many events moved.
pub async fn finish_batch(
    pool: &PgPool,
    worker: &str,
    done: &[(Leased, AttemptRecord, Next)],
) -> Result<u64, sqlx::Error> {
    if done.is_empty() {
        return Ok(0);
    }
    let mut states = Vec::with_capacity(done.len());
    let mut delays = Vec::with_capacity(done.len());
    let mut reasons = Vec::with_capacity(done.len());
    for (_, record, next) in done {
        let (delay, reason) = match next {
            Next::Completed => (None, None),
            Next::RetryIn(d) => (Some(d.as_secs_f64()), record.error.clone()),
            Next::Dead(reason) => (None, Some(reason.clone())),
        };
        states.push(next.as_str());
        delays.push(delay);
        reasons.push(reason);
    }
    let moved = sqlx::query(
        "WITH input AS (
             SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::int[], $5::int[], $6::text[],
                                  $7::text[], $8::float8[], $9::text[], $10::text[])
                 AS t(event_id, attempt_id, status, latency_ms, excerpt, error, delay, state, reason)
         ),
         recorded AS (
             UPDATE attempts a SET finished_at = now(), status = i.status, latency_ms = i.latency_ms,
                 response_excerpt = i.excerpt, error = i.error,
                 next_attempt_at = now() + make_interval(secs => i.delay), result = i.state
             FROM input i WHERE a.id = i.attempt_id
         )
         UPDATE events e SET
             state = i.state, state_changed_at = now(),
             lease_owner = NULL, lease_expires_at = NULL,
             next_attempt_at = CASE WHEN i.delay IS NULL THEN e.next_attempt_at
                                    ELSE now() + make_interval(secs => i.delay) END,
             completed_at = CASE WHEN i.state = 'completed' THEN now() END,
             last_error = i.reason,
             dead_reason = CASE WHEN i.state = 'dead' THEN i.reason END
         FROM input i
         WHERE e.id = i.event_id AND e.state = 'processing' AND e.lease_owner = $1",
    )
    .bind(worker)
    .bind(done.iter().map(|(l, _, _)| l.event_id).collect::<Vec<_>>())
    .bind(done.iter().map(|(l, _, _)| l.attempt_id).collect::<Vec<_>>())
    .bind(done.iter().map(|(_, r, _)| r.status.map(i32::from)).collect::<Vec<_>>())
    .bind(done.iter().map(|(_, r, _)| r.latency_ms).collect::<Vec<_>>())
    .bind(done.iter().map(|(_, r, _)| r.response_excerpt.clone()).collect::<Vec<_>>())
    .bind(done.iter().map(|(_, r, _)| r.error.clone()).collect::<Vec<_>>())
    .bind(delays)
    .bind(states)
    .bind(reasons)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(moved)
}
