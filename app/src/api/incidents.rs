//! Incidents on the dashboard (issue 40): each server function a call of
//! `replaysafe_core::ops::incidents`, which checks the role.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::ops::incidents as ops;
pub use replaysafe_types::incidents::*;
use replaysafe_types::jobs::BulkJob;

#[server(endpoint = "incidents")]
pub async fn list_incidents(
    #[server(default)] state: String,
) -> Result<Vec<Incident>, ServerFnError> {
    ops::list(&crate::api::cx().await?, Some(&state), None)
        .await
        .map_err(fail)
}

#[server(endpoint = "incident")]
pub async fn get_incident(id: i64) -> Result<IncidentDetail, ServerFnError> {
    ops::detail(&crate::api::cx().await?, id)
        .await
        .map_err(fail)
}

/// `how`: ack, resolve or ignore (operator).
#[server(endpoint = "incident-move")]
pub async fn move_incident(id: i64, how: String) -> Result<Incident, ServerFnError> {
    use replaysafe_core::error::OpError;
    let how = replaysafe_core::incidents::Move::parse(&how).ok_or_else(|| {
        fail(OpError::BadRequest(
            "an incident is acknowledged (ack), resolved or ignored".into(),
        ))
    })?;
    ops::apply(&crate::api::cx().await?, id, how)
        .await
        .map_err(fail)
}

/// Re-delivers the incident's dead events through the dedup layer (operator).
#[server(endpoint = "incident-redeliver")]
pub async fn redeliver_incident(id: i64) -> Result<BulkJob, ServerFnError> {
    replaysafe_core::jobs::queue::start_for_incident(&crate::api::cx().await?, id)
        .await
        .map_err(fail)
}
