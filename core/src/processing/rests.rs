//! Destinations that take no connection rest. A source whose destination
//! took no connection in a whole batch is left out of this process's
//! leases (and its claims are not handed to the workers) for
//! `UNREACHABLE_FIRST`, doubling after each probe that finds it still down,
//! up to a maximum; when a rest ends, one batch (only one, until it reports)
//! probes it. Its events wait, counting no attempt, instead of being leased,
//! tried and recorded again and again (which took the database from the
//! receiver).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

const UNREACHABLE_FIRST: Duration = Duration::from_millis(250);
pub const UNREACHABLE_MAX: Duration = Duration::from_secs(30);

/// A probe that never reports (its batch failed to record) stops counting
/// after this.
const PROBE_STALE: Duration = Duration::from_secs(120);

/// A source left out of leases while its destination is down.
#[derive(Clone, Copy, Debug)]
struct Resting {
    until: Instant,
    rest: Duration,
    /// Since when a batch leased after the rest ended is out trying it.
    probing: Option<Instant>,
}

impl Resting {
    fn probing(&self) -> bool {
        self.probing
            .is_some_and(|since| since.elapsed() < PROBE_STALE)
    }
}

/// What rests: one destination of one source.
pub fn key(source: &str, destination: &str) -> String {
    format!("{source}/{destination}")
}

/// The resting destinations of one process (by `key`), shared by its
/// workers and its inbox.
#[derive(Debug, Default)]
pub struct Rests {
    sources: Mutex<HashMap<String, Resting>>,
}

impl Rests {
    /// Left out of leases now: resting, or its probe is out.
    pub fn resting(&self, source: &str) -> bool {
        self.sources
            .lock()
            .expect("never poisoned")
            .get(source)
            .is_some_and(|r| r.probing() || r.until > Instant::now())
    }

    /// Found down and not reached since: its new claims are not handed to
    /// the workers (only a lease's probe batch tries it again).
    pub fn down(&self, source: &str) -> bool {
        self.sources
            .lock()
            .expect("never poisoned")
            .contains_key(source)
    }

    /// Leased together: a resting source's first batch after its rest is
    /// its probe, and the next lease leaves the source out.
    pub fn probing<'a>(&self, sources: impl Iterator<Item = &'a str>) {
        let mut resting = self.sources.lock().expect("never poisoned");
        for source in sources {
            if let Some(r) = resting.get_mut(source) {
                r.probing.get_or_insert_with(Instant::now);
            }
        }
    }

    /// A probe batch none of whose attempts tried a connection: the next
    /// batch probes instead.
    pub fn unprobe(&self, source: &str) {
        if let Some(r) = self.sources.lock().expect("never poisoned").get_mut(source) {
            r.probing = None;
        }
    }

    /// After a batch: a source none of whose attempts got a connection rests,
    /// longer each time up to `max`; one that got any is back at once.
    pub fn note_reach(&self, source: &str, reached: bool, max: Duration) {
        let mut resting = self.sources.lock().expect("never poisoned");
        if reached {
            if resting.remove(source).is_some() {
                tracing::info!(source, "destination reachable again");
            }
            return;
        }
        let now = Instant::now();
        let rest = match resting.get(source) {
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
        .min(max);
        resting.insert(
            source.to_owned(),
            Resting {
                until: now + rest,
                rest,
                probing: None,
            },
        );
    }
}
