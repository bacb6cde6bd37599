//! Reconciliation (issue 34) against a local stand-in for Stripe's
//! `GET /v1/events`, written from its documented shape: events a receiver
//! outage lost are recovered from the list and forwarded exactly once, a
//! provider's late retry and a recovery racing on one id make one dedup
//! decision, many pages are walked, a dry run claims nothing, and bad
//! credentials or a 429 storm end in a clear verdict.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use replaysafe_core::db::MIGRATOR;
use replaysafe_core::reconcile::{self, Limits};
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::helpers::{
    self, hmac_hex, make_token, run_cli, sdk_list, spawn_app, test_config, Destination, TestApp,
};

const SIGNING: &str = "whsec_reconcile_test";
const API_KEY: &str = "sk_test_standin_key_never_shown";

/// Stripe's event list as its API answers it, with faults to script.
#[derive(Clone, Default)]
struct StripeStandIn {
    url: String,
    events: Arc<Mutex<Vec<Value>>>,
    /// Answers 429 (Retry-After: 1) to this many requests first.
    throttle: Arc<Mutex<u32>>,
    requests: Arc<Mutex<u32>>,
}

impl StripeStandIn {
    async fn start() -> Self {
        let mut stand_in = Self::default();
        let state = stand_in.clone();
        let app = axum::Router::new().route(
            "/v1/events",
            axum::routing::get(
                move |headers: axum::http::HeaderMap, query: axum::extract::RawQuery| {
                    let state = state.clone();
                    async move { state.list(&headers, query.0.unwrap_or_default()) }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        stand_in.url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        stand_in
    }

    fn list(&self, headers: &axum::http::HeaderMap, query: String) -> axum::response::Response {
        use axum::response::IntoResponse;
        *self.requests.lock().unwrap() += 1;
        if headers.get("authorization").and_then(|v| v.to_str().ok())
            != Some(&format!("Bearer {API_KEY}"))
        {
            let body = json!({"error": {"type": "invalid_request_error",
                "message": "Invalid API Key provided: sk_test_****"}});
            return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
        }
        {
            let mut throttle = self.throttle.lock().unwrap();
            if *throttle > 0 {
                *throttle -= 1;
                let body = json!({"error": {"type": "api_error", "message": "Too many requests"}});
                return (
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "1")],
                    axum::Json(body),
                )
                    .into_response();
            }
        }
        let mut params: HashMap<String, Vec<String>> = HashMap::new();
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            params
                .entry(k.into_owned())
                .or_default()
                .push(v.into_owned());
        }
        let one = |k: &str| params.get(k).and_then(|v| v.first()).cloned();
        let limit: usize = one("limit").and_then(|l| l.parse().ok()).unwrap_or(10);
        let gte: i64 = one("created[gte]")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let lte: i64 = one("created[lte]")
            .and_then(|v| v.parse().ok())
            .unwrap_or(i64::MAX);
        let types = params.get("types[]").cloned().unwrap_or_default();
        let all = self.events.lock().unwrap();
        // References sorted, only the page cloned: the stand-in stays cheap
        // beside what it measures at 10,000 events.
        let mut events: Vec<&Value> = all
            .iter()
            .filter(|e| {
                let created = e["created"].as_i64().unwrap();
                created >= gte
                    && created <= lte
                    && (types.is_empty() || types.iter().any(|t| e["type"] == *t))
            })
            .collect();
        // Newest first, as Stripe lists them.
        events.sort_by_cached_key(|e| {
            std::cmp::Reverse((e["created"].as_i64(), e["id"].as_str().map(str::to_owned)))
        });
        if let Some(after) = one("starting_after") {
            let at = events.iter().position(|e| e["id"] == after.as_str());
            events = at.map(|i| events.split_off(i + 1)).unwrap_or_default();
        }
        let has_more = events.len() > limit;
        let events: Vec<Value> = events.into_iter().take(limit).cloned().collect();
        drop(all);
        axum::Json(
            json!({"object": "list", "url": "/v1/events", "has_more": has_more, "data": events}),
        )
        .into_response()
    }

    /// Adds an event created `ago` before now; returns its body as Stripe
    /// would post it.
    fn add(&self, id: &str, ago: Duration) -> String {
        let created = chrono::Utc::now().timestamp() - ago.as_secs() as i64;
        let event = json!({"id": id, "object": "event", "api_version": "2024-06-20",
            "created": created, "type": "invoice.paid", "livemode": false,
            "pending_webhooks": 1, "data": {"object": {"id": format!("in_{id}"), "object": "invoice"}}});
        let body = event.to_string();
        self.events.lock().unwrap().push(event);
        body
    }
}

fn config(
    stand_in: &StripeStandIn,
    destination: &str,
    api_key: &str,
) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "stripe"
provider = "stripe"
secrets = ["{SIGNING}"]
destination = "{destination}"

[source.reconcile]
api_base = "{}"
api_key = "{api_key}"
every_minutes = 0
"#,
            stand_in.url
        ),
        &[],
    )
}

/// A delivery Stripe would post, signed.
async fn deliver(app: &TestApp, body: &str) -> u16 {
    let t = chrono::Utc::now().timestamp();
    let signature = hmac_hex(SIGNING.as_bytes(), format!("{t}.{body}").as_bytes());
    app.client
        .post(app.url("/hooks/stripe"))
        .header("content-type", "application/json")
        .header("stripe-signature", format!("t={t},v1={signature}"))
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn reconcile_over_api(app: &TestApp, token: &str, body: Value) -> (u16, Value) {
    helpers::reconcile_over_api(app, token, "stripe", body).await
}

fn counts(v: &Value) -> [i64; 5] {
    [
        "seen",
        "already_received",
        "recovered",
        "still_missing",
        "provider_failed_we_completed",
    ]
    .map(|k| v[k].as_i64().unwrap_or(-1))
}

/// Thirty events, ten of them lost to an outage: a run recovers the ten,
/// each is forwarded once; a late provider retry of one is a duplicate; a
/// second run finds nothing missing; a dry run reports without claiming;
/// the CLI shows the same; every run is listed and audit-logged.
#[sqlx::test(migrator = "MIGRATOR")]
async fn events_lost_to_an_outage_are_recovered_and_forwarded_once(pool: PgPool) {
    let stand_in = StripeStandIn::start().await;
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&stand_in, &destination.url, API_KEY)).await;
    let operator = make_token(&pool, "ops", "operator", None).await;
    let mut bodies = Vec::new();
    for i in 0..30 {
        bodies.push(stand_in.add(&format!("evt_{i:03}"), Duration::from_secs(3600 - i * 60)));
    }
    // The receiver got only two in three: the rest never reached it.
    for (i, body) in bodies.iter().enumerate() {
        if i % 3 != 2 {
            assert_eq!(deliver(&app, body).await, 200);
        }
    }
    app.drain().await;
    assert_eq!(destination.count(), 20);

    let (status, verdict) = reconcile_over_api(&app, &operator, json!({})).await;
    assert_eq!(status, 200, "{verdict}");
    assert_eq!(counts(&verdict), [30, 20, 10, 0, 20], "{verdict}");
    assert_eq!(verdict["error"], Value::Null);
    assert_eq!(verdict["dry_run"], false);
    assert!(
        verdict["finished_at"].as_str().unwrap().ends_with('Z'),
        "{verdict}"
    );
    app.drain().await;
    // A provider's late retry of a recovered event: a duplicate.
    assert_eq!(deliver(&app, &bodies[2]).await, 200);
    app.drain().await;
    let mut keys = destination.keys();
    keys.sort();
    let mut expected: Vec<String> = (0..30).map(|i| format!("stripe:evt_{i:03}")).collect();
    expected.sort();
    assert_eq!(keys, expected, "each event forwarded exactly once");
    // Forwarded byte for byte as Stripe listed it.
    let recovered: (String, Option<String>) = sqlx::query_as(
        "SELECT d.verification, d.recovered_from FROM deliveries d
         JOIN events e ON e.first_delivery_id = d.id WHERE e.idem_key = 'evt_002'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        recovered
            .0
            .contains("recovered from the provider's event list"),
        "{recovered:?}"
    );
    assert!(
        recovered.1.as_deref().unwrap().contains("/v1/events"),
        "{recovered:?}"
    );
    assert!(!recovered.1.unwrap().contains(API_KEY));

    let (_, again) = reconcile_over_api(&app, &operator, json!({})).await;
    assert_eq!(counts(&again), [30, 30, 0, 0, 30], "{again}");
    stand_in.add("evt_new_1", Duration::from_secs(600));
    stand_in.add("evt_new_2", Duration::from_secs(900));
    let (_, dry) = reconcile_over_api(&app, &operator, json!({"dry_run": true})).await;
    assert_eq!(counts(&dry), [32, 30, 0, 2, 30], "{dry}");
    let claimed: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(claimed, 30, "a dry run claims nothing");

    // The CLI, as an operator runs it.
    let out = run_cli(
        &app,
        &operator,
        &["reconcile", "--source", "stripe", "--since", "2h", "--json"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counts(&cli), [32, 30, 2, 0, 30], "{cli}");

    let runs: Value = app
        .client
        .get(app.url("/api/v1/sources/stripe/reconcile"))
        .bearer_auth(make_token(&pool, "viewer", "viewer", None).await)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<i64> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "{runs}");
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    let audited: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE action LIKE 'reconcile%' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        audited,
        ["reconcile", "reconcile", "reconcile.dry_run", "reconcile"]
    );
    // A viewer may read, not run.
    let viewer = make_token(&pool, "viewer2", "viewer", None).await;
    assert_eq!(reconcile_over_api(&app, &viewer, json!({})).await.0, 403);
}

/// The same ids posted by the provider and recovered from its list at the
/// same moment: one claim each, one forward each.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_delivery_and_a_recovery_racing_on_one_id_claim_it_once(pool: PgPool) {
    let stand_in = StripeStandIn::start().await;
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&stand_in, &destination.url, API_KEY)).await;
    let n = 60;
    let bodies: Vec<String> = (0..n)
        .map(|i| stand_in.add(&format!("evt_race_{i}"), Duration::from_secs(1800)))
        .collect();
    let source = app.config.sources[0].clone();
    let racing = bodies.iter().map(|body| {
        let (app, source) = (&app, &source);
        async move {
            let inbound = replaysafe_core::receiver::Inbound {
                query: None,
                headers: vec![("content-type".into(), "application/json".into())],
                body: body.as_bytes().to_vec(),
                remote_addr: None,
            };
            let recovered = replaysafe_core::receiver::claim::Recovered {
                run_id: 0,
                from: "the race test".into(),
            };
            let (delivered, recovered) = tokio::join!(
                deliver(app, body),
                replaysafe_core::receiver::accept_recovered(&app.pool, source, &inbound, recovered)
            );
            assert_eq!(delivered, 200);
            recovered.unwrap().outcome
        }
    });
    let outcomes = futures_util::future::join_all(racing).await;
    let claimed: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(claimed, n as i64);
    let claims: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE outcome = 'claimed'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        claims, n as i64,
        "one claim per id, whoever won: {outcomes:?}"
    );
    app.drain().await;
    let keys = destination.keys();
    let unique: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!((keys.len(), unique.len()), (n, n), "each forwarded once");
}

/// A thousand events over ten pages; then bad credentials and a 429 storm
/// end in clear verdicts, the key never shown.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_thousand_events_over_pages_then_bad_credentials_and_throttling(pool: PgPool) {
    let stand_in = StripeStandIn::start().await;
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&stand_in, &destination.url, API_KEY)).await;
    for i in 0..1000 {
        stand_in.add(&format!("evt_many_{i:04}"), Duration::from_secs(7200 + i));
    }
    let source = &app.config.sources[0];
    let verdict = reconcile::run(
        &app.services,
        source,
        None,
        false,
        "test",
        Limits::default(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        (verdict.pages, verdict.seen, verdict.recovered),
        (10, 1000, 1000),
        "{verdict:?}"
    );
    // Throttled twice, then answered: the run waits as told and finishes.
    *stand_in.throttle.lock().unwrap() = 2;
    let verdict = reconcile::run(
        &app.services,
        source,
        None,
        true,
        "test",
        Limits::default(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        (verdict.seen, verdict.already_received, verdict.error),
        (1000, 1000, None)
    );
    // Throttled past the run's retries: stopped, what it found kept.
    *stand_in.throttle.lock().unwrap() = 100;
    let limits = Limits {
        retries: 1,
        ..Limits::default()
    };
    let verdict = reconcile::run(&app.services, source, None, true, "test", limits, None)
        .await
        .unwrap();
    let error = verdict.error.unwrap();
    assert!(error.contains("429"), "{error}");
    *stand_in.throttle.lock().unwrap() = 0;

    let wrong = spawn_app(
        pool.clone(),
        config(&stand_in, &destination.url, "sk_test_wrong_key"),
    )
    .await;
    let verdict = reconcile::run(
        &wrong.services,
        &wrong.config.sources[0],
        None,
        false,
        "test",
        Limits::default(),
        None,
    )
    .await
    .unwrap();
    let error = verdict.error.unwrap();
    assert!(error.contains("refused the credential (401)"), "{error}");
    assert!(!error.contains("sk_test_wrong_key"), "{error}");
    assert_eq!(verdict.pages, 0);
}

/// A provider with no list refuses `[source.reconcile]` with its reason; an
/// API base over plain http elsewhere than this machine is refused.
#[test]
fn the_configuration_refuses_what_cannot_be_reconciled() {
    let parse = |text: &str| {
        replaysafe_core::config::parse_and_validate(None, text, &|_| None)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let shopify = parse(
        "[[source]]\nslug = \"shop\"\nprovider = \"shopify\"\nsecrets = [\"s\"]\n[source.reconcile]\napi_key = \"k\"\n",
    );
    assert!(
        shopify.contains("source[0].reconcile") && shopify.contains("Shopify"),
        "{shopify}"
    );
    let http = parse(
        "[[source]]\nslug = \"st\"\nprovider = \"stripe\"\nsecrets = [\"s\"]\n[source.reconcile]\napi_key = \"k\"\napi_base = \"http://api.example.com\"\n",
    );
    assert!(http.contains("reconcile.api_base"), "{http}");
    let github_key = parse(
        "[[source]]\nslug = \"st\"\nprovider = \"stripe\"\nsecrets = [\"s\"]\n[source.reconcile]\napi_key = \"k\"\ntoken = \"t\"\n",
    );
    assert!(github_key.contains("reconcile.token"), "{github_key}");
    let far = parse(
        "[[source]]\nslug = \"st\"\nprovider = \"stripe\"\nsecrets = [\"s\"]\n[source.reconcile]\napi_key = \"k\"\nlookback_hours = 2000\n",
    );
    assert!(far.contains("reconcile.lookback_hours"), "{far}");
}

/// `every_minutes`: a source whose last scheduled run is that old runs at
/// once; two processes' schedules run it once between them.
#[sqlx::test(migrator = "MIGRATOR")]
async fn the_schedule_runs_a_due_source_once_across_processes(pool: PgPool) {
    let stand_in = StripeStandIn::start().await;
    let destination = Destination::start(vec![]).await;
    let mut config = config(&stand_in, &destination.url, API_KEY);
    let mut reconcile = (*config.sources[0].reconcile.clone().unwrap()).clone();
    reconcile.every = Some(Duration::from_secs(3600));
    config.sources[0].reconcile = Some(std::sync::Arc::new(reconcile));
    let (one, two) = (
        spawn_app(pool.clone(), config.clone()).await,
        spawn_app(pool.clone(), config).await,
    );
    stand_in.add("evt_scheduled", Duration::from_secs(900));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let a = tokio::spawn(reconcile::run_on_schedule(
        one.services.clone(),
        shutdown.clone(),
    ));
    let b = tokio::spawn(reconcile::run_on_schedule(
        two.services.clone(),
        shutdown.clone(),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let recovered: Option<i64> = sqlx::query_scalar(
            "SELECT recovered FROM reconcile_runs WHERE started_by = 'schedule' AND finished_at IS NOT NULL",
        )
        .fetch_optional(&pool)
        .await
        .unwrap();
        if recovered == Some(1) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no scheduled run");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    shutdown.cancel();
    let _ = tokio::join!(a, b);
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM reconcile_runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 1, "one run between the two processes");
}

/// A run dropped midway (its request gone, the server stopping) releases
/// its source's lock with its connection, and the next run marks it
/// interrupted instead of leaving it running forever.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_run_dropped_midway_frees_its_source_and_is_marked_interrupted(pool: PgPool) {
    // A provider that accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hanging = StripeStandIn {
        url: format!("http://{}", silent.local_addr().unwrap()),
        ..Default::default()
    };
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&hanging, &destination.url, API_KEY)).await;
    let services = app.services.clone();
    let source = app.config.sources[0].clone();
    let stuck = tokio::spawn(async move {
        reconcile::run(
            &services,
            &source,
            None,
            false,
            "test",
            Limits::default(),
            None,
        )
        .await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sqlx::query_scalar::<_, i64>("SELECT count(*) FROM reconcile_runs")
        .fetch_one(&pool)
        .await
        .unwrap()
        == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stuck.abort();
    let _ = stuck.await;
    let source = &app.config.sources[0];
    let limits = Limits {
        request_timeout: Duration::from_millis(300),
        retries: 0,
        ..Limits::default()
    };
    // The lock went with the dropped run's connection (closed as it was dropped).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let next = loop {
        match reconcile::run(&app.services, source, None, true, "test", limits, None).await {
            Err(reconcile::NotRun::Busy) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => break other.unwrap(),
        }
    };
    assert!(next.error.unwrap().contains("could not be reached"));
    let first: Option<String> =
        sqlx::query_scalar("SELECT error FROM reconcile_runs ORDER BY id LIMIT 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(first.unwrap().contains("interrupted"));
}

/// The stand-in answers as Stripe does: Stripe's own SDK pages through it
/// (`stripe.events.list`, auto-paginated by `starting_after`) and reads
/// every event, newest first.
#[tokio::test]
async fn stripes_sdk_reads_the_stand_in() {
    let stand_in = StripeStandIn::start().await;
    for i in 0..250 {
        stand_in.add(&format!("evt_sdk_{i:03}"), Duration::from_secs(60 + i));
    }
    let listed = sdk_list(&["stripe", &stand_in.url, API_KEY]).await;
    let ids: Vec<&str> = listed["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..250).map(|i| format!("evt_sdk_{i:03}")).collect();
    assert_eq!(ids, expected, "every event once, newest first");
    assert!(*stand_in.requests.lock().unwrap() >= 3, "over pages");
}

/// The closing figure of issue 34, not a check (figures live in
/// bench/README): how long a run over 10,000 listed events takes when all
/// are missing (each claimed from the list) and when all were received
/// (compared only), with the CLI's verdict as an operator reads it.
/// `cargo test -p replaysafe --test api -- --ignored timing_of_a_run --nocapture`
#[sqlx::test(migrator = "MIGRATOR")]
#[ignore]
async fn timing_of_a_run_over_ten_thousand_events(pool: PgPool) {
    let stand_in = StripeStandIn::start().await;
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&stand_in, &destination.url, API_KEY)).await;
    let operator = make_token(&pool, "ops", "operator", None).await;
    for i in 0..10_000 {
        stand_in.add(&format!("evt_t_{i:05}"), Duration::from_secs(3600 + i));
    }
    for what in ["all missing", "all received"] {
        let started = std::time::Instant::now();
        let out = run_cli(&app, &operator, &["reconcile", "--source", "stripe"]).await;
        println!(
            "{what}: {:.1} s\n{}{}",
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
