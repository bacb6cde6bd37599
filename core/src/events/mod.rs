//! The owner of an event's life (spec sections 4 to 6). An event's state is
//! its dispatches' (one per destination it goes to, `dispatches.state`;
//! the event is dead while any is dead, `event_state()`), and nothing else
//! in the workspace writes them, nor the destinations' gates: every
//! transition is one function here, and each one's SQL is guarded by the
//! state(s) it leaves, so two actors racing for the same dispatch serialise
//! on its row and only one moves it (`architecture.rs` checks the owner).
//!
//! ```text
//!            claim (provider)                       finish: 2xx (worker | sync holder)
//!   (none) ──────────────────▶ queued ──lease──▶ processing ─────────────────▶ completed
//!                               ▲  ▲   (worker)   │ ▲   │                        │  │
//!                               │  │              │ │   │ finish: 5xx, timeout   │  │
//!        revive (operator's     │  │   release    │ │   ▼                        │  │
//!        re-delivery of a dead) │  └──(paused)────┘ │ retrying                   │  │
//!                               │                   │   │                        │  │
//!                               │     lease, takeover    │ finish: 4xx,          │  │
//!                               │   (worker | provider)  │ attempts used up      │  │
//!                               │                        ▼                       │  │
//!                               └────────────────────── dead ◀───────────────────┘  │
//!                               ▲                        (finish from processing)   │
//!                               └───────────── force (admin) ───────────────────────┘
//!
//!   queued, retrying ──dead_letter (operator, by hand)──▶ dead
//!   completed, dead ──prune (retention, after dedup_ttl_days)──▶ (none)
//! ```
//!
//! Who moves what:
//! - **provider** (a delivery): `claim`, `claim_batch` create an event;
//!   `duplicate` counts a receipt and, in sync mode, takes over an event that
//!   its requests forward (`Forwarder::Request`) when it waits or its lease
//!   expired.
//! - **worker**: `lease` takes due events that workers forward
//!   (`Forwarder::Workers`), including expired leases (takeover); `finish`
//!   records an attempt and moves the event on while it still holds the lease.
//! - **sync holder** (the request that holds a sync claim): `start_inline`,
//!   `finish`, `complete_inline`; a paused source is released to the workers
//!   (`release_paused`).
//! - **operator**: `revive` (re-delivery of a dead event); `dead_letter`
//!   (gives up on a waiting event by hand, so an ordered key it holds goes on).
//! - **admin**: `force` (a completed event runs once more).
//! - **retention**: `prune` forgets settled keys.

pub mod backlog;
pub mod breaker;
mod claim;
mod operator;
mod work;

pub use claim::{
    claim, claim_batch, duplicate, guard, prune_guard, revive, BatchClaim, BatchRow, Duplicate,
    InlineLease, Planned,
};
pub use operator::{dead_letter, force, prune, DeadLettered, Forced};
pub use work::{
    adopt_orphans, complete_inline, finish, finish_each, lease, lease_gated, lease_probe,
    release_paused, release_unbegun, start_inline, AttemptRecord, Done, Gate, Inline, Leased, Next,
    Runnable, REQUEST_GRACE,
};

/// A sync-mode destination's answer, stored with its event and returned
/// byte for byte to later duplicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: i16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl StoredResponse {
    /// Given back byte for byte; a missing content type is sent as bytes.
    pub fn answer(&self) -> crate::providers::Answer {
        crate::providers::Answer {
            status: self.status as u16,
            content_type: self
                .content_type
                .clone()
                .unwrap_or_else(|| "application/octet-stream".into()),
            body: self.body.clone(),
            headers: Vec::new(),
        }
    }

    pub fn from_answer(answer: &crate::providers::Answer) -> Self {
        Self {
            status: i16::try_from(answer.status).unwrap_or(i16::MAX),
            content_type: Some(answer.content_type.clone()),
            body: answer.body.clone(),
        }
    }
}

pub use replaysafe_types::states::State;

/// Who forwards an event: the worker pool, or (sync mode) the provider's
/// own requests, inside which the destination is called. Stored in
/// `events.forwarder`. A sync-mode event becomes the workers' once no
/// provider request is waiting for it: an operator's re-delivery, a force,
/// or a delivery that arrived while its source was paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarder {
    Workers,
    Request,
}

impl Forwarder {
    pub fn as_str(self) -> &'static str {
        match self {
            Forwarder::Workers => "workers",
            Forwarder::Request => "request",
        }
    }
}

/// A lease outlives the attempt's timeout by this much, so that only a worker
/// that died (not a slow one) loses it: takeover within timeout + 30 s.
pub const LEASE_MARGIN: std::time::Duration = std::time::Duration::from_secs(25);
