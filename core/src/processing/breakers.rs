//! This process's view of the destinations' circuit breakers
//! (`events::breaker`, where their state lives): which are not closed, read
//! every second and at each transition here, so that leases and the
//! hand-off at the claim leave them alone; and the counting of each
//! recorded batch of attempts against them.

use replaysafe_types::states::Breaker;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use sqlx::PgPool;

use super::rests::key;
use crate::config::Config;
use crate::events::breaker::{self, Outcomes, Transition};
use crate::events::Done;

#[derive(Debug, Default)]
pub struct Breakers {
    /// By `rests::key`: open or half-open.
    not_closed: Mutex<HashSet<String>>,
    /// Destinations whose failures in a row may be above 0: their next
    /// success is written, to start the count over.
    failing: Mutex<HashSet<String>>,
    /// Destinations whose gate row is known to exist.
    ensured: Mutex<HashSet<String>>,
    /// By `rests::key`: the events whose failure counted since the
    /// destination's breaker last moved (as this process saw it).
    counted: Mutex<HashMap<String, HashSet<i64>>>,
}

/// Events remembered per destination: past that, the set starts over (an
/// event may then count once more).
const COUNTED_KEPT: usize = 100_000;

/// Whether an attempt says the destination is broken (Some(true)), working
/// (Some(false)), or nothing about it (an event it refused, an attempt
/// that never went out).
fn verdict(done: &Done) -> Option<bool> {
    match done.record.status {
        Some(s) if (200..300).contains(&s) => Some(false),
        Some(s) => (s == 408 || s == 429 || s >= 500).then_some(true),
        None => done
            .record
            .error
            .as_deref()
            .filter(|e| e.starts_with("connection failed") || e.starts_with("timed out"))
            .map(|_| true),
    }
}

impl Breakers {
    pub fn is_closed(&self, source: &str, destination: &str) -> bool {
        !self
            .not_closed
            .lock()
            .expect("never poisoned")
            .contains(&key(source, destination))
    }

    /// Reads which breakers are not closed and which count failures.
    pub async fn refresh(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        let rows = sqlx::query!(
            r#"SELECT source, destination, breaker AS "breaker: Breaker", failures > 0 AS failing
               FROM destination_gates WHERE breaker <> 'closed' OR failures > 0"#
        )
        .fetch_all(pool)
        .await?;
        let mut not_closed = HashSet::new();
        let mut failing = HashSet::new();
        for r in rows {
            let k = key(&r.source, &r.destination);
            metrics::gauge!("replaysafe_breaker_open", "source" => r.source, "destination" => r.destination)
                .set(if r.breaker == Breaker::Closed { 0.0 } else { 1.0 });
            if r.breaker != Breaker::Closed {
                not_closed.insert(k.clone());
            }
            if r.failing == Some(true) {
                failing.insert(k);
            }
        }
        let mut known = self.not_closed.lock().expect("never poisoned");
        for healed in known.difference(&not_closed) {
            if let Some((source, destination)) = healed.split_once('/') {
                metrics::gauge!("replaysafe_breaker_open", "source" => source.to_owned(), "destination" => destination.to_owned())
                    .set(0.0);
            }
        }
        *known = not_closed;
        drop(known);
        self.failing.lock().expect("never poisoned").extend(failing);
        Ok(())
    }

    /// Counts a recorded batch against the breakers of its destinations
    /// (only where it says something new: a failure, or a success after
    /// failures or during a probe) and applies what moved.
    pub async fn note(&self, pool: &PgPool, config: &Config, done: &[Done]) {
        // (failures, successes, failures since the last success), in the
        // order the attempts ended.
        let mut counts: HashMap<(&str, &str), (i32, i32, i32)> = HashMap::new();
        {
            let not_closed = self.not_closed.lock().expect("never poisoned");
            let mut counted = self.counted.lock().expect("never poisoned");
            for d in done {
                let Some(broken) = verdict(d) else { continue };
                // An event's failures count once while the breaker is
                // closed: one the application keeps refusing (a poison
                // event) says nothing new about the destination after the
                // first. A probe's failure always counts.
                let k = key(&d.leased.source, &d.leased.destination);
                if broken && !not_closed.contains(&k) {
                    let events = counted.entry(k).or_default();
                    if events.len() >= COUNTED_KEPT {
                        events.clear();
                    }
                    if !events.insert(d.leased.event_id) {
                        continue;
                    }
                }
                let c = counts
                    .entry((d.leased.source.as_str(), d.leased.destination.as_str()))
                    .or_default();
                if broken {
                    c.0 += 1;
                    c.2 += 1;
                } else {
                    c.1 += 1;
                    c.2 = 0;
                }
            }
        }
        let mut seen: Vec<Outcomes> = {
            let failing = self.failing.lock().expect("never poisoned");
            let not_closed = self.not_closed.lock().expect("never poisoned");
            counts
                .iter()
                .filter_map(
                    |(&(source, destination), &(failures, successes, trailing))| {
                        let rule = &config
                            .sources
                            .iter()
                            .find(|s| s.slug == source)?
                            .destinations
                            .iter()
                            .find(|d| d.name == destination)?
                            .breaker;
                        // A ratio counts every attempt; a count in a row only
                        // failures, and the success that ends them.
                        let k = key(source, destination);
                        let news = failures > 0
                            || rule.ratio.is_some()
                            || failing.contains(&k)
                            || not_closed.contains(&k);
                        news.then_some(Outcomes {
                            source,
                            destination,
                            failures,
                            successes,
                            trailing_failures: trailing,
                            rule,
                        })
                    },
                )
                .collect()
        };
        seen.sort_by_key(|o| (o.source, o.destination));
        if seen.is_empty() {
            return;
        }
        let missing: Vec<(&str, &str)> = {
            let ensured = self.ensured.lock().expect("never poisoned");
            seen.iter()
                .filter(|o| !ensured.contains(&key(o.source, o.destination)))
                .map(|o| (o.source, o.destination))
                .collect()
        };
        if !missing.is_empty() {
            if let Err(e) = breaker::ensure(pool, &missing).await {
                tracing::warn!(error = %e, "could not set up circuit breakers");
                return;
            }
            let mut ensured = self.ensured.lock().expect("never poisoned");
            ensured.extend(missing.iter().map(|(s, d)| key(s, d)));
        }
        match breaker::note(pool, &seen).await {
            Ok(moved) => {
                let mut failing = self.failing.lock().expect("never poisoned");
                for o in &seen {
                    let k = key(o.source, o.destination);
                    if o.trailing_failures > 0 {
                        failing.insert(k);
                    } else {
                        failing.remove(&k);
                    }
                }
                drop(failing);
                self.apply(&moved);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not count attempts against circuit breakers")
            }
        }
    }

    /// Takes what moved into this process's view, the metrics and the log.
    pub fn apply(&self, moved: &[Transition]) {
        let mut not_closed = self.not_closed.lock().expect("never poisoned");
        let mut counted = self.counted.lock().expect("never poisoned");
        for t in moved {
            let k = key(&t.source, &t.destination);
            // A breaker that moved counts each event's failure anew.
            counted.remove(&k);
            if t.to == Breaker::Closed {
                not_closed.remove(&k);
            } else {
                not_closed.insert(k);
            }
            metrics::gauge!("replaysafe_breaker_open", "source" => t.source.clone(), "destination" => t.destination.clone())
                .set(if t.to == Breaker::Closed { 0.0 } else { 1.0 });
            metrics::counter!("replaysafe_breaker_transitions_total", "source" => t.source.clone(), "destination" => t.destination.clone(), "to" => t.to.as_str())
                .increment(1);
            tracing::warn!(source = %t.source, destination = %t.destination, from = %t.from, to = %t.to, "circuit breaker");
        }
    }
}
