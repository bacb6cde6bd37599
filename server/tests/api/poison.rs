//! Poison events (issue 35, item 2): an event the application keeps
//! refusing with 5xx must neither open its destination's breaker by itself
//! nor be the probe that keeps it open; on an ordered destination the key
//! it holds is shown as blocked (page, API, metric), and an operator can
//! dead-letter it by hand (API, CLI, dashboard; audit-logged) so the key's
//! later events go on.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use replaysafe_core::db::MIGRATOR;
use replaysafe_core::processing::retry::RetryPolicy;
use serde_json::Value;
use sqlx::PgPool;

use crate::helpers::{make_token, run_cli, spawn_app, state_of, test_config, TestApp};

/// An application that answers 500 to the events whose keys it was told to
/// refuse and 200 to the rest, recording each request's key and status.
#[derive(Clone)]
struct Refusing {
    url: String,
    seen: Arc<Mutex<Vec<(String, u16)>>>,
}

impl Refusing {
    async fn start(refused: &[&str]) -> Self {
        let refused: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(
            refused.iter().map(|k| format!("gh:{k}")).collect(),
        ));
        let seen: Arc<Mutex<Vec<(String, u16)>>> = Default::default();
        let (r, s) = (refused, seen.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap| {
                let (r, s) = (r.clone(), s.clone());
                async move {
                    let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                    let status = if r.lock().unwrap().contains(&key) {
                        500
                    } else {
                        200
                    };
                    s.lock().unwrap().push((key, status));
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, seen }
    }

    fn seen(&self) -> Vec<(String, u16)> {
        self.seen.lock().unwrap().clone()
    }

    /// The keys answered 200, in order.
    fn completed(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter(|(_, s)| *s == 200)
            .map(|(k, _)| k)
            .collect()
    }
}

async fn deliver(app: &TestApp, key: &str, body: &str) {
    let status = app.github_delivery("gh", key, body, b"gh-secret").await;
    assert_eq!(status, 200, "delivery {key}");
}

async fn breaker(pool: &PgPool, destination: &str) -> Option<String> {
    sqlx::query_scalar("SELECT breaker FROM destination_gates WHERE destination = $1")
        .bind(destination)
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn event_id(pool: &PgPool, key: &str) -> i64 {
    sqlx::query_scalar("SELECT id FROM events WHERE idem_key = $1")
        .bind(key)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn config(url: &str, extra: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
max_attempts = 6

[[source.destination]]
name = "app"
url = "{url}"
breaker_failures = 3
breaker_cooldown_secs = 60
{extra}
"#
        ),
        &[],
    )
}

/// One event failing six times in a row is one failure to the breaker
/// (threshold 3): it stays closed, and the next events go at once. Three
/// different events failing still open it: that is an outage.
#[sqlx::test(migrator = "MIGRATOR")]
async fn one_events_failures_count_once_toward_its_destinations_breaker(pool: PgPool) {
    let app_side = Refusing::start(&["poison", "p-1", "p-2", "p-3"]).await;
    let app = spawn_app(pool.clone(), config(&app_side.url, "")).await;
    deliver(&app, "poison", r#"{"n":0}"#).await;
    app.drain().await;
    assert_eq!(
        state_of(&pool, "poison").await,
        "dead",
        "{:?}",
        app_side.seen()
    );
    assert_eq!(app_side.seen().len(), 6, "every attempt was sent");
    assert_ne!(
        breaker(&pool, "app").await.as_deref(),
        Some("open"),
        "one poison event opened the breaker"
    );
    deliver(&app, "fine", r#"{"n":1}"#).await;
    app.drain().await;
    assert_eq!(app_side.completed(), ["gh:fine"]);

    for (i, key) in ["p-1", "p-2", "p-3"].into_iter().enumerate() {
        deliver(&app, key, &format!(r#"{{"n":{}}}"#, i + 2)).await;
    }
    app.workers().run_once("w").await.unwrap();
    assert_eq!(
        breaker(&pool, "app").await.as_deref(),
        Some("open"),
        "three events failing is an outage"
    );
}

/// A breaker whose cool-down ended is probed with the due dispatch that
/// failed least, not the oldest (the poison one, failed five times): the
/// probe succeeds and the breaker closes.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_probe_sends_the_dispatch_that_failed_least(pool: PgPool) {
    let app_side = Refusing::start(&["poison"]).await;
    let app = spawn_app(pool.clone(), config(&app_side.url, "")).await;
    sqlx::query(
        "INSERT INTO destination_gates (source, destination, breaker, opened_by_hand)
         VALUES ('gh', 'app', 'open', true)",
    )
    .execute(&pool)
    .await
    .unwrap();
    deliver(&app, "poison", r#"{"n":0}"#).await;
    deliver(&app, "fresh", r#"{"n":1}"#).await;
    // The poison one failed five times and is the longest due.
    sqlx::query(
        "UPDATE dispatches SET state = 'retrying', attempt_count = 5,
             next_attempt_at = now() - interval '1 hour'
         WHERE event_id = (SELECT id FROM events WHERE idem_key = 'poison')",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE destination_gates SET opened_by_hand = false, retry_at = now() - interval '1 second',
             cooldown_secs = 60",
    )
    .execute(&pool)
    .await
    .unwrap();
    let workers = app.workers();
    let mut probes = tokio::task::JoinSet::new();
    workers.probe_breakers(&mut probes).await;
    while probes.join_next().await.is_some() {}
    assert_eq!(
        app_side.seen(),
        [("gh:fresh".to_owned(), 200)],
        "the probe sent the event that failed least"
    );
    assert_eq!(breaker(&pool, "app").await.as_deref(), Some("closed"));
}

/// An ordered destination's key held by an event the application refuses:
/// the key is shown as blocked (API, overview, metric, event page), a
/// viewer may not dead-letter it, an operator may (with a reason, not
/// while nothing waits), by the API, the CLI or the dashboard, each
/// audit-logged; then the key's later events go, in order.
#[sqlx::test(migrator = "MIGRATOR")]
async fn an_operator_dead_letters_the_event_that_blocks_an_ordered_key(pool: PgPool) {
    let app_side = Refusing::start(&["o-1", "q-1"]).await;
    let app = spawn_app(
        pool.clone(),
        config(
            &app_side.url,
            "ordering = \"per_key\"\nordering_key = \"/issue/number\"",
        ),
    )
    .await;
    let mut workers = app.workers();
    // A failed attempt is retried in a minute: the key stays held meanwhile.
    workers.policy = Arc::new(RetryPolicy {
        schedule: vec![Duration::from_secs(60)],
        jitter: 0.0,
        min_retry_after: Duration::ZERO,
        max_retry_after: Duration::from_secs(3600),
    });
    for (key, issue) in [
        ("o-1", 7),
        ("o-2", 7),
        ("o-3", 7),
        ("x-1", 8),
        ("q-1", 9),
        ("q-2", 9),
    ] {
        // Each its own body: GitHub's replay guard takes equal ones for one.
        let body = format!(r#"{{"issue":{{"number":{issue}}},"key":"{key}"}}"#);
        deliver(&app, key, &body).await;
    }
    // An ordered destination is leased through its gate, a round at a time.
    for _ in 0..3 {
        workers.pace_once("w").await.unwrap();
    }
    assert_eq!(app_side.completed(), ["gh:x-1"], "{:?}", app_side.seen());
    let (o1, o2) = (event_id(&pool, "o-1").await, event_id(&pool, "o-2").await);

    let viewer = make_token(&pool, "viewer", "viewer", None).await;
    let operator = make_token(&pool, "operator", "operator", None).await;
    let get = |path: &'static str| {
        let (app, viewer) = (&app, &viewer);
        async move {
            let r = app
                .client
                .get(app.url(path))
                .bearer_auth(viewer)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{path}");
            r.json::<Value>().await.unwrap()
        }
    };
    let blocked = get("/api/v1/blocked-keys").await;
    let rows = blocked.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{blocked}");
    assert_eq!(
        (
            &rows[0]["destination"],
            &rows[0]["ordering_key"],
            &rows[0]["event_id"],
            &rows[0]["waiting"]
        ),
        (
            &Value::from("app"),
            &Value::from("7"),
            &Value::from(o1),
            &Value::from(2)
        ),
        "{blocked}"
    );
    assert_eq!(rows[0]["attempt_count"], 1);
    assert_eq!(
        (&rows[1]["ordering_key"], &rows[1]["waiting"]),
        (&Value::from("9"), &Value::from(1))
    );
    let overview = get("/api/v1/overview").await;
    assert_eq!(
        overview["backlog"]["by_destination"][0]["blocked_keys"], 2,
        "{overview}"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("replaysafe_ordering_blocked_keys{source=\"gh\",destination=\"app\"} 2"),
        "{metrics}"
    );
    let holder = get_event(&app, &viewer, o1).await;
    assert_eq!(holder["dispatches"][0]["waiting_behind"], 2, "{holder}");
    let behind = get_event(&app, &viewer, o2).await;
    assert_eq!(behind["dispatches"][0]["held_by"], o1, "{behind}");

    let dead_letter = |token: &str, id: i64, body: Value| {
        let (app, token) = (&app, token.to_owned());
        async move {
            let r = app
                .client
                .post(app.url(&format!("/api/v1/events/{id}/dead-letter")))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let reason = serde_json::json!({"reason": "the application cannot parse it"});
    assert_eq!(dead_letter(&viewer, o1, reason.clone()).await.0, 403);
    let (status, body) = dead_letter(&operator, o1, serde_json::json!({"reason": "  "})).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = dead_letter(&operator, o2, reason.clone()).await;
    assert_eq!(
        (status, &body["destinations"]),
        (200, &serde_json::json!(["app"])),
        "{body}"
    );
    // o-2 is dead now; o-1 still holds the key (an event waiting behind it
    // may be given up on too), then goes by the CLI.
    let cli = run_cli(
        &app,
        &operator,
        &[
            "events",
            "dead-letter",
            &o1.to_string(),
            "--reason",
            "poison: cannot be parsed",
        ],
    )
    .await;
    assert_eq!(
        cli.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(
        String::from_utf8_lossy(&cli.stdout).contains("dead-lettered"),
        "{}",
        String::from_utf8_lossy(&cli.stdout)
    );
    let (status, body) = dead_letter(&operator, o1, reason.clone()).await;
    assert_eq!(status, 409, "nothing waits any more: {body}");
    let again = run_cli(
        &app,
        &operator,
        &[
            "events",
            "dead-letter",
            &o1.to_string(),
            "--reason",
            "again",
        ],
    )
    .await;
    assert_eq!(again.status.code(), Some(3), "refused: exit 3");
    let dead_reason: String =
        sqlx::query_scalar("SELECT dead_reason FROM dispatches WHERE event_id = $1")
            .bind(o1)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        dead_reason.contains("by hand") && dead_reason.contains("poison: cannot be parsed"),
        "{dead_reason}"
    );
    // The dashboard's button: the same operation (here as an admin).
    let q1 = event_id(&pool, "q-1").await;
    let (status, body) = app
        .server_fn(
            "dead-letter",
            &format!("event_id={q1}&reason=stuck+on+a+bad+payload"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let audited: Vec<(String, String)> = sqlx::query_as(
        "SELECT target, outcome FROM audit_log WHERE action = 'dead_letter' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(audited.len(), 5, "refusals are audited too: {audited:?}");
    assert_eq!(
        audited.iter().filter(|(_, o)| o == "dead-lettered").count(),
        3,
        "{audited:?}"
    );
    assert!(audited[4].0.contains("q-1"), "{audited:?}");

    // The keys go on: o-3 (o-2 was given up on too) and q-2.
    workers.pace_once("w").await.unwrap();
    workers.pace_once("w").await.unwrap();
    let mut done = app_side.completed();
    done.sort();
    assert_eq!(done, ["gh:o-3", "gh:q-2", "gh:x-1"]);
    assert_eq!(get("/api/v1/blocked-keys").await, serde_json::json!([]));
    assert_eq!(state_of(&pool, "o-1").await, "dead");
}

async fn get_event(app: &TestApp, token: &str, id: i64) -> Value {
    let r = app
        .client
        .get(app.url(&format!("/api/v1/events/{id}")))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}
