//! Group commit for ack-mode claims. Concurrent deliveries are claimed in
//! shared transactions: one commit (one disk sync) makes a whole batch
//! durable, and each delivery is answered only after the commit that holds
//! it. A batch is two statements whatever its size; rows are claimed and
//! locked in key order, so two batches waiting on each other's keys can never
//! deadlock.

use std::sync::Arc;
use std::time::Instant;

use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot, Mutex};

use super::claim::{Claimed, Outcome};

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

/// A recorded duplicate: its place in the batch, delivery, event, event state, receive count.
type DuplicateRow = (i32, i64, i64, String, i32);

type Job = (PendingClaim, oneshot::Sender<Result<Claimed, sqlx::Error>>);

/// Hands claims to a few committer tasks; cheap to clone.
#[derive(Clone)]
pub struct ClaimBatcher {
    jobs: mpsc::Sender<Job>,
}

impl ClaimBatcher {
    /// Starts `committers` tasks, each with its own transaction at a time, on
    /// their own connections to `pool`'s database.
    pub fn start(pool: PgPool, committers: usize) -> Self {
        // The claim statement's plan does not depend on its arrays or on the
        // tables' sizes (it reads through the unique index): planning it anew
        // for each batch cost more than running a small one. The duplicates'
        // statement joins events, so it is planned afresh with current
        // statistics; a plan cached while events was empty would scan it.
        let connect = |generic: bool| {
            let mut options = (*pool.connect_options()).clone();
            options = if generic {
                options.options([("plan_cache_mode", "force_generic_plan")])
            } else {
                // The duplicates' statement probes events by its unique key.
                // While events grows faster than autovacuum analyzes it (a
                // fresh database, a burst), the planner believes it holds 200
                // rows and scans all of it per batch: auto_explain showed
                // 25,759 rows read for 3 duplicates, 11 ms. Index probes only.
                options.options([
                    ("enable_seqscan", "off"),
                    ("enable_hashjoin", "off"),
                    ("enable_mergejoin", "off"),
                ])
            };
            PgPoolOptions::new()
                .max_connections(committers.max(1) as u32)
                .acquire_timeout(crate::db::ACQUIRE_TIMEOUT)
                .connect_lazy_with(options)
        };
        let pools = Pools {
            claims: connect(true),
            duplicates: connect(false),
        };
        let (jobs, queue) = mpsc::channel::<Job>(MAX_BATCH * committers.max(1) * 4);
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..committers.max(1) {
            tokio::spawn(commit_loop(pools.clone(), queue.clone()));
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

#[derive(Clone)]
struct Pools {
    claims: PgPool,
    duplicates: PgPool,
}

async fn commit_loop(pools: Pools, queue: Arc<Mutex<mpsc::Receiver<Job>>>) {
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
        commit_batch(&pools, batch).await;
    }
}

/// One batch in at most two statements, each its own transaction, whatever
/// the batch's size: first the claims, then the duplicates (of stored events
/// or within the batch). Each delivery is answered once the statement that
/// recorded it has committed; if a statement fails, its deliveries get the
/// error (503) and nothing of them was stored.
async fn commit_batch(pools: &Pools, batch: Vec<Job>) {
    let (pending, replies): (Vec<PendingClaim>, Vec<_>) = batch.into_iter().unzip();
    let mut replies: Vec<Option<oneshot::Sender<Result<Claimed, sqlx::Error>>>> =
        replies.into_iter().map(Some).collect();
    let mut answer = |i: usize, result: Result<Claimed, sqlx::Error>| {
        if let Some(reply) = replies[i].take() {
            let _ = reply.send(result);
        }
    };
    let n = pending.len();
    let column = |f: &dyn Fn(&PendingClaim) -> String| pending.iter().map(f).collect::<Vec<_>>();
    let optional =
        |f: &dyn Fn(&PendingClaim) -> Option<String>| pending.iter().map(f).collect::<Vec<_>>();
    let ord: Vec<i32> = (0..n as i32).collect();
    let sources = column(&|p| p.source.clone());
    let keys = column(&|p| p.idem_key.clone());
    let verifications = column(&|p| p.verification.clone());
    let queries = optional(&|p| p.query.clone());
    let content_types = optional(&|p| p.content_type.clone());
    let remote_addrs = optional(&|p| p.remote_addr.clone());
    let headers: Vec<serde_json::Value> = pending.iter().map(|p| p.headers.clone()).collect();
    let bodies: Vec<&[u8]> = pending.iter().map(|p| p.body.as_slice()).collect();
    let sizes: Vec<i32> = pending
        .iter()
        .map(|p| i32::try_from(p.body.len()).unwrap_or(i32::MAX))
        .collect();
    let acks: Vec<i32> = pending
        .iter()
        .map(|p| i32::try_from(p.started.elapsed().as_micros()).unwrap_or(i32::MAX))
        .collect();

    // The first delivery of each key in the batch tries to claim it.
    let won: Result<Vec<(i32, i64, i64)>, sqlx::Error> = sqlx::query_as(
        "WITH input AS (
             SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[],
                                  $6::text[], $7::jsonb[], $8::bytea[], $9::int[], $10::text[], $11::int[])
                 AS t(ord, source, idem_key, verification, query, content_type, headers, body,
                      body_size, remote_addr, ack_micros)
         ),
         firsts AS (
             SELECT DISTINCT ON (source, idem_key) * FROM input ORDER BY source, idem_key, ord
         ),
         claim AS (
             INSERT INTO events (source, idem_key, state, first_delivery_id)
             SELECT source, idem_key, 'queued', nextval('deliveries_id_seq')
             FROM firsts ORDER BY source, idem_key
             ON CONFLICT (source, idem_key) DO NOTHING
             RETURNING id, source, idem_key, first_delivery_id
         ),
         recorded AS (
             INSERT INTO deliveries (id, source, event_id, idem_key, outcome, http_status, ack_micros,
                                     verified, verification, query, content_type, headers, body,
                                     body_size, remote_addr)
             SELECT c.first_delivery_id, f.source, c.id, f.idem_key, 'claimed', 200, f.ack_micros,
                    true, f.verification, f.query, f.content_type, f.headers, f.body, f.body_size,
                    f.remote_addr
             FROM claim c JOIN firsts f USING (source, idem_key)
             RETURNING id, event_id, source, idem_key
         )
         SELECT f.ord, r.event_id, r.id FROM recorded r JOIN firsts f USING (source, idem_key)",
    )
    .bind(&ord)
    .bind(&sources)
    .bind(&keys)
    .bind(&verifications)
    .bind(&queries)
    .bind(&content_types)
    .bind(&headers)
    .bind(&bodies)
    .bind(&sizes)
    .bind(&remote_addrs)
    .bind(&acks)
    .fetch_all(&pools.claims)
    .await;
    let won = match won {
        Ok(won) => won,
        Err(e) => {
            tracing::warn!(error = %e, size = n, "claim batch failed");
            for i in 0..n {
                answer(i, Err(batch_error(&e)));
            }
            return;
        }
    };
    let mut claimed = vec![false; n];
    for (ord, event_id, delivery_id) in won {
        claimed[ord as usize] = true;
        answer(
            ord as usize,
            Ok(Claimed {
                outcome: Outcome::Claimed,
                event_id,
                delivery_id,
                receive_count: 1,
                stored_response: None,
            }),
        );
    }

    // Everything else is a duplicate: counted on its event, recorded with the
    // event's state as outcome. Rows are locked in key order, as claims are.
    let dups: Vec<usize> = (0..n).filter(|&i| !claimed[i]).collect();
    if !dups.is_empty() {
        let pick = |v: &[String]| dups.iter().map(|&i| v[i].clone()).collect::<Vec<_>>();
        let pick_opt =
            |v: &[Option<String>]| dups.iter().map(|&i| v[i].clone()).collect::<Vec<_>>();
        let rows: Result<Vec<DuplicateRow>, sqlx::Error> = sqlx::query_as(
            "WITH input AS (
                 SELECT nextval('deliveries_id_seq') AS delivery_id, *
                 FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[],
                             $6::text[], $7::jsonb[], $8::bytea[], $9::int[], $10::text[], $11::int[])
                     AS t(ord, source, idem_key, verification, query, content_type, headers, body,
                          body_size, remote_addr, ack_micros)
             ),
             counts AS (
                 SELECT source, idem_key, count(*)::int AS n FROM input GROUP BY source, idem_key
             ),
             locked AS (
                 SELECT e.id, c.n FROM events e JOIN counts c USING (source, idem_key)
                 ORDER BY e.source, e.idem_key
                 FOR UPDATE OF e
             ),
             counted AS (
                 UPDATE events e SET receive_count = e.receive_count + l.n, last_seen_at = now()
                 FROM locked l WHERE e.id = l.id
                 RETURNING e.id, e.source, e.idem_key, e.state, e.receive_count
             ),
             recorded AS (
                 INSERT INTO deliveries (id, source, event_id, idem_key, outcome, http_status,
                                         ack_micros, verified, verification, query, content_type,
                                         headers, body, body_size, remote_addr)
                 SELECT i.delivery_id, i.source, c.id, i.idem_key,
                        CASE c.state WHEN 'completed' THEN 'completed' WHEN 'dead' THEN 'dead'
                                     ELSE 'in_progress' END,
                        200, i.ack_micros, true, i.verification, i.query, i.content_type, i.headers,
                        i.body, i.body_size, i.remote_addr
                 FROM input i JOIN counted c USING (source, idem_key)
                 RETURNING id
             )
             SELECT i.ord, i.delivery_id, c.id, c.state, c.receive_count
             FROM input i JOIN counted c USING (source, idem_key)",
        )
        .bind(dups.iter().map(|&i| ord[i]).collect::<Vec<_>>())
        .bind(pick(&sources))
        .bind(pick(&keys))
        .bind(pick(&verifications))
        .bind(pick_opt(&queries))
        .bind(pick_opt(&content_types))
        .bind(dups.iter().map(|&i| headers[i].clone()).collect::<Vec<_>>())
        .bind(dups.iter().map(|&i| bodies[i]).collect::<Vec<_>>())
        .bind(dups.iter().map(|&i| sizes[i]).collect::<Vec<_>>())
        .bind(pick_opt(&remote_addrs))
        .bind(dups.iter().map(|&i| acks[i]).collect::<Vec<_>>())
        .fetch_all(&pools.duplicates)
        .await;
        match rows {
            Ok(rows) => {
                for (ord, delivery_id, event_id, state, receive_count) in rows {
                    answer(
                        ord as usize,
                        Ok(Claimed {
                            outcome: Outcome::of_event_state(&state),
                            event_id,
                            delivery_id,
                            receive_count,
                            stored_response: None,
                        }),
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, size = dups.len(), "duplicate batch failed");
                for &i in &dups {
                    answer(i, Err(batch_error(&e)));
                }
                return;
            }
        }
    }
    // A key whose event vanished between the statements (pruned) cannot be
    // answered truthfully; its delivery was not recorded.
    for i in 0..n {
        answer(
            i,
            Err(sqlx::Error::Protocol(
                "the event holding this key vanished".into(),
            )),
        );
    }
}

fn batch_error(e: &sqlx::Error) -> sqlx::Error {
    sqlx::Error::Protocol(format!("claim batch failed: {e}"))
}
