//! What operators and admins change (spec section 6): pause and resume,
//! re-delivery through the dedup layer (single and bulk), forced
//! re-execution, dead-letter by hand, and the audit log that records all of
//! it.

use replaysafe_types::actions::*;
use replaysafe_types::auth::Role;
use replaysafe_types::states::Outcome;
use replaysafe_types::time::Time;

use crate::error::OpError;
use crate::ops::{redeliver as server, Cx};

fn time_bound(field: &str, value: &str) -> Result<Option<String>, OpError> {
    match value.trim() {
        "" => Ok(None),
        value => crate::ops::utc_time(field, value)
            .map(Some)
            .map_err(OpError::BadRequest),
    }
}

/// A dead-letter filter as the statements take it (None: any), its
/// times checked.
pub struct DeadBounds {
    pub source: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: Option<String>,
    pub destination: Option<String>,
    pub incident: Option<i64>,
}

impl DeadBounds {
    /// `filter`'s bounds, its times checked.
    pub fn of(filter: &DeadFilter) -> Result<Self, OpError> {
        let text = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
        Ok(DeadBounds {
            source: text(&filter.source),
            from: time_bound("from", &filter.from)?,
            to: time_bound("to", &filter.to)?,
            reason: text(&filter.reason),
            destination: text(&filter.destination),
            incident: filter.incident,
        })
    }
}

/// Pauses or resumes a source (operator).
pub async fn set_paused(cx: &Cx, slug: String, paused: bool) -> Result<(), OpError> {
    let caller = cx.require(Role::Operator)?;
    server::set_paused(&cx.services, slug, paused, caller.clone()).await
}

/// Opens or closes a destination's circuit breaker by hand (operator),
/// audit-logged with the state it left.
pub async fn set_breaker(
    cx: &Cx,
    slug: String,
    destination: String,
    open: bool,
) -> Result<(), OpError> {
    let caller = cx.require(Role::Operator)?;
    let target = format!("destination {slug}/{destination}");
    let was = server::set_breaker(&cx.services, slug, destination, open).await?;
    let (action, now) = if open {
        ("breaker.open", "open until an operator closes it")
    } else {
        ("breaker.close", "closed")
    };
    cx.audit(
        caller,
        action,
        Some(&target),
        &format!("{was}, now {now}"),
        serde_json::json!({ "was": was.as_str() }),
    )
    .await
}

/// Re-delivers one stored delivery through the dedup layer (operator;
/// past its timestamp window, an admin with a reason), audit-logged
/// with the dedup layer's answer.
pub async fn redeliver(
    cx: &Cx,
    delivery_id: i64,
    past_window_reason: String,
    destination: String,
) -> Result<RedeliveryResult, OpError> {
    let caller = cx.require(Role::Operator)?;
    let reason = Some(past_window_reason.trim().to_owned()).filter(|r| !r.is_empty());
    let destination = Some(destination.trim().to_owned()).filter(|d| !d.is_empty());
    let result = server::redeliver(
        &cx.services,
        delivery_id,
        caller.clone(),
        reason.clone(),
        None,
        destination.clone(),
    )
    .await;
    let past_window = matches!(&result, Ok(r) if r.past_window);
    let (outcome, detail) = match &result {
        Ok(r) => (
            r.message.clone(),
            serde_json::json!({"event": r.event_id, "new_delivery": r.delivery_id, "outcome": r.outcome, "reason": reason, "destination": destination}),
        ),
        Err(refusal) => (
            format!("refused: {}", refusal.message()),
            serde_json::json!({ "reason": reason, "destination": destination }),
        ),
    };
    let action = if past_window {
        "redeliver.past_window"
    } else {
        "redeliver"
    };
    let target = format!("delivery {delivery_id}");
    cx.audit(caller, action, Some(&target), &outcome, detail)
        .await?;
    result
}

/// The stored delivery a re-delivery of `event_id` feeds back: its first
/// delivery, or its newest one still holding the payload. None: no such
/// event; Some(None): retention removed every copy of its payload.
async fn delivery_of(pool: &sqlx::PgPool, event_id: i64) -> Result<Option<Option<i64>>, OpError> {
    Ok(sqlx::query_scalar!(
        "SELECT coalesce((SELECT d.id FROM deliveries d
                          WHERE d.id = e.first_delivery_id AND d.body IS NOT NULL
                            AND d.received_at >= e.first_seen_at),
                         (SELECT d.id FROM deliveries d
                          WHERE d.event_id = e.id AND d.body IS NOT NULL
                            AND d.idem_key = e.idem_key
                            AND d.received_at >= event_history_starts(e.first_seen_at)
                          ORDER BY d.id DESC LIMIT 1))
         FROM events e WHERE e.id = $1",
        event_id
    )
    .fetch_optional(pool)
    .await?)
}

/// Re-delivers an event: its stored delivery (`delivery_of`) through
/// the same guard and audit as `redeliver`.
pub async fn redeliver_event(
    cx: &Cx,
    event_id: i64,
    past_window_reason: String,
    destination: String,
) -> Result<RedeliveryResult, OpError> {
    cx.require(Role::Operator)?;
    match delivery_of(&cx.services.pool, event_id).await? {
        None => Err(OpError::not_found("event")),
        Some(None) => Err(OpError::Conflict(
            "retention removed every stored copy of its payload: there is nothing to re-deliver"
                .into(),
        )),
        Some(Some(delivery_id)) => {
            redeliver(cx, delivery_id, past_window_reason, destination).await
        }
    }
}

/// The audit log, newest first; `before`: the next page's cursor.
pub async fn audit_log(cx: &Cx, before: Option<i64>) -> Result<AuditPage, OpError> {
    cx.require(Role::Viewer)?;
    let rows = sqlx::query_as!(
        AuditEntry,
        r#"SELECT id, at AS "at!: Time", username,
                  action, target, outcome, detail::text AS detail, remote_addr,
                  token_id IS NOT NULL AS "by_token!"
           FROM audit_log WHERE ($1::bigint IS NULL OR id < $1)
           ORDER BY id DESC LIMIT $2"#,
        before,
        AUDIT_PAGE + 1
    )
    .fetch_all(&cx.services.pool)
    .await?;
    let (rows, older) = crate::ops::page(rows, AUDIT_PAGE, |r| r.id);
    Ok(AuditPage { rows, older })
}

/// Re-delivers each chosen dead event (id, key) of a bulk job's step
/// through the same guard as a single one (operator); audit-logged as
/// one entry with each event's outcome. `api::jobs` chooses them.
pub async fn redeliver_each(
    cx: &Cx,
    job: i64,
    chosen: &[(i64, String)],
    destination: Option<&str>,
) -> Result<Vec<RedeliveryResult>, OpError> {
    let user = cx.require(Role::Operator)?;
    let pool = &cx.services.pool;
    let mut results = Vec::with_capacity(chosen.len());
    for (event_id, key) in chosen {
        let refused = |redelivered: i64, message: String| RedeliveryResult {
            redelivered,
            delivery_id: None,
            event_id: Some(*event_id),
            idem_key: Some(key.clone()),
            outcome: Outcome::Refused,
            requeued: false,
            message,
            past_window: false,
        };
        let result = match delivery_of(pool, *event_id).await?.flatten() {
            None => refused(0, "its payload is no longer stored".into()),
            Some(delivery_id) => {
                match server::redeliver(
                    &cx.services,
                    delivery_id,
                    user.clone(),
                    None,
                    Some(job),
                    destination.map(str::to_owned),
                )
                .await
                {
                    // The answer is about the chosen event, whatever
                    // the re-delivery was recorded under (a rejected
                    // one holds none).
                    Ok(result) => RedeliveryResult {
                        event_id: Some(*event_id),
                        idem_key: Some(key.clone()),
                        ..result
                    },
                    // Nothing was decided: the step is tried again.
                    Err(e @ OpError::Unavailable(_)) => return Err(e),
                    Err(refusal) => refused(delivery_id, refusal.message().to_owned()),
                }
            }
        };
        results.push(result);
    }
    let requeued = results.iter().filter(|r| r.requeued).count();
    cx.audit(
        user,
        "redeliver.bulk",
        Some(&format!("bulk job {job}")),
        &format!("{} dead events, {requeued} queued again", results.len()),
        serde_json::json!({
            "job": job,
            "events": results.iter().map(|r| serde_json::json!({"event": r.event_id, "outcome": r.outcome})).collect::<Vec<_>>(),
        }),
    )
    .await?;
    Ok(results)
}

/// The longest dead-letter reason kept (the rest is cut at a character).
const REASON_MAX: usize = 500;

/// An operator gives up on a waiting event (every queued or retrying
/// dispatch of it, or only `destination`'s), with a reason: it goes dead,
/// so an ordered destination's key it held goes on; audit-logged either
/// way. It may be re-delivered later like any dead event.
pub async fn dead_letter(
    cx: &Cx,
    event_id: i64,
    reason: String,
    destination: String,
) -> Result<DeadLetterResult, OpError> {
    use crate::events::DeadLettered;
    let user = cx.require(Role::Operator)?;
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(OpError::BadRequest(
            "give a reason: it is kept as the dead-letter reason and goes into the audit log"
                .into(),
        ));
    }
    let reason: String = reason.chars().take(REASON_MAX).collect();
    let destination = Some(destination.trim().to_owned()).filter(|d| !d.is_empty());
    let key = sqlx::query_scalar!("SELECT idem_key FROM events WHERE id = $1", event_id)
        .fetch_optional(&cx.services.pool)
        .await?
        .ok_or_else(|| OpError::not_found("event"))?;
    let stored = format!("dead-lettered by hand by {}: {reason}", user.username);
    let done =
        crate::events::dead_letter(&cx.services.pool, event_id, destination.as_deref(), &stored)
            .await?;
    let refused = match &done {
        DeadLettered::Dead(_) => None,
        DeadLettered::InFlight => Some(OpError::Conflict(
            "an attempt is in flight: try again once it ended".into(),
        )),
        DeadLettered::NotWaiting(state) => Some(OpError::Conflict(match &destination {
            Some(name) => format!(
                "only a waiting dispatch can be dead-lettered; the one to {name} is {state}"
            ),
            None => format!("only a waiting event can be dead-lettered; this one is {state}"),
        })),
        DeadLettered::NotFound => Some(OpError::NotFound(match &destination {
            Some(name) => format!("the event has no dispatch to {name:?}"),
            None => "event not found".into(),
        })),
    };
    let outcome = match &refused {
        None => "dead-lettered".to_owned(),
        Some(e) => format!("refused: {}", e.message()),
    };
    let destinations = match done {
        DeadLettered::Dead(d) => d,
        _ => Vec::new(),
    };
    cx.audit(
        user,
        "dead_letter",
        Some(&format!("event {event_id} ({key})")),
        &outcome,
        serde_json::json!({ "reason": reason, "destination": destination, "dead": destinations }),
    )
    .await?;
    if let Some(e) = refused {
        return Err(e);
    }
    metrics::counter!("replaysafe_dead_lettered_by_hand_total").increment(1);
    // An ordered key it held lets the next event of the key go.
    cx.services.wake.work();
    Ok(DeadLetterResult {
        event_id,
        message: format!(
            "dead-lettered at {}: re-deliver it to queue it again",
            destinations.join(", ")
        ),
        destinations,
    })
}

/// An admin's forced re-execution of a completed event, confirmed by
/// typing its key, with a reason; audit-logged either way.
pub async fn force(
    cx: &Cx,
    event_id: i64,
    confirm_key: String,
    reason: String,
    destination: String,
) -> Result<String, OpError> {
    let user = cx.require(Role::Admin)?;
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(OpError::BadRequest(
            "give a reason: it goes into the audit log".into(),
        ));
    }
    let found = sqlx::query!(
        "SELECT source, idem_key FROM events WHERE id = $1",
        event_id
    )
    .fetch_optional(&cx.services.pool)
    .await?
    .map(|r| (r.source, r.idem_key));
    let Some((source, key)) = found else {
        return Err(OpError::not_found("event"));
    };
    if confirm_key.trim() != key {
        return Err(OpError::BadRequest(
            "to confirm, type the event's key exactly".into(),
        ));
    }
    // The server's event owner forces only a completed event, once per completion.
    let destination = Some(destination.trim().to_owned()).filter(|d| !d.is_empty());
    let forced = server::force(
        &cx.services,
        event_id,
        reason.to_owned(),
        user.clone(),
        destination.clone(),
    )
    .await;
    let outcome = match &forced {
        Ok(_) => "forced".to_owned(),
        Err(refusal) => format!("refused: {}", refusal.message()),
    };
    let queued = forced.as_ref().ok();
    cx.audit(
        user,
        "force",
        Some(&format!("event {event_id} ({key})")),
        &outcome,
        serde_json::json!({ "reason": reason, "destination": destination, "forced": queued }),
    )
    .await?;
    let queued = forced.map_err(|r| {
        let message = format!("refused: {}", r.message());
        r.with_message(message)
    })?;
    let to = format!(" to {}", queued.join(", "));
    Ok(format!(
        "forced: queued to be forwarded again{to} with Idempotency-Key {source}:{key} and x-replaysafe-forced: true"
    ))
}
