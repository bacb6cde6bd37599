//! Issue 20: new events go from their claim straight to this process's
//! workers (`processing::handoff`), leased at the claim with their first
//! attempt begun. What must hold: each is forwarded once and no lease
//! statement looks for it; those never begun (stopping, paused, waited too
//! long) go back to `queued` with no trace of an attempt; and those a dead
//! process held are taken over once their lease expires.

use std::time::{Duration, Instant};

use replaysafe_core::db::MIGRATOR;
use replaysafe_core::processing::worker::Workers;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::helpers::{lease_statements, spawn_app, test_config, Destination, TestApp};

fn config(destination: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "live"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
attempt_timeout_secs = 1
"#
        ),
        &[],
    )
}

async fn send(app: &TestApp, from: usize, n: usize) {
    let statuses = futures_util::future::join_all((from..from + n).map(|i| {
        let id = format!("h-{i}");
        async move {
            let body = format!(r#"{{"n":"{id}"}}"#);
            app.github_delivery("live", &id, &body, b"gh-secret").await
        }
    }))
    .await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
}

async fn wait_for(destination: &Destination, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while destination.count() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} reached the destination",
            destination.count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (state, attempt_count, attempts rows, open attempts) per event, in key order.
async fn events(pool: &PgPool) -> Vec<(String, i32, i64, i64)> {
    sqlx::query_as(
        "SELECT e.state, e.attempt_count,
                (SELECT count(*) FROM attempts a WHERE a.event_id = e.id),
                (SELECT count(*) FROM attempts a WHERE a.event_id = e.id AND a.finished_at IS NULL)
         FROM event_summaries e ORDER BY e.idem_key",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Every key the destination received, each as often as it came.
fn received_keys(destination: &Destination) -> Vec<String> {
    let mut keys = destination.keys();
    keys.sort();
    keys
}

/// Every event in `expected`'s (state, attempt count, attempts, open attempts).
async fn assert_all_events(pool: &PgPool, expected: (&str, i32, i64, i64)) {
    let expected = (expected.0.to_owned(), expected.1, expected.2, expected.3);
    let rows = events(pool).await;
    assert!(
        rows.iter().all(|r| *r == expected),
        "not all {expected:?}: {:?}",
        rows.iter().find(|r| **r != expected)
    );
}

fn assert_each_once(destination: &Destination, n: usize) {
    let keys = received_keys(destination);
    let mut distinct = keys.clone();
    distinct.dedup();
    assert_eq!((keys.len(), distinct.len()), (n, n), "each event once");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn claims_reach_the_workers_with_no_lease_statement(pool: PgPool) {
    crate::helpers::track_statements(&pool).await;
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let mut workers = Workers::new(&app.services);
    // No polling: any lease now would be one the claims caused.
    workers.poll = Duration::from_secs(3600);
    let shutdown = CancellationToken::new();
    let _running = workers.spawn(8, shutdown.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = lease_statements(&pool).await;
    for round in 0..4 {
        send(&app, round * 50, 50).await;
    }
    wait_for(&destination, 200).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        lease_statements(&pool).await - before,
        0,
        "lease statements for handed-over claims"
    );
    assert_each_once(&destination, 200);
    assert_eq!(events(&pool).await.len(), 200);
    // Each completed by one attempt.
    assert_all_events(&pool, ("completed", 1, 1, 0)).await;
    shutdown.cancel();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn events_never_begun_go_back_to_queued_without_an_attempt(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    // Claims are handed over with no worker to take them yet.
    app.services.inbox.open(Duration::from_secs(25));
    send(&app, 0, 20).await;
    assert!(
        events(&pool)
            .await
            .iter()
            .all(|r| r == &("processing".to_owned(), 1, 0, 0)),
        "claimed leased to the inbox, its attempt written only when it ends: {:?}",
        events(&pool).await
    );

    // Workers stopping at once: what waits goes back, nothing is forwarded.
    let stopped = CancellationToken::new();
    stopped.cancel();
    let mut stopping = Workers::new(&app.services).spawn(2, stopped);
    while stopping.join_next().await.is_some() {}
    assert_eq!(destination.count(), 0);
    let rows = events(&pool).await;
    assert!(
        rows.iter().all(|r| r == &("queued".to_owned(), 0, 0, 0)),
        "released with no trace of an attempt: {rows:?}"
    );
    assert!(app.services.inbox.is_empty());

    // A paused source's handed-over events are not begun either.
    app.services.inbox.open(Duration::from_secs(25));
    send(&app, 100, 10).await;
    // Paused as an operator's click does it: the workers read it from the database.
    sqlx::query("UPDATE sources SET paused_override = true WHERE slug = 'live'")
        .execute(&pool)
        .await
        .unwrap();
    app.services.wake.set_paused("live", true);
    let workers = Workers::new(&app.services);
    let shutdown = CancellationToken::new();
    let _running = workers.spawn(2, shutdown.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !app.services.inbox.is_empty() || events(&pool).await.iter().any(|r| r.0 != "queued") {
        assert!(Instant::now() < deadline, "{:?}", events(&pool).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(destination.count(), 0, "a paused source forwarded");

    // Resumed, every one of the 30 is leased and forwarded once.
    sqlx::query("UPDATE sources SET paused_override = NULL WHERE slug = 'live'")
        .execute(&pool)
        .await
        .unwrap();
    app.services.wake.set_paused("live", false);
    app.services.wake.work();
    wait_for(&destination, 30).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_each_once(&destination, 30);
    assert_all_events(&pool, ("completed", 1, 1, 0)).await;
    shutdown.cancel();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn events_waiting_past_half_their_margin_are_not_begun_but_leased_again(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let margin = Duration::from_millis(800);
    app.services.inbox.open(margin);
    send(&app, 0, 20).await;
    tokio::time::sleep(margin / 2 + Duration::from_millis(100)).await;
    let mut workers = Workers::new(&app.services);
    workers.lease_margin = margin;
    let shutdown = CancellationToken::new();
    let _running = workers.spawn(2, shutdown.clone());
    wait_for(&destination, 20).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_each_once(&destination, 20);
    // The attempt that never began left no row: one attempt each, by a lease.
    let workers_of: Vec<String> = sqlx::query_scalar("SELECT worker FROM attempts")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(workers_of.len(), 20);
    let inbox = app.services.inbox.owner_name();
    assert!(
        workers_of.iter().all(|w| w != inbox),
        "an attempt begun after half the margin: {workers_of:?}"
    );
    assert_all_events(&pool, ("completed", 1, 1, 0)).await;
    shutdown.cancel();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn events_a_dead_process_held_are_taken_over_once_their_lease_expires(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    // The process that dies: its claims are handed over, never forwarded.
    let dead = spawn_app(pool.clone(), config(&destination.url)).await;
    dead.services.inbox.open(Duration::from_secs(1));
    send(&dead, 0, 20).await;
    drop(dead);

    // Another process: nothing to take while the leases (1 s timeout + 1 s) last.
    let other = spawn_app(pool.clone(), config(&destination.url)).await;
    let mut workers = other.workers();
    workers.lease_margin = Duration::from_secs(1);
    assert_eq!(workers.run_once("w-other").await.unwrap(), 0);
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let mut taken = 0;
    while taken < 20 {
        let n = workers.run_once("w-other").await.unwrap();
        assert!(n > 0, "took over {taken} of 20");
        taken += n;
    }
    assert_each_once(&destination, 20);
    // The dead holder's attempt closed, the second completed.
    assert_all_events(&pool, ("completed", 2, 2, 0)).await;
    let abandoned: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM attempts WHERE number = 1 AND error = 'worker lost its lease; taken over'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(abandoned, 20);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn retries_come_due_while_claims_stream_in(pool: PgPool) {
    // The first request fails: its retry, due at once, is found only by a
    // lease, while new claims keep arriving through the inbox.
    let destination = Destination::start(vec![crate::helpers::Scripted::status(500)]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let shutdown = CancellationToken::new();
    let _running = app.workers().spawn(8, shutdown.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(&app, 0, 1).await;
    let streaming = Instant::now();
    let mut sent = 1;
    let retried = || {
        received_keys(&destination)
            .iter()
            .filter(|k| k.ends_with(":h-0"))
            .count()
            == 2
    };
    while !retried() {
        assert!(
            streaming.elapsed() < Duration::from_secs(5),
            "the retry was not leased within 5 s of steady claims"
        );
        send(&app, sent, 2).await;
        sent += 2;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    wait_for(&destination, sent + 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let keys = received_keys(&destination);
    let mut distinct = keys.clone();
    distinct.dedup();
    assert_eq!(
        (keys.len(), distinct.len()),
        (sent + 1, sent),
        "only h-0 twice"
    );
    shutdown.cancel();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn copies_in_one_batch_and_a_full_inbox_still_forward_each_event_once(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    // Open, no worker yet: the inbox fills, later claims are queued.
    app.services.inbox.open(Duration::from_secs(25));
    let room = replaysafe_core::processing::handoff::ROOM;
    let n = room + 44;
    for chunk in 0..n / 50 + 1 {
        let (from, count) = (chunk * 50, 50.min(n - chunk * 50));
        // Each delivery three times at once: copies share batches.
        let statuses = futures_util::future::join_all(
            (from..from + count)
                .flat_map(|i| {
                    let id = format!("h-{i}");
                    (0..3).map(move |_| (id.clone(), format!(r#"{{"n":"h-{i}"}}"#)))
                })
                .map(|(id, body)| {
                    let app = &app;
                    async move { app.github_delivery("live", &id, &body, b"gh-secret").await }
                }),
        )
        .await;
        assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    }
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM event_summaries GROUP BY state ORDER BY state")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        vec![
            ("processing".to_owned(), room as i64),
            ("queued".to_owned(), 44)
        ],
        "the inbox holds ROOM events, the rest wait queued"
    );
    let shutdown = CancellationToken::new();
    let _running = app.workers().spawn(4, shutdown.clone());
    wait_for(&destination, n).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_each_once(&destination, n);
    assert_all_events(&pool, ("completed", 1, 1, 0)).await;
    shutdown.cancel();
}

/// Under a backlog, a lease takes a batch for each worker waiting behind it
/// (one statement, not one each), under its own holder; workers stopped
/// before they took theirs leave them `queued`, not leased to nobody.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_lease_takes_for_the_workers_behind_it_and_gives_back_what_they_did_not_take(
    pool: PgPool,
) {
    let destination = Destination::start(vec![
        crate::helpers::Scripted {
            status: 200,
            headers: vec![],
            delay: Duration::from_millis(300),
        };
        1000
    ])
    .await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    send(&app, 0, 400).await;
    let shutdown = CancellationToken::new();
    let mut running = Workers::new(&app.services).spawn(8, shutdown.clone());
    // By then the second lease took for the six or seven workers queued
    // behind it while the first ran.
    wait_for(&destination, 100).await;
    shutdown.cancel();
    while running.join_next().await.is_some() {}

    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM dispatches GROUP BY state ORDER BY state")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(
        states
            .iter()
            .all(|(s, _)| s == "completed" || s == "queued"),
        "stopped, every dispatch is completed or queued again: {states:?}"
    );
    let completed = states
        .iter()
        .find(|(s, _)| s == "completed")
        .map_or(0, |(_, n)| *n);
    assert_each_once(&destination, completed as usize);
    let most: i64 = sqlx::query_scalar(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM attempts GROUP BY worker) w",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        most > replaysafe_core::processing::worker::LEASE_BATCH,
        "one lease's holder forwarded more than a worker's batch: {most}"
    );

    // What went back is leased and forwarded once by the next workers.
    let shutdown = CancellationToken::new();
    let _running = Workers::new(&app.services).spawn(8, shutdown.clone());
    wait_for(&destination, 400).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_each_once(&destination, 400);
    shutdown.cancel();
}
