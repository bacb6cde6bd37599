//! The overview's figures, read from the per-minute rollups (`minute_stats`)
//! and a few capped live counts: no page view scans deliveries.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// Counts above this are shown as "at least": counting a huge backlog exactly
/// would make the page slow exactly when it is needed.
pub const COUNT_CAP: i64 = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Window {
    Hour,
    Day,
    Week,
}

impl Window {
    pub fn parse(s: &str) -> Self {
        match s {
            "day" => Window::Day,
            "week" => Window::Week,
            _ => Window::Hour,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Week => "week",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Window::Hour => "last hour",
            Window::Day => "last 24 hours",
            Window::Week => "last 7 days",
        }
    }
    pub fn minutes(self) -> i64 {
        match self {
            Window::Hour => 60,
            Window::Day => 24 * 60,
            Window::Week => 7 * 24 * 60,
        }
    }
    /// Minutes per chart bar: about 60 to 100 bars whatever the window.
    pub fn bucket_minutes(self) -> i64 {
        match self {
            Window::Hour => 1,
            Window::Day => 15,
            Window::Week => 120,
        }
    }
}

/// Totals over a window, for one source or all.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Figures {
    pub deliveries: i64,
    pub claimed: i64,
    /// Deliveries of a key already held: completed, in progress or dead.
    pub duplicates: i64,
    pub rejected: i64,
    pub bad_signature: i64,
    pub redeliveries: i64,
    pub attempts: i64,
    pub attempts_failed: i64,
    pub events_completed: i64,
    pub events_dead: i64,
    pub ack_hist: Vec<i64>,
    pub e2e_hist: Vec<i64>,
}

impl Figures {
    /// Duplicates among verified deliveries.
    pub fn duplicate_rate(&self) -> Option<f64> {
        let verified = self.claimed + self.duplicates;
        (verified > 0).then(|| self.duplicates as f64 / verified as f64)
    }
    pub fn ack_ms(&self, q: f64) -> Option<f64> {
        super::quantile_ms(&self.ack_hist, q)
    }
    pub fn e2e_ms(&self, q: f64) -> Option<f64> {
        super::quantile_ms(&self.e2e_hist, q)
    }
    /// Attempts per event that reached an end (completed or dead).
    pub fn attempts_per_event(&self) -> Option<f64> {
        let ended = self.events_completed + self.events_dead;
        (ended > 0).then(|| self.attempts as f64 / ended as f64)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Backlog {
    /// Queued or retrying events (capped at `COUNT_CAP`).
    pub waiting: i64,
    /// Seconds the longest-waiting due event has waited.
    pub oldest_due_secs: Option<f64>,
    /// Dead-lettered events (capped at `COUNT_CAP`).
    pub dead_letters: i64,
    /// Events dead-lettered in the last 10 minutes.
    pub dead_last_10m: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct SourceFigures {
    pub slug: String,
    pub provider: String,
    pub paused: bool,
    pub figures: Figures,
    pub backlog: Backlog,
}

/// One chart bar.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Point {
    /// Start of the bar, Unix milliseconds.
    pub at_ms: i64,
    pub deliveries: i64,
    pub duplicates: i64,
    pub rejected: i64,
    pub ack_p99_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Overview {
    pub window: Window,
    /// The source the figures are for; None: all sources.
    pub source: Option<String>,
    pub generated_at: String,
    pub totals: Figures,
    pub backlog: Backlog,
    pub per_source: Vec<SourceFigures>,
    pub series: Vec<Point>,
    pub bucket_minutes: i64,
    /// The alerts firing now (`api::alerts`), for the banner.
    pub alerts: Vec<crate::api::alerts::Condition>,
    /// How far behind the primary these figures are, in seconds, when they
    /// come from the read replica (`read_database_url`) and it lags by
    /// `LAG_SHOWN` or more.
    #[serde(default)]
    pub replica_lag_secs: Option<f64>,
}

#[server(endpoint = "overview")]
pub async fn load_overview(
    source: Option<String>,
    window: String,
) -> Result<Overview, ServerFnError> {
    let cx = super::ssr::cx().await?;
    Ok(server::overview(&cx, source, Window::parse(&window)).await?)
}

#[cfg(feature = "ssr")]
pub mod server {
    use std::collections::BTreeMap;

    use sqlx::PgPool;

    use super::*;
    use crate::api::ssr::Cx;
    use crate::auth::Role;
    use crate::error::AppError;

    /// The figures of `window`, for one source or (None) all of them.
    pub async fn overview(
        cx: &Cx,
        source: Option<String>,
        window: Window,
    ) -> Result<Overview, AppError> {
        cx.require(Role::Viewer)?;
        let source = source.filter(|s| !s.is_empty());
        let reads = cx.reads.pool();
        let mut overview = load(&reads, source.clone(), window)
            .await
            .map_err(AppError::database)?;
        overview.replica_lag_secs = cx.reads.shown_lag_secs();
        overview.alerts = crate::api::alerts::ssr::firing(&reads)
            .await
            .map_err(AppError::database)?
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

    impl Figures {
        fn add(&mut self, r: &MinuteRow) {
            self.deliveries += r.deliveries as i64;
            self.claimed += r.claimed as i64;
            self.duplicates += (r.completed + r.in_progress + r.dead) as i64;
            self.rejected += r.rejected as i64;
            self.bad_signature += r.bad_signature as i64;
            self.redeliveries += r.redeliveries as i64;
            self.attempts += r.attempts as i64;
            self.attempts_failed += r.attempts_failed as i64;
            self.events_completed += r.events_completed as i64;
            self.events_dead += r.events_dead as i64;
            add_hist(&mut self.ack_hist, &r.ack_hist);
            add_hist(&mut self.e2e_hist, &r.e2e_hist);
        }
    }

    struct SourceRow {
        slug: String,
        provider: String,
        paused: bool,
    }

    struct BacklogRow {
        source: String,
        waiting: i64,
        oldest_due_secs: Option<f64>,
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
            r#"SELECT slug, provider, coalesce(paused_override, config_paused) AS "paused!"
             FROM sources ORDER BY in_config DESC, slug"#
        )
        .fetch_all(pool)
        .await?;
        // Capped: the most overdue first, so the oldest is always counted.
        let backlog = sqlx::query_as!(
            BacklogRow,
            r#"SELECT source, count(*) AS "waiting!",
                    extract(epoch FROM now() - min(next_attempt_at))::float8 AS oldest_due_secs
             FROM (SELECT source, next_attempt_at FROM dispatches
                   WHERE state IN ('queued', 'retrying')
                   ORDER BY next_attempt_at LIMIT $1) w
             GROUP BY source"#,
            COUNT_CAP
        )
        .fetch_all(pool)
        .await?;
        let dead: Vec<(String, i64, i64)> = sqlx::query!(
            r#"SELECT source, count(*) AS "dead!",
                      count(*) FILTER (WHERE state_changed_at > now() - interval '10 minutes')
                          AS "recent!"
               FROM (SELECT source, state_changed_at FROM dispatches WHERE state = 'dead'
                     ORDER BY state_changed_at DESC LIMIT $1) d
               GROUP BY source"#,
            COUNT_CAP
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|r| (r.source, r.dead, r.recent))
        .collect();
        let generated_at: String = sqlx::query_scalar!(
            r#"SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC' AS "at!""#
        )
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
                s.figures.add(r);
            }
            if !wanted(&r.source) {
                continue;
            }
            totals.add(r);
            let bar = r.minute_ms - r.minute_ms.rem_euclid(bucket_ms);
            bars.entry(bar).or_default().add(r);
        }
        let mut backlog_total = Backlog::default();
        for b in backlog {
            if let Some(s) = per_source.iter_mut().find(|s| s.slug == b.source) {
                s.backlog.waiting = b.waiting;
                s.backlog.oldest_due_secs = b.oldest_due_secs;
            }
            if wanted(&b.source) {
                backlog_total.waiting += b.waiting;
                backlog_total.oldest_due_secs =
                    match (backlog_total.oldest_due_secs, b.oldest_due_secs) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
            }
        }
        for (slug, count, recent) in dead {
            if let Some(s) = per_source.iter_mut().find(|s| s.slug == slug) {
                s.backlog.dead_letters = count;
                s.backlog.dead_last_10m = recent;
            }
            if wanted(&slug) {
                backlog_total.dead_letters += count;
                backlog_total.dead_last_10m += recent;
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
}
