//! Alert rules (issue 17): what is wrong right now, per source, judged from
//! the same figures the dashboard shows. One evaluation serves the
//! overview's banner and the server's alert evaluator, which gives each
//! condition a lifecycle (firing, resolved) and sends it to the channels.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::ops::alerts as ops;
pub use replaysafe_types::alerts::*;
#[server(endpoint = "alerts")]
pub async fn list_alerts() -> Result<AlertsPage, ServerFnError> {
    ops::page(&crate::api::cx().await?).await.map_err(fail)
}

/// Silences a rule (for one source, or all) for `minutes` (admin; audit-logged).
#[server(endpoint = "alert-silence")]
pub async fn silence_rule(
    rule: String,
    #[server(default)] source: String,
    minutes: i64,
    reason: String,
) -> Result<SilenceRow, ServerFnError> {
    ops::silence(&crate::api::cx().await?, rule, source, minutes, reason)
        .await
        .map_err(fail)
}

/// Ends a silence now (admin; audit-logged).
#[server(endpoint = "alert-unsilence")]
pub async fn end_silence(id: i64) -> Result<(), ServerFnError> {
    ops::unsilence(&crate::api::cx().await?, id)
        .await
        .map_err(fail)
}
