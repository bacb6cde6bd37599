//! Sync mode (spec section 5): the destination is called inside the
//! provider's request, under the claim's lease; its answer is stored, so a
//! later duplicate gets it back byte for byte.

use sqlx::PgPool;

use super::forward;
use super::worker::decide;
use crate::config::SourceConfig;
use crate::events::{self, Done, Inline, Leased, Next, StoredResponse};
use crate::receiver::claim::Claimed;
use crate::receiver::{stored_headers, Inbound, Pipeline};

/// What the destination answered (or why it did not), for the provider.
pub enum SyncResult {
    Answered(StoredResponse),
    /// The source is paused: nothing was forwarded.
    Paused,
    Failed(String),
}

/// The delivery that holds a sync claim, about to be forwarded.
pub struct SyncCall<'a> {
    pub source: &'a SourceConfig,
    pub inbound: &'a Inbound,
    pub claimed: &'a Claimed,
    pub lease_owner: &'a str,
    pub idem_key: &'a str,
}

/// Forwards the delivery that holds the claim and records the attempt.
pub async fn forward_inline(
    pool: &PgPool,
    pipeline: &Pipeline<'_>,
    call: &SyncCall<'_>,
) -> Result<SyncResult, sqlx::Error> {
    let SyncCall {
        source,
        inbound,
        claimed,
        lease_owner,
        idem_key,
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
    let leased = Leased {
        event_id: claimed.event_id,
        attempt_id,
        source: source.slug.clone(),
        idem_key: idem_key.to_owned(),
        attempt,
        body: Some(inbound.body.clone()),
        content_type: inbound.header("content-type").map(str::to_owned),
        headers: Some(stored_headers(&inbound.headers)),
        forced: false,
    };
    let answer = forward::forward(pipeline.client, source, &leased, pipeline.keep_bytes).await;
    let response = answer.record.status.map(|status| StoredResponse {
        status: status as i16,
        content_type: answer.content_type.clone(),
        body: answer.body.clone(),
    });
    let (next, record) = decide(pipeline.policy, source.max_attempts, attempt, answer);
    let done = Done {
        leased,
        record,
        next,
        response,
    };
    events::finish(pool, lease_owner, &done).await?;
    crate::metrics_export::attempt(&source.slug, done.next.as_str(), done.record.latency_ms);
    Ok(match (done.next, done.response) {
        (Next::Completed, Some(response)) => SyncResult::Answered(response),
        _ => SyncResult::Failed(
            done.record
                .error
                .unwrap_or_else(|| "destination failed".into()),
        ),
    })
}
