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
