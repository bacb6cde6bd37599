//! The worker pool. Each worker leases a batch of due events, forwards them
//! with no lock held, and records each outcome as it arrives. Workers wake
//! when this process queues work (`wake`: once per burst, and one lease
//! statement at a time per process), and poll for retries due and for work
//! other processes claimed.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::retry::{classify, RetryPolicy, Verdict};
use super::wake::Wake;
use super::{forward, Services};
use crate::config::{Config, Mode};
use crate::events::{
    self, AttemptRecord, Done, Leased, Next, Runnable, StoredResponse, LEASE_MARGIN,
};

/// How often idle workers look for work they were not told about.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Most events one worker leases and forwards at once.
pub const LEASE_BATCH: i64 = 32;

/// How often the pool reads which sources are paused.
const PAUSES_READ_EVERY: Duration = Duration::from_secs(1);

/// A source whose destination took no connection in a whole batch is left
/// out of this pool's leases for this long, doubling after each probe that
/// finds it still down, up to `Workers::unreachable_max`; when a rest ends,
/// one batch (only one, until it reports) probes it. Its events wait,
/// counting no attempt, instead of being leased, tried and recorded again
/// and again (which took the database from the receiver).
const UNREACHABLE_FIRST: Duration = Duration::from_millis(250);
pub const UNREACHABLE_MAX: Duration = Duration::from_secs(30);

/// How long finished attempts wait for their batchmates before they are
/// recorded together: one statement per attempt cost forwarding most of its
/// throughput (bench/README, "Why the tuning constants are what they are").
const RECORD_WINDOW: Duration = Duration::from_millis(20);

/// A source left out of leases while its destination is down.
#[derive(Clone, Copy, Debug)]
struct Resting {
    until: Instant,
    rest: Duration,
    /// Since when a batch leased after the rest ended is out trying it. A
    /// probe that never reports (its batch failed to record) stops counting
    /// after `PROBE_STALE`.
    probing: Option<Instant>,
}

const PROBE_STALE: Duration = Duration::from_secs(120);

impl Resting {
    fn probing(&self) -> bool {
        self.probing
            .is_some_and(|since| since.elapsed() < PROBE_STALE)
    }
}

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
    /// cost the database.
    leasing: Arc<tokio::sync::Mutex<()>>,
    /// How often idle workers lease without being woken (`POLL_INTERVAL`).
    pub poll: Duration,
    /// Sources whose destination is down, and until when they rest.
    unreachable: Arc<std::sync::Mutex<std::collections::HashMap<String, Resting>>>,
    /// The longest rest of an unreachable destination (`UNREACHABLE_MAX`).
    pub unreachable_max: Duration,
    /// How long a lease outlives its source's attempt timeout.
    pub lease_margin: Duration,
    /// How long a failed sync-mode event waits for its provider's retry
    /// before the workers adopt it.
    pub request_grace: Duration,
}

impl Workers {
    pub fn new(services: &Services) -> Self {
        Self {
            pool: services.pool.clone(),
            config: services.config.clone(),
            client: services.client.clone(),
            policy: services.policy.clone(),
            wake: services.wake.clone(),
            leasing: Default::default(),
            poll: POLL_INTERVAL,
            unreachable: Default::default(),
            unreachable_max: UNREACHABLE_MAX,
            lease_margin: LEASE_MARGIN,
            request_grace: events::REQUEST_GRACE,
        }
    }

    /// Starts `count` workers; they stop, finishing any attempt in flight, when
    /// `shutdown` is cancelled.
    pub fn spawn(&self, count: usize, shutdown: CancellationToken) -> JoinSet<()> {
        let process = format!("{}:{}", hostname(), std::process::id());
        let mut set = JoinSet::new();
        if count > 0 {
            set.spawn(self.clone().follow_pauses(shutdown.clone()));
        }
        for n in 0..count {
            let worker = self.clone();
            let id = format!("{process}:{n}:{:08x}", rand::random::<u32>());
            let shutdown = shutdown.clone();
            set.spawn(async move { worker.run(id, shutdown).await });
        }
        set
    }

    /// A pool whose lease statements do not wait for this one's, as
    /// another process's would not (tests race two of them).
    pub fn apart(&self) -> Self {
        Self {
            leasing: Default::default(),
            ..self.clone()
        }
    }

    async fn run(self, id: String, shutdown: CancellationToken) {
        let mut lease = true;
        while !shutdown.is_cancelled() {
            if lease {
                match self.run_batch(&id, Some(&shutdown)).await {
                    // Some were due: more may be (another process's lease
                    // may have skipped rows this one locked).
                    Ok(n) if n > 0 => continue,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(worker = %id, error = %e, "worker: database error; retrying")
                    }
                }
            }
            // Woken, a worker leases only if the signal is still up: another
            // worker's lease since then covered the work it announced.
            lease = tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => self.wake.take(),
                _ = tokio::time::sleep(self.poll) => true,
            };
        }
    }

    /// Keeps the wake's paused sources as the database has them, so claims
    /// of a source an operator paused from any process wake nobody.
    async fn follow_pauses(self, shutdown: CancellationToken) {
        loop {
            match crate::db::sources::paused(&self.pool).await {
                Ok(paused) => self.wake.set_paused_sources(paused),
                Err(e) => tracing::warn!(error = %e, "reading paused sources failed; will retry"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(PAUSES_READ_EVERY) => {}
            }
        }
    }

    /// The sources this process can forward: those with a destination, and
    /// not paused as far as this pool knows. The lease checks the pause in
    /// the database too; leaving out a source known paused here spares a
    /// lease that would scan its whole backlog to find nothing (and none at
    /// all runs when every source is paused).
    pub fn runnable(&self) -> Runnable {
        Runnable::new(
            self.config
                .sources
                .iter()
                .filter(|s| {
                    s.destination.is_some()
                        && !self.wake.is_paused(&s.slug)
                        && !self.resting(&s.slug)
                })
                .map(|s| (s.slug.as_str(), Duration::from_secs(s.attempt_timeout_secs))),
            self.lease_margin,
        )
        .with_request_grace(self.request_grace)
    }

    /// Leases up to `LEASE_BATCH` due events, forwards them concurrently and
    /// records each attempt as soon as it ends (those that end together in
    /// one statement), so a quick destination's success is never held back
    /// by a slow one past its own lease. Returns how many were leased (0
    /// when none was due). One lease statement per batch: leasing, not
    /// forwarding, was the cost.
    pub async fn run_once(&self, worker: &str) -> Result<usize, sqlx::Error> {
        self.run_batch(worker, None).await
    }

    /// `run_once`, giving up its turn for the lease gate when `shutdown` is
    /// cancelled (workers queued behind a slow database must not lease new
    /// work after the signal).
    async fn run_batch(
        &self,
        worker: &str,
        shutdown: Option<&CancellationToken>,
    ) -> Result<usize, sqlx::Error> {
        let leased = {
            let _one_at_a_time = match shutdown {
                Some(shutdown) => tokio::select! {
                    gate = self.leasing.lock() => gate,
                    _ = shutdown.cancelled() => return Ok(0),
                },
                None => self.leasing.lock().await,
            };
            if shutdown.is_some_and(CancellationToken::is_cancelled) {
                return Ok(0);
            }
            // Taken under the gate: work signalled before this lease is its own.
            self.wake.take();
            let leased = events::lease(&self.pool, worker, LEASE_BATCH, &self.runnable()).await;
            match &leased {
                // A full batch may have left more: another worker leases them
                // while this one forwards.
                Ok(batch) if batch.len() as i64 == LEASE_BATCH => self.wake.work(),
                // The signal this lease took is not lost with it.
                Err(_) => self.wake.work(),
                Ok(_) => {}
            }
            let leased = leased?;
            // Leased under the gate: a resting source's first batch after its
            // rest is its probe, and the next lease leaves the source out.
            self.probing(leased.iter().map(|l| l.source.as_str()));
            leased
        };
        let count = leased.len();
        // Each attempt runs as its own task: it goes on while others are recorded.
        let mut reached: std::collections::HashMap<String, bool> = Default::default();
        let sources: std::collections::HashSet<String> =
            leased.iter().map(|l| l.source.clone()).collect();
        let mut running: FuturesUnordered<_> = leased
            .into_iter()
            .map(|leased| {
                let span = tracing::info_span!("attempt", source = %leased.source, event = leased.event_id, attempt = leased.attempt);
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
                        *reached.entry(done.leased.source.clone()).or_insert(false) |= connected;
                    }
                    done
                })
                .collect();
            // An attempt ends within its timeout, so its lease has the margin left.
            self.record(worker, &done, Instant::now() + self.lease_margin)
                .await?;
        }
        for source in sources {
            match reached.get(&source) {
                Some(&reached) => self.note_reach(&source, reached),
                None => self.unprobe(&source),
            }
        }
        Ok(count)
    }

    fn resting(&self, source: &str) -> bool {
        let unreachable = self.unreachable.lock().expect("never poisoned");
        unreachable
            .get(source)
            .is_some_and(|r| r.probing() || r.until > Instant::now())
    }

    fn probing<'a>(&self, sources: impl Iterator<Item = &'a str>) {
        let mut unreachable = self.unreachable.lock().expect("never poisoned");
        for source in sources {
            if let Some(r) = unreachable.get_mut(source) {
                r.probing.get_or_insert_with(Instant::now);
            }
        }
    }

    /// A probe batch none of whose attempts tried a connection: the next
    /// batch probes instead.
    fn unprobe(&self, source: &str) {
        if let Some(r) = self
            .unreachable
            .lock()
            .expect("never poisoned")
            .get_mut(source)
        {
            r.probing = None;
        }
    }

    /// After a batch: a source none of whose attempts got a connection rests,
    /// longer each time; one that got any is back at once.
    fn note_reach(&self, source: &str, reached: bool) {
        let mut unreachable = self.unreachable.lock().expect("never poisoned");
        if reached {
            if unreachable.remove(source).is_some() {
                tracing::info!(source, "destination reachable again");
            }
            return;
        }
        let now = Instant::now();
        let rest = match unreachable.get(source) {
            // A batch leased before the rest began (batches in flight
            // together): the rest stands.
            Some(r) if !r.probing() => return,
            // A probe long after its rest: an outage of its own.
            Some(r) if now > r.until + r.rest * 2 => UNREACHABLE_FIRST,
            Some(r) => r.rest * 2,
            None => {
                tracing::warn!(
                    source,
                    "destination takes no connection; its events wait, tried again after a rest"
                );
                UNREACHABLE_FIRST
            }
        }
        .min(self.unreachable_max);
        unreachable.insert(
            source.to_owned(),
            Resting {
                until: now + rest,
                rest,
                probing: None,
            },
        );
    }

    /// Records finished attempts, retrying a failed write while their leases
    /// last: an answer the destination gave must not be lost to a blip.
    async fn record(&self, worker: &str, done: &[Done], until: Instant) -> Result<(), sqlx::Error> {
        let mut pause = Duration::from_millis(50);
        let moved = loop {
            match events::finish_each(&self.pool, worker, done).await {
                Ok(moved) => break moved,
                Err(e) if Instant::now() + pause < until => {
                    tracing::warn!(error = %e, "recording attempts failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(e),
            }
        };
        for d in done {
            crate::telemetry::metrics::attempt(
                &d.leased.source,
                d.next.as_str(),
                d.record.latency_ms,
            );
        }
        if moved < done.len() as u64 {
            tracing::warn!(
                lost = done.len() as u64 - moved,
                "leases lost before their attempts finished; their successors decide"
            );
        }
        Ok(())
    }

    /// One forward and where it leads, and whether it got a connection
    /// (None: it tried none).
    async fn attempt(self, leased: Leased) -> (Done, Option<bool>) {
        // Only this process's sources are leased (`runnable`).
        let Some(source) = self.config.sources.iter().find(|s| s.slug == leased.source) else {
            let error = format!("source {:?} is not configured here", leased.source);
            let done = Done {
                leased,
                next: Next::RetryIn(Duration::from_secs(60)),
                record: AttemptRecord {
                    error: Some(error),
                    ..Default::default()
                },
                response: None,
            };
            return (done, None);
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
        let answer = forward::forward(&self.client, source, &leased, keep).await;
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
        let (next, record) = decide(&self.policy, source.max_attempts, leased.attempt, answer);
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
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}
