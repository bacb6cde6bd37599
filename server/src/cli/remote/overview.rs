//! `replaysafe overview`, `sources show` and `audit` over the API: the
//! dashboard's figures and audit log, as text.

use app::components::{fmt_count, fmt_ms, fmt_rate};
use replaysafe_types::actions::{AuditEntry, AuditPage};
use replaysafe_types::alerts::Condition;
use replaysafe_types::overview::{Backlog, Figures, Overview};
use replaysafe_types::time::shown;

use super::client::{Remote, RemoteError};
use super::output::{self, or_dash, table};

/// Every source's figures over a window (hour, day, week), as the
/// dashboard's overview shows them.
pub async fn overview(remote: &Remote, window: &str, as_json: bool) -> Result<(), RemoteError> {
    let overview: Overview = remote
        .get("overview", &[("window", window.to_owned())])
        .await?;
    if as_json {
        output::json(&overview);
        return Ok(());
    }
    print_summary("all sources", &overview);
    println!();
    let rows: Vec<Vec<String>> = overview
        .per_source
        .iter()
        .map(|s| {
            vec![
                s.slug.clone(),
                s.provider.clone(),
                if s.paused {
                    "paused".into()
                } else {
                    "forwarding".into()
                },
                fmt_count(s.figures.deliveries),
                fmt_rate(s.figures.duplicate_rate()),
                fmt_count(s.figures.rejected),
                fmt_count(s.backlog.waiting),
                fmt_count(s.backlog.dead_letters),
                fmt_ms(s.figures.ack_ms(0.99)),
            ]
        })
        .collect();
    table(
        &[
            "SOURCE",
            "PROVIDER",
            "STATE",
            "DELIVERIES",
            "DUPLICATES",
            "REJECTED",
            "WAITING",
            "DEAD",
            "ACK P99",
        ],
        &rows,
    );
    Ok(())
}

/// The totals, backlog and alerts of an overview (of every source, or of
/// one: `GET /sources/{slug}`'s `figures`).
pub fn print_summary(scope: &str, overview: &Overview) {
    println!(
        "{scope}, last {} (as of {} UTC)",
        overview.window.as_str(),
        shown(&overview.generated_at)
    );
    print_figures(&overview.totals, &overview.backlog);
    for alert in &overview.alerts {
        println!("ALERT        {}", alert_text(alert));
    }
}

fn print_figures(f: &Figures, b: &Backlog) {
    println!(
        "deliveries   {} (claimed {}, duplicates {} = {}, rejected {}, bad signature {}, re-deliveries {})",
        fmt_count(f.deliveries),
        fmt_count(f.claimed),
        fmt_count(f.duplicates),
        fmt_rate(f.duplicate_rate()),
        fmt_count(f.rejected),
        fmt_count(f.bad_signature),
        fmt_count(f.redeliveries)
    );
    println!(
        "events       completed {}, dead {}; attempts {} (failed {}), {} per event",
        fmt_count(f.events_completed),
        fmt_count(f.events_dead),
        fmt_count(f.attempts),
        fmt_count(f.attempts_failed),
        f.attempts_per_event()
            .map_or("–".into(), |a| format!("{a:.2}"))
    );
    println!(
        "latency      ack p50 {}, p99 {}; end to end p50 {}, p99 {}",
        fmt_ms(f.ack_ms(0.5)),
        fmt_ms(f.ack_ms(0.99)),
        fmt_ms(f.e2e_ms(0.5)),
        fmt_ms(f.e2e_ms(0.99))
    );
    println!(
        "backlog      {} waiting, oldest due {}; {} dead letters, {} in the last 10 minutes",
        fmt_count(b.waiting),
        fmt_ms(b.oldest_due_secs.map(|s| s * 1000.0)),
        fmt_count(b.dead_letters),
        fmt_count(b.dead_last_10m)
    );
}

fn alert_text(alert: &Condition) -> String {
    format!("{} on {}: {}", alert.title(), alert.source, alert.summary)
}

/// The audit log, newest first, up to `limit` entries.
pub async fn audit(remote: &Remote, limit: usize, as_json: bool) -> Result<(), RemoteError> {
    let entries: Vec<AuditEntry> = remote
        .collect("audit", Vec::new(), limit, |page: AuditPage| {
            (page.rows, page.older)
        })
        .await?;
    if as_json {
        output::json(&entries);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = entries
        .into_iter()
        .map(|e| {
            let who = match (e.username, e.by_token) {
                (Some(name), true) => format!("token {name}"),
                (Some(name), false) => name,
                (None, _) => "-".into(),
            };
            vec![
                shown(&e.at),
                who,
                e.action,
                or_dash(e.target),
                e.outcome,
                or_dash(e.remote_addr),
            ]
        })
        .collect();
    table(
        &["AT (UTC)", "WHO", "ACTION", "TARGET", "OUTCOME", "FROM"],
        &rows,
    );
    Ok(())
}
