//! Fan-out (issue 18): one source, several destinations, each with its own
//! dispatch of each event it wants; filters route by the provider's event
//! type and the verified body; the dedup promise holds per destination.

use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{
    hmac_hex, spawn_app, state_of, test_config, Destination, Outage, Scripted, TestApp,
};

struct Three {
    billing: Destination,
    crm: Destination,
    analytics: Destination,
}

/// Source `gh` (GitHub) with three destinations: `billing` wants issue
/// events, `crm` every event, `analytics` pushes to main only.
fn config(d: &Three, max_attempts: u32) -> replaysafe_core::config::Config {
    config_with(d, max_attempts, "")
}

/// `config`, with `top`: more top-level settings.
fn config_with(d: &Three, max_attempts: u32, top: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"{top}
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
max_attempts = {max_attempts}

[[source.destination]]
name = "billing"
url = "{}"
filter = "issues.*"

[[source.destination]]
name = "crm"
url = "{}"

[[source.destination]]
name = "analytics"
url = "{}"
filter = {{ types = ["push"], body = {{ "/ref" = "refs/heads/main" }} }}
"#,
            d.billing.url, d.crm.url, d.analytics.url
        ),
        &[],
    )
}

async fn deliver(app: &TestApp, id: &str, event: &str, body: &str) -> reqwest::Response {
    app.client
        .post(app.url("/hooks/gh"))
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", id)
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hmac_hex(b"gh-secret", body.as_bytes())),
        )
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// (destination, state) of an event's dispatches, by destination.
async fn dispatches(pool: &PgPool, key: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT p.destination, p.state FROM dispatches p JOIN events e ON e.id = p.event_id
         WHERE e.idem_key = $1 ORDER BY p.destination",
    )
    .bind(key)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn each_destination_gets_each_event_it_wants_once(pool: PgPool) {
    let three = Three {
        billing: Destination::start(vec![]).await,
        crm: Destination::start(vec![]).await,
        analytics: Destination::start(vec![]).await,
    };
    let app = spawn_app(pool.clone(), config(&three, 3)).await;
    let issue = r#"{"action":"opened","issue":{"number":1}}"#;
    let main = r#"{"ref":"refs/heads/main"}"#;
    let branch = r#"{"ref":"refs/heads/topic"}"#;
    // Each sent twice: the provider's retry is a duplicate for every destination.
    for _ in 0..2 {
        assert_eq!(
            deliver(&app, "e-issue", "issues", issue).await.status(),
            200
        );
        assert_eq!(deliver(&app, "e-main", "push", main).await.status(), 200);
        assert_eq!(deliver(&app, "e-topic", "push", branch).await.status(), 200);
    }
    assert_eq!(
        dispatches(&pool, "e-issue").await,
        pairs(&[
            ("analytics", "filtered"),
            ("billing", "queued"),
            ("crm", "queued")
        ])
    );
    let event_type: Option<String> =
        sqlx::query_scalar("SELECT event_type FROM events WHERE idem_key = 'e-issue'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(event_type.as_deref(), Some("issues.opened"));

    assert_eq!(app.drain().await, 5, "2 + 2 + 1 dispatches want forwarding");
    assert_eq!(three.billing.keys(), ["gh:e-issue"]);
    let mut crm = three.crm.keys();
    crm.sort();
    assert_eq!(crm, ["gh:e-issue", "gh:e-main", "gh:e-topic"]);
    assert_eq!(three.analytics.keys(), ["gh:e-main"]);
    for key in ["e-issue", "e-main", "e-topic"] {
        assert_eq!(state_of(&pool, key).await, "completed", "{key}");
    }
    assert_eq!(
        dispatches(&pool, "e-topic").await,
        pairs(&[
            ("analytics", "filtered"),
            ("billing", "filtered"),
            ("crm", "completed")
        ])
    );
    // Each attempt is recorded against its destination.
    let attempts: Vec<(String, i64)> = sqlx::query_as(
        "SELECT destination, count(*) FROM attempts GROUP BY destination ORDER BY destination",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        attempts,
        [
            ("analytics".to_owned(), 1),
            ("billing".to_owned(), 1),
            ("crm".to_owned(), 3)
        ]
    );

    // The Sources page lists the three, with what each takes (no secret).
    let (status, sources) = app.server_fn("sources", "").await;
    assert_eq!(status, 200, "{sources}");
    let listed = &sources[0]["destinations"];
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{sources}");
    assert_eq!(listed[0]["name"], "billing");
    assert!(
        listed[0]["filter"].as_str().unwrap().contains("issues.*"),
        "{listed}"
    );
    assert!(listed[1]["filter"].is_null(), "{listed}");

    // A late retry is answered "already completed" and goes nowhere.
    let late = deliver(&app, "e-issue", "issues", issue).await;
    assert_eq!(late.headers()["x-replaysafe-outcome"], "completed");
    assert_eq!(app.drain().await, 0);
    assert_eq!(three.crm.count(), 3);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_dead_destination_is_revived_alone_and_once(pool: PgPool) {
    let three = Three {
        billing: Destination::start(vec![Scripted::status(500), Scripted::status(500)]).await,
        crm: Destination::start(vec![]).await,
        analytics: Destination::start(vec![]).await,
    };
    let app = spawn_app(pool.clone(), config(&three, 2)).await;
    let issue = r#"{"action":"closed"}"#;
    assert_eq!(deliver(&app, "e-1", "issues", issue).await.status(), 200);
    // Retries are due at once (the test workers' policy): billing fails twice.
    while app.drain().await > 0 {}
    assert_eq!(
        dispatches(&pool, "e-1").await,
        pairs(&[
            ("analytics", "filtered"),
            ("billing", "dead"),
            ("crm", "completed")
        ])
    );
    assert_eq!(
        state_of(&pool, "e-1").await,
        "dead",
        "dead: any destination dead"
    );
    let duplicate = deliver(&app, "e-1", "issues", issue).await;
    assert_eq!(duplicate.headers()["x-replaysafe-outcome"], "dead");

    // Operators click at once: billing's dispatch is revived once; crm,
    // which completed, is never forwarded again.
    let first: i64 =
        sqlx::query_scalar("SELECT first_delivery_id FROM events WHERE idem_key = 'e-1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let form = format!("delivery_id={first}");
    let clicks =
        futures_util::future::join_all((0..4).map(|_| app.server_fn("redeliver", &form))).await;
    let requeued = clicks
        .iter()
        .filter(|(status, result)| *status == 200 && result["requeued"] == true)
        .count();
    assert_eq!(requeued, 1, "{clicks:?}");
    assert_eq!(app.drain().await, 1);
    assert_eq!(three.billing.count(), 3);
    assert_eq!(three.crm.count(), 1);
    assert_eq!(state_of(&pool, "e-1").await, "completed");
}

/// Re-delivery and force act on one destination or on all, with the same
/// guard: a dead dispatch is revived once however many click, a completed
/// one is refused; the delivery's outcome stays the event's (dead while any
/// destination is); dead letters filter by destination.
#[sqlx::test(migrator = "MIGRATOR")]
async fn redeliveries_and_forces_act_on_one_destination_or_on_all(pool: PgPool) {
    let failing = || vec![Scripted::status(500), Scripted::status(500)];
    let three = Three {
        billing: Destination::start(failing()).await,
        crm: Destination::start(failing()).await,
        analytics: Destination::start(vec![]).await,
    };
    let app = spawn_app(pool.clone(), config(&three, 2)).await;
    assert_eq!(
        deliver(&app, "e-1", "issues", r#"{"action":"closed"}"#)
            .await
            .status(),
        200
    );
    while app.drain().await > 0 {}
    assert_eq!(
        dispatches(&pool, "e-1").await,
        pairs(&[
            ("analytics", "filtered"),
            ("billing", "dead"),
            ("crm", "dead")
        ])
    );
    let (event, first): (i64, i64) =
        sqlx::query_as("SELECT id, first_delivery_id FROM events WHERE idem_key = 'e-1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let dead_at = |destination: &'static str| {
        let app = &app;
        async move {
            let (status, page) = app
                .server_fn("dead", &format!("source=gh&destination={destination}"))
                .await;
            assert_eq!(status, 200, "{page}");
            page["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_i64().unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(dead_at("billing").await, vec![event]);
    assert_eq!(dead_at("analytics").await, Vec::<i64>::new());

    // Four operators re-deliver to billing at once: revived once, crm untouched.
    let to_billing = format!("delivery_id={first}&destination=billing");
    let clicks =
        futures_util::future::join_all((0..4).map(|_| app.server_fn("redeliver", &to_billing)))
            .await;
    let requeued: Vec<_> = clicks
        .iter()
        .filter(|(status, r)| *status == 200 && r["requeued"] == true)
        .collect();
    assert_eq!(requeued.len(), 1, "{clicks:?}");
    assert!(
        requeued[0].1["message"]
            .as_str()
            .unwrap()
            .contains("to billing"),
        "{clicks:?}"
    );
    assert_eq!(app.drain().await, 1);
    assert_eq!((three.billing.count(), three.crm.count()), (3, 2));
    assert_eq!(
        dispatches(&pool, "e-1").await,
        pairs(&[
            ("analytics", "filtered"),
            ("billing", "completed"),
            ("crm", "dead")
        ])
    );
    assert_eq!(dead_at("billing").await, Vec::<i64>::new());
    assert_eq!(dead_at("crm").await, vec![event]);

    // Billing again: refused for billing's own state; the outcome is the
    // event's, still dead at crm.
    let (status, again) = app.server_fn("redeliver", &to_billing).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (again["outcome"].as_str(), again["requeued"].as_bool()),
        (Some("dead"), Some(false))
    );
    assert_eq!(again["message"], "refused: already completed at billing");
    let (_, filtered) = app
        .server_fn(
            "redeliver",
            &format!("delivery_id={first}&destination=analytics"),
        )
        .await;
    assert_eq!(
        filtered["message"],
        "refused: analytics's filter does not take this event"
    );
    let (status, unknown) = app
        .server_fn(
            "redeliver",
            &format!("delivery_id={first}&destination=nope"),
        )
        .await;
    assert_eq!(status, 404, "{unknown}");

    // Without a destination: every dead one (crm), once.
    let (_, all) = app
        .server_fn("redeliver", &format!("delivery_id={first}"))
        .await;
    assert_eq!(all["requeued"], true, "{all}");
    assert_eq!(app.drain().await, 1);
    assert_eq!((three.billing.count(), three.crm.count()), (3, 3));
    assert_eq!(state_of(&pool, "e-1").await, "completed");

    // A force of crm alone, clicked twice at once: crm runs once more,
    // billing never.
    let force = format!("event_id={event}&confirm_key=e-1&reason=replay+crm&destination=crm");
    let forces =
        futures_util::future::join_all((0..2).map(|_| app.server_fn("force", &force))).await;
    let forced: Vec<_> = forces.iter().filter(|(status, _)| *status == 200).collect();
    assert_eq!(forced.len(), 1, "{forces:?}");
    assert!(
        forced[0].1.as_str().unwrap().contains("again to crm"),
        "{forces:?}"
    );
    assert_eq!(app.drain().await, 1);
    assert_eq!((three.billing.count(), three.crm.count()), (3, 4));
    assert!(three.crm.received.lock().unwrap()[3].headers["x-replaysafe-forced"] == "true");

    // A force of every destination names the ones it queued: both completed
    // ones, not the filtered one.
    let (status, all) = app
        .server_fn(
            "force",
            &format!("event_id={event}&confirm_key=e-1&reason=replay+all"),
        )
        .await;
    assert_eq!(status, 200, "{all}");
    assert!(
        all.as_str().unwrap().contains("again to billing, crm with"),
        "{all}"
    );
    assert_eq!(app.drain().await, 2);
    assert_eq!((three.billing.count(), three.crm.count()), (4, 5));
    let queued: serde_json::Value = sqlx::query_scalar(
        "SELECT detail->'forced' FROM audit_log WHERE action = 'force'
         AND detail->>'reason' = 'replay all'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(queued, serde_json::json!(["billing", "crm"]));
    let (status, unwanted) = app
        .server_fn(
            "force",
            &format!("event_id={event}&confirm_key=e-1&reason=x&destination=analytics"),
        )
        .await;
    assert_eq!(status, 409, "{unwanted}");
    assert!(
        unwanted
            .to_string()
            .contains("analytics's filter does not take this event"),
        "{unwanted}"
    );
    let audit: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT action, detail->>'destination' FROM audit_log ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(
        audit.contains(&("force".into(), Some("crm".into())))
            && audit.contains(&("redeliver".into(), Some("billing".into()))),
        "{audit:?}"
    );
}

/// Configs refuse what fan-out cannot honour, naming the key.
#[test]
fn destinations_are_checked_as_the_config_is_read() {
    let base = "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"x\"]\n";
    for (extra, key) in [
        (
            "[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\n[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"",
            "source[0].destination[1].name",
        ),
        (
            "[[source.destination]]\nname = \"a\"\nurl = \"ftp://h/\"",
            "source[0].destination[0].url",
        ),
        (
            "[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\nfilter = \"[\"",
            "source[0].destination[0].filter",
        ),
        (
            "[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\nrate_per_sec = 0",
            "source[0].destination[0].rate_per_sec",
        ),
        (
            "[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\nordering = \"fifo\"",
            "source[0].destination[0].ordering",
        ),
        (
            "[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\nordering_key = \"/id\"",
            "source[0].destination[0].ordering_key",
        ),
        (
            "[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\nordering = \"per_key\"\nordering_key = \"id\"",
            "source[0].destination[0].ordering_key",
        ),
        (
            "[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\nspeed = 1",
            "source[0].destination[0].speed",
        ),
        (
            "destination_secret = \"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"\n[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"",
            "source[0].destination_secret",
        ),
    ] {
        let text = format!("{base}{extra}");
        let env = |_: &str| None;
        let e = replaysafe_core::config::parse_and_validate(None, &text, &env)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("`{key}`")), "{extra:?} gave {e}");
    }
}

async fn wait_for(destination: &Destination, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while destination.count() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} reached the destination",
            destination.count()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Claims handed to this process's workers at once: one lease per wanted
/// destination, no lease statement, each payload reaching each of them.
#[sqlx::test(migrator = "MIGRATOR")]
async fn handed_over_claims_reach_every_destination_that_wants_them(pool: PgPool) {
    crate::helpers::track_statements(&pool).await;
    let three = Three {
        billing: Destination::start(vec![]).await,
        crm: Destination::start(vec![]).await,
        analytics: Destination::start(vec![]).await,
    };
    let app = spawn_app(pool.clone(), config(&three, 3)).await;
    let mut workers = replaysafe_core::processing::worker::Workers::new(&app.services);
    workers.poll = std::time::Duration::from_secs(3600);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _running = workers.spawn(4, shutdown.clone());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let before = crate::helpers::lease_statements(&pool).await;
    let sent = futures_util::future::join_all((0..60).map(|i| {
        let app = &app;
        async move {
            let (event, body) = if i % 2 == 0 {
                ("issues", format!(r#"{{"action":"opened","n":{i}}}"#))
            } else {
                ("push", format!(r#"{{"ref":"refs/heads/main","n":{i}}}"#))
            };
            deliver(app, &format!("h-{i}"), event, &body)
                .await
                .status()
                .as_u16()
        }
    }))
    .await;
    assert!(sent.iter().all(|&s| s == 200), "{sent:?}");
    wait_for(&three.crm, 60).await;
    wait_for(&three.billing, 30).await;
    wait_for(&three.analytics, 30).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(crate::helpers::lease_statements(&pool).await - before, 0);
    for (d, n, parity) in [
        (&three.crm, 60, None),
        (&three.billing, 30, Some(0)),
        (&three.analytics, 30, Some(1)),
    ] {
        let mut keys = d.keys();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "each once");
        assert_eq!(d.count(), n, "none twice");
        let bodies: Vec<serde_json::Value> = d
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|c| serde_json::from_slice(&c.body).unwrap())
            .collect();
        if let Some(parity) = parity {
            assert!(bodies
                .iter()
                .all(|b| b["n"].as_i64().unwrap() % 2 == parity));
        }
    }
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dispatches WHERE state NOT IN ('completed', 'filtered')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(open, 0);
    shutdown.cancel();
}

/// A source's events kept while it had no destination (under `default`)
/// go to the destinations configured later, each once.
#[sqlx::test(migrator = "MIGRATOR")]
async fn events_kept_without_a_destination_go_to_the_ones_configured_later(pool: PgPool) {
    let bare = test_config(
        "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\n",
        &[],
    );
    let before = spawn_app(pool.clone(), bare).await;
    for i in 0..3 {
        assert_eq!(
            deliver(
                &before,
                &format!("k-{i}"),
                "push",
                &format!(r#"{{"ref":"refs/heads/main","i":{i}}}"#)
            )
            .await
            .status(),
            200
        );
    }
    assert_eq!(before.drain().await, 0, "nowhere to forward");
    let three = Three {
        billing: Destination::start(vec![]).await,
        crm: Destination::start(vec![]).await,
        analytics: Destination::start(vec![]).await,
    };
    let app = spawn_app(pool.clone(), config(&three, 3)).await;
    app.workers().adopt_orphans().await;
    app.workers().adopt_orphans().await;
    while app.drain().await > 0 {}
    for d in [&three.billing, &three.crm, &three.analytics] {
        let mut keys = d.keys();
        keys.sort();
        assert_eq!(keys, ["gh:k-0", "gh:k-1", "gh:k-2"]);
    }
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM dispatches WHERE destination = 'default'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(left, 0);
}

/// Source `gh` with destination `limited` (its own limits) and `free`.
fn limited_config(limited: &str, free: &str, limits: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]

[[source.destination]]
name = "limited"
url = "{limited}"
{limits}

[[source.destination]]
name = "free"
url = "{free}"
"#
        ),
        &[],
    )
}

/// Two processes on one database, each with its workers running (until
/// the join sets are dropped).
async fn two_processes(
    pool: &PgPool,
    config: replaysafe_core::config::Config,
    shutdown: &tokio_util::sync::CancellationToken,
) -> (TestApp, TestApp, Vec<tokio::task::JoinSet<()>>) {
    two_processes_with(pool, config, shutdown, |app| {
        replaysafe_core::processing::worker::Workers::new(&app.services)
    })
    .await
}

/// `two_processes`, each with the workers `workers` makes.
async fn two_processes_with(
    pool: &PgPool,
    config: replaysafe_core::config::Config,
    shutdown: &tokio_util::sync::CancellationToken,
    workers: fn(&TestApp) -> replaysafe_core::processing::worker::Workers,
) -> (TestApp, TestApp, Vec<tokio::task::JoinSet<()>>) {
    let one = spawn_app(pool.clone(), config.clone()).await;
    let other_pool = PgPool::connect(&crate::helpers::database_url(pool).await)
        .await
        .unwrap();
    let two = spawn_app(other_pool, config).await;
    let running = [&one, &two]
        .iter()
        .map(|app| workers(app).spawn(4, shutdown.clone()))
        .collect();
    (one, two, running)
}

async fn send_to_both(one: &TestApp, two: &TestApp, n: usize) {
    let sent = futures_util::future::join_all((0..n).map(|i| {
        let app = if i % 2 == 0 { one } else { two };
        async move {
            deliver(app, &format!("r-{i}"), "push", &format!(r#"{{"i":{i}}}"#))
                .await
                .status()
                .as_u16()
        }
    }))
    .await;
    assert!(sent.iter().all(|&s| s == 200), "{sent:?}");
}

fn arrivals(d: &Destination) -> Vec<std::time::Instant> {
    let mut at: Vec<_> = d.received.lock().unwrap().iter().map(|c| c.at).collect();
    at.sort();
    at
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_rate_limit_holds_across_two_processes(pool: PgPool) {
    let limited = Destination::start(vec![]).await;
    let free = Destination::start(vec![]).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let config = limited_config(&limited.url, &free.url, "rate_per_sec = 50");
    let (one, two, _running) = two_processes(&pool, config, &shutdown).await;
    let started = std::time::Instant::now();
    send_to_both(&one, &two, 250).await;
    // The limited destination's backlog does not hold the other one back.
    wait_for(&free, 250).await;
    let free_done = started.elapsed();
    assert!(
        limited.count() < 200,
        "the free destination had all 250 in {free_done:?}, the limited one {}",
        limited.count()
    );
    wait_for(&limited, 250).await;
    let at = arrivals(&limited);
    let busiest = (0..at.len())
        .map(|i| {
            at[i..]
                .iter()
                .take_while(|t| t.duration_since(at[i]) < std::time::Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap();
    eprintln!("rate_per_sec = 50, two processes: at most {busiest} requests in any second");
    // The gate starts at most 52.5 in any second (the rate plus one
    // pace's burst); arrivals add the loaded machine's jitter to that
    // (CI once saw 56).
    assert!(busiest <= 58, "{busiest} requests in one second at 50/s");
    let spread = at.last().unwrap().duration_since(at[0]).as_secs_f64();
    assert!(
        spread > 3.5 && spread < 8.0,
        "250 requests at 50/s took {spread:.1} s"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let mut keys = limited.keys();
    keys.sort();
    keys.dedup();
    assert_eq!((limited.count(), keys.len()), (250, 250), "each once");
    shutdown.cancel();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn at_most_max_in_flight_attempts_run_at_once_across_two_processes(pool: PgPool) {
    let slow = Scripted {
        status: 200,
        headers: vec![],
        delay: std::time::Duration::from_millis(300),
    };
    let limited = Destination::start(vec![slow; 40]).await;
    let free = Destination::start(vec![]).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let config = limited_config(&limited.url, &free.url, "max_in_flight = 3");
    let (one, two, _running) = two_processes(&pool, config, &shutdown).await;
    send_to_both(&one, &two, 30).await;
    wait_for(&limited, 30).await;
    let at = arrivals(&limited);
    let overlapping = (0..at.len())
        .map(|i| {
            at.iter()
                .filter(|t| {
                    **t <= at[i]
                        && at[i].duration_since(**t) < std::time::Duration::from_millis(290)
                })
                .count()
        })
        .max()
        .unwrap();
    eprintln!("max_in_flight = 3, two processes: at most {overlapping} at once");
    assert!(overlapping <= 3, "{overlapping} attempts in flight at once");
    assert!(
        overlapping >= 2,
        "the limit is used ({overlapping} at once)"
    );
    shutdown.cancel();
}

/// A destination that goes down and comes back: its breaker opens after
/// `breaker_failures` failures in a row, its events wait (none is
/// dead-lettered, none forwarded while it is open), a probe after the
/// cool-down fails and doubles it, a later one succeeds and closes it, and
/// every event is then delivered once.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_broken_destination_opens_its_breaker_is_probed_and_heals(pool: PgPool) {
    let down = Outage::start().await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
max_attempts = 10

[[source.destination]]
name = "flaky"
url = "{}"
breaker_failures = 3
breaker_cooldown_secs = 1
"#,
            down.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    // Retries due at once: only the breaker holds them back.
    let _running = app.workers().spawn(2, shutdown.clone());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for i in 0..6 {
        let body = format!(r#"{{"i":{i}}}"#);
        assert_eq!(
            deliver(&app, &format!("b-{i}"), "push", &body)
                .await
                .status(),
            200
        );
    }
    let breaker = |pool: PgPool| async move {
        sqlx::query_scalar::<_, String>(
            "SELECT breaker FROM destination_gates WHERE source = 'gh' AND destination = 'flaky'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while breaker(pool.clone()).await.as_deref() != Some("open") {
        assert!(
            std::time::Instant::now() < deadline,
            "the breaker never opened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Open: nothing reaches the destination before the cool-down ends.
    let at_open = down.answered().len();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(
        down.answered().len(),
        at_open,
        "forwarded while the breaker was open"
    );
    // A probe fails: the breaker opens again, its cool-down doubled.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let cooldown: f64 = sqlx::query_scalar(
            "SELECT cooldown_secs FROM destination_gates WHERE destination = 'flaky'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if cooldown == 2.0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no probe failed");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(breaker(pool.clone()).await.as_deref(), Some("open"));
    // The destination is back: the next probe closes the breaker.
    down.up.store(true, std::sync::atomic::Ordering::SeqCst);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT count(*) FROM dispatches WHERE state = 'completed'")
                .fetch_one(&pool)
                .await
                .unwrap();
        if done == 6 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{done} of 6 completed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(breaker(pool.clone()).await.as_deref(), Some("closed"));
    let answered = down.answered();
    let ok: Vec<&String> = answered
        .iter()
        .filter(|a| a.1 == 200)
        .map(|a| &a.0)
        .collect();
    let unique: std::collections::HashSet<&&String> = ok.iter().collect();
    assert_eq!(
        (ok.len(), unique.len()),
        (6, 6),
        "each delivered once: {answered:?}"
    );
    let failed = answered.len() - 6;
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM dispatches GROUP BY state ORDER BY state")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(states, [("completed".to_owned(), 6)], "none dead-lettered");
    // The transitions are metrics: opened, probed and failed (opened again,
    // the cool-down doubled), probed and healed.
    let metrics = app.metrics().await;
    let count = |to: &str| -> u64 {
        let prefix = format!(
            "replaysafe_breaker_transitions_total{{source=\"gh\",destination=\"flaky\",to=\"{to}\"}} "
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    eprintln!(
        "breaker: {failed} failed attempts; opened {} times, probed {} times, closed {}",
        count("open"),
        count("half_open"),
        count("closed")
    );
    assert!(
        count("open") >= 2,
        "a failed probe opens it again\n{metrics}"
    );
    assert_eq!(
        count("half_open"),
        count("open"),
        "each opening ends in a probe"
    );
    assert_eq!(count("closed"), 1);
    shutdown.cancel();
}

/// Operators open and close a breaker by hand (a viewer may not), each
/// change audit-logged; while it is open nothing goes to the destination.
#[sqlx::test(migrator = "MIGRATOR")]
async fn an_operator_opens_and_closes_a_breaker_by_hand(pool: PgPool) {
    let crm = Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\n\
             [[source.destination]]\nname = \"crm\"\nurl = \"{}\"\n",
            crm.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    let viewer = app.session("viewer").await;
    let (status, _) = app
        .server_fn_as(
            Some(&viewer),
            "breaker",
            "slug=gh&destination=crm&open=true",
        )
        .await;
    assert_eq!(status, 403, "a viewer may not");
    let (status, answer) = app
        .server_fn("breaker", "slug=gh&destination=nowhere&open=true")
        .await;
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = app
        .server_fn("breaker", "slug=gh&destination=crm&open=true")
        .await;
    assert_eq!(status, 200, "{answer}");
    let (_, sources) = app.server_fn("sources", "").await;
    assert_eq!(
        sources[0]["destinations"][0]["breaker"], "open",
        "{sources}"
    );
    assert_eq!(
        sources[0]["destinations"][0]["breaker_by_hand"], true,
        "{sources}"
    );

    deliver(&app, "m-1", "push", "{}").await;
    assert_eq!(app.drain().await, 0, "held while the breaker is open");
    // The alerts see it: the source's destination is failing.
    let holding = replaysafe_core::alerts::rules::evaluate(
        &pool,
        &app.config.alert_rules,
        &Default::default(),
    )
    .await
    .unwrap();
    let failing = holding
        .iter()
        .find(|c| c.rule == "destination_failing" && c.source == "gh")
        .expect("destination_failing holds while the breaker is open");
    assert!(failing.summary.contains("crm"), "{}", failing.summary);
    // Nor does a probe take it: only an operator closes it.
    let mut probes = tokio::task::JoinSet::new();
    app.workers().probe_breakers(&mut probes).await;
    while probes.join_next().await.is_some() {}
    assert_eq!(crm.count(), 0);
    let (_, sources) = app.server_fn("sources", "").await;
    assert_eq!(
        sources[0]["destinations"][0]["breaker"], "open",
        "{sources}"
    );
    let waiting: String = sqlx::query_scalar("SELECT state FROM dispatches")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(waiting, "queued");

    let token = crate::helpers::make_token(&pool, "ops", "operator", None).await;
    let closed: serde_json::Value = app
        .client
        .post(app.url("/api/v1/sources/gh/destinations/crm/breaker/close"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(closed["destinations"][0]["breaker"], "closed", "{closed}");
    assert_eq!(app.drain().await, 1);
    assert_eq!(crm.keys(), ["gh:m-1"]);
    let audited: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, target FROM audit_log WHERE action LIKE 'breaker.%' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        audited,
        [
            ("breaker.open".to_owned(), "destination gh/crm".to_owned()),
            ("breaker.close".to_owned(), "destination gh/crm".to_owned())
        ]
    );
}

/// Requests in flight per key, in all, and the most in all at once.
type InFlight = (std::collections::HashMap<u64, u32>, u32, u32);

/// What an ordered destination saw: per ordering key, the sequence numbers
/// it accepted in the order it accepted them; whether two requests of one
/// key were ever in flight together; the most requests in flight at once.
#[derive(Clone, Default)]
struct Ordered {
    accepted: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<u64, Vec<u64>>>>,
    in_flight: std::sync::Arc<std::sync::Mutex<InFlight>>,
    overlapped: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tries: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(u64, u64), u32>>>,
}

impl Ordered {
    /// Answers each request after 30 ms: 500 on the first try of every
    /// event whose sequence number is 1 (mod 3), 400 for key 0's event 2
    /// (dead at once), 200 otherwise.
    async fn start(&self) -> String {
        let seen = self.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let (key, seq) = (
                        v["issue"]["number"].as_u64().unwrap(),
                        v["seq"].as_u64().unwrap(),
                    );
                    {
                        let mut f = seen.in_flight.lock().unwrap();
                        let mine = f.0.entry(key).or_default();
                        *mine += 1;
                        if *mine > 1 {
                            seen.overlapped
                                .store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        f.1 += 1;
                        f.2 = f.2.max(f.1);
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                    let tries = {
                        let mut t = seen.tries.lock().unwrap();
                        let n = t.entry((key, seq)).or_default();
                        *n += 1;
                        *n
                    };
                    let status = if key == 0 && seq == 2 {
                        400
                    } else if seq % 3 == 1 && tries == 1 {
                        500
                    } else {
                        seen.accepted
                            .lock()
                            .unwrap()
                            .entry(key)
                            .or_default()
                            .push(seq);
                        200
                    };
                    {
                        let mut f = seen.in_flight.lock().unwrap();
                        *f.0.get_mut(&key).unwrap() -= 1;
                        f.1 -= 1;
                    }
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }
}

/// `ordering = "per_key"`: events sharing the value at `ordering_key` reach
/// the destination one at a time and in the order they were received, with
/// two processes' workers leasing and retries in between; a dead one lets
/// the next go; other keys go meanwhile; an unordered destination beside it
/// is not held back.
#[sqlx::test(migrator = "MIGRATOR")]
async fn an_ordered_destination_takes_each_key_one_at_a_time_in_receipt_order(pool: PgPool) {
    let ordered = Ordered::default();
    let ordered_url = ordered.start().await;
    let free = Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
max_attempts = 5
paused = true

[[source.destination]]
name = "ordered"
url = "{ordered_url}"
ordering = "per_key"
ordering_key = "/issue/number"

[[source.destination]]
name = "free"
url = "{}"
"#,
            free.url
        ),
        &[],
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (one, two, _running) = two_processes_with(&pool, config, &shutdown, |app| {
        // A retry waits a moment: time for a later event to overtake it if
        // the order did not hold.
        let mut workers = app.workers();
        workers.policy = std::sync::Arc::new(replaysafe_core::processing::retry::RetryPolicy {
            schedule: vec![std::time::Duration::from_millis(150)],
            jitter: 0.0,
            min_retry_after: std::time::Duration::ZERO,
            max_retry_after: std::time::Duration::from_secs(1),
        });
        workers
    })
    .await;
    let (keys, per_key) = (4u64, 6u64);
    // Each acknowledged before the next is sent: that is their receipt order.
    for seq in 0..per_key {
        for key in 0..keys {
            let app = if (seq + key) % 2 == 0 { &one } else { &two };
            let body = format!(r#"{{"action":"edited","issue":{{"number":{key}}},"seq":{seq}}}"#);
            let sent = deliver(app, &format!("o-{key}-{seq}"), "issues", &body).await;
            assert_eq!(sent.status(), 200);
        }
    }
    // Received while paused, so that once resumed every key has work at
    // once: the keys go side by side, each key's events in turn.
    for app in [&one, &two] {
        let (status, answer) = app.server_fn("source-paused", "slug=gh&paused=false").await;
        assert_eq!(status, 200, "{answer}");
    }
    let all = (keys * per_key) as usize;
    wait_for(&free, all).await;
    let expected: std::collections::BTreeMap<u64, Vec<u64>> = (0..keys)
        .map(|key| {
            let seqs = (0..per_key).filter(|&s| !(key == 0 && s == 2)).collect();
            (key, seqs)
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while *ordered.accepted.lock().unwrap() != expected {
        assert!(
            std::time::Instant::now() < deadline,
            "accepted {:?}",
            ordered.accepted.lock().unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        !ordered.overlapped.load(std::sync::atomic::Ordering::SeqCst),
        "two events of one key were in flight at once"
    );
    let most = ordered.in_flight.lock().unwrap().2;
    eprintln!("ordered destination: at most {most} requests in flight at once (4 keys)");
    assert!(most >= 2, "keys went one after another ({most} at once)");
    assert_eq!(state_of(&pool, "o-0-2").await, "dead");
    let keys_stored: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT p.destination, p.ordering_key FROM dispatches p JOIN events e ON e.id = p.event_id
         WHERE e.idem_key = 'o-3-5' ORDER BY p.destination",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        keys_stored,
        vec![("free".into(), None), ("ordered".into(), Some("3".into()))]
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut free_keys = free.keys();
    free_keys.sort();
    free_keys.dedup();
    assert_eq!((free.count(), free_keys.len()), (all, all), "each once");
    shutdown.cancel();
}

/// "Backlog" and "dead letters" mean one thing on the overview, the Sources
/// page's figures, `/metrics` and the alert rules (`events::backlog`): the
/// backlog is split into due, waiting (backing off, breaker open, source
/// paused) and in flight by destination; a dead event counts once however
/// many of its destinations it died at, with each one's dead beside it.
#[sqlx::test(migrator = "MIGRATOR")]
async fn backlog_and_dead_letters_mean_one_thing_everywhere(pool: PgPool) {
    let three = Three {
        billing: Destination::start(vec![Scripted::status(400)]).await,
        crm: Destination::start(vec![Scripted::status(400)]).await,
        analytics: Destination::start(vec![]).await,
    };
    let rules = r#"
[alerts.rules.dead_letters]
threshold = 2
[alerts.rules.backlog]
oldest_due_minutes = 5
"#;
    let app = spawn_app(pool.clone(), config_with(&three, 3, rules)).await;
    let issue = r#"{"action":"closed"}"#;
    // e-1 dies at billing and at crm (both answer its first attempt 400).
    assert_eq!(deliver(&app, "e-1", "issues", issue).await.status(), 200);
    while app.drain().await > 0 {}
    // e-2 for billing and crm, e-3 for crm and analytics: not forwarded yet.
    assert_eq!(
        deliver(&app, "e-2", "issues", r#"{"action":"opened"}"#)
            .await
            .status(),
        200
    );
    let push = r#"{"ref":"refs/heads/main"}"#;
    assert_eq!(deliver(&app, "e-3", "push", push).await.status(), 200);
    let sql = |statement: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query(statement).execute(&pool).await.unwrap() }
    };
    // billing's breaker is open; crm's e-3 backs off, its e-2 is overdue;
    // analytics' e-3 is being forwarded.
    sql(
        "INSERT INTO destination_gates (source, destination, breaker, opened_by_hand)
         VALUES ('gh', 'billing', 'open', true)",
    )
    .await;
    sql(
        "UPDATE dispatches SET next_attempt_at = now() + interval '1 hour', state = 'retrying'
         WHERE destination = 'crm' AND event_id = (SELECT id FROM events WHERE idem_key = 'e-3')",
    )
    .await;
    sql(
        "UPDATE dispatches SET next_attempt_at = now() - interval '10 minutes'
         WHERE destination = 'crm' AND event_id = (SELECT id FROM events WHERE idem_key = 'e-2')",
    )
    .await;
    sql(
        "UPDATE dispatches SET state = 'processing', lease_owner = 'elsewhere',
                lease_expires_at = now() + interval '1 hour'
         WHERE destination = 'analytics' AND state <> 'filtered'",
    )
    .await;

    let (status, o) = app.server_fn("overview", "window=hour").await;
    assert_eq!(status, 200, "{o}");
    let b = &o["backlog"];
    assert_eq!(
        (&b["due"], &b["waiting"], &b["in_flight"]),
        (&1.into(), &2.into(), &1.into()),
        "{b}"
    );
    let oldest = b["oldest_due_secs"].as_f64().unwrap();
    assert!((600.0..700.0).contains(&oldest), "crm's e-2: {oldest}");
    assert_eq!(
        (&b["dead_letters"], &b["dead_last_10m"]),
        (&1.into(), &1.into()),
        "e-1 once"
    );
    let split: Vec<(String, i64, i64, i64, i64)> = b["by_destination"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["destination"].as_str().unwrap().to_owned(),
                d["due"].as_i64().unwrap(),
                d["waiting"].as_i64().unwrap(),
                d["in_flight"].as_i64().unwrap(),
                d["dead_letters"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        split,
        [
            ("analytics".into(), 0, 0, 1, 0),
            ("billing".into(), 0, 1, 0, 1),
            ("crm".into(), 1, 1, 0, 1)
        ]
    );
    assert_eq!(o["per_source"][0]["backlog"], o["backlog"], "one source");

    let metrics = app.metrics().await;
    for line in [
        r#"replaysafe_backlog_events{source="gh"} 4"#,
        r#"replaysafe_backlog{source="gh",destination="crm",state="due"} 1"#,
        r#"replaysafe_backlog{source="gh",destination="billing",state="waiting"} 1"#,
        r#"replaysafe_backlog{source="gh",destination="analytics",state="in_flight"} 1"#,
        r#"replaysafe_dead_letters{source="gh"} 1"#,
        r#"replaysafe_dead_letter_dispatches{source="gh",destination="billing"} 1"#,
        r#"replaysafe_dead_letter_dispatches{source="gh",destination="crm"} 1"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }

    // Two dead dispatches are one dead event: under the threshold of 2. The
    // overdue dispatch fires the backlog rule, until its source is paused.
    let fired = replaysafe_core::alerts::evaluate_once(&pool, &app.config)
        .await
        .unwrap()
        .fired;
    let rules = |fired: &[(String, String)]| {
        let mut rules: Vec<String> = fired
            .iter()
            .map(|(rule, _)| rule.clone())
            .filter(|rule| ["backlog", "dead_letters"].contains(&rule.as_str()))
            .collect();
        rules.sort();
        rules
    };
    assert_eq!(rules(&fired), ["backlog"]);
    sql("UPDATE sources SET paused_override = true WHERE slug = 'gh'").await;
    let (_, o) = app.server_fn("overview", "window=hour").await;
    let b = &o["backlog"];
    assert_eq!(
        (
            &b["due"],
            &b["waiting"],
            &b["in_flight"],
            &b["oldest_due_secs"]
        ),
        (&0.into(), &3.into(), &1.into(), &serde_json::Value::Null),
        "paused: nothing is due"
    );
    sql("UPDATE alerts SET state = 'resolved', resolved_at = now()").await;
    let t = replaysafe_core::alerts::evaluate_once(&pool, &app.config)
        .await
        .unwrap();
    assert!(rules(&t.fired).is_empty(), "{t:?}");
}
