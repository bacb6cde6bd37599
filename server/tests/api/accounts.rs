//! Accounts and the guarded re-deliver over real HTTP: who may see and do
//! what, sign-in and its limits, cross-site refusal, and the dedup layer's
//! verdict on re-deliveries and forced re-executions.

use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{spawn_app, state_of, test_config, Destination, Scripted, TestApp, PASSWORD};

fn config(destination: &str, secrets: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "gh"
provider = "github"
secrets = [{secrets}]
destination = "{destination}"
max_attempts = 1
"#
        ),
        &[],
    )
}

async fn deliver(app: &TestApp, id: &str, secret: &[u8]) -> u16 {
    app.github_delivery("gh", id, &format!(r#"{{"id":"{id}"}}"#), secret)
        .await
}

async fn first_delivery(pool: &PgPool, key: &str) -> (i64, i64) {
    sqlx::query_as("SELECT id, first_delivery_id FROM events WHERE idem_key = $1")
        .bind(key)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn every_page_and_server_function_checks_session_and_role(pool: PgPool) {
    // The destination refuses everything: events die, so there is something to re-deliver.
    let destination = Destination::start(vec![Scripted::status(400); 8]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, r#""gh-secret""#)).await;
    deliver(&app, "m-1", b"gh-secret").await;
    app.drain().await;
    let (event, delivery) = first_delivery(&pool, "m-1").await;
    let (_, victim) = replaysafe_core::accounts::tokens::create(
        &pool,
        "victim",
        replaysafe_types::auth::Role::Viewer,
        None,
        replaysafe_types::auth::Who::named("test"),
        None,
    )
    .await
    .unwrap();
    let victim = victim.id;
    let sessions = [
        ("anonymous", None),
        ("viewer", Some(app.session("viewer").await)),
        ("operator", Some(app.session("operator").await)),
        ("admin", Some(app.session("admin").await)),
    ];
    let rank = |who: &str| {
        ["anonymous", "viewer", "operator", "admin"]
            .iter()
            .position(|w| *w == who)
            .unwrap()
    };

    let pages = [
        "/overview".to_owned(),
        "/deliveries".to_owned(),
        format!("/deliveries/{delivery}"),
        format!("/events/{event}"),
        "/dead".to_owned(),
        "/sources".to_owned(),
        "/audit".to_owned(),
        "/alerts".to_owned(),
        "/tokens".to_owned(),
    ];
    for (who, cookie) in &sessions {
        for path in &pages {
            let page = app.page(cookie.as_deref(), path).await;
            if *who == "anonymous" {
                assert_eq!(page.status(), 303, "{who} {path}");
                let location = page.headers()["location"].to_str().unwrap();
                assert!(location.starts_with("/login?next=%2F"), "{location}");
            } else if path == "/tokens" && *who != "admin" {
                // Tokens are an admin's: the page says so, with the status.
                assert_eq!(page.status(), 403, "{who} {path}");
            } else {
                assert_eq!(page.status(), 200, "{who} {path}");
            }
        }
    }

    let job: i64 = sqlx::query_scalar(
        "INSERT INTO bulk_jobs (filter, up_to, started_by, total, state, finished_at)
         VALUES ('{}', 0, 'test', 0, 'done', now()) RETURNING id",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let silence: i64 = sqlx::query_scalar(
        "INSERT INTO alert_silences (rule, until, created_by, reason)
         VALUES ('backlog', now() + interval '1 hour', 'test', 'test') RETURNING id",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    // (endpoint, form, least role). A refusal by the dedup layer is still a
    // 2xx or a 409: what matters here is 401/403 against everything else.
    let calls = [
        ("sources", String::new(), "viewer"),
        ("overview", "window=hour".to_owned(), "viewer"),
        ("deliveries", String::new(), "viewer"),
        ("delivery", format!("id={delivery}"), "viewer"),
        ("event", format!("id={event}"), "viewer"),
        ("dead", String::new(), "viewer"),
        ("audit", String::new(), "viewer"),
        (
            "source-paused",
            "slug=gh&paused=false".to_owned(),
            "operator",
        ),
        ("redeliver", format!("delivery_id={delivery}"), "operator"),
        (
            "bulk-job-start",
            "filter[source]=nothing-matches".to_owned(),
            "operator",
        ),
        ("bulk-jobs", String::new(), "viewer"),
        ("alerts", String::new(), "viewer"),
        (
            "alert-silence",
            "rule=backlog&minutes=60&reason=the+role+matrix".to_owned(),
            "admin",
        ),
        ("alert-unsilence", format!("id={silence}"), "admin"),
        ("bulk-job", format!("id={job}"), "viewer"),
        ("bulk-job-cancel", format!("id={job}"), "operator"),
        (
            "force",
            format!("event_id={event}&confirm_key=wrong&reason=test"),
            "admin",
        ),
        ("tokens", String::new(), "admin"),
        ("token-revoke", format!("id={victim}"), "admin"),
        ("reconciliation", String::new(), "viewer"),
        (
            "reconcile-run",
            "source=gh&since_hours=0&mode=dry_run".to_owned(),
            "operator",
        ),
    ];
    for (who, cookie) in &sessions {
        for (endpoint, form, least) in &calls {
            let (status, body) = app.server_fn_as(cookie.as_deref(), endpoint, form).await;
            let expected = match (*who, rank(who) >= rank(least)) {
                ("anonymous", _) => 401,
                (_, false) => 403,
                (_, true) => 0,
            };
            if expected == 0 {
                // A finished job cannot be cancelled: 409 once allowed.
                assert!(
                    status < 400
                        || (*endpoint == "force" && status == 400)
                        || (*endpoint == "bulk-job-cancel" && status == 409)
                        // gh has no [source.reconcile]: 409 once allowed.
                        || (*endpoint == "reconcile-run" && status == 409),
                    "{who} {endpoint}: {status} {body}"
                );
            } else {
                assert_eq!(status, expected, "{who} {endpoint}: {body}");
            }
        }
    }
    // Health, readiness, metrics and the receiver need no session.
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(app.page(None, path).await.status(), 200, "{path}");
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn cross_site_requests_are_refused(pool: PgPool) {
    let app = spawn_app(pool, config("http://127.0.0.1:9/x", r#""gh-secret""#)).await;
    let admin = app.session("admin").await;
    let own = format!("http://{}", app.addr);
    for (origin, host, expected) in [
        (Some("https://evil.example"), None, 403),
        (None, None, 403),
        // The Host header is the client's to write: it proves no origin.
        (Some("http://evil.example"), Some("evil.example"), 403),
        // The public URL's scheme, host and port, all three.
        (Some(&*own.replace("http://", "https://")), None, 403),
        (Some(&*own), None, 200),
    ] {
        let mut request = app
            .client
            .post(app.url("/api/source-paused"))
            .header("cookie", &admin)
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        if let Some(host) = host {
            request = request.header("host", host);
        }
        let status = request
            .body("slug=gh&paused=true")
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), expected, "origin {origin:?}");
    }
    // Sign-in itself is protected too (no logging in a victim as the attacker).
    let status = app
        .client
        .post(app.url("/api/login"))
        .header("origin", "https://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("username=admin-user&password={PASSWORD}"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 403);
    // The cookie itself is never sent cross-site, and never to scripts.
    let (_, cookie_header) = {
        let response = app
            .client
            .post(app.url("/api/login"))
            .header("origin", format!("http://{}", app.addr))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "username=admin-user&password={}",
                form_urlencoded::byte_serialize(PASSWORD.as_bytes()).collect::<String>()
            ))
            .send()
            .await
            .unwrap();
        let raw = response
            .headers()
            .get("set-cookie")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        (response.status(), raw)
    };
    assert!(cookie_header.contains("HttpOnly"), "{cookie_header}");
    assert!(cookie_header.contains("SameSite=Strict"), "{cookie_header}");
    // Idle expiry: the session lives `session_idle_minutes` (480) past the last request.
    assert!(cookie_header.contains("Max-Age=28800"), "{cookie_header}");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn sign_in_sends_the_browser_back_only_to_this_site(pool: PgPool) {
    let app = spawn_app(pool, config("http://127.0.0.1:9/x", r#""gh-secret""#)).await;
    app.session("admin").await;
    for (next, expected) in [
        ("/deliveries?source=gh", "/deliveries?source=gh"),
        // A tab a browser would drop, leaving `//evil.example`.
        ("/\t/evil.example", "/overview"),
        ("//evil.example/", "/overview"),
        ("https://evil.example/", "/overview"),
        ("/\\evil.example", "/overview"),
        // A newline used to reach the Location header and panic the handler.
        (
            "/deliveries\r\nSet-Cookie: planted=1",
            "/deliveriesSet-Cookie:%20planted=1",
        ),
    ] {
        let next = next.replace("\\t", "\t").replace("\\r\\n", "\r\n");
        let form = format!(
            "username=admin-user&password={}&next={}",
            form_urlencoded::byte_serialize(PASSWORD.as_bytes()).collect::<String>(),
            form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
        );
        let response = app
            .client
            .post(app.url("/api/login"))
            .header("origin", format!("http://{}", app.addr))
            .header("content-type", "application/x-www-form-urlencoded")
            // As the sign-in form posts without script: answered with a 302.
            .header("accept", "text/html")
            .body(form)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_redirection(),
            "{next:?}: {}",
            response.status()
        );
        let location = response.headers()["location"].to_str().unwrap();
        assert_eq!(location, expected, "{next:?}");
        assert!(response
            .headers()
            .get_all("set-cookie")
            .iter()
            .all(|c| !c.to_str().unwrap().contains("planted")));
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn sign_in_renews_the_session_id_and_sign_out_ends_it(pool: PgPool) {
    let app = spawn_app(
        pool.clone(),
        config("http://127.0.0.1:9/x", r#""gh-secret""#),
    )
    .await;
    let first = app.session("viewer").await;
    replaysafe_core::db::users::add(
        &pool,
        "admin-user",
        PASSWORD,
        replaysafe_types::auth::Role::Admin,
        true,
    )
    .await
    .unwrap();
    // Signing in again while holding a session: the id changes.
    let (status, second) = app.login("admin-user", PASSWORD, Some(&first)).await;
    assert_eq!(status, 200);
    let second = second.expect("a new session cookie");
    assert_ne!(first, second, "the session id is renewed at sign-in");
    assert_eq!(
        app.page(Some(&first), "/overview").await.status(),
        303,
        "the old id is worthless"
    );
    assert_eq!(app.page(Some(&second), "/overview").await.status(), 200);
    let (_, me) = app.server_fn_as(Some(&second), "me", "").await;
    assert_eq!(me["username"], "admin-user");

    let (status, _) = app.server_fn_as(Some(&second), "logout", "").await;
    assert!(status < 400);
    assert_eq!(
        app.page(Some(&second), "/overview").await.status(),
        303,
        "signed out"
    );

    // Disabling a user ends their sessions at once.
    let viewer = app.session("viewer").await;
    replaysafe_core::db::users::set_disabled(&pool, "viewer-user", true)
        .await
        .unwrap();
    assert_eq!(app.page(Some(&viewer), "/overview").await.status(), 303);
    let (status, _) = app.login("viewer-user", PASSWORD, None).await;
    assert_eq!(status, 401, "a disabled user cannot sign in");
    // Wrong passwords and unknown users get the same answer.
    assert_eq!(
        app.login("admin-user", "not the password", None).await.0,
        401
    );
    assert_eq!(app.login("nobody", "not the password", None).await.0, 401);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn failed_sign_ins_are_rate_limited_per_user_and_address(pool: PgPool) {
    let app = spawn_app(
        pool.clone(),
        config("http://127.0.0.1:9/x", r#""gh-secret""#),
    )
    .await;
    replaysafe_core::db::users::add(
        &pool,
        "alice",
        PASSWORD,
        replaysafe_types::auth::Role::Viewer,
        false,
    )
    .await
    .unwrap();
    replaysafe_core::db::users::add(
        &pool,
        "bob",
        PASSWORD,
        replaysafe_types::auth::Role::Viewer,
        false,
    )
    .await
    .unwrap();
    for _ in 0..5 {
        assert_eq!(app.login("alice", "guess", None).await.0, 401);
    }
    // Now even the right password waits: a guesser cannot tell.
    assert_eq!(app.login("alice", PASSWORD, None).await.0, 429);
    // Another user from the same address is not locked out by alice's failures...
    assert_eq!(app.login("bob", PASSWORD, None).await.0, 200);
    // ...until the address itself has failed too often: 20 failures in all
    // (alice's 5 count; a rate-limited try extends no lockout).
    for n in 0..15 {
        assert_eq!(app.login(&format!("user{n}"), "guess", None).await.0, 401);
    }
    assert_eq!(app.login("bob", PASSWORD, None).await.0, 429);
    // Refusals are audit-logged, one row per address and window however
    // many (the throttle counts them in its own table).
    let limited: Vec<serde_json::Value> = sqlx::query_scalar(
        "SELECT detail FROM audit_log WHERE action = 'login' AND outcome = 'rate_limited'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        limited,
        [serde_json::json!({"over": "username", "window_minutes": 15})]
    );
    let refused: i64 =
        sqlx::query_scalar("SELECT refused FROM sign_in_attempts WHERE state = 'refused'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(refused, 2);
    // The audit log is append-only: the database refuses a change.
    let changed = sqlx::query("UPDATE audit_log SET outcome = 'succeeded' WHERE action = 'login'")
        .execute(&pool)
        .await;
    assert!(
        changed.is_err_and(|e| e.to_string().contains("append-only")),
        "an audit row was changed"
    );
    // An operator lifts the lockouts: the username's alone leaves the address locked...
    replaysafe_core::db::users::unlock(&pool, Some("Alice"), None)
        .await
        .unwrap();
    assert_eq!(app.login("alice", PASSWORD, None).await.0, 429);
    // ...the address's lifts both, once the server's memory of the refusal
    // has passed (REFUSED_FOR); tries meanwhile are refused from memory.
    replaysafe_core::db::users::unlock(&pool, None, Some("127.0.0.1"))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + replaysafe_core::accounts::REFUSED_FOR * 3;
    while app.login("bob", PASSWORD, None).await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "still locked out");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(app.login("alice", PASSWORD, None).await.0, 200);
    // And the limit still applies to guesses after it.
    for _ in 0..5 {
        assert_eq!(app.login("alice", "guess", None).await.0, 401);
    }
    assert_eq!(app.login("alice", PASSWORD, None).await.0, 429);
}

/// A new password ends every session signed in with the old one, on its
/// next request; signing in with the new one works at once.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_password_change_ends_the_sessions_of_the_old_one(pool: PgPool) {
    let app = spawn_app(
        pool.clone(),
        config("http://127.0.0.1:9/x", r#""gh-secret""#),
    )
    .await;
    let old = app.session("viewer").await;
    let other = app.session("operator").await;
    let sources = |cookie: String| {
        let app = &app;
        async move { app.server_fn_as(Some(&cookie), "sources", "").await.0 }
    };
    assert_eq!(sources(old.clone()).await, 200);
    let new_password = "a new password, long enough";
    replaysafe_core::db::users::add(
        &pool,
        "viewer-user",
        new_password,
        replaysafe_types::auth::Role::Viewer,
        true,
    )
    .await
    .unwrap();
    assert_eq!(sources(old).await, 401, "the old password's session ended");
    assert_eq!(sources(other).await, 200, "another user's goes on");
    let (status, fresh) = app.login("viewer-user", new_password, None).await;
    assert_eq!(status, 200);
    assert_eq!(sources(fresh.unwrap()).await, 200);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_parallel_burst_of_guesses_gets_no_more_tries_than_a_serial_one(pool: PgPool) {
    let app = spawn_app(
        pool.clone(),
        config("http://127.0.0.1:9/x", r#""gh-secret""#),
    )
    .await;
    replaysafe_core::db::users::add(
        &pool,
        "carol",
        PASSWORD,
        replaysafe_types::auth::Role::Viewer,
        false,
    )
    .await
    .unwrap();
    let failed = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM audit_log WHERE action = 'login' AND outcome = 'failed'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    // Bursts of 40 parallel guesses until the limit holds: never more than
    // five are checked, as five serial ones would be; the rest are refused
    // at once (429: rate-limited, or over the hashing limit).
    for _ in 0..10 {
        let statuses = futures_util::future::join_all((0..40).map(|n| {
            let app = &app;
            async move { app.login("carol", &format!("guess-{n}"), None).await.0 }
        }))
        .await;
        assert!(
            statuses.iter().all(|&s| s == 401 || s == 429),
            "{statuses:?}"
        );
        assert!(failed().await <= 5, "{statuses:?}");
        if failed().await == 5 {
            break;
        }
        // Refusals are remembered for a moment: the next burst after it.
        tokio::time::sleep(replaysafe_core::accounts::REFUSED_FOR).await;
    }
    assert_eq!(failed().await, 5);
    assert_eq!(app.login("carol", PASSWORD, None).await.0, 429);
    // Too long a name is refused before any hashing.
    assert_eq!(app.login(&"x".repeat(65), "guess", None).await.0, 400);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_dead_event_is_requeued_exactly_once_however_many_operators_click(pool: PgPool) {
    // Refused once (dead at max_attempts = 1), then accepted.
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, r#""gh-secret""#)).await;
    deliver(&app, "d-1", b"gh-secret").await;
    app.drain().await;
    assert_eq!(state_of(&pool, "d-1").await, "dead");
    let (_, delivery) = first_delivery(&pool, "d-1").await;
    let operator = app.session("operator").await;

    let clicks = (0..10).map(|_| {
        let (app, operator) = (&app, &operator);
        async move {
            app.server_fn_as(
                Some(operator),
                "redeliver",
                &format!("delivery_id={delivery}"),
            )
            .await
        }
    });
    let results = futures_util::future::join_all(clicks).await;
    let requeued = results
        .iter()
        .filter(|(_, r)| r["requeued"] == true)
        .count();
    assert_eq!(requeued, 1, "{results:?}");
    for (status, result) in &results {
        assert_eq!(*status, 200);
        if result["requeued"] != true {
            assert_eq!(result["outcome"], "in_progress", "{result}");
            assert_eq!(result["message"], "refused: in progress");
        }
    }
    app.drain().await;
    assert_eq!(state_of(&pool, "d-1").await, "completed");
    assert_eq!(
        destination.count(),
        2,
        "one refused attempt, one re-delivered forward"
    );

    // Completed now: re-delivering is refused, and nothing is forwarded.
    let (_, again) = app
        .server_fn_as(
            Some(&operator),
            "redeliver",
            &format!("delivery_id={delivery}"),
        )
        .await;
    assert_eq!(again["message"], "refused: already completed");
    app.drain().await;
    assert_eq!(destination.count(), 2);

    // Every re-delivery is a delivery marked with its operator, and audit-logged.
    let marked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deliveries d JOIN users u ON u.id = d.redelivered_by
         WHERE d.redelivery_of = $1 AND u.username = 'operator-user'",
    )
    .bind(delivery)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(marked, 11);
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'redeliver'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(audited, 11);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_rejected_delivery_that_now_verifies_is_claimed(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    // Signed with a secret the source does not know yet.
    let app = spawn_app(pool.clone(), config(&destination.url, r#""old-secret""#)).await;
    assert_eq!(deliver(&app, "r-1", b"new-secret").await, 401);
    let rejected: i64 = sqlx::query_scalar("SELECT id FROM deliveries WHERE outcome = 'rejected'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let operator = app.session("operator").await;
    let (_, result) = app
        .server_fn_as(
            Some(&operator),
            "redeliver",
            &format!("delivery_id={rejected}"),
        )
        .await;
    assert_eq!(
        result["outcome"], "rejected",
        "still signed with an unknown secret: {result}"
    );

    // The new secret is rotated in (a restart with the new config): now it verifies.
    let rotated = spawn_app(
        pool.clone(),
        config(&destination.url, r#""old-secret", "new-secret""#),
    )
    .await;
    let operator = rotated.session("operator").await;
    let (_, result) = rotated
        .server_fn_as(
            Some(&operator),
            "redeliver",
            &format!("delivery_id={rejected}"),
        )
        .await;
    assert_eq!(result["outcome"], "claimed", "{result}");
    assert_eq!(result["requeued"], false);
    rotated.drain().await;
    assert_eq!(state_of(&pool, "r-1").await, "completed");
    assert_eq!(destination.count(), 1);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn forced_reexecution_needs_an_admin_the_typed_key_and_a_reason(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, r#""gh-secret""#)).await;
    deliver(&app, "f-1", b"gh-secret").await;
    app.drain().await;
    assert_eq!(destination.count(), 1);
    let (event, _) = first_delivery(&pool, "f-1").await;
    let admin = app.session("admin").await;
    let operator = app.session("operator").await;

    let (status, _) = app
        .server_fn_as(
            Some(&operator),
            "force",
            &format!("event_id={event}&confirm_key=f-1&reason=replay"),
        )
        .await;
    assert_eq!(status, 403);
    let (status, body) = app
        .server_fn_as(
            Some(&admin),
            "force",
            &format!("event_id={event}&confirm_key=f-2&reason=replay"),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = app
        .server_fn_as(
            Some(&admin),
            "force",
            &format!("event_id={event}&confirm_key=f-1&reason=%20"),
        )
        .await;
    assert_eq!(status, 400, "a reason is required");

    let (status, body) = app
        .server_fn_as(
            Some(&admin),
            "force",
            &format!("event_id={event}&confirm_key=f-1&reason=ledger+rebuilt"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // A second force before it ran is refused: one forced run per completion.
    let (status, _) = app
        .server_fn_as(
            Some(&admin),
            "force",
            &format!("event_id={event}&confirm_key=f-1&reason=again"),
        )
        .await;
    assert_eq!(status, 409);
    app.drain().await;
    assert_eq!(destination.count(), 2);
    let forced = destination.received.lock().unwrap().last().unwrap().clone();
    assert_eq!(forced.headers["x-replaysafe-forced"], "true");
    assert_eq!(forced.headers["idempotency-key"], "gh:f-1");
    assert_eq!(state_of(&pool, "f-1").await, "completed");
    // Completed again: a provider's duplicate is still not forwarded.
    deliver(&app, "f-1", b"gh-secret").await;
    app.drain().await;
    assert_eq!(destination.count(), 2);
    let (forced_by, audited): (Option<i64>, i64) = sqlx::query_as(
        "SELECT (SELECT forced_by FROM attempts WHERE event_id = $1 ORDER BY id DESC LIMIT 1),
                (SELECT count(*) FROM audit_log WHERE action = 'force' AND outcome = 'forced')",
    )
    .bind(event)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(forced_by.is_some());
    assert_eq!(audited, 1);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn bulk_redelivery_applies_the_guard_to_each_dead_event(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400); 25]).await;
    let app = spawn_app(pool.clone(), config(&destination.url, r#""gh-secret""#)).await;
    for i in 0..25 {
        deliver(&app, &format!("b-{i}"), b"gh-secret").await;
    }
    app.drain().await;
    let operator = app.session("operator").await;
    let (status, job) = app
        .server_fn_as(Some(&operator), "bulk-job-start", "filter[reason]=400")
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["total"], 25);
    let id = job["id"].as_i64().unwrap();
    // Followed as the dead-letter page follows it.
    let mut after = String::new();
    let mut outcomes = Vec::new();
    let started = std::time::Instant::now();
    loop {
        let (status, progress) = app
            .server_fn_as(Some(&operator), "bulk-job", &format!("id={id}{after}"))
            .await;
        assert_eq!(status, 200, "{progress}");
        outcomes.extend(
            progress["results"]["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["requeued"] == true),
        );
        if let Some(next) = progress["results"]["next_after"].as_i64() {
            after = format!("&after={next}");
        }
        if progress["job"]["state"] == "done" && outcomes.len() as i64 == progress["job"]["done"] {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{progress}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(outcomes.len(), 25, "two steps of at most 20");
    assert!(outcomes.iter().all(|r| *r));
    app.drain().await;
    let completed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM event_summaries WHERE state = 'completed'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(completed, 25);
    assert_eq!(destination.count(), 50);
}

/// Pages, server functions and API answers show payloads and who did what:
/// no browser or proxy keeps them (`Cache-Control: no-store`); the UI
/// bundle alone may be cached. Behind an https `public_url`, the browser is
/// told to use https only (HSTS); over plain http it is not.
#[sqlx::test(migrator = "MIGRATOR")]
async fn nothing_but_the_bundle_is_stored_and_https_asks_for_https_only(pool: PgPool) {
    let mut secure = config("http://127.0.0.1:9/x", r#""gh-secret""#);
    secure.public_url = "https://hooks.example.com".into();
    for (config, https) in [
        (config("http://127.0.0.1:9/x", r#""gh-secret""#), false),
        (secure, true),
    ] {
        let app = spawn_app(pool.clone(), config).await;
        for path in [
            "/login",
            "/overview",
            "/api/v1/sources",
            "/api/me",
            "/healthz",
        ] {
            let response = app.client.get(app.url(path)).send().await.unwrap();
            let headers = response.headers();
            assert_eq!(headers["cache-control"], "no-store", "{path}");
            assert_eq!(
                headers
                    .get("strict-transport-security")
                    .map(|v| v.to_str().unwrap()),
                https.then_some("max-age=31536000"),
                "{path}"
            );
        }
        let bundle = app
            .client
            .get(app.url("/pkg/replaysafe.js"))
            .send()
            .await
            .unwrap();
        assert!(
            bundle
                .headers()
                .get("cache-control")
                .is_none_or(|v| v != "no-store"),
            "the bundle may be cached"
        );
    }
}

/// A request id is a proxy's to give: a stranger's is replaced by a new
/// one, so no one outside writes what the logs tie together.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_strangers_request_id_is_replaced(pool: PgPool) {
    // No proxy trusted (this machine is, by default): the test is a stranger.
    let mut config = config("http://127.0.0.1:9/x", r#""gh-secret""#);
    config.trusted_proxies.clear();
    let app = spawn_app(pool, config).await;
    let answer = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "from-a-stranger")
        .send()
        .await
        .unwrap();
    let id = answer.headers()["x-request-id"].to_str().unwrap();
    assert_ne!(id, "from-a-stranger");
    assert_eq!(id.len(), 36, "a UUID: {id}");
}
