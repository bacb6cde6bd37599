//! The receiver's core (spec section 3): verify, key, claim. Plain code over
//! bytes and a database transaction; the HTTP adapter lives in `http`.

pub mod claim;
pub mod http;
pub mod providers;

use std::time::Instant;

use sqlx::PgPool;

use crate::config::SourceConfig;
use claim::{NewDelivery, Outcome};
use providers::Rejection;

/// One request as it reached a source: raw bytes, nothing trusted yet.
#[derive(Clone, Debug, Default)]
pub struct Inbound {
    /// The raw query string, without `?`.
    pub query: Option<String>,
    /// Header names in lowercase, values as sent, in order (repeats kept).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub remote_addr: Option<String>,
}

impl Inbound {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the HTTP layer sends back to the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
    pub outcome: Outcome,
}

/// How a delivery is being received: from a provider now, or fed back by an operator.
#[derive(Clone, Copy, Debug)]
pub struct Receipt {
    /// Unix seconds, for timestamp windows.
    pub now: i64,
    pub started: Instant,
    /// Stored deliveries are re-verified without the timestamp window.
    pub waive_timestamp: bool,
}

impl Receipt {
    pub fn now() -> Self {
        Self {
            now: chrono::Utc::now().timestamp(),
            started: Instant::now(),
            waive_timestamp: false,
        }
    }
}

/// Headers never stored or shown: they carry credentials, not webhook content.
const REDACTED_HEADERS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

pub fn stored_headers(headers: &[(String, String)]) -> serde_json::Value {
    serde_json::Value::Array(
        headers
            .iter()
            .map(|(name, value)| {
                let shown = if REDACTED_HEADERS.contains(&name.as_str()) {
                    "[redacted]"
                } else {
                    value.as_str()
                };
                serde_json::json!([name, shown])
            })
            .collect(),
    )
}

/// Verify, key and claim one delivery; every path records it, except when
/// the database is unreachable (then 503, so the provider retries).
#[tracing::instrument(name = "receive", skip_all, fields(source = %source.slug))]
pub async fn receive(
    pool: &PgPool,
    source: &SourceConfig,
    inbound: &Inbound,
    receipt: Receipt,
) -> Reply {
    let checked = providers::verify(source, inbound, receipt.now, receipt.waive_timestamp)
        .and_then(|verification| {
            providers::idempotency_key(source, inbound).map(|key| (verification, key))
        });
    let mut delivery = NewDelivery {
        source: &source.slug,
        idem_key: None,
        verified: false,
        verification: String::new(),
        reject_reason: None,
        query: inbound.query.as_deref(),
        content_type: inbound.header("content-type"),
        headers: stored_headers(&inbound.headers),
        body: Some(&inbound.body),
        body_size: inbound.body.len(),
        remote_addr: inbound.remote_addr.as_deref(),
        started: receipt.started,
    };
    let result = match checked {
        Err(rejection) => {
            tracing::info!(reason = %rejection.reason, status = rejection.status, "delivery rejected");
            delivery.verification = rejection.reason.clone();
            delivery.reject_reason = Some(rejection.reason.clone());
            claim::record_rejected(pool, &delivery, rejection.status)
                .await
                .map(|_| providers::rejection_reply(source, &rejection))
        }
        Ok((verification, key)) => {
            delivery.verified = true;
            delivery.verification = verification;
            delivery.idem_key = Some(&key);
            claim::claim(pool, source.mode, &delivery)
                .await
                .map(|claimed| providers::reply(source, inbound, &claimed))
        }
    };
    result.unwrap_or_else(|e| {
        tracing::error!(error = %e, "database unavailable: answering 503 so the provider retries");
        providers::unavailable_reply()
    })
}

/// A request rejected before it could be read whole (over the body limit).
pub async fn record_oversized(
    pool: &PgPool,
    source: &SourceConfig,
    inbound: &Inbound,
    body_size: usize,
    receipt: Receipt,
) -> Reply {
    let rejection = Rejection::too_large(body_size);
    let delivery = NewDelivery {
        source: &source.slug,
        idem_key: None,
        verified: false,
        verification: rejection.reason.clone(),
        reject_reason: Some(rejection.reason.clone()),
        query: inbound.query.as_deref(),
        content_type: inbound.header("content-type"),
        headers: stored_headers(&inbound.headers),
        body: None,
        body_size,
        remote_addr: inbound.remote_addr.as_deref(),
        started: receipt.started,
    };
    // The sender's mistake stays a 413 even when it cannot be recorded.
    if let Err(e) = claim::record_rejected(pool, &delivery, rejection.status).await {
        tracing::error!(error = %e, "database unavailable while recording an oversized delivery");
    }
    providers::rejection_reply(source, &rejection)
}
