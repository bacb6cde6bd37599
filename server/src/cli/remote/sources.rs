//! `replaysafe sources list|show|pause|resume|breaker` over the API.

use replaysafe_types::states::Breaker;
use replaysafe_types::SourceSummary;

use super::client::{segment, Remote, RemoteError};
use super::output::{json, or_dash, table};
use super::{BreakerAction, SourcesAction};

pub async fn run(remote: &Remote, action: SourcesAction, as_json: bool) -> Result<(), RemoteError> {
    let shown: Vec<SourceSummary> = match action {
        SourcesAction::List => remote.get("sources", &[]).await?,
        SourcesAction::Show { slug, window } => {
            let detail: serde_json::Value = remote
                .get(
                    &format!("sources/{}", segment(&slug)),
                    &[("window", window)],
                )
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
                    .post(
                        &format!("sources/{}/pause", segment(&slug)),
                        serde_json::json!({}),
                    )
                    .await?,
            ]
        }
        SourcesAction::Resume { slug } => {
            vec![
                remote
                    .post(
                        &format!("sources/{}/resume", segment(&slug)),
                        serde_json::json!({}),
                    )
                    .await?,
            ]
        }
        SourcesAction::Breaker { action } => {
            let (slug, destination, verb) = match action {
                BreakerAction::Open { slug, destination } => (slug, destination, "open"),
                BreakerAction::Close { slug, destination } => (slug, destination, "close"),
            };
            let path = format!(
                "sources/{}/destinations/{}/breaker/{verb}",
                segment(&slug),
                segment(&destination)
            );
            vec![remote.post(&path, serde_json::json!({})).await?]
        }
    };
    print(shown, as_json);
    Ok(())
}

/// Sources as a table (a breaker opened by hand named beside its state),
/// or as JSON.
pub fn print(shown: Vec<SourceSummary>, as_json: bool) {
    if as_json {
        json(&shown);
        return;
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
            let breakers: Vec<String> = s
                .destinations
                .iter()
                .filter(|d| d.breaker != Breaker::Closed)
                .map(|d| {
                    let by_hand = if d.breaker_by_hand { " by hand" } else { "" };
                    format!("{} {}{by_hand}", d.name, d.breaker.as_str())
                })
                .collect();
            let breakers = if breakers.is_empty() {
                "-".to_owned()
            } else {
                breakers.join(", ")
            };
            vec![
                s.slug,
                s.provider,
                s.mode,
                or_dash(s.destination),
                state,
                breakers,
            ]
        })
        .collect();
    table(
        &[
            "SOURCE",
            "PROVIDER",
            "MODE",
            "DESTINATION",
            "STATE",
            "BREAKERS OPEN",
        ],
        &rows,
    );
}
