//! A request rate per key (an API token) and process: a token bucket, so a
//! client may burst to twice its rate and then gets 429 with `Retry-After`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Limiter<K> {
    rate: u32,
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<K, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl<K: Hash + Eq> Limiter<K> {
    pub fn new(per_second: u32) -> Self {
        let rate = per_second.max(1);
        let per_second = f64::from(rate);
        Self {
            rate,
            per_second,
            burst: 2.0 * per_second,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Requests a second.
    pub fn per_second(&self) -> u32 {
        self.rate
    }

    /// Takes one request's worth for `key`; Err: how long until it may.
    pub fn take(&self, key: K) -> Result<(), Duration> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        // Full buckets of keys gone quiet carry nothing: forget them.
        if buckets.len() > 10_000 {
            let refill = Duration::from_secs_f64(self.burst / self.per_second);
            buckets.retain(|_, b| now.duration_since(b.at) < refill);
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let refilled = now.duration_since(bucket.at).as_secs_f64() * self.per_second;
        bucket.tokens = (bucket.tokens + refilled).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / self.per_second,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_twice_the_rate_then_refusals_with_the_wait() {
        let limiter = Limiter::new(5);
        for _ in 0..10 {
            assert!(limiter.take(1).is_ok());
        }
        let wait = limiter.take(1).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(200),
            "{wait:?}"
        );
        // Another token has its own bucket.
        assert!(limiter.take(2).is_ok());
    }
}
