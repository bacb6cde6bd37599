//! One event's story (its deliveries and attempts), one delivery's record, and
//! the dead letters.

use serde::{Deserialize, Serialize};

use super::deliveries::DeliveryRow;

/// A stored body as the page shows it: always as text, never as markup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Payload {
    /// JSON, re-indented for reading.
    Json(String),
    Text(String),
    /// Not UTF-8: a hex dump of the first bytes.
    Binary {
        hex: String,
        shown: usize,
    },
    /// Removed by retention.
    Pruned,
    /// Never read: the request declared more than the body limit.
    NotRead,
}

pub const BINARY_SHOWN: usize = 1024;

impl Payload {
    pub fn of(body: Option<&[u8]>) -> Self {
        let Some(body) = body else {
            return Payload::Pruned;
        };
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
            if let Ok(pretty) = serde_json::to_string_pretty(&value) {
                return Payload::Json(pretty);
            }
        }
        match std::str::from_utf8(body) {
            Ok(text) => Payload::Text(text.to_owned()),
            // An excerpt may end inside a character: the text before it.
            Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => {
                Payload::Text(String::from_utf8_lossy(&body[..e.valid_up_to()]).into_owned())
            }
            Err(_) => {
                let shown = body.len().min(BINARY_SHOWN);
                let hex = body[..shown]
                    .chunks(16)
                    .map(|line| {
                        line.iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                Payload::Binary { hex, shown }
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptRow {
    pub id: i64,
    /// The destination it was an attempt at.
    pub destination: String,
    pub number: i32,
    pub worker: String,
    #[serde(with = "crate::time::wire")]
    pub started_at: chrono::DateTime<chrono::Utc>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub status: Option<i16>,
    pub latency_ms: Option<i32>,
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub next_attempt_at: Option<chrono::DateTime<chrono::Utc>>,
    pub result: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventSummary {
    pub id: i64,
    pub source: String,
    pub idem_key: String,
    pub state: crate::states::State,
    #[serde(with = "crate::time::wire")]
    pub state_changed_at: chrono::DateTime<chrono::Utc>,
    #[serde(with = "crate::time::wire")]
    pub first_seen_at: chrono::DateTime<chrono::Utc>,
    #[serde(with = "crate::time::wire")]
    pub last_seen_at: chrono::DateTime<chrono::Utc>,
    pub receive_count: i32,
    pub attempt_count: i32,
    #[serde(with = "crate::time::wire")]
    pub next_attempt_at: chrono::DateTime<chrono::Utc>,
    pub last_error: Option<String>,
    pub dead_reason: Option<String>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub first_delivery_id: Option<i64>,
    /// The provider's event type, where a destination's filter needed it.
    pub event_type: Option<String>,
}

/// One lane of an event: its dispatch to one destination of its source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DispatchRow {
    pub destination: String,
    /// `filtered`: the destination's filter does not take the event.
    pub state: crate::states::State,
    #[serde(with = "crate::time::wire")]
    pub state_changed_at: chrono::DateTime<chrono::Utc>,
    pub attempt_count: i32,
    #[serde(default, with = "crate::time::wire_opt")]
    pub next_attempt_at: Option<chrono::DateTime<chrono::Utc>>,
    pub last_error: Option<String>,
    pub dead_reason: Option<String>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// An ordered destination's: the event goes there after those of the
    /// same key received before it ('' : all of its events share one order).
    #[serde(default)]
    pub ordering_key: Option<String>,
    /// Ordered and not settled: the key's events received after this one,
    /// which wait behind it.
    #[serde(default)]
    pub waiting_behind: Option<i64>,
    /// Ordered and waiting behind an earlier event of its key: that
    /// event's id (it goes once that one completes or is dead-lettered).
    #[serde(default)]
    pub held_by: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveryDetail {
    pub row: DeliveryRow,
    pub verified: bool,
    pub verification: Option<String>,
    pub method: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    /// As stored: Authorization, Cookie and the like already redacted.
    pub headers: Vec<(String, String)>,
    pub body_size: i32,
    pub remote_addr: Option<String>,
    pub payload: Payload,
    /// Only an excerpt was stored (a rejected request): the body's first
    /// `kept` bytes of `body_size`, headers and query cut to size.
    pub excerpt: Option<Excerpt>,
    /// Credentials in it were masked; an admin may reveal them.
    pub masked: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Excerpt {
    pub kept: usize,
    /// Of the whole body as received, in hex; None when it was never read.
    pub sha256: Option<String>,
}

/// Which events a list shows; empty means any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventFilter {
    #[serde(default)]
    pub source: String,
    /// `dead`, `completed`, `in_progress` or an event state.
    #[serde(default)]
    pub outcome: String,
    #[serde(default)]
    pub key: String,
    /// UTC, `2026-11-30T14:05`: first received at or after.
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
}

/// An event's states (spec section 5).
pub const EVENT_STATES: &[&str] = &["queued", "processing", "retrying", "completed", "dead"];
pub const EVENT_PAGE_SIZE: i64 = 50;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventPage {
    pub rows: Vec<EventSummary>,
    /// Pass as `before` for the next page.
    pub older: Option<i64>,
}

/// What happened to an event, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TimelineEntry {
    Delivery(DeliveryRow),
    Attempt(AttemptRow),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventDetail {
    pub event: EventSummary,
    /// One per destination, by name.
    pub dispatches: Vec<DispatchRow>,
    pub timeline: Vec<TimelineEntry>,
    /// The delivery whose body is forwarded, in full.
    pub first_delivery: Option<DeliveryDetail>,
    /// Deliveries beyond this many are not listed in the timeline.
    pub deliveries_shown: usize,
    pub deliveries_total: i64,
}

/// Timelines list at most this many deliveries (a storm can bring thousands).
pub const TIMELINE_DELIVERIES: i64 = 200;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetter {
    pub id: i64,
    /// The destinations its dispatches died at (its reason and attempts
    /// are the latest one's).
    pub destinations: Vec<String>,
    pub source: String,
    pub idem_key: String,
    pub dead_reason: Option<String>,
    pub attempt_count: i32,
    pub receive_count: i32,
    #[serde(with = "crate::time::wire")]
    pub first_seen_at: chrono::DateTime<chrono::Utc>,
    #[serde(with = "crate::time::wire")]
    pub died_at: chrono::DateTime<chrono::Utc>,
    /// Keyset cursor: `state_changed_at` in microseconds.
    pub died_micros: i64,
    pub first_delivery_id: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetterPage {
    pub rows: Vec<DeadLetter>,
    /// Pass as `before` (with `before_id`) for the next page.
    pub older: Option<(i64, i64)>,
}

pub const DEAD_PAGE_SIZE: i64 = 50;
