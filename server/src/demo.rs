//! The demo destination (`demo_destination = true`, demo config only): an
//! application that answers like real ones do, so the demo shows retries, a
//! success after retries and a dead letter. Each event's fate follows from its
//! `Idempotency-Key`, so repeated runs of the demo behave alike.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use sha2::{Digest, Sha256};

pub const PATH: &str = "/demo/destination";

#[derive(Clone, Default)]
pub struct DemoDestination {
    attempts: Arc<Mutex<HashMap<String, u32>>>,
}

/// What the demo application does with one event, chosen by its key.
#[derive(Debug, PartialEq, Eq)]
pub enum Fate {
    Accept,
    /// Fails with 500 this many times, then accepts.
    FlakyThenAccept(u32),
    /// Answers after a pause longer than most providers would wait.
    Slow(Duration),
    /// Refuses with 400: retrying cannot help, so the event is dead-lettered.
    Refuse,
}

pub fn fate_of(key: &str) -> Fate {
    let digest = Sha256::digest(key.as_bytes());
    match digest[0] % 20 {
        0..=12 => Fate::Accept,
        13..=15 => Fate::FlakyThenAccept(1 + u32::from(digest[1] % 2)),
        16..=17 => Fate::Slow(Duration::from_millis(1500)),
        _ => Fate::Refuse,
    }
}

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
    let attempt = {
        let mut attempts = demo.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let n = attempts.entry(key.to_owned()).or_insert(0);
        *n += 1;
        *n
    };
    match fate_of(key) {
        Fate::Accept => (StatusCode::OK, "processed"),
        Fate::FlakyThenAccept(failures) if attempt <= failures => {
            (StatusCode::INTERNAL_SERVER_ERROR, "demo: temporary failure")
        }
        Fate::FlakyThenAccept(_) => (StatusCode::OK, "processed after retries"),
        Fate::Slow(pause) => {
            tokio::time::sleep(pause).await;
            (StatusCode::OK, "processed slowly")
        }
        Fate::Refuse => (StatusCode::BAD_REQUEST, "demo: this event is invalid"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fate_occurs_among_demo_keys() {
        let fates: Vec<Fate> = (0..200)
            .map(|i| fate_of(&format!("demo:evt_{i}")))
            .collect();
        assert!(fates.contains(&Fate::Accept));
        assert!(fates.contains(&Fate::Refuse));
        assert!(fates.iter().any(|f| matches!(f, Fate::FlakyThenAccept(_))));
        assert!(fates.iter().any(|f| matches!(f, Fate::Slow(_))));
    }
}
