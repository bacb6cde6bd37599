//! Sync mode (spec section 5): the destination is called inside the
//! provider's request, under the claim's lease; its answer is stored, so a
//! later duplicate gets it back byte for byte.

use sqlx::PgPool;

use super::forward;
use super::queue::{self, Leased, Next};
use super::worker::decide;
use crate::config::SourceConfig;
use crate::receiver::claim::{Claimed, StoredResponse};
use crate::receiver::{stored_headers, Inbound, Pipeline};

/// What the destination answered (or why it did not), for the provider.
pub enum SyncResult {
    Answered(StoredResponse),
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
    let started: Option<(i64, i32)> = sqlx::query_as(
        "WITH ev AS (
             UPDATE events SET attempt_count = attempt_count + 1
             WHERE id = $1 AND lease_owner = $2 AND state = 'processing'
             RETURNING id, attempt_count
         )
         INSERT INTO attempts (event_id, number, worker)
         SELECT id, attempt_count, $2 FROM ev
         RETURNING id, number",
    )
    .bind(claimed.event_id)
    .bind(lease_owner)
    .fetch_optional(pool)
    .await?;
    let Some((attempt_id, attempt)) = started else {
        return Ok(SyncResult::Failed(
            "the claim's lease was lost before forwarding".into(),
        ));
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
    let stored = (next == Next::Completed)
        .then_some(response.as_ref())
        .flatten();
    queue::finish(pool, lease_owner, &leased, &record, &next, stored).await?;
    crate::metrics_export::attempt(&source.slug, next.as_str(), record.latency_ms);
    Ok(match (next, response) {
        (Next::Completed, Some(response)) => SyncResult::Answered(response),
        _ => SyncResult::Failed(record.error.unwrap_or_else(|| "destination failed".into())),
    })
}

/// Settles a sync claim that needs no destination (Discord's PING), storing
/// the answer so duplicates get it too.
pub async fn complete_inline(
    pool: &PgPool,
    event_id: i64,
    lease_owner: &str,
    response: &StoredResponse,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE events SET state = 'completed', state_changed_at = now(), completed_at = now(),
             lease_owner = NULL, lease_expires_at = NULL,
             response_status = $3, response_content_type = $4, response_body = $5
         WHERE id = $1 AND lease_owner = $2 AND state = 'processing'",
    )
    .bind(event_id)
    .bind(lease_owner)
    .bind(response.status)
    .bind(response.content_type.as_deref())
    .bind(&response.body)
    .execute(pool)
    .await?;
    Ok(())
}
