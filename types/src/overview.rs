//! The overview's figures, read from the per-minute rollups (`minute_stats`)
//! and a few capped live counts: no page view scans deliveries.

use serde::{Deserialize, Serialize};

/// Counts above this are shown as "at least": counting a huge backlog exactly
/// would make the page slow exactly when it is needed.
pub const COUNT_CAP: i64 = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Window {
    Hour,
    Day,
    Week,
}

impl Window {
    pub fn parse(s: &str) -> Self {
        match s {
            "day" => Window::Day,
            "week" => Window::Week,
            _ => Window::Hour,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Week => "week",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Window::Hour => "last hour",
            Window::Day => "last 24 hours",
            Window::Week => "last 7 days",
        }
    }
    pub fn minutes(self) -> i64 {
        match self {
            Window::Hour => 60,
            Window::Day => 24 * 60,
            Window::Week => 7 * 24 * 60,
        }
    }
    /// Minutes per chart bar: about 60 to 100 bars whatever the window.
    pub fn bucket_minutes(self) -> i64 {
        match self {
            Window::Hour => 1,
            Window::Day => 15,
            Window::Week => 120,
        }
    }
}

/// Totals over a window, for one source or all.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Figures {
    pub deliveries: i64,
    pub claimed: i64,
    /// Deliveries of a key already held: completed, in progress or dead.
    pub duplicates: i64,
    pub rejected: i64,
    pub bad_signature: i64,
    pub redeliveries: i64,
    pub attempts: i64,
    pub attempts_failed: i64,
    pub events_completed: i64,
    pub events_dead: i64,
    pub ack_hist: Vec<i64>,
    pub e2e_hist: Vec<i64>,
}

impl Figures {
    /// Duplicates among verified deliveries.
    pub fn duplicate_rate(&self) -> Option<f64> {
        let verified = self.claimed + self.duplicates;
        (verified > 0).then(|| self.duplicates as f64 / verified as f64)
    }
    pub fn ack_ms(&self, q: f64) -> Option<f64> {
        super::quantile_ms(&self.ack_hist, q)
    }
    pub fn e2e_ms(&self, q: f64) -> Option<f64> {
        super::quantile_ms(&self.e2e_hist, q)
    }
    /// Attempts per event that reached an end (completed or dead).
    pub fn attempts_per_event(&self) -> Option<f64> {
        let ended = self.events_completed + self.events_dead;
        (ended > 0).then(|| self.attempts as f64 / ended as f64)
    }
}

/// What is left to do, and what is dead, now (core's `events::backlog`
/// defines each word). Counts are of dispatches (an event has one per
/// destination) but `dead_letters`, which counts events; each stops at
/// `COUNT_CAP` per destination.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Backlog {
    /// May be attempted now: due time passed, source not paused, breaker closed.
    pub due: i64,
    /// Not due: backing off, source paused, or breaker not closed.
    pub waiting: i64,
    /// Leased: an attempt under way.
    pub in_flight: i64,
    /// Seconds the longest-waiting due dispatch has waited.
    pub oldest_due_secs: Option<f64>,
    /// Dead events: an event once, however many of its dispatches are dead.
    pub dead_letters: i64,
    /// Events dead-lettered in the last 10 minutes.
    pub dead_last_10m: i64,
    /// The same, destination by destination (dead letters as dispatches).
    pub by_destination: Vec<DestinationBacklog>,
}

impl Backlog {
    /// Dispatches not yet completed, dead or filtered.
    pub fn total(&self) -> i64 {
        self.due + self.waiting + self.in_flight
    }

    /// Adds a destination's row (its dead letters are the source's to count).
    pub fn add(&mut self, row: &DestinationBacklog) {
        self.due += row.due;
        self.waiting += row.waiting;
        self.in_flight += row.in_flight;
        self.oldest_due_secs = match (self.oldest_due_secs, row.oldest_due_secs) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.by_destination.push(row.clone());
    }
}

/// One destination's share of a backlog.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DestinationBacklog {
    pub source: String,
    pub destination: String,
    pub due: i64,
    pub waiting: i64,
    pub in_flight: i64,
    pub oldest_due_secs: Option<f64>,
    /// Its dead dispatches.
    pub dead_letters: i64,
    /// An ordered destination's keys held by an event that failed and waits
    /// to be retried: the key's later events wait behind it.
    #[serde(default)]
    pub blocked_keys: i64,
}

/// A key of an ordered destination held by an event that failed and waits
/// to be retried; the key's events received after it wait behind it until
/// it completes or is dead-lettered (by its attempts or by hand).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlockedKey {
    pub source: String,
    pub destination: String,
    /// The key ('' : the destination orders all of its events as one).
    pub ordering_key: String,
    /// The event holding it.
    pub event_id: i64,
    pub idem_key: String,
    pub attempt_count: i32,
    #[serde(with = "crate::time::wire")]
    pub next_attempt_at: chrono::DateTime<chrono::Utc>,
    pub last_error: Option<String>,
    /// The key's events waiting behind it.
    pub waiting: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SourceFigures {
    pub slug: String,
    pub provider: String,
    pub paused: bool,
    pub figures: Figures,
    pub backlog: Backlog,
}

/// One chart bar.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Point {
    /// Start of the bar, Unix milliseconds.
    pub at_ms: i64,
    pub deliveries: i64,
    pub duplicates: i64,
    pub rejected: i64,
    pub ack_p99_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Overview {
    pub window: Window,
    /// The source the figures are for; None: all sources.
    pub source: Option<String>,
    #[serde(with = "crate::time::wire")]
    pub generated_at: chrono::DateTime<chrono::Utc>,
    pub totals: Figures,
    pub backlog: Backlog,
    pub per_source: Vec<SourceFigures>,
    pub series: Vec<Point>,
    pub bucket_minutes: i64,
    /// The alerts firing now (`api::alerts`), for the banner.
    pub alerts: Vec<crate::alerts::Condition>,
    /// How far behind the primary these figures are, in seconds, when they
    /// come from the read replica (`read_database_url`) and it lags by
    /// `LAG_SHOWN` or more.
    #[serde(default)]
    pub replica_lag_secs: Option<f64>,
}
