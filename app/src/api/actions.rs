//! What operators and admins change (spec section 6): pause and resume,
//! re-delivery through the dedup layer (single and bulk), forced
//! re-execution, dead-letter by hand, and the audit log that records all of
//! it.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::ops::actions as ops;
pub use replaysafe_types::actions::*;
#[server(endpoint = "source-paused")]
pub async fn set_source_paused(slug: String, paused: bool) -> Result<(), ServerFnError> {
    ops::set_paused(&crate::api::cx().await?, slug, paused)
        .await
        .map_err(fail)
}

/// Opens a destination's circuit breaker by hand (it stays open until an
/// operator closes it) or closes it (operator; audit-logged).
#[server(endpoint = "breaker")]
pub async fn set_breaker(
    slug: String,
    destination: String,
    open: bool,
) -> Result<(), ServerFnError> {
    ops::set_breaker(&crate::api::cx().await?, slug, destination, open)
        .await
        .map_err(fail)
}

/// Re-delivers one stored delivery through the receiver pipeline. A
/// delivery rejected for its timestamp (the window stops captured replays)
/// takes an admin and a typed `past_window_reason`. `destination`: revive
/// only the event's dispatch to it (empty: every dead one).
#[server(endpoint = "redeliver")]
pub async fn redeliver(
    delivery_id: i64,
    #[server(default)] past_window_reason: String,
    #[server(default)] destination: String,
) -> Result<RedeliveryResult, ServerFnError> {
    let cx = crate::api::cx().await?;
    ops::redeliver(&cx, delivery_id, past_window_reason, destination)
        .await
        .map_err(fail)
}

/// An admin runs a completed event again: the same Idempotency-Key, a header
/// marking it forced, audit-logged. `confirm_key` must be the event's key.
/// `destination`: only its completed dispatch (empty: every completed one).
#[server(endpoint = "force")]
pub async fn force_reexecution(
    event_id: i64,
    confirm_key: String,
    reason: String,
    #[server(default)] destination: String,
) -> Result<String, ServerFnError> {
    let cx = crate::api::cx().await?;
    ops::force(&cx, event_id, confirm_key, reason, destination)
        .await
        .map_err(fail)
}

/// An operator gives up on a waiting event: it goes dead with the reason,
/// so an ordered destination's key it holds goes on (audit-logged).
/// `destination`: only its waiting dispatch there (empty: every one).
#[server(endpoint = "dead-letter")]
pub async fn dead_letter_event(
    event_id: i64,
    reason: String,
    #[server(default)] destination: String,
) -> Result<DeadLetterResult, ServerFnError> {
    let cx = crate::api::cx().await?;
    ops::dead_letter(&cx, event_id, reason, destination)
        .await
        .map_err(fail)
}

#[server(endpoint = "audit")]
pub async fn list_audit(before: Option<i64>) -> Result<AuditPage, ServerFnError> {
    ops::audit_log(&crate::api::cx().await?, before)
        .await
        .map_err(fail)
}
