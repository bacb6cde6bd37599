//! The server functions the pages call, each a few lines over the
//! operation `replaysafe_core` holds for it (the API and the CLI call the
//! same one). The browser sees only `replaysafe_types`.

pub mod actions;
pub mod alerts;
pub mod deliveries;
pub mod events;
pub mod incidents;
pub mod jobs;
pub mod overview;
pub mod reconcile;
pub mod tokens;
pub mod users;

use leptos::prelude::*;
pub use replaysafe_types::*;

#[cfg(feature = "ssr")]
use replaysafe_core::{error::OpError, ops::Cx, processing::Services};

#[server(endpoint = "sources")]
pub async fn list_sources() -> Result<Vec<SourceSummary>, ServerFnError> {
    replaysafe_core::ops::sources(&cx().await?)
        .await
        .map_err(fail)
}

/// A destination's whole URL (admin; audit-logged).
#[server(endpoint = "reveal-destination-url")]
pub async fn reveal_destination_url(
    slug: String,
    destination: String,
) -> Result<String, ServerFnError> {
    replaysafe_core::ops::reveal_destination_url(&cx().await?, &slug, &destination)
        .await
        .map_err(fail)
}

/// A server function's `Cx`: the services the server provides as context,
/// and the request's caller and address.
#[cfg(feature = "ssr")]
pub async fn cx() -> Result<Cx, ServerFnError> {
    Ok(Cx {
        services: services()?,
        caller: crate::auth::ssr::session_user().await?,
        remote_addr: crate::auth::ssr::remote_addr().await,
    })
}

/// The server's `Services`, provided as context to every render and server
/// function.
#[cfg(feature = "ssr")]
pub fn services() -> Result<Services, ServerFnError> {
    use_context::<Services>().ok_or_else(|| {
        fail(OpError::Misconfigured(
            "server misconfigured: no services".into(),
        ))
    })
}

/// An operation's error as a server function's: its status set on the
/// response, its message what the page shows (the cause was logged).
#[cfg(feature = "ssr")]
pub fn fail(e: OpError) -> ServerFnError {
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(e.status());
    }
    ServerFnError::new(e.message())
}
