//! Accounts in the browser (issue 40, and issue 35 item 3's browser part):
//! an admin makes users with a one-time password that leads to the account
//! page first, changes roles, disables, resets; the last active admin stays
//! one, even against two admins demoting each other at once; a person's own
//! password change ends their other sessions only; tokens made in the
//! browser are shown once; the Sources page's receive URLs.

use replaysafe_core::db::MIGRATOR;
use replaysafe_types::auth::{Role, Who};
use sqlx::PgPool;

use crate::helpers::{session_cookie, spawn_app, test_config, TestApp, PASSWORD};

fn config() -> replaysafe_core::config::Config {
    test_config(
        r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
destination = "http://127.0.0.1:9/x"
"#,
        &[],
    )
}

/// A server function call that also gives back the session cookie the
/// answer set (a password change renews the session's id).
async fn call(
    app: &TestApp,
    cookie: &str,
    endpoint: &str,
    form: &[(&str, &str)],
) -> (u16, serde_json::Value, Option<String>) {
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let response = app
        .client
        .post(app.url(&format!("/api/{endpoint}")))
        .header("origin", format!("http://{}", app.addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", cookie)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let renewed = session_cookie(response.headers());
    let text = response.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, json, renewed)
}

async fn audit_count(pool: &PgPool, action: &str, outcome: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = $1 AND outcome = $2")
        .bind(action)
        .bind(outcome)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_user_an_admin_makes_signs_in_once_with_its_password_then_chooses_one(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let admin = app.session("admin").await;
    let operator = app.session("operator").await;

    // Only an admin makes users, lists them, changes them.
    for endpoint in [
        "user-add",
        "users",
        "user-role",
        "user-enabled",
        "user-reset-password",
    ] {
        let form = [
            ("username", "x"),
            ("role", "viewer"),
            ("id", "1"),
            ("enabled", "false"),
        ];
        let (status, _, _) = call(&app, &operator, endpoint, &form).await;
        assert_eq!(status, 403, "{endpoint} as an operator");
    }
    let (status, made, _) = call(
        &app,
        &admin,
        "user-add",
        &[("username", "dora"), ("role", "operator")],
    )
    .await;
    assert_eq!(status, 200, "{made}");
    let one_time = made["password"].as_str().unwrap().to_owned();
    assert!(one_time.len() >= 20);
    assert_eq!(made["user"]["must_change_password"], true);
    // A name taken (in any case) is refused, and the refusal audited.
    let (status, _, _) = call(
        &app,
        &admin,
        "user-add",
        &[("username", "Dora"), ("role", "viewer")],
    )
    .await;
    assert_eq!(status, 409);
    assert_eq!(audit_count(&pool, "user.add", "refused").await, 1);
    let by: String = sqlx::query_scalar(
        "SELECT username FROM audit_log WHERE action = 'user.add' AND target = 'dora'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(by, "admin-user");
    // Never stored in clear.
    let stored: String =
        sqlx::query_scalar("SELECT password_hash FROM users WHERE username = 'dora'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(!stored.contains(&one_time));

    let (status, dora) = app.login("dora", &one_time, None).await;
    assert_eq!(status, 200);
    let dora = dora.unwrap();
    // Until dora chooses a password, every page leads to /account and every
    // server function but the password's is refused.
    let page = app.page(Some(&dora), "/deliveries").await;
    assert!(page.status().is_redirection(), "{}", page.status());
    assert_eq!(page.headers()["location"], "/account");
    assert_eq!(app.page(Some(&dora), "/account").await.status(), 200);
    let (status, _, _) = call(&app, &dora, "sources", &[]).await;
    assert_eq!(status, 403);
    let (status, must, _) = call(&app, &dora, "must-change-password", &[]).await;
    assert_eq!((status, must), (200, serde_json::json!(true)));

    let new = "dora's own password, long";
    let (status, _, renewed) = call(
        &app,
        &dora,
        "password",
        &[("current", &one_time), ("new", new), ("confirm", new)],
    )
    .await;
    assert_eq!(status, 200);
    let dora = renewed.expect("the session's id is renewed");
    let (status, _, _) = call(&app, &dora, "sources", &[]).await;
    assert_eq!(status, 200, "the session that changed it goes on");
    assert_eq!(app.page(Some(&dora), "/deliveries").await.status(), 200);
    assert_eq!(
        app.login("dora", &one_time, None).await.0,
        401,
        "the one-time password is spent"
    );
    assert_eq!(app.login("dora", new, None).await.0, 200);

    // A reset: a new one-time password, dora's sessions end.
    let id = made["user"]["id"].as_i64().unwrap().to_string();
    let (status, reset, _) = call(&app, &admin, "user-reset-password", &[("id", &id)]).await;
    assert_eq!(status, 200);
    let (status, _, _) = call(&app, &dora, "sources", &[]).await;
    assert_eq!(status, 401, "a reset ends the user's sessions");
    let (status, again) = app
        .login("dora", reset["password"].as_str().unwrap(), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        app.page(again.as_deref(), "/overview").await.headers()["location"],
        "/account"
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_password_change_ends_the_other_sessions_and_keeps_this_one(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let here = app.session("viewer").await;
    let (status, there) = app.login("viewer-user", PASSWORD, None).await;
    assert_eq!(status, 200);
    let there = there.unwrap();
    let new = "a brand new passphrase";

    // Refusals change nothing: a wrong current password (counted as a
    // failed sign-in), a confirmation that differs, a short one.
    for (current, new, confirm, why) in [
        ("not my password", new, new, "wrong current"),
        (
            PASSWORD,
            new,
            "something else entirely",
            "confirmation differs",
        ),
        (PASSWORD, "short", "short", "too short"),
        (PASSWORD, PASSWORD, PASSWORD, "the same"),
    ] {
        let (status, answer, _) = call(
            &app,
            &here,
            "password",
            &[("current", current), ("new", new), ("confirm", confirm)],
        )
        .await;
        assert_eq!(status, 400, "{why}: {answer}");
    }
    let failed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'login' AND outcome = 'failed' AND username = 'viewer-user'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(failed, 1, "a wrong current password is a failed sign-in");
    assert_eq!(call(&app, &there, "sources", &[]).await.0, 200);

    let (status, _, renewed) = call(
        &app,
        &here,
        "password",
        &[("current", PASSWORD), ("new", new), ("confirm", new)],
    )
    .await;
    assert_eq!(status, 200);
    let here = renewed.unwrap();
    assert_eq!(
        call(&app, &here, "sources", &[]).await.0,
        200,
        "this session goes on"
    );
    assert_eq!(
        call(&app, &there, "sources", &[]).await.0,
        401,
        "the other ended"
    );
    assert_eq!(app.login("viewer-user", PASSWORD, None).await.0, 401);
    assert_eq!(app.login("viewer-user", new, None).await.0, 200);
    assert_eq!(audit_count(&pool, "user.password", "succeeded").await, 1);

    // An API token has no password to change.
    let token = crate::helpers::make_token(&pool, "bot", "admin", None).await;
    let answer = app
        .client
        .post(app.url("/api/password"))
        .header("origin", format!("http://{}", app.addr))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("current=a&new=bbbbbbbbbbbb&confirm=bbbbbbbbbbbb")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401, "server functions take sessions only");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn the_last_active_admin_can_be_neither_demoted_nor_disabled(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let admin = app.session("admin").await;
    let me: i64 = sqlx::query_scalar("SELECT id FROM users WHERE username = 'admin-user'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let me = me.to_string();
    let (status, answer, _) = call(
        &app,
        &admin,
        "user-role",
        &[("id", &me), ("role", "operator")],
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    assert!(answer.to_string().contains("last active admin"), "{answer}");
    let (status, _, _) = call(
        &app,
        &admin,
        "user-enabled",
        &[("id", &me), ("enabled", "false")],
    )
    .await;
    assert_eq!(status, 409, "nobody disables themselves");
    assert_eq!(audit_count(&pool, "user.role", "refused").await, 1);
    assert_eq!(audit_count(&pool, "user.disable", "refused").await, 1);

    // With a second admin, one can step down; then the other is the last.
    let (_, made, _) = call(
        &app,
        &admin,
        "user-add",
        &[("username", "erin"), ("role", "admin")],
    )
    .await;
    let erin = made["user"]["id"].as_i64().unwrap().to_string();
    let (status, row, _) = call(
        &app,
        &admin,
        "user-role",
        &[("id", &me), ("role", "operator")],
    )
    .await;
    assert_eq!((status, row["role"].as_str()), (200, Some("operator")));
    // The demotion holds from the next request.
    let (status, _, _) = call(&app, &admin, "users", &[]).await;
    assert_eq!(status, 403);
    let role_of = |name: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT role FROM users WHERE username = $1")
                .bind(name)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(role_of("erin").await, "admin");
    let _ = erin;

    // Two admins demoting (or disabling) each other at the same moment:
    // one wins, an admin always remains. Many rounds, both orders.
    let a = users_id(&pool, "erin").await;
    let b = users_id(&pool, "admin-user").await;
    for round in 0..40 {
        sqlx::query("UPDATE users SET role = 'admin', disabled = false WHERE id = ANY($1)")
            .bind(vec![a, b])
            .execute(&pool)
            .await
            .unwrap();
        let by = |id: i64| Who {
            user_id: Some(id),
            token_id: None,
            name: "t",
        };
        let first = async {
            if round % 2 == 0 {
                replaysafe_core::db::users::set_role(&pool, b, Role::Viewer, by(a), None)
                    .await
                    .is_ok()
            } else {
                replaysafe_core::db::users::set_enabled(&pool, b, false, by(a), None)
                    .await
                    .is_ok()
            }
        };
        let second = async {
            if round % 3 == 0 {
                replaysafe_core::db::users::set_enabled(&pool, a, false, by(b), None)
                    .await
                    .is_ok()
            } else {
                replaysafe_core::db::users::set_role(&pool, a, Role::Operator, by(b), None)
                    .await
                    .is_ok()
            }
        };
        let (x, y) = tokio::join!(first, second);
        let admins: i64 =
            sqlx::query_scalar("SELECT count(*) FROM users WHERE role = 'admin' AND NOT disabled")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(admins, 1, "round {round}: exactly one admin remains");
        assert!(x ^ y, "round {round}: exactly one change landed ({x}, {y})");
    }
}

async fn users_id(pool: &PgPool, name: &str) -> i64 {
    sqlx::query_scalar("SELECT id FROM users WHERE username = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn an_admin_makes_a_token_in_the_browser_shown_once(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let admin = app.session("admin").await;
    let operator = app.session("operator").await;
    let form = [
        ("name", "ci-replays"),
        ("role", "viewer"),
        ("expires_in_days", "90"),
    ];
    assert_eq!(call(&app, &operator, "token-create", &form).await.0, 403);
    let (status, made, _) = call(&app, &admin, "token-create", &form).await;
    assert_eq!(status, 200, "{made}");
    let token = made["token"].as_str().unwrap();
    assert!(token.starts_with("rs_"));
    let expires =
        chrono::DateTime::parse_from_rfc3339(made["row"]["expires_at"].as_str().unwrap()).unwrap();
    let days = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_hours() as f64 / 24.0;
    assert!((89.9..=90.0).contains(&days), "{days}");
    // It works, as a viewer.
    let sources = app
        .client
        .get(app.url("/api/v1/sources"))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(sources.status(), 200);
    // Nowhere else: not in the list, not in the audit log, not stored.
    let (_, list, _) = call(&app, &admin, "tokens", &[]).await;
    assert!(!list.to_string().contains(token));
    let audit: Vec<String> = sqlx::query_scalar("SELECT coalesce(detail::text, '') FROM audit_log")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(audit.iter().all(|d| !d.contains(token)));
    let from: Option<String> =
        sqlx::query_scalar("SELECT remote_addr FROM audit_log WHERE action = 'token.create'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(from.as_deref(), Some("127.0.0.1"));
    // Never, with its warning on the page; an expiry not offered is refused;
    // a name taken is a conflict.
    let (status, never, _) = call(
        &app,
        &admin,
        "token-create",
        &[
            ("name", "forever"),
            ("role", "admin"),
            ("expires_in_days", "never"),
        ],
    )
    .await;
    assert_eq!(
        (status, never["row"]["expires_at"].clone()),
        (200, serde_json::Value::Null)
    );
    let (status, _, _) = call(
        &app,
        &admin,
        "token-create",
        &[
            ("name", "odd"),
            ("role", "viewer"),
            ("expires_in_days", "12"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(call(&app, &admin, "token-create", &form).await.0, 409);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn sources_say_their_receive_url_and_what_to_paste_where(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let token = crate::helpers::make_token(&pool, "reader", "viewer", None).await;
    let sources: serde_json::Value = app
        .client
        .get(app.url("/api/v1/sources"))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let gh = &sources.as_array().unwrap()[0];
    assert_eq!(gh["receive_url"], format!("http://{}/hooks/gh", app.addr));
    assert!(
        gh["setup"].as_str().unwrap().contains("Payload URL"),
        "{gh}"
    );
    let page = app
        .page(Some(&app.session("viewer").await), "/sources")
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains(&format!("http://{}/hooks/gh", app.addr)));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_disabled_users_sessions_stay_ended_when_they_are_enabled_again(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let admin = app.session("admin").await;
    let viewer = app.session("viewer").await;
    let id = users_id(&pool, "viewer-user").await.to_string();
    let toggle = |enabled: &'static str| {
        let (app, admin, id) = (&app, admin.clone(), id.clone());
        async move {
            call(
                app,
                &admin,
                "user-enabled",
                &[("id", &id), ("enabled", enabled)],
            )
            .await
            .0
        }
    };
    assert_eq!(toggle("false").await, 200);
    assert_eq!(call(&app, &viewer, "sources", &[]).await.0, 401);
    assert_eq!(toggle("true").await, 200);
    assert_eq!(
        call(&app, &viewer, "sources", &[]).await.0,
        401,
        "a session ended by disabling stays ended"
    );
    assert_eq!(app.login("viewer-user", PASSWORD, None).await.0, 200);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn names_differing_only_in_case_are_one_name_even_made_at_once(pool: PgPool) {
    let by = Who::named("test");
    for round in 0..10 {
        let (lower, upper) = (format!("case{round}"), format!("CASE{round}"));
        let (a, b) = tokio::join!(
            replaysafe_core::db::users::create_one_time(&pool, &lower, Role::Viewer, by, None),
            replaysafe_core::db::users::create_one_time(&pool, &upper, Role::Viewer, by, None)
        );
        assert!(a.is_ok() ^ b.is_ok(), "round {round}: exactly one is made");
    }
    // The command line too.
    replaysafe_core::db::users::add(&pool, "Frank", PASSWORD, Role::Viewer, false)
        .await
        .unwrap();
    assert!(
        replaysafe_core::db::users::add(&pool, "frank", PASSWORD, Role::Viewer, false)
            .await
            .is_err()
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM users WHERE lower(username) = 'frank'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// Pages render on the server in the reader's zone (the one their browser
/// reported, kept with their account), say which, and read date filters in
/// it; a UTC toggle and a theme are kept per user and written on `<html>`,
/// so the first paint is already right.
#[sqlx::test(migrator = "MIGRATOR")]
async fn pages_render_in_the_readers_zone_and_filters_mean_what_they_show(pool: PgPool) {
    use replaysafe_types::time::Zone;
    let app = spawn_app(pool.clone(), config()).await;
    assert_eq!(
        app.github_delivery("gh", "zoned-1", r#"{"n":"zoned"}"#, b"gh-secret")
            .await,
        200
    );
    let (id, received_at): (i64, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("SELECT id, received_at FROM deliveries WHERE idem_key = 'zoned-1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let viewer = app.session("viewer").await;
    let admin = app.session("admin").await;
    let html = |cookie: String, path: String| {
        let app = &app;
        async move { app.page(Some(&cookie), &path).await.text().await.unwrap() }
    };

    // Before the browser said its zone: UTC, and said so.
    let page = html(viewer.clone(), "/deliveries".into()).await;
    assert!(page.contains("Received (UTC)"), "{page}");
    assert!(page.contains(&format!(">{}</time>", Zone::UTC.shown_ms(&received_at))));

    // Only zones and words it knows.
    for (field, value) in [
        ("time_zone", "Mars/Olympus"),
        ("theme", "purple"),
        ("clock", "tai"),
    ] {
        let (status, answer, _) = call(&app, &viewer, "preferences", &[(field, value)]).await;
        assert_eq!(status, 400, "{field}={value}: {answer}");
    }
    let kolkata = Zone::named("Asia/Kolkata").unwrap();
    let (status, answer, _) = call(
        &app,
        &viewer,
        "preferences",
        &[("time_zone", "Asia/Kolkata")],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let page = html(viewer.clone(), "/deliveries".into()).await;
    assert!(page.contains(r#"data-zone="Asia/Kolkata""#));
    assert!(page.contains("Received (Asia/Kolkata)"), "{page}");
    // The cell in Kolkata's time; UTC's only in its tooltip.
    let cell = |zone: Zone| format!(">{}</time>", zone.shown_ms(&received_at));
    assert!(page.contains(&cell(kolkata)), "{page}");
    assert!(!page.contains(&cell(Zone::UTC)));
    // Another person's pages keep their own zone.
    let other = html(admin.clone(), "/deliveries".into()).await;
    assert!(other.contains("Received (UTC)"));

    // A filter's time is the wall time the input shows, in the zone it
    // was typed in (which the form sends along).
    let row = format!(r#"data-id="{id}""#);
    let minute = chrono::Duration::minutes(1);
    let from = |t: chrono::DateTime<chrono::Utc>| {
        format!(
            "/deliveries?from={}&tz=Asia%2FKolkata",
            kolkata.input_value(&t)
        )
    };
    let before = html(viewer.clone(), from(received_at - minute)).await;
    assert!(
        before.contains(&row),
        "a minute before it, in Kolkata: listed"
    );
    let after = html(viewer.clone(), from(received_at + minute)).await;
    assert!(!after.contains(&row), "a minute after it: not listed");
    // The inputs show the times in the reader's zone, whatever the link's.
    let utc_link = format!(
        "/deliveries?from={}&tz=UTC",
        Zone::UTC.input_value(&(received_at - minute))
    );
    let shown = html(viewer.clone(), utc_link).await;
    assert!(shown.contains(&row));
    assert!(shown.contains(&format!(
        r#"value="{}""#,
        kolkata.input_value(&(received_at - minute))
    )));

    // UTC on demand, and a dark theme: kept, and on <html>.
    for (field, value) in [("clock", "utc"), ("theme", "dark")] {
        let (status, answer, _) = call(&app, &viewer, "preferences", &[(field, value)]).await;
        assert_eq!(status, 200, "{answer}");
    }
    let page = html(viewer.clone(), "/deliveries".into()).await;
    assert!(page.contains(r#"data-theme="dark""#));
    assert!(page.contains(r#"data-clock="utc""#));
    assert!(page.contains("Received (UTC)"));
    assert!(page.contains(&cell(Zone::UTC)));
    // The zone stays known for when they switch back.
    assert!(page.contains(r#"data-zone="Asia/Kolkata""#));
    assert!(!other.contains("data-theme"));
}
