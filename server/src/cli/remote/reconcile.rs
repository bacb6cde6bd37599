//! `replaysafe reconcile --source S [--since T] [--dry-run] [--json]` over
//! the API: one run now, its verdict as a table or one JSON document.

use replaysafe_types::reconcile::ReconcileRun;
use replaysafe_types::time::shown;
use serde_json::json;

use super::client::{Remote, RemoteError};
use super::output::{self, or_dash, table};

#[derive(clap::Args, Debug)]
pub struct ReconcileArgs {
    /// The source to compare with its provider's list
    #[arg(long)]
    source: String,
    /// From when: `6h` ago, or a UTC time (RFC 3339); default the source's lookback_hours
    #[arg(long)]
    since: Option<String>,
    /// Compare and report only: claim nothing, ask for no redelivery
    #[arg(long)]
    dry_run: bool,
}

/// Longer than a run may take (5 minutes).
const RUN_WAIT: std::time::Duration = std::time::Duration::from_secs(330);

pub async fn run(remote: &Remote, args: ReconcileArgs, as_json: bool) -> Result<(), RemoteError> {
    let since = args.since.as_deref().map(super::when).transpose()?;
    let verdict: ReconcileRun = remote
        .post_waiting(
            &format!("sources/{}/reconcile", super::client::segment(&args.source)),
            json!({"since": since, "dry_run": args.dry_run}),
            RUN_WAIT,
        )
        .await?;
    if as_json {
        output::json(&verdict);
    } else {
        let rows = vec![vec![
            verdict.seen.to_string(),
            verdict.already_received.to_string(),
            verdict.recovered.to_string(),
            verdict.redelivery_requested.to_string(),
            verdict.still_missing.to_string(),
            verdict.provider_failed_we_completed.to_string(),
        ]];
        println!(
            "{}reconciliation {} of {}: {} to {} UTC, {} page(s)",
            if verdict.dry_run { "dry-run " } else { "" },
            verdict.id,
            verdict.source,
            shown(&verdict.window_from),
            shown(&verdict.window_to),
            verdict.pages
        );
        table(
            &[
                "SEEN",
                "ALREADY RECEIVED",
                "RECOVERED",
                "REDELIVERY REQUESTED",
                "STILL MISSING",
                "PROVIDER FAILED, WE COMPLETED",
            ],
            &rows,
        );
        if verdict.error.is_some() {
            println!("stopped early: {}", or_dash(verdict.error.as_ref()));
        }
    }
    // A run that stopped early is an error to a script, its findings shown.
    match verdict.error {
        Some(e) => Err(RemoteError::Stopped(e)),
        None => Ok(()),
    }
}
