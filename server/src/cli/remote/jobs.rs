//! Bulk re-delivery jobs over the API: `events redeliver --dead` starts one
//! and follows it; `replaysafe jobs list|show|watch|cancel`.

use replaysafe_types::time::shown;
use std::io::IsTerminal;
use std::time::Duration;

use replaysafe_types::actions::RedeliveryResult;
use replaysafe_types::jobs::{BulkJob, JobResults, RESULTS_PAGE};
use replaysafe_types::states::JobState;
use serde_json::json;

use super::client::{Remote, RemoteError};
use super::output::{self, or_dash, table};
use super::JobsAction;

/// How often a follower asks for a job's progress.
const POLL: Duration = Duration::from_millis(300);

pub async fn run(remote: &Remote, action: JobsAction, as_json: bool) -> Result<(), RemoteError> {
    match action {
        JobsAction::List => {
            let jobs: Vec<BulkJob> = remote.get("jobs", &[]).await?;
            if as_json {
                output::json(&jobs);
            } else {
                print_jobs(&jobs);
            }
            Ok(())
        }
        JobsAction::Show { id } => {
            let job: BulkJob = remote.get(&format!("jobs/{id}"), &[]).await?;
            if as_json {
                output::json(&job);
            } else {
                print_jobs(&[job]);
            }
            Ok(())
        }
        JobsAction::Watch { id } => {
            let job: BulkJob = remote.get(&format!("jobs/{id}"), &[]).await?;
            follow(remote, job, as_json).await
        }
        JobsAction::Cancel { id } => {
            let job: BulkJob = remote.delete(&format!("jobs/{id}")).await?;
            if as_json {
                output::json(&job);
            } else {
                println!(
                    "cancelled bulk job {id} after {} of {}",
                    job.done, job.total
                );
            }
            Ok(())
        }
    }
}

fn print_jobs(jobs: &[BulkJob]) {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.to_string(),
                j.state.to_string(),
                shown(&j.created_at),
                j.started_by.clone(),
                if j.filter.source.is_empty() {
                    "any".into()
                } else {
                    j.filter.source.clone()
                },
                format!("{}/{}", j.done, j.total.max(j.done)),
                j.requeued.to_string(),
                or_dash(
                    j.error
                        .clone()
                        .or(j.cancelled_by.clone().map(|c| format!("cancelled by {c}"))),
                ),
            ]
        })
        .collect();
    table(
        &[
            "JOB",
            "STATE",
            "STARTED (UTC)",
            "BY",
            "SOURCE",
            "DONE",
            "QUEUED AGAIN",
            "NOTE",
        ],
        &rows,
    );
}

/// Follows a job to its end: a progress bar when stderr is a terminal, each
/// event's outcome and a summary line (or one JSON document). Ctrl-C
/// cancels the job. Non-zero when it did not finish or some were refused.
pub async fn follow(remote: &Remote, mut job: BulkJob, as_json: bool) -> Result<(), RemoteError> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(job.total.max(0) as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} dead events re-delivered ({elapsed})",
            )
            .expect("a valid template"),
        );
        bar
    });
    let mut results: Vec<RedeliveryResult> = Vec::new();
    let mut after = 0i64;
    // Registered before the first request, so no Ctrl-C goes unseen.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut cancelling = false;
    loop {
        // The outcomes recorded so far (at least `job.done` of them).
        loop {
            let page: JobResults = remote
                .get(
                    &format!("jobs/{}/results", job.id),
                    &[("after", after.to_string())],
                )
                .await?;
            let full = page.results.len() as i64 == RESULTS_PAGE;
            if let Some(next) = page.next_after {
                after = next;
            }
            results.extend(page.results);
            if !full {
                break;
            }
        }
        if let Some(bar) = &bar {
            bar.set_length(job.total.max(job.done) as u64);
            bar.set_position(job.done as u64);
        }
        if job.finished() {
            break;
        }
        tokio::select! {
            _ = interrupts.recv() => {
                // The first asks the server to stop the job after the step
                // under way (and follows it there); a second leaves at once.
                if cancelling {
                    return Err(RemoteError::Unfinished { id: job.id, state: "left running".into() });
                }
                cancelling = true;
                if let Some(bar) = &bar {
                    bar.println("cancelling: the job stops after the step under way (Ctrl-C again to leave it)");
                }
                match remote.delete::<BulkJob>(&format!("jobs/{}", job.id)).await {
                    Ok(_) | Err(RemoteError::Refused { status: 409, .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            _ = tokio::time::sleep(POLL) => {}
        }
        job = remote.get(&format!("jobs/{}", job.id), &[]).await?;
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let requeued = results.iter().filter(|r| r.requeued).count();
    let refused = results.len() - requeued;
    if as_json {
        output::json(&json!({
            "job": job,
            "requeued": requeued,
            "refused": refused,
            "results": results,
        }));
    } else {
        for r in &results {
            println!(
                "{:<10} {:<32} {}",
                or_dash(r.event_id),
                r.idem_key.clone().unwrap_or_default(),
                r.message
            );
        }
        let ending = match job.state {
            JobState::Cancelled => format!(
                " (job {} cancelled by {})",
                job.id,
                job.cancelled_by.clone().unwrap_or_default()
            ),
            JobState::Failed => format!(
                " (job {} failed: {})",
                job.id,
                job.error.clone().unwrap_or_default()
            ),
            JobState::Queued | JobState::Running | JobState::Done => String::new(),
        };
        println!(
            "{} dead events: {requeued} queued again, {refused} refused{ending}",
            results.len()
        );
    }
    match (job.state, refused) {
        (JobState::Cancelled | JobState::Failed, _) => Err(RemoteError::Unfinished {
            id: job.id,
            state: job.state.to_string(),
        }),
        (_, 0) => Ok(()),
        (_, refused) => Err(RemoteError::SomeRefused {
            refused,
            of: results.len(),
        }),
    }
}
