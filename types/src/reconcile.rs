//! Reconciliation runs (spec section 10): what a run asked its provider and
//! what it found.

use serde::{Deserialize, Serialize};

/// One run's verdict. `seen` = `already_received` + `recovered` +
/// `redelivery_requested` + `still_missing`; `provider_failed_we_completed`
/// counts among `already_received`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReconcileRun {
    pub id: i64,
    pub source: String,
    /// `schedule`, or who asked.
    pub started_by: String,
    pub dry_run: bool,
    /// The events the provider listed from this time...
    #[serde(with = "crate::time::wire")]
    pub window_from: chrono::DateTime<chrono::Utc>,
    /// ...to this one.
    #[serde(with = "crate::time::wire")]
    pub window_to: chrono::DateTime<chrono::Utc>,
    #[serde(with = "crate::time::wire")]
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// None: still running.
    #[serde(default, with = "crate::time::wire_opt")]
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The provider's pages read.
    pub pages: i32,
    /// Events the provider holds in the window.
    pub seen: i64,
    /// Of them, claimed already (by a delivery, or an earlier run).
    pub already_received: i64,
    /// Claimed by this run from the provider's list, to be forwarded once.
    pub recovered: i64,
    /// The provider was asked to deliver them again (GitHub).
    pub redelivery_requested: i64,
    /// Neither received nor recovered (a dry run's missing ones).
    pub still_missing: i64,
    /// Received and completed here while the provider counts their delivery
    /// as failed: its retries are expected, and harmless.
    pub provider_failed_we_completed: i64,
    /// Why the run stopped early, if it did (what it found until then stands).
    pub error: Option<String>,
}

/// Asked of `POST /api/v1/sources/{slug}/reconcile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReconcileRequest {
    /// From when (RFC 3339); default: the source's `lookback_hours` ago.
    #[serde(default)]
    pub since: Option<String>,
    /// Compare and report only: claim nothing, ask for no redelivery.
    #[serde(default)]
    pub dry_run: bool,
}
