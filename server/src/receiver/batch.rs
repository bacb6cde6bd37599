//! Group commit for ack-mode claims. Concurrent deliveries are claimed in
//! shared transactions: one commit (one disk sync) makes a whole batch
//! durable, and each delivery is answered only after the commit that holds
//! it. Within a batch claims run in key order, so two batches waiting on each
//! other's keys can never deadlock.

use std::sync::Arc;
use std::time::Instant;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot, Mutex};

use super::claim::{self, Claimed, NewDelivery};
use crate::config::Mode;

/// Most claims in one transaction: bigger batches add latency, not throughput.
pub const MAX_BATCH: usize = 64;

/// A verified delivery waiting for its batch, owning what it records.
pub struct PendingClaim {
    pub source: String,
    pub idem_key: String,
    pub verification: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    pub headers: serde_json::Value,
    pub body: Vec<u8>,
    pub remote_addr: Option<String>,
    pub started: Instant,
}

impl PendingClaim {
    fn as_delivery(&self) -> NewDelivery<'_> {
        NewDelivery {
            source: &self.source,
            idem_key: Some(&self.idem_key),
            verified: true,
            verification: self.verification.clone(),
            reject_reason: None,
            query: self.query.as_deref(),
            content_type: self.content_type.as_deref(),
            headers: self.headers.clone(),
            body: Some(&self.body),
            body_size: self.body.len(),
            remote_addr: self.remote_addr.as_deref(),
            started: self.started,
        }
    }
}

type Job = (PendingClaim, oneshot::Sender<Result<Claimed, sqlx::Error>>);

/// Hands claims to a few committer tasks; cheap to clone.
#[derive(Clone)]
pub struct ClaimBatcher {
    jobs: mpsc::Sender<Job>,
}

impl ClaimBatcher {
    /// Starts `committers` tasks, each with its own transaction at a time.
    pub fn start(pool: PgPool, committers: usize) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>(MAX_BATCH * committers.max(1) * 4);
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..committers.max(1) {
            tokio::spawn(commit_loop(pool.clone(), queue.clone()));
        }
        Self { jobs }
    }

    /// Claims in the next shared transaction; returns once it committed.
    pub async fn claim(&self, pending: PendingClaim) -> Result<Claimed, sqlx::Error> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((pending, reply))
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        answer.await.map_err(|_| sqlx::Error::PoolClosed)?
    }
}

async fn commit_loop(pool: PgPool, queue: Arc<Mutex<mpsc::Receiver<Job>>>) {
    loop {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        {
            // Take whatever waits, up to a batch; block only for the first.
            let mut queue = queue.lock().await;
            match queue.recv().await {
                Some(job) => batch.push(job),
                None => return,
            }
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
        }
        batch.sort_by(|a, b| (&a.0.source, &a.0.idem_key).cmp(&(&b.0.source, &b.0.idem_key)));
        match commit_batch(&pool, &batch).await {
            Ok(results) => {
                for ((_, reply), result) in batch.into_iter().zip(results) {
                    let _ = reply.send(Ok(result));
                }
            }
            Err(e) => {
                // Nothing of the batch is durable: every delivery in it gets the error (503).
                tracing::warn!(error = %e, size = batch.len(), "claim batch failed");
                for (_, reply) in batch {
                    let _ = reply.send(Err(clone_error(&e)));
                }
            }
        }
    }
}

async fn commit_batch(pool: &PgPool, batch: &[Job]) -> Result<Vec<Claimed>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let mut results = Vec::with_capacity(batch.len());
    for (pending, _) in batch {
        results.push(claim::claim_in(&mut tx, Mode::Ack, &pending.as_delivery(), None).await?);
    }
    tx.commit().await?;
    Ok(results)
}

fn clone_error(e: &sqlx::Error) -> sqlx::Error {
    sqlx::Error::Protocol(format!("claim batch failed: {e}"))
}
