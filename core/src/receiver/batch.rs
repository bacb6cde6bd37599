//! Group commit for ack-mode claims. Concurrent deliveries are claimed in
//! shared transactions: one commit (one disk sync) makes a whole batch
//! durable, and each delivery is answered only after the commit that holds
//! it. A batch is one statement whatever its size: every key is claimed, or
//! its stored event locked and counted, in key order, so two batches waiting
//! on each other's keys can never deadlock.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnection;
use sqlx::{Connection, PgPool};
use tokio::sync::{mpsc, oneshot, Mutex, Notify};

use super::claim::{Claimed, Outcome};
use crate::db::own::OwnConnection;
use crate::events::{self, BatchClaim, Leased};

/// Most claims in one transaction: bigger batches add latency, not throughput.
pub const MAX_BATCH: usize = 64;

/// A batch this size commits at once, even beside another one in flight...
const GATHER: usize = 8;

/// ...or this size, while the recent batches held fewer than
/// `LIGHT_LOAD_BELOW` deliveries on average (see `gather`).
const GATHER_LIGHT: usize = 4;
const LIGHT_LOAD_BELOW: usize = 6;

/// The longest a small batch waits for another one in flight: a batch stuck
/// on a row lock must not hold the rest back for long.
const GATHER_WAIT: Duration = Duration::from_millis(10);

/// The longest a batch's statement may take before its deliveries are
/// answered 503 (the provider retries): connecting plus this stays under the
/// spec's 5 s for an unreachable database.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a batch that handed claims to the workers waits for its
/// statement's outcome after answering 503 at `STATEMENT_TIMEOUT`: if it
/// committed, its events are leased to this process and must reach the
/// workers, not wait for their lease to expire.
pub const OUTCOME_WAIT: Duration = Duration::from_secs(10);

/// Where a new ack-mode event may go straight to this process's workers,
/// leased at its claim (`processing::handoff`): no lease statement to find
/// it, no row update to take it.
pub trait Handoff: Send + Sync {
    /// Who holds the leases such claims write.
    fn owner(&self) -> &str;
    /// Room for one new event's dispatch to `destination` of `source`: the
    /// lease, in seconds, it is claimed under; None: it is claimed `queued`.
    fn reserve(&self, source: &str, destination: &str) -> Option<f64>;
    /// Reservations that took no event: the key was held, or the batch failed.
    fn unreserve(&self, count: usize);
    /// A committed claim's dispatch leased to `owner`, in place of its
    /// reservation.
    fn deliver(&self, leased: Leased);
    /// A committed claim of `source` left `queued`.
    fn queued(&self, source: &str);
}

/// A verified delivery waiting for its batch, owning what it records.
pub struct PendingClaim {
    pub source: String,
    pub idem_key: String,
    pub verification: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    pub headers: serde_json::Value,
    pub body: Vec<u8>,
    pub remote_addr: Option<String>,
    pub started: Instant,
    /// The replay guard's digest of the signed content, where it applies.
    pub replay_digest: Option<Vec<u8>>,
    /// Where its event goes.
    pub plan: Vec<super::claim::Route>,
    /// The provider's event type, where a destination's filter needed it.
    pub event_type: Option<String>,
}

/// A claim in the queue, with where its answer goes and since when it waits.
struct Job {
    claim: PendingClaim,
    reply: oneshot::Sender<Result<Claimed, ClaimError>>,
    queued: Instant,
}

/// Claims waiting for a batch: beyond this many, a delivery is answered 503
/// at once (shed) instead of queueing without bound behind a slow database.
pub const MAX_WAITING: usize = 512;

/// A claim that waited this long for a batch is answered 503 unclaimed: its
/// provider is better served retrying than waiting on. Kept so that the
/// wait plus a batch's statement stays under the spec's 5 s.
pub const MAX_WAIT: Duration = Duration::from_secs(2);

/// Why a delivery could not be claimed. Every one is answered 503, so the
/// provider retries; none of the delivery was stored.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The committers have stopped: the process is shutting down.
    #[error("the claim committers have stopped")]
    Stopped,
    /// The database did not answer within the limit.
    #[error("the database did not answer within {0:?}")]
    TimedOut(Duration),
    /// The statement of the batch holding this delivery failed.
    #[error("claim batch failed: {0}")]
    BatchFailed(String),
    /// Too many claims wait, or this one waited too long: load is shed.
    #[error("the claim path is saturated")]
    Saturated,
}

/// Hands claims to a few committer tasks; cheap to clone.
#[derive(Clone)]
pub struct ClaimBatcher {
    jobs: mpsc::Sender<Job>,
}

impl ClaimBatcher {
    /// Starts `committers` tasks, each with its own transaction at a time, on
    /// its own connection to `pool`'s database.
    pub fn start(pool: PgPool, committers: usize) -> Self {
        Self::start_with(pool, committers, None)
    }

    /// `start`, new events handed to `handoff` where it has room.
    pub fn with_handoff(pool: PgPool, committers: usize, handoff: Arc<dyn Handoff>) -> Self {
        Self::start_with(pool, committers, Some(handoff))
    }

    fn start_with(pool: PgPool, committers: usize, handoff: Option<Arc<dyn Handoff>>) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>(MAX_WAITING);
        let shared = Arc::new(Shared {
            waiting: Mutex::new(Waiting {
                queue,
                held: VecDeque::new(),
            }),
            claiming: std::sync::Mutex::new(HashSet::new()),
            in_flight: AtomicUsize::new(0),
            recent: RecentBatches::default(),
            breakages: AtomicU64::new(0),
            finished: Notify::new(),
            handoff,
        });
        for _ in 0..committers.max(1) {
            tokio::spawn(commit_loop(pool.clone(), shared.clone()));
        }
        Self { jobs }
    }

    /// Claims in the next shared transaction; returns once it committed, or
    /// at once with `Saturated` when `MAX_WAITING` claims wait already.
    pub async fn claim(&self, claim: PendingClaim) -> Result<Claimed, ClaimError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            claim,
            reply,
            queued: Instant::now(),
        };
        self.jobs.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => shed("queue_full"),
            mpsc::error::TrySendError::Closed(_) => ClaimError::Stopped,
        })?;
        answer.await.map_err(|_| ClaimError::Stopped)?
    }
}

fn shed(reason: &'static str) -> ClaimError {
    crate::telemetry::metrics::shed(reason);
    ClaimError::Saturated
}

/// What the committers share: the waiting deliveries, the keys of the
/// batches on their way to a commit, and how many those are.
struct Shared {
    waiting: Mutex<Waiting>,
    claiming: std::sync::Mutex<HashSet<Key>>,
    in_flight: AtomicUsize,
    recent: RecentBatches,
    /// Signalled whenever a batch's statement has returned.
    finished: Notify,
    /// Bumped when a committer's connection broke: the database went away,
    /// so the others' connections are checked before their next batch.
    breakages: AtomicU64,
    handoff: Option<Arc<dyn Handoff>>,
}

/// A moving average of batch sizes (each new batch weighs 1/16), kept in
/// sixteenths. Only the gatherer holding `Shared::waiting` records.
#[derive(Default)]
struct RecentBatches(AtomicUsize);

impl RecentBatches {
    fn record(&self, size: usize) {
        let sixteenths = self.0.load(Ordering::Relaxed);
        self.0
            .store(sixteenths - sixteenths / 16 + size, Ordering::Relaxed);
    }

    /// The size a batch needs to commit beside another one in flight.
    fn gather(&self) -> usize {
        if self.0.load(Ordering::Relaxed) < LIGHT_LOAD_BELOW * 16 {
            GATHER_LIGHT
        } else {
            GATHER
        }
    }
}

/// A source and an idempotency key.
type Key = (String, String);

struct Waiting {
    queue: mpsc::Receiver<Job>,
    /// Deliveries of a key that a batch in flight holds, kept for a later batch.
    held: VecDeque<Job>,
}

fn key_of(job: &Job) -> Key {
    (job.claim.source.clone(), job.claim.idem_key.clone())
}

/// A committer keeps its own connection rather than a pool's (`db::own`).
/// A connection that failed is replaced for the next batch, so the receiver
/// heals when the database returns.
async fn commit_loop(pool: PgPool, shared: Arc<Shared>) {
    let mut connection = Committer {
        conn: OwnConnection::new(&pool),
        breakages: 0,
    };
    loop {
        let Some((batch, keys)) = gather(&shared).await else {
            return;
        };
        commit_batch(&mut connection, &shared, batch).await;
        {
            let mut claiming = shared.claiming.lock().expect("claiming lock");
            for key in &keys {
                claiming.remove(key);
            }
        }
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        shared.finished.notify_waiters();
    }
}

/// The next batch and its keys: whatever waits, once a delivery is there.
///
/// While another batch is on its way to a commit, a small batch keeps
/// gathering until that one returns, it holds `GATHER` deliveries or
/// `GATHER_WAIT` passed: each commit is a disk sync that PostgreSQL
/// serialises, so a second small batch would only wait for the first one's
/// sync and then pay for its own. Under heavy load batches fill at once and
/// commit side by side (bench/README, "Why the tuning constants are what
/// they are").
///
/// Under light load (recent batches under `LIGHT_LOAD_BELOW` on average)
/// the database has cores to spare, and `GATHER_LIGHT` deliveries may
/// commit beside the batch in flight: with few clients, half of them
/// waiting a whole commit for the other half cost more than a second
/// statement.
///
/// A delivery whose key a batch in flight is claiming waits for a later
/// batch: in this one its row lock would hold every other delivery until
/// that batch commits (a provider's quick retry, or its copy sent twice).
/// Claims stay exactly-once either way; this only keeps batches apart.
/// Counts the batch in flight.
async fn gather(shared: &Shared) -> Option<(Vec<Job>, HashSet<Key>)> {
    let mut waiting = shared.waiting.lock().await;
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut keys: HashSet<Key> = HashSet::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    let admit =
        |job: Job, batch: &mut Vec<Job>, keys: &mut HashSet<Key>, held: &mut VecDeque<Job>| {
            if job.queued.elapsed() > MAX_WAIT {
                let _ = job.reply.send(Err(shed("waited_too_long")));
                return;
            }
            let key = key_of(&job);
            if !keys.contains(&key)
                && shared
                    .claiming
                    .lock()
                    .expect("claiming lock")
                    .contains(&key)
            {
                held.push_back(job);
            } else {
                keys.insert(key);
                batch.push(job);
            }
        };
    loop {
        let Waiting { queue, held } = &mut *waiting;
        for _ in 0..held.len() {
            if batch.len() >= MAX_BATCH {
                break;
            }
            if let Some(job) = held.pop_front() {
                admit(job, &mut batch, &mut keys, held);
            }
        }
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => admit(job, &mut batch, &mut keys, held),
                Err(_) => break,
            }
        }
        if !batch.is_empty() && deadline.is_none() {
            deadline = Some(tokio::time::Instant::now() + GATHER_WAIT);
        }
        let finished = shared.finished.notified();
        tokio::pin!(finished);
        finished.as_mut().enable();
        // Holding only deliveries of keys in flight: a batch that returned
        // before we listened woke nobody, so look again now that we listen
        // (else this gather would sleep until the next delivery arrived).
        if batch.is_empty() && !held.is_empty() {
            let claiming = shared.claiming.lock().expect("claiming lock");
            if held.iter().any(|job| !claiming.contains(&key_of(job))) {
                continue;
            }
        }
        if !batch.is_empty()
            && (batch.len() >= shared.recent.gather()
                || shared.in_flight.load(Ordering::SeqCst) == 0)
        {
            break;
        }
        let until =
            deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            job = queue.recv() => match job {
                Some(job) => admit(job, &mut batch, &mut keys, held),
                None if batch.is_empty() && held.is_empty() => return None,
                None => {}
            },
            _ = &mut finished => {}
            _ = tokio::time::sleep_until(until), if deadline.is_some() => break,
        }
    }
    shared
        .claiming
        .lock()
        .expect("claiming lock")
        .extend(keys.iter().cloned());
    shared.in_flight.fetch_add(1, Ordering::SeqCst);
    shared.recent.record(batch.len());
    Some((batch, keys))
}

/// A committer's connection, with what tells whether it may have died.
struct Committer {
    conn: OwnConnection,
    /// `Shared::breakages` when it was last known good.
    breakages: u64,
}

impl Committer {
    /// The open connection, checked first if another committer's broke.
    async fn ready(&mut self, shared: &Shared) -> Result<&mut PgConnection, ClaimError> {
        let breakages = shared.breakages.load(Ordering::SeqCst);
        let suspect = self.breakages != breakages;
        self.breakages = breakages;
        Ok(self.conn.ready(suspect).await?)
    }
}

/// Claims a batch: one statement, its own transaction; with a replay guard
/// first, in one transaction with it, when a delivery carries a digest of
/// its signed content (`events::guard`): a delivery repeating another
/// event's content is claimed under that event's key, so it is its
/// duplicate, recorded under the key it was posted with.
async fn claim_all(
    conn: &mut PgConnection,
    pending: &[PendingClaim],
    handoff: &Reserving<'_>,
) -> Result<Vec<events::BatchRow>, sqlx::Error> {
    if pending.iter().all(|p| p.replay_digest.is_none()) {
        let claim_keys: Vec<&str> = pending.iter().map(|p| p.idem_key.as_str()).collect();
        let notes = vec![None; pending.len()];
        let batch = batch_claim(pending, &claim_keys, &notes, handoff);
        return events::claim_batch(conn, &batch).await;
    }
    let mut tx = conn.begin().await?;
    // Distinct digests in one order; the first delivery bringing one proposes its key.
    let mut digests: Vec<(&str, &[u8], &str)> = pending
        .iter()
        .filter_map(|p| {
            let digest = p.replay_digest.as_deref()?;
            Some((p.source.as_str(), digest, p.idem_key.as_str()))
        })
        .collect();
    digests.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    digests.dedup_by(|a, b| (a.0, a.1) == (b.0, b.1));
    let sources: Vec<&str> = digests.iter().map(|d| d.0).collect();
    let sums: Vec<&[u8]> = digests.iter().map(|d| d.1).collect();
    let proposed: Vec<&str> = digests.iter().map(|d| d.2).collect();
    let found = events::guard(&mut tx, &sources, &sums, &proposed).await?;
    let key_of: std::collections::HashMap<(&str, &[u8]), &str> = found
        .iter()
        .map(|(source, digest, key)| ((source.as_str(), digest.as_slice()), key.as_str()))
        .collect();
    let claim_keys: Vec<&str> = pending
        .iter()
        .map(|p| {
            p.replay_digest
                .as_deref()
                .and_then(|digest| key_of.get(&(p.source.as_str(), digest)).copied())
                .unwrap_or(p.idem_key.as_str())
        })
        .collect();
    let notes: Vec<Option<String>> = pending
        .iter()
        .zip(&claim_keys)
        .map(|(p, &key)| {
            (key != p.idem_key).then(|| format!("{}; {}", p.verification, replay_note(key)))
        })
        .collect();
    let batch = batch_claim(pending, &claim_keys, &notes, handoff);
    let rows = events::claim_batch(&mut tx, &batch).await?;
    tx.commit().await?;
    Ok(rows)
}

/// Why a delivery was taken for a duplicate though its key is new.
pub fn replay_note(key: &str) -> String {
    format!("same signed content as event {key}: a replay, not forwarded")
}

/// The statement's arrays: each delivery claimed under `claim_keys` (its
/// own key, or that of the event whose signed content it repeats), with
/// `notes` replacing its verification text where given.
fn batch_claim<'a>(
    pending: &'a [PendingClaim],
    claim_keys: &[&'a str],
    notes: &'a [Option<String>],
    handoff: &'a Reserving<'_>,
) -> BatchClaim<'a> {
    let n = pending.len();
    // The batch's distinct keys in one fixed order: every batch locks its
    // keys in that order, so two batches never deadlock.
    let mut keys: Vec<(&str, &str)> = pending
        .iter()
        .zip(claim_keys)
        .map(|(p, &key)| (p.source.as_str(), key))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let key_at: Vec<usize> = pending
        .iter()
        .zip(claim_keys)
        .map(|(p, &key)| {
            keys.binary_search(&(p.source.as_str(), key))
                .expect("every delivery's key is among the keys")
        })
        .collect();
    let mut key_copies = vec![0i32; keys.len()];
    // The first copy of each key is the one that may claim it.
    let mut first = Vec::with_capacity(n);
    for &k in &key_at {
        first.push(key_copies[k] == 0);
        key_copies[k] += 1;
    }
    let copies: Vec<i32> = key_at.iter().map(|&k| key_copies[k]).collect();
    // Each key's plan is its first delivery's: the copies are one event.
    let mut key_types = vec![None; keys.len()];
    let mut planned = vec![false; keys.len()];
    let (mut plan_keys, mut plan_destinations, mut plan_wanted, mut plan_leases) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut plan_ordering_keys = Vec::new();
    for (p, &k) in pending.iter().zip(&key_at) {
        if std::mem::replace(&mut planned[k], true) {
            continue;
        }
        key_types[k] = p.event_type.as_deref();
        for route in &p.plan {
            plan_keys.push(k as i32 + 1);
            plan_destinations.push(route.destination.as_str());
            plan_wanted.push(route.wanted);
            plan_ordering_keys.push(route.ordering_key.as_deref());
            plan_leases.push(
                route
                    .wanted
                    .then(|| handoff.reserve(keys[k].0, &route.destination))
                    .flatten(),
            );
        }
    }
    let mut batch = BatchClaim {
        key_types,
        plan_keys,
        plan_destinations,
        plan_wanted,
        plan_leases,
        plan_ordering_keys,
        lease_owner: handoff.owner(),
        key_sources: keys.iter().map(|k| k.0).collect(),
        key_ids: keys.iter().map(|k| k.1).collect(),
        key_copies,
        sources: Vec::with_capacity(n),
        idem_keys: claim_keys.to_vec(),
        posted_keys: Vec::with_capacity(n),
        first,
        copies,
        verifications: Vec::with_capacity(n),
        queries: Vec::with_capacity(n),
        content_types: Vec::with_capacity(n),
        headers: Vec::with_capacity(n),
        bodies: Vec::with_capacity(n),
        sizes: Vec::with_capacity(n),
        remote_addrs: Vec::with_capacity(n),
        ack_micros: Vec::with_capacity(n),
    };
    for (p, note) in pending.iter().zip(notes) {
        batch
            .sizes
            .push(i32::try_from(p.body.len()).unwrap_or(i32::MAX));
        batch
            .ack_micros
            .push(i32::try_from(p.started.elapsed().as_micros()).unwrap_or(i32::MAX));
        batch.sources.push(p.source.as_str());
        batch.posted_keys.push(p.idem_key.as_str());
        batch
            .verifications
            .push(note.as_deref().unwrap_or(p.verification.as_str()));
        batch.queries.push(p.query.as_deref());
        batch.content_types.push(p.content_type.as_deref());
        batch.headers.push(&p.headers);
        batch.bodies.push(p.body.as_slice());
        batch.remote_addrs.push(p.remote_addr.as_deref());
    }
    batch
}

/// A batch's reservations with the hand-off, counted so that every one
/// the claims did not use is returned.
struct Reserving<'a> {
    handoff: Option<&'a dyn Handoff>,
    reserved: AtomicUsize,
}

impl<'a> Reserving<'a> {
    fn new(handoff: Option<&'a dyn Handoff>) -> Self {
        Self {
            handoff,
            reserved: AtomicUsize::new(0),
        }
    }

    fn owner(&self) -> &'a str {
        self.handoff.map_or("", |h| h.owner())
    }

    fn any(&self) -> bool {
        self.reserved.load(Ordering::Relaxed) > 0
    }

    fn reserve(&self, source: &str, destination: &str) -> Option<f64> {
        let lease = self.handoff?.reserve(source, destination)?;
        self.reserved.fetch_add(1, Ordering::Relaxed);
        Some(lease)
    }

    /// Returns the reservations beyond the `used` ones.
    fn settle(&self, used: usize) {
        let reserved = self.reserved.swap(0, Ordering::Relaxed);
        if let Some(handoff) = self.handoff {
            if reserved > used {
                handoff.unreserve(reserved - used);
            }
        }
    }
}

/// One batch in one statement, its own transaction. The first copy of each
/// key in the batch claims it (a new event holding as many receipts as the
/// batch has copies) or, when the key is stored already, the event is locked
/// and its receive count bumped (`ON CONFLICT DO UPDATE` waits for a
/// concurrent claim of the same key and then counts on it). Every copy is
/// recorded: the claimant as `claimed`, the others with the event's state as
/// outcome. Each delivery is answered once the statement has committed; if it
/// fails, every delivery of the batch gets the error (503) and nothing of them
/// was stored.
async fn commit_batch(connection: &mut Committer, shared: &Shared, batch: Vec<Job>) {
    let (mut pending, replies): (Vec<PendingClaim>, Vec<_>) =
        batch.into_iter().map(|job| (job.claim, job.reply)).unzip();
    let n = pending.len();
    metrics::histogram!("replaysafe_claim_batch_size").record(n as f64);
    let sent = Instant::now();
    let reserving = Reserving::new(shared.handoff.as_deref());
    let mut replies: Vec<_> = replies.into_iter().map(Some).collect();
    let answered = match connection.ready(shared).await {
        Ok(conn) => {
            let claimed = claim_all(conn, &pending, &reserving);
            tokio::pin!(claimed);
            match tokio::time::timeout(STATEMENT_TIMEOUT, &mut claimed).await {
                Ok(rows) => rows.map_err(ClaimError::from),
                Err(_) if reserving.any() => {
                    for reply in replies.iter_mut().filter_map(Option::take) {
                        let _ = reply.send(Err(ClaimError::TimedOut(STATEMENT_TIMEOUT)));
                    }
                    match tokio::time::timeout(OUTCOME_WAIT - STATEMENT_TIMEOUT, claimed).await {
                        Ok(rows) => rows.map_err(ClaimError::from),
                        Err(_) => Err(ClaimError::TimedOut(OUTCOME_WAIT)),
                    }
                }
                Err(_) => Err(ClaimError::TimedOut(STATEMENT_TIMEOUT)),
            }
        }
        Err(e) => Err(e),
    };
    // A connection that broke (`OwnConnection::settle`) may not be alone:
    // the other committers check theirs.
    let broke = match &answered {
        Ok(_) => connection.conn.settle(None),
        Err(ClaimError::Database(e)) => connection.conn.settle(Some(e)),
        Err(_) => connection.conn.close(),
    };
    if broke {
        shared.breakages.fetch_add(1, Ordering::SeqCst);
    }
    metrics::histogram!("replaysafe_claim_commit_seconds").record(sent.elapsed());
    let mut failure = None;
    let mut handed = 0;
    match answered {
        Ok(rows) => {
            for events::BatchRow {
                ord,
                delivery_id,
                event_id,
                outcome,
                handed: handed_over,
                queued,
                claim_key,
            } in rows
            {
                let at = usize::try_from(ord - 1).ok().filter(|&at| at < n);
                if let (Some(handoff), Some(at)) = (&shared.handoff, at) {
                    if outcome == Outcome::Claimed {
                        let claim = &mut pending[at];
                        let handed_over = handed_over.unwrap_or_default();
                        let received = crate::telemetry::metrics::unix_now()
                            - claim.started.elapsed().as_secs_f64();
                        // The payload is moved to the last dispatch, copied to the others.
                        let count = handed_over.len();
                        for (i, destination) in handed_over.into_iter().enumerate() {
                            handed += 1;
                            let last = i + 1 == count;
                            let take =
                                |v: &mut Vec<u8>| if last { std::mem::take(v) } else { v.clone() };
                            handoff.deliver(Leased {
                                event_id,
                                destination,
                                attempt_id: None,
                                source: claim.source.clone(),
                                idem_key: claim_key.clone(),
                                attempt: 1,
                                body: Some(take(&mut claim.body)),
                                content_type: claim.content_type.clone(),
                                headers: Some(if last {
                                    claim.headers.take()
                                } else {
                                    claim.headers.clone()
                                }),
                                forced: false,
                                received,
                            });
                        }
                        if queued {
                            handoff.queued(&claim.source);
                        }
                    }
                }
                if let Some(reply) = at.and_then(|at| replies.get_mut(at)).and_then(Option::take) {
                    let _ = reply.send(Ok(Claimed {
                        outcome,
                        event_id,
                        delivery_id,
                        stored_response: None,
                    }));
                }
            }
        }
        Err(e) => {
            static THROTTLE: crate::telemetry::Throttle =
                crate::telemetry::Throttle::new(Duration::from_secs(1));
            if let Some(held_back) = THROTTLE.allow() {
                tracing::warn!(error = %e, size = n, held_back, "claim batch failed");
            }
            failure = Some(e.to_string());
        }
    }
    reserving.settle(handed);
    // Only a failed statement leaves a delivery unanswered: none of it was stored.
    let failure = failure.unwrap_or_else(|| "a delivery came back unanswered".into());
    for reply in replies.into_iter().flatten() {
        let _ = reply.send(Err(ClaimError::BatchFailed(failure.clone())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_gather_fewer_while_recent_ones_were_small() {
        let recent = RecentBatches::default();
        assert_eq!(recent.gather(), GATHER_LIGHT, "a quiet start is light load");
        for _ in 0..64 {
            recent.record(12);
        }
        assert_eq!(recent.gather(), GATHER, "batches of 12 are heavy load");
        for _ in 0..8 {
            recent.record(3);
        }
        assert_eq!(
            recent.gather(),
            GATHER,
            "a few small batches do not flip it"
        );
        for _ in 0..64 {
            recent.record(3);
        }
        assert_eq!(recent.gather(), GATHER_LIGHT);
    }
}
