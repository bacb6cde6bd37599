//! `replaysafe deliveries list|show|export|tail|redeliver` over the API.

use replaysafe_types::time::shown_ms;
use std::collections::BTreeSet;
use std::time::Duration;

use replaysafe_types::deliveries::{DeliveryPage, DeliveryRow};
use serde_json::Value;

use super::client::{Remote, RemoteError};
use super::output::{self, or_dash, table, Paint};
use super::{DeliveriesAction, ListFilter};

/// How often `tail` asks for new deliveries.
const TAIL_EVERY: Duration = Duration::from_secs(1);
/// The deliveries `tail` shows before following.
const TAIL_FIRST: usize = 10;
/// How far behind the newest delivery seen `tail` looks for late commits.
const TAIL_LOOKBACK_IDS: i64 = 200;

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    filter: ListFilter,
    /// The HTTP status answered: 409, or a class such as 4xx
    #[arg(long)]
    status: Option<String>,
}

pub async fn run(
    remote: &Remote,
    action: DeliveriesAction,
    as_json: bool,
) -> Result<(), RemoteError> {
    match action {
        DeliveriesAction::List(args) => {
            let (mut query, limit) = args.filter.query()?;
            query.push(("status", args.status.unwrap_or_default()));
            let rows: Vec<DeliveryRow> = remote
                .collect("deliveries", query, limit, |page: DeliveryPage| {
                    (page.rows, page.older)
                })
                .await?;
            if as_json {
                output::json(&rows);
            } else {
                let paint = Paint::stdout();
                let rows: Vec<Vec<String>> = rows.iter().map(|d| cells(d, &paint)).collect();
                table(&HEADER, &rows);
            }
            Ok(())
        }
        DeliveriesAction::Show { id } => {
            let detail: Value = remote.get(&format!("deliveries/{id}"), &[]).await?;
            output::json(&detail);
            Ok(())
        }
        DeliveriesAction::Export { id, out } => {
            let captured: replaysafe_types::stream::CapturedDelivery =
                remote.get(&format!("deliveries/{id}/export"), &[]).await?;
            let text = serde_json::to_string_pretty(&captured).expect("serialises") + "\n";
            match out {
                None => print!("{text}"),
                Some(path) => {
                    use std::io::Write as _;
                    use std::os::unix::fs::OpenOptionsExt as _;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .mode(0o600)
                        .open(&path)
                        .and_then(|mut f| f.write_all(text.as_bytes()))?;
                    eprintln!("delivery {id} written to {}", path.display());
                }
            }
            Ok(())
        }
        DeliveriesAction::Tail { source } => tail(remote, source, as_json).await,
        DeliveriesAction::Redeliver {
            ids,
            past_window_reason,
        } => {
            let body =
                serde_json::json!({"past_window_reason": past_window_reason.unwrap_or_default()});
            super::events::redeliver(
                remote,
                super::events::Target::Deliveries,
                &ids,
                body,
                as_json,
            )
            .await
        }
    }
}

const HEADER: [&str; 7] = [
    "ID",
    "RECEIVED (UTC)",
    "SOURCE",
    "KEY",
    "OUTCOME",
    "STATUS",
    "EVENT",
];

fn cells(d: &DeliveryRow, paint: &Paint) -> Vec<String> {
    vec![
        d.id.to_string(),
        shown_ms(&d.received_at),
        d.source.clone(),
        or_dash(d.idem_key.as_ref()),
        paint.outcome(d.outcome),
        d.http_status.to_string(),
        or_dash(d.event_id),
    ]
}

/// The last few deliveries, then each new one as it arrives (oldest
/// first), until interrupted. JSON lines with `--json`.
async fn tail(remote: &Remote, source: Option<String>, as_json: bool) -> Result<(), RemoteError> {
    let source = source.unwrap_or_default();
    let paint = Paint::stdout();
    let print = |d: &DeliveryRow| {
        if as_json {
            println!(
                "{}",
                serde_json::to_string(d).expect("a delivery serializes")
            );
        } else {
            println!("{}", cells(d, &paint).join("  "));
        }
    };
    let first: DeliveryPage = remote
        .get("deliveries", &[("source", source.clone())])
        .await?;
    let mut newest = first.rows.first().map(|d| d.id).unwrap_or(0);
    let mut seen: BTreeSet<i64> = first.rows.iter().map(|d| d.id).collect();
    for d in first.rows.iter().take(TAIL_FIRST).rev() {
        print(d);
    }
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tokio::time::sleep(TAIL_EVERY) => {}
        }
        // Ids are drawn at insert and seen at commit: one drawn before the
        // newest seen may commit after it, so a window behind it is read again.
        let floor = newest.saturating_sub(TAIL_LOOKBACK_IDS);
        let mut arrived: Vec<DeliveryRow> = Vec::new();
        let mut before: Option<i64> = None;
        loop {
            let mut query = vec![("source", source.clone()), ("after", floor.to_string())];
            if let Some(b) = before {
                query.push(("before", b.to_string()));
            }
            let page: DeliveryPage = remote.get("deliveries", &query).await?;
            let more = page.older.filter(|_| !page.rows.is_empty());
            arrived.extend(page.rows.into_iter().filter(|d| !seen.contains(&d.id)));
            match more {
                Some(b) => before = Some(b),
                None => break,
            }
        }
        arrived.sort_by_key(|d| d.id);
        for d in &arrived {
            print(d);
            seen.insert(d.id);
            newest = newest.max(d.id);
        }
        let keep_from = newest.saturating_sub(TAIL_LOOKBACK_IDS);
        seen.retain(|id| *id > keep_from);
    }
}
