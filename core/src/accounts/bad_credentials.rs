//! Strangers' made-up credentials (issue 35, item 8): bearer tokens and
//! session cookies that do not verify, counted per client address
//! (`config::address::bucket`) in this process. Past `LIMIT` within a
//! minute the address is answered 429 with `Retry-After` before anything
//! is looked up, until its minute is over: each refusal would otherwise
//! cost a database read. A request with no credentials at all is not
//! counted (it costs nothing to refuse).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Credentials that fail within a minute before an address is refused.
pub const LIMIT: u32 = 100;
const WINDOW: Duration = Duration::from_secs(60);
/// The addresses remembered at most: past that, those whose minute is over
/// are forgotten first, and a new one is not counted while all are live.
const KEPT: usize = 100_000;

#[derive(Default)]
pub struct BadCredentials {
    by_address: Mutex<Addresses>,
}

#[derive(Default)]
struct Addresses {
    windows: HashMap<IpAddr, Window>,
    /// When the table, full, was last swept: at most once a second, so a
    /// stranger with many addresses cannot make every request sweep it.
    swept: Option<Instant>,
}

#[derive(Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl BadCredentials {
    /// How long `address` must wait when it is refused now.
    pub fn refused(&self, address: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        let by_address = self.by_address.lock().expect("never poisoned");
        let w = by_address
            .windows
            .get(&crate::config::address::bucket(address))?;
        let elapsed = now.duration_since(w.started);
        (w.failures >= LIMIT && elapsed < WINDOW).then(|| WINDOW - elapsed)
    }

    /// Counts a credential from `address` that did not verify.
    pub fn failed(&self, address: IpAddr) {
        let now = Instant::now();
        let bucket = crate::config::address::bucket(address);
        let mut by_address = self.by_address.lock().expect("never poisoned");
        let Addresses { windows, swept } = &mut *by_address;
        if windows.len() >= KEPT && !windows.contains_key(&bucket) {
            if swept.is_some_and(|at| now.duration_since(at) < Duration::from_secs(1)) {
                return;
            }
            *swept = Some(now);
            windows.retain(|_, w| now.duration_since(w.started) < WINDOW);
            if windows.len() >= KEPT {
                return;
            }
        }
        let w = windows.entry(bucket).or_insert(Window {
            started: now,
            failures: 0,
        });
        if now.duration_since(w.started) >= WINDOW {
            *w = Window {
                started: now,
                failures: 0,
            };
        }
        w.failures = w.failures.saturating_add(1);
        if w.failures == LIMIT {
            tracing::warn!(%address, "{LIMIT} credentials that do not verify within a minute: refused (429) for the rest of it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_the_limit_and_others_are_not() {
        let bad = BadCredentials::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..LIMIT - 1 {
            bad.failed(a);
        }
        assert_eq!(bad.refused(a), None, "{} failures are allowed", LIMIT - 1);
        bad.failed(a);
        let wait = bad.refused(a).expect("refused at the limit");
        assert!(wait <= WINDOW && wait > WINDOW - Duration::from_secs(5));
        assert_eq!(bad.refused(b), None);
        // One IPv6 subscriber's /64 is one address.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        for _ in 0..LIMIT {
            bad.failed(v6("2001:db8::1"));
        }
        assert!(bad.refused(v6("2001:db8::ffff")).is_some());
        assert_eq!(bad.refused(v6("2001:db8:0:1::1")), None);
    }
}
