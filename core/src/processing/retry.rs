//! The retry policy as data (spec section 5): which answers are retried, and
//! when the next attempt is due.

use std::time::Duration;

use rand::Rng;

/// How one attempt ended, as far as retrying is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx: the application has the event.
    Delivered,
    /// Connection error, timeout, 408, 429 or 5xx: worth another try.
    Retry { retry_after: Option<Duration> },
    /// Any other 4xx: the application refuses the event; retrying cannot help.
    Fatal,
}

pub fn classify(status: Option<u16>, retry_after: Option<Duration>) -> Verdict {
    match status {
        None => Verdict::Retry { retry_after: None },
        Some(200..=299) => Verdict::Delivered,
        Some(408 | 429) | Some(500..=599) => Verdict::Retry { retry_after },
        Some(_) => Verdict::Fatal,
    }
}

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Delay before attempt n+1 after attempt n failed; the last repeats.
    pub schedule: Vec<Duration>,
    /// Spread of the random jitter, as a fraction of the delay (0.2 = ±20%).
    pub jitter: f64,
    /// `Retry-After` is honoured within these bounds.
    pub min_retry_after: Duration,
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        let s = Duration::from_secs;
        Self {
            schedule: vec![
                s(1),
                s(5),
                s(30),
                s(180),
                s(900),
                s(3600),
                s(3 * 3600),
                s(6 * 3600),
            ],
            jitter: 0.2,
            min_retry_after: s(1),
            max_retry_after: s(3600),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(asked) = retry_after {
            return asked.clamp(self.min_retry_after, self.max_retry_after);
        }
        let index = (attempt.max(1) as usize - 1).min(self.schedule.len().saturating_sub(1));
        let base = self
            .schedule
            .get(index)
            .copied()
            .unwrap_or(Duration::from_secs(60));
        let spread = rand::thread_rng().gen_range(-self.jitter..=self.jitter);
        base.mul_f64(1.0 + spread)
    }
}

/// `Retry-After` as seconds or an HTTP date: the three forms RFC 9110 has a
/// recipient read, else an RFC 2822 date with another zone, which some
/// servers send.
pub fn parse_retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = match httpdate::parse_http_date(value) {
        Ok(at) => chrono::DateTime::<chrono::Utc>::from(at),
        Err(_) => chrono::DateTime::parse_from_rfc2822(value).ok()?.to_utc(),
    };
    (at - now).to_std().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified_as_the_spec_says() {
        assert_eq!(classify(Some(200), None), Verdict::Delivered);
        assert_eq!(classify(Some(204), None), Verdict::Delivered);
        for retried in [None, Some(408), Some(429), Some(500), Some(502), Some(503)] {
            assert!(
                matches!(classify(retried, None), Verdict::Retry { .. }),
                "{retried:?}"
            );
        }
        for fatal in [400, 401, 403, 404, 409, 410, 422, 301] {
            assert_eq!(classify(Some(fatal), None), Verdict::Fatal, "{fatal}");
        }
    }

    #[test]
    fn delays_follow_the_schedule_with_bounded_jitter() {
        let p = RetryPolicy::default();
        for _ in 0..100 {
            let d = p.delay(1, None).as_secs_f64();
            assert!((0.8..=1.2).contains(&d), "{d}");
            let d = p.delay(3, None).as_secs_f64();
            assert!((24.0..=36.0).contains(&d), "{d}");
            let d = p.delay(50, None).as_secs_f64();
            assert!(
                (6.0 * 3600.0 * 0.8..=6.0 * 3600.0 * 1.2).contains(&d),
                "{d}"
            );
        }
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let p = RetryPolicy::default();
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(p.delay(1, Some(Duration::ZERO)), Duration::from_secs(1));
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(86400))),
            Duration::from_secs(3600)
        );
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 12:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        // The obsolete forms a recipient must still read.
        assert_eq!(
            parse_retry_after("Monday, 30-Nov-26 12:01:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Mon Nov 30 12:00:05 2026", now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 13:00:10 +0100", now),
            Some(Duration::from_secs(10))
        );
        // A date already past: no wait asked for.
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 11:00:00 GMT", now),
            None
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
