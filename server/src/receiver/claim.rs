//! The atomic claim (spec section 3, step 4). A delivery is recorded and its
//! key claimed in one transaction; the unique (source, idem_key) constraint
//! makes a double claim impossible whatever the interleaving.

use std::time::Instant;

use serde::Serialize;
use sqlx::PgPool;

use crate::config::Mode;

/// What the dedup layer decided for one delivery (spec section 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Claimed,
    Completed,
    InProgress,
    Dead,
    Rejected,
    Unavailable,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Claimed => "claimed",
            Outcome::Completed => "completed",
            Outcome::InProgress => "in_progress",
            Outcome::Dead => "dead",
            Outcome::Rejected => "rejected",
            Outcome::Unavailable => "unavailable",
        }
    }

    /// A duplicate's outcome follows from the state of the event holding its key.
    pub(crate) fn of_event_state(state: &str) -> Self {
        match state {
            "completed" => Outcome::Completed,
            "dead" => Outcome::Dead,
            _ => Outcome::InProgress,
        }
    }

    /// The HTTP status for a verified delivery with this outcome.
    pub fn status(self, mode: Mode) -> u16 {
        match (self, mode) {
            (Outcome::InProgress, Mode::Sync) => 409,
            (Outcome::Rejected, _) => 400,
            (Outcome::Unavailable, _) => 503,
            _ => 200,
        }
    }
}

/// A delivery about to be recorded. Secrets never reach it.
pub struct NewDelivery<'a> {
    pub source: &'a str,
    pub idem_key: Option<&'a str>,
    pub verified: bool,
    pub verification: String,
    pub reject_reason: Option<String>,
    pub query: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub headers: serde_json::Value,
    pub body: Option<&'a [u8]>,
    pub body_size: usize,
    pub remote_addr: Option<&'a str>,
    pub started: Instant,
    /// Set when an operator feeds a stored delivery back (spec section 6).
    pub redelivery: Option<Redelivery>,
}

/// A stored delivery fed back through the pipeline by an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Redelivery {
    /// The stored delivery re-delivered.
    pub of: i64,
    /// The operator's user id.
    pub by: i64,
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

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredResponse {
    pub status: i16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// Sync mode holds the claim with a lease while the destination is called
/// inside the request; a later delivery takes over once the lease expired.
#[derive(Clone, Debug)]
pub struct SyncLease {
    pub owner: String,
    pub secs: f64,
}

type Duplicate = (i64, String, Option<i16>, Option<String>, Option<Vec<u8>>);

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
    let key = d.idem_key.unwrap_or_default();
    let (owner, lease_secs) = match lease {
        Some(l) => (Some(l.owner.as_str()), l.secs),
        None => (None, 0.0),
    };
    // The claim: the event row (also the queue entry) and its first delivery,
    // in one statement. On conflict nothing is written and no row returns.
    let won: Option<(i64, i64)> = sqlx::query_as(
        "WITH claim AS (
            INSERT INTO events (source, idem_key, state, first_delivery_id, lease_owner, lease_expires_at)
            VALUES ($1, $2, CASE WHEN $12::text IS NULL THEN 'queued' ELSE 'processing' END,
                    nextval('deliveries_id_seq'), $12,
                    CASE WHEN $12::text IS NULL THEN NULL ELSE now() + make_interval(secs => $13) END)
            ON CONFLICT (source, idem_key) DO NOTHING
            RETURNING id, first_delivery_id
         )
         INSERT INTO deliveries (id, source, event_id, idem_key, outcome, http_status, ack_micros,
                                 verified, verification, query, content_type, headers, body,
                                 body_size, remote_addr, redelivery_of, redelivered_by)
         SELECT claim.first_delivery_id, $1, claim.id, $2, 'claimed', $3, $4,
                true, $5, $6, $7, $8, $9, $10, $11, $14, $15
         FROM claim
         RETURNING event_id, id",
    )
    .bind(d.source)
    .bind(key)
    .bind(i16::try_from(Outcome::Claimed.status(mode)).unwrap_or(200))
    .bind(d.ack_micros())
    .bind(&d.verification)
    .bind(d.query)
    .bind(d.content_type)
    .bind(&d.headers)
    .bind(d.body)
    .bind(d.body_size())
    .bind(d.remote_addr)
    .bind(owner)
    .bind(lease_secs)
    .bind(d.redelivery.map(|r| r.of))
    .bind(d.redelivery.map(|r| r.by))
    .fetch_optional(&mut *tx)
    .await?;

    // An operator's re-delivery of a dead event queues it again: the row
    // lock makes exactly one of any number of concurrent re-deliveries win.
    if let (None, Some(_)) = (won, d.redelivery) {
        let revived: Option<i64> = sqlx::query_scalar(
            "UPDATE events SET state = 'queued', state_changed_at = now(), next_attempt_at = now(),
                 attempt_count = 0, dead_reason = NULL, last_error = NULL,
                 receive_count = receive_count + 1, last_seen_at = now()
             WHERE source = $1 AND idem_key = $2 AND state = 'dead'
             RETURNING id",
        )
        .bind(d.source)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(event_id) = revived {
            let status = Outcome::Claimed.status(mode);
            let delivery_id =
                insert_delivery(tx, d, Some(event_id), Outcome::Claimed, status).await?;
            return Ok(Claimed {
                outcome: Outcome::Claimed,
                event_id,
                delivery_id,
                stored_response: None,
            });
        }
    }

    let claimed = match won {
        Some((event_id, delivery_id)) => Claimed {
            outcome: Outcome::Claimed,
            event_id,
            delivery_id,
            stored_response: None,
        },
        None => {
            // A duplicate. This statement sees the claim that beat us: the
            // insert above waited for it to commit. In sync mode it takes the
            // claim over when the holder's lease expired or its try failed.
            let (event_id, state, status, content_type, body): Duplicate = sqlx::query_as(
                // The takeover test reads the row's latest version (row-locked
                // update), so two duplicates can never both take over.
                "UPDATE events SET receive_count = receive_count + 1, last_seen_at = now(),
                         state = CASE WHEN $3::text IS NOT NULL AND (state = 'retrying'
                                      OR (state = 'processing' AND lease_expires_at < now()))
                                 THEN 'processing' ELSE state END,
                         lease_expires_at = CASE WHEN $3::text IS NOT NULL AND (state = 'retrying'
                                      OR (state = 'processing' AND lease_expires_at < now()))
                                 THEN now() + make_interval(secs => $4) ELSE lease_expires_at END,
                         lease_owner = CASE WHEN $3::text IS NOT NULL AND (state = 'retrying'
                                      OR (state = 'processing' AND lease_expires_at < now()))
                                 THEN $3 ELSE lease_owner END
                     WHERE source = $1 AND idem_key = $2
                     RETURNING id, CASE WHEN lease_owner = $3 THEN 'taken_over' ELSE state END,
                               response_status, response_content_type, response_body",
            )
            .bind(d.source)
            .bind(key)
            .bind(owner)
            .bind(lease_secs)
            .fetch_one(&mut *tx)
            .await?;
            let outcome = match state.as_str() {
                "taken_over" => Outcome::Claimed,
                other => Outcome::of_event_state(other),
            };
            let stored_response = match (status, body) {
                (Some(status), Some(body)) => Some(StoredResponse {
                    status,
                    content_type,
                    body,
                }),
                _ => None,
            };
            // Sync mode answers a settled event's duplicate with the stored response.
            let answered = match (&stored_response, mode, outcome) {
                (Some(r), Mode::Sync, Outcome::Completed | Outcome::Dead) => r.status as u16,
                _ => outcome.status(mode),
            };
            let delivery_id = insert_delivery(tx, d, Some(event_id), outcome, answered).await?;
            Claimed {
                outcome,
                event_id,
                delivery_id,
                stored_response,
            }
        }
    };
    Ok(claimed)
}

/// Sync mode: the status the provider got is known only once the destination
/// answered; it completes the delivery's record.
pub async fn set_answered_status(
    pool: &PgPool,
    delivery_id: i64,
    status: u16,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE deliveries SET http_status = $2 WHERE id = $1")
        .bind(delivery_id)
        .bind(status as i16)
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
    insert_delivery(&mut conn, d, None, Outcome::Rejected, status).await
}

async fn insert_delivery(
    conn: &mut sqlx::PgConnection,
    d: &NewDelivery<'_>,
    event_id: Option<i64>,
    outcome: Outcome,
    status: u16,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO deliveries (source, event_id, idem_key, outcome, reject_reason, http_status,
                                 ack_micros, verified, verification, query, content_type, headers,
                                 body, body_size, remote_addr, redelivery_of, redelivered_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
         RETURNING id",
    )
    .bind(d.source)
    .bind(event_id)
    .bind(d.idem_key)
    .bind(outcome.as_str())
    .bind(d.reject_reason.as_deref())
    .bind(i16::try_from(status).unwrap_or(i16::MAX))
    .bind(d.ack_micros())
    .bind(d.verified)
    .bind(&d.verification)
    .bind(d.query)
    .bind(d.content_type)
    .bind(&d.headers)
    .bind(d.body)
    .bind(d.body_size())
    .bind(d.remote_addr)
    .bind(d.redelivery.map(|r| r.of))
    .bind(d.redelivery.map(|r| r.by))
    .fetch_one(conn)
    .await
}
