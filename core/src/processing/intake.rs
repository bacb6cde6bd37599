//! A delivery received end to end: the receiver verifies, keys and claims
//! it; a sync-mode claim is forwarded inline; every answer is counted.

use super::{sync, Services};
use crate::config::SourceConfig;
use crate::receiver::claim::Outcome;
use crate::receiver::{self, Accepted, Inbound, Receipt, Reply};

/// Receives one delivery and gives the answer for its provider.
pub async fn receive(
    services: &Services,
    source: &SourceConfig,
    inbound: &Inbound,
    receipt: Receipt,
) -> Reply {
    let accepted = receiver::accept(
        &services.pool,
        &services.claims,
        &services.rejections,
        source,
        inbound,
        receipt,
    )
    .await;
    let reply = match accepted {
        Accepted::Answered(reply) => reply,
        Accepted::Forward(held) => sync::answer(services, source, inbound, &held, receipt).await,
    };
    counted(source, reply, receipt)
}

/// A request refused before it could be read whole (over the body limit).
pub async fn oversized(
    services: &Services,
    source: &SourceConfig,
    inbound: &Inbound,
    body_size: usize,
    receipt: Receipt,
) -> Reply {
    let reply = receiver::record_oversized(
        &services.pool,
        &services.rejections,
        source,
        inbound,
        body_size,
        receipt,
    )
    .await;
    counted(source, reply, receipt)
}

/// A request refused unread because too much body is being read already.
pub fn shed(source: &SourceConfig, receipt: Receipt) -> Reply {
    crate::telemetry::metrics::shed("body_memory");
    counted(source, receiver::reply::shed(), receipt)
}

fn counted(source: &SourceConfig, reply: Reply, receipt: Receipt) -> Reply {
    crate::telemetry::metrics::delivery(
        &source.slug,
        reply.outcome.as_str(),
        reply.outcome.is_duplicate(),
        reply.outcome == Outcome::Rejected && reply.status == 401,
        receipt.started,
    );
    reply
}
