//! Sync mode (spec section 5): the destination is called inside the
//! provider's request, under the claim's lease; its answer is stored, so a
//! later duplicate gets it back byte for byte.

use super::worker::decide;
use super::{forward, Services};
use crate::config::SourceConfig;
use crate::events::{self, Done, Inline, Leased, Next, StoredResponse};
use crate::receiver::claim::{self, Claimed, Outcome};
use crate::receiver::{reply, stored_headers, Inbound, Reply, SyncClaim};

/// What a paused sync-mode source asks its provider to wait before retrying.
const PAUSED_RETRY_AFTER_SECS: u32 = 60;

/// The claim's holder forwards now and answers with the destination's
/// reply (or the provider's own answer, such as Discord's PONG).
pub async fn answer(
    services: &Services,
    source: &SourceConfig,
    inbound: &Inbound,
    held: &SyncClaim,
    receipt: crate::receiver::Receipt,
) -> Reply {
    answer_or_db_error(services, source, inbound, held, receipt)
        .await
        .unwrap_or_else(|e| {
            static THROTTLE: crate::telemetry::Throttle =
                crate::telemetry::Throttle::new(std::time::Duration::from_secs(1));
            if let Some(held_back) = THROTTLE.allow() {
                tracing::error!(error = %e, held_back, "database unavailable: answering 503 so the provider retries");
            }
            reply::unavailable()
        })
}

async fn answer_or_db_error(
    services: &Services,
    source: &SourceConfig,
    inbound: &Inbound,
    held: &SyncClaim,
    receipt: crate::receiver::Receipt,
) -> Result<Reply, sqlx::Error> {
    let pool = &services.pool;
    let claimed = &held.claimed;
    let result = if let Some(own) = source.scheme.own_answer(inbound) {
        let own = StoredResponse::from_answer(&own);
        events::complete_inline(pool, claimed.event_id, &held.lease_owner, &own).await?;
        SyncResult::Answered(own)
    } else {
        let call = SyncCall {
            source,
            inbound,
            claimed,
            lease_owner: &held.lease_owner,
            idem_key: &held.key,
            received: crate::telemetry::metrics::unix_now()
                - receipt.started.elapsed().as_secs_f64(),
        };
        forward_inline(services, &call).await?
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
            // Why it failed stays in the attempt's record for operators: a
            // destination's address or error text is not the provider's to read.
            tracing::info!(%reason, "sync-mode attempt failed: answering 502");
            let mut reply = reply::verified(source, inbound, claimed);
            reply.status = 502;
            reply.body = serde_json::json!({
                "outcome": Outcome::Claimed,
                "error": "the destination did not accept it; a retry tries again",
            })
            .to_string()
            .into_bytes();
            reply
        }
    };
    claim::set_answered_status(pool, claimed.delivery_id, reply.status).await?;
    Ok(reply)
}

/// What the destination answered (or why it did not), for the provider.
enum SyncResult {
    Answered(StoredResponse),
    /// The source is paused: nothing was forwarded.
    Paused,
    Failed(String),
}

/// The delivery that holds a sync claim, about to be forwarded.
struct SyncCall<'a> {
    pub source: &'a SourceConfig,
    pub inbound: &'a Inbound,
    pub claimed: &'a Claimed,
    pub lease_owner: &'a str,
    pub idem_key: &'a str,
    /// When this request was received (Unix seconds).
    pub received: f64,
}

/// Forwards the delivery that holds the claim and records the attempt.
async fn forward_inline(
    services: &Services,
    call: &SyncCall<'_>,
) -> Result<SyncResult, sqlx::Error> {
    let pool = &services.pool;
    let SyncCall {
        source,
        inbound,
        claimed,
        lease_owner,
        idem_key,
        received,
    } = *call;
    let (attempt_id, attempt) =
        match events::start_inline(pool, claimed.event_id, lease_owner).await? {
            Inline::Started {
                attempt_id,
                attempt,
            } => (attempt_id, attempt),
            Inline::Paused => return Ok(SyncResult::Paused),
            Inline::LeaseLost => {
                return Ok(SyncResult::Failed(
                    "the claim's lease was lost before forwarding".into(),
                ))
            }
        };
    // A sync source has one destination (the config allows no more).
    let destination = source.destinations.first();
    let leased = Leased {
        event_id: claimed.event_id,
        destination: destination
            .map_or(crate::config::destination::DEFAULT_NAME, |d| &d.name)
            .to_owned(),
        attempt_id: Some(attempt_id),
        source: source.slug.clone(),
        idem_key: idem_key.to_owned(),
        attempt,
        body: Some(inbound.body.clone()),
        content_type: inbound.header("content-type").map(str::to_owned),
        headers: Some(stored_headers(&inbound.headers)),
        forced: false,
        // The provider waits on this request's answer: its end to end is
        // this request's, whatever earlier requests tried.
        received,
    };
    let keep_bytes = services.config.max_body_bytes;
    let answer = forward::forward(&services.client, source, destination, &leased, keep_bytes).await;
    let response = answer.record.status.map(|status| StoredResponse {
        status: status as i16,
        content_type: answer.content_type.clone(),
        body: answer.body.clone(),
    });
    let (next, record) = decide(
        &services.policy,
        destination.map_or(crate::config::destination::DEFAULT_MAX_ATTEMPTS, |d| {
            d.max_attempts
        }),
        attempt,
        answer,
    );
    let done = Done {
        leased,
        record,
        next,
        response,
    };
    events::finish(pool, lease_owner, &done).await?;
    crate::telemetry::metrics::attempt(
        &source.slug,
        done.next.as_str(),
        done.record.latency_ms,
        done.leased.received,
    );
    Ok(match (done.next, done.response) {
        (Next::Completed, Some(response)) => SyncResult::Answered(response),
        _ => SyncResult::Failed(
            done.record
                .error
                .unwrap_or_else(|| "destination failed".into()),
        ),
    })
}
