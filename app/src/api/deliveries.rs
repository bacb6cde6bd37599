//! The deliveries list: newest first, filtered, keyset-paginated by id, and
//! polled for newer rows so the page stays live.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::ops::deliveries as ops;
pub use replaysafe_types::deliveries::*;
/// Newest first. `before`: rows older than this id (the next page).
/// `after`: only rows newer than this id (the live poll).
#[server(endpoint = "deliveries")]
pub async fn list_deliveries(
    #[server(default)] filter: DeliveryFilter,
    before: Option<i64>,
    after: Option<i64>,
) -> Result<DeliveryPage, ServerFnError> {
    let cx = crate::api::cx().await?;
    match ops::deliveries(&cx, &filter, before, after).await {
        // The page shows a filter it cannot read beside the form.
        Err(replaysafe_core::error::OpError::BadRequest(message)) => Ok(DeliveryPage {
            rows: Vec::new(),
            older: None,
            filter_error: Some(message),
            unrecorded: None,
            replica_lag_secs: None,
        }),
        page => page.map_err(fail),
    }
}
