//! `replaysafe events list|show|redeliver|force|dead-letter` over the API.

use replaysafe_types::actions::RedeliveryResult;
use replaysafe_types::events::{EventDetail, EventPage, EventSummary, TimelineEntry};
use replaysafe_types::jobs::BulkJob;
use replaysafe_types::time::shown_ms;
use serde_json::{json, Value};

use super::client::{Remote, RemoteError};
use super::output::{self, or_dash, table, Paint};
use super::{when, EventsAction, ListFilter};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["ids", "dead"])))]
pub struct RedeliverArgs {
    /// Event ids
    ids: Vec<i64>,
    /// Every dead event matching --source, --destination, --since, --until and --reason
    #[arg(long, conflicts_with = "ids")]
    dead: bool,
    /// Revive only dispatches dead at this destination (default: every dead one)
    #[arg(long)]
    destination: Option<String>,
    #[arg(long, requires = "dead")]
    source: Option<String>,
    /// Dead-lettered since: `2h` ago, or a UTC time (RFC 3339)
    #[arg(long, requires = "dead")]
    since: Option<String>,
    /// Dead-lettered before
    #[arg(long, requires = "dead")]
    until: Option<String>,
    /// Words the dead-letter reason contains
    #[arg(long, requires = "dead")]
    reason: Option<String>,
    /// Start the job and exit; `replaysafe jobs watch ID` follows it
    #[arg(long, requires = "dead")]
    detach: bool,
}

pub async fn run(remote: &Remote, action: EventsAction, as_json: bool) -> Result<(), RemoteError> {
    match action {
        EventsAction::List(args) => list(remote, args, as_json).await,
        EventsAction::Show { id } => {
            let detail: Value = remote.get(&format!("events/{id}"), &[]).await?;
            if as_json {
                output::json(&detail);
            } else {
                show(
                    serde_json::from_value(detail)
                        .map_err(|e| RemoteError::Decode(e.to_string()))?,
                );
            }
            Ok(())
        }
        EventsAction::Redeliver(args) if args.dead => bulk(remote, args, as_json).await,
        EventsAction::Redeliver(args) => {
            let body = json!({"destination": args.destination.unwrap_or_default()});
            redeliver(remote, Target::Events, &args.ids, body, as_json).await
        }
        EventsAction::Force {
            id,
            key,
            reason,
            destination,
        } => {
            let forced: Value = remote
                .post(
                    &format!("events/{id}/force"),
                    json!({"key": key, "reason": reason, "destination": destination.unwrap_or_default()}),
                )
                .await?;
            if as_json {
                output::json(&forced);
            } else {
                println!("{}", forced["message"].as_str().unwrap_or_default());
            }
            Ok(())
        }
        EventsAction::DeadLetter {
            id,
            reason,
            destination,
        } => {
            let dead: Value = remote
                .post(
                    &format!("events/{id}/dead-letter"),
                    json!({"reason": reason, "destination": destination.unwrap_or_default()}),
                )
                .await?;
            if as_json {
                output::json(&dead);
            } else {
                println!("{}", dead["message"].as_str().unwrap_or_default());
            }
            Ok(())
        }
    }
}

async fn list(remote: &Remote, filter: ListFilter, as_json: bool) -> Result<(), RemoteError> {
    let (query, limit) = filter.query()?;
    let events: Vec<EventSummary> = remote
        .collect("events", query, limit, |page: EventPage| {
            (page.rows, page.older)
        })
        .await?;
    if as_json {
        output::json(&events);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = events
        .into_iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                e.source,
                e.idem_key,
                e.state.to_string(),
                e.attempt_count.to_string(),
                e.receive_count.to_string(),
                shown_ms(&e.first_seen_at),
                e.dead_reason.or(e.last_error).unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "SOURCE",
            "KEY",
            "STATE",
            "ATTEMPTS",
            "DELIVERIES",
            "FIRST SEEN (UTC)",
            "LAST ERROR",
        ],
        &rows,
    );
    Ok(())
}

fn show(detail: EventDetail) {
    let e = detail.event;
    println!("event {} · {} · {}", e.id, e.source, e.idem_key);
    println!(
        "state        {} (since {} UTC)",
        e.state,
        shown_ms(&e.state_changed_at)
    );
    println!(
        "first seen   {} UTC, {} deliveries",
        shown_ms(&e.first_seen_at),
        e.receive_count
    );
    println!("attempts     {}", e.attempt_count);
    if let Some(reason) = e.dead_reason.or(e.last_error) {
        println!("last error   {reason}");
    }
    println!();
    let paint = Paint::stdout();
    for entry in detail.timeline {
        match entry {
            TimelineEntry::Delivery(d) => println!(
                "{}  delivery {:<8} {} {}{}",
                shown_ms(&d.received_at),
                d.id,
                paint.outcome(d.outcome),
                d.http_status,
                d.redelivery_of
                    .map(|of| format!(" (re-delivery of {of})"))
                    .unwrap_or_default()
            ),
            TimelineEntry::Attempt(a) => println!(
                "{}  attempt  #{:<7} {} {}{}",
                shown_ms(&a.started_at),
                a.number,
                or_dash(a.result),
                or_dash(a.status),
                a.error.map(|e| format!(" {e}")).unwrap_or_default()
            ),
        }
    }
    if detail.deliveries_total > detail.deliveries_shown as i64 {
        println!(
            "({} of {} deliveries shown)",
            detail.deliveries_shown, detail.deliveries_total
        );
    }
}

/// What `redeliver` re-delivers: events (their stored delivery) or
/// stored deliveries by id.
#[derive(Clone, Copy)]
pub enum Target {
    Events,
    Deliveries,
}

/// One line per id; refusals go to the count that sets the exit code.
pub async fn redeliver(
    remote: &Remote,
    target: Target,
    ids: &[i64],
    body: Value,
    as_json: bool,
) -> Result<(), RemoteError> {
    let (path, name) = match target {
        Target::Events => ("events", "event"),
        Target::Deliveries => ("deliveries", "delivery"),
    };
    let mut answers = Vec::with_capacity(ids.len());
    let mut refused = 0;
    for id in ids {
        let answer = match remote
            .post::<RedeliveryResult>(&format!("{path}/{id}/redeliver"), body.clone())
            .await
        {
            Ok(result) => json!({name: id, "ok": true, "outcome": result.outcome,
                                 "requeued": result.requeued, "message": result.message,
                                 "delivery_id": result.delivery_id, "event_id": result.event_id}),
            // The token, not the event: every other id would be refused alike.
            Err(
                e @ RemoteError::Refused {
                    status: 401 | 403, ..
                },
            ) => return Err(e),
            Err(RemoteError::Refused {
                status,
                code,
                detail,
                body,
                ..
            }) => {
                refused += 1;
                json!({name: id, "ok": false, "status": status, "code": code,
                       "outcome": body["result"]["outcome"], "message": detail})
            }
            Err(other) => return Err(other),
        };
        if !as_json {
            println!(
                "{id:<10} {:<12} {}",
                answer["outcome"]
                    .as_str()
                    .unwrap_or(answer["code"].as_str().unwrap_or("")),
                answer["message"].as_str().unwrap_or_default()
            );
        }
        answers.push(answer);
    }
    if as_json {
        output::json(&answers);
    }
    match refused {
        0 => Ok(()),
        refused => Err(RemoteError::SomeRefused {
            refused,
            of: ids.len(),
        }),
    }
}

/// Every dead event matching the filter, as a job on the server: followed
/// to its end (`jobs::follow`), or left running with `--detach`.
async fn bulk(remote: &Remote, args: RedeliverArgs, as_json: bool) -> Result<(), RemoteError> {
    let body = json!({
        "source": args.source.unwrap_or_default(),
        "since": args.since.as_deref().map(when).transpose()?,
        "until": args.until.as_deref().map(when).transpose()?,
        "reason": args.reason.unwrap_or_default(),
        "destination": args.destination.unwrap_or_default(),
    });
    let job: BulkJob = remote.post("dead-letters/redeliver", body).await?;
    if !args.detach {
        return super::jobs::follow(remote, job, as_json).await;
    }
    if as_json {
        output::json(&job);
    } else {
        println!(
            "started bulk job {}: {} dead events; follow it with `replaysafe jobs watch {}`",
            job.id, job.total, job.id
        );
    }
    Ok(())
}
