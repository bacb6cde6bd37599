//! One event's story (its deliveries and attempts), one delivery's record, and
//! the dead letters.

use replaysafe_types::time::Time;
use sqlx::PgPool;

use crate::error::OpError;
use crate::ops::mask::Credentials;
use crate::ops::Cx;
use replaysafe_types::auth::Role;
use replaysafe_types::deliveries::DeliveryRow;
use replaysafe_types::events::*;
use replaysafe_types::states::{Outcome, State};

/// An event with its timeline; credentials masked unless an admin
/// asks to `reveal` them (audit-logged).
pub async fn event_detail(cx: &Cx, id: i64, reveal: bool) -> Result<EventDetail, OpError> {
    cx.require(Role::Viewer)?;
    let credentials = |source: &str| crate::ops::mask::Credentials::of(&cx.services.config, source);
    let masking = masking(cx, "event", id, reveal, &credentials).await?;
    event(&cx.services.reads.pool(), id, masking)
        .await?
        .ok_or_else(|| OpError::not_found("event"))
}

/// One stored delivery, payload and headers as the page shows them.
pub async fn delivery_detail(cx: &Cx, id: i64, reveal: bool) -> Result<DeliveryDetail, OpError> {
    cx.require(Role::Viewer)?;
    let credentials = |source: &str| crate::ops::mask::Credentials::of(&cx.services.config, source);
    let masking = masking(cx, "delivery", id, reveal, &credentials).await?;
    delivery(&cx.services.reads.pool(), id, masking)
        .await?
        .ok_or_else(|| OpError::not_found("delivery"))
}

/// Dead letters, most recently dead first; `before`: the keyset cursor.
pub async fn dead_letters(
    cx: &Cx,
    filter: &replaysafe_types::actions::DeadFilter,
    before: Option<(i64, i64)>,
) -> Result<DeadLetterPage, OpError> {
    cx.require(Role::Viewer)?;
    Ok(dead(
        &cx.services.reads.pool(),
        &crate::ops::actions::DeadBounds::of(filter)?,
        before,
    )
    .await?)
}

/// The most keys of ordered destinations listed as blocked at once.
pub const BLOCKED_KEYS_SHOWN: i64 = 500;

/// The keys of ordered destinations (of `source`, or every one) held by an
/// event that failed and waits to be retried, oldest holder first.
pub async fn blocked_keys(
    cx: &Cx,
    source: Option<&str>,
) -> Result<Vec<replaysafe_types::overview::BlockedKey>, OpError> {
    cx.require(Role::Viewer)?;
    Ok(crate::events::backlog::blocked_keys(
        &cx.services.reads.pool(),
        source.filter(|s| !s.is_empty()),
        BLOCKED_KEYS_SHOWN,
    )
    .await?)
}

/// Stored headers are `[[name, value], ...]`.
fn header_pairs(value: serde_json::Value) -> Vec<(String, String)> {
    match value {
        serde_json::Value::Array(items) => items
            .into_iter()
            .filter_map(|item| {
                let pair = item.as_array()?;
                Some((
                    pair.first()?.as_str()?.to_owned(),
                    pair.get(1)?.as_str().unwrap_or_default().to_owned(),
                ))
            })
            .collect(),
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| (k, v.as_str().map(str::to_owned).unwrap_or(v.to_string())))
            .collect(),
        _ => Vec::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A source's credential fields and headers, from its provider.
pub type CredentialsOf<'a> = &'a (dyn Fn(&str) -> Credentials + Sync);

/// How a stored request is shown: masked, or whole to an admin who
/// asked to reveal it (checked and audit-logged here).
async fn masking<'a>(
    cx: &Cx,
    kind: &str,
    id: i64,
    reveal: bool,
    credentials: CredentialsOf<'a>,
) -> Result<Option<CredentialsOf<'a>>, OpError> {
    if !reveal {
        return Ok(Some(credentials));
    }
    let admin = cx.require(Role::Admin)?;
    cx.audit(
        admin,
        &format!("{kind}.reveal"),
        Some(&id.to_string()),
        "succeeded",
        serde_json::json!({}),
    )
    .await?;
    Ok(None)
}

async fn delivery(
    pool: &PgPool,
    id: i64,
    masking: Option<CredentialsOf<'_>>,
) -> Result<Option<DeliveryDetail>, sqlx::Error> {
    // Times are shown in UTC to the millisecond, as on the deliveries page.
    let row = crate::db::history::by_delivery_id(pool, id, |lo, hi| {
        sqlx::query!(
            r#"SELECT d.id,
                  d.received_at AS "received_at!: Time",
                  d.source, d.event_id, d.idem_key, d.outcome AS "outcome: Outcome",
                  d.http_status, d.reject_reason, d.reject_kind, d.ack_micros, d.redelivery_of,
                  d.verified, d.verification, d.method, d.query, d.content_type,
                  d.headers, d.body, d.body_size, d.remote_addr, d.truncated, d.body_sha256
           FROM deliveries d
           WHERE d.id = $1
             AND d.received_at >= coalesce($2::timestamptz, '-infinity')
             AND d.received_at < coalesce($3::timestamptz, 'infinity')"#,
            id,
            lo as _,
            hi as _
        )
        .fetch_optional(pool)
    })
    .await?;
    Ok(row.map(|r| {
        let excerpt = r.truncated.then(|| Excerpt {
            kept: r.body.as_ref().map_or(0, Vec::len),
            sha256: r.body_sha256.as_deref().map(hex),
        });
        let (mut body, mut query, mut headers) = (r.body, r.query, header_pairs(r.headers));
        let mut masked = false;
        if let Some(credentials_of) = masking {
            let credentials = credentials_of(&r.source);
            if let Some(m) = body.as_deref().and_then(|b| credentials.body(b)) {
                body = Some(m);
                masked = true;
            }
            if let Some(m) = query.as_deref().and_then(crate::ops::mask::query) {
                query = Some(m);
                masked = true;
            }
            masked |= credentials.headers(&mut headers);
        }
        DeliveryDetail {
            payload: match &body {
                None if r.truncated => Payload::NotRead,
                body => Payload::of(body.as_deref()),
            },
            excerpt,
            masked,
            row: DeliveryRow {
                id: r.id,
                received_at: r.received_at,
                source: r.source,
                event_id: r.event_id,
                idem_key: r.idem_key,
                outcome: r.outcome,
                http_status: r.http_status,
                reject_reason: r.reject_reason,
                reject_kind: r.reject_kind,
                ack_micros: r.ack_micros,
                redelivery_of: r.redelivery_of,
            },
            verified: r.verified,
            verification: r.verification,
            method: r.method,
            query,
            content_type: r.content_type,
            headers,
            body_size: r.body_size,
            remote_addr: r.remote_addr,
        }
    }))
}

async fn event(
    pool: &PgPool,
    id: i64,
    masking: Option<CredentialsOf<'_>>,
) -> Result<Option<EventDetail>, sqlx::Error> {
    let Some(event) = summaries(pool, &EventQuery::one(id)).await?.pop() else {
        return Ok(None);
    };
    let deliveries = sqlx::query_as!(
        DeliveryRow,
        r#"SELECT d.id,
                  d.received_at AS "received_at!: Time",
                  d.source, d.event_id, d.idem_key, d.outcome AS "outcome: Outcome",
                  d.http_status, d.reject_reason, d.reject_kind, d.ack_micros, d.redelivery_of
           FROM deliveries d
           WHERE d.event_id = $1 AND d.received_at >= event_history_starts($3)
           ORDER BY d.id LIMIT $2"#,
        id,
        TIMELINE_DELIVERIES,
        event.first_seen_at as _
    )
    .fetch_all(pool)
    .await?;
    let deliveries_total: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM deliveries
           WHERE event_id = $1 AND received_at >= event_history_starts($2)"#,
        id,
        event.first_seen_at as _
    )
    .fetch_one(pool)
    .await?;
    let dispatches = sqlx::query_as!(
        DispatchRow,
        r#"SELECT p.destination, p.state AS "state: State",
                  p.state_changed_at AS "state_changed_at!: Time",
                  p.attempt_count,
                  CASE WHEN p.state IN ('queued', 'retrying')
                       THEN p.next_attempt_at END
                      AS "next_attempt_at: Time",
                  p.last_error, p.dead_reason,
                  p.completed_at AS "completed_at: Time",
                  p.ordering_key,
                  CASE WHEN p.ordering_key IS NOT NULL
                            AND p.state IN ('queued', 'processing', 'retrying') THEN
                      (SELECT count(*) FROM dispatches q
                       WHERE q.source = p.source AND q.destination = p.destination
                         AND q.ordering_key = p.ordering_key AND q.ordering_key IS NOT NULL
                         AND q.state IN ('queued', 'processing', 'retrying')
                         AND q.event_id > p.event_id)
                  END AS waiting_behind,
                  CASE WHEN p.ordering_key IS NOT NULL AND p.state IN ('queued', 'retrying') THEN
                      (SELECT min(o.event_id) FROM dispatches o
                       WHERE o.source = p.source AND o.destination = p.destination
                         AND o.ordering_key = p.ordering_key AND o.ordering_key IS NOT NULL
                         AND o.state IN ('queued', 'processing', 'retrying')
                         AND o.event_id < p.event_id)
                  END AS held_by
           FROM dispatches p WHERE p.event_id = $1 ORDER BY p.destination"#,
        id
    )
    .fetch_all(pool)
    .await?;
    let attempts = sqlx::query_as!(
        AttemptRow,
        r#"SELECT id, destination, number, worker,
                  started_at AS "started_at!: Time",
                  finished_at AS "finished_at: Time",
                  status, latency_ms, response_excerpt, error,
                  CASE WHEN result = 'retrying'
                       THEN next_attempt_at END
                      AS "next_attempt_at: Time",
                  result
           FROM attempts WHERE event_id = $1 AND started_at >= event_history_starts($2)
           ORDER BY id"#,
        id,
        event.first_seen_at as _
    )
    .fetch_all(pool)
    .await?;
    let first_delivery = match event.first_delivery_id {
        Some(first) => delivery(pool, first, masking).await?,
        None => None,
    };
    let deliveries_shown = deliveries.len();
    let mut timeline: Vec<(Time, i32, TimelineEntry)> = deliveries
        .into_iter()
        .map(|d| (d.received_at, 0, TimelineEntry::Delivery(d)))
        .chain(
            attempts
                .into_iter()
                .map(|a| (a.started_at, 1, TimelineEntry::Attempt(a))),
        )
        .collect();
    timeline.sort_by_key(|(at, kind, _)| (*at, *kind));
    Ok(Some(EventDetail {
        event,
        dispatches,
        timeline: timeline.into_iter().map(|(_, _, e)| e).collect(),
        first_delivery,
        deliveries_shown,
        deliveries_total,
    }))
}

/// Which events `summaries` reads: one by id, or a page by filter.
#[derive(Default)]
struct EventQuery<'a> {
    id: Option<i64>,
    source: Option<&'a str>,
    states: Option<Vec<String>>,
    key: Option<&'a str>,
    since: Option<&'a str>,
    until: Option<&'a str>,
    before: Option<i64>,
    limit: i64,
}

impl EventQuery<'_> {
    fn one(id: i64) -> Self {
        EventQuery {
            id: Some(id),
            limit: 1,
            ..Default::default()
        }
    }
}

/// Events newest first (by id), as lists and the event page show them.
async fn summaries(pool: &PgPool, q: &EventQuery<'_>) -> Result<Vec<EventSummary>, sqlx::Error> {
    sqlx::query_as!(
        EventSummary,
        r#"SELECT id AS "id!", source AS "source!", idem_key AS "idem_key!", state AS "state!: State",
                  state_changed_at AS "state_changed_at!: Time",
                  first_seen_at AS "first_seen_at!: Time",
                  last_seen_at AS "last_seen_at!: Time",
                  receive_count AS "receive_count!", attempt_count AS "attempt_count!",
                  coalesce(next_attempt_at, state_changed_at) AS "next_attempt_at!: Time",
                  last_error, dead_reason,
                  completed_at AS "completed_at: Time",
                  first_delivery_id, event_type
           FROM event_summaries
           WHERE ($1::bigint IS NULL OR id = $1)
             AND ($2::text IS NULL OR source = $2)
             AND ($3::text[] IS NULL OR state = ANY ($3))
             -- Through (source, idem_key)'s index, whatever the source.
             AND ($4::text IS NULL OR (source, idem_key) IN (SELECT slug, $4 FROM sources))
             AND ($5::text IS NULL OR first_seen_at >= $5::text::timestamptz)
             AND ($6::text IS NULL OR first_seen_at < $6::text::timestamptz)
             AND ($7::bigint IS NULL OR id < $7)
           ORDER BY id DESC LIMIT $8"#,
        q.id,
        q.source,
        q.states.as_deref(),
        q.key,
        q.since,
        q.until,
        q.before,
        q.limit
    )
    .fetch_all(pool)
    .await
}

/// A page of events, newest first. `outcome`: `dead`, `completed`,
/// `in_progress` (queued, processing or retrying) or one of those
/// states; `since`/`until`: first received, UTC.
pub async fn events(
    cx: &Cx,
    filter: &EventFilter,
    before: Option<i64>,
) -> Result<EventPage, OpError> {
    cx.require(Role::Viewer)?;
    let text = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
    let time = |field: &str, v: &str| {
        text(v)
            .map(|v| crate::ops::utc_time(field, &v).map_err(OpError::BadRequest))
            .transpose()
    };
    let states = match filter.outcome.trim() {
        "" => None,
        "in_progress" => Some(vec![
            "queued".into(),
            "processing".into(),
            "retrying".into(),
        ]),
        s if EVENT_STATES.contains(&s) => Some(vec![s.to_owned()]),
        other => {
            return Err(OpError::BadRequest(format!(
                "outcome: expected in_progress or one of {}, got {other:?}",
                EVENT_STATES.join(", ")
            )))
        }
    };
    let (source, key) = (text(&filter.source), text(&filter.key));
    let (since, until) = (time("since", &filter.since)?, time("until", &filter.until)?);
    let rows = summaries(
        &cx.services.reads.pool(),
        &EventQuery {
            id: None,
            source: source.as_deref(),
            states,
            key: key.as_deref(),
            since: since.as_deref(),
            until: until.as_deref(),
            before,
            limit: EVENT_PAGE_SIZE + 1,
        },
    )
    .await?;
    let (rows, older) = crate::ops::page(rows, EVENT_PAGE_SIZE, |r| r.id);
    Ok(EventPage { rows, older })
}

async fn dead(
    pool: &PgPool,
    filter: &crate::ops::actions::DeadBounds,
    before: Option<(i64, i64)>,
) -> Result<DeadLetterPage, sqlx::Error> {
    let rows = sqlx::query_as!(
        DeadLetter,
        r#"SELECT e.id,
                  ARRAY(SELECT q.destination FROM dispatches q
                        WHERE q.event_id = e.id AND q.state = 'dead'
                        ORDER BY q.destination) AS "destinations!",
                  e.source, e.idem_key, p.dead_reason, p.attempt_count, e.receive_count,
                  e.first_seen_at AS "first_seen_at!: Time",
                  p.state_changed_at AS "died_at!: Time",
                  (extract(epoch FROM p.state_changed_at) * 1000000)::bigint AS "died_micros!",
                  e.first_delivery_id
           FROM dispatches p JOIN events e ON e.id = p.event_id
           WHERE dead_letter_matches(p, $1, $5::text::timestamptz, $6::text::timestamptz, $7, $8)
             -- An event once, at its latest death: pages stay keyed by event.
             -- (At one destination, an event has one dispatch.)
             AND ($8::text IS NOT NULL OR NOT EXISTS (SELECT 1 FROM dispatches q
                             WHERE q.event_id = p.event_id AND q.state = 'dead'
                               AND (q.state_changed_at, q.destination)
                                   > (p.state_changed_at, p.destination)))
             AND ($2::bigint IS NULL
                  OR (p.state_changed_at, p.event_id) < (to_timestamp($2 / 1000000.0), $3))
           ORDER BY p.state_changed_at DESC, p.event_id DESC
           LIMIT $4"#,
        filter.source.as_deref(),
        before.map(|b| b.0),
        before.map(|b| b.1),
        DEAD_PAGE_SIZE + 1,
        filter.from.as_deref(),
        filter.to.as_deref(),
        filter.reason.as_deref(),
        filter.destination.as_deref()
    )
    .fetch_all(pool)
    .await?;
    let (rows, older) = crate::ops::page(rows, DEAD_PAGE_SIZE, |r| (r.died_micros, r.id));
    Ok(DeadLetterPage { rows, older })
}
