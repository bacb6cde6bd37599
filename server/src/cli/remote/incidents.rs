//! `replaysafe incidents list|show|ack|resolve|ignore|redeliver` over the
//! API: failures grouped as on-call people think of them.

use replaysafe_types::incidents::{Incident, IncidentDetail};
use replaysafe_types::jobs::BulkJob;
use replaysafe_types::time::shown;
use serde_json::json;

use super::client::{Remote, RemoteError};
use super::output::{self, or_dash, table};
use super::IncidentsAction;

pub async fn run(
    remote: &Remote,
    action: IncidentsAction,
    as_json: bool,
) -> Result<(), RemoteError> {
    let moved = |word: &'static str, id: i64| async move {
        let incident: Incident = remote
            .post(&format!("incidents/{id}/{word}"), json!({}))
            .await?;
        if as_json {
            output::json(&incident);
        } else {
            println!("incident {id} is {} now", incident.state);
        }
        Ok(())
    };
    match action {
        IncidentsAction::List { state, source } => {
            let mut query = Vec::new();
            if let Some(state) = state {
                query.push(("state", state));
            }
            if let Some(source) = source {
                query.push(("source", source));
            }
            let incidents: Vec<Incident> = remote.get("incidents", &query).await?;
            if as_json {
                output::json(&incidents);
            } else {
                print_incidents(&incidents);
            }
            Ok(())
        }
        IncidentsAction::Show { id } => {
            let detail: IncidentDetail = remote.get(&format!("incidents/{id}"), &[]).await?;
            if as_json {
                output::json(&detail);
                return Ok(());
            }
            let i = &detail.incident;
            print_incidents(std::slice::from_ref(i));
            println!();
            println!(
                "{} failures, {} events ({} dead at {} now); first {} UTC, last {} UTC",
                i.failures,
                i.count,
                detail.dead_now,
                i.destination,
                shown(&i.first_seen_at),
                shown(&i.last_seen_at)
            );
            if let Some(sample) = &i.sample_response {
                println!("a sample answer: {sample}");
            }
            let rows: Vec<Vec<String>> = detail
                .affected
                .iter()
                .map(|e| vec![e.event_id.to_string(), e.idem_key.clone(), e.state.clone()])
                .collect();
            println!();
            table(&["event", "key", "state at its destination"], &rows);
            Ok(())
        }
        IncidentsAction::Ack { id } => moved("ack", id).await,
        IncidentsAction::Resolve { id } => moved("resolve", id).await,
        IncidentsAction::Ignore { id } => moved("ignore", id).await,
        IncidentsAction::Redeliver { id } => {
            let job: BulkJob = remote
                .post(&format!("incidents/{id}/redeliver"), json!({}))
                .await?;
            super::jobs::follow(remote, job, as_json).await
        }
    }
}

fn print_incidents(incidents: &[Incident]) {
    let rows: Vec<Vec<String>> = incidents
        .iter()
        .map(|i| {
            vec![
                i.id.to_string(),
                i.state.to_string(),
                format!("{}/{}", i.source, i.destination),
                i.kind.clone(),
                or_dash(Some(i.fingerprint.clone()).filter(|f| !f.is_empty())),
                i.count.to_string(),
                shown(&i.first_seen_at),
                shown(&i.last_seen_at),
                or_dash(i.state_changed_by.clone()),
            ]
        })
        .collect();
    table(
        &[
            "id",
            "state",
            "where",
            "kind",
            "message",
            "events",
            "first (UTC)",
            "last (UTC)",
            "by",
        ],
        &rows,
    );
}
