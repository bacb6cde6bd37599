//! The deliveries list: newest first, filtered, keyset-paginated by id, and
//! polled for newer rows so the page stays live.

use sqlx::{PgPool, Postgres, QueryBuilder};

use crate::error::OpError;
use crate::ops::Cx;
use replaysafe_types::auth::Role;
use replaysafe_types::deliveries::*;

/// A page of deliveries, newest first, by the dashboard's filters;
/// a filter that cannot be read is `BadRequest`. The first page also counts
/// the rejections not recorded one by one, when it shows rejections.
pub async fn deliveries(
    cx: &Cx,
    filter: &DeliveryFilter,
    before: Option<i64>,
    after: Option<i64>,
) -> Result<DeliveryPage, OpError> {
    cx.require(Role::Viewer)?;
    let reads = cx.services.reads.pool();
    let mut page = match query(&reads, filter, before, after).await {
        Ok(page) => page,
        Err(QueryError::Filter(message)) => return Err(OpError::BadRequest(message)),
        Err(QueryError::Db(e)) => return Err(OpError::database(e)),
    };
    let shows_rejections = filter.outcome.is_empty() || filter.outcome == "rejected";
    if before.is_none() && after.is_none() && shows_rejections {
        page.unrecorded = unrecorded(&reads, &filter.source).await?;
    }
    page.replica_lag_secs = cx.services.reads.shown_lag_secs();
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

pub const ROW_COLUMNS: &str = "d.id, d.received_at AS received_at,
     d.source, d.event_id, d.idem_key, d.outcome, d.http_status, d.reject_reason,
     d.reject_kind, d.ack_micros, d.redelivery_of";

fn parse_time(field: &str, value: &str) -> Result<String, QueryError> {
    crate::ops::utc_time(field, value).map_err(QueryError::Filter)
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
                "SELECT CASE WHEN (SELECT received_at FROM deliveries
                               WHERE id = p.last_id
                                 AND received_at >= coalesce((SELECT lo FROM delivery_received_bounds(p.last_id)), '-infinity')
                                 AND received_at < coalesce((SELECT hi FROM delivery_received_bounds(p.last_id)), 'infinity'))
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
        if !(lo..=hi).contains(&200) {
            // Said outright (not left to the planner to prove from bound
            // values): newest first through the index of answers other than
            // 200, not along the whole history for the few that match.
            q.push(" AND d.http_status <> 200");
        }
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
    let (rows, older) = crate::ops::page(rows, PAGE_SIZE, |r| r.id);
    Ok(DeliveryPage {
        rows,
        older,
        filter_error: None,
        unrecorded: None,
        replica_lag_secs: None,
    })
}

/// The last day's unrecorded rejections of `source` (all when empty).
pub async fn unrecorded(pool: &PgPool, source: &str) -> Result<Option<Unrecorded>, sqlx::Error> {
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
