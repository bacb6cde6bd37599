//! The deliveries list: newest first, filtered, keyset-paginated by id, and
//! polled for newer rows so the page stays live.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

pub const PAGE_SIZE: i64 = 50;

/// The outcomes a delivery can have (spec section 4), for the filter.
pub const OUTCOMES: &[&str] = &["claimed", "completed", "in_progress", "dead", "rejected"];

/// Filters, as they appear in the page's query string. Empty means any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeliveryFilter {
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub outcome: String,
    /// An exact status (`409`) or a class (`4xx`).
    #[serde(default)]
    pub status: String,
    /// An idempotency key or provider id, or `slug:key` as the application
    /// sees it in `Idempotency-Key`.
    #[serde(default)]
    pub key: String,
    /// UTC, as a `datetime-local` input gives it: `2026-11-30T14:05`.
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
}

impl DeliveryFilter {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeliveryRow {
    pub id: i64,
    /// UTC, to the millisecond.
    pub received_at: String,
    pub source: String,
    pub event_id: Option<i64>,
    pub idem_key: Option<String>,
    pub outcome: String,
    pub http_status: i16,
    pub reject_reason: Option<String>,
    /// signature, timestamp, key or size (rejected deliveries only).
    pub reject_kind: Option<String>,
    pub ack_micros: Option<i32>,
    pub redelivery_of: Option<i64>,
}

impl DeliveryRow {
    /// The outcome in the words on-call engineers read (spec section 4).
    pub fn outcome_words(&self) -> String {
        outcome_words(
            &self.outcome,
            self.http_status,
            self.reject_reason.as_deref(),
        )
    }
}

/// "claimed", "already completed", "409 in-progress", "dead-lettered",
/// "rejected: bad signature", ...
pub fn outcome_words(outcome: &str, http_status: i16, reject_reason: Option<&str>) -> String {
    match outcome {
        "claimed" => "claimed".into(),
        "completed" => "already completed".into(),
        "in_progress" if http_status == 409 => "409 in-progress".into(),
        "in_progress" => "in-progress (queued)".into(),
        "dead" => "dead-lettered".into(),
        "unavailable" => "503 unavailable".into(),
        "rejected" => format!("rejected: {}", rejection_kind(http_status, reject_reason)),
        other => other.into(),
    }
}

fn rejection_kind(http_status: i16, reason: Option<&str>) -> &'static str {
    let reason = reason.unwrap_or_default().to_ascii_lowercase();
    match http_status {
        413 => "too large",
        401 if reason.contains("timestamp") => "stale timestamp",
        401 => "bad signature",
        400 if reason.contains("missing") || reason.contains("id") => "no event id",
        _ => "bad request",
    }
}

/// The CSS class carrying the outcome's colour (the words carry it too).
pub fn outcome_class(outcome: &str) -> &'static str {
    match outcome {
        "claimed" => "badge badge-ok",
        "completed" => "badge badge-info",
        "in_progress" => "badge badge-warn",
        "dead" | "rejected" | "unavailable" => "badge badge-bad",
        _ => "badge",
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeliveryPage {
    pub rows: Vec<DeliveryRow>,
    /// Pass as `before` for the next (older) page; None on the last page.
    pub older: Option<i64>,
    /// A filter the server could not read, explained.
    pub filter_error: Option<String>,
    /// Rejections counted but not recorded in the last day (strangers over
    /// their address's rate), on the first page where rejections are shown.
    pub unrecorded: Option<Unrecorded>,
    /// How far behind the primary this page is, in seconds, when it comes
    /// from the read replica and it lags by `LAG_SHOWN` or more.
    #[serde(default)]
    pub replica_lag_secs: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Unrecorded {
    pub count: i64,
    /// The addresses that sent most, with their counts.
    pub top: Vec<(String, i64)>,
}

/// The window the unrecorded count covers.
pub const UNRECORDED_HOURS: i32 = 24;

/// Newest first. `before`: rows older than this id (the next page).
/// `after`: only rows newer than this id (the live poll).
#[server(endpoint = "deliveries")]
pub async fn list_deliveries(
    #[server(default)] filter: DeliveryFilter,
    before: Option<i64>,
    after: Option<i64>,
) -> Result<DeliveryPage, ServerFnError> {
    let cx = super::ssr::cx().await?;
    match server::deliveries(&cx, &filter, before, after).await {
        // The page shows a filter it cannot read beside the form.
        Err(crate::error::AppError::BadRequest(message)) => Ok(DeliveryPage {
            rows: Vec::new(),
            older: None,
            filter_error: Some(message),
            unrecorded: None,
            replica_lag_secs: None,
        }),
        page => Ok(page?),
    }
}

#[cfg(feature = "ssr")]
pub mod server {
    use sqlx::{PgPool, Postgres, QueryBuilder};

    use super::*;
    use crate::api::ssr::Cx;
    use crate::auth::Role;
    use crate::error::AppError;

    /// A page of deliveries, newest first, by the dashboard's filters;
    /// a filter that cannot be read is `BadRequest`. The first page also counts
    /// the rejections not recorded one by one, when it shows rejections.
    pub async fn deliveries(
        cx: &Cx,
        filter: &DeliveryFilter,
        before: Option<i64>,
        after: Option<i64>,
    ) -> Result<DeliveryPage, AppError> {
        cx.require(Role::Viewer)?;
        let reads = cx.reads.pool();
        let mut page = match query(&reads, filter, before, after).await {
            Ok(page) => page,
            Err(QueryError::Filter(message)) => return Err(AppError::BadRequest(message)),
            Err(QueryError::Db(e)) => return Err(AppError::database(e)),
        };
        let shows_rejections = filter.outcome.is_empty() || filter.outcome == "rejected";
        if before.is_none() && after.is_none() && shows_rejections {
            page.unrecorded = unrecorded(&reads, &filter.source)
                .await
                .map_err(AppError::database)?;
        }
        page.replica_lag_secs = cx.reads.shown_lag_secs();
        Ok(page)
    }

    pub enum QueryError {
        Filter(String),
        Db(sqlx::Error),
    }

    impl From<sqlx::Error> for QueryError {
        fn from(e: sqlx::Error) -> Self {
            QueryError::Db(e)
        }
    }

    pub const ROW_COLUMNS: &str =
        "d.id, to_char(d.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS received_at,
         d.source, d.event_id, d.idem_key, d.outcome, d.http_status, d.reject_reason,
         d.reject_kind, d.ack_micros, d.redelivery_of";

    fn parse_time(field: &str, value: &str) -> Result<String, QueryError> {
        crate::api::ssr::utc_time(field, value).map_err(QueryError::Filter)
    }

    fn status_range(value: &str) -> Result<(i16, i16), QueryError> {
        let bad = || {
            QueryError::Filter(format!(
                "status: expected a code like 409 or a class like 4xx, got {value:?}"
            ))
        };
        if let Some(class) = value.strip_suffix("xx") {
            let class: i16 = class.parse().map_err(|_| bad())?;
            if !(1..=5).contains(&class) {
                return Err(bad());
            }
            return Ok((class * 100, class * 100 + 99));
        }
        let code: i16 = value.parse().map_err(|_| bad())?;
        if !(100..=599).contains(&code) {
            return Err(bad());
        }
        Ok((code, code))
    }

    /// Id bounds that hold every delivery received in [from, to).
    /// Deliveries not yet folded into the rollups (the last seconds) have
    /// higher ids than any folded one, and are never excluded by them.
    async fn id_bounds(
        pool: &PgPool,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<(Option<i64>, Option<i64>), sqlx::Error> {
        let low = match from {
            None => None,
            Some(from) => {
                sqlx::query_scalar!(
                    "SELECT coalesce(
                     (SELECT min(first_delivery_id) FROM minute_stats
                      WHERE minute >= date_trunc('minute', $1::text::timestamptz)),
                     (SELECT last_id + 1 FROM rollup_progress WHERE name = 'deliveries'))",
                    from
                )
                .fetch_one(pool)
                .await?
            }
        };
        let high = match to {
            None => None,
            // Only when the rollups are past `to` (with a minute to spare).
            Some(to) => {
                sqlx::query_scalar!(
                    "SELECT CASE WHEN (SELECT received_at FROM deliveries WHERE id = p.last_id)
                                  >= $1::text::timestamptz + interval '1 minute'
                        THEN coalesce((SELECT max(last_delivery_id) FROM minute_stats
                                       WHERE minute <= date_trunc('minute', $1::text::timestamptz)), 0)
                        END
                 FROM rollup_progress p WHERE p.name = 'deliveries'",
                    to
                )
                .fetch_one(pool)
                .await?
            }
        };
        Ok((low, high))
    }

    pub async fn query(
        pool: &PgPool,
        f: &DeliveryFilter,
        before: Option<i64>,
        after: Option<i64>,
    ) -> Result<DeliveryPage, QueryError> {
        let mut q: QueryBuilder<Postgres> =
            QueryBuilder::new(format!("SELECT {ROW_COLUMNS} FROM deliveries d WHERE true"));
        let source = f.source.trim();
        if !source.is_empty() {
            q.push(" AND d.source = ").push_bind(source.to_owned());
        }
        let outcome = f.outcome.trim();
        if !outcome.is_empty() {
            if !OUTCOMES.contains(&outcome) && outcome != "unavailable" {
                return Err(QueryError::Filter(format!(
                    "outcome: expected one of {}, got {outcome:?}",
                    OUTCOMES.join(", ")
                )));
            }
            q.push(" AND d.outcome = ").push_bind(outcome.to_owned());
        }
        let status = f.status.trim();
        if !status.is_empty() {
            let (lo, hi) = status_range(status)?;
            q.push(" AND d.http_status BETWEEN ")
                .push_bind(lo)
                .push(" AND ")
                .push_bind(hi);
        }
        let key = f.key.trim();
        if !key.is_empty() {
            // Through the claim index: every (source, key) pair the text could
            // mean, the key alone or `slug:key` as in Idempotency-Key.
            let slugs: Vec<String> = sqlx::query_scalar!("SELECT slug FROM sources")
                .fetch_all(pool)
                .await?;
            let mut pairs_source = Vec::new();
            let mut pairs_key = Vec::new();
            for slug in &slugs {
                pairs_source.push(slug.clone());
                pairs_key.push(key.to_owned());
                if let Some(rest) = key
                    .strip_prefix(slug.as_str())
                    .and_then(|r| r.strip_prefix(':'))
                {
                    pairs_source.push(slug.clone());
                    pairs_key.push(rest.to_owned());
                }
            }
            // Rejected deliveries hold no key (it is not trusted unverified),
            // so every delivery with a key is found through its event.
            q.push(
                " AND d.event_id IN (SELECT e.id FROM events e
                        JOIN unnest(",
            )
            .push_bind(pairs_source)
            .push("::text[], ")
            .push_bind(pairs_key)
            .push(
                "::text[]) AS k(source, idem_key)
                   ON e.source = k.source AND e.idem_key = k.idem_key)",
            );
        }
        // Time bounds also become id bounds (from the rollups' per-minute id
        // ranges), so the newest-first scan starts and stops in the right place.
        let from = match f.from.trim() {
            "" => None,
            v => Some(parse_time("from", v)?),
        };
        let to = match f.to.trim() {
            "" => None,
            v => Some(parse_time("to", v)?),
        };
        let (low_id, high_id) = id_bounds(pool, from.as_deref(), to.as_deref()).await?;
        if let Some(from) = from {
            q.push(" AND d.received_at >= ")
                .push_bind(from)
                .push("::timestamptz");
        }
        if let Some(to) = to {
            q.push(" AND d.received_at < ")
                .push_bind(to)
                .push("::timestamptz");
        }
        if let Some(low) = low_id {
            q.push(" AND d.id >= ").push_bind(low);
        }
        if let Some(high) = high_id {
            q.push(" AND d.id <= ").push_bind(high);
        }
        if let Some(before) = before {
            q.push(" AND d.id < ").push_bind(before);
        }
        if let Some(after) = after {
            q.push(" AND d.id > ").push_bind(after);
        }
        q.push(" ORDER BY d.id DESC LIMIT ")
            .push_bind(PAGE_SIZE + 1);
        let rows: Vec<DeliveryRow> = q.build_query_as().fetch_all(pool).await?;
        let (rows, older) = crate::api::ssr::page(rows, PAGE_SIZE, |r| r.id);
        Ok(DeliveryPage {
            rows,
            older,
            filter_error: None,
            unrecorded: None,
            replica_lag_secs: None,
        })
    }

    /// The last day's unrecorded rejections of `source` (all when empty).
    pub async fn unrecorded(
        pool: &PgPool,
        source: &str,
    ) -> Result<Option<Unrecorded>, sqlx::Error> {
        let top = sqlx::query!(
            r#"SELECT remote_addr, sum(count)::bigint AS "count!"
               FROM unrecorded_rejections
               WHERE minute > now() - make_interval(hours => $1) AND ($2 = '' OR source = $2)
               GROUP BY remote_addr ORDER BY 2 DESC LIMIT 4"#,
            UNRECORDED_HOURS,
            source
        )
        .fetch_all(pool)
        .await?;
        if top.is_empty() {
            return Ok(None);
        }
        let count = sqlx::query_scalar!(
            r#"SELECT coalesce(sum(count), 0)::bigint AS "count!"
               FROM unrecorded_rejections
               WHERE minute > now() - make_interval(hours => $1) AND ($2 = '' OR source = $2)"#,
            UNRECORDED_HOURS,
            source
        )
        .fetch_one(pool)
        .await?;
        Ok(Some(Unrecorded {
            count,
            top: top.into_iter().map(|r| (r.remote_addr, r.count)).collect(),
        }))
    }
}
