//! `replaysafe alerts list|silence|unsilence` over the API.

use replaysafe_types::alerts::{AlertsPage, SilenceRow};
use replaysafe_types::time::shown;
use serde_json::json;

use super::client::{Remote, RemoteError};
use super::output::{self, or_dash, table};
use super::AlertsAction;

pub async fn run(remote: &Remote, action: AlertsAction, as_json: bool) -> Result<(), RemoteError> {
    match action {
        AlertsAction::List => {
            let page: AlertsPage = remote.get("alerts", &[]).await?;
            if as_json {
                output::json(&page);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = page
                .firing
                .iter()
                .chain(&page.resolved)
                .map(|a| {
                    vec![
                        a.id.to_string(),
                        a.state.to_string(),
                        a.rule.clone(),
                        a.source.clone(),
                        shown(&a.started_at),
                        or_dash(a.resolved_at.as_ref().map(shown)),
                        match &a.silenced_until {
                            Some(u) => format!("{} (silenced until {})", a.summary, shown(u)),
                            None => a.summary.clone(),
                        },
                    ]
                })
                .collect();
            table(
                &[
                    "ID",
                    "STATE",
                    "RULE",
                    "SOURCE",
                    "SINCE (UTC)",
                    "RESOLVED",
                    "WHAT HELD",
                ],
                &rows,
            );
            for s in &page.silences {
                println!(
                    "silence {}: {} on {} until {} UTC, by {}: {}",
                    s.id,
                    s.rule,
                    s.source.as_deref().unwrap_or("every source"),
                    shown(&s.until),
                    s.by,
                    s.reason
                );
            }
            Ok(())
        }
        AlertsAction::Silence {
            rule,
            source,
            duration,
            reason,
        } => {
            let minutes = humantime::parse_duration(&duration)
                .map_err(|e| RemoteError::BadArgument(format!("--for {duration:?}: {e}")))?
                .as_secs()
                .div_ceil(60);
            let row: SilenceRow = remote
                .post(
                    "alerts/silences",
                    json!({"rule": rule, "source": source.unwrap_or_default(), "minutes": minutes, "reason": reason}),
                )
                .await?;
            if as_json {
                output::json(&row);
            } else {
                println!(
                    "silence {}: {} silenced until {} UTC",
                    row.id,
                    row.rule,
                    shown(&row.until)
                );
            }
            Ok(())
        }
        AlertsAction::Test { .. } => Err(RemoteError::BadArgument(
            "alerts test runs on this machine, with the config's channels".into(),
        )),
        AlertsAction::Unsilence { id } => {
            let ended: serde_json::Value = remote.delete(&format!("alerts/silences/{id}")).await?;
            if as_json {
                output::json(&ended);
            } else {
                println!("silence {id} ended");
            }
            Ok(())
        }
    }
}
