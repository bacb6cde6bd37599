//! What operators and admins change (spec section 6): pause and resume,
//! re-delivery through the dedup layer (single and bulk), forced
//! re-execution, and the audit log that records all of it.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What the dedup layer did with a re-delivery, in the words shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RedeliveryResult {
    /// The stored delivery that was fed back.
    pub redelivered: i64,
    /// The delivery recorded for the re-delivery.
    pub delivery_id: Option<i64>,
    pub event_id: Option<i64>,
    pub idem_key: Option<String>,
    /// claimed, completed, in_progress, dead or rejected (spec section 4).
    pub outcome: String,
    /// A dead event was queued again by this re-delivery.
    pub requeued: bool,
    pub message: String,
    /// An admin re-delivered a delivery rejected for its timestamp, with a reason.
    #[serde(default)]
    pub past_window: bool,
}

#[server(endpoint = "source-paused")]
pub async fn set_source_paused(slug: String, paused: bool) -> Result<(), ServerFnError> {
    Ok(ssr::set_paused(&crate::api::ssr::cx().await?, slug, paused).await?)
}

/// Opens a destination's circuit breaker by hand (it stays open until an
/// operator closes it) or closes it (operator; audit-logged).
#[server(endpoint = "breaker")]
pub async fn set_breaker(
    slug: String,
    destination: String,
    open: bool,
) -> Result<(), ServerFnError> {
    Ok(ssr::set_breaker(&crate::api::ssr::cx().await?, slug, destination, open).await?)
}

/// Re-delivers one stored delivery through the receiver pipeline. A
/// delivery rejected for its timestamp (the window stops captured replays)
/// takes an admin and a typed `past_window_reason`. `destination`: revive
/// only the event's dispatch to it (empty: every dead one).
#[server(endpoint = "redeliver")]
pub async fn redeliver(
    delivery_id: i64,
    #[server(default)] past_window_reason: String,
    #[server(default)] destination: String,
) -> Result<RedeliveryResult, ServerFnError> {
    let cx = crate::api::ssr::cx().await?;
    Ok(ssr::redeliver(&cx, delivery_id, past_window_reason, destination).await?)
}

/// Which dead events a bulk re-delivery takes. Empty means any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DeadFilter {
    #[serde(default)]
    pub source: String,
    /// UTC, `2026-11-30T14:05`: dead-lettered at or after.
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
    /// Words the dead-letter reason contains.
    #[serde(default)]
    pub reason: String,
    /// Dead at this destination (a bulk re-delivery revives only its
    /// dispatches).
    #[serde(default)]
    pub destination: String,
}

/// An admin runs a completed event again: the same Idempotency-Key, a header
/// marking it forced, audit-logged. `confirm_key` must be the event's key.
/// `destination`: only its completed dispatch (empty: every completed one).
#[server(endpoint = "force")]
pub async fn force_reexecution(
    event_id: i64,
    confirm_key: String,
    reason: String,
    #[server(default)] destination: String,
) -> Result<String, ServerFnError> {
    let cx = crate::api::ssr::cx().await?;
    Ok(ssr::force(&cx, event_id, confirm_key, reason, destination).await?)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    pub id: i64,
    pub at: String,
    pub username: Option<String>,
    pub action: String,
    pub target: Option<String>,
    pub outcome: String,
    pub detail: Option<String>,
    pub remote_addr: Option<String>,
    /// `username` is an API token's name.
    pub by_token: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct AuditPage {
    pub rows: Vec<AuditEntry>,
    pub older: Option<i64>,
}

pub const AUDIT_PAGE: i64 = 100;

#[server(endpoint = "audit")]
pub async fn list_audit(before: Option<i64>) -> Result<AuditPage, ServerFnError> {
    Ok(ssr::audit_log(&crate::api::ssr::cx().await?, before).await?)
}

#[cfg(feature = "ssr")]
pub mod ssr {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;

    use leptos::prelude::*;

    use super::*;
    use crate::api::ssr::Cx;
    use crate::auth::{Caller, Role};
    pub use crate::error::AppError;

    pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

    /// What the server binary provides: the receiver pipeline and the queue
    /// live there, and the UI reaches them only through this.
    pub trait Operations: Send + Sync + 'static {
        /// `past_window_reason`: an admin's reason to re-deliver a delivery
        /// that was rejected for its timestamp; refused without one.
        /// `bulk_job`: the job it is part of (a job revives an event once).
        fn redeliver(
            &self,
            delivery_id: i64,
            by: Caller,
            past_window_reason: Option<String>,
            bulk_job: Option<i64>,
            destination: Option<String>,
        ) -> BoxFuture<'_, Result<RedeliveryResult, AppError>>;
        fn set_paused(
            &self,
            slug: String,
            paused: bool,
            by: Caller,
        ) -> BoxFuture<'_, Result<(), AppError>>;
        /// Opens or closes a destination's circuit breaker by hand; the
        /// state it left.
        fn set_breaker(
            &self,
            slug: String,
            destination: String,
            open: bool,
        ) -> BoxFuture<'_, Result<String, AppError>>;
        /// An admin's forced re-execution of a completed event (its
        /// completed dispatches, or only `destination`'s), queued for the
        /// workers: the destinations it queued (sorted); refused with the
        /// reason otherwise.
        fn force(
            &self,
            event_id: i64,
            reason: String,
            by: Caller,
            destination: Option<String>,
        ) -> BoxFuture<'_, Result<Vec<String>, AppError>>;
        /// Where a source's provider puts credentials, to mask them on screen.
        fn credentials(&self, source: &str) -> crate::api::mask::Credentials;
    }

    pub fn operations() -> Result<Arc<dyn Operations>, ServerFnError> {
        use_context::<Arc<dyn Operations>>()
            .ok_or_else(|| ServerFnError::new("server misconfigured: no operations"))
    }

    fn time_bound(field: &str, value: &str) -> Result<Option<String>, AppError> {
        match value.trim() {
            "" => Ok(None),
            value => crate::api::ssr::utc_time(field, value)
                .map(Some)
                .map_err(AppError::BadRequest),
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
    }

    impl DeadFilter {
        pub fn bounds(&self) -> Result<DeadBounds, AppError> {
            let text = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
            Ok(DeadBounds {
                source: text(&self.source),
                from: time_bound("from", &self.from)?,
                to: time_bound("to", &self.to)?,
                reason: text(&self.reason),
                destination: text(&self.destination),
            })
        }
    }

    /// Pauses or resumes a source (operator).
    pub async fn set_paused(cx: &Cx, slug: String, paused: bool) -> Result<(), AppError> {
        let caller = cx.require(Role::Operator)?;
        cx.operations.set_paused(slug, paused, caller.clone()).await
    }

    /// Opens or closes a destination's circuit breaker by hand (operator),
    /// audit-logged with the state it left.
    pub async fn set_breaker(
        cx: &Cx,
        slug: String,
        destination: String,
        open: bool,
    ) -> Result<(), AppError> {
        let caller = cx.require(Role::Operator)?;
        let target = format!("destination {slug}/{destination}");
        let was = cx.operations.set_breaker(slug, destination, open).await?;
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
            serde_json::json!({ "was": was }),
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
    ) -> Result<RedeliveryResult, AppError> {
        let caller = cx.require(Role::Operator)?;
        let reason = Some(past_window_reason.trim().to_owned()).filter(|r| !r.is_empty());
        let destination = Some(destination.trim().to_owned()).filter(|d| !d.is_empty());
        let result = cx
            .operations
            .redeliver(
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
    async fn delivery_of(
        pool: &sqlx::PgPool,
        event_id: i64,
    ) -> Result<Option<Option<i64>>, AppError> {
        sqlx::query_scalar!(
            "SELECT coalesce((SELECT d.id FROM deliveries d
                              WHERE d.id = e.first_delivery_id AND d.body IS NOT NULL),
                             (SELECT d.id FROM deliveries d
                              WHERE d.event_id = e.id AND d.body IS NOT NULL
                                AND d.idem_key = e.idem_key
                              ORDER BY d.id DESC LIMIT 1))
             FROM events e WHERE e.id = $1",
            event_id
        )
        .fetch_optional(pool)
        .await
        .map_err(AppError::database)
    }

    /// Re-delivers an event: its stored delivery (`delivery_of`) through
    /// the same guard and audit as `redeliver`.
    pub async fn redeliver_event(
        cx: &Cx,
        event_id: i64,
        past_window_reason: String,
        destination: String,
    ) -> Result<RedeliveryResult, AppError> {
        cx.require(Role::Operator)?;
        match delivery_of(&cx.pool, event_id).await? {
            None => Err(AppError::not_found("event")),
            Some(None) => Err(AppError::Conflict(
                "retention removed every stored copy of its payload: there is nothing to re-deliver".into(),
            )),
            Some(Some(delivery_id)) => {
                redeliver(cx, delivery_id, past_window_reason, destination).await
            }
        }
    }

    /// The audit log, newest first; `before`: the next page's cursor.
    pub async fn audit_log(cx: &Cx, before: Option<i64>) -> Result<AuditPage, AppError> {
        cx.require(Role::Viewer)?;
        let rows = sqlx::query_as!(
            AuditEntry,
            r#"SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS "at!", username,
                      action, target, outcome, detail::text AS detail, remote_addr,
                      token_id IS NOT NULL AS "by_token!"
               FROM audit_log WHERE ($1::bigint IS NULL OR id < $1)
               ORDER BY id DESC LIMIT $2"#,
            before,
            AUDIT_PAGE + 1
        )
        .fetch_all(&cx.pool)
        .await
        .map_err(AppError::database)?;
        let (rows, older) = crate::api::ssr::page(rows, AUDIT_PAGE, |r| r.id);
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
    ) -> Result<Vec<RedeliveryResult>, AppError> {
        let user = cx.require(Role::Operator)?;
        let (pool, ops) = (&cx.pool, &cx.operations);
        let mut results = Vec::with_capacity(chosen.len());
        for (event_id, key) in chosen {
            let refused = |redelivered: i64, message: String| RedeliveryResult {
                redelivered,
                delivery_id: None,
                event_id: Some(*event_id),
                idem_key: Some(key.clone()),
                outcome: "refused".into(),
                requeued: false,
                message,
                past_window: false,
            };
            let result = match delivery_of(pool, *event_id).await?.flatten() {
                None => refused(0, "its payload is no longer stored".into()),
                Some(delivery_id) => {
                    match ops
                        .redeliver(
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
                        Err(e @ AppError::Unavailable(_)) => return Err(e),
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

    /// An admin's forced re-execution of a completed event, confirmed by
    /// typing its key, with a reason; audit-logged either way.
    pub async fn force(
        cx: &Cx,
        event_id: i64,
        confirm_key: String,
        reason: String,
        destination: String,
    ) -> Result<String, AppError> {
        let user = cx.require(Role::Admin)?;
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(AppError::BadRequest(
                "give a reason: it goes into the audit log".into(),
            ));
        }
        let found = sqlx::query!(
            "SELECT source, idem_key FROM events WHERE id = $1",
            event_id
        )
        .fetch_optional(&cx.pool)
        .await
        .map_err(AppError::database)?
        .map(|r| (r.source, r.idem_key));
        let Some((source, key)) = found else {
            return Err(AppError::not_found("event"));
        };
        if confirm_key.trim() != key {
            return Err(AppError::BadRequest(
                "to confirm, type the event's key exactly".into(),
            ));
        }
        // The server's event owner forces only a completed event, once per completion.
        let destination = Some(destination.trim().to_owned()).filter(|d| !d.is_empty());
        let forced = cx
            .operations
            .force(
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
}
