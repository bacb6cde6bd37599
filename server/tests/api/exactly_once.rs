//! The holes found in the exactly-once promise (issue 13), each as the
//! interleaving that broke it: nothing may run twice, nothing may stick.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use replaysafe_core::db::MIGRATOR;
use replaysafe_core::processing::worker::Workers;
use sha2::Sha256;
use sqlx::PgPool;

use crate::helpers::{spawn_app, state_of, test_config, Destination, Scripted, TestApp};

fn github_source(slug: &str, destination: &str, timeout_secs: u32, max_attempts: u32) -> String {
    format!(
        r#"
[[source]]
slug = "{slug}"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
attempt_timeout_secs = {timeout_secs}
max_attempts = {max_attempts}
"#
    )
}

fn slack_sync_source(destination: &str) -> String {
    format!(
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
    )
}

/// A Slack interactivity request to the `slack` source.
async fn interact(app: &TestApp, body: &str) -> reqwest::Response {
    app.slack_interaction("slack", body).await
}

async fn scalar_i64(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// The event id and first delivery id holding `key`.
async fn event_of(pool: &PgPool, key: &str) -> (i64, i64) {
    sqlx::query_as("SELECT id, first_delivery_id FROM events WHERE idem_key = $1")
        .bind(key)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Retention, once this delivery and every earlier one are 40 days old:
/// they go, with their payloads (events in flight keep theirs).
async fn prune_delivery(pool: &PgPool, delivery_id: i64) {
    sqlx::query("UPDATE deliveries SET received_at = now() - interval '40 days' WHERE id <= $1")
        .bind(delivery_id)
        .execute(pool)
        .await
        .unwrap();
    replaysafe_core::jobs::retention::prune(pool, 30, 30, 365)
        .await
        .unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE id = $1")
        .bind(delivery_id)
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "delivery {delivery_id} pruned");
}

/// A quick source's event sharing a worker's batch with a slow source's
/// event: its 2xx is recorded when it arrives, not when the slow one
/// returns, so its lease never lapses and nobody forwards it again.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_quick_success_is_recorded_before_a_slow_batchmate_returns(pool: PgPool) {
    let quick = Destination::start(vec![]).await;
    let slow = Destination::start(vec![Scripted {
        status: 200,
        headers: vec![],
        delay: Duration::from_secs(3),
    }])
    .await;
    let config = format!(
        "{}{}",
        github_source("quick", &quick.url, 1, 8),
        github_source("slow", &slow.url, 6, 8)
    );
    let app = spawn_app(pool.clone(), test_config(&config, &[])).await;
    assert_eq!(
        app.github_delivery("quick", "q-1", "{}", b"gh-secret")
            .await,
        200
    );
    assert_eq!(
        app.github_delivery("slow", "s-1", "{}", b"gh-secret").await,
        200
    );
    // Leases of the attempt timeout plus 1 s: the quick one's lasts 2 s,
    // shorter than the slow destination takes.
    let mut workers = app.workers();
    workers.lease_margin = Duration::from_secs(1);
    let batch = {
        let workers = workers.clone();
        tokio::spawn(async move { workers.run_once("batch-worker").await.unwrap() })
    };
    // Another worker keeps looking for expired leases meanwhile, once the
    // batch worker holds both.
    for _ in 0..100 {
        let held = scalar_i64(
            &pool,
            "SELECT count(*) FROM dispatches WHERE lease_owner = 'batch-worker'",
        )
        .await;
        if held == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let watcher = async {
        let mut taken = 0;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            taken += workers.run_once("watching-worker").await.unwrap();
        }
        taken
    };
    let taken = watcher.await;
    assert_eq!(batch.await.unwrap(), 2, "one batch leased both events");
    assert_eq!(taken, 0, "no lease lapsed, so nothing was taken over");
    assert_eq!(quick.count(), 1, "the quick event was forwarded once");
    assert_eq!(slow.count(), 1);
    assert_eq!(state_of(&pool, "q-1").await, "completed");
    assert_eq!(state_of(&pool, "s-1").await, "completed");
}

/// A sync-mode event re-delivered by an operator after it went dead is
/// forwarded once by the workers (no provider request waits for it), and a
/// later provider retry gets the stored answer.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_sync_redelivery_of_a_dead_event_is_forwarded_once(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&slack_sync_source(&destination.url), &[]),
    )
    .await;
    assert_eq!(interact(&app, "payload=dead").await.status(), 502);
    let key = format!(
        "sha256:{}",
        hex::encode(<Sha256 as sha2::Digest>::digest(b"payload=dead"))
    );
    assert_eq!(state_of(&pool, &key).await, "dead");
    let (_, first) = event_of(&pool, &key).await;
    let (status, result) = app
        .server_fn("redeliver", &format!("delivery_id={first}"))
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["requeued"], true, "{result}");
    assert_eq!(app.drain().await, 1, "the workers forward it");
    assert_eq!(destination.count(), 2);
    assert_eq!(state_of(&pool, &key).await, "completed");
    let retry = interact(&app, "payload=dead").await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["x-replaysafe-outcome"], "completed");
    assert_eq!(
        retry.text().await.unwrap(),
        "answer from the test destination"
    );
    assert_eq!(destination.count(), 2, "the retry got the stored answer");
}

/// An admin's force of a completed sync-mode event runs it once more.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_forced_sync_event_runs_once_more(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&slack_sync_source(&destination.url), &[]),
    )
    .await;
    assert_eq!(interact(&app, "payload=forced").await.status(), 200);
    let key = format!(
        "sha256:{}",
        hex::encode(<Sha256 as sha2::Digest>::digest(b"payload=forced"))
    );
    let (event, _) = event_of(&pool, &key).await;
    let (status, answer) = app
        .server_fn(
            "force",
            &format!("event_id={event}&confirm_key={key}&reason=replay+after+a+bug"),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(app.drain().await, 1);
    assert_eq!(app.drain().await, 0, "once");
    assert_eq!(destination.count(), 2);
    let forced = destination.received.lock().unwrap()[1].headers.clone();
    assert_eq!(forced["x-replaysafe-forced"], "true");
    assert_eq!(state_of(&pool, &key).await, "completed");
}

/// A paused sync-mode source forwards nothing by any path: the provider is
/// told to come back (503 with Retry-After), and once resumed the event is
/// forwarded once; later copies get the stored answer.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_paused_sync_source_forwards_nothing_until_resumed(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&slack_sync_source(&destination.url), &[]),
    )
    .await;
    let (status, _) = app
        .server_fn("source-paused", "slug=slack&paused=true")
        .await;
    assert_eq!(status, 200);
    let paused = interact(&app, "payload=paused").await;
    assert_eq!(paused.status(), 503);
    assert!(paused.headers().contains_key("retry-after"));
    let again = interact(&app, "payload=paused").await;
    assert_eq!(again.status(), 409, "held for the workers");
    assert_eq!(app.drain().await, 0, "paused: the workers leave it too");
    assert_eq!(destination.count(), 0);

    let (status, _) = app
        .server_fn("source-paused", "slug=slack&paused=false")
        .await;
    assert_eq!(status, 200);
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 1);
    let later = interact(&app, "payload=paused").await;
    assert_eq!(later.status(), 200);
    assert_eq!(later.headers()["x-replaysafe-outcome"], "completed");
    assert_eq!(destination.count(), 1, "forwarded once");
}

/// Forcing an event whose first delivery was pruned forwards a copy that
/// still holds the payload; with none left, the force is refused up front
/// with the reason, never retried for hours.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_force_uses_a_stored_copy_and_is_refused_without_one(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&github_source("gh", &destination.url, 2, 8), &[]),
    )
    .await;
    let body = r#"{"n":1}"#;
    assert_eq!(
        app.github_delivery("gh", "k-copy", body, b"gh-secret")
            .await,
        200
    );
    assert_eq!(app.drain().await, 1);
    assert_eq!(
        app.github_delivery("gh", "k-copy", body, b"gh-secret")
            .await,
        200
    );
    let (event, first) = event_of(&pool, "k-copy").await;
    prune_delivery(&pool, first).await;
    let (status, answer) = app
        .server_fn(
            "force",
            &format!("event_id={event}&confirm_key=k-copy&reason=lost+write"),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 2);
    assert_eq!(
        destination.received.lock().unwrap()[1].body,
        body.as_bytes()
    );
    assert_eq!(state_of(&pool, "k-copy").await, "completed");

    // Retention racing a force: the copy the force chose goes before the
    // worker leases the event; an older copy is forwarded instead.
    assert_eq!(
        app.github_delivery("gh", "k-copy", body, b"gh-secret")
            .await,
        200
    );
    let (status, answer) = app
        .server_fn(
            "force",
            &format!("event_id={event}&confirm_key=k-copy&reason=again"),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    sqlx::query(
        "DELETE FROM deliveries WHERE id = (SELECT first_delivery_id FROM events WHERE id = $1)",
    )
    .bind(event)
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 3);
    assert_eq!(
        destination.received.lock().unwrap()[2].body,
        body.as_bytes()
    );
    assert_eq!(state_of(&pool, "k-copy").await, "completed");

    // Its only delivery pruned: nothing to forward, said at once.
    let body = r#"{"n":3}"#;
    assert_eq!(
        app.github_delivery("gh", "k-gone", body, b"gh-secret")
            .await,
        200
    );
    assert_eq!(app.drain().await, 1);
    let (event, first) = event_of(&pool, "k-gone").await;
    prune_delivery(&pool, first).await;
    let (status, answer) = app
        .server_fn(
            "force",
            &format!("event_id={event}&confirm_key=k-gone&reason=lost+write"),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer.to_string().contains("nothing to forward"),
        "{answer}"
    );
    assert_eq!(state_of(&pool, "k-gone").await, "completed");
    assert_eq!(app.drain().await, 0);
    assert_eq!(destination.count(), 4);
}

/// A dead event whose first delivery was pruned, revived by re-delivering a
/// later copy, forwards that copy's payload.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_revived_event_forwards_the_redelivered_copy(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&github_source("gh", &destination.url, 2, 8), &[]),
    )
    .await;
    let body = r#"{"n":2}"#;
    assert_eq!(
        app.github_delivery("gh", "k-dead", body, b"gh-secret")
            .await,
        200
    );
    assert_eq!(app.drain().await, 1);
    assert_eq!(state_of(&pool, "k-dead").await, "dead");
    assert_eq!(
        app.github_delivery("gh", "k-dead", body, b"gh-secret")
            .await,
        200
    );
    let (_, first) = event_of(&pool, "k-dead").await;
    let copy: i64 = sqlx::query_scalar("SELECT max(id) FROM deliveries WHERE idem_key = 'k-dead'")
        .fetch_one(&pool)
        .await
        .unwrap();
    prune_delivery(&pool, first).await;
    let (status, result) = app
        .server_fn("redeliver", &format!("delivery_id={copy}"))
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["requeued"], true, "{result}");
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 2);
    assert_eq!(
        destination.received.lock().unwrap()[1].body,
        body.as_bytes()
    );
    assert_eq!(state_of(&pool, "k-dead").await, "completed");
}

/// The end-to-end clock of an event an operator revives starts at the
/// revive, not at a receipt a day before (replaysafe_end_to_end_seconds).
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_revived_event_is_timed_from_its_revival(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&github_source("gh", &destination.url, 2, 8), &[]),
    )
    .await;
    assert_eq!(
        app.github_delivery("gh", "k-old", r#"{"n":1}"#, b"gh-secret")
            .await,
        200
    );
    assert_eq!(app.drain().await, 1);
    assert_eq!(state_of(&pool, "k-old").await, "dead");
    sqlx::query(
        "UPDATE events SET first_seen_at = now() - interval '1 day' WHERE idem_key = 'k-old'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (_, first) = event_of(&pool, "k-old").await;
    let (status, result) = app
        .server_fn("redeliver", &format!("delivery_id={first}"))
        .await;
    assert_eq!(status, 200, "{result}");
    let leased = app.lease_as("w", 10).await;
    assert_eq!(leased.len(), 1);
    let waited = replaysafe_core::telemetry::metrics::unix_now() - leased[0].received;
    assert!(
        (0.0..60.0).contains(&waited),
        "timed from {waited} s ago, not from the revive"
    );
}

/// Two processes on one database with different configs: each leases only
/// the events of sources it can forward, and neither leaves an attempt open.
#[sqlx::test(migrator = "MIGRATOR")]
async fn workers_lease_only_the_sources_their_process_has(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    // Another process, configured with another source only, started first.
    let other_config = Arc::new(test_config(
        &github_source("other", &destination.url, 2, 8),
        &[],
    ));
    replaysafe_core::db::prepare(pool.clone(), other_config.clone(), Default::default()).await;
    let other = Workers::new(&replaysafe_core::processing::Services::new(
        pool.clone(),
        other_config,
        Default::default(),
    ));
    let app = spawn_app(
        pool.clone(),
        test_config(&github_source("gh", &destination.url, 2, 8), &[]),
    )
    .await;
    assert_eq!(
        app.github_delivery("gh", "k-mine", "{}", b"gh-secret")
            .await,
        200
    );
    assert_eq!(other.run_once("other-process").await.unwrap(), 0);
    assert_eq!(
        scalar_i64(&pool, "SELECT count(*) FROM attempts").await,
        0,
        "nothing leased, so no attempt left open"
    );
    assert_eq!(state_of(&pool, "k-mine").await, "queued");
    assert_eq!(app.drain().await, 1, "its own process forwards it");
    assert_eq!(destination.count(), 1);

    // A process started later syncs the sources table to its own config:
    // the first still forwards its own sources.
    replaysafe_core::db::prepare(
        pool.clone(),
        Arc::new(test_config(
            &github_source("other", &destination.url, 2, 8),
            &[],
        )),
        Default::default(),
    )
    .await;
    assert_eq!(
        app.github_delivery("gh", "k-later", r#"{"n":2}"#, b"gh-secret")
            .await,
        200
    );
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 2);
    assert_eq!(
        scalar_i64(
            &pool,
            "SELECT count(*) FROM attempts WHERE finished_at IS NULL"
        )
        .await,
        0
    );
}

/// The gatherer that holds only deliveries of keys a batch in flight is
/// claiming must wake when that batch returns, with no further traffic:
/// copies of one key sent at once, over and over, on several runtime
/// threads, are each answered.
#[test]
fn held_claims_are_answered_without_further_traffic() {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL names the test server");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let admin = PgPool::connect(&url).await.unwrap();
        let name = format!("replaysafe_wakeup_{}", std::process::id());
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&admin)
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        let (server, _) = url.rsplit_once('/').unwrap();
        let pool = PgPool::connect(&format!("{server}/{name}")).await.unwrap();
        MIGRATOR.run(&pool).await.unwrap();
        let claims = replaysafe_core::receiver::batch::ClaimBatcher::start(pool.clone(), 2);
        for round in 0..150 {
            let copies = (0..6).map(|_| {
                let claims = claims.clone();
                tokio::spawn(async move {
                    claims
                        .claim(crate::receiver::pending_claim(format!("wake-{round}")))
                        .await
                })
            });
            for copy in copies.collect::<Vec<_>>() {
                let answered = tokio::time::timeout(Duration::from_secs(5), copy).await;
                assert!(
                    matches!(answered, Ok(Ok(Ok(_)))),
                    "round {round}: a held copy was never answered"
                );
            }
        }
        pool.close().await;
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&admin)
            .await
            .unwrap();
    });
}

/// The outcome header and the recorded (key, event, verification) of the
/// newest delivery.
async fn newest_delivery(pool: &PgPool) -> (Option<String>, Option<i64>, String, String) {
    sqlx::query_as(
        "SELECT idem_key, event_id, outcome, verification FROM deliveries ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// GitHub signs neither its delivery id nor a timestamp: one captured
/// request re-posted under a fresh id is a duplicate of the event it
/// repeats, never forwarded again, and the record says why.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_captured_request_reposted_under_a_fresh_id_is_not_run_again(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&github_source("gh", &destination.url, 2, 8), &[]),
    )
    .await;
    let body = r#"{"action":"opened","number":7}"#;
    assert_eq!(
        app.github_delivery("gh", "orig", body, b"gh-secret").await,
        200
    );
    assert_eq!(app.drain().await, 1);
    let (event, _) = event_of(&pool, "orig").await;
    assert_eq!(
        app.github_delivery("gh", "forged-1", body, b"gh-secret")
            .await,
        200
    );
    let (key, event_id, outcome, verification) = newest_delivery(&pool).await;
    assert_eq!(
        key.as_deref(),
        Some("forged-1"),
        "recorded under its own key"
    );
    assert_eq!((event_id, outcome.as_str()), (Some(event), "completed"));
    assert!(
        verification.contains("same signed content as event orig"),
        "{verification}"
    );
    // Several at once, before anything is stored: one claim between them.
    let body = r#"{"action":"opened","number":8}"#;
    let copies = (0..6).map(|i| {
        let (app, id) = (&app, format!("burst-{i}"));
        async move { app.github_delivery("gh", &id, body, b"gh-secret").await }
    });
    for status in futures_util::future::join_all(copies).await {
        assert_eq!(status, 200);
    }
    assert_eq!(
        scalar_i64(
            &pool,
            "SELECT count(*) FROM events WHERE idem_key LIKE 'burst-%'"
        )
        .await,
        1
    );
    assert_eq!(app.drain().await, 1);
    assert_eq!(app.drain().await, 0);
    assert_eq!(destination.count(), 2, "two events, each forwarded once");
    assert_eq!(scalar_i64(&pool, "SELECT count(*) FROM events").await, 2);
}

/// A source may turn the guard off (a provider that sends one content as
/// two events): then only the key dedupes.
#[sqlx::test(migrator = "MIGRATOR")]
async fn the_replay_guard_can_be_turned_off_per_source(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let config = format!(
        "{}replay_guard = false\n",
        github_source("gh", &destination.url, 2, 8)
    );
    let app = spawn_app(pool.clone(), test_config(&config, &[])).await;
    let body = r#"{"same":true}"#;
    assert_eq!(
        app.github_delivery("gh", "one", body, b"gh-secret").await,
        200
    );
    assert_eq!(
        app.github_delivery("gh", "two", body, b"gh-secret").await,
        200
    );
    assert_eq!(scalar_i64(&pool, "SELECT count(*) FROM events").await, 2);
    assert_eq!(app.drain().await, 2);
}

/// Twilio signs the URL and the sorted form parameters, not its
/// idempotency token: a re-post under a new token, even with the parameters
/// reordered, is the same signed content.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_twilio_repost_under_a_new_token_is_a_duplicate(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(
            &format!(
                r#"
[[source]]
slug = "tw"
provider = "twilio"
secrets = ["tw-token"]
public_url = "https://example.com/hooks/tw"
destination = "{}"
"#,
                destination.url
            ),
            &[],
        ),
    )
    .await;
    let sign = |params: &[(&str, &str)]| {
        let mut sorted = params.to_vec();
        sorted.sort();
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(b"tw-token").unwrap();
        mac.update(b"https://example.com/hooks/tw");
        for (k, v) in sorted {
            mac.update(k.as_bytes());
            mac.update(v.as_bytes());
        }
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            mac.finalize().into_bytes(),
        )
    };
    let post = |token: &'static str, body: &'static str, signature: String| {
        app.client
            .post(app.url("/hooks/tw"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("i-twilio-idempotency-token", token)
            .header("x-twilio-signature", signature)
            .body(body)
            .send()
    };
    let params = [("Body", "hi"), ("From", "+1555"), ("MessageSid", "SM1")];
    let first = post(
        "tok-1",
        "Body=hi&From=%2B1555&MessageSid=SM1",
        sign(&params),
    )
    .await
    .unwrap();
    assert_eq!(first.headers()["x-replaysafe-outcome"], "claimed");
    let again = post(
        "tok-2",
        "MessageSid=SM1&Body=hi&From=%2B1555",
        sign(&params),
    )
    .await
    .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["x-replaysafe-outcome"], "in_progress");
    assert_eq!(scalar_i64(&pool, "SELECT count(*) FROM events").await, 1);
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 1);
}

const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A Standard Webhooks delivery signed at `ts` with `secret`.
async fn standard_delivery(app: &TestApp, id: &str, ts: i64, body: &str, secret: &str) -> u16 {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(secret.trim_start_matches("whsec_")).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    let signature = format!("v1,{}", b64.encode(mac.finalize().into_bytes()));
    app.client
        .post(app.url("/hooks/std"))
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Re-delivering a delivery that was rejected for its timestamp would undo
/// the protection against captured replays: only an admin may, with a typed
/// reason, and the audit log records it. Other rejections stay an
/// operator's to retry.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_timestamp_rejection_is_re_delivered_only_by_an_admin_with_a_reason(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let config = format!(
        r#"
[[source]]
slug = "std"
provider = "standard"
secrets = ["{STANDARD_SECRET}"]
destination = "{}"
"#,
        destination.url
    );
    let app = spawn_app(pool.clone(), test_config(&config, &[])).await;
    let an_hour_ago = chrono::Utc::now().timestamp() - 3600;
    assert_eq!(
        standard_delivery(&app, "msg_late", an_hour_ago, "{}", STANDARD_SECRET).await,
        401
    );
    let (late, kind): (i64, Option<String>) =
        sqlx::query_as("SELECT id, reject_kind FROM deliveries WHERE idem_key IS NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(kind.as_deref(), Some("timestamp"));

    let operator = app.session("operator").await;
    let (status, answer) = app
        .server_fn_as(Some(&operator), "redeliver", &format!("delivery_id={late}"))
        .await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.to_string().contains("only an admin"), "{answer}");
    let (status, answer) = app
        .server_fn("redeliver", &format!("delivery_id={late}"))
        .await;
    assert_eq!(status, 400, "an admin gives a reason: {answer}");
    assert_eq!(scalar_i64(&pool, "SELECT count(*) FROM events").await, 0);

    let (status, answer) = app
        .server_fn(
            "redeliver",
            &format!("delivery_id={late}&past_window_reason=provider+clock+was+off"),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "claimed");
    assert_eq!(answer["past_window"], true);
    let audited: (String, String) = sqlx::query_as(
        "SELECT action, detail->>'reason' FROM audit_log
         WHERE action LIKE 'redeliver%' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        audited,
        (
            "redeliver.past_window".to_owned(),
            "provider clock was off".to_owned()
        )
    );
    assert_eq!(app.drain().await, 1);
    assert_eq!(destination.count(), 1);

    // A bad signature is no protection to undo: an operator may retry it.
    let now = chrono::Utc::now().timestamp();
    let wrong = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    assert_eq!(
        standard_delivery(&app, "msg_bad", now, "{}", wrong).await,
        401
    );
    let bad: i64 = sqlx::query_scalar("SELECT max(id) FROM deliveries WHERE outcome = 'rejected'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let (status, answer) = app
        .server_fn_as(Some(&operator), "redeliver", &format!("delivery_id={bad}"))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "rejected");
}

/// A replay posted while the event it repeats is being claimed (its
/// transaction not yet committed) waits for that claim and is its
/// duplicate: the guard looks again with a fresh snapshot.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_replay_racing_the_original_claim_is_its_duplicate(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&github_source("gh", &destination.url, 2, 8), &[]),
    )
    .await;
    let body = r#"{"action":"opened","number":9}"#;
    let digest = <Sha256 as sha2::Digest>::digest(body.as_bytes()).to_vec();
    // The original's claim, held open.
    let mut original = pool.begin().await.unwrap();
    replaysafe_core::events::guard(&mut original, &["gh"], &[&digest], &["orig"])
        .await
        .unwrap();
    let plan = [replaysafe_core::events::Planned {
        destination: "default",
        wanted: true,
        ordering_key: None,
    }];
    replaysafe_core::events::claim(&mut original, "gh", "orig", &plan, None, None)
        .await
        .unwrap()
        .expect("claimed");
    let (status, ()) = tokio::join!(
        app.github_delivery("gh", "forged", body, b"gh-secret"),
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            original.commit().await.unwrap();
        }
    );
    assert_eq!(status, 200);
    let (key, _, outcome, verification) = newest_delivery(&pool).await;
    assert_eq!(key.as_deref(), Some("forged"));
    assert_eq!(outcome, "in_progress", "{verification}");
    assert_eq!(scalar_i64(&pool, "SELECT count(*) FROM events").await, 1);
}

/// A sync-mode event no provider request will move on is adopted by the
/// workers: its holder vanished (lease expired), or its provider did not
/// retry a failed attempt within the grace. The abandoned attempt is closed.
#[sqlx::test(migrator = "MIGRATOR")]
async fn sync_events_their_provider_abandoned_are_adopted_by_the_workers(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(500)]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&slack_sync_source(&destination.url), &[]),
    )
    .await;
    assert_eq!(interact(&app, "payload=failed").await.status(), 502);
    let key = format!(
        "sha256:{}",
        hex::encode(<Sha256 as sha2::Digest>::digest(b"payload=failed"))
    );
    assert_eq!(state_of(&pool, &key).await, "retrying");
    assert_eq!(
        app.drain().await,
        0,
        "within the grace the provider retries"
    );
    let mut workers = app.workers();
    workers.request_grace = Duration::ZERO;
    assert_eq!(workers.run_once("adopter").await.unwrap(), 1);
    assert_eq!(state_of(&pool, &key).await, "completed");
    assert_eq!(destination.count(), 2);
    let later = interact(&app, "payload=failed").await;
    assert_eq!(later.headers()["x-replaysafe-outcome"], "completed");
    assert_eq!(destination.count(), 2);

    // A holder that died mid-attempt: once its lease lapses, a worker takes over.
    let holder = replaysafe_core::events::InlineLease {
        owner: "sync:crashed",
        secs: 0.0,
    };
    let mut tx = pool.begin().await.unwrap();
    let plan = [replaysafe_core::events::Planned {
        destination: "default",
        wanted: true,
        ordering_key: None,
    }];
    let (event, _) =
        replaysafe_core::events::claim(&mut tx, "slack", "orphan", &plan, None, Some(holder))
            .await
            .unwrap()
            .expect("claimed");
    tx.commit().await.unwrap();
    assert!(matches!(
        replaysafe_core::events::start_inline(&pool, event, "sync:crashed").await,
        Ok(replaysafe_core::events::Inline::Started { .. })
            | Ok(replaysafe_core::events::Inline::LeaseLost)
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // No payload was recorded for this hand-made claim: it goes dead, not stuck.
    assert_eq!(app.drain().await, 1);
    assert_eq!(state_of(&pool, "orphan").await, "dead");
    assert_eq!(
        scalar_i64(
            &pool,
            "SELECT count(*) FROM attempts WHERE finished_at IS NULL"
        )
        .await,
        0
    );
}

/// Retention forgetting a settled key while a recovered copy of it is being
/// claimed: the claim's insert finds the key held, retention deletes the
/// event and commits, and the claim (which found no event to count on) claims
/// the forgotten key anew; it once failed with RowNotFound and lost the copy.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_claim_racing_retention_claims_the_forgotten_key_anew(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(
        pool.clone(),
        test_config(&github_source("gh", &destination.url, 2, 8), &[]),
    )
    .await;
    let body = r#"{"n":"forgotten"}"#;
    assert_eq!(
        app.github_delivery("gh", "k-forgotten", body, b"gh-secret")
            .await,
        200
    );
    assert_eq!(app.drain().await, 1);
    let (old_event, _) = event_of(&pool, "k-forgotten").await;

    // Retention's first step: the settled event is locked.
    let mut retention = pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM events WHERE id = $1 FOR UPDATE")
        .bind(old_event)
        .execute(&mut *retention)
        .await
        .unwrap();
    let recovering = {
        let (pool, config) = (pool.clone(), app.config.clone());
        tokio::spawn(async move {
            let inbound = replaysafe_core::receiver::Inbound {
                query: None,
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("x-github-event".into(), "push".into()),
                    ("x-github-delivery".into(), "k-forgotten".into()),
                ],
                body: body.as_bytes().to_vec(),
                remote_addr: None,
            };
            let recovered = replaysafe_core::receiver::claim::Recovered {
                run_id: 0,
                from: "test".into(),
            };
            let source = config.source("gh").unwrap();
            replaysafe_core::receiver::accept_recovered(&pool, source, &inbound, recovered).await
        })
    };
    // The claim waits on the locked event before retention deletes it.
    let waiting = "SELECT count(*) FROM pg_stat_activity
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while scalar_i64(&pool, waiting).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the claim never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::query("DELETE FROM dispatches WHERE event_id = $1")
        .bind(old_event)
        .execute(&mut *retention)
        .await
        .unwrap();
    sqlx::query("DELETE FROM events WHERE id = $1")
        .bind(old_event)
        .execute(&mut *retention)
        .await
        .unwrap();
    retention.commit().await.unwrap();

    let claimed = recovering
        .await
        .unwrap()
        .expect("the recovered copy is claimed");
    assert_eq!(claimed.outcome, replaysafe_types::states::Outcome::Claimed);
    let (new_event, first) = event_of(&pool, "k-forgotten").await;
    assert_eq!((new_event, first), (claimed.event_id, claimed.delivery_id));
    assert_ne!(new_event, old_event);
    assert_eq!(app.drain().await, 1);
    assert_eq!(
        destination.count(),
        2,
        "the forgotten key runs as a new event"
    );
    assert_eq!(state_of(&pool, "k-forgotten").await, "completed");
}
