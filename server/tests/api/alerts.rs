//! Alerts (issue 17): each rule fires and resolves against real traffic,
//! once per transition; with two real `serve` processes each transition
//! reaches a real webhook receiver (its signature checked by the Standard
//! Webhooks SDK), a Slack-style receiver and a real SMTP server (aiosmtpd)
//! exactly once.

use std::path::Path;
use std::time::{Duration, Instant};

use replaysafe_core::alerts::evaluate_once;
use replaysafe_core::db::MIGRATOR;
use serde_json::Value;
use sqlx::PgPool;

use crate::helpers::{
    database_url, gh_config, github_request, spawn_app, Destination, Scripted, ServerProcess,
    TestApp,
};

async fn deliver(app: &TestApp, key: &str, secret: &[u8]) -> u16 {
    app.github_delivery("gh", key, &format!(r#"{{"id":"{key}"}}"#), secret)
        .await
}

/// Every dead letter so far leaves the rules' windows.
async fn dead_letters_age_an_hour(pool: &PgPool) {
    sqlx::query("UPDATE dispatches SET state_changed_at = state_changed_at - interval '1 hour'")
        .execute(pool)
        .await
        .unwrap();
}

fn names(list: &[(String, String)]) -> Vec<&str> {
    let mut names: Vec<&str> = list.iter().map(|(rule, _)| rule.as_str()).collect();
    names.sort();
    names
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn each_rule_fires_and_resolves_once_against_real_traffic(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400); 3]).await;
    let top = r#"
[alerts]
repeat_after_minutes = 1
resolve_after_secs = 0
[alerts.rules.duplicate_storm]
min_deliveries = 5
[alerts.rules.signature_failures]
threshold = 3
[alerts.rules.backlog]
oldest_due_minutes = 1
"#;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, top)).await;
    let config = app.config.clone();
    let fold = || replaysafe_core::jobs::rollup::fold_all(&pool);
    assert_eq!(
        evaluate_once(&pool, &config).await.unwrap(),
        Default::default(),
        "quiet"
    );

    // Three forgeries, three events the destination refuses.
    for i in 0..3 {
        assert_eq!(deliver(&app, &format!("forged-{i}"), b"wrong").await, 401);
        assert_eq!(deliver(&app, &format!("dead-{i}"), b"gh-secret").await, 200);
    }
    app.drain().await;
    fold().await.unwrap();
    let t = evaluate_once(&pool, &config).await.unwrap();
    assert_eq!(
        names(&t.fired),
        [
            "dead_letters",
            "destination_failing",
            "incident_opened",
            "signature_failures"
        ]
    );
    assert!(t.fired.iter().all(|(_, source)| source == "gh"));
    // Still holding: nothing new.
    assert_eq!(
        evaluate_once(&pool, &config).await.unwrap(),
        Default::default()
    );

    // A storm: five events, then each three times more; their forwards
    // succeed, so the destination is failing no longer.
    for i in 0..5 {
        deliver(&app, &format!("storm-{i}"), b"gh-secret").await;
    }
    app.drain().await;
    for _ in 0..3 {
        for i in 0..5 {
            deliver(&app, &format!("storm-{i}"), b"gh-secret").await;
        }
    }
    fold().await.unwrap();
    let t = evaluate_once(&pool, &config).await.unwrap();
    assert_eq!(names(&t.fired), ["duplicate_storm"]);
    assert_eq!(names(&t.resolved), ["destination_failing"]);
    let storm: (String, Value) =
        sqlx::query_as("SELECT summary, figures FROM alerts WHERE rule = 'duplicate_storm'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        storm
            .0
            .starts_with("65.2% of the last 10 minutes' 23 verified deliveries"),
        "{}",
        storm.0
    );
    assert_eq!(
        storm.1["recent_verified"], 23.0,
        "three dead events and twenty deliveries of the storm"
    );

    // An event due for minutes that no worker takes: backlog, until drained.
    deliver(&app, "late", b"gh-secret").await;
    sqlx::query(
        "UPDATE dispatches SET next_attempt_at = now() - interval '3 minutes' WHERE event_id IN (SELECT id FROM events WHERE idem_key = 'late')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(
        names(&evaluate_once(&pool, &config).await.unwrap().fired),
        ["backlog"]
    );
    app.drain().await;
    assert_eq!(
        names(&evaluate_once(&pool, &config).await.unwrap().resolved),
        ["backlog"]
    );

    // Still firing past repeat_after: sent again, once.
    sqlx::query(
        "UPDATE alerts SET last_sent_at = now() - interval '2 minutes' WHERE rule = 'dead_letters'",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(
        names(&evaluate_once(&pool, &config).await.unwrap().repeated),
        ["dead_letters"]
    );
    assert!(evaluate_once(&pool, &config)
        .await
        .unwrap()
        .repeated
        .is_empty());

    // Another process evaluating now: this one leaves it to that one.
    let mut other = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('replaysafe.alerts'))")
        .execute(&mut *other)
        .await
        .unwrap();
    assert!(evaluate_once(&pool, &config).await.unwrap().skipped);
    other.rollback().await.unwrap();

    // An hour on: every window is past, everything resolves.
    sqlx::query("UPDATE minute_stats SET minute = minute - interval '1 day'")
        .execute(&pool)
        .await
        .unwrap();
    dead_letters_age_an_hour(&pool).await;
    // The refusals' incident is not a window: someone acknowledges it.
    let incidents: Vec<i64> = sqlx::query_scalar("SELECT id FROM incidents")
        .fetch_all(&pool)
        .await
        .unwrap();
    for id in incidents {
        replaysafe_core::incidents::apply(
            &pool,
            id,
            replaysafe_core::incidents::Move::Acknowledge,
            "oncall",
        )
        .await
        .unwrap();
    }
    let t = evaluate_once(&pool, &config).await.unwrap();
    assert_eq!(
        names(&t.resolved),
        [
            "dead_letters",
            "duplicate_storm",
            "incident_opened",
            "signature_failures"
        ]
    );
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM alerts WHERE state = 'firing'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(open, 0);
    let lived: i64 = sqlx::query_scalar("SELECT count(*) FROM alerts")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        lived, 6,
        "one alert per rule: each fired once and resolved once"
    );
}

/// A sender that dies between sending a notification and recording it
/// sent (SIGKILL while the receiver holds the request) loses nothing: once
/// its lease runs out, another process sends it again, under the same
/// Standard Webhooks id, so the receiver can tell the repeat. At least
/// once, never zero.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_sender_killed_mid_send_leaves_the_notification_to_another(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    // The first send is held until the sender is gone; the next answered.
    let webhook = Destination::start(vec![Scripted {
        status: 200,
        headers: vec![],
        delay: Duration::from_secs(120),
    }])
    .await;
    let top = format!(
        "[alerts]\nevaluate_every_secs = 1\n[[alerts.channel]]\nname = \"hook\"\nkind = \"webhook\"\nurl = \"{}\"\nsecret = \"{WEBHOOK_SECRET}\"\n",
        webhook.url
    );
    let source = format!(
        "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"{}\"\nmax_attempts = 1\n",
        destination.url
    );
    let url = database_url(&pool).await;
    let mut a = ServerProcess::start(&format!("{top}\n{source}"), &url, &[]).await;
    post_doomed(&a).await;
    eventually("the firing alert is being sent", || webhook.count() == 1).await;
    a.child.kill().await.unwrap();

    let (sent, attempts): (bool, i32) =
        sqlx::query_as("SELECT sent_at IS NOT NULL, attempts FROM alert_notifications")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (sent, attempts),
        (false, 1),
        "not recorded sent by the dead sender"
    );
    // Its lease runs out (180 s, shortened here).
    sqlx::query("UPDATE alert_notifications SET leased_until = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    let app = spawn_app(pool.clone(), gh_config(&destination.url, &top)).await;
    let http = reqwest::Client::new();
    assert_eq!(
        replaysafe_core::alerts::send_due(&pool, &app.config, &http)
            .await
            .unwrap(),
        1
    );
    assert_eq!(webhook.count(), 2);
    let ids: Vec<String> = webhook
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.headers["webhook-id"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids[0], ids[1], "the repeat carries the same id");
    let (sent, attempts): (bool, i32) =
        sqlx::query_as("SELECT sent_at IS NOT NULL, attempts FROM alert_notifications")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((sent, attempts), (true, 2));
    assert_eq!(
        replaysafe_core::alerts::send_due(&pool, &app.config, &http)
            .await
            .unwrap(),
        0,
        "sent once it is recorded"
    );
}

/// Hysteresis: a firing alert resolves only once its condition has not
/// held for `resolve_after_secs`, so a figure that comes and goes keeps one
/// alert instead of a firing and a resolution at every evaluation. An
/// alert that no config evaluates any more (its source was removed from
/// every process's) is left to whoever may still evaluate it, and resolved
/// once nobody has seen it hold for ten minutes.
#[sqlx::test(migrator = "MIGRATOR")]
async fn an_alert_resolves_after_a_quiet_spell_and_one_nobody_evaluates_after_a_long_one(
    pool: PgPool,
) {
    let destination = Destination::start(vec![Scripted::status(400); 2]).await;
    let top = "[alerts]\nresolve_after_secs = 120\n";
    let app = spawn_app(pool.clone(), gh_config(&destination.url, top)).await;
    let config = app.config.clone();
    assert_eq!(deliver(&app, "dead-1", b"gh-secret").await, 200);
    app.drain().await;
    assert_eq!(
        names(&evaluate_once(&pool, &config).await.unwrap().fired),
        ["dead_letters"]
    );
    // A source that has left every config, with an alert still firing.
    sqlx::query(
        "INSERT INTO alerts (rule, source, summary, figures, link)
         VALUES ('backlog', 'gone', 'an old backlog', '{}', '/deliveries?source=gone')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let age = |rule: &'static str, secs: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query(
                "UPDATE alerts SET held_at = now() - make_interval(secs => $2)
                 WHERE rule = $1 AND state = 'firing'",
            )
            .bind(rule)
            .bind(secs as f64)
            .execute(&pool)
            .await
            .unwrap();
        }
    };

    // The dead letter leaves the window: the condition is gone, but not
    // for long enough.
    dead_letters_age_an_hour(&pool).await;
    assert_eq!(
        evaluate_once(&pool, &config).await.unwrap(),
        Default::default()
    );
    // It comes back within the spell: still the one alert, nothing sent.
    assert_eq!(deliver(&app, "dead-2", b"gh-secret").await, 200);
    app.drain().await;
    age("dead_letters", 100).await;
    assert_eq!(
        evaluate_once(&pool, &config).await.unwrap(),
        Default::default()
    );
    let held_again: bool = sqlx::query_scalar(
        "SELECT held_at > now() - interval '10 seconds' FROM alerts WHERE rule = 'dead_letters'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(held_again, "the evaluation that saw it hold noted so");
    // Gone again, and quiet past resolve_after: resolved, once.
    dead_letters_age_an_hour(&pool).await;
    age("dead_letters", 119).await;
    assert_eq!(
        evaluate_once(&pool, &config).await.unwrap(),
        Default::default()
    );
    age("dead_letters", 121).await;
    assert_eq!(
        names(&evaluate_once(&pool, &config).await.unwrap().resolved),
        ["dead_letters"]
    );

    // Nobody evaluates the removed source's alert: it outlives the spell,
    // then is resolved after ten minutes unseen.
    age("backlog", 300).await;
    assert_eq!(
        evaluate_once(&pool, &config).await.unwrap(),
        Default::default()
    );
    age("backlog", 601).await;
    let t = evaluate_once(&pool, &config).await.unwrap();
    assert_eq!(t.resolved, [("backlog".to_owned(), "gone".to_owned())]);
    let lived: i64 = sqlx::query_scalar("SELECT count(*) FROM alerts")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(lived, 2, "no alert fired twice");
}

/// A real SMTP server (aiosmtpd, from PyPI) writing what it receives to a
/// maildir; killed when dropped.
struct SmtpSink {
    port: u16,
    maildir: tempfile::TempDir,
    _child: tokio::process::Child,
    _log: crate::helpers::logs::ProcessLog,
}

impl SmtpSink {
    async fn start() -> Self {
        let port = crate::helpers::free_port();
        let maildir = tempfile::tempdir().unwrap();
        let python = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/.venv/bin/python");
        let log = crate::helpers::logs::ProcessLog::new("aiosmtpd");
        let child = tokio::process::Command::new(python)
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(maildir.path().join("box"))
            .stdin(std::process::Stdio::null())
            .stdout(log.stdio())
            .stderr(log.stdio())
            .kill_on_drop(true)
            .spawn()
            .expect("aiosmtpd (tests/sdk/setup.sh installs it)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Self {
                    port,
                    maildir,
                    _child: child,
                    _log: log,
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("aiosmtpd did not listen");
    }

    fn messages(&self) -> Vec<String> {
        let new = self.maildir.path().join("box").join("new");
        let mut found: Vec<String> = std::fs::read_dir(&new)
            .map(|dir| {
                dir.map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        found
    }
}

/// Checks a webhook the way its receiver would, with the Standard Webhooks
/// SDK (PyPI `standardwebhooks`).
fn verified_by_the_sdk(secret: &str, headers: &axum::http::HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| headers[name].to_str().unwrap().to_owned();
    let input = serde_json::json!({
        "secret": secret,
        "body": String::from_utf8_lossy(body),
        "headers": {
            "webhook-id": header("webhook-id"),
            "webhook-timestamp": header("webhook-timestamp"),
            "webhook-signature": header("webhook-signature"),
        },
    });
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/.venv/bin/python");
    let script = "import json,sys\nfrom standardwebhooks.webhooks import Webhook\nd=json.load(sys.stdin)\nWebhook(d['secret']).verify(d['body'], d['headers'])\n";
    let mut child = std::process::Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        // The test's own output: shown when it fails.
        eprintln!(
            "standardwebhooks refused the signature: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.success()
}

/// One event to a `serve` process that its destination will refuse.
async fn post_doomed(process: &ServerProcess) {
    let status = github_request(
        &reqwest::Client::new(),
        &format!("{}/hooks/gh", process.base),
        "doomed",
        r#"{"id":"doomed"}"#,
        b"gh-secret",
    )
    .send()
    .await
    .unwrap()
    .status();
    assert_eq!(status, 200);
}

const WEBHOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn two_processes_send_each_transition_to_each_channel_once(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let webhook = Destination::start(vec![]).await;
    let slack = Destination::start(vec![]).await;
    let smtp = SmtpSink::start().await;
    let config = format!(
        r#"
[alerts]
evaluate_every_secs = 1
resolve_after_secs = 0
# Only the dead letter's alert: the incident it opens would fire its own.
[alerts.rules.incident_opened]
enabled = false
[[alerts.channel]]
name = "hook"
kind = "webhook"
url = "{webhook}"
secret = "{WEBHOOK_SECRET}"
[[alerts.channel]]
name = "chat"
kind = "slack"
url = "{slack}"
rules = ["dead_letters"]
[[alerts.channel]]
name = "mail"
kind = "email"
smtp_host = "127.0.0.1"
smtp_port = {port}
smtp_security = "none"
from = "replaysafe@example.test"
to = ["oncall@example.test"]

[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
max_attempts = 1
"#,
        webhook = webhook.url,
        slack = slack.url,
        port = smtp.port,
        destination = destination.url,
    );
    let url = database_url(&pool).await;
    // The first migrates; the second starts on the migrated database.
    let a = ServerProcess::start(&config, &url, &[]).await;
    let b = ServerProcess::start(&config, &url, &[]).await;

    // One event the destination refuses: dead, and the alert fires.
    post_doomed(&a).await;
    eventually("the firing alert reaches every channel", || {
        webhook.count() == 1 && slack.count() == 1 && smtp.messages().len() == 1
    })
    .await;

    // Re-delivered through the API of the other process; forwarded this
    // time, so no dead letter is left and the alert resolves.
    let token = crate::helpers::make_token(&pool, "oncall", "operator", None).await;
    let event: i64 = sqlx::query_scalar("SELECT id FROM events WHERE idem_key = 'doomed'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let redelivered = reqwest::Client::new()
        .post(format!("{}/api/v1/events/{event}/redeliver", b.base))
        .bearer_auth(&token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(redelivered.status(), 200);
    eventually("the resolution reaches every channel", || {
        webhook.count() == 2 && slack.count() == 2 && smtp.messages().len() == 2
    })
    .await;
    // A few more evaluations by both: nothing more is sent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        (webhook.count(), slack.count(), smtp.messages().len()),
        (2, 2, 2)
    );

    let hooks = webhook.received.lock().unwrap().clone();
    let kinds: Vec<Value> = hooks
        .iter()
        .map(|h| {
            assert!(
                verified_by_the_sdk(WEBHOOK_SECRET, &h.headers, &h.body),
                "signature"
            );
            let v: Value = serde_json::from_slice(&h.body).unwrap();
            assert_eq!(v["data"]["rule"], "dead_letters");
            assert_eq!(v["data"]["source"], "gh");
            assert!(v["data"]["url"]
                .as_str()
                .unwrap()
                .ends_with("/dead?source=gh"));
            v["type"].clone()
        })
        .collect();
    assert_eq!(kinds, ["alert.firing", "alert.resolved"]);
    assert_ne!(
        hooks[0].headers["webhook-id"],
        hooks[1].headers["webhook-id"]
    );
    let chats: Vec<String> = slack
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|c| {
            serde_json::from_slice::<Value>(&c.body).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(chats[0].contains("FIRING: Dead letters on gh"), "{chats:?}");
    assert!(
        chats[1].contains("RESOLVED: Dead letters on gh"),
        "{chats:?}"
    );
    let mails = smtp.messages();
    let subjects: Vec<&str> = mails
        .iter()
        .filter_map(|m| m.lines().find(|l| l.starts_with("Subject:")))
        .collect();
    assert!(
        subjects.contains(&"Subject: [replaysafe] FIRING: Dead letters on gh"),
        "{mails:?}"
    );
    assert!(
        subjects.contains(&"Subject: [replaysafe] RESOLVED: Dead letters on gh"),
        "{mails:?}"
    );
    assert!(mails.iter().all(|m| m.contains("To: oncall@example.test")));
    drop((a, b));
    assert!(Path::new(&smtp.maildir.path().join("box")).exists());
}

// The binary is waited for on this thread; the receiver answers on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_test_sends_a_signed_test_message_to_one_channel() {
    let webhook = Destination::start(vec![]).await;
    // A channel whose URL answers with a redirect: the alert goes nowhere else.
    let elsewhere = Destination::start(vec![]).await;
    let redirecting = Destination::start(vec![Scripted {
        status: 307,
        headers: vec![("location", elsewhere.url.clone())],
        delay: Duration::ZERO,
    }])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replaysafe.toml");
    std::fs::write(
        &path,
        format!(
            "[[alerts.channel]]\nname = \"hook\"\nkind = \"webhook\"\nurl = \"{}\"\nsecret = \"{WEBHOOK_SECRET}\"\n\
             [[alerts.channel]]\nname = \"moved\"\nkind = \"webhook\"\nurl = \"{}\"\nsecret = \"{WEBHOOK_SECRET}\"\n",
            webhook.url, redirecting.url
        ),
    )
    .unwrap();
    let run = |channel: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
            .args(["alert", "test", "--channel", channel, "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let sent = run("hook");
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    assert_eq!(webhook.count(), 1);
    let got = webhook.received.lock().unwrap()[0].clone();
    assert!(verified_by_the_sdk(WEBHOOK_SECRET, &got.headers, &got.body));
    let v: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(v["type"], "alert.test");
    let unknown = run("pager");
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("(the config has: hook, moved)"));
    let moved = run("moved");
    assert!(!moved.status.success(), "a redirect is no delivery");
    assert_eq!(redirecting.count(), 1);
    assert_eq!(elsewhere.count(), 0, "the redirect was followed");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn an_admins_silence_keeps_an_alert_shown_but_unsent(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400); 2]).await;
    let webhook = Destination::start(vec![]).await;
    let top = format!(
        "[alerts]\nresolve_after_secs = 0\n[[alerts.channel]]\nname = \"hook\"\nkind = \"webhook\"\nurl = \"{}\"\nsecret = \"{WEBHOOK_SECRET}\"\n",
        webhook.url
    );
    let app = spawn_app(pool.clone(), gh_config(&destination.url, &top)).await;
    let (status, silence) = app
        .server_fn(
            "alert-silence",
            "rule=dead_letters&source=gh&minutes=60&reason=a+known+outage",
        )
        .await;
    assert_eq!(status, 200, "{silence}");
    let (status, refused) = app
        .server_fn("alert-silence", "rule=no_such_rule&minutes=60&reason=x")
        .await;
    assert_eq!(status, 400, "{refused}");

    assert_eq!(deliver(&app, "silenced", b"gh-secret").await, 200);
    app.drain().await;
    let t = evaluate_once(&pool, &app.config).await.unwrap();
    assert_eq!(names(&t.fired), ["dead_letters"]);
    let queued: i64 = sqlx::query_scalar("SELECT count(*) FROM alert_notifications")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(queued, 0, "silenced: nothing to send");

    // The page shows it firing, silenced, and the silence with its reason.
    let (_, page) = app.server_fn("alerts", "").await;
    assert_eq!(page["firing"][0]["rule"], "dead_letters");
    assert!(page["firing"][0]["silenced_until"].is_string(), "{page}");
    assert_eq!(page["silences"][0]["reason"], "a known outage");

    // Ended: its resolution goes nowhere (no channel was told it fired);
    // the next alert is sent, and so is its resolution.
    let (status, _) = app
        .server_fn("alert-unsilence", &format!("id={}", silence["id"]))
        .await;
    assert_eq!(status, 200);
    let age = || {
        sqlx::query("UPDATE dispatches SET state_changed_at = now() - interval '1 hour'")
            .execute(&pool)
    };
    age().await.unwrap();
    assert_eq!(
        names(&evaluate_once(&pool, &app.config).await.unwrap().resolved),
        ["dead_letters"]
    );
    let http = replaysafe_core::alerts::channels::client();
    assert_eq!(
        replaysafe_core::alerts::send_due(&pool, &app.config, &http)
            .await
            .unwrap(),
        0
    );
    assert_eq!(deliver(&app, "after-the-silence", b"gh-secret").await, 200);
    app.drain().await;
    assert_eq!(
        names(&evaluate_once(&pool, &app.config).await.unwrap().fired),
        ["dead_letters"]
    );
    age().await.unwrap();
    assert_eq!(
        names(&evaluate_once(&pool, &app.config).await.unwrap().resolved),
        ["dead_letters"]
    );
    assert_eq!(
        replaysafe_core::alerts::send_due(&pool, &app.config, &http)
            .await
            .unwrap(),
        2
    );
    let kinds: Vec<Value> = webhook
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|h| serde_json::from_slice::<Value>(&h.body).unwrap()["type"].clone())
        .collect();
    assert_eq!(kinds, ["alert.firing", "alert.resolved"]);
    let (_, audit) = app.server_fn("audit", "").await;
    let actions: Vec<&str> = audit["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"alert.silence") && actions.contains(&"alert.unsilence"),
        "{actions:?}"
    );
}
