//! Bulk re-delivery as a job (spec section 6, issue 16): an operator asks
//! for every dead event matching a filter to be re-delivered; the server
//! runs it a step at a time (`ops::actions::redeliver_each`, the same guard as a
//! single re-delivery), whoever asked and from wherever (the dashboard, the
//! API, the CLI). Its progress and per-event outcomes are rows any process
//! reads; an operator may cancel it between steps. This module alone moves
//! a job from state to state, each move guarded by the state it leaves.

use serde::{Deserialize, Serialize};

use super::actions::{DeadFilter, RedeliveryResult};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkJob {
    pub id: i64,
    pub state: crate::states::JobState,
    pub filter: DeadFilter,
    /// The user or token that started it; each step runs as them.
    pub started_by: String,
    /// Dead events matching the filter when it started.
    pub total: i64,
    /// Events re-delivered so far, each with its outcome in the results.
    pub done: i64,
    /// Of those, queued again.
    pub requeued: i64,
    #[serde(with = "crate::time::wire")]
    pub created_at: chrono::DateTime<chrono::Utc>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub cancelled_by: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
}

impl BulkJob {
    pub fn finished(&self) -> bool {
        self.state.is_finished()
    }

    /// Re-delivered but refused by the dedup layer (already completed, in
    /// progress, no payload).
    pub fn refused(&self) -> i64 {
        self.done - self.requeued
    }
}

/// A page of a job's per-event outcomes, by event id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobResults {
    pub results: Vec<RedeliveryResult>,
    /// Pass as `after` for the next page; None when no more are recorded yet.
    pub next_after: Option<i64>,
}

/// A job with the outcomes recorded after a given event: what a watcher polls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobProgress {
    pub job: BulkJob,
    pub results: JobResults,
}

/// A job takes at most this many dead events: a larger filter is refused
/// (narrow it by time), so no job holds the server for hours.
pub const JOB_MAX_EVENTS: i64 = 100_000;
/// Jobs queued or running at once, all callers together.
pub const UNFINISHED_JOBS_MAX: i64 = 4;
/// Events per step: a job records its progress, and checks for
/// cancellation, after each.
pub const BULK_STEP: i64 = 20;
/// Outcomes per page of results.
pub const RESULTS_PAGE: i64 = 200;
/// Jobs the recent list shows.
pub const RECENT_JOBS: i64 = 20;
