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
/// only, `recover` recovers.
#[server(endpoint = "reconcile-run")]
pub async fn run_reconcile(
    source: String,
    since_hours: u32,
    mode: String,
) -> Result<ReconcileRun, ServerFnError> {
    use replaysafe_core::error::OpError;
    let cx = crate::api::cx().await?;
    let dry_run = match mode.as_str() {
        "dry_run" => true,
        "recover" => false,
        other => {
            return Err(fail(OpError::BadRequest(format!(
                "mode {other:?}: dry_run or recover"
            ))))
        }
    };
    // Further back than any provider keeps is refused by the run itself.
    let since = (since_hours > 0).then(|| {
        let hours = chrono::Duration::hours(i64::from(since_hours.min(24 * 365)));
        (chrono::Utc::now() - hours).to_rfc3339()
    });
    ops::run(&cx, &source, ReconcileRequest { since, dry_run })
        .await
        .map_err(fail)
}
