//! What is left to do and what is dead, defined once for the overview, the
//! Sources page, `/api/v1/overview`, the metrics and the alert rules.
//!
//! The **backlog** is the dispatches not yet completed, dead or filtered,
//! split by what may happen to them now: *due* (queued or retrying, due time
//! passed, source not paused, breaker closed: a worker may take it now),
//! *in flight* (leased, an attempt under way) and *waiting* (the rest:
//! backing off, source paused, breaker open or half-open). A **dead letter**
//! is an event: dead when any of its dispatches is, counted once, with each
//! destination's dead dispatches beside it. A **blocked key** is an
//! ordered destination's key whose oldest unsettled event failed and waits
//! to be retried: the key's later events wait behind it.

use sqlx::PgPool;

use replaysafe_types::overview::{BlockedKey, DestinationBacklog, COUNT_CAP};
use replaysafe_types::time::Time;

/// Each (source, destination) with a backlog or dead dispatches, ordered by
/// source and destination. Every count stops at `COUNT_CAP`: counting a huge
/// backlog exactly would make the reads slow exactly when they are needed.
pub async fn by_destination(pool: &PgPool) -> Result<Vec<DestinationBacklog>, sqlx::Error> {
    // The pairs with a backlog by a skip scan of the due index (one probe a
    // pair, whatever the backlog's size); each pair's counts by its own
    // index range.
    let pending = sqlx::query!(
        r#"WITH RECURSIVE pending(source, destination) AS (
               (SELECT source, destination FROM dispatches
                WHERE state IN ('queued', 'retrying')
                ORDER BY source, destination LIMIT 1)
               UNION ALL
               SELECT n.source, n.destination FROM pending p, LATERAL (
                   SELECT source, destination FROM dispatches
                   WHERE state IN ('queued', 'retrying')
                     AND (source, destination) > (p.source, p.destination)
                   ORDER BY source, destination LIMIT 1) n
           ),
           in_flight AS (
               SELECT source, destination, count(*) AS n
               FROM (SELECT source, destination FROM dispatches
                     WHERE state = 'processing' LIMIT $1) f
               GROUP BY source, destination
           ),
           pairs AS (
               SELECT source, destination FROM pending
               UNION SELECT source, destination FROM in_flight
           )
           SELECT x.source AS "source!", x.destination AS "destination!",
                  NOT coalesce(s.paused, false) AND coalesce(g.breaker, 'closed') = 'closed'
                      AS "runnable!",
                  (SELECT count(*) FROM (
                       SELECT 1 FROM dispatches d
                       WHERE d.source = x.source AND d.destination = x.destination
                         AND d.state IN ('queued', 'retrying') AND d.next_attempt_at <= now()
                       LIMIT $1) c) AS "ready!",
                  (SELECT count(*) FROM (
                       SELECT 1 FROM dispatches d
                       WHERE d.source = x.source AND d.destination = x.destination
                         AND d.state IN ('queued', 'retrying') AND d.next_attempt_at > now()
                       LIMIT $1) c) AS "later!",
                  coalesce(f.n, 0) AS "in_flight!",
                  (SELECT extract(epoch FROM now() - min(d.next_attempt_at))::float8
                   FROM dispatches d
                   WHERE d.source = x.source AND d.destination = x.destination
                     AND d.state IN ('queued', 'retrying') AND d.next_attempt_at <= now())
                      AS oldest_ready_secs,
                  (SELECT count(*) FROM (
                       SELECT 1 FROM dispatches h
                       WHERE h.source = x.source AND h.destination = x.destination
                         AND h.ordering_key IS NOT NULL AND h.state = 'retrying'
                         AND NOT EXISTS (SELECT 1 FROM dispatches o
                                         WHERE o.source = h.source
                                           AND o.destination = h.destination
                                           AND o.ordering_key = h.ordering_key
                                           AND o.ordering_key IS NOT NULL
                                           AND o.state IN ('queued', 'processing', 'retrying')
                                           AND o.event_id < h.event_id)
                       LIMIT $1) c) AS "blocked_keys!"
           FROM pairs x
           LEFT JOIN in_flight f ON f.source = x.source AND f.destination = x.destination
           LEFT JOIN sources s ON s.slug = x.source
           LEFT JOIN destination_gates g
                  ON g.source = x.source AND g.destination = x.destination"#,
        COUNT_CAP
    )
    .fetch_all(pool)
    .await?;
    // The most recent deaths first, so the last 10 minutes' are always counted.
    let dead = sqlx::query!(
        r#"SELECT source AS "source!", destination AS "destination!", count(*) AS "dead!"
           FROM (SELECT source, destination FROM dispatches WHERE state = 'dead'
                 ORDER BY state_changed_at DESC LIMIT $1) d
           GROUP BY source, destination"#,
        COUNT_CAP
    )
    .fetch_all(pool)
    .await?;
    let mut rows: Vec<DestinationBacklog> = pending
        .into_iter()
        .map(|r| {
            let (due, waiting) = if r.runnable {
                (r.ready, r.later)
            } else {
                (0, r.ready + r.later)
            };
            DestinationBacklog {
                source: r.source,
                destination: r.destination,
                due,
                waiting,
                in_flight: r.in_flight,
                oldest_due_secs: r.oldest_ready_secs.filter(|_| r.runnable && due > 0),
                dead_letters: 0,
                blocked_keys: r.blocked_keys,
            }
        })
        .collect();
    for d in dead {
        match rows
            .iter_mut()
            .find(|r| r.source == d.source && r.destination == d.destination)
        {
            Some(row) => row.dead_letters = d.dead,
            None => rows.push(DestinationBacklog {
                source: d.source,
                destination: d.destination,
                dead_letters: d.dead,
                ..Default::default()
            }),
        }
    }
    rows.sort_by(|a, b| (&a.source, &a.destination).cmp(&(&b.source, &b.destination)));
    Ok(rows)
}

/// The keys of ordered destinations (of `source`, or every one) held by
/// an event that failed and waits to be retried, oldest holder first, up
/// to `limit`.
pub async fn blocked_keys(
    pool: &PgPool,
    source: Option<&str>,
    limit: i64,
) -> Result<Vec<BlockedKey>, sqlx::Error> {
    sqlx::query_as!(
        BlockedKey,
        r#"SELECT h.source, h.destination, h.ordering_key AS "ordering_key!", h.event_id,
                  e.idem_key, h.attempt_count, h.next_attempt_at AS "next_attempt_at: Time",
                  h.last_error,
                  (SELECT count(*) FROM dispatches q
                   WHERE q.source = h.source AND q.destination = h.destination
                     AND q.ordering_key = h.ordering_key AND q.ordering_key IS NOT NULL
                     AND q.state IN ('queued', 'processing', 'retrying')
                     AND q.event_id > h.event_id) AS "waiting!"
           FROM dispatches h JOIN events e ON e.id = h.event_id
           WHERE h.ordering_key IS NOT NULL AND h.state = 'retrying'
             AND ($1::text IS NULL OR h.source = $1)
             AND NOT EXISTS (SELECT 1 FROM dispatches o
                             WHERE o.source = h.source AND o.destination = h.destination
                               AND o.ordering_key = h.ordering_key
                               AND o.ordering_key IS NOT NULL
                               AND o.state IN ('queued', 'processing', 'retrying')
                               AND o.event_id < h.event_id)
           ORDER BY h.event_id
           LIMIT $2"#,
        source,
        limit
    )
    .fetch_all(pool)
    .await
}

/// Each source's dead events (an event once, however many of its dispatches
/// are dead), and those of them dead since `recent_minutes` ago, by source.
pub async fn dead_events(
    pool: &PgPool,
    recent_minutes: i32,
) -> Result<Vec<DeadEvents>, sqlx::Error> {
    sqlx::query_as!(
        DeadEvents,
        r#"SELECT source AS "source!", count(DISTINCT event_id) AS "events!",
                  count(DISTINCT event_id)
                      FILTER (WHERE state_changed_at > now() - make_interval(mins => $2))
                      AS "recent!"
           FROM (SELECT source, event_id, state_changed_at FROM dispatches
                 WHERE state = 'dead'
                 ORDER BY state_changed_at DESC LIMIT $1) d
           GROUP BY source ORDER BY source"#,
        COUNT_CAP,
        recent_minutes
    )
    .fetch_all(pool)
    .await
}

/// A source's dead events.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadEvents {
    pub source: String,
    pub events: i64,
    /// Of them, those a dispatch of which died in the recent minutes asked.
    pub recent: i64,
}
