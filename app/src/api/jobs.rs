//! Bulk re-delivery as a job (spec section 6, issue 16): an operator asks
//! for every dead event matching a filter to be re-delivered; the server
//! runs it a step at a time (`ops::actions::redeliver_each`, the same guard as a
//! single re-delivery), whoever asked and from wherever (the dashboard, the
//! API, the CLI). Its progress and per-event outcomes are rows any process
//! reads; an operator may cancel it between steps. This module alone moves
//! a job from state to state, each move guarded by the state it leaves.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::jobs::queue as ops;
use replaysafe_types::actions::DeadFilter;
pub use replaysafe_types::jobs::*;
/// Starts re-delivering every dead event matching the filter (operator).
#[server(endpoint = "bulk-job-start")]
pub async fn start_bulk_job(
    #[server(default)] filter: DeadFilter,
) -> Result<BulkJob, ServerFnError> {
    ops::start(&crate::api::cx().await?, &filter)
        .await
        .map_err(fail)
}

/// A job and its outcomes recorded after event `after`.
#[server(endpoint = "bulk-job")]
pub async fn bulk_job_progress(id: i64, after: Option<i64>) -> Result<JobProgress, ServerFnError> {
    let cx = crate::api::cx().await?;
    Ok(JobProgress {
        job: ops::show(&cx, id).await.map_err(fail)?,
        results: ops::results(&cx, id, after.unwrap_or(0))
            .await
            .map_err(fail)?,
    })
}

/// Stops a job before its next step (operator).
#[server(endpoint = "bulk-job-cancel")]
pub async fn cancel_bulk_job(id: i64) -> Result<BulkJob, ServerFnError> {
    ops::cancel(&crate::api::cx().await?, id)
        .await
        .map_err(fail)
}

/// The most recent jobs, newest first.
#[server(endpoint = "bulk-jobs")]
pub async fn recent_bulk_jobs() -> Result<Vec<BulkJob>, ServerFnError> {
    ops::recent(&crate::api::cx().await?).await.map_err(fail)
}
