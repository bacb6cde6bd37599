//! The worker pool. Each worker leases a batch of due events, forwards them
//! with no lock held, and records each outcome as it arrives. Workers wake
//! when this process queues work (`wake`: once per burst, and one lease
//! statement at a time per process), and poll for retries due and for work
//! other processes claimed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::handoff::Inbox;
use super::recorder::Recorder;
use super::rests::{self, Rests, UNREACHABLE_MAX};
use super::retry::{classify, RetryPolicy, Verdict};
use super::wake::Wake;
use super::{forward, Services};
use crate::config::{Config, Mode};
use crate::db::own::OwnConnection;
use crate::events::{
    self, AttemptRecord, Done, Leased, Next, Runnable, StoredResponse, LEASE_MARGIN,
};

/// How often idle workers look for work they were not told about.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How often a process leases for each destination whose attempts are
/// limited: a rate's burst is its worth of one pace.
pub const PACE: Duration = Duration::from_millis(50);

/// Most events one worker forwards at once (a lease takes this many for
/// each worker waiting for it).
pub const LEASE_BATCH: i64 = 32;

/// How often the pool reads which sources are paused.
const PAUSES_READ_EVERY: Duration = Duration::from_secs(1);

/// How long finished attempts wait for their batchmates before they are
/// recorded together: one statement per attempt cost forwarding most of its
/// throughput (bench/README, "Why the tuning constants are what they are").
const RECORD_WINDOW: Duration = Duration::from_millis(20);

mod health;
mod pace;
mod probes;

/// Why a batch stopped: its lease's statement failed, or the attempts it
/// forwarded could not be recorded (their leases expire and their
/// successors decide).
#[derive(Debug)]
pub enum WorkError {
    Database(sqlx::Error),
    Unrecorded(String),
}

impl std::fmt::Display for WorkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkError::Database(e) => write!(f, "{e}"),
            WorkError::Unrecorded(e) => write!(f, "recording attempts: {e}"),
        }
    }
}

impl std::error::Error for WorkError {}

impl From<sqlx::Error> for WorkError {
    fn from(e: sqlx::Error) -> Self {
        WorkError::Database(e)
    }
}

use health::Health;

#[derive(Clone)]
pub struct Workers {
    pub pool: PgPool,
    pub config: Arc<Config>,
    pub client: reqwest::Client,
    pub policy: Arc<RetryPolicy>,
    /// Signalled when this process queues work.
    pub wake: Arc<Wake>,
    /// One lease statement at a time in this pool (its clones share it): a
    /// second one at once would only find what the first leaves, and both
    /// cost the database. It runs on a connection of its own (`db::own`).
    leasing: Arc<tokio::sync::Mutex<OwnConnection>>,
    /// Workers waiting for `leasing`: a lease takes a batch for each of
    /// them too (one statement, not one each, while a backlog lasts).
    behind: Arc<AtomicUsize>,
    /// Batches a lease took for the workers behind it, with their holder;
    /// each such worker takes one before it would lease.
    spare: Arc<std::sync::Mutex<Vec<Spare>>>,
    /// How often idle workers lease without being woken (`POLL_INTERVAL`).
    pub poll: Duration,
    /// Sources whose destination is down, and until when they rest.
    rests: Arc<Rests>,
    breakers: Arc<super::breakers::Breakers>,
    /// New events this process claimed, leased to the workers at their claim.
    inbox: Arc<Inbox>,
    /// Records every worker's finished attempts together.
    recorder: Recorder,
    /// The longest rest of an unreachable destination (`UNREACHABLE_MAX`).
    pub unreachable_max: Duration,
    /// How long a lease outlives its source's attempt timeout.
    pub lease_margin: Duration,
    /// How long a failed sync-mode event waits for its provider's retry
    /// before the workers adopt it.
    pub request_grace: Duration,
    /// The database's health as these workers saw it.
    health: Arc<std::sync::Mutex<Health>>,
    /// Cancelled when the process stops: unrecorded attempts are given up
    /// a margin later (`record`).
    stopping: CancellationToken,
}

/// A batch leased for a worker behind the lease, and its holder.
type Spare = (String, Vec<Leased>);

impl Workers {
    pub fn new(services: &Services) -> Self {
        Self {
            pool: services.pool.clone(),
            config: services.config.clone(),
            client: services.client.clone(),
            policy: services.policy.clone(),
            wake: services.wake.clone(),
            leasing: Arc::new(tokio::sync::Mutex::new(OwnConnection::new(&services.pool))),
            behind: Default::default(),
            spare: Default::default(),
            poll: POLL_INTERVAL,
            rests: services.rests.clone(),
            breakers: services.breakers.clone(),
            inbox: services.inbox.clone(),
            recorder: services.recorder.clone(),
            unreachable_max: UNREACHABLE_MAX,
            lease_margin: LEASE_MARGIN,
            request_grace: events::REQUEST_GRACE,
            health: Default::default(),
            stopping: CancellationToken::new(),
        }
    }

    /// Starts `count` workers; they stop, finishing any attempt in flight, when
    /// `shutdown` is cancelled. With any, this process's new events are
    /// handed to them at their claim.
    pub fn spawn(&self, count: usize, shutdown: CancellationToken) -> JoinSet<()> {
        let process = format!("{}:{}", hostname(), std::process::id());
        let mut set = JoinSet::new();
        if count > 0 {
            // Stopping with the workers: their recordings give up with them.
            let stopping = Self {
                stopping: shutdown.clone(),
                ..self.clone()
            };
            set.spawn(stopping.clone().adopt_orphans());
            set.spawn(stopping.clone().pace(process.clone(), shutdown.clone()));
            set.spawn(stopping.follow_pauses(shutdown.clone()));
            set.spawn(self.clone().close_inbox_at(shutdown.clone()));
        }
        for n in 0..count {
            let worker = Self {
                stopping: shutdown.clone(),
                ..self.clone()
            };
            let id = format!("{process}:{n}:{:08x}", rand::random::<u32>());
            let shutdown = shutdown.clone();
            set.spawn(async move { worker.run(id, shutdown).await });
        }
        set
    }

    /// Once at start: dispatches to destinations the config no longer
    /// names go to the ones it names (`events::adopt_orphans`).
    pub async fn adopt_orphans(self) {
        for s in &self.config.sources {
            let names: Vec<&str> = s.destinations.iter().map(|d| d.name.as_str()).collect();
            match events::adopt_orphans(&self.pool, &s.slug, &names).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(source = %s.slug, dispatches = n, "events waiting for a destination no longer configured were given to the configured ones")
                }
                Err(e) => {
                    tracing::warn!(source = %s.slug, error = %e, "could not look for events waiting on a destination no longer configured")
                }
            }
        }
    }

    /// A pool whose lease statements do not wait for this one's, as
    /// another process's would not (tests race two of them).
    pub fn apart(&self) -> Self {
        Self {
            leasing: Arc::new(tokio::sync::Mutex::new(OwnConnection::new(&self.pool))),
            behind: Default::default(),
            spare: Default::default(),
            ..self.clone()
        }
    }

    async fn run(self, id: String, shutdown: CancellationToken) {
        let mut lease = true;
        // Polls keep their pace whatever else wakes the worker: retries
        // come due, and other processes queue work, unannounced.
        let mut next_poll = Instant::now();
        let mut failing = Failing::default();
        while !shutdown.is_cancelled() {
            // Events handed over at their claim first: they are leased already.
            let (handed, unbegun) = self.inbox.take(LEASE_BATCH as usize);
            let released = self.release_unbegun(unbegun).await;
            if !handed.is_empty() {
                let holder = self.inbox.owner_name().to_owned();
                match self.forward_batch(&holder, handed).await {
                    Ok(_) => failing.over(&id),
                    Err(e) => failing.again(&id, &e),
                }
                // Under a steady stream of claims a lease still runs when
                // due: the inbox must not starve retries and queued work.
                if !(lease || Instant::now() >= next_poll || self.wake.take()) {
                    continue;
                }
                lease = true;
            }
            if lease {
                next_poll = Instant::now() + self.poll;
                match self.run_batch(&id, Some(&shutdown)).await {
                    // Some were due: more may be (another process's lease
                    // may have skipped rows this one locked).
                    Ok(n) if n > 0 => {
                        failing.over(&id);
                        continue;
                    }
                    Ok(_) => failing.over(&id),
                    Err(e) => failing.again(&id, &e),
                }
            }
            // Woken, a worker leases only if the signal is still up: another
            // worker's lease since then covered the work it announced.
            lease = tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => self.wake.take(),
                _ = self.inbox.arrived(), if released => false,
                _ = tokio::time::sleep_until(next_poll) => true,
            };
        }
        self.release_spares().await;
    }

    /// At shutdown: batches leased for workers that stopped before taking
    /// them go back to `queued` (or, the database away, are taken over
    /// once their leases expire).
    async fn release_spares(&self) {
        let spares = std::mem::take(&mut *self.spare.lock().expect("never poisoned"));
        for (holder, batch) in spares {
            if let Err(e) = events::release_unbegun(&self.pool, &holder, &batch).await {
                tracing::warn!(error = %e, events = batch.len(), "could not release events leased for a stopped worker; they are taken over when their leases expire");
            }
        }
    }

    /// Handed-over events no attempt will begin for go back to `queued`,
    /// for a lease once their source can take them. Those that failed to go
    /// back wait in the inbox for the next try; returns false then.
    async fn release_unbegun(&self, unbegun: Vec<Leased>) -> bool {
        if unbegun.is_empty() {
            return true;
        }
        match events::release_unbegun(&self.pool, self.inbox.owner_name(), &unbegun).await {
            Ok(_) => {
                self.wake.work();
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, events = unbegun.len(), "could not release events not begun; will retry");
                self.inbox.put_back(unbegun);
                false
            }
        }
    }

    /// At shutdown: no more claims are handed over, and those waiting go
    /// back to `queued` once the claims on their way arrived.
    async fn close_inbox_at(self, shutdown: CancellationToken) {
        shutdown.cancelled().await;
        self.inbox.close();
        // Claims on their way end within the batcher's wait for an outcome.
        let settled_by =
            Instant::now() + crate::receiver::batch::OUTCOME_WAIT + Duration::from_secs(1);
        while self.inbox.reserved() > 0 && Instant::now() < settled_by {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A database that is down now gets a few tries; what is left is
        // taken over when its lease expires.
        for pause in [0, 100, 500, 1000, 2000] {
            tokio::time::sleep(Duration::from_millis(pause)).await;
            if self.release_unbegun(self.inbox.drain()).await {
                return;
            }
        }
    }

    /// Keeps the wake's paused sources as the database has them, so claims
    /// of a source an operator paused from any process wake nobody.
    async fn follow_pauses(self, shutdown: CancellationToken) {
        // The probes' forwards: finished (or given up) before this returns.
        let mut probes: JoinSet<()> = JoinSet::new();
        loop {
            match crate::db::sources::paused(&self.pool).await {
                Ok(paused) => {
                    self.wake.set_paused_sources(paused);
                    // Claims are handed over once the pauses are known.
                    if !shutdown.is_cancelled() {
                        self.inbox.open(self.lease_margin);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "reading paused sources failed; will retry"),
            }
            if let Err(e) = self.breakers.refresh(&self.pool).await {
                tracing::warn!(error = %e, "reading circuit breakers failed; will retry");
            }
            self.probe_breakers(&mut probes).await;
            while probes.try_join_next().is_some() {}
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(PAUSES_READ_EVERY) => {}
            }
        }
        while probes.join_next().await.is_some() {}
    }

    /// The destinations this process can forward to: of sources not paused
    /// as far as this pool knows, and not resting. The lease checks the pause in
    /// the database too; leaving out a source known paused here spares a
    /// lease that would scan its whole backlog to find nothing (and none at
    /// all runs when every source is paused).
    pub fn runnable(&self) -> Runnable {
        Runnable::new(
            self.config
                .sources
                .iter()
                .filter(|s| !self.wake.is_paused(&s.slug))
                .flat_map(|s| s.destinations.iter().map(move |d| (s, d)))
                .filter(|(s, d)| {
                    !d.is_gated()
                        && self.breakers.is_closed(&s.slug, &d.name)
                        && !self.rests.resting(&rests::key(&s.slug, &d.name))
                })
                .map(|(s, d)| {
                    (
                        s.slug.as_str(),
                        d.name.as_str(),
                        Duration::from_secs(d.timeout_secs),
                    )
                }),
            self.lease_margin,
        )
        .with_request_grace(self.request_grace)
        .with_takeover_grace(self.takeover_grace())
    }

    /// Leases up to `LEASE_BATCH` due events, forwards them concurrently and
    /// records each attempt as soon as it ends (those that end together in
    /// one statement), so a quick destination's success is never held back
    /// by a slow one past its own lease. Returns how many were leased (0
    /// when none was due). One lease statement per batch: leasing, not
    /// forwarding, was the cost.
    pub async fn run_once(&self, worker: &str) -> Result<usize, WorkError> {
        self.run_batch(worker, None).await
    }

    /// `run_once`, giving up its turn for the lease gate when `shutdown` is
    /// cancelled (workers queued behind a slow database must not lease new
    /// work after the signal).
    async fn run_batch(
        &self,
        worker: &str,
        shutdown: Option<&CancellationToken>,
    ) -> Result<usize, WorkError> {
        let (holder, leased) = {
            self.behind.fetch_add(1, Ordering::SeqCst);
            let gate = match shutdown {
                Some(shutdown) => tokio::select! {
                    gate = self.leasing.lock() => Some(gate),
                    _ = shutdown.cancelled() => None,
                },
                None => Some(self.leasing.lock().await),
            };
            self.behind.fetch_sub(1, Ordering::SeqCst);
            let Some(mut one_at_a_time) = gate else {
                return Ok(0);
            };
            if shutdown.is_some_and(CancellationToken::is_cancelled) {
                return Ok(0);
            }
            // The lease before this one took a batch for this worker.
            let spare = self.spare.lock().expect("never poisoned").pop();
            if let Some(spare) = spare {
                spare
            } else {
                // Taken under the gate: work signalled before this lease is its own.
                self.wake.take();
                let shares = 1 + self.behind.load(Ordering::SeqCst) as i64;
                let limit = LEASE_BATCH * shares;
                let runnable = self.runnable();
                let leased = if runnable.is_empty() {
                    Ok(Vec::new())
                } else {
                    let leased = match one_at_a_time.ready(false).await {
                        Ok(conn) => events::lease(conn, worker, limit, &runnable).await,
                        Err(e) => Err(e),
                    };
                    // Only a statement that ran says the connection answered.
                    one_at_a_time.settle(leased.as_ref().err());
                    leased
                };
                self.note(leased.as_ref().err().map(crate::db::is_transient));
                match &leased {
                    // A full batch may have left more: another worker leases them
                    // while this one forwards.
                    Ok(batch) if batch.len() as i64 == limit => self.wake.work(),
                    // The signal this lease took is not lost with it.
                    Err(_) => self.wake.keep(),
                    Ok(_) => {}
                }
                let leased = leased?;
                // Leased under the gate: a resting source's first batch after its
                // rest is its probe, and the next lease leaves the source out.
                let probes: Vec<String> = leased
                    .iter()
                    .map(|l| rests::key(&l.source, &l.destination))
                    .collect();
                self.rests.probing(probes.iter().map(String::as_str));
                // Each worker forwards at most a batch at once: the rest are
                // for the workers behind this one, under this one's holder.
                let mut leased = leased;
                let mut spare = self.spare.lock().expect("never poisoned");
                while leased.len() > LEASE_BATCH as usize {
                    let rest = leased.split_off(LEASE_BATCH as usize);
                    spare.push((worker.to_owned(), std::mem::replace(&mut leased, rest)));
                }
                drop(spare);
                (worker.to_owned(), leased)
            }
        };
        let count = leased.len();
        self.forward_batch(&holder, leased).await?;
        Ok(count)
    }

    /// Forwards leased events concurrently and records each attempt as soon
    /// as it ends (those that end together in one statement) as `holder`,
    /// so a quick destination's success is never held back by a slow one
    /// past its own lease.
    async fn forward_batch(&self, holder: &str, leased: Vec<Leased>) -> Result<(), WorkError> {
        // Each attempt runs as its own task: it goes on while others are recorded.
        let mut reached: std::collections::HashMap<String, bool> = Default::default();
        let sources: std::collections::HashSet<String> = leased
            .iter()
            .map(|l| rests::key(&l.source, &l.destination))
            .collect();
        let mut running: FuturesUnordered<_> = leased
            .into_iter()
            .map(|leased| {
                let span = tracing::info_span!("attempt", source = %leased.source, destination = %leased.destination, event = leased.event_id, attempt = leased.attempt);
                tokio::spawn(self.clone().attempt(leased).instrument(span))
            })
            .collect();
        while let Some(first) = running.next().await {
            // Those that end within a moment of the first are recorded with
            // it: one statement per batch when the destination is quick, and
            // never a slow batchmate's wait (leases outlast this by far).
            let mut done = vec![first];
            let window = tokio::time::sleep(RECORD_WINDOW);
            tokio::pin!(window);
            loop {
                tokio::select! {
                    biased;
                    more = running.next() => match more {
                        Some(more) => done.push(more),
                        None => break,
                    },
                    _ = &mut window => break,
                }
            }
            let done: Vec<Done> = done
                .into_iter()
                .filter_map(Result::ok)
                .map(|(done, connection)| {
                    // Only attempts that tried to connect say anything.
                    if let Some(connected) = connection {
                        *reached
                            .entry(rests::key(&done.leased.source, &done.leased.destination))
                            .or_insert(false) |= connected;
                    }
                    done
                })
                .collect();
            // An attempt ends within its timeout, so its lease has at least
            // half the margin left (a handed-over event begins within the
            // other half); after the database was away, other workers leave
            // it to its holder (`takeover_grace`). Recording past the lease
            // is safe: the statement writes only while no one took it over.
            // On failure their leases expire and their successors decide.
            self.record(holder, done)
                .await
                .map_err(WorkError::Unrecorded)?;
        }
        for source in sources {
            match reached.get(&source) {
                Some(&reached) => self
                    .rests
                    .note_reach(&source, reached, self.unreachable_max),
                None => self.rests.unprobe(&source),
            }
        }
        Ok(())
    }

    /// Records finished attempts, retrying a failed write: an answer the
    /// destination gave must not be lost, or the event would be forwarded
    /// again. While the database is away, as long as it takes; a statement
    /// refused for what it holds, for as long as the lease lasts (it will
    /// not land). A process that is stopping gives up a margin after the
    /// signal; their leases expire and their successors decide.
    async fn record(&self, holder: &str, done: Vec<Done>) -> Result<(), String> {
        let done: Arc<[Done]> = done.into();
        let give_up = async {
            self.stopping.cancelled().await;
            tokio::time::sleep(self.lease_margin).await;
        };
        tokio::pin!(give_up);
        let refused_until = Instant::now() + self.lease_margin / 2 + self.lease_margin;
        let mut pause = Duration::from_millis(50);
        let moved = loop {
            let recorded = tokio::select! {
                recorded = self.recorder.record(holder, done.clone()) => recorded,
                () = &mut give_up => return Err("stopping while the database is away".into()),
            };
            self.note(recorded.as_ref().err().map(|e| e.transient));
            match recorded {
                Ok(moved) => break moved,
                Err(e) if !e.transient && Instant::now() + pause >= refused_until => {
                    return Err(e.to_string())
                }
                Err(e) => {
                    static THROTTLE: crate::telemetry::Throttle =
                        crate::telemetry::Throttle::new(Duration::from_secs(1));
                    if let Some(held_back) = THROTTLE.allow() {
                        tracing::warn!(error = %e, held_back, "recording attempts failed; retrying");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = &mut give_up => return Err("stopping while the database is away".into()),
                    }
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        };
        self.breakers.note(&self.pool, &self.config, &done).await;
        for d in done.iter() {
            crate::telemetry::metrics::attempt(
                &d.leased.source,
                d.next.as_str(),
                d.record.latency_ms,
                d.leased.received,
            );
        }
        if moved < done.len() {
            tracing::warn!(
                lost = done.len() - moved,
                "leases lost before their attempts finished; their successors decide"
            );
        }
        Ok(())
    }

    /// One forward and where it leads, and whether it got a connection
    /// (None: it tried none).
    async fn attempt(self, leased: Leased) -> (Done, Option<bool>) {
        // Only this process's destinations are leased (`runnable`); one
        // handed over by a process on another config is tried again later.
        let unconfigured = |leased: Leased, error: String| Done {
            leased,
            next: Next::RetryIn(Duration::from_secs(60)),
            record: AttemptRecord {
                error: Some(error),
                ..Default::default()
            },
            response: None,
        };
        let Some(source) = self.config.sources.iter().find(|s| s.slug == leased.source) else {
            let error = format!("source {:?} is not configured here", leased.source);
            return (unconfigured(leased, error), None);
        };
        if leased.body.is_none() {
            // Retrying cannot bring a pruned payload back.
            let record = AttemptRecord {
                error: Some("its payload is no longer stored".into()),
                ..Default::default()
            };
            let done = Done {
                leased,
                next: Next::Dead("its payload is no longer stored: nothing to forward".into()),
                record,
                response: None,
            };
            return (done, None);
        }
        // A sync-mode source's later duplicates get the destination's whole answer.
        let keep = match source.mode {
            Mode::Sync => self.config.max_body_bytes,
            Mode::Ack => forward::EXCERPT_BYTES,
        };
        let Some(destination) = source
            .destinations
            .iter()
            .find(|d| d.name == leased.destination)
        else {
            let error = format!(
                "destination {:?} of source {:?} is not configured here",
                leased.destination, leased.source
            );
            return (unconfigured(leased, error), None);
        };
        let answer = forward::forward(&self.client, source, Some(destination), &leased, keep).await;
        let response = (source.mode == Mode::Sync)
            .then(|| {
                answer.record.status.map(|status| StoredResponse {
                    status: status as i16,
                    content_type: answer.content_type.clone(),
                    body: answer.body.clone(),
                })
            })
            .flatten();
        let connected = !answer.unreachable;
        let (next, record) = decide(
            &self.policy,
            destination.max_attempts,
            leased.attempt,
            answer,
        );
        let done = Done {
            leased,
            record,
            next,
            response,
        };
        (done, Some(connected))
    }
}

/// Where an event goes after an attempt's answer, and the attempt as recorded.
pub fn decide(
    policy: &RetryPolicy,
    max_attempts: u32,
    attempt: i32,
    answer: forward::Answer,
) -> (Next, AttemptRecord) {
    let next = match classify(answer.record.status, answer.retry_after) {
        Verdict::Delivered => Next::Completed,
        Verdict::Fatal => Next::Dead(format!(
            "destination refused the event with {}",
            answer.record.status.unwrap_or_default()
        )),
        Verdict::Retry { .. } if attempt >= max_attempts as i32 => Next::Dead(format!(
            "gave up after {attempt} attempts; last: {}",
            describe(&answer.record)
        )),
        Verdict::Retry { retry_after } => Next::RetryIn(policy.delay(attempt as u32, retry_after)),
    };
    let mut record = answer.record;
    if record.error.is_none() && next != Next::Completed {
        record.error = Some(describe(&record));
    }
    (next, record)
}

fn describe(record: &AttemptRecord) -> String {
    match (&record.error, record.status) {
        (Some(e), _) => e.clone(),
        (None, Some(status)) => format!("HTTP {status}"),
        (None, None) => "no answer".into(),
    }
}

/// The client for destinations: pooled connections, no redirects followed
/// (a redirect is the application's answer, not a new destination).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}

/// A worker's run of failed batches (the database away, mostly): the first
/// is logged, then one line a minute while it lasts, and its end; not a
/// line per try.
#[derive(Default)]
struct Failing {
    tries: u64,
    logged_at: Option<Instant>,
}

impl Failing {
    const EVERY: Duration = Duration::from_secs(60);

    fn again(&mut self, worker: &str, error: &dyn std::fmt::Display) {
        self.tries += 1;
        if self.logged_at.is_none_or(|at| at.elapsed() >= Self::EVERY) {
            self.logged_at = Some(Instant::now());
            tracing::warn!(worker, error = %error, tries = self.tries, "worker: batch failed; retrying at the poll's pace");
        }
    }

    fn over(&mut self, worker: &str) {
        if self.tries > 0 {
            tracing::info!(
                worker,
                tries = self.tries,
                "worker: batches run again after failing"
            );
            *self = Self::default();
        }
    }
}
