//! Bulk re-delivery as a job (spec section 6, issue 16): an operator asks
//! for every dead event matching a filter to be re-delivered; the server
//! runs it a step at a time (`ops::actions::redeliver_each`, the same guard as a
//! single re-delivery), whoever asked and from wherever (the dashboard, the
//! API, the CLI). Its progress and per-event outcomes are rows any process
//! reads; an operator may cancel it between steps. This module alone moves
//! a job from state to state, each move guarded by the state it leaves.

use replaysafe_types::time::Time;
use std::time::Duration;

use sqlx::PgPool;

use crate::error::OpError;
use crate::ops::actions::DeadBounds;
use crate::ops::Cx;
use replaysafe_types::actions::{DeadFilter, RedeliveryResult};
use replaysafe_types::auth::{Caller, Role, Via};
use replaysafe_types::jobs::*;
use replaysafe_types::states::{JobState, Outcome};

struct JobRow {
    id: i64,
    state: JobState,
    filter: serde_json::Value,
    started_by: String,
    total: i64,
    done: i64,
    requeued: i64,
    created_at: Time,
    finished_at: Option<Time>,
    cancelled_by: Option<String>,
    error: Option<String>,
}

impl JobRow {
    fn into_job(self) -> BulkJob {
        BulkJob {
            id: self.id,
            state: self.state,
            // Written by `start` from a DeadFilter.
            filter: serde_json::from_value(self.filter).unwrap_or_default(),
            started_by: self.started_by,
            total: self.total,
            done: self.done,
            requeued: self.requeued,
            created_at: self.created_at,
            finished_at: self.finished_at,
            cancelled_by: self.cancelled_by,
            error: self.error,
        }
    }
}

async fn find(pool: &PgPool, id: i64) -> Result<BulkJob, OpError> {
    sqlx::query_as!(
        JobRow,
        r#"SELECT id, state AS "state: JobState", filter, started_by, total, done, requeued,
                  created_at AS "created_at!: Time",
                  finished_at AS "finished_at: Time",
                  cancelled_by, error
           FROM bulk_jobs WHERE id = $1"#,
        id
    )
    .fetch_optional(pool)
    .await?
    .map(JobRow::into_job)
    .ok_or_else(|| OpError::not_found("bulk job"))
}

/// Re-delivers an incident's events that are dead at its destination now
/// (operator): a job with the incident's filter, each event through the
/// same dedup guard as a single re-delivery.
pub async fn start_for_incident(cx: &Cx, id: i64) -> Result<BulkJob, OpError> {
    cx.require(Role::Operator)?;
    let incident = crate::incidents::get(&cx.services.pool, id)
        .await?
        .ok_or_else(|| OpError::NotFound(format!("no incident has id {id}")))?;
    start(
        cx,
        &DeadFilter {
            source: incident.source,
            destination: incident.destination,
            incident: Some(id),
            ..DeadFilter::default()
        },
    )
    .await
}

/// Starts a job over the dead events matching `filter` now (operator;
/// audit-logged). Refused beyond `JOB_MAX_EVENTS` events or
/// `UNFINISHED_JOBS_MAX` unfinished jobs. Nothing matching: the job is
/// done at once.
pub async fn start(cx: &Cx, filter: &DeadFilter) -> Result<BulkJob, OpError> {
    let caller = cx.require(Role::Operator)?;
    let DeadBounds {
        source,
        from,
        to,
        reason,
        destination,
        incident,
    } = crate::ops::actions::DeadBounds::of(filter)?;
    let mut tx = cx.services.pool.begin().await?;
    // Starts take turns, so the count of unfinished jobs holds.
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('replaysafe.bulk_jobs.start'))")
        .execute(&mut *tx)
        .await?;
    let unfinished = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM bulk_jobs WHERE state IN ('queued', 'running')"#
    )
    .fetch_one(&mut *tx)
    .await?;
    if unfinished >= UNFINISHED_JOBS_MAX {
        return Err(OpError::Conflict(format!(
            "{unfinished} bulk jobs are unfinished already; wait for one to finish or cancel one"
        )));
    }
    // The dead-letter list's filter (`dead_letter_matches`), as the steps take it.
    let matching = sqlx::query!(
        r#"SELECT count(DISTINCT event_id) AS "n!", coalesce(max(event_id), 0) AS "up_to!"
           FROM dispatches p
           WHERE dead_letter_matches(p, $1, $2::text::timestamptz, $3::text::timestamptz, $4, $5)
             AND ($6::bigint IS NULL
                  OR EXISTS (SELECT 1 FROM incident_events ie
                             WHERE ie.incident_id = $6 AND ie.event_id = p.event_id))"#,
        source.as_deref(),
        from.as_deref(),
        to.as_deref(),
        reason.as_deref(),
        destination.as_deref(),
        incident
    )
    .fetch_one(&mut *tx)
    .await?;
    if matching.n > JOB_MAX_EVENTS {
        return Err(OpError::BadRequest(format!(
            "the filter matches {} dead events; a job takes at most {JOB_MAX_EVENTS}: narrow it, by time for one",
            matching.n
        )));
    }
    let stored = serde_json::to_value(filter).expect("a filter serialises");
    let id = sqlx::query_scalar!(
        "INSERT INTO bulk_jobs (filter, up_to, user_id, token_id, started_by, remote_addr,
                                total, state, finished_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7::bigint,
                 CASE WHEN $7::bigint = 0 THEN 'done' ELSE 'queued' END,
                 CASE WHEN $7::bigint = 0 THEN now() END)
         RETURNING id",
        stored,
        matching.up_to,
        caller.user_id(),
        caller.token_id(),
        caller.username,
        cx.remote_addr,
        matching.n
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    cx.audit(
        caller,
        "redeliver.bulk.start",
        Some(&format!("bulk job {id}")),
        &format!("{} dead events", matching.n),
        serde_json::json!({ "filter": filter }),
    )
    .await?;
    find(&cx.services.pool, id).await
}

/// A job (viewer).
pub async fn show(cx: &Cx, id: i64) -> Result<BulkJob, OpError> {
    cx.require(Role::Viewer)?;
    find(&cx.services.pool, id).await
}

/// The most recent jobs, newest first (viewer).
pub async fn recent(cx: &Cx) -> Result<Vec<BulkJob>, OpError> {
    cx.require(Role::Viewer)?;
    Ok(sqlx::query_as!(
        JobRow,
        r#"SELECT id, state AS "state: JobState", filter, started_by, total, done, requeued,
                  created_at AS "created_at!: Time",
                  finished_at AS "finished_at: Time",
                  cancelled_by, error
           FROM bulk_jobs ORDER BY id DESC LIMIT $1"#,
        RECENT_JOBS
    )
    .fetch_all(&cx.services.pool)
    .await?
    .into_iter()
    .map(JobRow::into_job)
    .collect())
}

/// A job's outcomes after event `after`, `RESULTS_PAGE` at a time
/// (viewer). A step's answers are recorded together, in event order,
/// so a follower paging on `after` misses none.
pub async fn results(cx: &Cx, id: i64, after: i64) -> Result<JobResults, OpError> {
    cx.require(Role::Viewer)?;
    find(&cx.services.pool, id).await?;
    let results: Vec<RedeliveryResult> = sqlx::query!(
        r#"SELECT event_id, idem_key, redelivered, delivery_id,
                  outcome AS "outcome: Outcome", requeued, message
         FROM bulk_job_results WHERE job_id = $1 AND event_id > $2 AND outcome <> 'pending'
         ORDER BY event_id LIMIT $3"#,
        id,
        after,
        RESULTS_PAGE
    )
    .fetch_all(&cx.services.pool)
    .await?
    .into_iter()
    .map(|r| RedeliveryResult {
        redelivered: r.redelivered.unwrap_or(0),
        delivery_id: r.delivery_id,
        event_id: Some(r.event_id),
        idem_key: r.idem_key,
        outcome: r.outcome,
        requeued: r.requeued,
        message: r.message,
        past_window: false,
    })
    .collect();
    let next_after = results.last().and_then(|r| r.event_id);
    Ok(JobResults {
        results,
        next_after,
    })
}

/// Cancels a job (operator; audit-logged): a queued one at once, a
/// running one by its runner before its next step (until then it shows
/// `cancelled_by` while still running). 409 once it has finished.
pub async fn cancel(cx: &Cx, id: i64) -> Result<BulkJob, OpError> {
    let caller = cx.require(Role::Operator)?;
    let mut tx = cx.services.pool.begin().await?;
    let found = sqlx::query!(
        r#"SELECT state AS "state: JobState", cancelled_by FROM bulk_jobs WHERE id = $1 FOR UPDATE"#,
        id
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| OpError::not_found("bulk job"))?;
    match (found.state, found.cancelled_by) {
        (JobState::Queued | JobState::Running, Some(_)) => {
            // Asked already: the same answer again.
            drop(tx);
            return find(&cx.services.pool, id).await;
        }
        (JobState::Queued, None) => {
            // No runner holds it; one that was stopped may have left
            // chosen events.
            end_early(
                &mut tx,
                id,
                JobState::Cancelled,
                Some(&caller.username),
                None,
            )
            .await?;
        }
        (JobState::Running, None) => {
            sqlx::query!(
                "UPDATE bulk_jobs SET cancelled_by = $2 WHERE id = $1",
                id,
                caller.username
            )
            .execute(&mut *tx)
            .await?;
        }
        (state @ (JobState::Done | JobState::Cancelled | JobState::Failed), _) => {
            return Err(OpError::Conflict(format!(
                "bulk job {id} is {state} already"
            )))
        }
    }
    tx.commit().await?;
    let job = find(&cx.services.pool, id).await?;
    cx.audit(
        caller,
        "redeliver.bulk.cancel",
        Some(&format!("bulk job {id}")),
        &format!("cancelled after {} of {}", job.done, job.total),
        serde_json::json!({ "filter": job.filter }),
    )
    .await?;
    Ok(job)
}

/// Ends a job before its end (`cancelled` or `failed`): what an earlier
/// try left pending is answered first, so a finished job has none.
async fn end_early(
    tx: &mut sqlx::PgConnection,
    id: i64,
    state: JobState,
    cancelled_by: Option<&str>,
    error: Option<&str>,
) -> Result<(), OpError> {
    let why = format!("not re-delivered: the job was {state} first");
    settle(tx, id, true, &why).await?;
    sqlx::query!(
        "UPDATE bulk_jobs SET state = $2, finished_at = now(),
             cancelled_by = coalesce($3, cancelled_by), error = coalesce($4, error)
         WHERE id = $1",
        id,
        state.as_str(),
        cancelled_by,
        error
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Answers a job's pending rows from what its earlier tries did: a
/// claimed delivery carrying the job's id means that try queued the
/// event again. `all`: the rest too, as not re-delivered (`why`), for a
/// job that stops; else they stay pending for the next try.
async fn settle(tx: &mut sqlx::PgConnection, id: i64, all: bool, why: &str) -> Result<(), OpError> {
    sqlx::query!(
        "WITH found AS (
             SELECT r.event_id,
                    (SELECT d.id FROM deliveries d
                     WHERE d.event_id = r.event_id AND d.bulk_job_id = $1
                       AND d.outcome = 'claimed'
                       -- Recorded by the job's runs, all begun after it was made.
                       AND d.received_at >= (SELECT j.created_at FROM bulk_jobs j WHERE j.id = $1)
                     ORDER BY d.id LIMIT 1) AS claimed
             FROM bulk_job_results r
             WHERE r.job_id = $1 AND r.outcome = 'pending'),
         settled AS (
             UPDATE bulk_job_results r SET
                 delivery_id = f.claimed,
                 outcome = CASE WHEN f.claimed IS NULL THEN 'not_redelivered' ELSE 'claimed' END,
                 requeued = f.claimed IS NOT NULL,
                 message = CASE WHEN f.claimed IS NULL THEN $3
                                ELSE 'queued again (by an earlier try of this job)' END
             FROM found f
             WHERE r.job_id = $1 AND r.event_id = f.event_id AND r.outcome = 'pending'
               AND ($2 OR f.claimed IS NOT NULL)
             RETURNING r.requeued)
         UPDATE bulk_jobs SET
             done = done + (SELECT count(*) FROM settled),
             requeued = requeued + (SELECT count(*) FROM settled WHERE requeued)
         WHERE id = $1",
        id,
        all,
        why
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// What a runner holds of a job it owns.
#[derive(Clone, Debug)]
pub struct Owned {
    pub id: i64,
    user_id: Option<i64>,
    token_id: Option<i64>,
    pub remote_addr: Option<String>,
}

/// A runner takes the oldest queued job, or a running one whose owner's
/// heartbeat is older than `stale` (that runner died), as `owner`.
pub async fn take(pool: &PgPool, owner: &str, stale: Duration) -> sqlx::Result<Option<Owned>> {
    let row = sqlx::query!(
        "UPDATE bulk_jobs j SET state = 'running', owner = $1, heartbeat_at = now()
         FROM (SELECT id FROM bulk_jobs
               WHERE state = 'queued'
                  OR (state = 'running' AND heartbeat_at < now() - make_interval(secs => $2))
               ORDER BY id LIMIT 1
               FOR UPDATE SKIP LOCKED) free
         WHERE j.id = free.id
         RETURNING j.id, j.user_id, j.token_id, j.remote_addr",
        owner,
        stale.as_secs_f64()
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Owned {
        id: r.id,
        user_id: r.user_id,
        token_id: r.token_id,
        remote_addr: r.remote_addr,
    }))
}

/// The owner is alive; false when the job is no longer theirs to run
/// (cancelled, or taken over).
pub async fn heartbeat(pool: &PgPool, id: i64, owner: &str) -> sqlx::Result<bool> {
    Ok(sqlx::query!(
        "UPDATE bulk_jobs SET heartbeat_at = now()
         WHERE id = $1 AND owner = $2 AND state = 'running'",
        id,
        owner
    )
    .execute(pool)
    .await?
    .rows_affected()
        == 1)
}

/// The caller the job runs as, read again: Err(why) for a revoked or
/// expired token, a disabled or removed user (their role is checked by
/// the step itself).
pub async fn caller(pool: &PgPool, job: &Owned) -> sqlx::Result<Result<Caller, String>> {
    let found = match (job.user_id, job.token_id) {
        (Some(id), _) => sqlx::query!(
            "SELECT username, role FROM users WHERE id = $1 AND NOT disabled",
            id
        )
        .fetch_optional(pool)
        .await
        .map(|r| r.map(|r| (id, r.username, r.role, Via::Session))),
        (None, Some(id)) => sqlx::query!(
            "SELECT name, role FROM api_tokens
             WHERE id = $1 AND revoked_at IS NULL AND coalesce(expires_at > now(), true)",
            id
        )
        .fetch_optional(pool)
        .await
        .map(|r| r.map(|r| (id, r.name, r.role, Via::Token))),
        (None, None) => Ok(None),
    };
    Ok(match found? {
        None => Err("whoever started it is no longer allowed in (a revoked or expired token, a disabled or removed user)".into()),
        Some((id, username, role, via)) => match Role::parse(&role) {
            None => Err(format!("its caller has an unknown role {role:?}")),
            Some(role) => Ok(Caller {
                id,
                username,
                role,
                via,
            }),
        },
    })
}

/// The events a step re-delivers, by id.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub chosen: Vec<(i64, String)>,
    /// The job's destination: only dispatches dead there are revived.
    pub destination: Option<String>,
    /// Where the step after this one starts; None: this is the last.
    pub next_after: Option<i64>,
}

/// The owner's next step, None when the job is no longer theirs to run
/// (taken over) or stops here (asked to, or nothing is left): the
/// events an earlier try left pending (those it queued again are
/// answered at once), then the next dead events matching the filter
/// after the cursor, `BULK_STEP` in all, marked pending before any is
/// re-delivered.
pub async fn begin_step(pool: &PgPool, id: i64, owner: &str) -> Result<Option<Step>, OpError> {
    let mut tx = pool.begin().await?;
    let job = sqlx::query!(
        "UPDATE bulk_jobs SET heartbeat_at = now()
         WHERE id = $1 AND owner = $2 AND state = 'running'
         RETURNING filter, cursor, up_to, cancelled_by IS NOT NULL AS \"cancel!\"",
        id,
        owner
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(job) = job else {
        return Ok(None);
    };
    if job.cancel {
        end_early(&mut tx, id, JobState::Cancelled, None, None).await?;
        tx.commit().await?;
        return Ok(None);
    }
    settle(&mut tx, id, false, "").await?;
    let filter: DeadFilter = serde_json::from_value(job.filter).unwrap_or_default();
    let DeadBounds {
        source,
        from,
        to,
        reason,
        destination,
        incident,
    } = crate::ops::actions::DeadBounds::of(&filter)?;
    // The same filter as `start`'s count (`dead_letter_matches`).
    let chosen = sqlx::query!(
        r#"WITH chosen AS (
               (SELECT event_id AS id, idem_key FROM bulk_job_results
                WHERE job_id = $1 AND outcome = 'pending')
               UNION ALL
               (SELECT e.id, e.idem_key FROM events e
                WHERE e.id > $2 AND e.id <= $3
                  AND EXISTS (
                      SELECT 1 FROM dispatches p
                      WHERE p.event_id = e.id
                        AND dead_letter_matches(p, $4, $5::text::timestamptz,
                                                $6::text::timestamptz, $7, $9)
                        AND ($10::bigint IS NULL
                             OR EXISTS (SELECT 1 FROM incident_events ie
                                        WHERE ie.incident_id = $10 AND ie.event_id = p.event_id)))
                  AND NOT EXISTS (SELECT 1 FROM bulk_job_results r
                                  WHERE r.job_id = $1 AND r.event_id = e.id))
               ORDER BY id LIMIT $8),
           marked AS (
               INSERT INTO bulk_job_results (job_id, event_id, idem_key)
               SELECT $1, id, idem_key FROM chosen
               ON CONFLICT (job_id, event_id) DO NOTHING)
           SELECT id AS "id!", idem_key AS "idem_key!" FROM chosen ORDER BY id"#,
        id,
        job.cursor,
        job.up_to,
        source.as_deref(),
        from.as_deref(),
        to.as_deref(),
        reason.as_deref(),
        BULK_STEP,
        destination.as_deref(),
        incident
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let chosen: Vec<(i64, String)> = chosen.into_iter().map(|r| (r.id, r.idem_key)).collect();
    let next_after = (chosen.len() as i64 == BULK_STEP)
        .then(|| chosen.last().map(|c| c.0))
        .flatten();
    Ok(Some(Step {
        chosen,
        destination,
        next_after,
    }))
}

/// What the runner does after recording a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    /// Done, cancelled, or no longer this owner's.
    Stop,
}

/// Records a step's answers on its pending rows (a row answered already
/// keeps its first answer) and moves the cursor to `next_after`, or
/// finishes the job when that is None (or cancels it, when asked to).
/// An answer that is not a requeue counts as one when a claimed delivery
/// carries the job's id: an earlier try of this step (by a runner that
/// died before recording) queued it again. Answers are recorded whatever
/// the job's state (the re-deliveries happened); only its owner, while it
/// runs, moves it on.
pub async fn record(
    pool: &PgPool,
    id: i64,
    owner: &str,
    results: &[RedeliveryResult],
    next_after: Option<i64>,
) -> sqlx::Result<Next> {
    let events: Vec<i64> = results.iter().map(|r| r.event_id.unwrap_or(0)).collect();
    let redelivered: Vec<i64> = results.iter().map(|r| r.redelivered).collect();
    let deliveries: Vec<Option<i64>> = results.iter().map(|r| r.delivery_id).collect();
    let outcomes: Vec<String> = results.iter().map(|r| r.outcome.to_string()).collect();
    let requeued: Vec<bool> = results.iter().map(|r| r.requeued).collect();
    let messages: Vec<String> = results.iter().map(|r| r.message.clone()).collect();
    let mut tx = pool.begin().await?;
    // The job's row first, as every move of it locks it: then its rows.
    sqlx::query!("SELECT id FROM bulk_jobs WHERE id = $1 FOR UPDATE", id)
        .fetch_optional(&mut *tx)
        .await?;
    let state = sqlx::query_scalar!(
        r#"WITH answers AS (
               SELECT a.*,
                      (SELECT d.id FROM deliveries d
                       WHERE NOT a.requeued AND d.event_id = a.event_id
                         AND d.bulk_job_id = $1 AND d.outcome = 'claimed'
                         AND d.received_at >= (SELECT j.created_at FROM bulk_jobs j WHERE j.id = $1)
                       ORDER BY d.id LIMIT 1) AS earlier
               FROM unnest($3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::bool[], $8::text[])
                    AS a(event_id, redelivered, delivery_id, outcome, requeued, message)),
           answered AS (
               UPDATE bulk_job_results r SET
                   redelivered = a.redelivered,
                   delivery_id = coalesce(a.earlier, a.delivery_id),
                   outcome = CASE WHEN a.earlier IS NULL THEN a.outcome ELSE 'claimed' END,
                   requeued = a.requeued OR a.earlier IS NOT NULL,
                   message = CASE WHEN a.earlier IS NULL THEN a.message
                                  ELSE 'queued again (by an earlier try of this job)' END
               FROM answers a
               WHERE r.job_id = $1 AND r.event_id = a.event_id AND r.outcome = 'pending'
               RETURNING r.requeued)
           UPDATE bulk_jobs SET
               done = done + (SELECT count(*) FROM answered),
               requeued = requeued + (SELECT count(*) FROM answered WHERE requeued),
               cursor = CASE WHEN owner = $2 AND state = 'running' AND $9::bigint IS NOT NULL
                             THEN greatest(cursor, $9) ELSE cursor END,
               heartbeat_at = CASE WHEN owner = $2 THEN now() ELSE heartbeat_at END,
               finished_at = CASE WHEN owner = $2 AND state = 'running'
                                   AND ($9::bigint IS NULL OR cancelled_by IS NOT NULL)
                                  THEN now() ELSE finished_at END,
               state = CASE WHEN owner = $2 AND state = 'running' AND $9::bigint IS NULL
                            THEN 'done'
                            WHEN owner = $2 AND state = 'running' AND cancelled_by IS NOT NULL
                            THEN 'cancelled'
                            ELSE state END
           WHERE id = $1
           RETURNING CASE WHEN owner = $2 AND state = 'running' THEN 'continue' ELSE 'stop' END AS "next!""#,
        id,
        owner,
        &events,
        &redelivered,
        &deliveries as &[Option<i64>],
        &outcomes,
        &requeued,
        &messages,
        next_after
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(match state.as_deref() {
        Some("continue") => Next::Continue,
        _ => Next::Stop,
    })
}

/// A job that cannot go on (its caller lost the right): failed, with
/// why; events an earlier try left pending are answered.
pub async fn fail(pool: &PgPool, id: i64, owner: &str, error: &str) -> Result<(), OpError> {
    let mut tx = pool.begin().await?;
    let ours = sqlx::query_scalar!(
        "SELECT id FROM bulk_jobs WHERE id = $1 AND owner = $2 AND state = 'running' FOR UPDATE",
        id,
        owner
    )
    .fetch_optional(&mut *tx)
    .await?;
    if ours.is_none() {
        return Ok(());
    }
    end_early(&mut tx, id, JobState::Failed, None, Some(error)).await?;
    Ok(tx.commit().await?)
}

/// A runner shutting down hands its job back to the queue for another.
pub async fn release(pool: &PgPool, id: i64, owner: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE bulk_jobs SET state = 'queued', owner = NULL, heartbeat_at = NULL
         WHERE id = $1 AND owner = $2 AND state = 'running'",
        id,
        owner
    )
    .execute(pool)
    .await?;
    Ok(())
}
