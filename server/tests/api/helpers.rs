use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use replaysafe::config::{self, Config};
use replaysafe::startup::Application;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub struct TestApp {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    shutdown: CancellationToken,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Parses config text for a test; `listen` is forced to a free port.
pub fn test_config(text: &str, vars: &[(&str, &str)]) -> Config {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut config =
        config::parse_and_validate(Some(Path::new("/tmp/replaysafe-test.toml")), text, &env)
            .expect("test config is valid");
    config.listen = "127.0.0.1:0".parse().unwrap();
    config
}

/// Starts the real server on the test's database, migrated and with the
/// config's sources synced, as `serve` does.
pub async fn spawn_app(pool: PgPool, config: Config) -> TestApp {
    replaysafe::startup::prepare_database(
        pool.clone(),
        Arc::new(config.clone()),
        CancellationToken::new(),
    )
    .await;
    spawn_app_with(pool, config).await
}

/// Starts the server on a pool as it is (another process's view, or a dead database).
pub async fn spawn_app_with(pool: PgPool, config: Config) -> TestApp {
    let config = Arc::new(config);
    let shutdown = CancellationToken::new();
    let app = Application::bind(config.clone(), pool.clone())
        .await
        .expect("binding a free port");
    let addr = app.addr;
    tokio::spawn(app.run(shutdown.clone()));
    TestApp {
        addr,
        client: reqwest::Client::new(),
        shutdown,
    }
}
