//! The dashboard's data: rollups that count every row once, the server
//! functions behind each page, and `/metrics`.

use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{spawn_app, test_config, Destination, Scripted, TestApp};

fn config(slug: &str, destination: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "{slug}"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
max_attempts = 2
"#
        ),
        &[],
    )
}

async fn deliver(app: &TestApp, slug: &str, id: &str, body: &str, secret: &[u8]) -> u16 {
    app.github_delivery(slug, id, body, secret).await
}

/// A delivery of event `id` with a body of its own, as GitHub's are (equal
/// signed bodies under new ids are one event's replays).
async fn deliver_event(app: &TestApp, slug: &str, id: &str, secret: &[u8]) -> u16 {
    deliver(app, slug, id, &format!(r#"{{"delivery":"{id}"}}"#), secret).await
}

#[derive(Debug, PartialEq, sqlx::FromRow)]
struct Sums {
    deliveries: i64,
    claimed: i64,
    duplicates: i64,
    rejected: i64,
    bad_signature: i64,
    attempts: i64,
    attempts_failed: i64,
    events_completed: i64,
    events_dead: i64,
    ack_counted: i64,
    e2e_counted: i64,
}

async fn rolled_up(pool: &PgPool) -> Sums {
    sqlx::query_as(
        "SELECT coalesce(sum(deliveries), 0)::bigint AS deliveries,
                coalesce(sum(claimed), 0)::bigint AS claimed,
                coalesce(sum(completed + in_progress + dead), 0)::bigint AS duplicates,
                coalesce(sum(rejected), 0)::bigint AS rejected,
                coalesce(sum(bad_signature), 0)::bigint AS bad_signature,
                coalesce(sum(attempts), 0)::bigint AS attempts,
                coalesce(sum(attempts_failed), 0)::bigint AS attempts_failed,
                coalesce(sum(events_completed), 0)::bigint AS events_completed,
                coalesce(sum(events_dead), 0)::bigint AS events_dead,
                coalesce((SELECT sum(x) FROM minute_stats, unnest(ack_hist) x), 0)::bigint AS ack_counted,
                coalesce((SELECT sum(x) FROM minute_stats, unnest(e2e_hist) x), 0)::bigint AS e2e_counted
         FROM minute_stats",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The same figures counted from the raw rows.
async fn counted(pool: &PgPool) -> Sums {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM deliveries) AS deliveries,
                (SELECT count(*) FROM deliveries WHERE outcome = 'claimed') AS claimed,
                (SELECT count(*) FROM deliveries WHERE outcome IN ('completed', 'in_progress', 'dead')) AS duplicates,
                (SELECT count(*) FROM deliveries WHERE outcome = 'rejected') AS rejected,
                (SELECT count(*) FROM deliveries WHERE outcome = 'rejected' AND http_status = 401) AS bad_signature,
                (SELECT count(*) FROM attempts) AS attempts,
                (SELECT count(*) FROM attempts WHERE status IS NULL OR status >= 300) AS attempts_failed,
                (SELECT count(*) FROM event_summaries WHERE state = 'completed') AS events_completed,
                (SELECT count(*) FROM event_summaries WHERE state = 'dead') AS events_dead,
                (SELECT count(*) FROM deliveries) AS ack_counted,
                (SELECT count(*) FROM event_summaries WHERE state = 'completed') AS e2e_counted",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn rollups_count_every_delivery_and_attempt_exactly_once(pool: PgPool) {
    // Each event: 500 first (a retry), then 200; one event is refused (dead).
    let destination = Destination::start(vec![Scripted::status(500), Scripted::status(400)]).await;
    let app = spawn_app(pool.clone(), config("gh", &destination.url)).await;
    for i in 0..6 {
        assert_eq!(
            deliver_event(&app, "gh", &format!("d-{i}"), b"gh-secret").await,
            200
        );
    }
    for i in 0..3 {
        assert_eq!(
            deliver_event(&app, "gh", &format!("d-{i}"), b"gh-secret").await,
            200
        );
    }
    for i in 0..2 {
        assert_eq!(
            deliver_event(&app, "gh", &format!("bad-{i}"), b"wrong").await,
            401
        );
    }
    // Folding while nothing was forwarded yet, then again after: the
    // attempts arrive in a later fold without counting deliveries twice.
    replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();
    app.drain().await;
    // Several processes fold at once: the progress lock keeps counts exact.
    let folds = (0..4).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            replaysafe_core::jobs::rollup::fold_all(&pool)
                .await
                .unwrap()
        })
    });
    for fold in folds {
        fold.await.unwrap();
    }
    let expected = counted(&pool).await;
    assert_eq!(expected.deliveries, 11);
    assert_eq!(expected.claimed, 6);
    assert_eq!(expected.duplicates, 3);
    assert_eq!(expected.bad_signature, 2);
    assert_eq!(expected.events_dead, 1, "the refused event");
    assert_eq!(expected.attempts, 7, "six events, one retried");
    assert_eq!(rolled_up(&pool).await, expected);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn an_attempt_in_flight_holds_the_fold_back_until_it_finishes(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config("gh", &destination.url)).await;
    deliver_event(&app, "gh", "a", b"gh-secret").await;
    // A worker leases the event (its attempt is open) but has not finished.
    let leased = app.lease_as("stuck-worker", 10).await;
    assert_eq!(leased.len(), 1);
    replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        rolled_up(&pool).await.attempts,
        0,
        "an open attempt is not counted yet"
    );
    let record = replaysafe_core::events::AttemptRecord {
        status: Some(200),
        latency_ms: 5,
        ..Default::default()
    };
    assert!(
        app.finish_as(
            "stuck-worker",
            &leased[0],
            record,
            replaysafe_core::events::Next::Completed
        )
        .await
    );
    replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();
    let sums = rolled_up(&pool).await;
    assert_eq!(
        (sums.attempts, sums.events_completed, sums.e2e_counted),
        (1, 1, 1)
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn the_overview_reports_figures_backlog_and_a_duplicate_storm(pool: PgPool) {
    let app = spawn_app(pool.clone(), config("gh", "http://127.0.0.1:9/closed")).await;
    for i in 0..10 {
        deliver_event(&app, "gh", &format!("e-{i}"), b"gh-secret").await;
    }
    replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();
    let (status, o) = app.server_fn("overview", "window=hour").await;
    assert_eq!(status, 200, "{o}");
    assert_eq!(o["totals"]["deliveries"], 10);
    assert_eq!(o["totals"]["claimed"], 10);
    assert_eq!(o["backlog"]["due"], 10, "nothing forwarded yet");
    assert_eq!(o["alerts"], serde_json::json!([]));
    assert_eq!(
        o["series"].as_array().unwrap().len(),
        60,
        "one bar per minute"
    );

    // A storm: every event again, three times.
    for _ in 0..3 {
        for i in 0..10 {
            deliver_event(&app, "gh", &format!("e-{i}"), b"gh-secret").await;
        }
    }
    replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();
    // The banner shows the alerts the evaluator fired.
    replaysafe_core::alerts::evaluate_once(&pool, &app.config)
        .await
        .unwrap();
    let (_, o) = app.server_fn("overview", "window=day&source=gh").await;
    assert_eq!(o["totals"]["duplicates"], 30);
    let storm = &o["alerts"][0];
    assert_eq!(storm["rule"], "duplicate_storm");
    assert_eq!(storm["source"], "gh");
    assert_eq!(storm["figures"]["recent_rate"], 0.75);
    assert_eq!(o["per_source"][0]["figures"]["deliveries"], 40);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn deliveries_filter_by_outcome_status_key_and_time(pool: PgPool) {
    let app = spawn_app(pool.clone(), config("gh", "http://127.0.0.1:9/closed")).await;
    deliver_event(&app, "gh", "k-1", b"gh-secret").await;
    deliver_event(&app, "gh", "k-1", b"gh-secret").await;
    deliver_event(&app, "gh", "k-2", b"gh-secret").await;
    deliver_event(&app, "gh", "k-3", b"wrong").await;
    // k-2 arrived two hours ago (history), the others now.
    sqlx::query(
        "UPDATE deliveries SET received_at = now() - interval '2 hours' WHERE idem_key = 'k-2'",
    )
    .execute(&pool)
    .await
    .unwrap();
    replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();
    let keys = |page: &serde_json::Value| -> Vec<String> {
        page["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{}/{}",
                    r["idem_key"].as_str().unwrap_or("-"),
                    r["outcome"].as_str().unwrap()
                )
            })
            .collect()
    };
    let (_, all) = app.server_fn("deliveries", "").await;
    assert_eq!(
        keys(&all),
        [
            "-/rejected",
            "k-2/claimed",
            "k-1/in_progress",
            "k-1/claimed"
        ]
    );
    let (_, rejected) = app
        .server_fn("deliveries", "filter[outcome]=rejected")
        .await;
    assert_eq!(keys(&rejected), ["-/rejected"]);
    let (_, by_status) = app.server_fn("deliveries", "filter[status]=4xx").await;
    assert_eq!(keys(&by_status), ["-/rejected"]);
    let (_, by_key) = app.server_fn("deliveries", "filter[key]=gh%3Ak-1").await;
    assert_eq!(keys(&by_key), ["k-1/in_progress", "k-1/claimed"]);
    let (_, plain_key) = app.server_fn("deliveries", "filter[key]=k-1").await;
    assert_eq!(keys(&plain_key), keys(&by_key));

    let hour_ago: String = sqlx::query_scalar(
        "SELECT to_char((now() - interval '1 hour') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let (_, recent) = app
        .server_fn("deliveries", &format!("filter[from]={hour_ago}"))
        .await;
    assert_eq!(
        keys(&recent),
        ["-/rejected", "k-1/in_progress", "k-1/claimed"]
    );
    let (_, older) = app
        .server_fn("deliveries", &format!("filter[to]={hour_ago}"))
        .await;
    assert_eq!(keys(&older), ["k-2/claimed"]);

    // Newer than a known id: what the live page polls for.
    let newest_but_one = all["rows"][1]["id"].as_i64().unwrap();
    let (_, live) = app
        .server_fn("deliveries", &format!("after={newest_but_one}"))
        .await;
    assert_eq!(keys(&live), ["-/rejected"]);

    let (status, bad) = app.server_fn("deliveries", "filter[from]=yesterday").await;
    assert_eq!(status, 200);
    assert!(bad["filter_error"]
        .as_str()
        .unwrap()
        .contains("from: expected a time like 2026-11-30T14:05 (UTC)"));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn deliveries_page_by_keyset_without_gaps_or_repeats(pool: PgPool) {
    let app = spawn_app(pool.clone(), config("gh", "http://127.0.0.1:9/closed")).await;
    for i in 0..120 {
        deliver_event(&app, "gh", &format!("p-{i}"), b"gh-secret").await;
    }
    let mut seen = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let form = before.map(|b| format!("before={b}")).unwrap_or_default();
        let (_, page) = app.server_fn("deliveries", &form).await;
        let rows = page["rows"].as_array().unwrap();
        assert!(rows.len() <= 50);
        seen.extend(rows.iter().map(|r| r["id"].as_i64().unwrap()));
        match page["older"].as_i64() {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    let mut expected: Vec<i64> = sqlx::query_scalar("SELECT id FROM deliveries ORDER BY id DESC")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(seen.len(), 120);
    assert_eq!(seen, std::mem::take(&mut expected));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn an_event_page_shows_its_timeline_and_a_missing_one_is_404(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(503)]).await;
    let app = spawn_app(pool.clone(), config("gh", &destination.url)).await;
    deliver(&app, "gh", "t-1", r#"{"b":1,"a":"<script>"}"#, b"gh-secret").await;
    deliver(&app, "gh", "t-1", r#"{"b":1,"a":"<script>"}"#, b"gh-secret").await;
    app.drain().await;
    let id: i64 = sqlx::query_scalar("SELECT id FROM events WHERE idem_key = 't-1'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let (status, detail) = app.server_fn("event", &format!("id={id}")).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["event"]["state"], "completed");
    let kinds: Vec<String> = detail["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_object().unwrap().keys().next().unwrap().clone())
        .collect();
    assert_eq!(kinds, ["Delivery", "Delivery", "Attempt", "Attempt"]);
    assert_eq!(detail["timeline"][2]["Attempt"]["status"], 503);
    assert_eq!(detail["timeline"][2]["Attempt"]["result"], "retrying");
    // Pretty-printed, keys in the order sent.
    assert_eq!(
        detail["first_delivery"]["payload"]["Json"],
        "{\n  \"b\": 1,\n  \"a\": \"<script>\"\n}"
    );

    let viewer = app.session("viewer").await;
    let page = app.page(Some(&viewer), &format!("/events/{id}")).await;
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("&lt;script&gt;"), "the payload is escaped");
    assert!(!html.contains("\"<script>\""));
    let missing = app.page(Some(&viewer), "/events/999999").await;
    assert_eq!(missing.status(), 404);
    let missing = app.page(Some(&viewer), "/deliveries/999999").await;
    assert_eq!(missing.status(), 404);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn metrics_are_prometheus_text_with_outcomes_latency_and_backlog(pool: PgPool) {
    // A slug of its own: counters are per process and tests share one.
    let app = spawn_app(
        pool.clone(),
        config("metrics-gh", "http://127.0.0.1:9/closed"),
    )
    .await;
    deliver_event(&app, "metrics-gh", "m-1", b"gh-secret").await;
    deliver_event(&app, "metrics-gh", "m-1", b"gh-secret").await;
    deliver_event(&app, "metrics-gh", "m-2", b"wrong").await;
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = response.text().await.unwrap();
    for line in [
        r#"replaysafe_deliveries_total{source="metrics-gh",outcome="claimed"} 1"#,
        r#"replaysafe_deliveries_total{source="metrics-gh",outcome="in_progress"} 1"#,
        r#"replaysafe_deliveries_total{source="metrics-gh",outcome="rejected"} 1"#,
        r#"replaysafe_duplicates_total{source="metrics-gh"} 1"#,
        r#"replaysafe_signature_failures_total{source="metrics-gh"} 1"#,
        r#"replaysafe_ack_seconds_count{source="metrics-gh"} 3"#,
        r#"replaysafe_backlog_events{source="metrics-gh"} 1"#,
        r#"replaysafe_dead_letters{source="metrics-gh"} 0"#,
        "# TYPE replaysafe_ack_seconds histogram",
        &format!(
            r#"replaysafe_build_info{{version="{}",commit="{}"}} 1"#,
            env!("CARGO_PKG_VERSION"),
            replaysafe_core::telemetry::COMMIT
        ),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn metrics_take_the_configured_token_and_read_the_database_at_most_every_few_seconds(
    pool: PgPool,
) {
    let mut config = config("metrics-tok", "http://127.0.0.1:9/closed");
    config.metrics_token = Some(replaysafe_core::config::Secret::new("scrape-me"));
    let app = spawn_app(pool.clone(), config).await;
    let scrape = |auth: Option<&'static str>| {
        let mut request = app.client.get(app.url("/metrics"));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        async move { request.send().await.unwrap() }
    };
    for refused in [
        None,
        Some("Bearer scrape-m"),
        Some("Bearer scrape-me-not"),
        Some("scrape-me"),
    ] {
        let response = scrape(refused).await;
        assert_eq!(response.status(), 401, "{refused:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
    }
    let backlog = |text: &str| {
        text.lines()
            .find(|l| l.starts_with(r#"replaysafe_backlog_events{source="metrics-tok"}"#))
            .map(str::to_owned)
    };
    let first = scrape(Some("Bearer scrape-me")).await;
    assert_eq!(first.status(), 200);
    let first = first.text().await.unwrap();
    assert_eq!(
        backlog(&first).as_deref(),
        Some(r#"replaysafe_backlog_events{source="metrics-tok"} 0"#)
    );
    // An event queued now shows in the gauge only once the last read is
    // older than GAUGES_FRESH_FOR: scrapes cannot load the database.
    deliver_event(&app, "metrics-tok", "t-1", b"gh-secret").await;
    let soon = scrape(Some("Bearer scrape-me")).await.text().await.unwrap();
    assert_eq!(backlog(&soon), backlog(&first));
    tokio::time::sleep(replaysafe_core::ops::overview::GAUGES_FRESH_FOR).await;
    let later = scrape(Some("Bearer scrape-me")).await.text().await.unwrap();
    assert_eq!(
        backlog(&later).as_deref(),
        Some(r#"replaysafe_backlog_events{source="metrics-tok"} 1"#)
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_backlog_is_folded_in_bounded_steps_and_only_once_settled(pool: PgPool) {
    // More than two folds' worth of rows (a fold takes at most 20,000 ids).
    sqlx::query(
        "INSERT INTO deliveries (source, outcome, http_status, verified, headers, body_size, ack_micros)
         SELECT 'gh', 'rejected', 401, false, '[]', 0, 1500 FROM generate_series(1, 45000)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut rollup = replaysafe_core::jobs::rollup::Rollup::default();
    let first = rollup
        .step(&pool, replaysafe_core::jobs::rollup::SETTLE)
        .await
        .unwrap();
    assert_eq!(first.deliveries, 0, "nothing is folded before it settled");
    let one_step = replaysafe_core::jobs::rollup::Rollup::default()
        .step(&pool, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(one_step.deliveries, 20000, "one fold is bounded");
    let rest = replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();
    assert_eq!(rest.deliveries, 25000);
    let (deliveries, bad_signature, last_id, max_id): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT sum(deliveries)::bigint FROM minute_stats),
                (SELECT sum(bad_signature)::bigint FROM minute_stats),
                (SELECT last_id FROM rollup_progress WHERE name = 'deliveries'),
                (SELECT max(id) FROM deliveries)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((deliveries, bad_signature), (45000, 45000));
    assert_eq!(last_id, max_id);
    // The process that noted the ids earlier finds them folded: nothing twice.
    let later = rollup.step(&pool, std::time::Duration::ZERO).await.unwrap();
    assert_eq!(later.deliveries, 0);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn credentials_in_a_stored_request_are_masked_unless_an_admin_reveals_them(pool: PgPool) {
    let app = spawn_app(
        pool.clone(),
        test_config(
            r#"
[[source]]
slug = "slack"
provider = "slack"
secrets = ["slack-secret"]
"#,
            &[],
        ),
    )
    .await;
    let payload = r#"{"type":"block_actions","token":"verification-token-1","response_url":"https://hooks.slack.com/actions/T1/secret-path","trigger_id":"t1"}"#;
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", payload)
        .finish();
    let answer = app.slack_interaction("slack", &body).await;
    assert_eq!(answer.status(), 200);
    let delivery: i64 = sqlx::query_scalar("SELECT id FROM deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    let event: i64 = sqlx::query_scalar("SELECT id FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();
    let secrets = ["verification-token-1", "secret-path"];
    let viewer = app.session("viewer").await;
    for (endpoint, id) in [("delivery", delivery), ("event", event)] {
        let (status, shown) = app
            .server_fn_as(Some(&viewer), endpoint, &format!("id={id}"))
            .await;
        assert_eq!(status, 200, "{shown}");
        let text = shown.to_string();
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{endpoint} shows {secret} to a viewer: {text}"
            );
        }
        // The form body is shown as sent, percent-encoded.
        assert!(
            text.contains("block_actions") && text.contains("%5Bmasked%5D"),
            "{text}"
        );
        let record = if endpoint == "event" {
            &shown["first_delivery"]
        } else {
            &shown
        };
        let signature = record["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|pair| pair[0] == "x-slack-signature")
            .map(|pair| pair[1].as_str().unwrap().to_owned())
            .unwrap();
        assert!(signature.starts_with("[signature"), "{signature}");
        // A viewer cannot ask for more.
        let (status, _) = app
            .server_fn_as(Some(&viewer), endpoint, &format!("id={id}&reveal=true"))
            .await;
        assert_eq!(status, 403);
        // An admin can, and it is audit-logged.
        let (status, revealed) = app
            .server_fn(endpoint, &format!("id={id}&reveal=true"))
            .await;
        assert_eq!(status, 200);
        let text = revealed.to_string();
        for secret in secrets {
            assert!(
                text.contains(secret),
                "{endpoint} reveals no {secret}: {text}"
            );
        }
        let logged: i64 =
            sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = $1 AND target = $2")
                .bind(format!("{endpoint}.reveal"))
                .bind(id.to_string())
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(logged, 1);
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn metrics_listen_serves_metrics_apart_from_the_receiver(pool: PgPool) {
    let mut config = config("gh", "http://127.0.0.1:9/x");
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let app = spawn_app(pool, config).await;
    assert_eq!(deliver_event(&app, "gh", "m-1", b"gh-secret").await, 200);
    let apart = app.metrics_addr.expect("a metrics listener");
    let scraped = app
        .client
        .get(format!("http://{apart}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200);
    let text = scraped.text().await.unwrap();
    assert!(text.contains("replaysafe_deliveries_total"), "{text}");
    let beside = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(beside.status(), 404, "not beside the receiver");
    let other = app
        .client
        .get(format!("http://{apart}/overview"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404, "nothing else on the metrics listener");
}
