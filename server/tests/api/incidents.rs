//! Incidents (issue 40): failing attempts grouped by source, destination,
//! kind and the answer's first line with its numbers and ids left out;
//! their states moved only from the states a move leaves (two operators at
//! once: one wins); resolved by themselves once quiet while the destination
//! answers 2xx; their dead events re-delivered once through the dedup layer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replaysafe_core::db::MIGRATOR;
use replaysafe_core::incidents::Move;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::helpers::{gh_config, spawn_app, TestApp};
use crate::rest::{call, token};

/// An application that refuses orders in a currency it does not know with
/// a 400 naming the order (a number that changes every time), refuses
/// negative amounts with another message, and takes everything else; once
/// `fixed`, it takes everything. Counts what it took per key.
struct Billing {
    url: String,
    fixed: Arc<AtomicBool>,
    taken: Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>,
}

impl Billing {
    async fn start() -> Self {
        let fixed: Arc<AtomicBool> = Default::default();
        let taken: Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>> =
            Default::default();
        let order = Arc::new(AtomicU64::new(1000));
        let (f, t) = (fixed.clone(), taken.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
                let (f, t, order) = (f.clone(), t.clone(), order.clone());
                async move {
                    let key = headers
                        .get("idempotency-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    if !f.load(Ordering::SeqCst) {
                        let n = order.fetch_add(7, Ordering::SeqCst);
                        if body.contains("XYZ") {
                            return (
                                axum::http::StatusCode::BAD_REQUEST,
                                format!("invalid currency 'XYZ' for order {n}\nsee the docs"),
                            );
                        }
                        if body.contains("-5") {
                            return (
                                axum::http::StatusCode::BAD_REQUEST,
                                "amount must be positive".to_owned(),
                            );
                        }
                    }
                    *t.lock().unwrap().entry(key).or_default() += 1;
                    (axum::http::StatusCode::OK, "ok".to_owned())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Billing { url, fixed, taken }
    }

    fn taken(&self, key: &str) -> u32 {
        self.taken.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

async fn send(app: &TestApp, key: &str, body: Value) {
    let status = app
        .github_delivery("gh", key, &body.to_string(), b"gh-secret")
        .await;
    assert!((200..300).contains(&status), "{status}");
}

/// `n` orders in a currency billing refuses, `cur-0` ... (GitHub signs the
/// body alone: each body differs, or the replay guard would take one for a
/// re-post of another).
async fn orders_in_xyz(app: &TestApp, n: usize) {
    for i in 0..n {
        send(app, &format!("cur-{i}"), json!({"currency": "XYZ", "n": i})).await;
    }
}

async fn fold(pool: &PgPool) {
    replaysafe_core::jobs::rollup::fold_all(pool).await.unwrap();
}

async fn incidents(app: &TestApp, token: &str, query: &str) -> Vec<Value> {
    let answer = call(app, "get", &format!("/incidents{query}"), Some(token), None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body.as_array().unwrap().clone()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn identical_failures_are_one_incident_moved_by_operators_and_redelivered_once(pool: PgPool) {
    let billing = Billing::start().await;
    let app = spawn_app(pool.clone(), gh_config(&billing.url, "")).await;
    let viewer = token(&app, "viewer", "viewer", None).await;
    let operator = token(&app, "operator", "operator", None).await;

    // 12 orders in XYZ (a different order number in each answer), 3 with a
    // negative amount, 5 fine: two incidents at billing, none for the rest.
    orders_in_xyz(&app, 12).await;
    for i in 0..3 {
        send(&app, &format!("neg-{i}"), json!({"amount": -5, "n": i})).await;
    }
    for i in 0..5 {
        send(&app, &format!("ok-{i}"), json!({"currency": "EUR", "n": i})).await;
    }
    app.drain().await;
    fold(&pool).await;

    let listed = incidents(&app, &viewer, "").await;
    assert_eq!(listed.len(), 2, "{listed:#?}");
    let currency = listed
        .iter()
        .find(|i| i["fingerprint"] == "invalid currency 'XYZ' for order <n>")
        .expect("the currency incident");
    assert_eq!(currency["kind"], "HTTP 400");
    assert_eq!(currency["state"], "open");
    assert_eq!(currency["count"], 12);
    assert_eq!(currency["source"], "gh");
    assert_eq!(currency["destination"], "default");
    let amount = listed
        .iter()
        .find(|i| i["fingerprint"] == "amount must be positive")
        .unwrap();
    assert_eq!(amount["count"], 3);
    let id = currency["id"].as_i64().unwrap();

    // Folding again counts nothing twice.
    fold(&pool).await;
    assert_eq!(incidents(&app, &viewer, "").await.len(), 2);
    let detail = call(
        &app,
        "get",
        &format!("/incidents/{id}"),
        Some(&viewer),
        None,
    )
    .await;
    assert_eq!(detail.body["incident"]["count"], 12);
    assert_eq!(detail.body["dead_now"], 12);
    assert_eq!(detail.body["affected"].as_array().unwrap().len(), 12);
    assert!(detail.body["incident"]["sample_response"]
        .as_str()
        .unwrap()
        .starts_with("invalid currency 'XYZ' for order "));

    // A viewer moves nothing; two operators acknowledging at once: one wins,
    // the other is told it is acknowledged already.
    let refused = call(
        &app,
        "post",
        &format!("/incidents/{id}/ack"),
        Some(&viewer),
        None,
    )
    .await;
    assert_eq!(refused.status, 403);
    let ack = format!("/incidents/{id}/ack");
    let (a, b) = tokio::join!(
        call(&app, "post", &ack, Some(&operator), None),
        call(&app, "post", &ack, Some(&operator), None)
    );
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{} / {}", a.body, b.body);
    assert_eq!(
        incidents(&app, &viewer, "?state=acknowledged").await[0]["state_changed_by"],
        "operator"
    );

    // The fix ships; the incident's dead events are re-delivered once each.
    billing.fixed.store(true, Ordering::SeqCst);
    let job = call(
        &app,
        "post",
        &format!("/incidents/{id}/redeliver"),
        Some(&operator),
        None,
    )
    .await;
    assert_eq!(job.status, 202, "{}", job.body);
    assert_eq!(
        job.body["total"], 12,
        "only this incident's events: {}",
        job.body
    );
    let job_id = job.body["id"].as_i64().unwrap();
    let started = Instant::now();
    loop {
        app.drain().await;
        let job = call(&app, "get", &format!("/jobs/{job_id}"), Some(&viewer), None).await;
        if job.body["state"] == "done" {
            assert_eq!(job.body["requeued"], 12, "{}", job.body);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{}", job.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.drain().await;
    for i in 0..12 {
        assert_eq!(billing.taken(&format!("gh:cur-{i}")), 1, "cur-{i} once");
    }
    for i in 0..3 {
        assert_eq!(
            billing.taken(&format!("gh:neg-{i}")),
            0,
            "not this incident's"
        );
    }
    // Again: nothing is dead at billing any more, nothing runs twice.
    let again = call(
        &app,
        "post",
        &format!("/incidents/{id}/redeliver"),
        Some(&operator),
        None,
    )
    .await;
    assert_eq!((again.status, again.body["total"].clone()), (202, json!(0)));

    // Resolved by hand; a later failure of the same kind opens a new one.
    let resolved = call(
        &app,
        "post",
        &format!("/incidents/{id}/resolve"),
        Some(&operator),
        None,
    )
    .await;
    assert_eq!(resolved.body["state"], "resolved");
    let twice = call(
        &app,
        "post",
        &format!("/incidents/{id}/ignore"),
        Some(&operator),
        None,
    )
    .await;
    assert_eq!(twice.status, 409, "a resolved incident is not ignored");
    billing.fixed.store(false, Ordering::SeqCst);
    send(&app, "cur-late", json!({"currency": "XYZ", "n": "late"})).await;
    app.drain().await;
    fold(&pool).await;
    let open = incidents(&app, &viewer, "?state=open").await;
    let reopened: Vec<&Value> = open
        .iter()
        .filter(|i| i["fingerprint"] == "invalid currency 'XYZ' for order <n>")
        .collect();
    assert_eq!(reopened.len(), 1);
    assert_ne!(reopened[0]["id"].as_i64().unwrap(), id);
    assert_eq!(reopened[0]["count"], 1);

    // Every move is in the audit log, the refused ones too.
    let audited: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, outcome FROM audit_log WHERE action LIKE 'incident.%' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(audited.contains(&("incident.ack".into(), "succeeded".into())));
    assert!(audited.contains(&("incident.ack".into(), "refused".into())));
    assert!(audited.contains(&("incident.resolve".into(), "succeeded".into())));
    assert!(audited.contains(&("incident.ignore".into(), "refused".into())));
    let bad = call(&app, "get", "/incidents?state=closed", Some(&viewer), None).await;
    assert_eq!(bad.status, 400);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn an_incident_resolves_by_itself_once_quiet_while_its_destination_answers(pool: PgPool) {
    let billing = Billing::start().await;
    let app = spawn_app(pool.clone(), gh_config(&billing.url, "")).await;
    let viewer = token(&app, "viewer", "viewer", None).await;
    orders_in_xyz(&app, 3).await;
    app.drain().await;
    fold(&pool).await;
    let ignored_too = {
        send(&app, "neg-0", json!({"amount": -5, "n": 0})).await;
        app.drain().await;
        fold(&pool).await;
        let all = incidents(&app, &viewer, "").await;
        let neg = all
            .iter()
            .find(|i| i["fingerprint"] == "amount must be positive")
            .unwrap();
        neg["id"].as_i64().unwrap()
    };
    replaysafe_core::incidents::apply(&pool, ignored_too, Move::Ignore, "test")
        .await
        .unwrap();
    // Quiet long enough, but the destination has not answered 2xx since:
    // it stays open.
    sqlx::query("UPDATE incidents SET last_seen_at = now() - interval '11 minutes'")
        .execute(&pool)
        .await
        .unwrap();
    let quiet = replaysafe_core::incidents::QUIET;
    assert!(replaysafe_core::incidents::resolve_quiet(&pool, quiet)
        .await
        .unwrap()
        .is_empty());
    // Now it answers 2xx to another event.
    send(&app, "ok-0", json!({"currency": "EUR", "n": 0})).await;
    app.drain().await;
    fold(&pool).await;
    let resolved = replaysafe_core::incidents::resolve_quiet(&pool, quiet)
        .await
        .unwrap();
    assert_eq!(
        resolved.len(),
        1,
        "the open one; the ignored one stays ignored"
    );
    let states: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT state, state_changed_by FROM incidents ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        vec![
            ("resolved".into(), None),
            ("ignored".into(), Some("test".into()))
        ]
    );
}

/// Operators and the fold at once, for many seeds: every move lands only
/// from a state it may leave, and the fold never counts into a resolved
/// incident (a failure after resolution opens a new one).
#[sqlx::test(migrator = "MIGRATOR")]
async fn moves_and_folds_at_once_keep_one_live_incident_per_kind(pool: PgPool) {
    use rand::{Rng, SeedableRng};
    let billing = Billing::start().await;
    let app = spawn_app(pool.clone(), gh_config(&billing.url, "")).await;
    for seed in 0..12u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for i in 0..rng.gen_range(1..4) {
            send(
                &app,
                &format!("s{seed}-{i}"),
                json!({"currency": "XYZ", "n": format!("s{seed}-{i}")}),
            )
            .await;
        }
        app.drain().await;
        let ids: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM incidents WHERE state <> 'resolved'")
                .fetch_all(&pool)
                .await
                .unwrap();
        let moves = [Move::Acknowledge, Move::Resolve, Move::Ignore];
        let picks: Vec<Move> = (0..4).map(|_| moves[rng.gen_range(0..3)]).collect();
        let pool2 = pool.clone();
        let (_, results) = tokio::join!(fold(&pool), async {
            let mut out = Vec::new();
            for (k, how) in picks.iter().enumerate() {
                if let Some(&id) = ids.get(k % ids.len().max(1)) {
                    out.push(
                        replaysafe_core::incidents::apply(&pool2, id, *how, "op")
                            .await
                            .is_ok(),
                    );
                }
            }
            out
        });
        let _ = results;
        fold(&pool).await;
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM incidents WHERE state <> 'resolved' AND fingerprint LIKE 'invalid currency%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert!(live <= 1, "seed {seed}: {live} live incidents of one kind");
        let counted: i64 =
            sqlx::query_scalar("SELECT coalesce(sum(failures), 0)::bigint FROM incidents")
                .fetch_one(&pool)
                .await
                .unwrap();
        let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM attempts WHERE status = 400")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(
            counted, failed,
            "seed {seed}: every failing attempt counted once"
        );
    }
}

/// Opening an incident notifies (the `incident_opened` rule): the alert
/// says what failed where, and resolves once the incident is acknowledged.
#[sqlx::test(migrator = "MIGRATOR")]
async fn an_open_incident_fires_an_alert_until_someone_is_on_it(pool: PgPool) {
    use replaysafe_core::alerts::evaluate_once;
    let billing = Billing::start().await;
    let top = "[alerts]\nresolve_after_secs = 0\n[alerts.rules.dead_letters]\nenabled = false\n[alerts.rules.destination_failing]\nenabled = false\n[alerts.rules.incident_opened]\nmin_events = 2\n";
    let app = spawn_app(pool.clone(), gh_config(&billing.url, top)).await;
    let config = app.config.clone();
    // (GitHub signs the body alone: each event's body differs, or the
    // replay guard would take the second for a re-post of the first.)
    send(&app, "cur-0", json!({"currency": "XYZ", "n": 0})).await;
    app.drain().await;
    fold(&pool).await;
    let t = evaluate_once(&pool, &config).await.unwrap();
    assert!(t.fired.is_empty(), "one event is below min_events: {t:?}");
    send(&app, "cur-1", json!({"currency": "XYZ", "n": 1})).await;
    app.drain().await;
    fold(&pool).await;
    let t = evaluate_once(&pool, &config).await.unwrap();
    assert_eq!(t.fired, [("incident_opened".to_owned(), "gh".to_owned())]);
    let (summary, link): (String, String) =
        sqlx::query_as("SELECT summary, link FROM alerts WHERE rule = 'incident_opened'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        summary.starts_with("default answered HTTP 400 to 2 events since "),
        "{summary}"
    );
    assert!(
        !summary.contains("currency"),
        "the answer's text stays out of alerts"
    );
    let id: i64 = sqlx::query_scalar("SELECT id FROM incidents")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(link, format!("/incidents/{id}"));
    replaysafe_core::incidents::apply(&pool, id, Move::Acknowledge, "op")
        .await
        .unwrap();
    let t = evaluate_once(&pool, &config).await.unwrap();
    assert_eq!(
        t.resolved,
        [("incident_opened".to_owned(), "gh".to_owned())]
    );
}
