//! One event's story (its deliveries and attempts), one delivery's record, and
//! the dead letters.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::ops::events as ops;
pub use replaysafe_types::events::*;
/// `reveal`: an admin asks to see the stored request's credentials (audit-logged).
#[server(endpoint = "event")]
pub async fn get_event(
    id: i64,
    #[server(default)] reveal: bool,
) -> Result<EventDetail, ServerFnError> {
    ops::event_detail(&crate::api::cx().await?, id, reveal)
        .await
        .map_err(fail)
}

/// `reveal`: as for `get_event`.
#[server(endpoint = "delivery")]
pub async fn get_delivery(
    id: i64,
    #[server(default)] reveal: bool,
) -> Result<DeliveryDetail, ServerFnError> {
    ops::delivery_detail(&crate::api::cx().await?, id, reveal)
        .await
        .map_err(fail)
}

/// Dead-lettered events, most recently dead first.
#[server(endpoint = "dead")]
pub async fn list_dead(
    source: Option<String>,
    destination: Option<String>,
    before: Option<i64>,
    before_id: Option<i64>,
) -> Result<DeadLetterPage, ServerFnError> {
    let cx = crate::api::cx().await?;
    let filter = crate::api::actions::DeadFilter {
        source: source.unwrap_or_default(),
        destination: destination.unwrap_or_default(),
        ..Default::default()
    };
    ops::dead_letters(&cx, &filter, before.zip(before_id))
        .await
        .map_err(fail)
}

/// The keys of ordered destinations held by an event that failed and waits
/// to be retried, oldest holder first (`source`: only its own).
#[server(endpoint = "blocked-keys")]
pub async fn list_blocked_keys(
    source: Option<String>,
) -> Result<Vec<replaysafe_types::overview::BlockedKey>, ServerFnError> {
    ops::blocked_keys(&crate::api::cx().await?, source.as_deref())
        .await
        .map_err(fail)
}
