//! The overview's figures, read from the per-minute rollups (`minute_stats`)
//! and a few capped live counts: no page view scans deliveries.

use replaysafe_types::time::Time;
use std::collections::BTreeMap;

use sqlx::PgPool;

use crate::error::OpError;
use crate::ops::Cx;
use replaysafe_types::auth::Role;
use replaysafe_types::overview::*;

/// The figures of `window`, for one source or (None) all of them.
pub async fn overview(
    cx: &Cx,
    source: Option<String>,
    window: Window,
) -> Result<Overview, OpError> {
    cx.require(Role::Viewer)?;
    let source = source.filter(|s| !s.is_empty());
    let reads = cx.services.reads.pool();
    let mut overview = load(&reads, source.clone(), window).await?;
    overview.replica_lag_secs = cx.services.reads.shown_lag_secs();
    overview.alerts = crate::alerts::rules::firing(&reads)
        .await?
        .into_iter()
        .filter(|c| source.as_ref().is_none_or(|s| *s == c.source))
        .collect();
    Ok(overview)
}

struct MinuteRow {
    source: String,
    minute_ms: i64,
    deliveries: i32,
    claimed: i32,
    completed: i32,
    in_progress: i32,
    dead: i32,
    rejected: i32,
    bad_signature: i32,
    redeliveries: i32,
    attempts: i32,
    attempts_failed: i32,
    events_completed: i32,
    events_dead: i32,
    ack_hist: Vec<i32>,
    e2e_hist: Vec<i32>,
}

fn add_hist(into: &mut Vec<i64>, from: &[i32]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(from) {
        *a += *b as i64;
    }
}

/// Adds a minute's row to `figures`.
fn add(figures: &mut Figures, r: &MinuteRow) {
    figures.deliveries += r.deliveries as i64;
    figures.claimed += r.claimed as i64;
    figures.duplicates += (r.completed + r.in_progress + r.dead) as i64;
    figures.rejected += r.rejected as i64;
    figures.bad_signature += r.bad_signature as i64;
    figures.redeliveries += r.redeliveries as i64;
    figures.attempts += r.attempts as i64;
    figures.attempts_failed += r.attempts_failed as i64;
    figures.events_completed += r.events_completed as i64;
    figures.events_dead += r.events_dead as i64;
    add_hist(&mut figures.ack_hist, &r.ack_hist);
    add_hist(&mut figures.e2e_hist, &r.e2e_hist);
}

struct SourceRow {
    slug: String,
    provider: String,
    paused: bool,
}

async fn load(
    pool: &PgPool,
    source: Option<String>,
    window: Window,
) -> Result<Overview, sqlx::Error> {
    let minutes = window.minutes();
    let rows = sqlx::query_as!(
        MinuteRow,
        r#"SELECT source, (extract(epoch FROM minute) * 1000)::bigint AS "minute_ms!",
                deliveries, claimed, completed, in_progress, dead, rejected, bad_signature,
                redeliveries, attempts, attempts_failed, events_completed, events_dead,
                ack_hist, e2e_hist
         FROM minute_stats
         WHERE minute >= date_trunc('minute', now()) - make_interval(mins => $1)"#,
        minutes as i32 - 1
    )
    .fetch_all(pool)
    .await?;
    let sources = sqlx::query_as!(
        SourceRow,
        r#"SELECT slug, provider, paused AS "paused!"
         FROM sources ORDER BY in_config DESC, slug"#
    )
    .fetch_all(pool)
    .await?;
    let backlog = crate::events::backlog::by_destination(pool).await?;
    let dead = crate::events::backlog::dead_events(pool, 10).await?;
    let generated_at: replaysafe_types::time::Time =
        sqlx::query_scalar!(r#"SELECT now() AS "at!: Time""#)
            .fetch_one(pool)
            .await?;
    let now_minute_ms: i64 = sqlx::query_scalar!(
        r#"SELECT (extract(epoch FROM date_trunc('minute', now())) * 1000)::bigint AS "ms!""#
    )
    .fetch_one(pool)
    .await?;

    let wanted = |slug: &str| source.as_deref().is_none_or(|s| s == slug);
    let mut per_source: Vec<SourceFigures> = sources
        .into_iter()
        .map(|s| SourceFigures {
            slug: s.slug,
            provider: s.provider,
            paused: s.paused,
            figures: Figures::default(),
            backlog: Backlog::default(),
        })
        .collect();
    let mut totals = Figures::default();
    let bucket_ms = window.bucket_minutes() * 60_000;
    let first_bucket = now_minute_ms - (minutes - 1) * 60_000;
    let first_bucket = first_bucket - first_bucket.rem_euclid(bucket_ms);
    let mut bars: BTreeMap<i64, Figures> = BTreeMap::new();
    let mut at = first_bucket;
    while at <= now_minute_ms {
        bars.insert(at, Figures::default());
        at += bucket_ms;
    }
    for r in &rows {
        if let Some(s) = per_source.iter_mut().find(|s| s.slug == r.source) {
            add(&mut s.figures, r);
        }
        if !wanted(&r.source) {
            continue;
        }
        add(&mut totals, r);
        let bar = r.minute_ms - r.minute_ms.rem_euclid(bucket_ms);
        add(bars.entry(bar).or_default(), r);
    }
    let mut backlog_total = Backlog::default();
    for b in &backlog {
        if let Some(s) = per_source.iter_mut().find(|s| s.slug == b.source) {
            s.backlog.add(b);
        }
        if wanted(&b.source) {
            backlog_total.add(b);
        }
    }
    for d in dead {
        if let Some(s) = per_source.iter_mut().find(|s| s.slug == d.source) {
            s.backlog.dead_letters = d.events;
            s.backlog.dead_last_10m = d.recent;
        }
        if wanted(&d.source) {
            backlog_total.dead_letters += d.events;
            backlog_total.dead_last_10m += d.recent;
        }
    }
    let series = bars
        .into_iter()
        .map(|(at_ms, f)| Point {
            at_ms,
            deliveries: f.deliveries,
            duplicates: f.duplicates,
            rejected: f.rejected,
            ack_p99_ms: f.ack_ms(0.99),
            e2e_p99_ms: f.e2e_ms(0.99),
        })
        .collect();
    Ok(Overview {
        window,
        source,
        generated_at,
        totals,
        backlog: backlog_total,
        per_source,
        series,
        bucket_minutes: window.bucket_minutes(),
        alerts: Vec::new(),
        replica_lag_secs: None,
    })
}

/// How long the database gauges are reused: scrapes, however frequent,
/// read the database at most this often.
pub const GAUGES_FRESH_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// When a server last read its gauges, and the label sets it set (one that
/// is gone since is set to 0, not left at its last value); concurrent
/// scrapes wait for one read.
#[derive(Clone, Default)]
pub struct GaugesRead(std::sync::Arc<tokio::sync::Mutex<GaugesState>>);

#[derive(Default)]
struct GaugesState {
    at: Option<std::time::Instant>,
    destinations: std::collections::BTreeSet<(String, String)>,
}

/// Reads the backlog and dead-letter gauges from the database (the same
/// definitions as the overview's, `events::backlog`), unless they were read
/// within `GAUGES_FRESH_FOR`.
pub async fn refresh_gauges(
    services: &crate::processing::Services,
    read: &GaugesRead,
) -> Result<(), sqlx::Error> {
    let pool = &services.pool;
    let mut state = read.0.lock().await;
    if state.at.is_some_and(|at| at.elapsed() < GAUGES_FRESH_FOR) {
        return Ok(());
    }
    // Noted before the read: with the database away, waiting scrapes answer
    // with the counters at once instead of each waiting out a timeout.
    state.at = Some(std::time::Instant::now());
    let slugs: Vec<String> = sqlx::query_scalar!("SELECT slug FROM sources")
        .fetch_all(pool)
        .await?;
    let rows = crate::events::backlog::by_destination(pool).await?;
    let dead = crate::events::backlog::dead_events(pool, 10).await?;
    let mut per_source: BTreeMap<&str, Backlog> = slugs
        .iter()
        .map(|s| (s.as_str(), Backlog::default()))
        .collect();
    for row in &rows {
        per_source.entry(&row.source).or_default().add(row);
    }
    for d in &dead {
        per_source.entry(&d.source).or_default().dead_letters = d.events;
    }
    for (source, b) in &per_source {
        let source = source.to_string();
        metrics::gauge!("replaysafe_backlog_events", "source" => source.clone())
            .set(b.total() as f64);
        metrics::gauge!("replaysafe_oldest_due_seconds", "source" => source.clone())
            .set(b.oldest_due_secs.unwrap_or(0.0).max(0.0));
        metrics::gauge!("replaysafe_dead_letters", "source" => source).set(b.dead_letters as f64);
    }
    let mut now_set = std::collections::BTreeSet::new();
    for row in &rows {
        let labels = (row.source.clone(), row.destination.clone());
        set_destination(
            &labels,
            [row.due, row.waiting, row.in_flight],
            row.dead_letters,
            row.blocked_keys,
        );
        now_set.insert(labels);
    }
    for gone in state.destinations.difference(&now_set) {
        set_destination(gone, [0, 0, 0], 0, 0);
    }
    state.destinations = now_set;
    crate::reconcile::set_metrics(services).await
}

fn set_destination(
    (source, destination): &(String, String),
    backlog: [i64; 3],
    dead: i64,
    blocked_keys: i64,
) {
    for (state, n) in ["due", "waiting", "in_flight"].into_iter().zip(backlog) {
        metrics::gauge!("replaysafe_backlog", "source" => source.clone(),
            "destination" => destination.clone(), "state" => state)
        .set(n as f64);
    }
    metrics::gauge!("replaysafe_dead_letter_dispatches", "source" => source.clone(),
        "destination" => destination.clone())
    .set(dead as f64);
    metrics::gauge!("replaysafe_ordering_blocked_keys", "source" => source.clone(),
        "destination" => destination.clone())
    .set(blocked_keys as f64);
}
