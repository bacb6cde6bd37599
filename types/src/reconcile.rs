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

/// A key a run found the provider had and replaysafe had not, however many
/// runs saw it, and what became of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReconcileFinding {
    /// The provider's id for it (Stripe's event id, GitHub's delivery guid).
    pub idem_key: String,
    pub event_type: Option<String>,
    /// `recovered` (claimed from the provider's list), `redelivery_requested`
    /// (the provider was asked to send it again) or `missing`.
    pub verdict: String,
    /// Why it is `missing`: `dry_run` (a real run would act on it),
    /// `refused` (the provider cannot send it again), `given_up` (asked for
    /// as often as a key is), `not_tried` (the run stopped first),
    /// `unkeyed` (the listed event had no key).
    pub missing_why: Option<String>,
    /// When a run first found it missing.
    #[serde(with = "crate::time::wire")]
    pub found_at: chrono::DateTime<chrono::Utc>,
    /// When a run last found it (missing, or asked for).
    #[serde(with = "crate::time::wire")]
    pub last_found_at: chrono::DateTime<chrono::Utc>,
    pub first_run_id: i64,
    pub redelivery_requests: i32,
    /// The event it became, once claimed (recovered, or redelivered and
    /// received).
    pub event_id: Option<i64>,
    pub state: Option<crate::states::State>,
}

/// A reconciled source as the Reconciliation page shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReconcileSource {
    pub source: String,
    pub provider: String,
    /// None: only on demand.
    pub every_minutes: Option<u64>,
    pub lookback_hours: u64,
    /// Keys found missing since the source was first reconciled, each once.
    pub missed_total: i64,
    /// The latest runs, newest first.
    pub runs: Vec<ReconcileRun>,
    /// The latest findings, newest first.
    pub findings: Vec<ReconcileFinding>,
}

/// A source that is not reconciled, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotReconciled {
    pub source: String,
    pub provider: String,
    pub why: String,
}

/// The Reconciliation page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReconcilePage {
    pub sources: Vec<ReconcileSource>,
    pub not_reconciled: Vec<NotReconciled>,
}
