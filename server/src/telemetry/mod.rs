//! Logs (tracing to stderr) and metrics (a Prometheus recorder).

pub mod metrics;

use tracing_subscriber::EnvFilter;

/// How log lines are written: for people, or one JSON object a line
/// (`timestamp`, `level`, `target`, `message` and the event's fields at the
/// top level, the span's under `span`) for a log pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The build's version and commit (`--version`, `replaysafe_build_info`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("REPLAYSAFE_COMMIT");

/// Logs go to stderr; `RUST_LOG` overrides the default filter.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn,hyper=warn"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
