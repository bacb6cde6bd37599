use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{spawn_app, test_config};

const TWO_SOURCES: &str = r#"
[[source]]
slug = "stripe"
provider = "stripe"
secrets = ["env:STRIPE_SECRET"]
destination = "http://127.0.0.1:4000/stripe"

[[source]]
slug = "slack"
provider = "slack"
secrets = ["slack-signing-secret"]
paused = true
"#;

/// The server function the Sources page calls, over HTTP as the browser calls it.
async fn list_sources(app: &crate::helpers::TestApp) -> serde_json::Value {
    let (status, sources) = app.server_fn("sources", "").await;
    assert_eq!(status, 200, "{sources}");
    sources
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn configured_sources_are_listed_without_secrets(pool: PgPool) {
    let config = test_config(TWO_SOURCES, &[("STRIPE_SECRET", "whsec_do_not_show")]);
    let app = spawn_app(pool, config).await;

    let sources = list_sources(&app).await;
    let shown = sources.to_string();
    assert!(!shown.contains("whsec_do_not_show"), "{shown}");
    assert!(!shown.contains("slack-signing-secret"), "{shown}");

    let slugs: Vec<&str> = sources
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["slack", "stripe"]);
    assert_eq!(sources[0]["mode"], "ack");
    assert_eq!(sources[0]["paused"], true);
    assert_eq!(sources[1]["provider"], "stripe");
    assert_eq!(sources[1]["destination"], "http://127.0.0.1:4000/stripe");
    assert_eq!(sources[1]["paused"], false);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn the_sources_page_is_rendered_on_the_server(pool: PgPool) {
    let config = test_config(TWO_SOURCES, &[("STRIPE_SECRET", "whsec_do_not_show")]);
    let app = spawn_app(pool, config).await;

    let viewer = app.session("viewer").await;
    let page = app.page(Some(&viewer), "/sources").await;
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"data-slug="stripe""#), "{html}");
    assert!(html.contains("http://127.0.0.1:4000/stripe"));
    assert!(!html.contains("whsec_do_not_show"));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn sync_keeps_an_operators_pause_and_marks_removed_sources(pool: PgPool) {
    let config = test_config(TWO_SOURCES, &[("STRIPE_SECRET", "s")]);
    replaysafe_core::db::sources::sync(&pool, &config)
        .await
        .unwrap();
    sqlx::query("UPDATE sources SET paused_override = true WHERE slug = 'stripe'")
        .execute(&pool)
        .await
        .unwrap();

    // The next start has only the stripe source, now with another destination.
    let next = test_config(
        "[[source]]\nslug = \"stripe\"\nprovider = \"stripe\"\nsecrets = [\"s\"]\ndestination = \"http://127.0.0.1:5000/new\"",
        &[],
    );
    let app = spawn_app(pool, next).await;
    let sources = list_sources(&app).await;

    assert_eq!(sources[0]["slug"], "stripe");
    assert_eq!(sources[0]["destination"], "http://127.0.0.1:5000/new");
    assert_eq!(
        sources[0]["paused"], true,
        "the operator's pause wins over the config"
    );
    assert_eq!(sources[0]["paused_by_operator"], true);
    assert_eq!(sources[1]["slug"], "slack");
    assert_eq!(sources[1]["in_config"], false);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn unknown_pages_are_404(pool: PgPool) {
    let app = spawn_app(pool, test_config("", &[])).await;
    let viewer = app.session("viewer").await;
    let page = app.page(Some(&viewer), "/no-such-page").await;
    assert_eq!(page.status(), 404);
}

/// Building the dashboard's router runs the app once with every resource's
/// loading suppressed by a process-wide flag (leptos_server's
/// `SuppressResourceLoad`): a page whose resource first polled meanwhile
/// waited forever. Another application built in the same process (a test's,
/// a second listener's) must never stall a page being rendered.
#[sqlx::test(migrator = "MIGRATOR")]
async fn building_another_application_never_stalls_a_page(pool: PgPool) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    let app = spawn_app(pool, test_config(TWO_SOURCES, &[("STRIPE_SECRET", "s")])).await;
    let viewer = app.session("viewer").await;
    let stop = Arc::new(AtomicBool::new(false));
    let builder = std::thread::spawn({
        let (stop, services) = (stop.clone(), app.services.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let mut built = 0u32;
            while !stop.load(Ordering::Relaxed) {
                runtime.block_on(async {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                    replaysafe::web::Application::on(
                        listener,
                        services.clone(),
                        replaysafe::web::Role::Full,
                    )
                    .unwrap();
                });
                built += 1;
            }
            built
        }
    });
    for round in 0..100 {
        let page = async {
            let page = app.page(Some(&viewer), "/sources").await;
            assert_eq!(page.status(), 200);
            page.text().await.unwrap()
        };
        let html = tokio::time::timeout(Duration::from_secs(10), page)
            .await
            .unwrap_or_else(|_| panic!("page {round} stalled while another application was built"));
        assert!(html.contains(r#"data-slug="stripe""#), "{html}");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(
        builder.join().unwrap() > 0,
        "no application was built meanwhile"
    );
}
