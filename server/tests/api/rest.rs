//! `/api/v1` over real HTTP with real tokens (issue 16): every documented
//! route against every kind of token, the OpenAPI document checked by a
//! real validator, the audit log naming the token, rate limits, and the
//! API's re-delivery racing the dashboard's and a provider's duplicate.

use std::collections::BTreeMap;

use replaysafe_core::db::MIGRATOR;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::helpers::{gh_config, spawn_app, Destination, Scripted, TestApp};

/// A token made as `replaysafe token create` makes it.
pub(crate) async fn token(
    app: &TestApp,
    name: &str,
    role: &str,
    expires_in_secs: Option<i64>,
) -> String {
    crate::helpers::make_token(&app.pool, name, role, expires_in_secs).await
}

/// Revokes as `replaysafe token revoke --name` does.
async fn revoke(pool: &PgPool, name: &str) {
    replaysafe_core::accounts::tokens::revoke_where(
        pool,
        replaysafe_core::accounts::tokens::Target::Name(name),
        replaysafe_types::auth::Who::named("test"),
        None,
    )
    .await
    .unwrap();
}

pub(crate) struct Answer {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

pub(crate) async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    call_from(app, None, method, path, token, body).await
}

/// `call` as the client at `from` (named in X-Forwarded-For, which the
/// test's loopback connection, a trusted proxy, may set).
pub(crate) async fn call_from(
    app: &TestApp,
    from: Option<&str>,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let mut request = app.client.request(
        method.to_uppercase().parse().unwrap(),
        app.url(&format!("/api/v1{path}")),
    );
    if let Some(from) = from {
        request = request.header("x-forwarded-for", from);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    // A stream (`/events/stream`) never ends by itself: its answer is its status.
    let streaming = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let text = if streaming {
        String::new()
    } else {
        response.text().await.unwrap()
    };
    Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        headers,
    }
}

async fn dead_event(app: &TestApp, key: &str) -> (i64, i64) {
    let status = app
        .github_delivery("gh", key, &format!(r#"{{"id":"{key}"}}"#), b"gh-secret")
        .await;
    assert!((200..300).contains(&status), "{status}");
    app.drain().await;
    sqlx::query_as(
        "SELECT id, first_delivery_id FROM event_summaries WHERE idem_key = $1 AND state = 'dead'",
    )
    .bind(key)
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

/// The least role of every route; the document must list exactly these.
const ROUTES: &[(&str, &str, &str)] = &[
    ("get", "/me", "viewer"),
    ("get", "/overview", "viewer"),
    ("get", "/sources", "viewer"),
    ("get", "/sources/{slug}", "viewer"),
    ("post", "/sources/{slug}/pause", "operator"),
    ("post", "/sources/{slug}/resume", "operator"),
    (
        "post",
        "/sources/{slug}/destinations/{destination}/breaker/open",
        "operator",
    ),
    (
        "post",
        "/sources/{slug}/destinations/{destination}/breaker/close",
        "operator",
    ),
    (
        "get",
        "/sources/{slug}/destinations/{destination}/url",
        "admin",
    ),
    ("post", "/sources/{slug}/reconcile", "operator"),
    ("get", "/sources/{slug}/reconcile", "viewer"),
    ("get", "/sources/{slug}/reconcile/findings", "viewer"),
    ("get", "/deliveries", "viewer"),
    ("get", "/deliveries/{id}", "viewer"),
    ("post", "/deliveries/{id}/redeliver", "operator"),
    ("get", "/events", "viewer"),
    ("get", "/events/{id}", "viewer"),
    ("get", "/events/stream", "viewer"),
    ("get", "/events/{id}/request", "viewer"),
    ("get", "/deliveries/{id}/export", "admin"),
    ("post", "/events/{id}/redeliver", "operator"),
    ("post", "/events/{id}/force", "admin"),
    ("post", "/events/{id}/dead-letter", "operator"),
    ("get", "/blocked-keys", "viewer"),
    ("get", "/dead-letters", "viewer"),
    ("post", "/dead-letters/redeliver", "operator"),
    ("get", "/incidents", "viewer"),
    ("get", "/incidents/{id}", "viewer"),
    ("post", "/incidents/{id}/ack", "operator"),
    ("post", "/incidents/{id}/resolve", "operator"),
    ("post", "/incidents/{id}/ignore", "operator"),
    ("post", "/incidents/{id}/redeliver", "operator"),
    ("get", "/jobs", "viewer"),
    ("get", "/jobs/{id}", "viewer"),
    ("delete", "/jobs/{id}", "operator"),
    ("get", "/jobs/{id}/results", "viewer"),
    ("get", "/alerts", "viewer"),
    ("post", "/alerts/silences", "admin"),
    ("delete", "/alerts/silences/{id}", "admin"),
    ("get", "/audit", "viewer"),
    ("get", "/tokens", "admin"),
    ("delete", "/tokens/{id}", "admin"),
];

#[sqlx::test(migrator = "MIGRATOR")]
async fn every_documented_route_checks_the_token_and_its_role(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400); 4]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let (event, delivery) = dead_event(&app, "m-1").await;

    let doc = call(&app, "get", "/openapi.json", None, None).await;
    assert_eq!(doc.status, 200, "the document needs no token");
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in doc.body["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.push((method.clone(), path.clone()));
        }
    }
    documented.sort();
    let mut expected: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    expected.sort();
    assert_eq!(
        documented, expected,
        "every route is documented, and only those"
    );

    let mut tokens: BTreeMap<&str, Option<String>> = BTreeMap::new();
    tokens.insert("none", None);
    tokens.insert("malformed", Some("rs_not-a-token".into()));
    tokens.insert("unknown", Some(format!("rs_{}", "x".repeat(40))));
    tokens.insert("expired", Some(token(&app, "old", "admin", Some(0)).await));
    let revoked = token(&app, "gone", "admin", None).await;
    revoke(&pool, "gone").await;
    tokens.insert("revoked", Some(revoked));
    for role in ["viewer", "operator", "admin"] {
        tokens.insert(role, Some(token(&app, role, role, None).await));
    }
    // A finished bulk job (nothing matches) for the job routes.
    let job = call(
        &app,
        "post",
        "/dead-letters/redeliver",
        tokens["operator"].as_deref(),
        Some(json!({"source": "nothing-matches"})),
    )
    .await;
    assert_eq!(
        (job.status, &job.body["state"]),
        (202, &json!("done")),
        "{}",
        job.body
    );
    let job = job.body["id"].as_i64().unwrap();
    // The dead event's refusals, grouped: an incident for its routes.
    replaysafe_core::jobs::rollup::fold_all(&pool)
        .await
        .unwrap();
    let incident: i64 = sqlx::query_scalar("SELECT id FROM incidents")
        .fetch_one(&pool)
        .await
        .unwrap();
    let silence: i64 = sqlx::query_scalar(
        "INSERT INTO alert_silences (rule, until, created_by, reason)
         VALUES ('backlog', now() + interval '1 hour', 'test', 'test') RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let rank = |role: &str| {
        ["viewer", "operator", "admin"]
            .iter()
            .position(|r| *r == role)
    };

    for (route, (method, path, least)) in ROUTES.iter().enumerate() {
        for (who, presented) in &tokens {
            // A token of its own to revoke, so the matrix keeps its tokens.
            let victim = format!("victim-{who}-{route}");
            token(&app, &victim, "viewer", None).await;
            let victim_id: i64 = sqlx::query_scalar("SELECT id FROM api_tokens WHERE name = $1")
                .bind(&victim)
                .fetch_one(&pool)
                .await
                .unwrap();
            let concrete = path
                .replace("{slug}", "gh")
                .replace("{destination}", "default")
                .replace(
                    "{id}",
                    &match path.split('/').nth(1) {
                        Some("deliveries") => delivery,
                        Some("events") => event,
                        Some("jobs") => job,
                        Some("incidents") => incident,
                        Some("alerts") => silence,
                        _ => victim_id,
                    }
                    .to_string(),
                );
            let body = (*method != "get" && *method != "delete").then(|| match *path {
                "/events/{id}/force" => json!({"key": "m-1", "reason": "the role matrix"}),
                "/events/{id}/dead-letter" => json!({"reason": "the role matrix"}),
                "/dead-letters/redeliver" => json!({"source": "nothing-matches"}),
                "/alerts/silences" => {
                    json!({"rule": "backlog", "minutes": 5, "reason": "the role matrix"})
                }
                _ => json!({}),
            });
            // Each route from its own address: the made-up tokens of the
            // whole matrix from one would pass the per-address limit.
            let from = format!("10.0.{route}.1");
            let answer = call_from(
                &app,
                Some(&from),
                method,
                &concrete,
                presented.as_deref(),
                body,
            )
            .await;
            let context = format!(
                "{who} {method} {concrete}: {} {}",
                answer.status, answer.body
            );
            match rank(who) {
                None => {
                    assert_eq!(answer.status, 401, "{context}");
                    assert_eq!(answer.body["code"], "unauthorized", "{context}");
                    assert!(answer.body["detail"].is_string(), "{context}");
                    assert_eq!(answer.headers["www-authenticate"], "Bearer", "{context}");
                }
                Some(r) if r < rank(least).unwrap() => {
                    assert_eq!(answer.status, 403, "{context}");
                    assert_eq!(answer.body["code"], "forbidden", "{context}");
                }
                Some(_) => assert!(answer.status < 400 || answer.status == 409, "{context}"),
            }
        }
    }

    let missing = call(
        &app,
        "get",
        "/nothing-here",
        tokens["admin"].as_deref(),
        None,
    )
    .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body["code"], "not_found");
    let bad_id = call(
        &app,
        "get",
        "/events/abc",
        tokens["viewer"].as_deref(),
        None,
    )
    .await;
    assert_eq!(
        (bad_id.status, bad_id.body["code"].as_str()),
        (400, Some("bad_request"))
    );
    let bad_body = call(
        &app,
        "post",
        &format!("/events/{event}/force"),
        tokens["admin"].as_deref(),
        Some(json!({"key": 7, "reason": "x"})),
    )
    .await;
    assert_eq!(
        (bad_body.status, bad_body.body["code"].as_str()),
        (422, Some("invalid"))
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn the_openapi_document_passes_a_real_validator(pool: PgPool) {
    let app = spawn_app(pool, gh_config("http://127.0.0.1:9/hook", "")).await;
    let doc = call(&app, "get", "/openapi.json", None, None).await;
    assert_eq!(doc.status, 200);
    assert!(doc.body["openapi"].as_str().unwrap().starts_with("3.1"));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), doc.body.to_string()).unwrap();
    // openapi-spec-validator from PyPI (tests/sdk/requirements.txt).
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/.venv/bin/python");
    let out = std::process::Command::new(python)
        .args(["-m", "openapi_spec_validator"])
        .arg(file.path())
        .output()
        .expect("tests/sdk/setup.sh installs the validator");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_tokens_actions_are_audit_logged_under_its_name_and_revoking_refuses_at_once(
    pool: PgPool,
) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let bot = token(&app, "ci-bot", "operator", None).await;
    let paused = call(&app, "post", "/sources/gh/pause", Some(&bot), None).await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(paused.body["paused"], true);
    let (who, by_token): (String, bool) = sqlx::query_as(
        "SELECT username, token_id IS NOT NULL FROM audit_log WHERE action = 'source.pause'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((who.as_str(), by_token), ("ci-bot", true));
    let audit = call(&app, "get", "/audit", Some(&bot), None).await;
    assert_eq!(audit.body["rows"][0]["username"], "ci-bot");
    assert_eq!(audit.body["rows"][0]["by_token"], true);
    let last_used: Option<String> =
        sqlx::query_scalar("SELECT last_used_at::text FROM api_tokens WHERE name = 'ci-bot'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(last_used.is_some(), "a use is recorded");
    // The stored hash is not the token, and the token appears nowhere in the database.
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_tokens WHERE encode(hash, 'escape') LIKE '%' || $1 || '%'
            OR prefix = $1",
    )
    .bind(&bot)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(stored, 0);

    revoke(&pool, "ci-bot").await;
    let refused = call(&app, "get", "/sources", Some(&bot), None).await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.body["detail"], "this token was revoked");
    // Its name may be given again.
    token(&app, "ci-bot", "viewer", None).await;
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_token_beyond_its_rate_gets_429_with_retry_after(pool: PgPool) {
    let app = spawn_app(
        pool,
        gh_config("http://127.0.0.1:9/hook", "api_requests_per_second = 2"),
    )
    .await;
    let viewer = token(&app, "busy", "viewer", None).await;
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..8 {
        let answer = call(&app, "get", "/sources", Some(&viewer), None).await;
        if answer.status == 429 {
            assert_eq!(answer.body["code"], "rate_limited");
            retry_after = answer.headers.get("retry-after").cloned();
        }
        statuses.push(answer.status);
    }
    assert_eq!(
        &statuses[..4],
        &[200; 4],
        "a burst of twice the rate: {statuses:?}"
    );
    assert!(statuses.contains(&429), "{statuses:?}");
    let secs: u64 = retry_after.unwrap().to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&secs), "{secs}");
    // Another token is not held back by this one.
    let other = token(&app, "calm", "viewer", None).await;
    assert_eq!(
        call(&app, "get", "/sources", Some(&other), None)
            .await
            .status,
        200
    );
}

/// The API's re-deliver, the dashboard's button and the provider's own
/// retry arrive at once for the same dead event: it is forwarded again
/// exactly once, and the API reports the dedup layer's answer.
#[sqlx::test(migrator = "MIGRATOR")]
async fn the_apis_redeliver_racing_the_dashboard_and_a_provider_duplicate_forwards_once(
    pool: PgPool,
) {
    // Each event's first attempt is refused (dead at once), the next one taken.
    let rounds = 6;
    let script = (0..rounds)
        .flat_map(|_| [Scripted::status(400), Scripted::status(200)])
        .collect();
    let destination = Destination::start(script).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let bot = token(&app, "race-bot", "operator", None).await;
    let operator = app.session("operator").await;
    for round in 0..rounds {
        let key = format!("race-{round}");
        let (event, delivery) = dead_event(&app, &key).await;
        let (api_path, ui_form) = (
            format!("/events/{event}/redeliver"),
            format!("delivery_id={delivery}"),
        );
        let body = format!(r#"{{"id":"{key}"}}"#);
        let api = call(&app, "post", &api_path, Some(&bot), None);
        let ui = app.server_fn_as(Some(&operator), "redeliver", &ui_form);
        let provider = app.github_delivery("gh", &key, &body, b"gh-secret");
        let (api, (ui_status, ui_body), provider) = tokio::join!(api, ui, provider);
        assert!(provider < 300, "the provider's retry is acknowledged");
        assert!(ui_status < 300, "{ui_body}");
        // The API answers 200 when it revived the event, else 409 with the answer.
        match api.status {
            200 => assert_eq!(api.body["requeued"], true, "{}", api.body),
            409 => assert!(api.body["result"]["outcome"].is_string(), "{}", api.body),
            other => panic!("{other}: {}", api.body),
        }
        app.drain().await;
        let forwarded = format!("gh:{key}");
        let forwards = destination
            .keys()
            .iter()
            .filter(|k| **k == forwarded)
            .count();
        assert_eq!(
            forwards, 2,
            "{key}: the refused first attempt and exactly one more"
        );
        let revived: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM deliveries WHERE event_id = $1 AND outcome = 'claimed'",
        )
        .bind(event)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            revived, 2,
            "{key}: the first claim and the one that revived it"
        );
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_session_is_no_token_and_every_refusal_is_in_the_apis_format(pool: PgPool) {
    let app = spawn_app(pool.clone(), gh_config("http://127.0.0.1:9/hook", "")).await;
    let viewer = token(&app, "reader", "viewer", None).await;

    // The dashboard's session cookie opens nothing here (nor does a CSRF-able form).
    let cookie = app.session("admin").await;
    let with_cookie = app
        .client
        .get(app.url("/api/v1/me"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status(), 401);

    // An impossible date is the client's mistake, not the database's.
    let bad_date = call(
        &app,
        "get",
        "/events?since=2026-02-30T10:00",
        Some(&viewer),
        None,
    )
    .await;
    assert_eq!(
        (bad_date.status, bad_date.body["code"].as_str()),
        (400, Some("bad_request")),
        "{}",
        bad_date.body
    );
    let bad_date = call(
        &app,
        "get",
        "/deliveries?until=2026-11-30T25:00",
        Some(&viewer),
        None,
    )
    .await;
    assert_eq!(bad_date.status, 400, "{}", bad_date.body);

    // Layers below the handlers answer in the same format.
    let wrong_method = call(&app, "get", "/sources/gh/pause", Some(&viewer), None).await;
    assert_eq!(
        (wrong_method.status, wrong_method.body["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
    let huge = json!({"key": "k", "reason": "x".repeat(200 * 1024)});
    let too_large = call(&app, "post", "/events/1/force", Some(&viewer), Some(huge)).await;
    assert_eq!(
        (too_large.status, too_large.body["code"].as_str()),
        (413, Some("too_large")),
        "{}",
        too_large.body
    );

    // An expired token no longer holds its name.
    token(&app, "short-lived", "viewer", Some(0)).await;
    token(&app, "short-lived", "viewer", None).await;
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn dead_letters_are_listed_by_source_time_and_reason(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400); 2]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let viewer = token(&app, "dead-reader", "viewer", None).await;
    dead_event(&app, "dead-1").await;
    dead_event(&app, "dead-2").await;
    let keys = |answer: &Answer| -> Vec<String> {
        answer.body["rows"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", answer.body))
            .iter()
            .map(|r| r["idem_key"].as_str().unwrap().to_owned())
            .collect()
    };
    let list = |query: &'static str| call(&app, "get", query, Some(&viewer), None);
    assert_eq!(
        keys(&list("/dead-letters?source=gh&reason=400").await),
        ["dead-2", "dead-1"]
    );
    assert!(keys(&list("/dead-letters?reason=no-such-words").await).is_empty());
    assert!(keys(&list("/dead-letters?since=2999-01-01T00:00:00Z").await).is_empty());
    assert_eq!(
        keys(&list("/dead-letters?until=2999-01-01T00:00").await).len(),
        2
    );
    let bad = list("/dead-letters?since=yesterday").await;
    assert_eq!(
        (bad.status, bad.body["code"].as_str()),
        (400, Some("bad_request"))
    );
}

/// Every time the API answers is RFC 3339 with milliseconds and `Z`
/// (`2026-12-03T09:05:16.123Z`), and the OpenAPI document says so.
#[sqlx::test(migrator = "MIGRATOR")]
async fn the_apis_times_are_rfc3339_with_milliseconds_and_z(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400)]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    let admin = token(&app, "time-reader", "admin", None).await;
    let (event, delivery) = dead_event(&app, "timed").await;
    let rfc3339 = |value: &Value, what: &str| {
        let text = value.as_str().unwrap_or_else(|| panic!("{what}: {value}"));
        let bytes = text.as_bytes();
        assert_eq!(bytes.len(), 24, "{what}: {text}");
        assert!(
            text.ends_with('Z') && bytes[10] == b'T' && bytes[19] == b'.',
            "{what}: {text}"
        );
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap_or_else(|e| panic!("{what}: {text}: {e}"));
    };
    let shown = call(&app, "get", &format!("/events/{event}"), Some(&admin), None).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    for field in [
        "state_changed_at",
        "first_seen_at",
        "last_seen_at",
        "next_attempt_at",
    ] {
        rfc3339(&shown.body["event"][field], field);
    }
    for entry in shown.body["timeline"].as_array().unwrap() {
        let (kind, inner) = entry.as_object().unwrap().iter().next().unwrap();
        let field = if kind == "Delivery" {
            "received_at"
        } else {
            "started_at"
        };
        rfc3339(&inner[field], field);
    }
    let delivery = call(
        &app,
        "get",
        &format!("/deliveries/{delivery}"),
        Some(&admin),
        None,
    )
    .await;
    rfc3339(&delivery.body["row"]["received_at"], "received_at");
    let dead = call(&app, "get", "/dead-letters", Some(&admin), None).await;
    rfc3339(&dead.body["rows"][0]["died_at"], "died_at");
    let audit = call(&app, "get", "/audit", Some(&admin), None).await;
    for row in audit.body["rows"].as_array().unwrap() {
        rfc3339(&row["at"], "audit at");
    }
    let tokens = call(&app, "get", "/tokens", Some(&admin), None).await;
    rfc3339(&tokens.body[0]["created_at"], "created_at");
    let overview = call(&app, "get", "/overview", Some(&admin), None).await;
    rfc3339(&overview.body["generated_at"], "generated_at");

    let doc = call(&app, "get", "/openapi.json", None, None).await;
    let schemas = &doc.body["components"]["schemas"];
    for (schema, field) in [
        ("DeliveryRow", "received_at"),
        ("EventSummary", "first_seen_at"),
        ("DeadLetter", "died_at"),
        ("AuditEntry", "at"),
    ] {
        assert_eq!(
            schemas[schema]["properties"][field]["format"], "date-time",
            "{schema}.{field}: {}",
            schemas[schema]["properties"][field]
        );
    }
}

/// `replaysafe token create` gives a token 90 days unless told otherwise;
/// `--expires never` is a choice, said out loud.
#[sqlx::test(migrator = "MIGRATOR")]
async fn tokens_expire_after_90_days_unless_made_to_live_forever(pool: PgPool) {
    let url = crate::helpers::database_url(&pool).await;
    let create = |name: &str, extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
            .args(["token", "create", "--name", name, "--role", "viewer"])
            .args(extra)
            .env("DATABASE_URL", &url)
            .env_remove("REPLAYSAFE_CONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = create("default-life", &[]);
    assert!(!said.contains("never expires"), "{said}");
    create("short-life", &["--expires", "12h"]);
    let said = create("long-life", &["--expires", "never"]);
    assert!(said.contains("never expires"), "{said}");
    let days: Vec<(String, Option<f64>)> = sqlx::query_as(
        "SELECT name, extract(epoch FROM expires_at - created_at)::float8 / 86400
         FROM api_tokens ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        days,
        [
            ("default-life".to_owned(), Some(90.0)),
            ("long-life".to_owned(), None),
            ("short-life".to_owned(), Some(0.5)),
        ]
    );
}

/// A destination's URL is a credential when it carries one
/// (`https://user:pass@app/hook?token=...`): a viewer, the API, the
/// database and `config check` see scheme, host, port and path only; an
/// admin may reveal it whole, and that is audit-logged.
#[sqlx::test(migrator = "MIGRATOR")]
async fn destination_credentials_are_shown_to_an_admins_logged_reveal_only(pool: PgPool) {
    let secret_url = "http://hook-user:hook-pass@127.0.0.1:9/hook?token=tok-123";
    let app = spawn_app(pool.clone(), gh_config(secret_url, "")).await;
    let viewer = token(&app, "v", "viewer", None).await;
    let operator = token(&app, "o", "operator", None).await;
    let admin = token(&app, "a", "admin", None).await;
    let shown = "http://***@127.0.0.1:9/hook?***";
    let sources = call(&app, "get", "/sources", Some(&viewer), None).await;
    assert_eq!(
        sources.body[0]["destinations"][0]["url"], shown,
        "{}",
        sources.body
    );
    assert_eq!(sources.body[0]["destination"], shown);
    let stored: String =
        sqlx::query_scalar("SELECT destinations::text || destination FROM sources")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        !stored.contains("hook-pass") && !stored.contains("tok-123"),
        "{stored}"
    );

    let path = "/sources/gh/destinations/default/url";
    assert_eq!(
        call(&app, "get", path, Some(&operator), None).await.status,
        403
    );
    let revealed = call(&app, "get", path, Some(&admin), None).await;
    assert_eq!(
        (revealed.status, &revealed.body["url"]),
        (200, &json!(secret_url))
    );
    let logged: Vec<(String, String)> =
        sqlx::query_as("SELECT action, target FROM audit_log WHERE action = 'destination.reveal'")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        logged,
        [("destination.reveal".into(), "destination gh/default".into())]
    );
    let nothing = call(
        &app,
        "get",
        "/sources/gh/destinations/nope/url",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(nothing.status, 404);

    // config check prints it masked too.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("replaysafe.toml");
    std::fs::write(
        &file,
        format!("[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"env:GH\"]\ndestination = \"{secret_url}\"\n"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
        .args(["config", "check", "--config"])
        .arg(&file)
        .env("GH", "gh-secret")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(printed.contains(shown), "{printed}");
    assert!(
        !printed.contains("hook-pass") && !printed.contains("tok-123"),
        "{printed}"
    );
}
