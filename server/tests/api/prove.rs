//! `replaysafe prove` and `replaysafe deliveries export` (issue 38), run as
//! a user runs them against three sample handlers: idempotent by key, not
//! idempotent, and idempotent but slow, answering 409 while in progress.
//! The verdicts and exit codes are right, over the API, from the database
//! and from a captured file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use replaysafe_core::db::MIGRATOR;
use serde_json::Value;
use sqlx::PgPool;

use crate::helpers::{database_url, gh_config, make_token, spawn_app, Destination, TestApp};

#[derive(Clone, Copy)]
enum Kind {
    /// Remembers each Idempotency-Key; a repeat does nothing.
    ByKey,
    /// Does the work every time.
    Naive,
    /// Takes its time; a repeat while the first runs gets 409.
    Slow,
    /// Does the work once, then fails on the unique key it violates (500).
    FailsOnRepeat,
}

/// A handler on a free port: `POST /hook`, and `GET /count` with its side
/// effects, also written to `count_file` for a `--check` command.
struct Handler {
    url: String,
    count_url: String,
    count_file: std::path::PathBuf,
    count: Arc<AtomicI64>,
}

async fn handler(kind: Kind) -> Handler {
    #[derive(Clone, Copy, PartialEq)]
    enum Seen {
        Running,
        Done,
    }
    let count: Arc<AtomicI64> = Default::default();
    let seen: Arc<Mutex<HashMap<String, Seen>>> = Default::default();
    let file = std::env::temp_dir().join(format!("prove-count-{}", rand::random::<u64>()));
    std::fs::write(&file, "0\n").unwrap();
    let (c, f) = (count.clone(), file.clone());
    let hook = move |headers: HeaderMap| {
        let (count, seen, file) = (c.clone(), seen.clone(), f.clone());
        async move {
            let key = headers["idempotency-key"].to_str().unwrap().to_owned();
            let work = || {
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                std::fs::write(&file, format!("{n}\n")).unwrap();
            };
            match kind {
                Kind::Naive => work(),
                Kind::ByKey | Kind::FailsOnRepeat => {
                    let first = seen.lock().unwrap().insert(key, Seen::Done).is_none();
                    if first {
                        work();
                    } else if matches!(kind, Kind::FailsOnRepeat) {
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                }
                Kind::Slow => {
                    let answered = {
                        let mut map = seen.lock().unwrap();
                        match map.get(&key) {
                            Some(Seen::Done) => Some(StatusCode::OK),
                            Some(Seen::Running) => Some(StatusCode::CONFLICT),
                            None => {
                                map.insert(key.clone(), Seen::Running);
                                None
                            }
                        }
                    };
                    if let Some(status) = answered {
                        return status;
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    work();
                    seen.lock().unwrap().insert(key, Seen::Done);
                }
            }
            StatusCode::OK
        }
    };
    let counted = count.clone();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .route(
            "/count",
            axum::routing::get(move || {
                let count = counted.clone();
                async move { format!("side effects: {}\n", count.load(Ordering::SeqCst)) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Handler {
        url: format!("http://{addr}/hook"),
        count_url: format!("http://{addr}/count"),
        count_file: file,
        count,
    }
}

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn replaysafe(env: &[(&str, &str)], args: &[&str]) -> Ran {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"));
    command
        .args(args)
        .env_remove("REPLAYSAFE_URL")
        .env_remove("REPLAYSAFE_TOKEN")
        .env_remove("REPLAYSAFE_CONFIG")
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the command ends")
        .unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn stored_event(app: &TestApp, key: &str) -> i64 {
    let status = app
        .github_delivery(
            "gh",
            key,
            &format!(r#"{{"id":"{key}","amount":12}}"#),
            b"gh-secret",
        )
        .await;
    assert_eq!(status, 200);
    sqlx::query_scalar("SELECT id FROM events WHERE idem_key = $1")
        .bind(key)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn prove_tells_an_idempotent_handler_from_one_that_is_not(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let admin = make_token(&pool, "admin", "admin", None).await;
    let server = format!("http://{}", app.addr);
    let api = [
        ("REPLAYSAFE_URL", server.as_str()),
        ("REPLAYSAFE_TOKEN", admin.as_str()),
    ];
    let event = stored_event(&app, "p-1").await.to_string();

    // Idempotent by key: one side effect for ten sends.
    let by_key = handler(Kind::ByKey).await;
    let ran = replaysafe(
        &api,
        &[
            "prove",
            "--event",
            &event,
            "--to",
            &by_key.url,
            "--check-url",
            &by_key.count_url,
        ],
    )
    .await;
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("verdict: idempotent"), "{}", ran.stdout);
    assert!(ran.stdout.contains("moved by 1"), "{}", ran.stdout);
    assert!(
        ran.stdout.contains("5 at once, 5 in sequence"),
        "{}",
        ran.stdout
    );
    assert_eq!(by_key.count.load(Ordering::SeqCst), 1);

    // Not idempotent: the check moved by ten. Exit 6 with the evidence.
    let naive = handler(Kind::Naive).await;
    let check = format!("cat {}", naive.count_file.display());
    let ran = replaysafe(
        &api,
        &[
            "prove", "--event", &event, "--to", &naive.url, "--check", &check, "--json",
        ],
    )
    .await;
    assert_eq!(ran.code, 6, "{}\n{}", ran.stdout, ran.stderr);
    let report: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(report["idempotent"], false);
    assert_eq!(report["moved"], 10);
    assert_eq!(report["idempotency_key"], "gh:p-1");
    assert_eq!(report["sends"].as_array().unwrap().len(), 10);
    assert!(report["verdict"].as_str().unwrap().contains("moved by 10"));

    // Slow, with 409s while the first is in progress: idempotent.
    let slow = handler(Kind::Slow).await;
    let ran = replaysafe(
        &api,
        &[
            "prove",
            "--event",
            &event,
            "--to",
            &slow.url,
            "--check-url",
            &slow.count_url,
            "--times",
            "8",
            "--concurrency",
            "4",
            "--json",
        ],
    )
    .await;
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let report: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(report["idempotent"], true);
    let statuses: Vec<u64> = report["sends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses.len(), 8);
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        3,
        "{statuses:?}"
    );
    assert!(report["slowest_ms"].as_u64().unwrap() >= 300);

    // A handler that does the work once but fails its repeats: providers
    // would retry those; exit 6 even though the count moved by one.
    let failing = handler(Kind::FailsOnRepeat).await;
    let ran = replaysafe(
        &api,
        &[
            "prove",
            "--event",
            &event,
            "--to",
            &failing.url,
            "--check-url",
            &failing.count_url,
        ],
    )
    .await;
    assert_eq!(ran.code, 6, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("500"), "{}", ran.stdout);

    // Proved again, the same event moves nothing: no verdict, exit 1.
    let ran = replaysafe(
        &api,
        &[
            "prove",
            "--event",
            &event,
            "--to",
            &by_key.url,
            "--check-url",
            &by_key.count_url,
        ],
    )
    .await;
    assert_eq!(ran.code, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("moved by 0"), "{}", ran.stderr);

    // Usage and the usual codes: a bad URL, an unknown event, a dead token.
    let ran = replaysafe(&api, &["prove", "--event", &event, "--to", "nope"]).await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    let ran = replaysafe(&api, &["prove", "--event", "999999", "--to", &by_key.url]).await;
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let ran = replaysafe(
        &[
            ("REPLAYSAFE_URL", server.as_str()),
            ("REPLAYSAFE_TOKEN", "rs_nothing"),
        ],
        &["prove", "--event", &event, "--to", &by_key.url],
    )
    .await;
    assert_eq!(ran.code, 4, "{}", ran.stderr);

    // The admin's read of the whole body is in the audit log.
    let exported: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'event.export' AND target = $1",
    )
    .bind(&event)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(exported >= 5, "{exported}");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn prove_reads_the_database_or_a_captured_file_without_a_server(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let event = stored_event(&app, "f-1").await.to_string();
    let delivery: i64 = sqlx::query_scalar("SELECT first_delivery_id FROM events WHERE id = $1")
        .bind(event.parse::<i64>().unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();

    // From the configured database (no REPLAYSAFE_URL).
    let config = std::env::temp_dir().join(format!("prove-{}.toml", rand::random::<u64>()));
    std::fs::write(
        &config,
        format!(
            "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"{}\"\n",
            destination.url
        ),
    )
    .unwrap();
    let db = database_url(&pool).await;
    let local = [
        ("DATABASE_URL", db.as_str()),
        ("REPLAYSAFE_CONFIG", config.to_str().unwrap()),
    ];
    let by_key = handler(Kind::ByKey).await;
    let ran = replaysafe(
        &local,
        &[
            "prove",
            "--event",
            &event,
            "--to",
            &by_key.url,
            "--check-url",
            &by_key.count_url,
        ],
    )
    .await;
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert_eq!(by_key.count.load(Ordering::SeqCst), 1);

    // Exported by an admin (a viewer may not: exit 4), then proved from the file.
    let server = format!("http://{}", app.addr);
    let viewer = make_token(&pool, "viewer", "viewer", None).await;
    let ran = replaysafe(
        &[
            ("REPLAYSAFE_URL", server.as_str()),
            ("REPLAYSAFE_TOKEN", viewer.as_str()),
        ],
        &["deliveries", "export", &delivery.to_string()],
    )
    .await;
    assert_eq!(ran.code, 4, "{}", ran.stderr);
    let admin = make_token(&pool, "admin", "admin", None).await;
    let file = std::env::temp_dir().join(format!("captured-{}.json", rand::random::<u64>()));
    let ran = replaysafe(
        &[
            ("REPLAYSAFE_URL", server.as_str()),
            ("REPLAYSAFE_TOKEN", admin.as_str()),
        ],
        &[
            "deliveries",
            "export",
            &delivery.to_string(),
            "--out",
            file.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let captured: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(captured["format"], "replaysafe-delivery/1");
    assert_eq!(captured["idempotency_key"], "gh:f-1");
    assert!(
        captured["headers"]
            .to_string()
            .contains("x-hub-signature-256"),
        "every header as received: {captured}"
    );
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'delivery.export' AND target = $1",
    )
    .bind(delivery.to_string())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(audited, 1);

    // No server, no database: the file alone.
    drop(app);
    let naive = handler(Kind::Naive).await;
    let ran = replaysafe(
        &[],
        &[
            "prove",
            "--from-file",
            file.to_str().unwrap(),
            "--to",
            &naive.url,
            "--check",
            &format!("cat {}", naive.count_file.display()),
            "--shuffle",
            "--times",
            "6",
        ],
    )
    .await;
    assert_eq!(ran.code, 6, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("moved by 6"), "{}", ran.stdout);
    let slow = handler(Kind::Slow).await;
    let ran = replaysafe(
        &[],
        &[
            "prove",
            "--from-file",
            file.to_str().unwrap(),
            "--to",
            &slow.url,
            "--check",
            &format!("cat {}", slow.count_file.display()),
            "--shuffle",
        ],
    )
    .await;
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&config);
}
