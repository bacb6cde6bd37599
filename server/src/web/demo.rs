//! The demo destination (`demo_destination = true`, demo config only): an
//! application that answers like real ones do, so the demo shows retries, a
//! success after retries and a dead letter. Events get their fates in the
//! order they first arrive, from a fixed cycle, so any five events in a row
//! show every behaviour. Beside it, the two applications of the demo's
//! fan-out source: `billing` refuses one event in three with the same
//! `400 invalid currency` (an incident), and takes an operator's re-delivery
//! of it; `crm` is down for 45 s of every 3 minutes from 20 s after start
//! (its breaker opens and heals, its incident resolves once quiet).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;

pub const PATH: &str = "/demo/destination";
pub const BILLING: &str = "/demo/billing";
pub const CRM: &str = "/demo/crm";

/// When crm is down: from `CRM_DOWN_FROM` into each `CRM_CYCLE`, for `CRM_DOWN_FOR`.
const CRM_CYCLE: Duration = Duration::from_secs(180);
const CRM_DOWN_FROM: Duration = Duration::from_secs(20);
const CRM_DOWN_FOR: Duration = Duration::from_secs(45);

#[derive(Clone)]
pub struct DemoDestination {
    /// Per key: its fate and the attempts seen so far.
    events: Arc<Mutex<HashMap<String, (Fate, u32)>>>,
    /// Billing's orders, numbered as they come.
    orders: Arc<std::sync::atomic::AtomicU64>,
    started: std::time::Instant,
}

impl Default for DemoDestination {
    fn default() -> Self {
        Self {
            events: Default::default(),
            orders: Arc::new(std::sync::atomic::AtomicU64::new(40_000)),
            started: std::time::Instant::now(),
        }
    }
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
        .route(BILLING, post(billing))
        .route(CRM, post(crm))
        .with_state(DemoDestination::default())
}

/// Refuses one event in three (by its key) the first time, as an
/// application that has no rate for a currency does; a later attempt (an
/// operator's re-delivery once it is fixed) is taken.
async fn billing(State(demo): State<DemoDestination>, headers: HeaderMap) -> (StatusCode, String) {
    use std::hash::{Hash, Hasher};
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return (StatusCode::BAD_REQUEST, "missing Idempotency-Key".into());
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    let attempt = {
        let mut events = demo.events.lock().unwrap_or_else(|p| p.into_inner());
        let entry = events
            .entry(format!("billing {key}"))
            .or_insert((Fate::Accept, 0));
        entry.1 += 1;
        entry.1
    };
    if hasher.finish().is_multiple_of(3) && attempt == 1 {
        let order = demo
            .orders
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return (
            StatusCode::BAD_REQUEST,
            format!("invalid currency 'XYZ' for order {order}"),
        );
    }
    (StatusCode::OK, "billed".into())
}

/// Down (503) for a while every few minutes, as a dependency can be.
async fn crm(State(demo): State<DemoDestination>) -> (StatusCode, &'static str) {
    if crm_down(demo.started.elapsed()) {
        (StatusCode::SERVICE_UNAVAILABLE, "crm: upstream unavailable")
    } else {
        (StatusCode::OK, "synced")
    }
}

fn crm_down(since_start: Duration) -> bool {
    let into = Duration::from_secs(since_start.as_secs() % CRM_CYCLE.as_secs());
    into >= CRM_DOWN_FROM && into < CRM_DOWN_FROM + CRM_DOWN_FOR
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

    #[test]
    fn crm_is_down_for_45_seconds_of_every_3_minutes_from_20_seconds_on() {
        let at = |s| crm_down(Duration::from_secs(s));
        assert!(!at(0) && !at(19) && at(20) && at(64) && !at(65));
        assert!(!at(199) && at(200) && !at(245));
    }

    #[tokio::test]
    async fn billing_refuses_a_third_once_each_with_the_same_message_and_another_order() {
        let app = router();
        let mut refused = Vec::new();
        for i in 0..60 {
            let key = format!("shop:evt_{i}");
            let request = Request::post(BILLING)
                .header("idempotency-key", &key)
                .body(Body::empty())
                .unwrap();
            let answer = app.clone().oneshot(request).await.unwrap();
            if answer.status() == 400 {
                let body = axum::body::to_bytes(answer.into_body(), 1024)
                    .await
                    .unwrap();
                refused.push((key, String::from_utf8(body.to_vec()).unwrap()));
            }
        }
        assert!((10..=30).contains(&refused.len()), "{}", refused.len());
        assert!(refused
            .iter()
            .all(|(_, m)| m.starts_with("invalid currency 'XYZ' for order ")));
        assert_ne!(refused[0].1, refused[1].1, "each names its order");
        let again = Request::post(BILLING)
            .header("idempotency-key", &refused[0].0)
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            app.clone().oneshot(again).await.unwrap().status(),
            200,
            "a re-delivery is taken"
        );
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
