//! Forwarding (spec section 5, interface): the original body byte for byte,
//! its content type, the provider's event headers without its signature
//! headers, `Idempotency-Key: {slug}:{key}`, and replaysafe's own Standard
//! Webhooks signature under `destination_secret`.

use std::time::{Duration, Instant};

use crate::config::{Destination, SourceConfig};
use crate::events::{AttemptRecord, Leased};
use crate::providers::{standard, Provider};

/// Kept from the response for the timeline; enough to read an error message.
pub const EXCERPT_BYTES: usize = 1024;

/// Marks a forced re-execution of a completed event: the application sees
/// the same Idempotency-Key again and should run it anyway (spec section 6).
pub const FORCED_HEADER: &str = "x-replaysafe-forced";

/// The headers of the stored delivery that go on to the application.
pub fn event_headers(
    provider: &Provider,
    stored: Option<&serde_json::Value>,
) -> Vec<(String, String)> {
    let Some(serde_json::Value::Array(pairs)) = stored else {
        return Vec::new();
    };
    pairs
        .iter()
        .filter_map(|pair| {
            let name = pair.get(0)?.as_str()?.to_ascii_lowercase();
            let value = pair.get(1)?.as_str()?;
            provider
                .forwards_header(&name)
                .then(|| (name, value.to_owned()))
        })
        .collect()
}

/// replaysafe's Standard Webhooks headers for one forward.
pub fn sign(
    destination_secret: &str,
    message_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Option<String> {
    let key = standard::decode_secret(destination_secret).ok()?;
    Some(standard::sign(&key, message_id, timestamp, body))
}

/// What replaysafe sends for an event, wherever it goes: a destination,
/// `listen`'s local handler, `prove`'s.
pub struct Outgoing<'a> {
    pub message_id: &'a str,
    /// `{slug}:{key}`.
    pub idempotency_key: &'a str,
    pub content_type: Option<&'a str>,
    /// The provider's event headers that go on.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
    /// Signs it (Standard Webhooks) when set.
    pub secret: Option<&'a str>,
    pub user_agent: &'a str,
}

/// The request for `outgoing`, signed now.
pub fn request(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    outgoing: &Outgoing<'_>,
) -> reqwest::RequestBuilder {
    let timestamp = chrono::Utc::now().timestamp();
    let mut request = client
        .post(url)
        .header(
            "content-type",
            outgoing.content_type.unwrap_or("application/octet-stream"),
        )
        .header("idempotency-key", outgoing.idempotency_key)
        .header("webhook-id", outgoing.message_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("user-agent", outgoing.user_agent);
    if let Some(secret) = outgoing.secret {
        if let Some(signature) = sign(secret, outgoing.message_id, timestamp, outgoing.body) {
            request = request.header("webhook-signature", signature);
        }
    }
    for (name, value) in outgoing.headers {
        request = request.header(name, value);
    }
    request.body(outgoing.body.to_vec())
}

/// The stable message id the application sees in `webhook-id` across retries.
pub fn message_id(event_id: i64) -> String {
    format!("msg_{event_id}")
}

/// The destination's answer, or why there was none.
pub struct Answer {
    pub record: AttemptRecord,
    pub retry_after: Option<Duration>,
    pub content_type: Option<String>,
    /// The response body, up to the `keep_bytes` asked for.
    pub body: Vec<u8>,
    /// No connection could be made (refused, unreachable): the destination
    /// is down, not this event's trouble.
    pub unreachable: bool,
}

/// Forwards one leased event. Keeps up to `keep_bytes` of the response body
/// (an excerpt for the timeline, or the whole answer in sync mode).
pub async fn forward(
    client: &reqwest::Client,
    source: &SourceConfig,
    destination: Option<&Destination>,
    leased: &Leased,
    keep_bytes: usize,
) -> Answer {
    let started = Instant::now();
    let elapsed_ms = || i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
    let failed = |error: String| Answer {
        record: AttemptRecord {
            status: None,
            latency_ms: elapsed_ms(),
            response_excerpt: None,
            error: Some(error),
        },
        retry_after: None,
        content_type: None,
        body: Vec::new(),
        unreachable: false,
    };
    let (Some(destination), Some(body)) = (destination, leased.body.as_deref()) else {
        return failed("nothing to forward: no destination or the payload was pruned".into());
    };
    let message_id = message_id(leased.event_id);
    let idempotency_key = format!("{}:{}", source.slug, leased.idem_key);
    let headers = event_headers(source.provider, leased.headers.as_ref());
    let mut request = request(
        client,
        &destination.url,
        &Outgoing {
            message_id: &message_id,
            idempotency_key: &idempotency_key,
            content_type: leased.content_type.as_deref(),
            headers: &headers,
            body,
            secret: destination.secret.as_ref().map(|s| s.expose()),
            user_agent: concat!("replaysafe/", env!("CARGO_PKG_VERSION")),
        },
    )
    .timeout(Duration::from_secs(destination.timeout_secs));
    // Set after the provider's headers, so no provider can claim it.
    if leased.forced {
        request = request.header(FORCED_HEADER, "true");
    }
    let mut response = match request.send().await {
        Ok(r) => r,
        // Before timeouts: a connect timeout (a host that drops packets) is
        // the destination being down too.
        Err(e) if e.is_connect() => {
            return Answer {
                unreachable: true,
                ..failed(format!("connection failed: {}", root_cause(&e)))
            }
        }
        Err(e) if e.is_timeout() => {
            return failed(format!("timed out after {} s", destination.timeout_secs))
        }
        Err(e) if e.is_builder() => return failed(format!("request could not be built: {e}")),
        Err(e) => return failed(format!("connection failed: {}", root_cause(&e))),
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| super::retry::parse_retry_after(v, chrono::Utc::now()));
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut kept = Vec::new();
    let mut error = None;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = keep_bytes - kept.len();
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if kept.len() >= keep_bytes {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                error = Some(format!("response body cut short: {}", root_cause(&e)));
                break;
            }
        }
    }
    Answer {
        record: AttemptRecord {
            status: Some(status),
            latency_ms: elapsed_ms(),
            // PostgreSQL's text holds no NUL: an answer with one would make
            // its attempt, and every attempt recorded with it, fail to record.
            response_excerpt: Some(
                String::from_utf8_lossy(&kept[..kept.len().min(EXCERPT_BYTES)])
                    .replace('\0', "\u{FFFD}"),
            ),
            error,
        },
        retry_after,
        content_type,
        body: kept,
        unreachable: false,
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_headers_stay_and_only_the_sources_own_event_headers_go_on() {
        let stored = serde_json::json!([
            ["content-type", "application/json"],
            ["x-github-event", "push"],
            ["x-github-delivery", "d-1"],
            ["x-hub-signature-256", "sha256=abc"],
            ["x-shopify-hmac-sha256", "zzz"],
            ["x-shopify-topic", "orders/create"],
            ["webhook-signature", "v1,provider"],
            ["authorization", "[redacted]"],
        ]);
        let names = |provider| -> Vec<String> {
            event_headers(provider, Some(&stored))
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(
            names(&crate::providers::github::PROVIDER),
            ["x-github-event", "x-github-delivery"]
        );
        assert_eq!(
            names(&crate::providers::shopify::PROVIDER),
            ["x-shopify-topic"]
        );
        assert!(names(&crate::providers::stripe::PROVIDER).is_empty());
        assert!(names(&crate::providers::standard::PROVIDER).is_empty());
    }

    #[test]
    fn our_signature_verifies_with_the_standard_webhooks_scheme() {
        // The reference library's fixture, signed the other way round.
        let sig = sign(
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1649367553,
            br#"{"email":"test@example.com","username":"test_user"}"#,
        );
        assert_eq!(
            sig.as_deref(),
            Some("v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=")
        );
    }
}
