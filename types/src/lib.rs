//! The types the dashboard, the API and the CLI share: what the server
//! answers and what it is asked, roles, and the figures' buckets. Built for
//! the browser (wasm) as for the server: no database, no web framework.
//! `openapi` derives their schemas for `/api/v1`'s document; `sqlx` reads
//! rows straight into them.

pub mod actions;
pub mod alerts;
pub mod auth;
pub mod deliveries;
pub mod events;
pub mod incidents;
pub mod jobs;
pub mod overview;
pub mod reconcile;
pub mod states;
pub mod stream;
pub mod time;
pub mod tokens;
pub mod users;

use serde::{Deserialize, Serialize};

/// Upper bounds (milliseconds) of the latency histograms kept per minute; a
/// last bucket holds everything slower. The server's rollup uses the same.
pub const LATENCY_BOUNDS_MS: &[f64] = &[
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    30_000.0,
    60_000.0,
    300_000.0,
    1_800_000.0,
    3_600_000.0,
];

/// The `q` quantile (0..1) of a histogram over `LATENCY_BOUNDS_MS`, linearly
/// interpolated inside its bucket; None when the histogram is empty.
pub fn quantile_ms(histogram: &[i64], q: f64) -> Option<f64> {
    let total: i64 = histogram.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut seen = 0i64;
    for (i, &count) in histogram.iter().enumerate() {
        if count > 0 && (seen + count) as f64 >= rank {
            let lower = if i == 0 {
                0.0
            } else {
                LATENCY_BOUNDS_MS[i - 1]
            };
            // The open last bucket reports its lower bound: "at least this".
            let Some(&upper) = LATENCY_BOUNDS_MS.get(i) else {
                return Some(lower);
            };
            let within = ((rank - seen as f64) / count as f64).clamp(0.0, 1.0);
            return Some(lower + (upper - lower) * within);
        }
        seen += count;
    }
    LATENCY_BOUNDS_MS.last().copied()
}

/// A configured source as the Sources page shows it. Secrets never leave the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SourceSummary {
    pub slug: String,
    pub provider: String,
    pub mode: String,
    pub destination: Option<String>,
    pub paused: bool,
    /// Paused or resumed by an operator, overriding the config file.
    pub paused_by_operator: bool,
    /// False for a source removed from the config whose history remains.
    pub in_config: bool,
    /// A worker's lease on one attempt is this plus a margin.
    pub attempt_timeout_secs: i32,
    #[serde(default, with = "crate::time::wire_opt")]
    pub paused_changed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Its destinations, in the config's order.
    pub destinations: Vec<DestinationSummary>,
    /// The whole URL its provider posts to (`public_url` + `/hooks/{slug}`).
    #[serde(default)]
    pub receive_url: String,
    /// What to paste where in the provider's settings, and which setting
    /// of the source takes its secret.
    #[serde(default)]
    pub setup: String,
}

/// One destination of a source as the config names it (no secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DestinationSummary {
    pub name: String,
    pub url: String,
    /// Which events it takes, in words; None: every one.
    pub filter: Option<String>,
    /// Its rate and concurrency limits, in words; None: none.
    pub limits: Option<String>,
    /// Its circuit breaker: `closed`, `open` or `half_open` (a probe is out).
    #[serde(default)]
    pub breaker: states::Breaker,
    /// Opened by an operator: it stays open until one closes it.
    #[serde(default)]
    pub breaker_by_hand: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        let mut h = vec![0i64; LATENCY_BOUNDS_MS.len() + 1];
        assert_eq!(quantile_ms(&h, 0.5), None);
        h[3] = 10; // ten answers between 2 and 5 ms
        assert_eq!(quantile_ms(&h, 0.5), Some(3.5));
        assert_eq!(quantile_ms(&h, 1.0), Some(5.0));
        h[LATENCY_BOUNDS_MS.len()] = 10; // ten slower than the last bound
        assert_eq!(quantile_ms(&h, 0.99), Some(3_600_000.0));
        assert_eq!(quantile_ms(&h, 0.25), Some(3.5));
    }
}
