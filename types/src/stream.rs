//! `GET /api/v1/events/stream` (issue 38, spec section 10): each new event
//! as replaysafe forwards it, for `replaysafe listen`.

use serde::{Deserialize, Serialize};

/// One new event, as its destinations receive it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamedEvent {
    pub event_id: i64,
    pub source: String,
    /// The provider's event id (or the key the source's template made).
    pub key: String,
    /// `Idempotency-Key` as forwarded: `{source}:{key}`.
    pub idempotency_key: String,
    pub event_type: Option<String>,
    #[serde(with = "crate::time::wire")]
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub content_type: Option<String>,
    /// The provider's event headers that go on to destinations (never its
    /// signature headers), lowercase names.
    pub headers: Vec<(String, String)>,
    /// The body byte for byte, base64 (standard alphabet, padded); absent
    /// when retention removed it already.
    pub body_base64: Option<String>,
    /// Credentials in the body were masked (any token but an admin's).
    pub masked: bool,
}

/// The first message of a stream: what it follows and how bodies come.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamStart {
    pub sources: Vec<String>,
    pub event_type: Option<String>,
    /// Bodies come masked as the dashboard shows them (any token but an admin's).
    pub masked: bool,
    /// Where this stream goes on from (its `Last-Event-ID`).
    pub cursor: String,
}

/// The format name a delivery's export carries.
pub const CAPTURED_FORMAT: &str = "replaysafe-delivery/1";

/// A stored delivery taken out whole (`replaysafe deliveries export`,
/// admin): what the provider sent, and what replaysafe forwards of it.
/// `replaysafe prove --from-file` sends it without a running replaysafe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CapturedDelivery {
    /// `replaysafe-delivery/1`
    pub format: String,
    pub delivery_id: i64,
    pub source: String,
    /// The event it was claimed as, or found a duplicate of (none when rejected).
    pub event_id: Option<i64>,
    pub key: Option<String>,
    /// `Idempotency-Key` as forwarded: `{source}:{key}`.
    pub idempotency_key: Option<String>,
    pub event_type: Option<String>,
    #[serde(with = "crate::time::wire")]
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub method: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    /// Every header as received, signatures included, lowercase names.
    pub headers: Vec<(String, String)>,
    /// Those that go on to destinations.
    pub forwarded_headers: Vec<(String, String)>,
    /// The body byte for byte, base64; absent when retention removed it.
    pub body_base64: Option<String>,
    /// Only the body's first bytes were kept (it was over the body limit).
    pub truncated: bool,
}
