//! One event's story (its deliveries and attempts), one delivery's record, and
//! the dead letters.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::deliveries::DeliveryRow;

/// A stored body as the page shows it: always as text, never as markup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Payload {
    /// JSON, re-indented for reading.
    Json(String),
    Text(String),
    /// Not UTF-8: a hex dump of the first bytes.
    Binary {
        hex: String,
        shown: usize,
    },
    /// Removed by retention.
    Pruned,
    /// Never read: the request declared more than the body limit.
    NotRead,
}

pub const BINARY_SHOWN: usize = 1024;

#[cfg(feature = "ssr")]
impl Payload {
    pub fn of(body: Option<&[u8]>) -> Self {
        let Some(body) = body else {
            return Payload::Pruned;
        };
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
            if let Ok(pretty) = serde_json::to_string_pretty(&value) {
                return Payload::Json(pretty);
            }
        }
        match std::str::from_utf8(body) {
            Ok(text) => Payload::Text(text.to_owned()),
            // An excerpt may end inside a character: the text before it.
            Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => {
                Payload::Text(String::from_utf8_lossy(&body[..e.valid_up_to()]).into_owned())
            }
            Err(_) => {
                let shown = body.len().min(BINARY_SHOWN);
                let hex = body[..shown]
                    .chunks(16)
                    .map(|line| {
                        line.iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                Payload::Binary { hex, shown }
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct AttemptRow {
    pub id: i64,
    /// The destination it was an attempt at.
    pub destination: String,
    pub number: i32,
    pub worker: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: Option<i16>,
    pub latency_ms: Option<i32>,
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
    pub next_attempt_at: Option<String>,
    pub result: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct EventSummary {
    pub id: i64,
    pub source: String,
    pub idem_key: String,
    pub state: String,
    pub state_changed_at: String,
    pub first_seen_at: String,
    pub last_seen_at: String,
    pub receive_count: i32,
    pub attempt_count: i32,
    pub next_attempt_at: String,
    pub last_error: Option<String>,
    pub dead_reason: Option<String>,
    pub completed_at: Option<String>,
    pub first_delivery_id: Option<i64>,
    /// The provider's event type, where a destination's filter needed it.
    pub event_type: Option<String>,
}

/// One lane of an event: its dispatch to one destination of its source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DispatchRow {
    pub destination: String,
    /// `queued`, `processing`, `retrying`, `completed`, `dead`, or
    /// `filtered` (the destination's filter does not take the event).
    pub state: String,
    pub state_changed_at: String,
    pub attempt_count: i32,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    pub dead_reason: Option<String>,
    pub completed_at: Option<String>,
    /// An ordered destination's: the event goes there after those of the
    /// same key received before it ('' : all of its events share one order).
    #[serde(default)]
    pub ordering_key: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeliveryDetail {
    pub row: DeliveryRow,
    pub verified: bool,
    pub verification: Option<String>,
    pub method: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    /// As stored: Authorization, Cookie and the like already redacted.
    pub headers: Vec<(String, String)>,
    pub body_size: i32,
    pub remote_addr: Option<String>,
    pub payload: Payload,
    /// Only an excerpt was stored (a rejected request): the body's first
    /// `kept` bytes of `body_size`, headers and query cut to size.
    pub excerpt: Option<Excerpt>,
    /// Credentials in it were masked; an admin may reveal them.
    pub masked: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Excerpt {
    pub kept: usize,
    /// Of the whole body as received, in hex; None when it was never read.
    pub sha256: Option<String>,
}

/// Which events a list shows; empty means any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct EventFilter {
    #[serde(default)]
    pub source: String,
    /// `dead`, `completed`, `in_progress` or an event state.
    #[serde(default)]
    pub outcome: String,
    #[serde(default)]
    pub key: String,
    /// UTC, `2026-11-30T14:05`: first received at or after.
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
}

/// An event's states (spec section 5).
pub const EVENT_STATES: &[&str] = &["queued", "processing", "retrying", "completed", "dead"];
pub const EVENT_PAGE_SIZE: i64 = 50;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct EventPage {
    pub rows: Vec<EventSummary>,
    /// Pass as `before` for the next page.
    pub older: Option<i64>,
}

/// What happened to an event, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum TimelineEntry {
    Delivery(DeliveryRow),
    Attempt(AttemptRow),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct EventDetail {
    pub event: EventSummary,
    /// One per destination, by name.
    pub dispatches: Vec<DispatchRow>,
    pub timeline: Vec<TimelineEntry>,
    /// The delivery whose body is forwarded, in full.
    pub first_delivery: Option<DeliveryDetail>,
    /// Deliveries beyond this many are not listed in the timeline.
    pub deliveries_shown: usize,
    pub deliveries_total: i64,
}

/// Timelines list at most this many deliveries (a storm can bring thousands).
pub const TIMELINE_DELIVERIES: i64 = 200;

/// `reveal`: an admin asks to see the stored request's credentials (audit-logged).
#[server(endpoint = "event")]
pub async fn get_event(
    id: i64,
    #[server(default)] reveal: bool,
) -> Result<EventDetail, ServerFnError> {
    Ok(server::event_detail(&super::ssr::cx().await?, id, reveal).await?)
}

/// `reveal`: as for `get_event`.
#[server(endpoint = "delivery")]
pub async fn get_delivery(
    id: i64,
    #[server(default)] reveal: bool,
) -> Result<DeliveryDetail, ServerFnError> {
    Ok(server::delivery_detail(&super::ssr::cx().await?, id, reveal).await?)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeadLetter {
    pub id: i64,
    /// The destinations its dispatches died at (its reason and attempts
    /// are the latest one's).
    pub destinations: Vec<String>,
    pub source: String,
    pub idem_key: String,
    pub dead_reason: Option<String>,
    pub attempt_count: i32,
    pub receive_count: i32,
    pub first_seen_at: String,
    pub died_at: String,
    /// Keyset cursor: `state_changed_at` in microseconds.
    pub died_micros: i64,
    pub first_delivery_id: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeadLetterPage {
    pub rows: Vec<DeadLetter>,
    /// Pass as `before` (with `before_id`) for the next page.
    pub older: Option<(i64, i64)>,
}

pub const DEAD_PAGE_SIZE: i64 = 50;

/// Dead-lettered events, most recently dead first.
#[server(endpoint = "dead")]
pub async fn list_dead(
    source: Option<String>,
    destination: Option<String>,
    before: Option<i64>,
    before_id: Option<i64>,
) -> Result<DeadLetterPage, ServerFnError> {
    let cx = super::ssr::cx().await?;
    let filter = crate::api::actions::DeadFilter {
        source: source.unwrap_or_default(),
        destination: destination.unwrap_or_default(),
        ..Default::default()
    };
    Ok(server::dead_letters(&cx, &filter, before.zip(before_id)).await?)
}

#[cfg(feature = "ssr")]
pub mod server {
    use sqlx::PgPool;

    use super::*;
    use crate::api::mask::Credentials;
    use crate::api::ssr::Cx;
    use crate::auth::Role;
    use crate::error::AppError;

    /// An event with its timeline; credentials masked unless an admin
    /// asks to `reveal` them (audit-logged).
    pub async fn event_detail(cx: &Cx, id: i64, reveal: bool) -> Result<EventDetail, AppError> {
        cx.require(Role::Viewer)?;
        let credentials = |source: &str| cx.operations.credentials(source);
        let masking = masking(cx, "event", id, reveal, &credentials).await?;
        event(&cx.reads.pool(), id, masking)
            .await
            .map_err(AppError::database)?
            .ok_or_else(|| AppError::not_found("event"))
    }

    /// One stored delivery, payload and headers as the page shows them.
    pub async fn delivery_detail(
        cx: &Cx,
        id: i64,
        reveal: bool,
    ) -> Result<DeliveryDetail, AppError> {
        cx.require(Role::Viewer)?;
        let credentials = |source: &str| cx.operations.credentials(source);
        let masking = masking(cx, "delivery", id, reveal, &credentials).await?;
        delivery(&cx.reads.pool(), id, masking)
            .await
            .map_err(AppError::database)?
            .ok_or_else(|| AppError::not_found("delivery"))
    }

    /// Dead letters, most recently dead first; `before`: the keyset cursor.
    pub async fn dead_letters(
        cx: &Cx,
        filter: &crate::api::actions::DeadFilter,
        before: Option<(i64, i64)>,
    ) -> Result<DeadLetterPage, AppError> {
        cx.require(Role::Viewer)?;
        dead(&cx.reads.pool(), &filter.bounds()?, before)
            .await
            .map_err(AppError::database)
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
    ) -> Result<Option<CredentialsOf<'a>>, AppError> {
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
        let row = sqlx::query!(
            r#"SELECT d.id,
                      to_char(d.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "received_at!",
                      d.source, d.event_id, d.idem_key, d.outcome, d.http_status, d.reject_reason,
                      d.reject_kind, d.ack_micros, d.redelivery_of,
                      d.verified, d.verification, d.method, d.query, d.content_type,
                      d.headers, d.body, d.body_size, d.remote_addr, d.truncated, d.body_sha256
               FROM deliveries d WHERE d.id = $1"#,
            id
        )
        .fetch_optional(pool)
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
                if let Some(m) = query.as_deref().and_then(crate::api::mask::query) {
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
                      to_char(d.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "received_at!",
                      d.source, d.event_id, d.idem_key, d.outcome, d.http_status, d.reject_reason,
                      d.reject_kind, d.ack_micros, d.redelivery_of
               FROM deliveries d WHERE d.event_id = $1 ORDER BY d.id LIMIT $2"#,
            id,
            TIMELINE_DELIVERIES
        )
        .fetch_all(pool)
        .await?;
        let deliveries_total: i64 = sqlx::query_scalar!(
            r#"SELECT count(*) AS "n!" FROM deliveries WHERE event_id = $1"#,
            id
        )
        .fetch_one(pool)
        .await?;
        let dispatches = sqlx::query_as!(
            DispatchRow,
            r#"SELECT destination, state,
                      to_char(state_changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "state_changed_at!",
                      attempt_count,
                      CASE WHEN state IN ('queued', 'retrying')
                           THEN to_char(next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') END
                          AS next_attempt_at,
                      last_error, dead_reason,
                      to_char(completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS completed_at,
                      ordering_key
               FROM dispatches WHERE event_id = $1 ORDER BY destination"#,
            id
        )
        .fetch_all(pool)
        .await?;
        let attempts = sqlx::query_as!(
            AttemptRow,
            r#"SELECT id, destination, number, worker,
                      to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "started_at!",
                      to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS finished_at,
                      status, latency_ms, response_excerpt, error,
                      CASE WHEN result = 'retrying'
                           THEN to_char(next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') END
                          AS next_attempt_at,
                      result
               FROM attempts WHERE event_id = $1 ORDER BY id"#,
            id
        )
        .fetch_all(pool)
        .await?;
        let first_delivery = match event.first_delivery_id {
            Some(first) => delivery(pool, first, masking).await?,
            None => None,
        };
        let deliveries_shown = deliveries.len();
        // Times are fixed-width UTC strings: they sort as text.
        let mut timeline: Vec<(String, i32, TimelineEntry)> = deliveries
            .into_iter()
            .map(|d| (d.received_at.clone(), 0, TimelineEntry::Delivery(d)))
            .chain(
                attempts
                    .into_iter()
                    .map(|a| (a.started_at.clone(), 1, TimelineEntry::Attempt(a))),
            )
            .collect();
        timeline.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
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
    async fn summaries(
        pool: &PgPool,
        q: &EventQuery<'_>,
    ) -> Result<Vec<EventSummary>, sqlx::Error> {
        sqlx::query_as!(
            EventSummary,
            r#"SELECT id AS "id!", source AS "source!", idem_key AS "idem_key!", state AS "state!",
                      to_char(state_changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "state_changed_at!",
                      to_char(first_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "first_seen_at!",
                      to_char(last_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "last_seen_at!",
                      receive_count AS "receive_count!", attempt_count AS "attempt_count!",
                      to_char(coalesce(next_attempt_at, state_changed_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "next_attempt_at!",
                      last_error, dead_reason,
                      to_char(completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS completed_at,
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
    ) -> Result<EventPage, AppError> {
        cx.require(Role::Viewer)?;
        let text = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
        let time = |field: &str, v: &str| {
            text(v)
                .map(|v| crate::api::ssr::utc_time(field, &v).map_err(AppError::BadRequest))
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
                return Err(AppError::BadRequest(format!(
                    "outcome: expected in_progress or one of {}, got {other:?}",
                    EVENT_STATES.join(", ")
                )))
            }
        };
        let (source, key) = (text(&filter.source), text(&filter.key));
        let (since, until) = (time("since", &filter.since)?, time("until", &filter.until)?);
        let rows = summaries(
            &cx.reads.pool(),
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
        .await
        .map_err(AppError::database)?;
        let (rows, older) = crate::api::ssr::page(rows, EVENT_PAGE_SIZE, |r| r.id);
        Ok(EventPage { rows, older })
    }

    async fn dead(
        pool: &PgPool,
        filter: &crate::api::actions::ssr::DeadBounds,
        before: Option<(i64, i64)>,
    ) -> Result<DeadLetterPage, sqlx::Error> {
        let rows = sqlx::query_as!(
            DeadLetter,
            r#"SELECT e.id,
                      ARRAY(SELECT q.destination FROM dispatches q
                            WHERE q.event_id = e.id AND q.state = 'dead'
                            ORDER BY q.destination) AS "destinations!",
                      e.source, e.idem_key, p.dead_reason, p.attempt_count, e.receive_count,
                      to_char(e.first_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "first_seen_at!",
                      to_char(p.state_changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS "died_at!",
                      (extract(epoch FROM p.state_changed_at) * 1000000)::bigint AS "died_micros!",
                      e.first_delivery_id
               FROM dispatches p JOIN events e ON e.id = p.event_id
               WHERE p.state = 'dead' AND ($1::text IS NULL OR p.source = $1)
                 -- An event once, at its latest death: pages stay keyed by event.
                 -- (At one destination, an event has one dispatch.)
                 AND ($8::text IS NOT NULL OR NOT EXISTS (SELECT 1 FROM dispatches q
                                 WHERE q.event_id = p.event_id AND q.state = 'dead'
                                   AND (q.state_changed_at, q.destination)
                                       > (p.state_changed_at, p.destination)))
                 AND ($2::bigint IS NULL
                      OR (p.state_changed_at, p.event_id) < (to_timestamp($2 / 1000000.0), $3))
                 AND ($5::text IS NULL OR p.state_changed_at >= $5::text::timestamptz)
                 AND ($6::text IS NULL OR p.state_changed_at < $6::text::timestamptz)
                 AND ($7::text IS NULL OR p.dead_reason ILIKE '%' || $7 || '%')
                 AND ($8::text IS NULL OR p.destination = $8)
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
        let (rows, older) = crate::api::ssr::page(rows, DEAD_PAGE_SIZE, |r| (r.died_micros, r.id));
        Ok(DeadLetterPage { rows, older })
    }
}
