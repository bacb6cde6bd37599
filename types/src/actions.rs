//! What operators and admins change (spec section 6): pause and resume,
//! re-delivery through the dedup layer (single and bulk), forced
//! re-execution, and the audit log that records all of it.

use serde::{Deserialize, Serialize};

/// What the dedup layer did with a re-delivery, in the words shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RedeliveryResult {
    /// The stored delivery that was fed back.
    pub redelivered: i64,
    /// The delivery recorded for the re-delivery.
    pub delivery_id: Option<i64>,
    pub event_id: Option<i64>,
    pub idem_key: Option<String>,
    /// claimed, completed, in_progress, dead or rejected (spec section 4).
    pub outcome: crate::states::Outcome,
    /// A dead event was queued again by this re-delivery.
    pub requeued: bool,
    pub message: String,
    /// An admin re-delivered a delivery rejected for its timestamp, with a reason.
    #[serde(default)]
    pub past_window: bool,
}

/// What an operator's dead-letter by hand did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadLetterResult {
    pub event_id: i64,
    /// The destinations whose dispatch went dead (sorted).
    pub destinations: Vec<String>,
    pub message: String,
}

/// Which dead events a bulk re-delivery takes. Empty means any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadFilter {
    #[serde(default)]
    pub source: String,
    /// UTC, `2026-11-30T14:05`: dead-lettered at or after.
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
    /// Words the dead-letter reason contains.
    #[serde(default)]
    pub reason: String,
    /// Dead at this destination (a bulk re-delivery revives only its
    /// dispatches).
    #[serde(default)]
    pub destination: String,
    /// The events of this incident (its "Re-deliver the affected events").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incident: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    pub id: i64,
    #[serde(with = "crate::time::wire")]
    pub at: chrono::DateTime<chrono::Utc>,
    pub username: Option<String>,
    pub action: String,
    pub target: Option<String>,
    pub outcome: String,
    pub detail: Option<String>,
    pub remote_addr: Option<String>,
    /// `username` is an API token's name.
    pub by_token: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditPage {
    pub rows: Vec<AuditEntry>,
    pub older: Option<i64>,
}

pub const AUDIT_PAGE: i64 = 100;
