//! The overview's figures, read from the per-minute rollups (`minute_stats`)
//! and a few capped live counts: no page view scans deliveries.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::ops::overview as ops;
pub use replaysafe_types::overview::*;
#[server(endpoint = "overview")]
pub async fn load_overview(
    source: Option<String>,
    window: String,
) -> Result<Overview, ServerFnError> {
    let cx = crate::api::cx().await?;
    ops::overview(&cx, source, Window::parse(&window))
        .await
        .map_err(fail)
}
