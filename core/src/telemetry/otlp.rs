//! Traces exported over OTLP/HTTP (protobuf) to `otlp_endpoint` (spec
//! section 8): the spans of `tracing` (a request's, an attempt's), batched
//! by the OpenTelemetry SDK on its own thread. Spans carry what logs carry:
//! names, ids, methods, paths, never a secret, a signature or a body.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

/// One export may take this long, reading the collector's answer included.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// A collector's answer is a few bytes; more is not read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Where traces go: `<endpoint>/v1/traces`, as OTEL_EXPORTER_OTLP_ENDPOINT
/// is read by every OpenTelemetry SDK.
pub fn traces_url(endpoint: &url::Url) -> url::Url {
    let mut url = endpoint.clone();
    let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url
}

/// The tracer provider exporting to `endpoint`; called inside the tokio
/// runtime, on which its requests run.
pub fn provider(endpoint: &url::Url) -> Result<SdkTracerProvider, String> {
    let client = Client {
        http: super::outgoing_client()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())?,
        runtime: tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint).as_str())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let resource = Resource::builder_empty()
        .with_service_name("replaysafe")
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            super::VERSION,
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Our reqwest client lent to the exporter. The SDK's batch thread runs
/// outside tokio, so each request is spawned onto the runtime.
#[derive(Debug)]
struct Client {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let http = self.http.clone();
        let sent = self
            .runtime
            .spawn(async move {
                let mut response = http.execute(request).await?;
                let (status, headers) = (response.status(), response.headers().clone());
                let mut body = Vec::new();
                while let Some(chunk) = response.chunk().await? {
                    let room = MAX_ANSWER_BYTES - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() == MAX_ANSWER_BYTES {
                        break;
                    }
                }
                Ok::<_, reqwest::Error>((status, headers, body))
            })
            .await?;
        // The SDK reports nothing (its internal logs are off): a collector
        // that is away or refuses would go unnoticed.
        let (status, headers, body) = match sent {
            Ok(answer) if answer.0.is_success() => answer,
            Ok(answer) => {
                warn_now_and_then(&format!("the collector answered {}", answer.0));
                answer
            }
            Err(e) => {
                // No URL: reqwest's error names it, and it is the config's.
                let e = e.without_url();
                warn_now_and_then(&format!("sending to the collector failed: {e}"));
                return Err(e.into());
            }
        };
        let mut answer = http::Response::new(Bytes::from(body));
        *answer.status_mut() = status;
        *answer.headers_mut() = headers;
        Ok(answer)
    }
}

/// Warns about a failed export at most once a minute: a collector that
/// is down must not fill the log with one line per batch.
fn warn_now_and_then(what: &str) {
    static THROTTLE: super::Throttle = super::Throttle::new(Duration::from_secs(60));
    if let Some(held_back) = THROTTLE.allow() {
        tracing::warn!(held_back, "traces not exported: {what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_go_under_the_endpoint_path() {
        for (endpoint, traces) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            (
                "https://otel.example/otlp/",
                "https://otel.example/otlp/v1/traces",
            ),
        ] {
            let url = url::Url::parse(endpoint).unwrap();
            assert_eq!(traces_url(&url).as_str(), traces);
        }
    }
}
