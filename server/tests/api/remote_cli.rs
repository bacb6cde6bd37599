//! The `replaysafe events|deliveries|sources` commands, run as a user runs
//! them (the real binary, REPLAYSAFE_URL and REPLAYSAFE_TOKEN) against a
//! real server: bulk re-delivery with its progress bar on a pseudo-terminal
//! and as JSON, exit codes on refusal, and `deliveries tail` following a
//! delivery posted after it started.

use std::process::Stdio;
use std::time::Duration;

use replaysafe_core::db::MIGRATOR;
use serde_json::Value;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{gh_config, spawn_app, Destination, Scripted, TestApp};

async fn operator_token(app: &TestApp) -> String {
    replaysafe_core::accounts::tokens::create(
        &app.pool,
        "cli",
        replaysafe_types::auth::Role::Operator,
        None,
        replaysafe_types::auth::Who::named("test"),
        None,
    )
    .await
    .unwrap()
    .0
}

/// `replaysafe ARGS` with the server and token in the environment.
fn cli(app: &TestApp, token: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"));
    command
        .env("REPLAYSAFE_URL", format!("http://{}", app.addr))
        .env("REPLAYSAFE_TOKEN", token)
        .env_remove("REPLAYSAFE_CONFIG")
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    command
}

async fn run(app: &TestApp, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = cli(app, token).args(args).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn deliver(app: &TestApp, key: &str) {
    let status = app
        .github_delivery("gh", key, &format!(r#"{{"id":"{key}"}}"#), b"gh-secret")
        .await;
    assert!((200..300).contains(&status), "{status}");
}

async fn dead_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM event_summaries WHERE state = 'dead'")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn bulk_redelivery_shows_progress_on_a_terminal_and_json_otherwise(pool: PgPool) {
    // 45 events die on their first attempt (more than two of the server's
    // steps), then 25 more; every later forward is taken.
    let destination = Destination::start(
        std::iter::repeat_n(Scripted::status(400), 45)
            .chain(std::iter::repeat_n(Scripted::status(200), 45))
            .chain(std::iter::repeat_n(Scripted::status(400), 25))
            .collect(),
    )
    .await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let token = operator_token(&app).await;
    for i in 0..45 {
        deliver(&app, &format!("bulk-{i}")).await;
    }
    app.drain().await;
    assert_eq!(dead_count(&pool).await, 45);

    // On a pseudo-terminal (util-linux `script`): the progress bar, then the summary.
    let command = format!(
        "{} events redeliver --dead --source gh --since 1h",
        env!("CARGO_BIN_EXE_replaysafe")
    );
    let out = tokio::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("REPLAYSAFE_URL", format!("http://{}", app.addr))
        .env("REPLAYSAFE_TOKEN", &token)
        .env("NO_COLOR", "1")
        .env("TERM", "xterm")
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("dead events re-delivered"),
        "a progress bar on the terminal: {shown}"
    );
    assert!(
        shown.contains("45 dead events: 45 queued again, 0 refused"),
        "{shown}"
    );
    assert_eq!(dead_count(&pool).await, 0);
    app.drain().await;
    for i in 0..45 {
        let key = format!("gh:bulk-{i}");
        let forwards = destination.keys().iter().filter(|k| **k == key).count();
        assert_eq!(forwards, 2, "{key}: the refused attempt and one more");
    }

    // Not a terminal, with --json: no bar, one JSON document.
    for i in 0..25 {
        deliver(&app, &format!("later-{i}")).await;
    }
    app.drain().await;
    assert_eq!(dead_count(&pool).await, 25);
    let (code, stdout, stderr) = run(
        &app,
        &token,
        &["events", "redeliver", "--dead", "--source", "gh", "--json"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stderr.contains("re-delivered"),
        "no bar off a terminal: {stderr}"
    );
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["requeued"], 25);
    assert_eq!(summary["refused"], 0);
    assert_eq!(summary["results"].as_array().unwrap().len(), 25);

    let job = summary["job"]["id"].as_i64().unwrap();
    assert_eq!(summary["job"]["state"], "done");

    // Nothing is dead now: a second run re-delivers nothing.
    let (code, stdout, _) = run(&app, &token, &["events", "redeliver", "--dead", "--json"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).unwrap()["requeued"],
        0
    );

    // The jobs, from any shell: listed, shown, and a finished one cannot
    // be cancelled (non-zero, the server's reason on stderr).
    let (code, stdout, stderr) = run(&app, &token, &["jobs", "list"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("JOB"), "{stdout}");
    assert_eq!(stdout.lines().count(), 4, "three jobs: {stdout}");
    let (code, stdout, _) = run(&app, &token, &["jobs", "show", &job.to_string(), "--json"]).await;
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (shown["done"].as_i64(), shown["requeued"].as_i64()),
        (Some(25), Some(25))
    );
    let (code, _, stderr) = run(&app, &token, &["jobs", "cancel", &job.to_string()]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("done already"), "{stderr}");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn events_list_and_redeliver_exit_with_the_code_of_what_refused_them(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400), Scripted::status(200)]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let token = operator_token(&app).await;
    // One at a time: forwarded in one batch, which meets the 400 would be a race.
    deliver(&app, "dies").await;
    app.drain().await;
    deliver(&app, "lives").await;
    app.drain().await;

    let (code, stdout, stderr) = run(
        &app,
        &token,
        &[
            "events",
            "list",
            "--source",
            "gh",
            "--outcome",
            "dead",
            "--since",
            "2h",
            "--json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["idem_key"], "dies");
    let dead = listed[0]["id"].as_i64().unwrap();
    let completed: i64 = sqlx::query_scalar("SELECT id FROM events WHERE idem_key = 'lives'")
        .fetch_one(&pool)
        .await
        .unwrap();

    // The completed one is refused by the dedup layer: exit 3, and the
    // JSON says which.
    let (code, stdout, _) = run(
        &app,
        &token,
        &[
            "events",
            "redeliver",
            &dead.to_string(),
            &completed.to_string(),
            "--json",
        ],
    )
    .await;
    assert_eq!(code, 3);
    let answers: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answers[0]["ok"], true);
    assert_eq!(answers[0]["requeued"], true);
    assert_eq!(answers[1]["ok"], false);
    assert_eq!(answers[1]["code"], "already_completed");
    // Again: the revived event is in progress now, refused too.
    let (code, _, _) = run(&app, &token, &["events", "redeliver", &dead.to_string()]).await;
    assert_eq!(code, 3);

    // A token too weak for force, and none at all: exit 4.
    let (code, _, stderr) = run(
        &app,
        &token,
        &[
            "events",
            "force",
            &completed.to_string(),
            "--key",
            "lives",
            "--reason",
            "x",
        ],
    )
    .await;
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("403"), "{stderr}");
    let (code, _, stderr) = run(&app, "", &["sources", "list"]).await;
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("REPLAYSAFE_TOKEN"), "{stderr}");
    let (code, _, stderr) = run(&app, "rs_not-a-live-token", &["sources", "list"]).await;
    assert_eq!(code, 4, "{stderr}");
    // A time that cannot be read: a usage error, 2, as clap's own.
    let (code, _, stderr) = run(&app, &token, &["events", "list", "--since", "soon"]).await;
    assert_eq!(code, 2, "{stderr}");
    let (code, _, _) = run(&app, &token, &["events", "list", "--no-such-flag"]).await;
    assert_eq!(code, 2);
    // No server there: 5.
    let (code, _, stderr) = cli(&app, &token)
        .env("REPLAYSAFE_URL", "http://127.0.0.1:9")
        .args(["sources", "list"])
        .output()
        .await
        .map(|o| {
            (
                o.status.code().unwrap_or(-1),
                (),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .unwrap();
    assert_eq!(code, 5, "{stderr}");
    // The token never goes over plain http to another machine (refused
    // before any connection: exit 2); to this one, by any name, it does.
    let over = |url: String, extra: &'static [&'static str]| {
        let mut command = cli(&app, &token);
        command
            .env("REPLAYSAFE_URL", url)
            .args(["sources", "list"])
            .args(extra);
        async move {
            let o = command.output().await.unwrap();
            (
                o.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        }
    };
    let (code, stderr) = over("http://192.0.2.1:9".into(), &[]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--insecure"), "{stderr}");
    let (code, stderr) = over(format!("http://localhost:{}", app.addr.port()), &[]).await;
    assert_eq!(code, 0, "{stderr}");

    let (code, stdout, _) = run(&app, &token, &["sources", "pause", "gh"]).await;
    assert_eq!(code, 0);
    assert!(stdout.contains("paused by an operator"), "{stdout}");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn deliveries_tail_follows_a_delivery_posted_after_it_started(pool: PgPool) {
    let app = spawn_app(pool, gh_config("http://127.0.0.1:9/hook", "")).await;
    let token = operator_token(&app).await;
    deliver(&app, "before-tail").await;
    let stderr_log = crate::helpers::logs::ProcessLog::new("replaysafe-deliveries-tail");
    let mut tail = cli(&app, &token)
        .args(["deliveries", "tail", "--source", "gh", "--json"])
        .stdout(Stdio::piped())
        .stderr(stderr_log.stdio())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(tail.stdout.take().unwrap()).lines();
    let next_key = |line: Option<String>| -> String {
        let line = line.expect("tail keeps running");
        let row: Value = serde_json::from_str(&line).unwrap();
        row["idem_key"].as_str().unwrap_or_default().to_owned()
    };
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("tail prints the latest deliveries first")
        .unwrap();
    assert_eq!(next_key(first), "before-tail");
    deliver(&app, "after-tail").await;
    let followed = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("a delivery posted later shows within seconds")
        .unwrap();
    assert_eq!(next_key(followed), "after-tail");
    tail.kill().await.unwrap();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn the_dashboards_figures_audit_and_deliveries_from_a_shell(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let token = operator_token(&app).await;
    deliver(&app, "figured").await;
    app.drain().await;
    replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();

    let (code, stdout, stderr) = run(&app, &token, &["overview"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("deliveries   1 (claimed 1"), "{stdout}");
    assert!(stdout.contains("1 dead letters"), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("gh ")),
        "a row per source: {stdout}"
    );
    let (code, stdout, _) = run(&app, &token, &["overview", "--window", "day", "--json"]).await;
    assert_eq!(code, 0);
    let overview: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(overview["window"], "Day");
    assert_eq!(overview["totals"]["deliveries"], 1);
    let (code, stdout, _) = run(&app, &token, &["sources", "show", "gh"]).await;
    assert_eq!(code, 0);
    assert!(stdout.starts_with("source gh, last hour"), "{stdout}");

    // Alerts: listed (the evaluator fired one for the dead letter);
    // silencing is an admin's, refused to this operator token.
    replaysafe_core::alerts::evaluate_once(&pool, &app.config)
        .await
        .unwrap();
    let (code, stdout, stderr) = run(&app, &token, &["alerts", "list"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("firing") && l.contains("dead_letters") && l.contains("gh")),
        "{stdout}"
    );
    let (code, _, stderr) = run(
        &app,
        &token,
        &[
            "alerts",
            "silence",
            "--rule",
            "dead_letters",
            "--for",
            "1h",
            "--reason",
            "x",
        ],
    )
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("403"), "{stderr}");

    // A stored delivery re-delivered by id: its dead event is queued again.
    let delivery: i64 = sqlx::query_scalar("SELECT id FROM deliveries WHERE idem_key = 'figured'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let (code, stdout, stderr) = run(
        &app,
        &token,
        &["deliveries", "redeliver", &delivery.to_string(), "--json"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let answers: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answers[0]["delivery"], delivery);
    assert_eq!(answers[0]["requeued"], true);

    // The audit log names the token.
    let (code, stdout, _) = run(&app, &token, &["audit", "--limit", "5"]).await;
    assert_eq!(code, 0);
    let line = stdout
        .lines()
        .find(|l| l.contains("redeliver"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("token cli"), "{line}");
}
