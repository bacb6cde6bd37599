//! `replaysafe sources list|pause|resume` over the API.

use replaysafe_types::SourceSummary;

use super::client::{Remote, RemoteError};
use super::output::{json, or_dash, table};
use super::SourcesAction;

pub async fn run(remote: &Remote, action: SourcesAction, as_json: bool) -> Result<(), RemoteError> {
    let shown: Vec<SourceSummary> = match action {
        SourcesAction::List => remote.get("sources", &[]).await?,
        SourcesAction::Show { slug, window } => {
            let detail: serde_json::Value = remote
                .get(&format!("sources/{slug}"), &[("window", window)])
                .await?;
            if as_json {
                json(&detail);
            } else {
                let figures: replaysafe_types::overview::Overview =
                    serde_json::from_value(detail["figures"].clone())
                        .map_err(|e| RemoteError::Decode(e.to_string()))?;
                super::overview::print_summary(&format!("source {slug}"), &figures);
            }
            return Ok(());
        }
        SourcesAction::Pause { slug } => {
            vec![
                remote
                    .post(&format!("sources/{slug}/pause"), serde_json::json!({}))
                    .await?,
            ]
        }
        SourcesAction::Resume { slug } => {
            vec![
                remote
                    .post(&format!("sources/{slug}/resume"), serde_json::json!({}))
                    .await?,
            ]
        }
    };
    if as_json {
        json(&shown);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = shown
        .into_iter()
        .map(|s| {
            let state = match (s.in_config, s.paused, s.paused_by_operator) {
                (false, _, _) => "removed".to_owned(),
                (true, true, true) => "paused by an operator".to_owned(),
                (true, true, false) => "paused (config)".to_owned(),
                (true, false, _) => "forwarding".to_owned(),
            };
            vec![s.slug, s.provider, s.mode, or_dash(s.destination), state]
        })
        .collect();
    table(
        &["SOURCE", "PROVIDER", "MODE", "DESTINATION", "STATE"],
        &rows,
    );
    Ok(())
}
