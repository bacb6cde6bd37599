//! Incidents (issue 40): what on-call people think in. Failing attempts
//! grouped by source, destination and failure kind (the status, or the
//! transport error's kind) and the first line of the answer with numbers,
//! hex strings and UUIDs replaced, so the same `400 invalid currency` is
//! one incident and a new message a new one.

use serde::{Deserialize, Serialize};

use crate::states::IncidentState;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Incident {
    pub id: i64,
    pub source: String,
    pub destination: String,
    /// `HTTP 400`, `timed out`, `connection failed`, ...
    pub kind: String,
    /// The answer's first line, numbers (`<n>`), hex strings (`<hex>`) and
    /// UUIDs (`<uuid>`) replaced: what makes two failures one incident.
    pub fingerprint: String,
    pub state: IncidentState,
    /// Failing attempts counted.
    pub failures: i64,
    /// Events that failed this way.
    pub count: i64,
    #[serde(with = "crate::time::wire")]
    pub first_seen_at: chrono::DateTime<chrono::Utc>,
    #[serde(with = "crate::time::wire")]
    pub last_seen_at: chrono::DateTime<chrono::Utc>,
    #[serde(with = "crate::time::wire")]
    pub state_changed_at: chrono::DateTime<chrono::Utc>,
    /// Who moved it to its state; None for an open one, or one that
    /// resolved by itself.
    pub state_changed_by: Option<String>,
    /// One failing answer as the destination sent it (an excerpt).
    pub sample_status: Option<i16>,
    pub sample_response: Option<String>,
    pub sample_event_id: Option<i64>,
}

/// An event an incident holds, with where it stands now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AffectedEvent {
    pub event_id: i64,
    pub idem_key: String,
    /// Its dispatch to the incident's destination: `dead`, `retrying`,
    /// `completed`, ...
    pub state: String,
}

/// An incident's page: the incident, its newest affected events, and how
/// many of them are dead at its destination now (what a re-delivery takes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IncidentDetail {
    pub incident: Incident,
    pub affected: Vec<AffectedEvent>,
    pub dead_now: i64,
}

/// Affected events an incident's page lists.
pub const AFFECTED_SHOWN: i64 = 100;
/// Incidents a list shows.
pub const INCIDENTS_LISTED: i64 = 200;
