//! The demo destination (`demo_destination = true`, demo config only): an
//! application that answers like real ones do, so the demo shows retries, a
//! success after retries and a dead letter. Events get their fates in the
//! order they first arrive, from a fixed cycle, so any five events in a row
//! show every behaviour.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;

pub const PATH: &str = "/demo/destination";

#[derive(Clone, Default)]
pub struct DemoDestination {
    /// Per key: its fate and the attempts seen so far.
    events: Arc<Mutex<HashMap<String, (Fate, u32)>>>,
}

/// What the demo application does with one event, chosen by its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Accept,
    /// Fails with 500 this many times, then accepts.
    FlakyThenAccept(u32),
    /// Answers after a pause longer than most providers would wait.
    Slow(Duration),
    /// Refuses with 400 the first time: retrying cannot help, so the event
    /// is dead-lettered; the "fixed" application accepts an operator's
    /// re-delivery later.
    RefuseOnce,
}

/// The fates handed out in turn to new events.
pub const CYCLE: [Fate; 5] = [
    Fate::Accept,
    Fate::FlakyThenAccept(2),
    Fate::Slow(Duration::from_millis(1500)),
    Fate::RefuseOnce,
    Fate::Accept,
];

pub fn router() -> Router {
    Router::new()
        .route(PATH, post(receive))
        .with_state(DemoDestination::default())
}

async fn receive(
    State(demo): State<DemoDestination>,
    headers: HeaderMap,
) -> (StatusCode, &'static str) {
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return (StatusCode::BAD_REQUEST, "missing Idempotency-Key");
    };
    let (fate, attempt) = {
        let mut events = demo.events.lock().unwrap_or_else(|p| p.into_inner());
        let next = CYCLE[events.len() % CYCLE.len()];
        let entry = events.entry(key.to_owned()).or_insert((next, 0));
        entry.1 += 1;
        *entry
    };
    match fate {
        Fate::Accept => (StatusCode::OK, "processed"),
        Fate::FlakyThenAccept(failures) if attempt <= failures => {
            (StatusCode::INTERNAL_SERVER_ERROR, "demo: temporary failure")
        }
        Fate::FlakyThenAccept(_) => (StatusCode::OK, "processed after retries"),
        Fate::Slow(pause) => {
            tokio::time::sleep(pause).await;
            (StatusCode::OK, "processed slowly")
        }
        Fate::RefuseOnce if attempt == 1 => {
            (StatusCode::BAD_REQUEST, "demo: this event is invalid")
        }
        Fate::RefuseOnce => (StatusCode::OK, "processed after the fix"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn post(app: &Router, key: &str) -> u16 {
        let request = Request::post(PATH)
            .header("idempotency-key", key)
            .body(Body::empty())
            .unwrap();
        app.clone()
            .oneshot(request)
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    #[tokio::test]
    async fn five_events_show_success_retries_slowness_and_a_dead_letter() {
        let app = router();
        assert_eq!(post(&app, "a").await, 200);
        assert_eq!(post(&app, "b").await, 500);
        assert_eq!(post(&app, "b").await, 500);
        assert_eq!(post(&app, "b").await, 200, "success after retries");
        assert_eq!(post(&app, "c").await, 200, "slowly");
        assert_eq!(post(&app, "d").await, 400, "refused: a dead letter");
        assert_eq!(
            post(&app, "d").await,
            200,
            "an operator's re-delivery succeeds"
        );
        assert_eq!(post(&app, "a").await, 200, "a key keeps its fate");
        assert_eq!(post(&app, "e").await, 200);
    }
}
