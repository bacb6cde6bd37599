//! New ack-mode events go straight from their claim to this process's
//! workers: the claim statement leases each one to the inbox's owner for
//! its first attempt (written when it ends, as every worker's attempt is),
//! and the receiver hands the event over with its payload, still in memory. Forwarding an event used to cost a lease
//! statement to find it and a row update to take it, as much database time
//! as the claim itself (bench/README, "Handed over at the claim").
//!
//! The inbox holds at most `ROOM` events, reserved before the claim
//! statement runs, and about `ROOM_BYTES` of payload; beyond that, or for a
//! source that is paused (the claim statement checks the database too) or
//! whose destination is down, claims are `queued` and leased as before. An event
//! that waits here longer than half its lease margin is not begun (the
//! lease must outlast its attempt) but released to `queued`; so are those
//! left when the workers stop. A process that dies with events here leaves
//! them leased: they are taken over once the lease expires, like any
//! batch a dead worker held.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::rests::Rests;
use super::wake::Wake;
use crate::config::{Config, Mode};
use crate::events::{Leased, LEASE_MARGIN};
use crate::receiver::batch::Handoff;

/// Most events waiting in the inbox or reserved for claims on their way:
/// a few batches' worth for the workers, whose wait must stay far below
/// the lease margin.
pub const ROOM: usize = 256;

/// Payload the inbox holds before claims are `queued` instead: kept apart
/// from the request body budget, since these bodies outlive their request.
pub const ROOM_BYTES: usize = 32 << 20;

pub struct Inbox {
    owner: String,
    config: Arc<Config>,
    wake: Arc<Wake>,
    rests: Arc<Rests>,
    breakers: Arc<super::breakers::Breakers>,
    /// Claims are handed over only while open (`Workers::spawn` opens it).
    open: AtomicBool,
    /// Closed for good: the workers stopped.
    closed: AtomicBool,
    reserved: AtomicUsize,
    /// Payload bytes waiting in `queue`.
    bytes: AtomicUsize,
    queue: Mutex<VecDeque<(Instant, Leased)>>,
    arrived: Notify,
    /// How long the workers' lease outlives an attempt's timeout, in ms.
    lease_margin_ms: AtomicU64,
}

impl Inbox {
    pub fn new(
        config: Arc<Config>,
        wake: Arc<Wake>,
        rests: Arc<Rests>,
        breakers: Arc<super::breakers::Breakers>,
    ) -> Self {
        Self {
            owner: format!("{}:{}:inbox", super::worker::hostname(), std::process::id()),
            config,
            wake,
            rests,
            breakers,
            open: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            reserved: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            queue: Mutex::new(VecDeque::new()),
            arrived: Notify::new(),
            lease_margin_ms: AtomicU64::new(LEASE_MARGIN.as_millis() as u64),
        }
    }

    fn lease_margin(&self) -> Duration {
        Duration::from_millis(self.lease_margin_ms.load(Ordering::Relaxed))
    }

    pub fn owner_name(&self) -> &str {
        &self.owner
    }

    /// Claims are handed over from now on, leased for their source's
    /// attempt timeout plus `lease_margin`, as the workers' leases are.
    /// Not once it was closed.
    pub fn open(&self, lease_margin: Duration) {
        self.lease_margin_ms
            .store(lease_margin.as_millis() as u64, Ordering::Relaxed);
        if !self.closed.load(Ordering::SeqCst) {
            self.open.store(true, Ordering::SeqCst);
        }
    }

    /// No more claims are handed over, ever; those reserved already still arrive.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.open.store(false, Ordering::SeqCst);
    }

    /// Claims on their way here: none once closed and settled.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::SeqCst)
    }

    /// Up to `limit` events, oldest first, split into those to forward and
    /// those not to begin: waited past half the lease margin, or their
    /// source was paused or its destination found down since their claim.
    pub fn take(&self, limit: usize) -> (Vec<Leased>, Vec<Leased>) {
        let mut queue = self.queue.lock().expect("never poisoned");
        let n = queue.len().min(limit);
        let taken: Vec<(Instant, Leased)> = queue.drain(..n).collect();
        self.bytes
            .fetch_sub(payload(taken.iter().map(|t| &t.1)), Ordering::SeqCst);
        if !queue.is_empty() {
            // The rest is another worker's.
            self.arrived.notify_one();
        }
        drop(queue);
        let fresh_within = self.lease_margin() / 2;
        taken.into_iter().fold(
            (Vec::new(), Vec::new()),
            |(mut begin, mut release), (at, leased)| {
                if at.elapsed() > fresh_within
                    || self.wake.is_paused(&leased.source)
                    || !self.breakers.is_closed(&leased.source, &leased.destination)
                    || self
                        .rests
                        .down(&super::rests::key(&leased.source, &leased.destination))
                {
                    release.push(leased);
                } else {
                    begin.push(leased);
                }
                (begin, release)
            },
        )
    }

    /// Everything waiting, for release when the workers stop.
    pub fn drain(&self) -> Vec<Leased> {
        let mut queue = self.queue.lock().expect("never poisoned");
        let drained: Vec<Leased> = queue.drain(..).map(|(_, leased)| leased).collect();
        self.bytes
            .fetch_sub(payload(drained.iter()), Ordering::SeqCst);
        drained
    }

    /// Events whose release failed wait again (as not to begin: their
    /// time is up), for the next worker to release.
    pub fn put_back(&self, unbegun: Vec<Leased>) {
        let long_ago = Instant::now()
            .checked_sub(self.lease_margin())
            .unwrap_or_else(Instant::now);
        let mut queue = self.queue.lock().expect("never poisoned");
        self.bytes
            .fetch_add(payload(unbegun.iter()), Ordering::SeqCst);
        for leased in unbegun.into_iter().rev() {
            queue.push_front((long_ago, leased));
        }
    }

    pub async fn arrived(&self) {
        self.arrived.notified().await
    }

    pub fn is_empty(&self) -> bool {
        self.queue.lock().expect("never poisoned").is_empty()
    }
}

impl Handoff for Inbox {
    fn owner(&self) -> &str {
        &self.owner
    }

    fn reserve(&self, source: &str, destination: &str) -> Option<f64> {
        let config = self.config.sources.iter().find(|s| s.slug == source)?;
        let wanted = config.destinations.iter().find(|d| d.name == destination)?;
        if config.mode != Mode::Ack
            || wanted.is_gated()
            || !self.breakers.is_closed(source, destination)
            || self.wake.is_paused(source)
            || self.rests.down(&super::rests::key(source, destination))
            || self.bytes.load(Ordering::SeqCst) >= ROOM_BYTES
        {
            return None;
        }
        let waiting = self.queue.lock().expect("never poisoned").len();
        // Reserved first, checked after: two claims never both take the last
        // place, and a claim reserving as the inbox closes is waited for
        // (`Workers::close_inbox_at`) or sees it closed.
        let reserved = self.reserved.fetch_add(1, Ordering::SeqCst);
        if reserved + waiting >= ROOM || !self.open.load(Ordering::SeqCst) {
            self.reserved.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let timeout = Duration::from_secs(wanted.timeout_secs);
        Some((timeout + self.lease_margin()).as_secs_f64())
    }

    fn unreserve(&self, count: usize) {
        self.reserved.fetch_sub(count, Ordering::SeqCst);
    }

    fn deliver(&self, leased: Leased) {
        let mut queue = self.queue.lock().expect("never poisoned");
        self.bytes
            .fetch_add(payload(std::iter::once(&leased)), Ordering::SeqCst);
        queue.push_back((Instant::now(), leased));
        self.reserved.fetch_sub(1, Ordering::SeqCst);
        if queue.len() == 1 {
            self.arrived.notify_one();
        }
    }

    fn queued(&self, source: &str) {
        if let Some(source) = self.config.sources.iter().find(|s| s.slug == source) {
            self.wake.claimed(source);
        }
    }
}

fn payload<'a>(leased: impl Iterator<Item = &'a Leased>) -> usize {
    leased.map(|l| l.body.as_ref().map_or(0, Vec::len)).sum()
}
