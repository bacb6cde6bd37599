//! The receiver's core (spec section 3): verify, key, claim. Plain code over
//! bytes and a database transaction; the HTTP adapter lives in `http`.

pub mod batch;
pub mod claim;
pub mod http;
pub mod providers;

use std::time::Instant;

use sqlx::PgPool;

use crate::config::{Mode, Provider, SourceConfig};
use crate::events::LEASE_MARGIN;
use crate::processing::retry::RetryPolicy;
use crate::processing::sync::{self, SyncResult};
use batch::{ClaimBatcher, PendingClaim};
use claim::{NewDelivery, Outcome, SyncLease};
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
    pub content_type: String,
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
    pub outcome: Outcome,
    /// The delivery recorded for this request (None when nothing was stored).
    pub delivery_id: Option<i64>,
}

/// How a delivery is being received: from a provider now, or fed back by an operator.
#[derive(Clone, Copy, Debug)]
pub struct Receipt {
    /// Unix seconds, for timestamp windows.
    pub now: i64,
    pub started: Instant,
    /// Stored deliveries are re-verified without the timestamp window.
    pub waive_timestamp: bool,
    /// An operator's re-delivery of a stored delivery.
    pub redelivery: Option<claim::Redelivery>,
}

impl Receipt {
    pub fn now() -> Self {
        Self {
            now: chrono::Utc::now().timestamp(),
            started: Instant::now(),
            waive_timestamp: false,
            redelivery: None,
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
    pipeline: &Pipeline<'_>,
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
        reject_kind: None,
        query: inbound.query.as_deref(),
        content_type: inbound.header("content-type"),
        headers: stored_headers(&inbound.headers),
        body: Some(&inbound.body),
        body_size: inbound.body.len(),
        remote_addr: inbound.remote_addr.as_deref(),
        started: receipt.started,
        redelivery: receipt.redelivery,
        replay_digest: None,
    };
    let result = match checked {
        Err(rejection) => {
            tracing::info!(reason = %rejection.reason, status = rejection.status, "delivery rejected");
            delivery.verification = rejection.reason.clone();
            delivery.reject_reason = Some(rejection.reason.clone());
            delivery.reject_kind = Some(rejection.kind.as_str());
            claim::record_rejected(pool, &delivery, rejection.status)
                .await
                .map(|id| Reply {
                    delivery_id: Some(id),
                    ..providers::rejection_reply(source, &rejection)
                })
        }
        Ok((verification, key)) => {
            delivery.verified = true;
            delivery.verification = verification;
            delivery.idem_key = Some(&key);
            delivery.replay_digest = providers::replay_digest(source, inbound);
            let lease = (source.mode == Mode::Sync).then(|| SyncLease {
                owner: format!("sync:{:016x}", rand::random::<u64>()),
                secs: source.attempt_timeout_secs as f64 + LEASE_MARGIN.as_secs_f64(),
            });
            match lease {
                // A re-delivery is claimed on its own and always forwarded by
                // the workers (its provider is not waiting for an answer).
                _ if receipt.redelivery.is_some() => {
                    claim::claim(pool, source.mode, &delivery, None)
                        .await
                        .map(|claimed| providers::reply(source, inbound, &claimed))
                }
                // Ack mode: claimed in a shared transaction with concurrent deliveries.
                None => pipeline
                    .claims
                    .claim(PendingClaim {
                        source: source.slug.clone(),
                        idem_key: key.clone(),
                        verification: delivery.verification,
                        query: inbound.query.clone(),
                        content_type: inbound.header("content-type").map(str::to_owned),
                        headers: delivery.headers,
                        body: inbound.body.clone(),
                        remote_addr: inbound.remote_addr.clone(),
                        started: receipt.started,
                        replay_digest: delivery.replay_digest,
                    })
                    .await
                    .map(|claimed| providers::reply(source, inbound, &claimed)),
                Some(lease) => match claim::claim(pool, source.mode, &delivery, Some(&lease)).await
                {
                    Ok(claimed) if claimed.outcome == Outcome::Claimed => {
                        sync_reply(
                            pool,
                            source,
                            inbound,
                            &claimed,
                            &lease.owner,
                            &key,
                            pipeline,
                        )
                        .await
                    }
                    Ok(claimed) => Ok(providers::reply(source, inbound, &claimed)),
                    Err(e) => Err(e),
                },
            }
        }
    };
    let reply = result.unwrap_or_else(|e| {
        tracing::error!(error = %e, "database unavailable: answering 503 so the provider retries");
        providers::unavailable_reply()
    });
    crate::metrics_export::delivery(&source.slug, &reply, receipt.started);
    reply
}

/// What the receiver shares across requests: the group-commit batcher for
/// ack-mode claims, and what sync mode needs to call a destination inline.
pub struct Pipeline<'a> {
    pub claims: &'a ClaimBatcher,
    pub client: &'a reqwest::Client,
    pub policy: &'a RetryPolicy,
    /// The most of a destination's answer kept and returned.
    pub keep_bytes: usize,
}

/// What a paused sync-mode source asks its provider to wait before retrying.
const PAUSED_RETRY_AFTER_SECS: u32 = 60;

/// Sync mode: the claim's holder forwards now and answers with the destination's reply.
async fn sync_reply(
    pool: &PgPool,
    source: &SourceConfig,
    inbound: &Inbound,
    claimed: &claim::Claimed,
    owner: &str,
    key: &str,
    pipeline: &Pipeline<'_>,
) -> Result<Reply, sqlx::Error> {
    let result =
        if source.provider == Provider::Discord && providers::discord::is_ping(&inbound.body) {
            // Discord checks the endpoint with PINGs; they are answered here, not forwarded.
            let pong = claim::StoredResponse {
                status: 200,
                content_type: Some("application/json".into()),
                body: br#"{"type":1}"#.to_vec(),
            };
            crate::events::complete_inline(pool, claimed.event_id, owner, &pong).await?;
            SyncResult::Answered(pong)
        } else {
            let call = sync::SyncCall {
                source,
                inbound,
                claimed,
                lease_owner: owner,
                idem_key: key,
            };
            sync::forward_inline(pool, pipeline, &call).await?
        };
    let reply = match result {
        SyncResult::Answered(response) => Reply {
            status: response.status as u16,
            content_type: response
                .content_type
                .unwrap_or_else(|| "application/octet-stream".into()),
            body: response.body,
            headers: vec![("x-replaysafe-outcome", Outcome::Claimed.as_str().to_owned())],
            outcome: Outcome::Claimed,
            delivery_id: Some(claimed.delivery_id),
        },
        SyncResult::Paused => {
            // Nothing is forwarded while the source is paused: the provider
            // is asked to come back, and the workers forward the event once
            // it is resumed (later copies get its stored answer).
            let mut reply = providers::reply(source, inbound, claimed);
            reply.status = 503;
            reply
                .headers
                .push(("retry-after", PAUSED_RETRY_AFTER_SECS.to_string()));
            reply.body = serde_json::json!({"outcome": Outcome::Claimed, "paused": true})
                .to_string()
                .into_bytes();
            reply
        }
        SyncResult::Failed(reason) => {
            // 502: the provider retries, and its retry takes the claim over.
            let mut reply = providers::reply(source, inbound, claimed);
            reply.status = 502;
            reply.body = serde_json::json!({"outcome": Outcome::Claimed, "error": reason})
                .to_string()
                .into_bytes();
            reply
        }
    };
    claim::set_answered_status(pool, claimed.delivery_id, reply.status).await?;
    Ok(reply)
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
        reject_kind: Some(rejection.kind.as_str()),
        query: inbound.query.as_deref(),
        content_type: inbound.header("content-type"),
        headers: stored_headers(&inbound.headers),
        body: None,
        body_size,
        remote_addr: inbound.remote_addr.as_deref(),
        started: receipt.started,
        redelivery: None,
        replay_digest: None,
    };
    // The sender's mistake stays a 413 even when it cannot be recorded.
    if let Err(e) = claim::record_rejected(pool, &delivery, rejection.status).await {
        tracing::error!(error = %e, "database unavailable while recording an oversized delivery");
    }
    let reply = providers::rejection_reply(source, &rejection);
    crate::metrics_export::delivery(&source.slug, &reply, receipt.started);
    reply
}
