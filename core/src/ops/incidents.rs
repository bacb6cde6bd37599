//! Incidents on the dashboard, `/api/v1/incidents` and `replaysafe
//! incidents`: listed and read by viewers, acknowledged, resolved and
//! ignored by operators (audit-logged, refusals too), and their dead
//! events re-delivered by the bulk job with the incident's filter, through
//! the same dedup guard as any re-delivery (`jobs::queue::start_for_incident`).
//! The states are `crate::incidents`'.

use replaysafe_types::auth::Role;
use replaysafe_types::incidents::{Incident, IncidentDetail, INCIDENTS_LISTED};
use replaysafe_types::states::IncidentState;

use crate::incidents::{self, Move, MoveError};
use crate::ops::{Cx, OpError};

/// Incidents newest first (viewer); `state` and `source` narrow them.
pub async fn list(
    cx: &Cx,
    state: Option<&str>,
    source: Option<&str>,
) -> Result<Vec<Incident>, OpError> {
    cx.require(Role::Viewer)?;
    let state = match state.map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(word) => Some(IncidentState::parse(word).ok_or_else(|| {
            OpError::BadRequest(format!(
                "state is one of open, acknowledged, resolved, ignored (not {word:?})"
            ))
        })?),
    };
    let source = source.map(str::trim).filter(|s| !s.is_empty());
    Ok(incidents::list(&cx.services.reads.pool(), state, source, INCIDENTS_LISTED).await?)
}

/// One incident with its affected events (viewer).
pub async fn detail(cx: &Cx, id: i64) -> Result<IncidentDetail, OpError> {
    cx.require(Role::Viewer)?;
    incidents::detail(&cx.services.pool, id)
        .await?
        .ok_or_else(|| OpError::NotFound(format!("no incident has id {id}")))
}

/// Acknowledges, resolves or ignores an incident (operator; audit-logged).
pub async fn apply(cx: &Cx, id: i64, how: Move) -> Result<Incident, OpError> {
    let caller = cx.require(Role::Operator)?;
    let target = format!("incident {id}");
    match incidents::apply(&cx.services.pool, id, how, &caller.username).await {
        Ok(incident) => {
            cx.audit(
                caller,
                how.action(),
                Some(&target),
                "succeeded",
                serde_json::json!({"source": incident.source, "destination": incident.destination,
                                   "kind": incident.kind}),
            )
            .await?;
            Ok(incident)
        }
        Err(MoveError::Unknown(_)) => Err(OpError::NotFound(format!("no incident has id {id}"))),
        Err(e @ MoveError::From { .. }) => {
            cx.audit(
                caller,
                how.action(),
                Some(&target),
                "refused",
                serde_json::json!({"reason": e.to_string()}),
            )
            .await?;
            Err(OpError::Conflict(e.to_string()))
        }
        Err(MoveError::Db(e)) => Err(OpError::database(e)),
    }
}
