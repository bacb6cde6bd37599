//! Logs (tracing to stderr) and metrics (a Prometheus recorder).

pub mod metrics;

use tracing_subscriber::EnvFilter;

/// Logs go to stderr; `RUST_LOG` overrides the default filter.
pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn,hyper=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
