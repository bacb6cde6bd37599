//! Reconciliation (spec section 10): each reconciled source's runs and
//! findings, and a run on demand (operator; audit-logged).

use leptos::prelude::*;
pub use replaysafe_types::reconcile::*;
#[cfg(feature = "ssr")]
use {crate::api::fail, replaysafe_core::ops::reconcile as ops};

#[server(endpoint = "reconciliation")]
pub async fn reconciliation() -> Result<ReconcilePage, ServerFnError> {
    ops::page(&crate::api::cx().await?).await.map_err(fail)
}

/// Runs one reconciliation of `source` now over its last `since_hours`
/// (0: its lookback) and answers its verdict; `mode`: `dry_run` compares
/// only.
#[server(endpoint = "reconcile-run")]
pub async fn run_reconcile(
    source: String,
    since_hours: u32,
    mode: String,
) -> Result<ReconcileRun, ServerFnError> {
    let since = (since_hours > 0).then(|| {
        (chrono::Utc::now() - chrono::Duration::hours(i64::from(since_hours))).to_rfc3339()
    });
    let request = ReconcileRequest {
        since,
        dry_run: mode == "dry_run",
    };
    ops::run(&crate::api::cx().await?, &source, request)
        .await
        .map_err(fail)
}
