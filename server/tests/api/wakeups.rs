//! Issue 20: claims wake the workers once per burst, not once per claim.
//! Each wake-up used to cost a lease statement: a burst of claims became as
//! many leases (pg_stat_statements counts them here), most finding nothing.

use std::time::{Duration, Instant};

use replaysafe_core::db::MIGRATOR;
use replaysafe_core::processing::worker::{Workers, POLL_INTERVAL};
use sqlx::{Connection, PgPool};
use tokio_util::sync::CancellationToken;

use crate::helpers::{lease_statements, spawn_app, test_config, Destination, Scripted, TestApp};

const WORKERS: usize = 8;

/// Sends `n` deliveries of `slug`, 50 at a time; returns how long it took.
async fn burst(app: &TestApp, slug: &str, n: usize) -> Duration {
    let started = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let statuses = futures_util::future::join_all(chunk.iter().map(|i| {
            let id = format!("{slug}-{i}");
            let body = format!(r#"{{"n":"{id}"}}"#);
            async move { app.github_delivery(slug, &id, &body, b"gh-secret").await }
        }))
        .await;
        assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    }
    started.elapsed()
}

/// What the workers' polling alone may lease in `elapsed`, with one round to spare.
fn polls(elapsed: Duration) -> i64 {
    (WORKERS as f64 * (elapsed.as_secs_f64() / POLL_INTERVAL.as_secs_f64() + 2.0)).ceil() as i64
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_burst_of_claims_costs_a_bounded_number_of_lease_statements(pool: PgPool) {
    crate::helpers::track_statements(&pool).await;
    let destination = Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "held"
provider = "github"
secrets = ["gh-secret"]
destination = "{0}"
paused = true
[[source]]
slug = "live"
provider = "github"
secrets = ["gh-secret"]
destination = "{0}"
"#,
            destination.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    let shutdown = CancellationToken::new();
    let _workers = Workers::new(&app.services).spawn(WORKERS, shutdown.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A paused source's claims wake nobody: only the polls lease.
    let before = lease_statements(&pool).await;
    let took = burst(&app, "held", 400).await;
    let held = lease_statements(&pool).await - before;
    println!(
        "400 paused claims in {took:?}: {held} leases (polls allow {})",
        polls(took)
    );
    assert!(
        held <= polls(took),
        "{held} leases for 400 claims of a paused source in {took:?}"
    );

    // A live source's burst is leased in batches, and all of it forwarded.
    let before = lease_statements(&pool).await;
    let took = burst(&app, "live", 400).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while destination.count() < 400 {
        assert!(
            Instant::now() < deadline,
            "forwarded {} of 400",
            destination.count()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let live = lease_statements(&pool).await - before;
    println!("400 live claims in {took:?}: {live} leases");
    assert!(
        live <= 400 / 4 + polls(took),
        "{live} leases for 400 claims in {took:?}"
    );
    shutdown.cancel();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_burst_beyond_one_batch_is_forwarded_by_wake_ups_alone(pool: PgPool) {
    // Answers held 3 s: every delivery must reach the destination before the
    // first answer could come back, so the burst (over three batches) was
    // leased by several workers at once, woken, not polled (polling is off).
    const HOLD: Duration = Duration::from_secs(3);
    let held = Scripted {
        status: 200,
        headers: vec![],
        delay: HOLD,
    };
    let destination = Destination::start(vec![held; 100]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "live"
provider = "github"
secrets = ["gh-secret"]
destination = "{}"
"#,
            destination.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    let mut workers = Workers::new(&app.services);
    workers.poll = Duration::from_secs(3600);
    let shutdown = CancellationToken::new();
    let _running = workers.spawn(WORKERS, shutdown.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;

    let statuses = futures_util::future::join_all((0..100).map(|i| {
        let (id, app) = (format!("b-{i}"), &app);
        async move {
            let body = format!(r#"{{"n":"{id}"}}"#);
            app.github_delivery("live", &id, &body, b"gh-secret").await
        }
    }))
    .await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let sent = Instant::now();
    while destination.count() < 100 {
        assert!(
            sent.elapsed() < HOLD - Duration::from_millis(500),
            "{} of 100 reached the destination before the first answer could return",
            destination.count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_destination_that_takes_no_connection_rests_and_then_gets_every_event_once(pool: PgPool) {
    use std::sync::{Arc, Mutex};
    // A port nothing listens on yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "down"
provider = "github"
secrets = ["gh-secret"]
destination = "http://127.0.0.1:{port}/hook"
max_attempts = 1000
"#
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    // Retries due at once: without the rest, workers would try without pause.
    let mut workers = app.workers();
    workers.unreachable_max = Duration::from_secs(1);
    let shutdown = CancellationToken::new();
    let _running = workers.spawn(WORKERS, shutdown.clone());
    burst(&app, "down", 200).await;
    let attempts = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM attempts")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_first = attempts().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let resting = attempts().await - after_first;
    println!("{after_first} attempts in the first second, {resting} in the next two");
    // Probes of one batch (32) each, resting 250 ms, 500 ms, then 1 s:
    // about four in two seconds (six allowed for timers on a busy machine).
    // Without the rest, retries due at once would be tried without pause.
    assert!(
        resting <= 6 * 32,
        "{resting} attempts in 2 s on a destination that is down"
    );

    // The destination comes up: every event reaches it, each once.
    let keys: Arc<Mutex<Vec<String>>> = Default::default();
    let seen = keys.clone();
    let app_router = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let seen = seen.clone();
            async move {
                let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                seen.lock().unwrap().push(key);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, app_router).await.unwrap() });
    let deadline = Instant::now() + Duration::from_secs(30);
    while keys.lock().unwrap().len() < 200 {
        assert!(
            Instant::now() < deadline,
            "{} of 200 reached the destination once it was up",
            keys.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let keys = keys.lock().unwrap().clone();
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!((keys.len(), distinct.len()), (200, 200), "each event once");
    shutdown.cancel();
}

/// Issue 37: a lease's plan is made once per connection, from the
/// statistics of that moment. A quiet queue's say no dispatch waits; when a
/// backlog forms, a plan that reached the due rows through the queue's
/// indexes joined each of them to every candidate (53 s a lease in
/// bench/pipeline). The lease reaches rows through its candidates only:
/// what it reads follows what it leases, not the backlog.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_lease_reads_its_candidates_not_a_backlog_its_statistics_never_saw(pool: PgPool) {
    crate::helpers::track_statements(&pool).await;
    let app = spawn_app(
        pool.clone(),
        test_config(
            "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"http://127.0.0.1:9/unused\"\n",
            &[],
        ),
    )
    .await;
    app.stop_serving();
    // 20,000 events forwarded long ago, analyzed so: nothing waits.
    sqlx::raw_sql(
        "INSERT INTO events (id, source, idem_key, first_delivery_id, first_seen_at, last_seen_at)
         SELECT g, 'gh', 'k' || g, g, now() - interval '1 hour', now() - interval '1 hour'
         FROM generate_series(1, 20000) g;
         INSERT INTO dispatches (event_id, destination, source, state, state_changed_at, completed_at,
                                 attempt_count)
         SELECT g, 'default', 'gh', 'completed', now() - interval '1 hour', now() - interval '1 hour', 1
         FROM generate_series(1, 20000) g;
         ANALYZE dispatches; ANALYZE events;",
    )
    .execute(&pool)
    .await
    .unwrap();
    // Then all of them wait again (an operator's bulk re-delivery, say).
    sqlx::query(
        "UPDATE dispatches SET state = 'queued', completed_at = NULL,
             next_attempt_at = now() - interval '1 second'",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(&pool)
        .await
        .unwrap();
    // As the workers lease: their own connection, generic plans.
    let mut conn = sqlx::PgConnection::connect_with(
        &(*pool.connect_options())
            .clone()
            .options([("plan_cache_mode", "force_generic_plan")]),
    )
    .await
    .unwrap();
    let runnable = app.workers().runnable();
    let mut leased = 0;
    for round in 0..5 {
        let got = replaysafe_core::events::lease(&mut conn, &format!("w{round}"), 32, &runnable)
            .await
            .unwrap();
        leased += got.len();
    }
    assert_eq!(leased, 5 * 32);
    let (calls, buffers): (i64, i64) = sqlx::query_as(
        "SELECT sum(calls)::bigint, sum(shared_blks_hit + shared_blks_read)::bigint
         FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND query LIKE 'WITH runnable AS%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(calls, 5);
    // About a hundred pages for 32 leased (the candidates, their keys,
    // their events, their payloads' days); the plan that walked the
    // backlog read hundreds of thousands.
    assert!(
        buffers / calls < 5_000,
        "a lease of 32 read {} pages with 20,000 waiting",
        buffers / calls
    );
}
