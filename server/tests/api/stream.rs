//! `GET /api/v1/events/stream` and `replaysafe listen` (issue 38): new
//! events in the order their claims committed, none skipped when a claim
//! commits after a later one, none twice across a cut, four streams per
//! token, a revoked token's stream ended within seconds, bodies masked
//! for everyone but an admin.

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use rand::{Rng, SeedableRng};
use replaysafe_core::db::MIGRATOR;
use replaysafe_core::ops::stream::{self, Cursor, Filter};
use serde_json::Value;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{
    gh_config, hmac_hex, make_token, spawn_app, test_config, DbProxy, Destination, TestApp,
};

type Messages =
    std::pin::Pin<Box<dyn Stream<Item = Result<eventsource_stream::Event, String>> + Send>>;

/// Opens the stream as `token`; answers the status and, when 200, its messages.
async fn open(app: &TestApp, token: &str, query: &str) -> (u16, Option<Messages>) {
    let response = app
        .client
        .get(app.url(&format!("/api/v1/events/stream{query}")))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    if status != 200 {
        return (status, None);
    }
    let chunks = futures_util::stream::unfold(response, |mut response| async move {
        let chunk = response.chunk().await.transpose()?;
        Some((chunk, response))
    });
    let messages = chunks.eventsource().map(|m| m.map_err(|e| e.to_string()));
    (status, Some(Box::pin(messages)))
}

/// The next message within `wait`, or None (the stream ended, or was quiet).
async fn next(messages: &mut Messages, wait: Duration) -> Option<eventsource_stream::Event> {
    match tokio::time::timeout(wait, messages.next()).await {
        Ok(Some(Ok(message))) => Some(message),
        _ => None,
    }
}

/// The next event message (skipping positions), as JSON.
async fn next_event(messages: &mut Messages, wait: Duration) -> Option<Value> {
    let until = tokio::time::Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let message = next(messages, left).await?;
        if message.event == "message" {
            return Some(serde_json::from_str(&message.data).unwrap());
        }
    }
}

async fn deliver(app: &TestApp, slug: &str, key: &str, body: &str) {
    let status = app.github_delivery(slug, key, body, b"gh-secret").await;
    assert!((200..300).contains(&status), "{key}: {status}");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_claim_that_commits_after_a_later_one_is_held_for_not_skipped(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let token = make_token(&pool, "viewer", "viewer", None).await;
    let (status, messages) = open(&app, &token, "?source=gh").await;
    assert_eq!(status, 200);
    let mut messages = messages.unwrap();
    let start = next(&mut messages, Duration::from_secs(5)).await.unwrap();
    assert_eq!(start.event, "start");
    let start: Value = serde_json::from_str(&start.data).unwrap();
    assert_eq!(start["sources"], serde_json::json!(["gh"]));
    assert_eq!(start["masked"], true, "a viewer's bodies are masked");

    // A claim whose transaction is still open takes the lower id...
    let mut late = pool.begin().await.unwrap();
    let late_id: i64 = sqlx::query_scalar(
        "INSERT INTO events (source, idem_key, first_delivery_id)
         VALUES ('gh', 'late', nextval('deliveries_id_seq')) RETURNING id",
    )
    .fetch_one(&mut *late)
    .await
    .unwrap();
    // ...and one after it commits first, with a higher one.
    deliver(&app, "gh", "early", r#"{"id":"early"}"#).await;
    // Sent now, the stream's cursor would pass the open claim's id by.
    assert!(
        next_event(&mut messages, Duration::from_millis(1500))
            .await
            .is_none(),
        "nothing is sent while an earlier claim may still commit"
    );
    late.commit().await.unwrap();
    let first = next_event(&mut messages, Duration::from_secs(5))
        .await
        .unwrap();
    let second = next_event(&mut messages, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        (
            first["event_id"].as_i64().unwrap(),
            first["key"].as_str().unwrap()
        ),
        (late_id, "late"),
        "in the order the claims began: {first}"
    );
    assert_eq!(second["key"], "early");
    assert_eq!(second["idempotency_key"], "gh:early");
    assert_eq!(second["content_type"], "application/json");
    let body = base64_decode(second["body_base64"].as_str().unwrap());
    assert_eq!(body, br#"{"id":"early"}"#);
    assert!(
        first["body_base64"].is_null(),
        "no stored delivery: no body"
    );
    assert!(
        next_event(&mut messages, Duration::from_millis(800))
            .await
            .is_none(),
        "each once"
    );
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'events.stream' AND username = 'viewer'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(audited, 1, "the stream's start is in the audit log");
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

/// Claims in many transactions at once, each held open a random while, a
/// tenth rolled back, while a reader follows them: every committed event
/// is read once, none that rolled back, whatever the interleaving.
#[sqlx::test(migrator = "MIGRATOR")]
async fn concurrent_claims_reach_a_reader_once_each_for_every_seed(pool: PgPool) {
    let config = gh_config("http://127.0.0.1:9/hook", "");
    let filter = Filter {
        sources: vec![],
        event_type: None,
        masked: true,
    };
    for seed in 0..6u64 {
        let mut cursor = Cursor {
            xid: sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
                .fetch_one(&pool)
                .await
                .unwrap(),
            id: 0,
        };
        let mut claimers = tokio::task::JoinSet::new();
        for claimer in 0..8u64 {
            let pool = pool.clone();
            claimers.spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 1000 + claimer);
                let mut committed = Vec::new();
                for n in 0..25 {
                    let mut tx = pool.begin().await.unwrap();
                    let mut ids = Vec::new();
                    for copy in 0..rng.gen_range(1..=3) {
                        let key = format!("s{seed}-c{claimer}-n{n}-{copy}");
                        let id: i64 = sqlx::query_scalar(
                            "INSERT INTO events (source, idem_key, first_delivery_id)
                             VALUES ('gh', $1, nextval('deliveries_id_seq')) RETURNING id",
                        )
                        .bind(&key)
                        .fetch_one(&mut *tx)
                        .await
                        .unwrap();
                        ids.push(id);
                        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..4))).await;
                    }
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(0..15))).await;
                    if rng.gen_bool(0.1) {
                        tx.rollback().await.unwrap();
                    } else {
                        tx.commit().await.unwrap();
                        committed.extend(ids);
                    }
                }
                committed
            });
        }
        let mut read = Vec::new();
        let mut committed = Vec::new();
        // Until every claimer has ended and all they committed was read
        // (other tests' transactions on the same server may hold the
        // horizon a moment: that delays, never skips).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let batch = stream::next(&pool, &config, &filter, cursor).await.unwrap();
            assert!(batch.cursor >= cursor, "seed {seed}: the cursor went back");
            for (at, event) in batch.events {
                assert!(at > cursor && at <= batch.cursor, "seed {seed}");
                read.push(event.event_id);
            }
            cursor = batch.cursor;
            while let Some(result) = claimers.try_join_next() {
                committed.extend(result.unwrap());
            }
            if claimers.is_empty() && read.len() >= committed.len() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "seed {seed}: stuck");
            if !batch.more {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }
        let unique: HashSet<i64> = read.iter().copied().collect();
        assert_eq!(unique.len(), read.len(), "seed {seed}: an event read twice");
        let expected: HashSet<i64> = committed.iter().copied().collect();
        assert_eq!(unique, expected, "seed {seed}: read and committed differ");
        assert!(!expected.is_empty());
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn four_streams_a_token_and_a_revoked_tokens_streams_end_within_seconds(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let token = make_token(&pool, "four", "viewer", None).await;
    let mut streams = Vec::new();
    for _ in 0..4 {
        let (status, messages) = open(&app, &token, "").await;
        assert_eq!(status, 200);
        let mut messages = messages.unwrap();
        assert_eq!(
            next(&mut messages, Duration::from_secs(5))
                .await
                .unwrap()
                .event,
            "start"
        );
        streams.push(messages);
    }
    let (status, _) = open(&app, &token, "").await;
    assert_eq!(status, 429, "a fifth stream for the same token");
    let other = make_token(&pool, "other", "viewer", None).await;
    assert_eq!(
        open(&app, &other, "").await.0,
        200,
        "another token's own four"
    );
    assert_eq!(
        open(&app, &token, "?source=nope").await.0,
        429,
        "still four open"
    );
    assert_eq!(open(&app, &other, "?source=nope").await.0, 404);
    assert_eq!(open(&app, &other, "?type=%5B").await.0, 400, "a bad glob");

    sqlx::query("UPDATE api_tokens SET revoked_at = now() WHERE name = 'four'")
        .execute(&pool)
        .await
        .unwrap();
    let revoked = tokio::time::Instant::now();
    for mut messages in streams {
        let end = loop {
            let message = next(&mut messages, Duration::from_secs(6))
                .await
                .expect("an end message");
            if message.event == "end" {
                break message;
            }
        };
        assert!(end.data.contains("revoked"), "{}", end.data);
        assert!(
            next(&mut messages, Duration::from_secs(2)).await.is_none(),
            "the stream closes after its end"
        );
    }
    assert!(revoked.elapsed() < Duration::from_secs(5));
    // Its slots are given back: a live token of the same id would get them.
    assert_eq!(open(&app, &token, "").await.0, 401);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn bodies_are_whole_for_an_admin_token_only(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let viewer = make_token(&pool, "v", "viewer", None).await;
    let admin = make_token(&pool, "a", "admin", None).await;
    let mut viewing = open(&app, &viewer, "?type=push").await.1.unwrap();
    let mut administering = open(&app, &admin, "").await.1.unwrap();
    let start = next(&mut administering, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&start.data).unwrap()["masked"],
        false
    );
    let issue = r#"{"action":"opened"}"#;
    let other_type = app
        .client
        .post(app.url("/hooks/gh"))
        .header("content-type", "application/json")
        .header("x-github-event", "issues")
        .header("x-github-delivery", "i-1")
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hmac_hex(b"gh-secret", issue.as_bytes())),
        )
        .body(issue)
        .send()
        .await
        .unwrap();
    assert_eq!(other_type.status(), 200);
    deliver(&app, "gh", "m-1", r#"{"id":"m-1","password":"hunter2"}"#).await;
    let seen = next_event(&mut viewing, Duration::from_secs(5))
        .await
        .unwrap();
    let issue = next_event(&mut administering, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        issue["event_type"], "issues.opened",
        "read from the stored request"
    );
    let whole = next_event(&mut administering, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(seen["masked"], true);
    assert_eq!(seen["event_type"], "push");
    let masked = String::from_utf8(base64_decode(seen["body_base64"].as_str().unwrap())).unwrap();
    assert!(
        !masked.contains("hunter2") && masked.contains("[masked]"),
        "{masked}"
    );
    let body = base64_decode(whole["body_base64"].as_str().unwrap());
    assert_eq!(body, br#"{"id":"m-1","password":"hunter2"}"#);
    let headers = whole["headers"].to_string();
    assert!(headers.contains("x-github-event"), "{headers}");
    assert!(
        !headers.contains("x-hub-signature"),
        "no signature header: {headers}"
    );
}

/// `replaysafe listen` as a user runs it, through a proxy the test cuts.
#[sqlx::test(migrator = "MIGRATOR")]
async fn listen_sends_each_new_event_once_in_order_across_a_cut(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
destination = "{0}"

[[source]]
slug = "gh2"
provider = "github"
secrets = ["gh-secret"]
destination = "{0}"

[[source]]
slug = "other"
provider = "github"
secrets = ["gh-secret"]
destination = "{0}"
"#,
            destination.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    let handler = Destination::start(vec![]).await;
    let proxy = DbProxy::start(&app.addr.to_string()).await;
    let token = make_token(&pool, "listener", "viewer", None).await;
    let mut listen = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
        .args([
            "listen",
            "--source",
            "gh",
            "--source",
            "gh2",
            "--forward-to",
            &handler.url,
            "--json",
        ])
        .env("REPLAYSAFE_URL", format!("http://127.0.0.1:{}", proxy.port))
        .env("REPLAYSAFE_TOKEN", &token)
        .env_remove("REPLAYSAFE_CONFIG")
        .env_remove("REPLAYSAFE_LISTEN_SECRET")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(listen.stderr.take().unwrap()).lines();
    let mut secret = None;
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(20), stderr.next_line())
        .await
        .unwrap()
    {
        if let Some(rest) = line.strip_prefix("Signing with ") {
            secret = rest.split_whitespace().next().map(str::to_owned);
        }
        if line.contains("Ctrl-C to stop") {
            break;
        }
    }
    let secret = secret.expect("the secret is printed at start");
    assert!(secret.starts_with("whsec_"), "{secret}");
    let stderr_rest = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(line)) = stderr.next_line().await {
            rest.push(line);
        }
        rest
    });

    let mut expected = Vec::new();
    for i in 0..200 {
        let slug = if i % 2 == 0 { "gh" } else { "gh2" };
        let key = format!("k-{i}");
        deliver(&app, slug, &key, &format!(r#"{{"n":{i}}}"#)).await;
        expected.push(format!("{slug}:{key}"));
        if i % 10 == 0 {
            // A provider's retry: a duplicate, never sent on.
            deliver(&app, slug, &key, &format!(r#"{{"n":{i}}}"#)).await;
        }
        if i % 7 == 0 {
            // Another source's: not followed.
            deliver(&app, "other", &key, "{}").await;
        }
        if i == 80 {
            proxy.cut();
        }
        if i == 120 {
            proxy.restore();
        }
    }
    let arrived = tokio::time::Instant::now() + Duration::from_secs(30);
    while handler.count() < expected.len() && tokio::time::Instant::now() < arrived {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let keys: Vec<String> = handler
        .keys()
        .into_iter()
        .filter(|k| !k.starts_with("other:"))
        .collect();
    assert_eq!(
        handler.count(),
        keys.len(),
        "no event of a source not followed"
    );
    assert_eq!(keys, expected, "each once, in the order received");

    // Each as replaysafe forwards it, signed with the printed secret.
    let key = replaysafe_core::providers::standard::decode_secret(&secret).unwrap();
    for captured in handler.received.lock().unwrap().iter() {
        let header = |name: &str| captured.headers[name].to_str().unwrap().to_owned();
        let timestamp: i64 = header("webhook-timestamp").parse().unwrap();
        let signed = replaysafe_core::providers::standard::sign(
            &key,
            &header("webhook-id"),
            timestamp,
            &captured.body,
        );
        assert_eq!(header("webhook-signature"), signed);
        assert_eq!(header("x-github-event"), "push");
        assert!(header("webhook-id").starts_with("msg_"));
    }

    // The handler's answers changed nothing on the server.
    let mut stdout = BufReader::new(listen.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    while printed.len() < expected.len() {
        let line = tokio::time::timeout(Duration::from_secs(5), stdout.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        printed.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert!(printed.iter().all(|p| p["status"] == 200), "{printed:?}");
    assert_eq!(printed[0]["source"], "gh");
    assert_eq!(printed[0]["key"], "k-0");

    // A revoked token ends it: exit 4 (authentication), within seconds.
    sqlx::query("UPDATE api_tokens SET revoked_at = now() WHERE name = 'listener'")
        .execute(&pool)
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(8), listen.wait())
        .await
        .expect("listen ends once its token is revoked")
        .unwrap();
    assert_eq!(status.code(), Some(4));
    let said = stderr_rest.await.unwrap().join("\n");
    assert!(said.contains("reconnecting"), "{said}");
    assert!(said.contains("revoked"), "{said}");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn listen_ends_on_ctrl_c_and_refuses_a_bad_target(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let token = make_token(&pool, "listener", "viewer", None).await;
    let command = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"));
        command
            .arg("listen")
            .args(args)
            .env("REPLAYSAFE_URL", format!("http://{}", app.addr))
            .env("REPLAYSAFE_TOKEN", &token)
            .env_remove("REPLAYSAFE_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    };
    let out = command(&["--source", "gh", "--forward-to", "ftp://x"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "usage");
    let out = command(&["--source", "nope", "--forward-to", &destination.url])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));

    // Its stderr is read; what it prints of forwards is not.
    let stdout_log = crate::helpers::logs::ProcessLog::new("replaysafe-listen");
    let mut listen = command(&["--source", "gh", "--forward-to", &destination.url])
        .stdout(stdout_log.stdio())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(listen.stderr.take().unwrap()).lines();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(20), stderr.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("the start lines");
        if line.contains("Ctrl-C to stop") {
            break;
        }
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(listen.id().unwrap() as i32, libc::SIGINT) };
    let status = tokio::time::timeout(Duration::from_secs(5), listen.wait())
        .await
        .expect("Ctrl-C ends it")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}
