//! The atomic claim (spec section 3, step 4). A delivery is recorded and its
//! key claimed in one transaction; the unique (source, idem_key) constraint
//! makes a double claim impossible whatever the interleaving.

use std::time::Instant;

use sqlx::PgPool;

use crate::config::Mode;
pub use crate::events::StoredResponse;
use crate::events::{self, InlineLease};

pub use replaysafe_types::states::Outcome;

/// The HTTP status for a verified delivery with this outcome.
pub fn status(outcome: Outcome, mode: Mode) -> u16 {
    match (outcome, mode) {
        (Outcome::InProgress, Mode::Sync) => 409,
        (Outcome::Rejected, _) => 400,
        (Outcome::Unavailable, _) => 503,
        _ => 200,
    }
}

/// A delivery about to be recorded. Secrets never reach it.
pub struct NewDelivery<'a> {
    pub source: &'a str,
    pub idem_key: Option<&'a str>,
    pub verified: bool,
    pub verification: String,
    pub reject_reason: Option<String>,
    /// What a rejection was about (`providers::RejectKind`).
    pub reject_kind: Option<&'static str>,
    pub query: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub headers: serde_json::Value,
    pub body: Option<&'a [u8]>,
    pub body_size: usize,
    pub remote_addr: Option<&'a str>,
    pub started: Instant,
    /// Set when an operator feeds a stored delivery back (spec section 6).
    pub redelivery: Option<Redelivery>,
    /// The replay guard's digest of the signed content, where it applies.
    pub replay_digest: Option<Vec<u8>>,
    /// Only an excerpt of the request is stored (a rejection).
    pub truncated: bool,
    /// The SHA-256 of the whole body as received, where only an excerpt is kept.
    pub body_sha256: Option<Vec<u8>>,
    /// A verified delivery's plan: where its event goes (`plan`).
    pub plan: Vec<Route>,
    /// The provider's event type, where a destination's filter needed it.
    pub event_type: Option<String>,
    /// A re-delivery's chosen destination (`Redelivery::destination`), by name.
    pub revives: Option<&'a str>,
    /// Claimed from its provider's own list by a reconciliation run.
    pub recovered: Option<Recovered>,
}

/// Where a recovered event came from: the run, and the request that listed
/// it (never a credential).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub run_id: i64,
    pub from: String,
}

/// Where a verified event goes: one of its source's destinations, whether
/// that destination's filter wants it, and its ordering key there (an
/// ordered destination's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub destination: String,
    pub wanted: bool,
    pub ordering_key: Option<String>,
}

/// A stored delivery fed back through the pipeline by an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Redelivery {
    /// The stored delivery re-delivered.
    pub of: i64,
    /// The operator's user id (None: an API token's, named in the audit log).
    pub by: Option<i64>,
    /// The bulk re-delivery job it is part of: a job revives an event once.
    pub bulk_job: Option<i64>,
    /// It revives only the dispatch to this destination, by its place in
    /// its source's destinations (None: every dead one).
    pub destination: Option<u16>,
}

impl NewDelivery<'_> {
    fn ack_micros(&self) -> i32 {
        i32::try_from(self.started.elapsed().as_micros()).unwrap_or(i32::MAX)
    }
    fn body_size(&self) -> i32 {
        i32::try_from(self.body_size).unwrap_or(i32::MAX)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub outcome: Outcome,
    pub event_id: i64,
    pub delivery_id: i64,
    /// Sync mode: the destination's stored answer, returned to duplicates.
    pub stored_response: Option<StoredResponse>,
}

/// Sync mode holds the claim with a lease while the destination is called
/// inside the request; a later delivery takes over once the lease expired.
#[derive(Clone, Debug)]
pub struct SyncLease {
    pub owner: String,
    pub secs: f64,
}

/// How often a delivery tries to claim a key that retention keeps forgetting.
const CLAIM_ROUNDS: usize = 3;

/// Records a verified delivery and claims its key, in one transaction.
#[tracing::instrument(name = "claim", skip_all)]
pub async fn claim(
    pool: &PgPool,
    mode: Mode,
    d: &NewDelivery<'_>,
    lease: Option<&SyncLease>,
) -> Result<Claimed, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let claimed = claim_in(&mut tx, mode, d, lease).await?;
    tx.commit().await?;
    Ok(claimed)
}

/// The claim's statements inside a caller's transaction: nothing is
/// acknowledged until that transaction commits.
pub async fn claim_in(
    tx: &mut sqlx::PgConnection,
    mode: Mode,
    d: &NewDelivery<'_>,
    lease: Option<&SyncLease>,
) -> Result<Claimed, sqlx::Error> {
    let posted = d.idem_key.unwrap_or_default();
    let lease = lease.map(|l| InlineLease {
        owner: &l.owner,
        secs: l.secs,
    });
    // The replay guard: signed content that another event's key holds makes
    // this delivery that event's, whatever key it was posted with; it is
    // recorded under its own key with the reason.
    let mut key = posted.to_owned();
    let mut verification = std::borrow::Cow::Borrowed(d.verification.as_str());
    if let Some(digest) = d.replay_digest.as_deref() {
        let found = events::guard(tx, &[d.source], &[digest], &[posted]).await?;
        if let Some((_, _, held_by)) = found.into_iter().next().filter(|f| f.2 != posted) {
            verification = format!(
                "{}; {}",
                d.verification,
                super::batch::replay_note(&held_by)
            )
            .into();
            key = held_by;
        }
    }
    let replay = key != posted;
    let key = key.as_str();
    // A re-delivery is always the workers' to forward: no provider waits for
    // it; nor does a replay ever take a sync claim over.
    let inline = lease.filter(|_| d.redelivery.is_none() && !replay);
    let verification = verification.as_ref();
    let plan: Vec<events::Planned> = d
        .plan
        .iter()
        .map(|r| events::Planned {
            destination: &r.destination,
            wanted: r.wanted,
            ordering_key: r.ordering_key.as_deref(),
        })
        .collect();
    // Retention may forget a settled key between the claim's insert (which
    // found it held) and the duplicate's look (which finds it gone): the key
    // is free again, so the delivery claims it anew. A fresh claim is in
    // flight, which retention never forgets, so a second round settles it.
    for _ in 0..CLAIM_ROUNDS {
        let mut won =
            events::claim(tx, d.source, key, &plan, d.event_type.as_deref(), inline).await?;
        // An operator's re-delivery of a dead event queues it again.
        if won.is_none() && d.redelivery.is_some() {
            let delivery_id: i64 =
                sqlx::query_scalar!(r#"SELECT nextval('deliveries_id_seq') AS "id!""#)
                    .fetch_one(&mut *tx)
                    .await?;
            let job = d.redelivery.and_then(|r| r.bulk_job);
            won = events::revive(tx, d.source, key, d.revives, delivery_id, job)
                .await?
                .map(|event_id| (event_id, delivery_id));
        }
        if let Some((event_id, delivery_id)) = won {
            let status = status(Outcome::Claimed, mode);
            insert_delivery(
                tx,
                d,
                Some(delivery_id),
                Some(event_id),
                Outcome::Claimed,
                status,
                verification,
            )
            .await?;
            return Ok(Claimed {
                outcome: Outcome::Claimed,
                event_id,
                delivery_id,
                stored_response: None,
            });
        }
        // A duplicate. This statement sees the claim that beat us: the insert
        // above waited for it to commit. In sync mode it takes the claim over
        // when no attempt is running (see `events::duplicate`).
        let Some(found) = events::duplicate(tx, d.source, key, inline).await? else {
            continue;
        };
        let outcome = if found.taken_over {
            Outcome::Claimed
        } else {
            Outcome::of_event_state(found.state)
        };
        // Sync mode answers a settled event's duplicate with the stored response.
        let answered = match (&found.response, mode, outcome) {
            (Some(r), Mode::Sync, Outcome::Completed | Outcome::Dead) => r.status as u16,
            _ => status(outcome, mode),
        };
        let delivery_id = insert_delivery(
            tx,
            d,
            None,
            Some(found.event_id),
            outcome,
            answered,
            verification,
        )
        .await?;
        return Ok(Claimed {
            outcome,
            event_id: found.event_id,
            delivery_id,
            stored_response: found.response,
        });
    }
    // Unreachable but for a key claimed and forgotten again within one round.
    Err(sqlx::Error::RowNotFound)
}

/// Sync mode: the status the provider got is known only once the destination
/// answered; it completes the delivery's record.
pub async fn set_answered_status(
    pool: &PgPool,
    delivery_id: i64,
    status: u16,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE deliveries SET http_status = $2 WHERE id = $1",
        delivery_id,
        status as i16
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Records a delivery that failed verification, its key or the limits.
pub async fn record_rejected(
    pool: &PgPool,
    d: &NewDelivery<'_>,
    status: u16,
) -> Result<i64, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    insert_delivery(
        &mut conn,
        d,
        None,
        None,
        Outcome::Rejected,
        status,
        &d.verification,
    )
    .await
}

/// Records a delivery, under the id the claim reserved for it if any.
async fn insert_delivery(
    conn: &mut sqlx::PgConnection,
    d: &NewDelivery<'_>,
    id: Option<i64>,
    event_id: Option<i64>,
    outcome: Outcome,
    status: u16,
    verification: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO deliveries (id, source, event_id, idem_key, outcome, reject_reason,
                                 http_status, ack_micros, verified, verification, query,
                                 content_type, headers, body, body_size, remote_addr,
                                 redelivery_of, redelivered_by, reject_kind, truncated,
                                 body_sha256, bulk_job_id, reconcile_run_id, recovered_from)
         VALUES (coalesce($18, nextval('deliveries_id_seq')), $1, $2, $3, $4, $5, $6, $7, $8, $9,
                 $10, $11, $12, $13, $14, $15, $16, $17, $19, $20, $21, $22, $23, $24)
         RETURNING id",
        d.source,
        event_id,
        d.idem_key,
        outcome.as_str(),
        d.reject_reason.as_deref(),
        i16::try_from(status).unwrap_or(i16::MAX),
        d.ack_micros(),
        d.verified,
        verification,
        d.query,
        d.content_type,
        &d.headers,
        d.body,
        d.body_size(),
        d.remote_addr,
        d.redelivery.map(|r| r.of),
        d.redelivery.and_then(|r| r.by),
        id,
        d.reject_kind,
        d.truncated,
        d.body_sha256.as_deref(),
        d.redelivery.and_then(|r| r.bulk_job),
        d.recovered.as_ref().map(|r| r.run_id),
        d.recovered.as_ref().map(|r| r.from.as_str())
    )
    .fetch_one(conn)
    .await
}
