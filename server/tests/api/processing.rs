//! Processing against real destinations: forwarding, retries, dead letters,
//! lease takeover.

use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use replaysafe_core::db::MIGRATOR;
use sha2::Sha256;
use sqlx::PgPool;

use crate::helpers::{hmac_hex, spawn_app, test_config, Destination, Scripted, TestApp};

const DESTINATION_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn config(destination: &str, max_attempts: u32) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
destination_secret = "{DESTINATION_SECRET}"
max_attempts = {max_attempts}
attempt_timeout_secs = 2
"#
        ),
        &[],
    )
}

/// A GitHub delivery, as GitHub signs it.
async fn deliver(app: &TestApp, delivery_id: &str, body: &str) -> reqwest::Response {
    app.client
        .post(app.url("/hooks/gh"))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", delivery_id)
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hmac_hex(b"gh-secret", body.as_bytes())),
        )
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

async fn event_state(pool: &PgPool, key: &str) -> (String, i32, Option<String>) {
    sqlx::query_as(
        "SELECT state, attempt_count, dead_reason FROM event_summaries WHERE idem_key = $1",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// An answer with a NUL byte, which PostgreSQL's text refuses, is recorded
/// (its excerpt shows a replacement character there) instead of failing
/// every recording it joins.
#[sqlx::test(migrator = "MIGRATOR")]
async fn an_answer_with_a_nul_byte_is_recorded(pool: PgPool) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let answering =
        axum::Router::new().route("/hook", axum::routing::post(|| async { "ok\0done" }));
    tokio::spawn(async move { axum::serve(listener, answering).await.unwrap() });
    let app = spawn_app(pool.clone(), config(&url, 3)).await;
    assert_eq!(deliver(&app, "nul", r#"{"nul":1}"#).await.status(), 200);
    assert_eq!(app.drain().await, 1);
    let (state, excerpt): (String, Option<String>) = sqlx::query_as(
        "SELECT e.state, a.response_excerpt FROM event_summaries e JOIN attempts a ON a.event_id = e.id
         WHERE e.idem_key = 'nul'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(state, "completed");
    assert_eq!(excerpt.as_deref(), Some("ok\u{FFFD}done"));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn forwards_the_body_byte_for_byte_with_our_signature(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, 3)).await;
    let body = "{\"ref\":\"refs/heads/main\",\n \"odd\": \"caf\u{e9} \\u0000\"}  ";
    assert_eq!(deliver(&app, "d-1", body).await.status(), 200);

    assert_eq!(app.drain().await, 1);
    let received = destination.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    let got = &received[0];
    assert_eq!(got.body, body.as_bytes());
    let h = |name: &str| {
        got.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(h("content-type").as_deref(), Some("application/json"));
    assert_eq!(h("idempotency-key").as_deref(), Some("gh:d-1"));
    assert_eq!(h("x-github-event").as_deref(), Some("push"));
    assert_eq!(h("x-github-delivery").as_deref(), Some("d-1"));
    assert_eq!(
        h("x-hub-signature-256"),
        None,
        "the provider's signature is not passed on"
    );

    // The application verifies replaysafe's Standard Webhooks signature.
    let (id, ts, sig) = (
        h("webhook-id").unwrap(),
        h("webhook-timestamp").unwrap(),
        h("webhook-signature").unwrap(),
    );
    let key = base64::engine::general_purpose::STANDARD
        .decode(DESTINATION_SECRET.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body.as_bytes());
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    assert_eq!(sig, format!("v1,{expected}"));

    assert_eq!(event_state(&pool, "d-1").await.0, "completed");
    let (status, excerpt): (i16, String) =
        sqlx::query_as("SELECT status, response_excerpt FROM attempts")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (status, excerpt.as_str()),
        (200, "answer from the test destination")
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_duplicate_storm_is_forwarded_exactly_once(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, 3)).await;
    let storm = (0..20).map(|_| deliver(&app, "d-storm", "{}"));
    futures_util::future::join_all(storm).await;
    // Several workers race for the work, each as if in its own process.
    let workers = app.workers();
    let racers = (0..4).map(|i| {
        let w = workers.apart();
        async move { while w.run_once(&format!("racer-{i}")).await.unwrap() > 0 {} }
    });
    futures_util::future::join_all(racers).await;
    // Duplicates after completion are not forwarded either.
    deliver(&app, "d-storm", "{}").await;
    app.drain().await;
    assert_eq!(destination.count(), 1);
    assert_eq!(event_state(&pool, "d-storm").await.0, "completed");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_flapping_destination_ends_with_one_success(pool: PgPool) {
    let destination = Destination::start(vec![
        Scripted::status(500),
        Scripted {
            status: 200,
            headers: vec![],
            delay: Duration::from_secs(4),
        }, // times out
        Scripted::status(503),
    ])
    .await;
    let app = spawn_app(pool.clone(), config(&destination.url, 8)).await;
    deliver(&app, "d-flap", "{}").await;
    app.drain().await;

    assert_eq!(destination.count(), 4);
    let (state, attempts, _) = event_state(&pool, "d-flap").await;
    assert_eq!((state.as_str(), attempts), ("completed", 4));
    let errors: Vec<Option<String>> = sqlx::query_scalar("SELECT error FROM attempts ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(errors[0].as_deref(), Some("HTTP 500"));
    assert_eq!(errors[1].as_deref(), Some("timed out after 2 s"));
    assert_eq!(errors[2].as_deref(), Some("HTTP 503"));
    assert_eq!(errors[3], None);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_400_is_dead_at_once_and_later_duplicates_are_not_forwarded(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, 8)).await;
    deliver(&app, "d-400", "{}").await;
    app.drain().await;
    let (state, attempts, reason) = event_state(&pool, "d-400").await;
    assert_eq!((state.as_str(), attempts), ("dead", 1));
    assert_eq!(
        reason.as_deref(),
        Some("destination refused the event with 400")
    );

    let again = deliver(&app, "d-400", "{}").await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["x-replaysafe-outcome"], "dead");
    app.drain().await;
    assert_eq!(destination.count(), 1);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn retries_stop_at_max_attempts_with_the_last_error(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(502); 3]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, 3)).await;
    deliver(&app, "d-max", "{}").await;
    app.drain().await;
    let (state, attempts, reason) = event_state(&pool, "d-max").await;
    assert_eq!((state.as_str(), attempts), ("dead", 3));
    assert_eq!(
        reason.as_deref(),
        Some("gave up after 3 attempts; last: HTTP 502")
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn retry_after_is_honoured(pool: PgPool) {
    let destination = Destination::start(vec![Scripted {
        status: 429,
        headers: vec![("retry-after", "120".into())],
        delay: Duration::ZERO,
    }])
    .await;
    let app = spawn_app(pool.clone(), config(&destination.url, 8)).await;
    deliver(&app, "d-429", "{}").await;
    app.drain().await;
    let (state, wait): (String, f64) = sqlx::query_as(
        "SELECT state, extract(epoch FROM next_attempt_at - now())::float8 FROM event_summaries WHERE idem_key = 'd-429'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(state, "retrying");
    assert!((110.0..=121.0).contains(&wait), "next attempt in {wait} s");
    assert_eq!(destination.count(), 1, "not retried before its time");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_dead_workers_lease_is_taken_over(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, 8)).await;
    deliver(&app, "d-crash", "{}").await;

    // A worker leases the event and dies before forwarding it.
    let leased = app.lease_as("doomed", 1).await;
    assert_eq!(leased.len(), 1);
    let lease_secs: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM lease_expires_at - now())::float8 FROM dispatches",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        lease_secs <= 2.0 + 30.0 && lease_secs > 2.0,
        "lease {lease_secs} s: attempt timeout 2 s + margin"
    );
    // While the lease holds, nobody else takes the event.
    assert_eq!(app.drain().await, 0);

    // Time passes: the lease expires (moved back rather than waited for).
    sqlx::query("UPDATE dispatches SET lease_expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 1);
    let (state, attempts, _) = event_state(&pool, "d-crash").await;
    assert_eq!((state.as_str(), attempts), ("completed", 2));
    let abandoned: String =
        sqlx::query_scalar("SELECT error FROM attempts WHERE worker = 'doomed'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(abandoned, "worker lost its lease; taken over");

    // The dead worker's late report changes nothing.
    let moved = app
        .finish_as(
            "doomed",
            &leased[0],
            Default::default(),
            replaysafe_core::events::Next::Dead("late".into()),
        )
        .await;
    assert!(!moved);
    assert_eq!(event_state(&pool, "d-crash").await.0, "completed");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn pause_holds_and_resume_drains(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, 8)).await;
    replaysafe_core::db::sources::set_paused(
        &pool,
        "gh",
        true,
        replaysafe_types::auth::Who::named("test"),
    )
    .await
    .unwrap();

    // Still received, verified and claimed while paused...
    let response = deliver(&app, "d-paused", "{}").await;
    assert_eq!(response.headers()["x-replaysafe-outcome"], "claimed");
    // ...but not forwarded.
    assert_eq!(app.drain().await, 0);
    assert_eq!(destination.count(), 0);
    assert_eq!(event_state(&pool, "d-paused").await.0, "queued");

    replaysafe_core::db::sources::set_paused(
        &pool,
        "gh",
        false,
        replaysafe_types::auth::Who::named("test"),
    )
    .await
    .unwrap();
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 1);
    let audit: Vec<String> = sqlx::query_scalar("SELECT action FROM audit_log ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(audit, ["source.pause", "source.resume"]);
    assert!(replaysafe_core::db::sources::set_paused(
        &pool,
        "nope",
        true,
        replaysafe_types::auth::Who::named("test")
    )
    .await
    .is_err());
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn retention_prunes_only_what_is_due(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, 8)).await;
    for key in ["old-done", "old-dead", "old-waiting", "fresh"] {
        deliver(&app, key, &format!(r#"{{"delivery":"{key}"}}"#)).await;
    }
    let workers = app.workers();
    // One event goes dead (the destination's first answer is 400), one completes, one waits.
    sqlx::query("UPDATE dispatches SET next_attempt_at = now() + interval '1 hour' WHERE event_id IN (SELECT id FROM events WHERE idem_key IN ('old-waiting', 'fresh', 'old-done'))")
        .execute(&pool).await.unwrap();
    assert_eq!(workers.run_once("w").await.unwrap(), 1); // old-dead: 400, dead
    sqlx::query("UPDATE dispatches SET next_attempt_at = now() WHERE event_id IN (SELECT id FROM events WHERE idem_key = 'old-done')")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(workers.run_once("w").await.unwrap(), 1); // old-done: 200, completed
    assert_eq!(event_state(&pool, "old-dead").await.0, "dead");
    assert_eq!(event_state(&pool, "old-done").await.0, "completed");

    // Age everything but "fresh" beyond both limits.
    sqlx::query(
        "UPDATE deliveries SET received_at = now() - interval '40 days' WHERE idem_key <> 'fresh'",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE events SET last_seen_at = now() - interval '40 days' WHERE idem_key <> 'fresh'",
    )
    .execute(&pool)
    .await
    .unwrap();

    // Strangers' failed sign-ins go with the deliveries; operators' actions
    // and successful sign-ins stay for the audit log's own, longer time.
    sqlx::query(
        "INSERT INTO audit_log (username, action, outcome, at) VALUES
         ('guess', 'login', 'failed', now() - interval '40 days'),
         ('guess', 'login', 'rate_limited', now() - interval '40 days'),
         ('guess', 'login', 'failed', now() - interval '10 days'),
         ('ana', 'login', 'succeeded', now() - interval '40 days'),
         ('ana', 'user.disable', 'succeeded', now() - interval '40 days'),
         ('ana', 'user.enable', 'succeeded', now() - interval '400 days')",
    )
    .execute(&pool)
    .await
    .unwrap();
    // Bulk jobs finished long ago go with the deliveries, with their
    // outcomes; a recent one and an unfinished one stay.
    sqlx::query(
        "INSERT INTO bulk_jobs (filter, up_to, started_by, total, state, finished_at) VALUES
         ('{}', 0, 'ana', 1, 'done', now() - interval '40 days'),
         ('{}', 0, 'ana', 1, 'cancelled', now() - interval '10 days'),
         ('{}', 0, 'ana', 1, 'running', NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO bulk_job_results (job_id, event_id) SELECT id, 1 FROM bulk_jobs")
        .execute(&pool)
        .await
        .unwrap();
    // Incidents: one resolved 31 days ago goes (with its events); one
    // resolved yesterday and one open since long ago stay.
    sqlx::query(
        "INSERT INTO incidents (source, destination, kind, fingerprint, state, first_seen_at,
                                last_seen_at, state_changed_at)
         VALUES ('gh', 'default', 'HTTP 400', 'old', 'resolved', now() - interval '40 days',
                 now() - interval '40 days', now() - interval '31 days'),
                ('gh', 'default', 'HTTP 400', 'recent', 'resolved', now() - interval '40 days',
                 now() - interval '40 days', now() - interval '1 day'),
                ('gh', 'default', 'HTTP 500', 'open', 'open', now() - interval '40 days',
                 now() - interval '40 days', now() - interval '40 days')",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO incident_events SELECT id, 1 FROM incidents")
        .execute(&pool)
        .await
        .unwrap();
    let pruned = replaysafe_core::jobs::retention::prune(&pool, 30, 30, 365)
        .await
        .unwrap();
    assert_eq!(
        pruned,
        replaysafe_core::jobs::retention::Pruned {
            deliveries: 2,
            events: 2,
            audit: 3,
            bulk_jobs: 1,
            incidents: 1,
            ..Default::default()
        }
    );
    let kept: Vec<String> = sqlx::query_scalar(
        "SELECT i.fingerprint FROM incidents i JOIN incident_events e ON e.incident_id = i.id
         ORDER BY i.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(kept, ["recent", "open"]);
    let jobs: Vec<String> = sqlx::query_scalar(
        "SELECT j.state FROM bulk_jobs j JOIN bulk_job_results r ON r.job_id = j.id ORDER BY j.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(jobs, ["cancelled", "running"]);
    let audit: Vec<String> = sqlx::query_scalar(
        "SELECT action || ' ' || outcome FROM audit_log WHERE username IN ('guess', 'ana') ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        audit,
        ["login failed", "login succeeded", "user.disable succeeded"]
    );
    let left: Vec<String> = sqlx::query_scalar("SELECT idem_key FROM events ORDER BY idem_key")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        left,
        ["fresh", "old-waiting"],
        "an event still waiting keeps its key"
    );
    let payloads: Vec<String> =
        sqlx::query_scalar("SELECT idem_key FROM deliveries ORDER BY idem_key")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(payloads, ["fresh", "old-waiting"], "and its payload");
    // A second run finds nothing more.
    assert_eq!(
        replaysafe_core::jobs::retention::prune(&pool, 30, 30, 365)
            .await
            .unwrap(),
        Default::default()
    );
}

/// Retention prunes an original that was re-delivered; the re-delivery
/// stays marked as one (a foreign key used to null the mark, scanning the
/// whole table for every pruned row).
#[sqlx::test(migrator = "MIGRATOR")]
async fn pruning_an_original_keeps_its_redelivery_marked(pool: PgPool) {
    let original: i64 = sqlx::query_scalar(
        "INSERT INTO deliveries (source, outcome, http_status, verified, headers, body_size, received_at)
         VALUES ('gh', 'rejected', 401, false, '{}', 0, now() - interval '40 days') RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let redelivery: i64 = sqlx::query_scalar(
        "INSERT INTO deliveries (source, outcome, http_status, verified, headers, body_size, redelivery_of)
         VALUES ('gh', 'rejected', 401, false, '{}', 0, $1) RETURNING id",
    )
    .bind(original)
    .fetch_one(&pool)
    .await
    .unwrap();

    let pruned = replaysafe_core::jobs::retention::prune(&pool, 30, 30, 365)
        .await
        .unwrap();
    assert_eq!(pruned.deliveries, 1);
    let left: Vec<(i64, Option<i64>)> =
        sqlx::query_as("SELECT id, redelivery_of FROM deliveries ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(left, [(redelivery, Some(original))]);
}

/// No foreign key points into a table retention prunes, nor leaves the
/// claim's and the recorder's tables: each would cost every claim or
/// attempt a trigger and a row lock, a pruned row a search of the
/// referencing table, and a dropped partition its whole day's checks
/// (migrations 5 and 18). The code writes the references itself.
#[sqlx::test(migrator = "MIGRATOR")]
async fn no_foreign_key_touches_the_pruned_tables(pool: PgPool) {
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT c.conname::text FROM pg_constraint c
         WHERE c.contype = 'f'
           AND (c.confrelid IN ('deliveries'::regclass, 'events'::regclass, 'attempts'::regclass)
                OR c.conrelid IN ('deliveries'::regclass, 'events'::regclass, 'attempts'::regclass))
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(keys, Vec::<String>::new());
    // The query sees foreign keys: bulk_job_results has some.
    let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_constraint WHERE contype = 'f'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(seen >= 1);
}

/// ANALYZE (autovacuum's, every 10% of growth) skips the payload columns no
/// query filters on, and still samples the ones the pages filter by.
#[sqlx::test(migrator = "MIGRATOR")]
async fn analyze_skips_the_payload_columns(pool: PgPool) {
    sqlx::query(
        "INSERT INTO deliveries (source, outcome, http_status, verified, headers, body, body_size)
         SELECT 'gh', 'rejected', 401, false, jsonb_build_array(jsonb_build_array('n', i::text)),
                convert_to('body ' || i, 'UTF8'), 8
         FROM generate_series(1, 200) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE deliveries")
        .execute(&pool)
        .await
        .unwrap();
    let sampled: Vec<String> = sqlx::query_scalar(
        "SELECT attname::text FROM pg_stats
         WHERE tablename = 'deliveries' AND attname IN ('headers', 'body', 'outcome', 'source')
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(sampled, ["outcome", "source"]);
}

fn sync_config(destination: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "slack"
provider = "slack"
secrets = ["slack-secret"]
mode = "sync"
destination = "{destination}"
attempt_timeout_secs = 1
max_attempts = 5
"#
        ),
        &[],
    )
}

/// A Slack interactivity request to the `slack` source.
async fn interact(app: &TestApp, body: &str) -> reqwest::Response {
    app.slack_interaction("slack", body).await
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn sync_mode_returns_the_destinations_answer_and_replays_it_byte_for_byte(pool: PgPool) {
    let destination = Destination::start(vec![Scripted {
        status: 201,
        headers: vec![("content-type", "text/xml; charset=utf-8".into())],
        delay: Duration::ZERO,
    }])
    .await;
    let app = spawn_app(pool.clone(), sync_config(&destination.url)).await;
    let first = interact(&app, "payload=one").await;
    assert_eq!(first.status(), 201);
    assert_eq!(first.headers()["x-replaysafe-outcome"], "claimed");
    assert_eq!(first.headers()["content-type"], "text/xml; charset=utf-8");
    let first_body = first.bytes().await.unwrap();
    assert_eq!(&first_body[..], b"answer from the test destination");

    let later = interact(&app, "payload=one").await;
    assert_eq!(later.status(), 201);
    assert_eq!(later.headers()["x-replaysafe-outcome"], "completed");
    assert_eq!(later.headers()["content-type"], "text/xml; charset=utf-8");
    assert_eq!(later.bytes().await.unwrap(), first_body);
    assert_eq!(destination.count(), 1, "forwarded once");
    // Workers never touch sync events.
    assert_eq!(app.drain().await, 0);
    let statuses: Vec<i16> = sqlx::query_scalar("SELECT http_status FROM deliveries ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(statuses, [201, 201]);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn sync_mode_answers_a_concurrent_duplicate_with_409(pool: PgPool) {
    let destination = Destination::start(vec![Scripted {
        status: 200,
        headers: vec![],
        delay: Duration::from_millis(700),
    }])
    .await;
    let app = spawn_app(pool.clone(), sync_config(&destination.url)).await;
    let (first, second) = tokio::join!(interact(&app, "payload=two"), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        interact(&app, "payload=two").await
    });
    assert_eq!(first.status(), 200);
    assert_eq!(second.status(), 409);
    assert_eq!(second.headers()["x-replaysafe-outcome"], "in_progress");
    assert_eq!(destination.count(), 1);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn sync_mode_retry_takes_over_after_a_failure_or_a_crash(pool: PgPool) {
    // The first try times out (attempt timeout 1 s): 502, and the provider retries.
    let destination = Destination::start(vec![Scripted {
        status: 200,
        headers: vec![],
        delay: Duration::from_secs(3),
    }])
    .await;
    let app = spawn_app(pool.clone(), sync_config(&destination.url)).await;
    let failed = interact(&app, "payload=three").await;
    assert_eq!(failed.status(), 502);
    // Why it failed is the operators' to read, not the provider's.
    let body = failed.text().await.unwrap();
    assert!(!body.contains("timed out"), "{body}");
    let retry = interact(&app, "payload=three").await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["x-replaysafe-outcome"], "claimed");

    // A process claims and dies before answering: once its lease expires, a
    // later delivery takes over.
    let orphan = "payload=four";
    let dead_holder = replaysafe_core::receiver::claim::SyncLease {
        owner: "sync:crashed".into(),
        secs: 60.0,
    };
    let config = sync_config(&destination.url);
    let key = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(orphan.as_bytes()))
    );
    let delivery = replaysafe_core::receiver::claim::NewDelivery {
        source: "slack",
        idem_key: Some(&key),
        verified: true,
        verification: "test".into(),
        reject_reason: None,
        reject_kind: None,
        query: None,
        content_type: None,
        headers: serde_json::json!([]),
        body: Some(orphan.as_bytes()),
        body_size: orphan.len(),
        remote_addr: None,
        started: std::time::Instant::now(),
        redelivery: None,
        replay_digest: None,
        truncated: false,
        body_sha256: None,
        plan: vec![replaysafe_core::receiver::claim::Route {
            destination: "default".into(),
            wanted: true,
            ordering_key: None,
        }],
        event_type: None,
        revives: None,
        recovered: None,
    };
    let held = replaysafe_core::receiver::claim::claim(
        &pool,
        config.sources[0].mode,
        &delivery,
        Some(&dead_holder),
    )
    .await
    .unwrap();
    assert_eq!(
        held.outcome,
        replaysafe_core::receiver::claim::Outcome::Claimed
    );
    assert_eq!(
        interact(&app, orphan).await.status(),
        409,
        "the lease still holds"
    );
    sqlx::query(
        "UPDATE dispatches SET lease_expires_at = now() - interval '1 second' WHERE event_id = $1",
    )
    .bind(held.event_id)
    .execute(&pool)
    .await
    .unwrap();
    let taken = interact(&app, orphan).await;
    assert_eq!(taken.status(), 200);
    assert_eq!(taken.headers()["x-replaysafe-outcome"], "claimed");
    let state: String = sqlx::query_scalar("SELECT state FROM event_summaries WHERE id = $1")
        .bind(held.event_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(state, "completed");
}
