//! `GET /api/v1/events/stream` (issue 38, spec section 10): new events as
//! server-sent events, for `replaysafe listen`. Each event's SSE id is the
//! cursor just past it (`ops::stream::Cursor`), so a client that comes back
//! with `Last-Event-ID` goes on with nothing lost or repeated.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use utoipa::IntoParams;

use replaysafe_core::error::OpError;
use replaysafe_core::ops::stream::{self, Cursor, Filter, STREAMS_PER_TOKEN};
use replaysafe_core::ops::Cx;
use replaysafe_types::auth::{Caller, Role, Via};
use replaysafe_types::stream::{StreamStart, StreamedEvent};

use super::{ApiCx, ApiError, ApiQuery, ApiState};

/// How often a stream looks for new events when it has caught up.
const POLL: Duration = Duration::from_millis(250);
/// How often it checks that its token is still live (a revoked token's
/// stream ends within this and a poll).
const RECHECK: Duration = Duration::from_secs(2);
/// A quiet stream's comment line, and its cursor when the filter passed
/// events over since the last one sent.
const QUIET: Duration = Duration::from_secs(15);

/// The streams each caller holds open.
#[derive(Default)]
pub struct Streams(Mutex<HashMap<(bool, i64), usize>>);

impl Streams {
    fn take(self: &Arc<Self>, caller: &Caller) -> Option<Held> {
        let key = (caller.via == Via::Token, caller.id);
        let mut open = self.0.lock().expect("never poisoned");
        let count = open.entry(key).or_default();
        if *count >= STREAMS_PER_TOKEN {
            return None;
        }
        *count += 1;
        Some(Held {
            streams: self.clone(),
            key,
        })
    }
}

/// One of a caller's streams, given back when the stream ends.
struct Held {
    streams: Arc<Streams>,
    key: (bool, i64),
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.streams.0.lock().expect("never poisoned");
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Sources to follow, comma-separated (default: every source)
    source: Option<String>,
    /// Only events whose type matches this glob (`invoice.*`)
    #[serde(rename = "type")]
    #[param(rename = "type")]
    event_type: Option<String>,
    /// Where to go on from, as `Last-Event-ID` (which wins when both are sent)
    after: Option<String>,
}

/// New events as server-sent events, in the order their claims committed
/// (viewer; bodies masked as the dashboard shows them unless the token is
/// an admin's; at most 4 streams per token; audit-logged). The first
/// message (`event: start`) says what is followed; each event is a
/// default message whose data is a `StreamedEvent` and whose id resumes
/// the stream after it (`Last-Event-ID`); `event: end` says why the
/// server ended it. What a listener does with an event never changes it.
#[utoipa::path(get, path = "/events/stream", tag = "events",
    params(StreamParams,
           ("Last-Event-ID" = Option<String>, Header, description = "The id of the last message received: go on after it")),
    responses((status = 200, content_type = "text/event-stream", body = StreamedEvent,
               description = "The stream: `start` (StreamStart), then events, `end` when the server ends it"),
              (status = 404, body = super::ErrorBody)))]
pub async fn stream_events(
    State(api): State<ApiState>,
    ApiCx(cx): ApiCx,
    headers: HeaderMap,
    ApiQuery(p): ApiQuery<StreamParams>,
) -> Result<Response, ApiError> {
    let caller = cx.require(Role::Viewer)?.clone();
    let held = api.streams.take(&caller).ok_or_else(|| {
        OpError::TooManyRequests(format!(
            "a token may hold {STREAMS_PER_TOKEN} streams open at once"
        ))
    })?;
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .filter(|v| !v.trim().is_empty())
        .or(p.after);
    let sources = p
        .source
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let (start, filter, cursor) =
        stream::open(&cx, sources, p.event_type.as_deref(), resume.as_deref()).await?;
    let following = Following {
        cx,
        caller,
        filter,
        cursor,
        said: cursor,
        start: Some(start),
        pending: VecDeque::new(),
        more: true,
        checked: Instant::now(),
        spoke: Instant::now(),
        ending: api.ending.clone(),
        done: false,
        _held: held,
    };
    let events = futures_util::stream::unfold(following, |mut f| async move {
        let event = f.step().await?;
        Some((Ok::<_, Infallible>(event), f))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(QUIET))
        .into_response())
}

struct Following {
    cx: Cx,
    caller: Caller,
    filter: Filter,
    /// Past everything read.
    cursor: Cursor,
    /// The last cursor the client was given.
    said: Cursor,
    start: Option<StreamStart>,
    pending: VecDeque<(Cursor, StreamedEvent)>,
    /// The last read was full: read again without waiting.
    more: bool,
    checked: Instant,
    spoke: Instant,
    ending: CancellationToken,
    done: bool,
    _held: Held,
}

impl Following {
    /// The next message, or None once the stream is over.
    async fn step(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        if let Some(start) = self.start.take() {
            return Some(message("start", &self.cursor, &start));
        }
        loop {
            if let Some((at, event)) = self.pending.pop_front() {
                self.said = at;
                self.spoke = Instant::now();
                return Some(
                    Event::default()
                        .id(at.to_string())
                        .json_data(&event)
                        .expect("serialises"),
                );
            }
            if self.checked.elapsed() >= RECHECK {
                self.checked = Instant::now();
                match stream::still_allowed(&self.cx.services.pool, &self.caller).await {
                    Ok(None) => return Some(self.end("the token was revoked, or lost its role")),
                    // Demoted from admin: bodies are masked from now on.
                    Ok(Some(masked)) => self.filter.masked |= masked,
                    // The database will be back; the stream waits for it.
                    Err(e) => tracing::warn!("event stream: checking the token failed: {e}"),
                }
            }
            if self.said != self.cursor && self.spoke.elapsed() >= QUIET {
                self.said = self.cursor;
                self.spoke = Instant::now();
                return Some(message("position", &self.cursor, &serde_json::json!({})));
            }
            if !self.more {
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = self.ending.cancelled() => {
                        return Some(self.end("the server is shutting down: connect again"));
                    }
                }
            }
            let services = &self.cx.services;
            match stream::next(&services.pool, &services.config, &self.filter, self.cursor).await {
                Ok(batch) => {
                    self.cursor = batch.cursor;
                    self.more = batch.more;
                    self.pending.extend(batch.events);
                }
                Err(e) => {
                    tracing::warn!("event stream: reading new events failed: {e}");
                    self.more = false;
                }
            }
        }
    }

    fn end(&mut self, reason: &str) -> Event {
        self.done = true;
        message("end", &self.said, &serde_json::json!({ "reason": reason }))
    }
}

fn message(name: &str, at: &Cursor, data: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .id(at.to_string())
        .json_data(data)
        .expect("serialises")
}
