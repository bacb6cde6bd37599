//! The receiver's core (spec section 3): verify, key, claim. Plain code over
//! bytes and the database; the HTTP adapter is `web::hooks`, and a sync-mode
//! claim is handed back for `processing` to forward.

pub mod batch;
pub mod claim;
pub mod rejections;
pub mod reply;

use std::time::Instant;

use sha2::Digest;
use sqlx::PgPool;

use crate::config::{destination, Mode, SourceConfig};
use crate::events::LEASE_MARGIN;
pub use crate::providers::Inbound;
use crate::providers::{Rejection, Window};
use batch::{ClaimBatcher, ClaimError, PendingClaim};
use claim::{Claimed, NewDelivery, Outcome, SyncLease};
use rejections::Rejections;
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

/// The event's idempotency key: the source's `key` template, else the
/// provider's stable event id; only asked of verified requests. With it,
/// a note for the delivery's record when the key is not what the template
/// says (its digest fallback).
fn idempotency_key(
    source: &SourceConfig,
    req: &Inbound,
) -> Result<(String, Option<String>), Rejection> {
    let (key, note) = match &source.key {
        Some(rule) => rule.key(req, MAX_KEY_BYTES)?,
        None => (source.scheme.key(req)?, None),
    };
    if key.len() > MAX_KEY_BYTES {
        return Err(Rejection::key(format!(
            "idempotency key longer than {MAX_KEY_BYTES} bytes"
        )));
    }
    Ok((key, note))
}

/// A verification record with the key's note, if any.
fn noted(verification: String, note: Option<String>) -> String {
    match note {
        Some(n) => format!("{verification}; {n}"),
        None => verification,
    }
}

/// Which of its source's destinations want a verified event (with its
/// ordering key at the ordered ones), and its type where a filter needed
/// it. A source with no destination keeps its events under `default`,
/// queued: they wait for one to be configured.
fn plan(source: &SourceConfig, req: &Inbound) -> (Vec<claim::Route>, Option<String>) {
    if source.destinations.is_empty() {
        let kept = claim::Route {
            destination: destination::DEFAULT_NAME.to_owned(),
            wanted: true,
            ordering_key: None,
        };
        return (vec![kept], None);
    }
    let filtered = source.destinations.iter().any(|d| d.filter.is_some());
    let event_type = if filtered {
        source.provider.event_type(req)
    } else {
        None
    };
    let form = req.header("content-type").is_some_and(|t| {
        t.trim_start()
            .starts_with("application/x-www-form-urlencoded")
    });
    let body = destination::Body::new(&req.body, form);
    let plan = source
        .destinations
        .iter()
        .map(|d| claim::Route {
            destination: d.name.clone(),
            wanted: d.wants(event_type.as_deref(), &body),
            ordering_key: d.ordering_key(&body),
        })
        .collect();
    (plan, event_type)
}

/// The SHA-256 of what the signature covers, where the key is not bound by
/// the signature and the source keeps its replay guard on: a captured
/// request re-posted under a new key is then the first one's duplicate.
fn replay_digest(source: &SourceConfig, req: &Inbound) -> Option<Vec<u8>> {
    if !source.replay_guard {
        return None;
    }
    let signed = match &source.key {
        // A composed key reading only signed fields (and, falling back, a
        // signed body) is bound by the signature; any other is not, even
        // where a timestamp is signed: within its tolerance a capture could
        // be re-posted with the unsigned field changed.
        Some(rule) => {
            if rule.is_bound(|f| source.scheme.covers(f)) {
                return None;
            }
            source.scheme.signed_content(req)?
        }
        None => source.scheme.replay_content(req)?,
    };
    Some(sha2::Sha256::digest(&signed).to_vec())
}

/// What became of a delivery once verified, keyed and claimed.
pub enum Accepted {
    /// Answered: rejected, a duplicate, an ack-mode claim, or 503 when the
    /// database is away.
    Answered(Reply),
    /// A sync-mode source's new claim: the caller forwards it now, under
    /// the claim's lease, and answers with the destination's reply.
    Forward(SyncClaim),
}

/// A sync-mode claim waiting to be forwarded inline.
pub struct SyncClaim {
    pub claimed: Claimed,
    pub lease_owner: String,
    pub key: String,
}

/// Verify, key and claim one delivery; every path records it, except when
/// the database is unreachable (then 503, so the provider retries).
#[tracing::instrument(name = "receive", skip_all, fields(source = %source.slug))]
pub async fn accept(
    pool: &PgPool,
    claims: &ClaimBatcher,
    rejections: &Rejections,
    source: &SourceConfig,
    inbound: &Inbound,
    receipt: Receipt,
) -> Accepted {
    // A handshake is keyed by its body whatever the source's key reads: a
    // key that cannot read it must not keep the provider from registering.
    let checked =
        verify(source, inbound, receipt.now, receipt.waive_timestamp).and_then(|verification| {
            match source.scheme.handshake(inbound) {
                Some(handshake) => Ok((
                    verification,
                    (
                        format!(
                            "sha256:{}",
                            hex::encode(sha2::Sha256::digest(&inbound.body))
                        ),
                        Some(handshake.note.to_owned()),
                    ),
                    Some(handshake.answer),
                )),
                None => idempotency_key(source, inbound).map(|key| (verification, key, None)),
            }
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
        truncated: false,
        body_sha256: None,
        plan: Vec::new(),
        event_type: None,
        revives: None,
        recovered: None,
    };
    let result = match checked {
        // Beyond its address's rate a stranger's rejection is only counted;
        // an operator's re-delivery is no stranger's.
        Err(rejection)
            if receipt.redelivery.is_none()
                && !rejections.admit(&source.slug, inbound.remote_addr.as_deref(), receipt.now) =>
        {
            Ok(Accepted::Answered(reply::rejected(&rejection)))
        }
        Err(rejection) => {
            tracing::info!(reason = %rejection.reason, status = rejection.status, "delivery rejected");
            let excerpt = rejections::excerpt(
                &inbound.body,
                &inbound.headers,
                inbound.query.as_deref(),
                rejections.recording.body_bytes,
            );
            delivery.body = Some(excerpt.body);
            delivery.headers = excerpt.headers;
            delivery.query = excerpt.query;
            delivery.truncated = excerpt.truncated;
            delivery.body_sha256 = Some(sha2::Sha256::digest(&inbound.body).to_vec());
            delivery.verification = rejection.reason.clone();
            delivery.reject_reason = Some(rejection.reason.clone());
            delivery.reject_kind = Some(rejection.kind.as_str());
            claim::record_rejected(pool, &delivery, rejection.status)
                .await
                .map_err(ClaimError::from)
                .map(|id| {
                    Accepted::Answered(Reply {
                        delivery_id: Some(id),
                        ..reply::rejected(&rejection)
                    })
                })
        }
        Ok((verification, (key, note), handshake)) => {
            delivery.verified = true;
            delivery.verification = noted(verification, note);
            delivery.idem_key = Some(&key);
            delivery.replay_digest = replay_digest(source, inbound);
            (delivery.plan, delivery.event_type) = plan(source, inbound);
            // A handshake is replaysafe's to answer: kept, forwarded nowhere.
            if handshake.is_some() {
                for route in &mut delivery.plan {
                    route.wanted = false;
                }
            }
            delivery.revives = receipt
                .redelivery
                .and_then(|r| r.destination)
                .and_then(|i| source.destinations.get(usize::from(i)))
                .map(|d| d.name.as_str());
            let lease = (source.mode == Mode::Sync && handshake.is_none()).then(|| SyncLease {
                owner: format!("sync:{:016x}", rand::random::<u64>()),
                secs: (source.attempt_timeout() + LEASE_MARGIN).as_secs_f64(),
            });
            // A handshake gets its answer however often it comes.
            let answered = |claimed: Claimed| {
                Accepted::Answered(match &handshake {
                    Some(answer) => {
                        Reply::from_answer(answer.clone(), claimed.outcome, claimed.delivery_id)
                    }
                    None => reply::verified(source, inbound, &claimed),
                })
            };
            match lease {
                // A re-delivery is claimed on its own and always forwarded by
                // the workers (its provider is not waiting for an answer).
                _ if receipt.redelivery.is_some() => {
                    claim::claim(pool, source.mode, &delivery, None)
                        .await
                        .map_err(ClaimError::from)
                        .map(answered)
                }
                // Ack mode: claimed in a shared transaction with concurrent deliveries.
                None => claims
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
                        plan: delivery.plan,
                        event_type: delivery.event_type,
                    })
                    .await
                    .map(answered),
                Some(lease) => claim::claim(pool, source.mode, &delivery, Some(&lease))
                    .await
                    .map_err(ClaimError::from)
                    .map(|claimed| {
                        if claimed.outcome == Outcome::Claimed {
                            Accepted::Forward(SyncClaim {
                                claimed,
                                lease_owner: lease.owner,
                                key,
                            })
                        } else {
                            answered(claimed)
                        }
                    }),
            }
        }
    };
    result.unwrap_or_else(|e| match e {
        // Counted in replaysafe_shed_total; a log line each would flood the log.
        ClaimError::Saturated => Accepted::Answered(reply::shed()),
        e => {
            // One line a second: an outage fails every request alike.
            static THROTTLE: crate::telemetry::Throttle =
                crate::telemetry::Throttle::new(std::time::Duration::from_secs(1));
            if let Some(held_back) = THROTTLE.allow() {
                tracing::error!(error = %e, held_back, "database unavailable: answering 503 so the provider retries");
            }
            Accepted::Answered(reply::unavailable())
        }
    })
}

/// Why a recovered event was not claimed.
#[derive(Debug, thiserror::Error)]
pub enum NotRecovered {
    /// It holds no key a delivery of it would be claimed under.
    #[error("no key: {0}")]
    Key(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// An event its provider's own list holds and no delivery brought
/// (reconciliation): keyed as a delivery of it is and claimed like one, in
/// one transaction on the same unique key, so a delivery racing it makes
/// one dedup decision with it. Not verified: it came from the provider's
/// API over an authenticated connection, not from a stranger. Forwarded by
/// the workers, as a re-delivery is (no provider waits on an answer).
pub async fn accept_recovered(
    pool: &PgPool,
    source: &SourceConfig,
    inbound: &Inbound,
    recovered: claim::Recovered,
) -> Result<Claimed, NotRecovered> {
    let (key, note) = idempotency_key(source, inbound).map_err(|r| NotRecovered::Key(r.reason))?;
    let (plan, event_type) = plan(source, inbound);
    let verification = noted(
        format!(
            "recovered from the provider's event list (reconciliation run {})",
            recovered.run_id
        ),
        note,
    );
    let delivery = NewDelivery {
        source: &source.slug,
        idem_key: Some(&key),
        verified: true,
        verification,
        reject_reason: None,
        reject_kind: None,
        query: None,
        content_type: inbound.header("content-type"),
        headers: stored_headers(&inbound.headers),
        body: Some(&inbound.body),
        body_size: inbound.body.len(),
        remote_addr: None,
        started: Instant::now(),
        redelivery: None,
        replay_digest: replay_digest(source, inbound),
        truncated: false,
        body_sha256: None,
        plan,
        event_type,
        revives: None,
        recovered: Some(recovered),
    };
    Ok(claim::claim(pool, source.mode, &delivery, None).await?)
}

/// A request rejected before it could be read whole (over the body limit).
pub async fn record_oversized(
    pool: &PgPool,
    rejections: &Rejections,
    source: &SourceConfig,
    inbound: &Inbound,
    body_size: usize,
    receipt: Receipt,
) -> Reply {
    let rejection = Rejection::too_large(body_size);
    if !rejections.admit(&source.slug, inbound.remote_addr.as_deref(), receipt.now) {
        return reply::rejected(&rejection);
    }
    let excerpt = rejections::excerpt(&[], &inbound.headers, inbound.query.as_deref(), 0);
    let delivery = NewDelivery {
        source: &source.slug,
        idem_key: None,
        verified: false,
        verification: rejection.reason.clone(),
        reject_reason: Some(rejection.reason.clone()),
        reject_kind: Some(rejection.kind.as_str()),
        query: excerpt.query,
        content_type: inbound.header("content-type"),
        headers: excerpt.headers,
        // Not read: only its declared size is known.
        body: None,
        body_size,
        remote_addr: inbound.remote_addr.as_deref(),
        started: receipt.started,
        redelivery: None,
        replay_digest: None,
        truncated: true,
        body_sha256: None,
        plan: Vec::new(),
        event_type: None,
        revives: None,
        recovered: None,
    };
    // The sender's mistake stays a 413 even when it cannot be recorded.
    if let Err(e) = claim::record_rejected(pool, &delivery, rejection.status).await {
        tracing::error!(error = %e, "database unavailable while recording an oversized delivery");
    }
    reply::rejected(&rejection)
}
