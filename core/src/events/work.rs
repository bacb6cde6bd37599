//! The forwarders' transitions: workers lease due events (and take over
//! expired leases), a sync claim's holder starts its attempt inside the
//! request, and either records the attempt's end. No transaction or row lock
//! outlives a statement, so none is held across an outgoing HTTP call.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};

use super::StoredResponse;

/// An event's dispatch to one destination, leased for one attempt, with
/// what it forwards.
#[derive(Clone, Debug)]
pub struct Leased {
    pub event_id: i64,
    /// The destination's name in its source's config.
    pub destination: String,
    /// The attempt's row when it was written as it began (sync mode, inside
    /// the provider's request); the workers' attempts are written once, when
    /// they end.
    pub attempt_id: Option<i64>,
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
    /// Since when the event waits to be delivered, in seconds since the Unix
    /// epoch: its first receipt, or the operator's re-delivery that revived
    /// it, or the admin's force (the end-to-end metric counts from it).
    pub received: f64,
}

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

    fn delay_and_reason(&self, record: &AttemptRecord) -> (Option<f64>, Option<String>) {
        match self {
            Next::Completed => (None, None),
            Next::RetryIn(d) => (Some(d.as_secs_f64()), record.error.clone()),
            Next::Dead(reason) => (None, Some(reason.clone())),
        }
    }
}

/// One finished attempt, to be recorded. `response` is kept for sync-mode
/// sources, whose later duplicates get the destination's answer back.
#[derive(Clone, Debug)]
pub struct Done {
    pub leased: Leased,
    pub record: AttemptRecord,
    pub next: Next,
    pub response: Option<StoredResponse>,
}

/// The destinations this process can forward to, each with its lease: its
/// attempt timeout plus a margin. Workers lease only their dispatches, so a
/// process never takes one it has no destination for.
#[derive(Clone, Debug, Default)]
pub struct Runnable {
    slugs: Vec<String>,
    destinations: Vec<String>,
    lease_secs: Vec<f64>,
    /// How long a sync-mode event whose inline attempt failed waits for its
    /// provider's retry before the workers adopt it.
    request_grace: Duration,
    /// How long past its expiry a lease is left to its holder before it is
    /// taken over: after the database was away (a failover), holders that
    /// could not record their attempts get to record them first.
    takeover_grace: Duration,
}

/// Providers retry a failed sync request within minutes (Slack: at once,
/// after 1 and 5 minutes) or never (Discord): after this the workers adopt
/// the event, so that it ends completed or dead instead of waiting forever.
pub const REQUEST_GRACE: Duration = Duration::from_secs(600);

impl Runnable {
    /// Each (source, destination, attempt timeout).
    pub fn new<'a>(
        destinations: impl IntoIterator<Item = (&'a str, &'a str, Duration)>,
        margin: Duration,
    ) -> Self {
        let mut slugs = Vec::new();
        let mut names = Vec::new();
        let mut lease_secs = Vec::new();
        for (slug, name, timeout) in destinations {
            slugs.push(slug.to_owned());
            names.push(name.to_owned());
            lease_secs.push((timeout + margin).as_secs_f64());
        }
        Self {
            slugs,
            destinations: names,
            lease_secs,
            request_grace: REQUEST_GRACE,
            takeover_grace: Duration::ZERO,
        }
    }

    /// The same sources, taking over only leases expired `grace` ago.
    pub fn with_takeover_grace(mut self, grace: Duration) -> Self {
        self.takeover_grace = grace;
        self
    }

    /// The same sources with another grace for abandoned sync events.
    pub fn with_request_grace(mut self, grace: Duration) -> Self {
        self.request_grace = grace;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.slugs.is_empty()
    }
}

/// Leases up to `limit` due dispatches that workers forward: queued or
/// retrying ones whose time has come, and processing ones whose holder lost
/// its lease (a takeover, which closes the abandoned attempt). A sync-mode
/// dispatch is adopted from its provider's requests when its holder vanished
/// (the lease expired: a crash, or the provider hung up) or its provider
/// has not retried a failed attempt within `REQUEST_GRACE`. Only `runnable`
/// destinations, and none of a paused source. One statement: its own
/// transaction on `conn` outside one (the workers' `OwnConnection`, which
/// skip it when nothing is runnable).
pub async fn lease(
    conn: &mut PgConnection,
    worker: &str,
    limit: i64,
    runnable: &Runnable,
) -> Result<Vec<Leased>, sqlx::Error> {
    lease_on(conn, worker, limit, runnable, false).await
}

/// A half-open breaker's probe (`breaker::take_probes`): one due dispatch
/// of the runnable destination, which is otherwise left alone: of its
/// oldest due ones, the one that failed least (a poison event that failed
/// every time is probed with only when nothing else waits).
pub async fn lease_probe(
    pool: &PgPool,
    worker: &str,
    runnable: &Runnable,
) -> Result<Vec<Leased>, sqlx::Error> {
    let mut tx = crate::db::begin_generic(pool).await?;
    let leased = lease_on(&mut tx, worker, 1, runnable, true).await?;
    tx.commit().await?;
    Ok(leased)
}

/// The due dispatches a probe chooses from, oldest first: the one of them
/// that failed least is sent.
const PROBE_CANDIDATES: i64 = 100;

/// `probing`: leases of destinations whose breaker is not closed too, the
/// least failed of the oldest due dispatches first.
async fn lease_on(
    conn: &mut PgConnection,
    worker: &str,
    limit: i64,
    runnable: &Runnable,
    probing: bool,
) -> Result<Vec<Leased>, sqlx::Error> {
    sqlx::query_as!(
        Leased,
        r#"WITH runnable AS (
             SELECT r.slug, r.destination, r.lease_secs
             FROM unnest($3::text[], $7::text[], $4::float8[]) AS r(slug, destination, lease_secs)
             JOIN sources s ON s.slug = r.slug
             WHERE NOT s.paused
               -- A broken destination's dispatches wait (`breaker`).
               AND ($8 OR NOT EXISTS (SELECT 1 FROM destination_gates g
                                      WHERE g.source = r.slug AND g.destination = r.destination
                                        AND g.breaker <> 'closed'))
         ),
         -- Each destination's due dispatches by themselves: one's backlog is
         -- never walked through to find another's.
         candidates AS MATERIALIZED (
             -- An ordered destination's dispatch only while no other of its
             -- key is in flight and none received before it waits: one at a
             -- time, in receipt order. Its leases take turns on its gate
             -- (`lease_gated`), each in a snapshot after the last one's
             -- commit: one snapshot that missed a revive or a late claim of
             -- an earlier event never races another's.
             (SELECT c.*, r.lease_secs FROM runnable r, LATERAL (
                  SELECT w.event_id, w.destination, w.state, w.forwarder, w.next_attempt_at,
                         w.lease_expires_at, w.state_changed_at
                  FROM dispatches w
                  WHERE w.source = r.slug AND w.destination = r.destination
                    AND w.state IN ('queued', 'retrying') AND w.next_attempt_at <= now()
                    AND w.forwarder = 'workers'
                    AND (w.ordering_key IS NULL OR NOT EXISTS (
                            SELECT 1 FROM dispatches q
                            WHERE q.source = w.source AND q.destination = w.destination
                              AND q.ordering_key = w.ordering_key
                              AND q.ordering_key IS NOT NULL
                              AND q.state IN ('queued', 'processing', 'retrying')
                              AND q.event_id <> w.event_id
                              AND (q.event_id < w.event_id OR q.state = 'processing')))
                  ORDER BY w.next_attempt_at LIMIT $9) c)
             UNION ALL
             (SELECT x.event_id, x.destination, x.state, x.forwarder, x.next_attempt_at,
                     x.lease_expires_at, x.state_changed_at, r.lease_secs
              FROM dispatches x JOIN runnable r ON r.slug = x.source AND r.destination = x.destination
              WHERE x.state = 'processing' AND x.lease_expires_at < now() - make_interval(secs => $6)
              ORDER BY x.lease_expires_at LIMIT $2)
             UNION ALL
             (SELECT x.event_id, x.destination, x.state, x.forwarder, x.next_attempt_at,
                     x.lease_expires_at, x.state_changed_at, r.lease_secs
              FROM dispatches x JOIN runnable r ON r.slug = x.source AND r.destination = x.destination
              WHERE x.state = 'retrying' AND x.forwarder = 'request'
                AND x.state_changed_at < now() - make_interval(secs => $5)
              ORDER BY x.state_changed_at LIMIT $2)
         ),
         -- Each candidate is locked through its primary key, and only while
         -- it is as the candidates saw it (a lease, a completion or a dead
         -- letter that committed meanwhile changes one of these, and the
         -- row is skipped). Its conditions name the candidate's values, not
         -- constants, so no plan can reach the rows through the queue's
         -- partial indexes: their statistics may say no dispatch waits (a
         -- quiet queue's, or an empty table's) while a backlog of thousands
         -- does, and such a plan joined each of them to every candidate
         -- (a lease of 53 s; bench/README, "A lease planned for an empty
         -- queue").
         locked AS (
             SELECT d.event_id, d.destination, d.state = 'processing' AS taken_over,
                    d.lease_owner AS lost_by, d.forwarder AS lost_forwarder,
                    d.state_changed_at AS began, c.lease_secs
             FROM candidates c
             -- Looked up by primary key, one probe per candidate. No
             -- condition here can drive a hash or merge join (`= ANY` and
             -- `IS NOT DISTINCT FROM` are neither): a generic plan, not
             -- knowing the LIMITs, takes the candidates for thousands and
             -- joined them to the whole of dispatches on any equality it
             -- was given (24 ms a lease at 60,000 queued, a quadratic merge
             -- at 20,000; bench/README, "A lease that joined the whole queue").
             JOIN dispatches d ON d.event_id = ANY (ARRAY[c.event_id])
                              AND d.destination = ANY (ARRAY[c.destination])
             WHERE (d.state, d.forwarder, d.next_attempt_at, d.state_changed_at,
                    d.lease_expires_at)
                   IS NOT DISTINCT FROM (c.state, c.forwarder, c.next_attempt_at,
                                         c.state_changed_at, c.lease_expires_at)
             -- A probe takes the dispatch that failed least: an event the
             -- application keeps refusing never holds the breaker open.
             ORDER BY CASE WHEN $8 THEN d.attempt_count END, d.next_attempt_at
             LIMIT $2
             FOR UPDATE OF d SKIP LOCKED
         ),
         leased AS (
             UPDATE dispatches p SET
                 state = 'processing', state_changed_at = now(), forwarder = 'workers',
                 lease_owner = $1,
                 lease_expires_at = now() + make_interval(secs => locked.lease_secs),
                 attempt_count = p.attempt_count + 1
             FROM locked
             WHERE p.event_id = locked.event_id AND p.destination = locked.destination
             RETURNING p.event_id, p.destination, locked.taken_over, locked.lost_by,
                       locked.lost_forwarder, locked.began, p.source, p.attempt_count,
                       p.revived_at, p.forced_at,
                       CASE WHEN p.forced_at IS NOT NULL AND p.completed_at IS NULL
                            THEN p.forced_by END AS forced_by,
                       p.forced_at IS NOT NULL AND p.completed_at IS NULL AS forced
         ),
         -- A taken-over dispatch's attempt is its last one, found by number (a
         -- condition on finished_at would draw the planner to attempts_open,
         -- whose dead entries made this the lease's dearest step). Written as
         -- it began only inside a provider's request (sync mode): closed here;
         -- a worker's is written when it ends, so its holder's loss is
         -- recorded here instead.
         -- Numbers repeat after a force or a revive (attempt_count starts
         -- over): only a row still open is this attempt's.
         closed AS (
             UPDATE attempts a SET finished_at = now(), error = 'worker lost its lease; taken over'
             WHERE (a.event_id, a.destination, a.number) IN
                   (SELECT event_id, destination, attempt_count - 1 FROM leased WHERE taken_over)
               AND a.finished_at IS NULL
             RETURNING a.event_id, a.destination
         ),
         -- A sync claim whose request died before its attempt began has none.
         -- Begun a day ago at most: older days' partitions may be gone (an
         -- event may wait that long, its source paused, its holder dead).
         abandoned AS (
             INSERT INTO attempts (event_id, destination, number, worker, started_at, finished_at,
                                   error, forced_by)
             SELECT event_id, destination, attempt_count - 1, lost_by,
                    greatest(began, now() - interval '1 day'), now(),
                    'worker lost its lease; taken over', forced_by
             FROM leased
             WHERE taken_over AND lost_forwarder = 'workers' AND lost_by IS NOT NULL
               AND (event_id, destination) NOT IN (SELECT event_id, destination FROM closed)
         )
         SELECT l.event_id, l.destination, NULL::bigint AS attempt_id, l.source, e.idem_key,
                l.attempt_count AS attempt,
                coalesce(d.body, c.body) AS body,
                CASE WHEN d.body IS NULL THEN c.content_type ELSE d.content_type END
                    AS content_type,
                CASE WHEN d.body IS NULL THEN c.headers ELSE d.headers END AS headers,
                l.forced AS "forced!",
                extract(epoch FROM greatest(e.first_seen_at, l.revived_at, l.forced_at))::float8
                    AS "received!"
         FROM leased l JOIN events e ON e.id = l.event_id
         -- Looked up by id in each partition's index, in the days since the
         -- event was first seen (no delivery of it is older): a join alone
         -- may hash a scan of every partition (41 ms a lease under load).
         -- (LIMIT keeps it a subquery, run per event, not folded into a join.)
         LEFT JOIN LATERAL (
             SELECT d.body, d.content_type, d.headers FROM deliveries d
             WHERE d.id = e.first_delivery_id AND d.received_at >= e.first_seen_at
             LIMIT 1
         ) d ON true
         -- Only when that payload is gone (retention racing a force or a
         -- revive): the newest copy posted under the event's own key.
         LEFT JOIN LATERAL (
             SELECT c.body, c.content_type, c.headers FROM deliveries c
             WHERE d.body IS NULL AND c.event_id = e.id AND c.idem_key = e.idem_key
               AND c.body IS NOT NULL AND c.received_at >= event_history_starts(e.first_seen_at)
             ORDER BY c.id DESC LIMIT 1
         ) c ON true"#,
        worker,
        limit,
        &runnable.slugs,
        &runnable.lease_secs,
        runnable.request_grace.as_secs_f64(),
        runnable.takeover_grace.as_secs_f64(),
        &runnable.destinations,
        probing,
        if probing { PROBE_CANDIDATES } else { limit }
    )
    .fetch_all(conn)
    .await
}

/// A destination whose attempts are limited (`rate_per_sec`,
/// `max_in_flight`): leased only through its gate, which holds across every
/// process sharing the database.
#[derive(Clone, Debug)]
pub struct Gate {
    pub source: String,
    pub destination: String,
    /// Attempts per second; None: no rate limit.
    pub rate: Option<f64>,
    /// Attempts that may start at once after a quiet spell: the rate's
    /// worth of one `pace` (so any second sees at most the rate and this).
    pub burst: f64,
    pub max_in_flight: Option<i64>,
}

/// Leases up to `limit` due dispatches of the gate's destination, as many as
/// its gate lets start now: the gate's row is locked first, so concurrent
/// leases of the destination (any process's) take their turns, and each
/// sees in its own fresh snapshot the attempts the one before it started.
pub async fn lease_gated(
    pool: &PgPool,
    worker: &str,
    limit: i64,
    gate: &Gate,
    runnable: &Runnable,
) -> Result<Vec<Leased>, sqlx::Error> {
    let mut tx = crate::db::begin_generic(pool).await?;
    sqlx::query!(
        "INSERT INTO destination_gates (source, destination, allowance, refilled_at)
         VALUES ($1, $2, $3, clock_timestamp())
         ON CONFLICT (source, destination) DO NOTHING",
        &gate.source,
        &gate.destination,
        gate.burst
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "SELECT 1 AS locked FROM destination_gates WHERE source = $1 AND destination = $2
         FOR UPDATE",
        &gate.source,
        &gate.destination
    )
    .fetch_one(&mut *tx)
    .await?;
    // A statement after the lock: its snapshot has the attempts that the
    // lease before this one committed.
    let now = sqlx::query!(
        r#"SELECT least($3::float8, g.allowance + coalesce($4::float8, 0)
                      * greatest(0, extract(epoch FROM clock_timestamp() - g.refilled_at)))
                  AS "tokens!",
                  clock_timestamp() AS "at!",
                  (SELECT count(*) FROM dispatches p
                   WHERE p.state = 'processing' AND p.lease_expires_at > now()
                     AND p.source = g.source AND p.destination = g.destination) AS "in_flight!"
           FROM destination_gates g WHERE g.source = $1 AND g.destination = $2"#,
        &gate.source,
        &gate.destination,
        gate.burst,
        gate.rate
    )
    .fetch_one(&mut *tx)
    .await?;
    let mut room = limit;
    if gate.rate.is_some() {
        room = room.min(now.tokens.floor() as i64);
    }
    if let Some(max) = gate.max_in_flight {
        room = room.min(max - now.in_flight);
    }
    let leased = if room > 0 {
        lease_on(&mut tx, worker, room, runnable, false).await?
    } else {
        Vec::new()
    };
    let spent = if gate.rate.is_some() {
        leased.len() as f64
    } else {
        0.0
    };
    sqlx::query!(
        "UPDATE destination_gates SET allowance = $3, refilled_at = $4
         WHERE source = $1 AND destination = $2",
        &gate.source,
        &gate.destination,
        now.tokens - spent,
        now.at
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(leased)
}

/// How a sync claim's attempt began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inline {
    /// The attempt is recorded: forward now.
    Started { attempt_id: i64, attempt: i32 },
    /// The source is paused: the event went back to `queued` for the
    /// workers, who forward it once the source is resumed.
    Paused,
    /// The lease was lost before the attempt began.
    LeaseLost,
}

/// The holder of a sync claim starts its attempt inside the request, unless
/// the source is paused: then nothing is forwarded by any path until it is
/// resumed, and the event is released to the workers.
pub async fn start_inline(
    pool: &PgPool,
    event_id: i64,
    lease_owner: &str,
) -> Result<Inline, sqlx::Error> {
    let started = sqlx::query!(
        "WITH ev AS (
             UPDATE dispatches p SET attempt_count = p.attempt_count + 1
             FROM sources s
             WHERE p.event_id = $1 AND p.lease_owner = $2 AND p.state = 'processing'
               AND s.slug = p.source AND NOT s.paused
             RETURNING p.event_id, p.destination, p.attempt_count
         )
         INSERT INTO attempts (event_id, destination, number, worker)
         SELECT event_id, destination, attempt_count, $2 FROM ev
         RETURNING id, number",
        event_id,
        lease_owner
    )
    .fetch_optional(pool)
    .await?
    .map(|r| (r.id, r.number));
    if let Some((attempt_id, attempt)) = started {
        return Ok(Inline::Started {
            attempt_id,
            attempt,
        });
    }
    Ok(if release_paused(pool, event_id, lease_owner).await? {
        Inline::Paused
    } else {
        Inline::LeaseLost
    })
}

/// A sync claim whose source is paused goes back to `queued`, now the
/// workers' to forward: no provider request will wait for it. Returns
/// whether this holder still had the lease.
pub async fn release_paused(
    pool: &PgPool,
    event_id: i64,
    lease_owner: &str,
) -> Result<bool, sqlx::Error> {
    let released: Option<i64> = sqlx::query_scalar!(
        "UPDATE dispatches SET state = 'queued', forwarder = 'workers', state_changed_at = now(),
             next_attempt_at = now(), lease_owner = NULL, lease_expires_at = NULL
         WHERE event_id = $1 AND lease_owner = $2 AND state = 'processing'
         RETURNING event_id",
        event_id,
        lease_owner
    )
    .fetch_optional(pool)
    .await?;
    Ok(released.is_some())
}

/// Dispatches leased to this process's workers at their claim whose attempt
/// never began (their source was paused or rests, they waited too long for
/// a worker, the process is stopping) go back to `queued` for any worker's
/// lease, with no trace of the attempt that did not happen. Only while
/// `owner` still holds them. Returns how many went back.
pub async fn release_unbegun(
    pool: &PgPool,
    owner: &str,
    unbegun: &[Leased],
) -> Result<u64, sqlx::Error> {
    if unbegun.is_empty() {
        return Ok(0);
    }
    let released = sqlx::query!(
        "UPDATE dispatches p SET state = 'queued', state_changed_at = now(),
             next_attempt_at = now(), lease_owner = NULL, lease_expires_at = NULL,
             attempt_count = p.attempt_count - 1
         FROM unnest($2::bigint[], $3::text[]) AS u(event_id, destination)
         WHERE p.event_id = u.event_id AND p.destination = u.destination
           AND p.state = 'processing' AND p.lease_owner = $1",
        owner,
        &unbegun.iter().map(|l| l.event_id).collect::<Vec<_>>(),
        &unbegun
            .iter()
            .map(|l| l.destination.clone())
            .collect::<Vec<_>>()
    )
    .execute(pool)
    .await?
    .rows_affected();
    Ok(released)
}

/// Records the attempt and moves the event on, if `holder` still holds its
/// lease (one that lost it must not overwrite its successor). Returns
/// whether the event moved.
pub async fn finish(pool: &PgPool, holder: &str, done: &Done) -> Result<bool, sqlx::Error> {
    let mut tx = crate::db::begin_generic(pool).await?;
    let moved = finish_each(&mut tx, &[(holder, done)]).await?;
    tx.commit().await?;
    Ok(moved.len() == 1)
}

/// `finish` for several attempts in one statement, each with its holder:
/// each attempt is recorded, and each dispatch moves on if its holder still
/// holds its lease. Returns the (event id, destination) of each dispatch
/// that moved. One statement: its own transaction on `conn` outside one
/// (the recorder's `OwnConnection`).
pub async fn finish_each(
    conn: &mut PgConnection,
    done: &[(&str, &Done)],
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    if done.is_empty() {
        return Ok(Vec::new());
    }
    // Claims never lock a dispatch (they insert new ones) and nothing else
    // that waits for a row lock locks several: only two holders of one
    // dispatch (after a takeover) record it at once. The order is for
    // repeatable plans; an update's join may visit rows in any order.
    let mut sorted: Vec<(&str, &Done)> = done.to_vec();
    sorted.sort_by(|(_, a), (_, b)| {
        (a.leased.event_id, &a.leased.destination).cmp(&(b.leased.event_id, &b.leased.destination))
    });
    let holders: Vec<&str> = sorted.iter().map(|(holder, _)| *holder).collect();
    let done: Vec<&Done> = sorted.into_iter().map(|(_, d)| d).collect();
    let mut states = Vec::with_capacity(done.len());
    let mut delays = Vec::with_capacity(done.len());
    let mut reasons = Vec::with_capacity(done.len());
    for d in &done {
        let (delay, reason) = d.next.delay_and_reason(&d.record);
        states.push(d.next.as_str());
        delays.push(delay);
        reasons.push(reason);
    }
    fn kept<'a>(d: &&'a Done) -> Option<&'a StoredResponse> {
        d.response.as_ref().filter(|_| d.next == Next::Completed)
    }
    let moved = sqlx::query!(
"WITH input AS MATERIALIZED (
             -- `leaving`: the state each dispatch must be in to move on, a
             -- column rather than a constant, so that the planner cannot
             -- reach the dispatches through the partial index of processing
             -- ones, whose estimate may be a row, comparing every input
             -- with every entry there (a statement of 480 attempts took
             -- 114 ms): each is found by its primary key.
             SELECT *, 'processing'::text AS leaving FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::int[], $5::int[],
                                  $6::text[], $7::text[], $8::float8[], $9::text[], $10::text[],
                                  $11::int[], $12::text[], $13::bytea[], $14::int[], $15::text[])
                 AS t(holder, event_id, attempt_id, status, latency_ms, excerpt, error, delay,
                      state, reason, response_status, response_content_type, response_body,
                      number, destination)
         ),
         -- Written as it began (sync mode): completed. A worker's: written
         -- now, once (its request went out its latency ago, by the
         -- database's clock).
         -- Found by id in each partition's index: a join alone may hash a
         -- scan of every partition (10 ms a statement under load). Not run
         -- at all without one ($16 empty: a worker's batch): a partition
         -- whose statistics predate its rows is scanned whole (7 ms of a
         -- 32-attempt recording, bench/README).
         recorded AS (
             UPDATE attempts a SET finished_at = now(), status = i.status, latency_ms = i.latency_ms,
                 response_excerpt = i.excerpt, error = i.error,
                 next_attempt_at = now() + make_interval(secs => i.delay), result = i.state
             FROM input i
             WHERE cardinality($16::bigint[]) > 0 AND a.id = ANY ($16::bigint[])
               AND a.id = i.attempt_id
         ),
         moved AS (
             UPDATE dispatches p SET
             state = i.state, state_changed_at = now(),
             lease_owner = NULL, lease_expires_at = NULL,
             next_attempt_at = CASE WHEN i.delay IS NULL THEN p.next_attempt_at
                                    ELSE now() + make_interval(secs => i.delay) END,
             completed_at = CASE WHEN i.state = 'completed' THEN now() END,
             last_error = i.reason,
             dead_reason = CASE WHEN i.state = 'dead' THEN i.reason END,
             response_status = coalesce(i.response_status::smallint, p.response_status),
             response_content_type = CASE WHEN i.response_status IS NULL
                                          THEN p.response_content_type
                                          ELSE i.response_content_type END,
             response_body = coalesce(i.response_body, p.response_body)
             FROM input i
             WHERE p.event_id = i.event_id AND p.destination = i.destination
               AND p.state = i.leaving AND p.lease_owner = i.holder
             -- `forced_by` as it was before this statement: forced and not
             -- completed since, and a processing dispatch's `completed_at`
             -- is always NULL (a force clears it; only completing sets it).
             RETURNING p.event_id, p.destination, i.holder, i.attempt_id, i.number, i.status,
                       i.latency_ms, i.excerpt, i.error, i.delay, i.state,
                       CASE WHEN p.forced_at IS NOT NULL THEN p.forced_by END AS forced_by
         ),
         -- Only while its holder held the lease: a holder that lost it (its
         -- attempt was recorded as lost by the takeover) or a retry of a
         -- recording already committed writes nothing. `forced_by` as the
         -- dispatch was before this statement.
         written AS (
             INSERT INTO attempts (event_id, destination, number, worker, started_at, finished_at,
                                   status, latency_ms, response_excerpt, error, next_attempt_at,
                                   result, forced_by)
             SELECT m.event_id, m.destination, m.number, m.holder,
                    now() - make_interval(secs => m.latency_ms / 1000.0), now(), m.status,
                    m.latency_ms, m.excerpt, m.error, now() + make_interval(secs => m.delay),
                    m.state, m.forced_by
             FROM moved m
             WHERE m.attempt_id IS NULL
         )
         SELECT event_id AS \"event_id!\", destination AS \"destination!\" FROM moved",
&holders as _,
done.iter().map(|d| d.leased.event_id).collect::<Vec<_>>() as _,
done.iter().map(|d| d.leased.attempt_id).collect::<Vec<_>>() as _,
done.iter().map(|d| d.record.status.map(i32::from)).collect::<Vec<_>>() as _,
done.iter().map(|d| d.record.latency_ms).collect::<Vec<_>>() as _,
done.iter().map(|d| d.record.response_excerpt.as_deref()).collect::<Vec<_>>() as _,
done.iter().map(|d| d.record.error.as_deref()).collect::<Vec<_>>() as _,
delays as _,
states as _,
reasons as _,
done.iter().map(|d| kept(d).map(|r| i32::from(r.status))).collect::<Vec<_>>() as _,
done.iter().map(|d| kept(d).and_then(|r| r.content_type.as_deref())).collect::<Vec<_>>() as _,
done.iter().map(|d| kept(d).map(|r| r.body.as_slice())).collect::<Vec<_>>() as _,
&done.iter().map(|d| d.leased.attempt).collect::<Vec<_>>(),
&done.iter().map(|d| d.leased.destination.as_str()).collect::<Vec<_>>() as _,
&done.iter().filter_map(|d| d.leased.attempt_id).collect::<Vec<_>>(),
)
    .fetch_all(conn)
    .await?;
    Ok(moved
        .into_iter()
        .map(|r| (r.event_id, r.destination))
        .collect())
}

/// Settles a sync claim that needs no destination (Discord's PING), storing
/// the answer so that duplicates get it too.
pub async fn complete_inline(
    pool: &PgPool,
    event_id: i64,
    lease_owner: &str,
    response: &StoredResponse,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE dispatches SET state = 'completed', state_changed_at = now(),
             completed_at = now(), lease_owner = NULL, lease_expires_at = NULL,
             response_status = $3, response_content_type = $4, response_body = $5
         WHERE event_id = $1 AND lease_owner = $2 AND state = 'processing'",
        event_id,
        lease_owner,
        response.status,
        response.content_type.as_deref(),
        &response.body
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Dispatches waiting for a destination `source`'s config no longer names
/// (a destination renamed, or the events of a source that had none, kept
/// under `default`) are adopted by the destinations it names now: each
/// that lacks a dispatch of the event gets one, queued, and the orphan
/// goes. An orphan whose event every named destination has already stays
/// (a destination taken out of the config for a while keeps its backlog).
/// Never one whose holder's lease still runs: a process on the old config
/// may be forwarding it. Filters are not applied to adopted events: their
/// type was not taken at their claim. Returns how many dispatches were made.
pub async fn adopt_orphans(
    pool: &PgPool,
    source: &str,
    destinations: &[&str],
) -> Result<u64, sqlx::Error> {
    if destinations.is_empty() {
        return Ok(0);
    }
    let adopted: i64 = sqlx::query_scalar!(
        r#"WITH orphans AS (
             SELECT p.event_id, p.destination FROM dispatches p
             WHERE p.source = $1 AND p.destination <> ALL ($2)
               AND (p.state IN ('queued', 'retrying')
                    OR (p.state = 'processing' AND p.lease_expires_at < now()))
             FOR UPDATE SKIP LOCKED
         ),
         adopted AS (
             INSERT INTO dispatches (event_id, destination, source, state)
             SELECT o.event_id, d.name, $1, 'queued'
             FROM (SELECT DISTINCT event_id FROM orphans) o, unnest($2::text[]) AS d(name)
             ON CONFLICT (event_id, destination) DO NOTHING
             RETURNING event_id
         ),
         gone AS (
             DELETE FROM dispatches p USING orphans o
             WHERE p.event_id = o.event_id AND p.destination = o.destination
               AND o.event_id IN (SELECT event_id FROM adopted)
         )
         SELECT count(*) AS "count!" FROM adopted"#,
        source,
        destinations as _
    )
    .fetch_one(pool)
    .await?;
    Ok(adopted as u64)
}
