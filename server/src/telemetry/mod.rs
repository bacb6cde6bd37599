//! Logs (tracing to stderr), traces (OTLP/HTTP, optional) and metrics (a
//! Prometheus recorder).

pub mod metrics;
mod otlp;

use std::time::Duration;

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

/// What logs and traces need before the config is read in full.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub log_format: LogFormat,
    /// OTLP/HTTP base URL (`otlp_endpoint`): spans are exported when set.
    pub otlp_endpoint: Option<url::Url>,
}

const DEFAULT_FILTER: &str = "info,sqlx=warn,tower_http=warn,hyper=warn";

/// Flushes the spans not yet exported when dropped, at exit.
#[must_use = "dropping it at once stops the trace export"]
pub struct Guard(Option<opentelemetry_sdk::trace::SdkTracerProvider>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take() {
            // One export may take its whole timeout: the last batch gets it.
            if let Err(e) =
                provider.shutdown_with_timeout(otlp::EXPORT_TIMEOUT + Duration::from_secs(1))
            {
                eprintln!("replaysafe: exporting the last spans: {e}");
            }
        }
    }
}

/// Logs go to stderr; spans also go to the OTLP endpoint when one is set
/// (called inside the tokio runtime, on which the exporter's requests
/// run). `RUST_LOG` overrides the logs' default filter.
pub fn init(settings: &Settings) -> Guard {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match settings.log_format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    };
    let provider = settings.otlp_endpoint.as_ref().and_then(|endpoint| {
        otlp::provider(endpoint)
            .map_err(|e| eprintln!("replaysafe: traces will not be exported to {endpoint}: {e}"))
            .ok()
    });
    // The logs' RUST_LOG turned up for a debugging session must not flood
    // the trace pipeline: spans keep the default filter.
    let spans = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("replaysafe"))
            .with_filter(EnvFilter::new(DEFAULT_FILTER))
    });
    let _ = tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(spans)
        .try_init();
    Guard(provider)
}
