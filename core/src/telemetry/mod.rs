//! Logs (tracing to stderr), traces (OTLP/HTTP, optional) and metrics (a
//! Prometheus recorder).

pub mod metrics;
mod otlp;

use std::time::Duration;

use tracing_subscriber::EnvFilter;

/// The one way replaysafe makes an outgoing HTTP client (forwards, alert
/// channels, the OTLP exporter): it follows no redirect, so a request goes
/// to the URL the config names and nowhere that URL points on to.
pub fn outgoing_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())
}

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

/// Lets a log line through at most once per `every`, counting the ones
/// held back meanwhile: a database outage or a collector that is down
/// repeats one error for every request, which would flood the log.
pub struct Throttle {
    every_ms: u64,
    /// Milliseconds since the Unix epoch of the last line let through.
    last: std::sync::atomic::AtomicU64,
    held_back: std::sync::atomic::AtomicU64,
}

impl Throttle {
    pub const fn new(every: Duration) -> Self {
        Self {
            every_ms: every.as_millis() as u64,
            last: std::sync::atomic::AtomicU64::new(0),
            held_back: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Some(lines held back since the last one) when this one may be logged.
    pub fn allow(&self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let last = self.last.load(Relaxed);
        if now >= last + self.every_ms
            && self
                .last
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            Some(self.held_back.swap(0, Relaxed))
        } else {
            self.held_back.fetch_add(1, Relaxed);
            None
        }
    }
}

/// The build's version and commit (`--version`, `replaysafe_build_info`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("REPLAYSAFE_COMMIT");
/// Both, as `--version` prints them.
pub const VERSION_AND_COMMIT: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("REPLAYSAFE_COMMIT"),
    ")"
);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_line_through_and_counts_the_rest() {
        let throttle = Throttle::new(Duration::from_secs(3600));
        assert_eq!(throttle.allow(), Some(0));
        assert_eq!(throttle.allow(), None);
        assert_eq!(throttle.allow(), None);
        let open = Throttle::new(Duration::ZERO);
        assert_eq!(open.allow(), Some(0));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(open.allow(), Some(0));
        // The count restarts with each line let through.
        throttle.last.store(0, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(throttle.allow(), Some(2));
    }
}
