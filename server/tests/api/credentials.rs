//! Strangers with made-up credentials (issue 35, item 8): bearer tokens and
//! session cookies that do not verify are counted per client address and
//! answered 429 past 100 a minute, before any look-up; requests with none
//! still get 401; and the dashboard and the API have a pool of their own,
//! so that holding all of it never holds a delivery.

use std::time::{Duration, Instant};

use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{gh_config, make_token, spawn_app, spawn_app_with_dashboard_pool, TestApp};

const LIMIT: usize = replaysafe_core::accounts::bad_credentials::LIMIT as usize;

/// A request to the API from `address` (the test connects from loopback,
/// a trusted proxy by default, which names the client in X-Forwarded-For).
async fn api_from(app: &TestApp, address: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = app
        .client
        .get(app.url("/api/v1/events"))
        .header("x-forwarded-for", address);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn made_up_tokens_from_one_address_get_429_after_100_a_minute(pool: PgPool) {
    let app = spawn_app(pool.clone(), gh_config("http://127.0.0.1:9/", "")).await;
    let real = make_token(&pool, "real", "viewer", None).await;
    for i in 0..LIMIT {
        let r = api_from(&app, "203.0.113.7", Some(&format!("rs_madeup{i}"))).await;
        assert_eq!(r.status(), 401, "made-up token {i}");
    }
    let r = api_from(&app, "203.0.113.7", Some("rs_madeup-next")).await;
    assert_eq!(r.status(), 429);
    let wait: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited", "{body}");
    // The address is refused whatever it sends with credentials, a real
    // token included: nothing is looked up for it this minute.
    assert_eq!(
        api_from(&app, "203.0.113.7", Some(&real)).await.status(),
        429
    );
    // No credentials at all: 401 as ever.
    assert_eq!(api_from(&app, "203.0.113.7", None).await.status(), 401);
    // Another address is not held.
    assert_eq!(
        api_from(&app, "203.0.113.8", Some(&real)).await.status(),
        200
    );
    assert_eq!(
        api_from(&app, "203.0.113.8", Some("rs_madeup"))
            .await
            .status(),
        401
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn made_up_session_cookies_from_one_address_get_429_after_100_a_minute(pool: PgPool) {
    let app = spawn_app(pool.clone(), gh_config("http://127.0.0.1:9/", "")).await;
    let page = |cookie: &str| {
        app.client
            .get(app.url("/overview"))
            .header("x-forwarded-for", "198.51.100.9")
            .header("cookie", cookie.to_owned())
            .send()
    };
    for i in 0..LIMIT {
        let r = page(&format!("replaysafe_session=madeup{i}"))
            .await
            .unwrap();
        assert!(
            r.status().is_redirection(),
            "a cookie that does not verify is sent to sign in: {}",
            r.status()
        );
    }
    let r = page("theme=dark; replaysafe_session=madeup").await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    // Without the cookie: sent to sign in, as anyone.
    let r = page("theme=dark").await.unwrap();
    assert!(r.status().is_redirection(), "{}", r.status());
    // A real session from another address is served.
    let cookie = app.session("viewer").await;
    let r = app
        .client
        .get(app.url("/overview"))
        .header("x-forwarded-for", "198.51.100.10")
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// Every connection of the dashboard's and the API's pool held (a flood of
/// them waiting on slow look-ups): deliveries are claimed and answered at
/// once all the same; the API answers 503 once its wait for a connection
/// is over.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_dashboard_pool_held_whole_never_holds_a_delivery(pool: PgPool) {
    let dashboard = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(replaysafe_core::db::ACQUIRE_TIMEOUT)
        .connect_lazy_with((*pool.connect_options()).clone());
    let app = spawn_app_with_dashboard_pool(
        pool.clone(),
        gh_config("http://127.0.0.1:9/", ""),
        dashboard.clone(),
    )
    .await;
    let token = make_token(&pool, "real", "viewer", None).await;
    let mut held = Vec::new();
    while let Ok(Ok(conn)) =
        tokio::time::timeout(Duration::from_millis(500), dashboard.acquire()).await
    {
        held.push(conn);
    }
    assert!(!held.is_empty() && held.len() < 32, "{} held", held.len());
    let started = Instant::now();
    for i in 0..20 {
        let status = app
            .github_delivery(
                "gh",
                &format!("d-{i}"),
                &format!(r#"{{"i":{i}}}"#),
                b"gh-secret",
            )
            .await;
        assert_eq!(status, 200, "delivery {i}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "deliveries waited for the dashboard's pool: {:?}",
        started.elapsed()
    );
    let r = api_from(&app, "192.0.2.1", Some(&token)).await;
    assert_eq!(r.status(), 503, "the API waited for its own pool");
    drop(held);
    assert_eq!(
        api_from(&app, "192.0.2.1", Some(&token)).await.status(),
        200
    );
    drop(app);
    dashboard.close().await;
}
