//! The receiver's core (spec section 3): verify, key, claim. Plain code over
//! bytes and a database transaction; the HTTP adapter lives in `http`.

pub mod batch;
pub mod claim;
pub mod http;
pub mod reply;

use std::time::Instant;

use sqlx::PgPool;

use crate::config::{Mode, SourceConfig};
use crate::events::LEASE_MARGIN;
use crate::processing::retry::RetryPolicy;
use crate::processing::sync::{self, SyncResult};
pub use crate::providers::Inbound;
use crate::providers::{Rejection, Window};
use batch::{ClaimBatcher, PendingClaim};
use claim::{NewDelivery, Outcome, SyncLease};
pub use reply::Reply;

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

/// Checks the request with its source's scheme: what matched, or why not.
pub fn verify(
    source: &SourceConfig,
    req: &Inbound,
    now: i64,
    waive_timestamp: bool,
) -> Result<String, Rejection> {
    let window = (!waive_timestamp).then_some(Window {
        now,
        tolerance: i64::try_from(source.tolerance_secs).unwrap_or(i64::MAX),
    });
    source.scheme.verify(req, window)
}

/// The longest key stored: a provider's ids are far shorter.
const MAX_KEY_BYTES: usize = 512;

/// The provider's stable event id; only asked of verified requests.
fn idempotency_key(source: &SourceConfig, req: &Inbound) -> Result<String, Rejection> {
    let key = source.scheme.key(req)?;
    if key.len() > MAX_KEY_BYTES {
        return Err(Rejection::key(format!(
            "idempotency key longer than {MAX_KEY_BYTES} bytes"
        )));
    }
    Ok(key)
}

/// The SHA-256 of what the signature covers, where it binds neither the key
/// nor a timestamp and the source keeps its replay guard on.
fn replay_digest(source: &SourceConfig, req: &Inbound) -> Option<Vec<u8>> {
    use sha2::Digest;
    let signed = source
        .scheme
        .replay_content(req)
        .filter(|_| source.replay_guard)?;
    Some(sha2::Sha256::digest(&signed).to_vec())
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
    let checked = verify(source, inbound, receipt.now, receipt.waive_timestamp)
        .and_then(|verification| idempotency_key(source, inbound).map(|key| (verification, key)));
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
                    ..reply::rejected(&rejection)
                })
        }
        Ok((verification, key)) => {
            delivery.verified = true;
            delivery.verification = verification;
            delivery.idem_key = Some(&key);
            delivery.replay_digest = replay_digest(source, inbound);
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
                        .map(|claimed| reply::verified(source, inbound, &claimed))
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
                    .map(|claimed| reply::verified(source, inbound, &claimed)),
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
                    Ok(claimed) => Ok(reply::verified(source, inbound, &claimed)),
                    Err(e) => Err(e),
                },
            }
        }
    };
    let reply = result.unwrap_or_else(|e| {
        tracing::error!(error = %e, "database unavailable: answering 503 so the provider retries");
        reply::unavailable()
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
    let result = if let Some(own) = source.scheme.own_answer(inbound) {
        let own = claim::StoredResponse::from_answer(&own);
        crate::events::complete_inline(pool, claimed.event_id, owner, &own).await?;
        SyncResult::Answered(own)
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
        SyncResult::Answered(response) => {
            Reply::from_answer(response.answer(), Outcome::Claimed, claimed.delivery_id)
        }
        SyncResult::Paused => {
            // Nothing is forwarded while the source is paused: the provider
            // is asked to come back, and the workers forward the event once
            // it is resumed (later copies get its stored answer).
            let mut reply = reply::verified(source, inbound, claimed);
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
            let mut reply = reply::verified(source, inbound, claimed);
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
    let reply = reply::rejected(&rejection);
    crate::metrics_export::delivery(&source.slug, &reply, receipt.started);
    reply
}
