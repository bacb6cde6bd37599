//! The deliveries list: newest first, filtered, keyset-paginated by id, and
//! polled for newer rows so the page stays live.

use serde::{Deserialize, Serialize};

use crate::states::Outcome;

pub const PAGE_SIZE: i64 = 50;

/// The outcomes a delivery can have (spec section 4), for the filter.
pub const OUTCOMES: &[&str] = &["claimed", "completed", "in_progress", "dead", "rejected"];

/// Filters, as they appear in the page's query string. Empty means any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveryFilter {
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub outcome: String,
    /// An exact status (`409`) or a class (`4xx`).
    #[serde(default)]
    pub status: String,
    /// An idempotency key or provider id, or `slug:key` as the application
    /// sees it in `Idempotency-Key`.
    #[serde(default)]
    pub key: String,
    /// RFC 3339, or a wall time without an offset (as a `datetime-local`
    /// input gives it: `2026-11-30T14:05`) read as UTC.
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
}

impl DeliveryFilter {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveryRow {
    pub id: i64,
    /// Kept to the microsecond; written to the millisecond.
    #[serde(with = "crate::time::wire")]
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub source: String,
    pub event_id: Option<i64>,
    pub idem_key: Option<String>,
    pub outcome: crate::states::Outcome,
    pub http_status: i16,
    pub reject_reason: Option<String>,
    /// signature, timestamp, key or size (rejected deliveries only).
    pub reject_kind: Option<String>,
    pub ack_micros: Option<i32>,
    pub redelivery_of: Option<i64>,
}

impl DeliveryRow {
    /// The outcome in the words on-call engineers read (spec section 4).
    pub fn outcome_words(&self) -> String {
        outcome_words(
            self.outcome,
            self.http_status,
            self.reject_reason.as_deref(),
        )
    }
}

/// "claimed", "already completed", "409 in-progress", "dead-lettered",
/// "rejected: bad signature", ...
pub fn outcome_words(outcome: Outcome, http_status: i16, reject_reason: Option<&str>) -> String {
    match outcome {
        Outcome::Claimed => "claimed".into(),
        Outcome::Completed => "already completed".into(),
        Outcome::InProgress if http_status == 409 => "409 in-progress".into(),
        Outcome::InProgress => "in-progress (queued)".into(),
        Outcome::Dead => "dead-lettered".into(),
        Outcome::Unavailable => "503 unavailable".into(),
        Outcome::Rejected => format!("rejected: {}", rejection_kind(http_status, reject_reason)),
        Outcome::Refused => "refused".into(),
    }
}

fn rejection_kind(http_status: i16, reason: Option<&str>) -> &'static str {
    let reason = reason.unwrap_or_default().to_ascii_lowercase();
    match http_status {
        413 => "too large",
        401 if reason.contains("timestamp") => "stale timestamp",
        401 => "bad signature",
        400 if reason.contains("missing") || reason.contains("id") => "no event id",
        _ => "bad request",
    }
}

/// The CSS class carrying the outcome's colour (the words carry it too).
pub fn outcome_class(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Claimed => "badge badge-ok",
        Outcome::Completed => "badge badge-info",
        Outcome::InProgress => "badge badge-warn",
        Outcome::Dead | Outcome::Rejected | Outcome::Unavailable | Outcome::Refused => {
            "badge badge-bad"
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveryPage {
    pub rows: Vec<DeliveryRow>,
    /// Pass as `before` for the next (older) page; None on the last page.
    pub older: Option<i64>,
    /// A filter the server could not read, explained.
    pub filter_error: Option<String>,
    /// Rejections counted but not recorded in the last day (strangers over
    /// their address's rate), on the first page where rejections are shown.
    pub unrecorded: Option<Unrecorded>,
    /// How far behind the primary this page is, in seconds, when it comes
    /// from the read replica and it lags by `LAG_SHOWN` or more.
    #[serde(default)]
    pub replica_lag_secs: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Unrecorded {
    pub count: i64,
    /// The addresses that sent most, with their counts.
    pub top: Vec<(String, i64)>,
}

/// The window the unrecorded count covers.
pub const UNRECORDED_HOURS: i32 = 24;
