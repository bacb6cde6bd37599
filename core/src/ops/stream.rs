//! Following new events as they are claimed (issue 38, spec section 10):
//! `GET /api/v1/events/stream` and so `replaysafe listen`. Read-only: what a
//! listener's handler answers never reaches an event's state.
//!
//! The order is the order claims committed in, by `events.claim_xid` (the
//! claiming transaction, see migration 32): every transaction below a
//! snapshot's xmin has ended, so the events claimed below it are final and
//! a cursor `(claim_xid, id)` that only moves up to that horizon never
//! skips an event whose claim committed after a later one.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use replaysafe_types::auth::{Caller, Role, Via};
use replaysafe_types::stream::{StreamStart, StreamedEvent};
use replaysafe_types::time::Time;
use sqlx::PgPool;

use super::{Cx, OpError};

/// Streams one token may hold open at once.
pub const STREAMS_PER_TOKEN: usize = 4;
/// Events read in one go: a stream that fell behind catches up in steps.
pub const BATCH: i64 = 200;

/// Where a stream goes on from: every event claimed before `(xid, id)` was
/// passed (sent, or left out by the filter). Written `{xid}-{id}`: the
/// stream's `Last-Event-ID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub xid: i64,
    pub id: i64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.xid, self.id)
    }
}

impl FromStr for Cursor {
    type Err = OpError;

    fn from_str(text: &str) -> Result<Self, OpError> {
        let bad = || {
            OpError::BadRequest(format!(
                "Last-Event-ID {text:?}: expected the id of an event this stream sent \
                 (two numbers joined by '-')"
            ))
        };
        let (xid, id) = text.trim().split_once('-').ok_or_else(bad)?;
        let number = |n: &str| n.parse::<i64>().ok().filter(|n| *n >= 0);
        Ok(Cursor {
            xid: number(xid).ok_or_else(bad)?,
            id: number(id).ok_or_else(bad)?,
        })
    }
}

/// What a stream follows.
#[derive(Clone, Debug)]
pub struct Filter {
    /// Empty: every source.
    pub sources: Vec<String>,
    pub event_type: Option<(String, globset::GlobMatcher)>,
    /// Bodies masked as the dashboard shows them (everyone but an admin).
    pub masked: bool,
}

impl Filter {
    fn takes(&self, event_type: Option<&str>) -> bool {
        match &self.event_type {
            None => true,
            Some((_, glob)) => event_type.is_some_and(|t| glob.is_match(t)),
        }
    }
}

/// Opens a stream for the caller (viewer or above; bodies unmasked for an
/// admin only): checks what it asks for, notes it in the audit log, and
/// answers where it starts (`resume`, or the events claimed from now on).
pub async fn open(
    cx: &Cx,
    sources: Vec<String>,
    event_type: Option<&str>,
    resume: Option<&str>,
) -> Result<(StreamStart, Filter, Cursor), OpError> {
    let caller = cx.require(Role::Viewer)?;
    for slug in &sources {
        if cx.services.config.source(slug).is_none() {
            return Err(OpError::NotFound(format!(
                "no source {slug:?} is configured"
            )));
        }
    }
    let event_type = match event_type.map(str::trim).filter(|t| !t.is_empty()) {
        None => None,
        Some(pattern) => {
            let glob = crate::config::destination::type_glob(pattern)
                .map_err(|e| OpError::BadRequest(format!("type {pattern:?}: {e}")))?;
            Some((pattern.to_owned(), glob.compile_matcher()))
        }
    };
    let filter = Filter {
        sources,
        event_type,
        masked: !caller.can(Role::Admin),
    };
    let cursor = match resume {
        Some(text) => text.parse()?,
        None => Cursor {
            xid: horizon(&cx.services.pool).await?,
            id: 0,
        },
    };
    let start = StreamStart {
        sources: filter.sources.clone(),
        event_type: filter.event_type.as_ref().map(|(p, _)| p.clone()),
        masked: filter.masked,
        cursor: cursor.to_string(),
    };
    cx.audit(
        caller,
        "events.stream",
        None,
        "started",
        serde_json::json!({
            "sources": start.sources,
            "type": start.event_type,
            "masked": start.masked,
            "from": start.cursor,
            "resumed": resume.is_some(),
        }),
    )
    .await?;
    Ok((start, filter, cursor))
}

/// The oldest transaction still running (or the next one, when none is):
/// every claim below it has committed or rolled back.
async fn horizon(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS "xmin!""#
    )
    .fetch_one(pool)
    .await
}

/// What one read found: each event with the cursor just past it, and the
/// cursor past everything read (events the filter left out included).
pub struct Batch {
    pub events: Vec<(Cursor, StreamedEvent)>,
    pub cursor: Cursor,
    /// The batch was full: read again at once.
    pub more: bool,
}

/// The events past `cursor` whose claims are final, up to `BATCH`, in the
/// order their claims committed.
pub async fn next(
    pool: &PgPool,
    config: &crate::config::Config,
    filter: &Filter,
    cursor: Cursor,
) -> Result<Batch, sqlx::Error> {
    // One statement: the rows and the horizon come from the same snapshot.
    let rows = sqlx::query!(
        r#"WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
           batch AS (
               SELECT e.id, e.claim_xid, e.source, e.idem_key, e.event_type, e.first_seen_at,
                      e.first_delivery_id
               FROM events e, horizon h
               WHERE e.claim_xid IS NOT NULL
                 AND (e.claim_xid, e.id) > ($1::bigint::text::xid8, $2::bigint)
                 AND e.claim_xid < h.xmin
                 AND (cardinality($3::text[]) = 0 OR e.source = ANY($3))
               ORDER BY e.claim_xid, e.id
               LIMIT $4)
           SELECT h.xmin::text::bigint AS "horizon!",
                  b.id AS "id?", b.claim_xid::text::bigint AS "xid?", b.source AS "source?",
                  b.idem_key AS "idem_key?", b.event_type,
                  b.first_seen_at AS "received_at?: Time",
                  d.body AS "body?", d.content_type AS "content_type?", d.headers AS "headers?"
           FROM horizon h
           LEFT JOIN batch b ON true
           -- As the workers read it: by id, in the days since the event was first seen.
           LEFT JOIN LATERAL (
               SELECT d.body, d.content_type, d.headers FROM deliveries d
               WHERE d.id = b.first_delivery_id AND d.received_at >= b.first_seen_at
               LIMIT 1
           ) d ON true
           ORDER BY b.claim_xid, b.id"#,
        cursor.xid,
        cursor.id,
        &filter.sources,
        BATCH
    )
    .fetch_all(pool)
    .await?;
    let horizon = rows.first().map_or(cursor.xid, |r| r.horizon);
    let more = rows.iter().filter(|r| r.id.is_some()).count() as i64 >= BATCH;
    let mut events = Vec::new();
    let mut last = None;
    for row in rows {
        let (Some(id), Some(xid), Some(source), Some(key), Some(received_at)) =
            (row.id, row.xid, row.source, row.idem_key, row.received_at)
        else {
            continue;
        };
        let at = Cursor { xid, id };
        last = Some(at);
        // Kept at the claim only where a destination's filter needed it.
        let event_type = row
            .event_type
            .or_else(|| read_type(config, &source, row.headers.as_ref(), row.body.as_deref()?));
        if !filter.takes(event_type.as_deref()) {
            continue;
        }
        let stored = Stored {
            id,
            source,
            key,
            event_type,
            received_at,
            body: row.body,
            content_type: row.content_type,
            headers: row.headers,
        };
        events.push((at, streamed(config, filter.masked, stored)));
    }
    // A full batch stops at its last row; otherwise everything below the
    // horizon has been read.
    let cursor = match last {
        Some(last) if more => last,
        _ => cursor.max(Cursor {
            xid: horizon,
            id: 0,
        }),
    };
    Ok(Batch {
        events,
        cursor,
        more,
    })
}

struct Stored {
    id: i64,
    source: String,
    key: String,
    event_type: Option<String>,
    received_at: Time,
    body: Option<Vec<u8>>,
    content_type: Option<String>,
    headers: Option<serde_json::Value>,
}

/// The event's type as its provider reads it from the stored request.
fn read_type(
    config: &crate::config::Config,
    source: &str,
    headers: Option<&serde_json::Value>,
    body: &[u8],
) -> Option<String> {
    let provider = config.source(source)?.provider;
    let headers = headers.map_or_else(Vec::new, crate::providers::Inbound::stored_headers);
    provider.event_type(&crate::providers::Inbound {
        query: None,
        headers,
        body: body.to_vec(),
        remote_addr: None,
    })
}

/// An event as its destinations receive it (`processing::forward`), its
/// body masked when `masked`.
fn streamed(config: &crate::config::Config, masked: bool, stored: Stored) -> StreamedEvent {
    let headers = match config.source(&stored.source) {
        Some(source) => {
            crate::processing::forward::event_headers(source.provider, stored.headers.as_ref())
        }
        None => Vec::new(),
    };
    let body = stored.body.map(|body| {
        if masked {
            super::mask::Credentials::of(config, &stored.source)
                .body(&body)
                .unwrap_or(body)
        } else {
            body
        }
    });
    StreamedEvent {
        event_id: stored.id,
        idempotency_key: format!("{}:{}", stored.source, stored.key),
        source: stored.source,
        key: stored.key,
        event_type: stored.event_type,
        received_at: stored.received_at,
        content_type: stored.content_type,
        headers,
        body_base64: body.map(|b| base64::engine::general_purpose::STANDARD.encode(b)),
        masked,
    }
}

/// One stored event as its destinations receive it, for `replaysafe
/// prove` (viewer; masked as the dashboard shows it unless the caller is
/// an admin, whose read of the whole body is audit-logged).
pub async fn forwarded_event(cx: &Cx, id: i64) -> Result<StreamedEvent, OpError> {
    let caller = cx.require(Role::Viewer)?;
    let masked = !caller.can(Role::Admin);
    let event = read_event(&cx.services.pool, &cx.services.config, id, masked)
        .await?
        .ok_or_else(|| OpError::not_found("event"))?;
    if !masked {
        cx.audit(
            caller,
            "event.export",
            Some(&id.to_string()),
            "succeeded",
            serde_json::json!({ "source": event.source }),
        )
        .await?;
    }
    Ok(event)
}

/// One stored event as its destinations receive it, read as is (the CLI
/// on the database's own machine, whoever may read the database).
pub async fn read_event(
    pool: &PgPool,
    config: &crate::config::Config,
    id: i64,
    masked: bool,
) -> Result<Option<StreamedEvent>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT e.id, e.source, e.idem_key, e.event_type,
                  e.first_seen_at AS "received_at: Time",
                  d.body AS "body?", d.content_type AS "content_type?", d.headers AS "headers?"
           FROM events e
           LEFT JOIN LATERAL (
               SELECT d.body, d.content_type, d.headers FROM deliveries d
               WHERE d.id = e.first_delivery_id AND d.received_at >= e.first_seen_at
               LIMIT 1
           ) d ON true
           WHERE e.id = $1"#,
        id
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|row| {
        let event_type = row.event_type.or_else(|| {
            read_type(
                config,
                &row.source,
                row.headers.as_ref(),
                row.body.as_deref()?,
            )
        });
        let stored = Stored {
            id: row.id,
            source: row.source,
            key: row.idem_key,
            event_type,
            received_at: row.received_at,
            body: row.body,
            content_type: row.content_type,
            headers: row.headers,
        };
        streamed(config, masked, stored)
    }))
}

/// Whether the caller may still follow the stream, and whether bodies
/// must now be masked (a token revoked or demoted since it started: the
/// stream ends). None: it may not.
pub async fn still_allowed(pool: &PgPool, caller: &Caller) -> Result<Option<bool>, sqlx::Error> {
    let role = match caller.via {
        Via::Token => crate::accounts::tokens::live_role(pool, caller.id).await?,
        Via::Session => sqlx::query_scalar!(
            "SELECT role FROM users WHERE id = $1 AND NOT disabled",
            caller.id
        )
        .fetch_optional(pool)
        .await?
        .as_deref()
        .and_then(Role::parse),
    };
    Ok(role
        .filter(|role| *role >= Role::Viewer)
        .map(|role| role < Role::Admin))
}
