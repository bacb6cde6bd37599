//! The operations the dashboard asks of the server (crate::ops::actions::
//! Operations): re-delivery through the receiver pipeline, pause and resume.

use replaysafe_types::states::{Breaker, State};
use std::time::Instant;

use crate::error::OpError;
use replaysafe_types::actions::RedeliveryResult;
use replaysafe_types::auth::{Caller, Role, Via};

use crate::events::Forced;
use crate::processing::{intake, Services};
use crate::receiver::claim::{Outcome, Redelivery};
use crate::receiver::{Inbound, Receipt};

struct Stored {
    source: String,
    headers: serde_json::Value,
    body: Option<Vec<u8>>,
    query: Option<String>,
    outcome: Outcome,
    /// Only an excerpt was stored: it cannot verify again.
    truncated: bool,
    /// Unix seconds.
    received_at: i64,
}

struct Recorded {
    id: i64,
    event_id: Option<i64>,
    idem_key: Option<String>,
    outcome: Outcome,
    reject_reason: Option<String>,
    /// An earlier delivery holds the same event: a claim now means it was revived.
    revived: bool,
}

/// `past_window_reason`: an admin's reason to re-deliver a delivery
/// that was rejected for its timestamp; refused without one.
/// `bulk_job`: the job it is part of (a job revives an event once).
pub async fn redeliver(
    services: &Services,
    delivery_id: i64,
    by: Caller,
    past_window_reason: Option<String>,
    bulk_job: Option<i64>,
    destination: Option<String>,
) -> Result<RedeliveryResult, OpError> {
    let stored = crate::db::history::by_delivery_id(&services.pool, delivery_id, |lo, hi| {
        sqlx::query_as!(
            Stored,
            r#"SELECT source, headers, body, query, outcome AS "outcome: Outcome", truncated,
                      extract(epoch FROM received_at)::bigint AS "received_at!"
               FROM deliveries
               WHERE id = $1
                 AND received_at >= coalesce($2::timestamptz, '-infinity')
                 AND received_at < coalesce($3::timestamptz, 'infinity')"#,
            delivery_id,
            lo as _,
            hi as _
        )
        .fetch_optional(&services.pool)
    })
    .await?;
    let Some(stored) = stored else {
        return Err(OpError::NotFound(String::from("delivery not found")));
    };
    if stored.truncated {
        return Err(OpError::Conflict(String::from(
                "only an excerpt of this rejected request was stored, so it cannot be re-delivered; its provider's own retries bring it again",
            )));
    }
    let Some(body) = stored.body else {
        return Err(OpError::Conflict(String::from(
            "its payload was removed by retention, so it cannot be re-delivered",
        )));
    };
    let Some(source) = services
        .config
        .sources
        .iter()
        .find(|s| s.slug == stored.source)
    else {
        return Err(OpError::Conflict(format!(
            "source {:?} is no longer configured",
            stored.source
        )));
    };
    // One destination of an event's: only its dispatch is revived.
    let chosen = match &destination {
        None => None,
        Some(name) => match source.destinations.iter().position(|d| &d.name == name) {
            Some(i) => Some(u16::try_from(i).unwrap_or(u16::MAX)),
            None => {
                return Err(OpError::NotFound(format!(
                    "source {:?} has no destination {name:?}",
                    source.slug
                )))
            }
        },
    };
    let headers = Inbound::stored_headers(&stored.headers);
    let inbound = Inbound {
        query: stored.query,
        headers,
        body,
        remote_addr: Some(match by.via {
            Via::Session => format!("re-delivery by {}", by.username),
            Via::Token => format!("re-delivery by token {}", by.username),
        }),
    };
    // The timestamp window exists to stop captured replays: feeding back a
    // delivery that was rejected only for its timestamp undoes it, so it
    // takes an admin and a reason (checked on the stored bytes, not on
    // the recorded words: rejected at its arrival time, valid without
    // the window).
    let now = chrono::Utc::now().timestamp();
    let past_window = stored.outcome == Outcome::Rejected
        && crate::receiver::verify(source, &inbound, stored.received_at, false).is_err()
        && crate::receiver::verify(source, &inbound, now, true).is_ok();
    if past_window {
        if !by.can(Role::Admin) {
            return Err(OpError::Forbidden(String::from(
                "it was rejected because its timestamp was outside the window, which \
                     stops captured requests from being replayed: only an admin can \
                     re-deliver it, giving a reason",
            )));
        }
        if past_window_reason
            .as_deref()
            .is_none_or(|r| r.trim().is_empty())
        {
            return Err(OpError::BadRequest(String::from(
                "it was rejected for its timestamp: give the reason to re-deliver it \
                     anyway (it goes into the audit log)",
            )));
        }
    }
    let receipt = Receipt {
        now,
        started: Instant::now(),
        waive_timestamp: true,
        redelivery: Some(Redelivery {
            of: delivery_id,
            by: by.user_id(),
            bulk_job,
            destination: chosen,
        }),
    };
    let reply = intake::receive(services, source, &inbound, receipt).await;
    if reply.outcome == Outcome::Unavailable {
        return Err(OpError::Unavailable(String::from(
            "the database is unavailable; nothing was re-delivered",
        )));
    }
    let Some(recorded_id) = reply.delivery_id else {
        return Err(OpError::Misconfigured(String::from(
            "the re-delivery was not recorded",
        )));
    };
    // Recorded by this re-delivery a moment ago: in today's partition (or
    // yesterday's, past midnight), with no lookup of where its id lies.
    let recorded = sqlx::query_as!(
        Recorded,
        r#"SELECT d.id, d.event_id, d.idem_key, d.outcome AS "outcome: Outcome", d.reject_reason,
                  EXISTS (SELECT 1 FROM deliveries o
                          WHERE o.event_id = d.event_id AND o.id < d.id
                            AND o.received_at >= (SELECT event_history_starts(e.first_seen_at)
                                                  FROM events e WHERE e.id = d.event_id))
                      AS "revived!"
           FROM deliveries d
           WHERE d.id = $1 AND d.received_at >= now() - interval '1 day'"#,
        recorded_id
    )
    .fetch_one(&services.pool)
    .await?;
    let requeued = recorded.outcome == Outcome::Claimed && recorded.revived;
    // Refused for one destination: its own dispatch's state says why
    // (the delivery's outcome is the event's, any destination's).
    let at_destination = match (&destination, recorded.event_id) {
        (Some(name), Some(event_id)) if recorded.outcome != Outcome::Claimed => sqlx::query_scalar!(
            r#"SELECT state AS "state: State" FROM dispatches WHERE event_id = $1 AND destination = $2"#,
            event_id,
            name
        )
        .fetch_optional(&services.pool)
        .await?
        .map(|state| (name.as_str(), state)),
        _ => None,
    };
    let message = match (recorded.outcome, at_destination) {
        (Outcome::Rejected, _) => format!(
            "rejected: {}",
            recorded
                .reject_reason
                .as_deref()
                .unwrap_or("it does not verify")
        ),
        (Outcome::Claimed, _) if requeued => match &destination {
            Some(name) => {
                format!("queued again: the dead event will be forwarded to {name} (once)")
            }
            None => "queued again: the dead event will be forwarded (once)".to_owned(),
        },
        (_, Some((name, state))) => match state {
            State::Completed => format!("refused: already completed at {name}"),
            State::Filtered => format!("refused: {name}'s filter does not take this event"),
            State::Dead => format!("refused: {name} is dead-lettered"),
            State::Queued | State::Processing | State::Retrying => {
                format!("refused: in progress at {name}")
            }
        },
        (Outcome::Claimed, _) if destination.is_some() => {
            "claimed as a first delivery: it will be forwarded to every destination that wants it"
                .to_owned()
        }
        (Outcome::Claimed, _) => "claimed as a first delivery: it will be forwarded".to_owned(),
        (_, None) if destination.is_some() => {
            "refused: the event has no dispatch to that destination".to_owned()
        }
        (Outcome::Completed, None) => "refused: already completed".to_owned(),
        (Outcome::InProgress, None) => "refused: in progress".to_owned(),
        (Outcome::Dead, None) => "refused: dead-lettered".to_owned(),
        (other @ (Outcome::Unavailable | Outcome::Refused), None) => other.to_string(),
    };
    if recorded.outcome == Outcome::Claimed {
        services.wake.work();
    }
    Ok(RedeliveryResult {
        redelivered: delivery_id,
        delivery_id: Some(recorded.id),
        event_id: recorded.event_id,
        idem_key: recorded.idem_key,
        outcome: recorded.outcome,
        requeued,
        message,
        past_window,
    })
}

pub async fn set_paused(
    services: &Services,
    slug: String,
    paused: bool,
    by: Caller,
) -> Result<(), OpError> {
    match crate::db::sources::set_paused(&services.pool, &slug, paused, by.who()).await {
        Ok(()) => {
            services.wake.set_paused(&slug, paused);
            if !paused {
                services.wake.work();
            }
            Ok(())
        }
        Err(crate::db::sources::SourceError::Unknown(slug)) => Err(OpError::NotFound(format!(
            "no source {slug:?} is configured"
        ))),
        Err(crate::db::sources::SourceError::Db(e)) => Err(OpError::database(e)),
    }
}

/// Opens or closes a destination's circuit breaker by hand; the state
/// it left.
pub async fn set_breaker(
    services: &Services,
    slug: String,
    destination: String,
    open: bool,
) -> Result<Breaker, OpError> {
    let configured = services
        .config
        .sources
        .iter()
        .find(|s| s.slug == slug)
        .is_some_and(|s| s.destinations.iter().any(|d| d.name == destination));
    if !configured {
        return Err(OpError::NotFound(format!(
            "source {slug:?} has no destination {destination:?}"
        )));
    }
    let pool = &services.pool;
    let set = async {
        crate::events::breaker::ensure(pool, &[(&slug, &destination)]).await?;
        crate::events::breaker::set_by_hand(pool, &slug, &destination, open).await
    };
    let was = set.await?.unwrap_or_default();
    let to = if open { Breaker::Open } else { Breaker::Closed };
    if was != to {
        services
            .breakers
            .apply(&[crate::events::breaker::Transition {
                source: slug,
                destination,
                from: was,
                to,
            }]);
    }
    if !open {
        services.wake.work();
    }
    Ok(was)
}

/// An admin's forced re-execution of a completed event (its completed
/// dispatches, or only `destination`'s), queued for the workers: the
/// destinations it queued (sorted); refused with the reason otherwise.
pub async fn force(
    services: &Services,
    event_id: i64,
    reason: String,
    by: Caller,
    destination: Option<String>,
) -> Result<Vec<String>, OpError> {
    let pool = &services.pool;
    match crate::events::force(pool, event_id, destination.as_deref(), by.user_id(), &reason).await {
                Ok(Forced::Queued { destinations, .. }) => {
                    services.wake.work();
                    Ok(destinations)
                }
                Ok(Forced::NotCompleted(state)) => Err(OpError::Conflict(match &destination {
                    Some(name) => format!("only a completed dispatch can be forced; the one to {name} is {}", state.as_str()),
                    None => format!("only a completed event can be forced; this one is {}", state.as_str()),
                })),
                Ok(Forced::Unwanted) => Err(OpError::Conflict(match &destination {
                    Some(name) => format!("{name}'s filter does not take this event: there is nothing to force there"),
                    None => String::from("no destination wants this event (every one filters it out): there is nowhere to forward it"),
                })),
                Ok(Forced::NoPayload) => Err(OpError::Conflict(String::from("retention removed every stored copy of its payload: there is nothing to forward"))),
                Ok(Forced::NotFound) => Err(OpError::NotFound(match &destination {
                    Some(name) => format!("the event has no dispatch to {name:?}"),
                    None => String::from("event not found"),
                })),
                Err(e) => Err(OpError::database(e)),
            }
}
