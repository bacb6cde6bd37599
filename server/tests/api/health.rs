use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{spawn_app, test_config};

#[sqlx::test(migrator = "MIGRATOR")]
async fn healthz_and_readyz_answer_ok_on_a_migrated_database(pool: PgPool) {
    let app = spawn_app(pool, test_config("", &[])).await;

    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.text().await.unwrap(), "ready");
}

#[sqlx::test(migrations = false)]
async fn readyz_is_503_until_migrations_are_applied(pool: PgPool) {
    let config = std::sync::Arc::new(test_config("", &[]));
    let app = replaysafe::web::Application::bind(
        replaysafe_core::processing::Services::new(pool.clone(), config, Default::default()),
        replaysafe::web::Role::Full,
    )
    .await
    .unwrap();
    let url = format!("http://{}/readyz", app.addr);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(app.run(shutdown.clone()));

    let before = reqwest::get(&url).await.unwrap();
    assert_eq!(before.status(), 503);
    assert_eq!(before.text().await.unwrap(), "migrations pending");

    MIGRATOR.run(&pool).await.unwrap();
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 200);
    shutdown.cancel();
}

#[sqlx::test(migrations = false)]
async fn migrations_are_idempotent(pool: PgPool) {
    replaysafe_core::db::migrate(&pool).await.unwrap();
    replaysafe_core::db::migrate(&pool).await.unwrap();
    assert!(replaysafe_core::db::is_migrated(&pool).await.unwrap());
}

#[tokio::test]
async fn readyz_is_503_when_the_database_is_unreachable() {
    // A port nobody listens on: the pool is lazy, so the server still starts.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = listener.local_addr().unwrap().port();
    drop(listener);
    let url =
        replaysafe_core::config::Secret::new(format!("postgres://nobody@127.0.0.1:{dead_port}/x"));
    let pool = replaysafe_core::db::pool(&url, 2).await.unwrap();
    let config = std::sync::Arc::new(test_config("", &[]));
    let app = replaysafe::web::Application::bind(
        replaysafe_core::processing::Services::new(pool, config, Default::default()),
        replaysafe::web::Role::Full,
    )
    .await
    .unwrap();
    let addr = app.addr;
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(app.run(shutdown.clone()));

    let started = std::time::Instant::now();
    let ready = reqwest::get(format!("http://{addr}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(ready.text().await.unwrap(), "database unreachable");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let health = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    shutdown.cancel();
}
