//! The provider's transitions: a delivery claims its key (the event is
//! created), or counts on the event holding it; and the operator's revive,
//! which arrives as a re-delivery through the same claim.

use sqlx::PgConnection;

use super::{Forwarder, State};

/// A sync-mode claim's lease: the request that holds it calls the destination.
#[derive(Clone, Copy, Debug)]
pub struct InlineLease<'a> {
    pub owner: &'a str,
    pub secs: f64,
}

/// A new event's dispatch to one destination of its source: `wanted` when
/// the destination's filter takes the event (else it is recorded
/// `filtered`, and nothing is forwarded there).
#[derive(Clone, Copy, Debug)]
pub struct Planned<'a> {
    pub destination: &'a str,
    pub wanted: bool,
    /// An ordered destination's: the dispatch waits for those of the same
    /// key received before it (see `lease`).
    pub ordering_key: Option<&'a str>,
}

/// Claims `(source, key)` for a new event, with a dispatch per destination
/// in `plan`. Ack mode (no lease): `queued`, for the workers. Sync mode:
/// `processing` under the request's lease. Returns the new event's id and
/// the delivery id reserved for the claimant, or None when another delivery
/// holds the key (`ON CONFLICT DO NOTHING`: never check-then-write).
pub async fn claim(
    tx: &mut PgConnection,
    source: &str,
    key: &str,
    plan: &[Planned<'_>],
    event_type: Option<&str>,
    lease: Option<InlineLease<'_>>,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH ev AS (
             INSERT INTO events (source, idem_key, first_delivery_id, event_type)
             VALUES ($1, $2, nextval('deliveries_id_seq'), $7)
             ON CONFLICT (source, idem_key) DO NOTHING
             RETURNING id, source, first_delivery_id
         ),
         planned AS (
             INSERT INTO dispatches (event_id, destination, source, state, forwarder,
                                     lease_owner, lease_expires_at, ordering_key)
             SELECT ev.id, p.destination, ev.source,
                    CASE WHEN NOT p.wanted THEN 'filtered'
                         WHEN $3::text IS NULL THEN 'queued' ELSE 'processing' END,
                    CASE WHEN $3::text IS NULL THEN 'workers' ELSE 'request' END,
                    CASE WHEN p.wanted THEN $3::text END,
                    CASE WHEN p.wanted AND $3::text IS NOT NULL
                         THEN now() + make_interval(secs => $4) END,
                    CASE WHEN p.wanted THEN p.ordering_key END
             FROM ev, unnest($5::text[], $6::bool[], $8::text[])
                      AS p(destination, wanted, ordering_key)
         )
         SELECT id, first_delivery_id AS "first_delivery_id!" FROM ev"#,
        source,
        key,
        lease.map(|l| l.owner),
        lease.map_or(0.0, |l| l.secs),
        &plan.iter().map(|p| p.destination).collect::<Vec<_>>() as _,
        &plan.iter().map(|p| p.wanted).collect::<Vec<_>>(),
        event_type,
        &plan.iter().map(|p| p.ordering_key).collect::<Vec<_>>() as _
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(|r| (r.id, r.first_delivery_id)))
}

/// What a duplicate found: the event holding its key, in the state it saw
/// (after any takeover), and the stored answer in sync mode.
#[derive(Clone, Debug)]
pub struct Duplicate {
    pub event_id: i64,
    pub state: State,
    /// This request took over the sync claim and now holds its lease.
    pub taken_over: bool,
    pub response: Option<super::StoredResponse>,
}

/// A delivery of a key that is held: counts the receipt. In sync mode
/// (`takeover` given) the request takes over a dispatch its requests
/// forward when no attempt is running: waiting (`queued`, `retrying`) or its
/// holder's lease expired. The takeover's update checks that again on the
/// row it locks, so two duplicates never both take over; no other
/// dispatch is locked. None when no event holds the key any more: retention
/// forgot it after the claim's insert saw it (the caller claims again).
pub async fn duplicate(
    tx: &mut PgConnection,
    source: &str,
    key: &str,
    takeover: Option<InlineLease<'_>>,
) -> Result<Option<Duplicate>, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH ev AS (
                 SELECT id FROM events WHERE source = $1 AND idem_key = $2
                 FOR NO KEY UPDATE
             ),
             found AS (
                 SELECT p.event_id, p.destination, p.state, p.attempt_count,
                        p.response_status, p.response_content_type, p.response_body
                 FROM dispatches p WHERE p.event_id = (SELECT id FROM ev)
             ),
             taken AS (
                 UPDATE dispatches p SET state = 'processing', state_changed_at = now(),
                     lease_owner = $3, lease_expires_at = now() + make_interval(secs => $4)
                 WHERE $3::text IS NOT NULL AND p.event_id = (SELECT id FROM ev)
                   AND p.forwarder = 'request'
                   AND (p.state IN ('queued', 'retrying')
                        OR (p.state = 'processing' AND p.lease_expires_at < now()))
                 RETURNING p.event_id, p.destination
             ),
             -- Its open attempt, if it began, is its last (see events::lease).
             abandoned AS (
                 UPDATE attempts a SET finished_at = coalesce(a.finished_at, now()),
                     error = CASE WHEN a.finished_at IS NULL
                                  THEN 'the request holding it went away; taken over'
                                  ELSE a.error END
                 WHERE (a.event_id, a.destination, a.number) IN
                       (SELECT f.event_id, f.destination, f.attempt_count
                        FROM found f JOIN taken t USING (event_id, destination)
                        WHERE f.state = 'processing')
             ),
             counted AS (
                 UPDATE events e SET receive_count = e.receive_count + 1, last_seen_at = now()
                 WHERE e.id = (SELECT id FROM ev)
                 RETURNING e.id
             )
             -- Sync mode has one destination: its stored answer is the event's.
             SELECT c.id AS "id!",
                    CASE WHEN EXISTS (SELECT 1 FROM taken) THEN 'processing'
                         ELSE event_state(array_agg(f.state)) END AS "state!: State",
                    EXISTS (SELECT 1 FROM taken) AS "take!",
                    (array_agg(f.response_status) FILTER (WHERE f.response_body IS NOT NULL))[1]
                        AS response_status,
                    (array_agg(f.response_content_type)
                         FILTER (WHERE f.response_body IS NOT NULL))[1] AS response_content_type,
                    (array_agg(f.response_body) FILTER (WHERE f.response_body IS NOT NULL))[1]
                        AS response_body
             FROM counted c LEFT JOIN found f ON true
             GROUP BY c.id"#,
        source,
        key,
        takeover.map(|l| l.owner),
        takeover.map_or(0.0, |l| l.secs)
    )
    .fetch_optional(tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let (event_id, state, taken_over) = (row.id, row.state, row.take);
    let content_type = row.response_content_type;
    let response = match (row.response_status, row.response_body) {
        (Some(status), Some(body)) => Some(super::StoredResponse {
            status,
            content_type,
            body,
        }),
        _ => None,
    };
    Ok(Some(Duplicate {
        event_id,
        state,
        taken_over,
        response,
    }))
}

/// An operator's re-delivery of a dead event queues its dead dispatches
/// again for the workers (whatever the source's mode: no provider waits for
/// it); `destination` limits it to that one. The event's row lock, taken
/// first, makes exactly one of any number of concurrent re-deliveries win.
/// When the payload the event forwards is gone, the re-delivery's own
/// (`delivery_id`, recorded in the same transaction) takes its place. A
/// bulk job revives an event once, however many of its runners try (one
/// that stalled and came back after another took its job over).
/// Returns the event's id when it was revived.
pub async fn revive(
    tx: &mut PgConnection,
    source: &str,
    key: &str,
    destination: Option<&str>,
    delivery_id: i64,
    bulk_job: Option<i64>,
) -> Result<Option<i64>, sqlx::Error> {
    // Settled dispatches change only under their event's row lock: retention
    // (which forgets settled events) never deletes one being revived.
    let event: Option<i64> = sqlx::query_scalar!(
        "SELECT id FROM events WHERE source = $1 AND idem_key = $2 FOR NO KEY UPDATE",
        source,
        key
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(event_id) = event else {
        return Ok(None);
    };
    sqlx::query_scalar!(
        r#"WITH revived AS (
             UPDATE dispatches p SET state = 'queued', forwarder = 'workers',
                 state_changed_at = now(), next_attempt_at = now(), attempt_count = 0,
                 revived_at = now(), dead_reason = NULL, last_error = NULL
             WHERE p.event_id = $1 AND p.state = 'dead'
               AND ($4::text IS NULL OR p.destination = $4)
               AND ($3::bigint IS NULL OR NOT EXISTS (
                       SELECT 1 FROM deliveries d
                       WHERE d.event_id = p.event_id AND d.bulk_job_id = $3
                         AND d.outcome = 'claimed'
                         AND d.received_at >= (SELECT j.created_at FROM bulk_jobs j WHERE j.id = $3)))
             RETURNING p.event_id
         )
         UPDATE events e SET receive_count = receive_count + 1, last_seen_at = now(),
             first_delivery_id = CASE WHEN EXISTS (SELECT 1 FROM deliveries d
                                                   WHERE d.id = e.first_delivery_id
                                                     AND d.body IS NOT NULL
                                                     AND d.received_at >= e.first_seen_at)
                                      THEN e.first_delivery_id ELSE $2 END
         WHERE e.id = $1 AND EXISTS (SELECT 1 FROM revived)
         RETURNING id"#,
        event_id,
        delivery_id,
        bulk_job,
        destination
    )
    .fetch_optional(tx)
    .await
}

/// One batch of ack-mode deliveries for `claim_batch`: the batch's distinct
/// keys in one fixed order (every batch locks its keys in that order, so two
/// batches never deadlock) with their copies, and each delivery's fields.
pub struct BatchClaim<'a> {
    pub key_sources: Vec<&'a str>,
    pub key_ids: Vec<&'a str>,
    pub key_copies: Vec<i32>,
    /// Per key: the provider's event type, where a filter needed it.
    pub key_types: Vec<Option<&'a str>>,
    /// A new event's dispatches, each by its key's 1-based place in the
    /// keys: its destination, whether that wants it, and the lease, in
    /// seconds, under which it goes straight to this process's workers
    /// (`processing`, for its first attempt; None: it waits `queued` for a
    /// lease).
    pub plan_keys: Vec<i32>,
    pub plan_destinations: Vec<&'a str>,
    pub plan_wanted: Vec<bool>,
    pub plan_leases: Vec<Option<f64>>,
    /// An ordered destination's ordering key (`Planned::ordering_key`).
    pub plan_ordering_keys: Vec<Option<&'a str>>,
    /// Who holds those leases.
    pub lease_owner: &'a str,
    pub sources: Vec<&'a str>,
    /// The key each delivery is claimed under.
    pub idem_keys: Vec<&'a str>,
    /// The key each delivery was posted with, as recorded: a replay of
    /// another event's signed content keeps its own.
    pub posted_keys: Vec<&'a str>,
    /// The first copy of each key in the batch: the one that may claim it.
    pub first: Vec<bool>,
    /// How many copies of its key the batch holds.
    pub copies: Vec<i32>,
    pub verifications: Vec<&'a str>,
    pub queries: Vec<Option<&'a str>>,
    pub content_types: Vec<Option<&'a str>>,
    pub headers: Vec<&'a serde_json::Value>,
    pub bodies: Vec<&'a [u8]>,
    pub sizes: Vec<i32>,
    pub remote_addrs: Vec<Option<&'a str>>,
    pub ack_micros: Vec<i32>,
}

/// One answered delivery: its 1-based place in the batch, delivery id,
/// event id, and `claimed` or the state of the event holding its key; for
/// a claim, the destinations whose dispatch was handed to this process's
/// workers and whether any waits `queued`; and the key it was claimed under.
pub struct BatchRow {
    pub ord: i64,
    pub delivery_id: i64,
    pub event_id: i64,
    pub outcome: replaysafe_types::states::Outcome,
    pub handed: Option<Vec<String>>,
    pub queued: bool,
    pub claim_key: String,
}

/// Claims a batch in one statement: each key is claimed (a new event
/// counting its copies, with a dispatch per destination: `queued`,
/// `filtered`, or leased to this process's workers for its first attempt,
/// which spares them a lease statement and a row update per dispatch; the
/// attempt is recorded when it ends) or its event is locked and counted
/// (`ON CONFLICT DO UPDATE` waits for a concurrent claim of the same key and
/// then counts on it), and every delivery is recorded. A new event's receive
/// count equals the batch's copies; a stored one already counted at least
/// one receipt, so its count is higher: that tells the claimant's copy
/// apart without joining the batch back to the keys it drew ids for.
pub async fn claim_batch(
    conn: &mut PgConnection,
    batch: &BatchClaim<'_>,
) -> Result<Vec<BatchRow>, sqlx::Error> {
    debug_assert_eq!(Forwarder::Workers.as_str(), "workers");
    // `as _`: the arrays are bound borrowed (the macro checks owned types).
    sqlx::query_as!(
BatchRow,
r#"WITH keys AS (
             -- A source paused since the workers last read it is not handed over.
             SELECT k.source, k.idem_key, k.copies, k.event_type, k.key_no,
                    coalesce(s.paused, false) AS paused
             FROM unnest($1::text[], $2::text[], $3::int[], $17::text[]) WITH ORDINALITY
                 AS k(source, idem_key, copies, event_type, key_no)
             LEFT JOIN sources s ON s.slug = k.source
         ),
         held AS (
             INSERT INTO events AS e (source, idem_key, first_delivery_id, receive_count,
                                      event_type)
             SELECT source, idem_key, nextval('deliveries_id_seq'), copies, event_type
             -- Locked in key order whatever the join with sources did to the
             -- rows' order: concurrent batches never deadlock.
             FROM keys ORDER BY source, idem_key
             ON CONFLICT (source, idem_key) DO UPDATE
                 SET receive_count = e.receive_count + EXCLUDED.receive_count, last_seen_at = now()
             RETURNING e.id, e.source, e.idem_key, e.first_delivery_id, e.receive_count
         ),
         fresh AS (
             SELECT h.id, h.source, k.key_no, k.paused
             FROM held h JOIN keys k USING (source, idem_key)
             WHERE h.receive_count = k.copies
         ),
         planned AS (
             INSERT INTO dispatches (event_id, destination, source, state, lease_owner,
                                     lease_expires_at, attempt_count, ordering_key)
             SELECT f.id, p.destination, f.source,
                    CASE WHEN NOT p.wanted THEN 'filtered'
                         WHEN f.paused OR p.lease_secs IS NULL THEN 'queued'
                         ELSE 'processing' END,
                    CASE WHEN p.wanted AND NOT f.paused AND p.lease_secs IS NOT NULL
                         THEN $18::text END,
                    CASE WHEN p.wanted AND NOT f.paused
                         THEN now() + make_interval(secs => p.lease_secs) END,
                    CASE WHEN p.wanted AND NOT f.paused AND p.lease_secs IS NOT NULL
                         THEN 1 ELSE 0 END,
                    CASE WHEN p.wanted THEN p.ordering_key END
             FROM fresh f
             JOIN unnest($19::int[], $20::text[], $21::bool[], $22::float8[], $23::text[])
                  AS p(key_no, destination, wanted, lease_secs, ordering_key)
                  ON p.key_no = f.key_no
             RETURNING event_id, destination, state
         ),
         placed AS (
             SELECT i.*, h.id AS event_id,
                    CASE WHEN i.first AND h.receive_count = i.copies THEN h.first_delivery_id
                         ELSE nextval('deliveries_id_seq') END AS delivery_id,
                    CASE WHEN i.first AND h.receive_count = i.copies THEN 'claimed'
                         WHEN es.state IN ('completed', 'dead') THEN es.state
                         ELSE 'in_progress' END AS outcome
             FROM unnest($4::text[], $5::text[], $6::bool[], $7::int[], $8::text[], $9::text[],
                         $10::text[], $11::jsonb[], $12::bytea[], $13::int[], $14::text[], $15::int[],
                         $16::text[])
                      WITH ORDINALITY
                      AS i(source, idem_key, first, copies, verification, query, content_type,
                           headers, body, body_size, remote_addr, ack_micros, posted_key, ord)
             JOIN held h USING (source, idem_key)
             -- A stored event's state, from its dispatches as this statement
             -- sees them (one a concurrent batch just claimed has none yet:
             -- in progress, as it is).
             LEFT JOIN LATERAL (
                 SELECT event_state(array_agg(p.state)) AS state FROM dispatches p
                 WHERE p.event_id = h.id AND h.receive_count <> i.copies
             ) es ON true
         ),
         recorded AS (
             INSERT INTO deliveries (id, source, event_id, idem_key, outcome, http_status, ack_micros,
                                     verified, verification, query, content_type, headers, body,
                                     body_size, remote_addr)
             SELECT delivery_id, source, event_id, posted_key, outcome, 200, ack_micros, true,
                    verification, query, content_type, headers, body, body_size, remote_addr
             FROM placed
         )
         SELECT p.ord AS "ord!", p.delivery_id AS "delivery_id!", p.event_id AS "event_id!",
                p.outcome AS "outcome!: replaysafe_types::states::Outcome",
                CASE WHEN p.outcome = 'claimed' THEN
                    (SELECT array_agg(x.destination) FROM planned x
                     WHERE x.event_id = p.event_id AND x.state = 'processing') END AS handed,
                p.outcome = 'claimed' AND EXISTS (SELECT 1 FROM planned x
                     WHERE x.event_id = p.event_id AND x.state = 'queued') AS "queued!",
                p.idem_key AS "claim_key!"
         FROM placed p"#,
&batch.key_sources as _,
&batch.key_ids as _,
&batch.key_copies as _,
&batch.sources as _,
&batch.idem_keys as _,
&batch.first as _,
&batch.copies as _,
&batch.verifications as _,
&batch.queries as _,
&batch.content_types as _,
&batch.headers as _,
&batch.bodies as _,
&batch.sizes as _,
&batch.remote_addrs as _,
&batch.ack_micros as _,
&batch.posted_keys as _,
&batch.key_types as _,
batch.lease_owner,
&batch.plan_keys,
&batch.plan_destinations as _,
&batch.plan_wanted,
&batch.plan_leases as _,
&batch.plan_ordering_keys as _,
)
    .fetch_all(conn)
    .await
}

/// The replay guard, before any key is claimed: each digest of signed
/// content is claimed for the key that brought it, or found with the key of
/// the event it already signed. Returns each digest's key. Callers pass
/// distinct digests sorted, so concurrent guards lock them in one order, and
/// always guard before they claim keys, so guards and claims never deadlock.
///
/// A digest found under another key is checked in a second statement: only
/// a fresh snapshot sees the event of a claim that committed while this one
/// waited for the digest's row lock. A digest whose event retention forgot
/// goes to the new key.
pub async fn guard(
    conn: &mut PgConnection,
    sources: &[&str],
    digests: &[&[u8]],
    keys: &[&str],
) -> Result<Vec<(String, Vec<u8>, String)>, sqlx::Error> {
    // `as _`: the arrays are bound borrowed (the macro checks owned types).
    let mut found: Vec<(String, Vec<u8>, String)> = sqlx::query!(
        "INSERT INTO signed_content AS c (source, digest, idem_key)
         SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[])
         ON CONFLICT (source, digest) DO UPDATE SET idem_key = c.idem_key
         RETURNING source, digest, idem_key",
        sources as _,
        digests as _,
        keys as _
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.source, r.digest, r.idem_key))
    .collect();
    let proposed = |source: &str, digest: &[u8]| {
        sources
            .iter()
            .zip(digests)
            .position(|(s, d)| *s == source && *d == digest)
            .map(|at| keys[at])
    };
    if found
        .iter()
        .all(|(source, digest, key)| proposed(source, digest) == Some(key.as_str()))
    {
        return Ok(found);
    }
    let reassigned = sqlx::query!(
        "UPDATE signed_content c SET idem_key = i.idem_key, first_seen_at = now()
         FROM unnest($1::text[], $2::bytea[], $3::text[]) AS i(source, digest, idem_key)
         WHERE c.source = i.source AND c.digest = i.digest AND c.idem_key <> i.idem_key
           AND NOT EXISTS (SELECT 1 FROM events e
                           WHERE e.source = c.source AND e.idem_key = c.idem_key)
         RETURNING c.source, c.digest, c.idem_key",
        sources as _,
        digests as _,
        keys as _
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.source, r.digest, r.idem_key));
    for row in reassigned {
        if let Some(f) = found.iter_mut().find(|f| f.0 == row.0 && f.1 == row.1) {
            *f = row;
        }
    }
    Ok(found)
}

/// Retention forgets up to `limit` digests older than `dedup_ttl_days` whose
/// event is gone: a digest lives as long as its key.
pub async fn prune_guard(
    pool: &sqlx::PgPool,
    dedup_ttl_days: u32,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM signed_content WHERE (source, digest) IN (
             SELECT c.source, c.digest FROM signed_content c
             WHERE c.first_seen_at < now() - make_interval(days => $1)
               AND NOT EXISTS (SELECT 1 FROM events e
                               WHERE e.source = c.source AND e.idem_key = c.idem_key)
             LIMIT $2)",
        dedup_ttl_days as i32,
        limit
    )
    .execute(pool)
    .await?
    .rows_affected())
}
