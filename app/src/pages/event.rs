use leptos::prelude::*;
use leptos_router::hooks::use_params_map;
use replaysafe_types::states::{Outcome, State};

use crate::api::actions::{DeadLetterEvent, ForceReexecution};
use crate::auth::Role;

use crate::api::events::{
    get_delivery, get_event, AttemptRow, DeliveryDetail, EventDetail, TimelineEntry,
};
use crate::components::*;
use crate::reader::{Reader, When};

fn id_param(name: &'static str) -> impl Fn() -> Option<i64> + Copy {
    let params = use_params_map();
    move || params.with(|p| p.get(name).and_then(|v| v.parse().ok()))
}

/// `?reveal=1`: an admin asked to see the stored request's credentials.
fn reveal_param() -> impl Fn() -> bool + Copy {
    let query = leptos_router::hooks::use_query_map();
    move || query.with(|q| q.get("reveal").as_deref() == Some("1"))
}

#[component]
pub fn EventPage() -> impl IntoView {
    let id = id_param("id");
    let reveal = reveal_param();
    let data = Resource::new(
        move || (id(), reveal()),
        |(id, reveal)| async move {
            match id {
                Some(id) => get_event(id, reveal).await,
                None => Err(ServerFnError::new("event not found")),
            }
        },
    );
    view! {
        <section class="page">
            <p class="crumbs"><a href="/deliveries">"Deliveries"</a> " / event"</p>
            <Transition fallback=|| view! { <p class="muted">"Loading the event…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(detail) => view! { <EventBody detail/> }.into_any(),
                        Err(e) => view! { <h1>"Event"</h1><ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn EventBody(detail: EventDetail) -> impl IntoView {
    let reader = Reader::current();
    let EventDetail {
        event,
        dispatches,
        timeline,
        first_delivery,
        deliveries_shown,
        deliveries_total,
    } = detail;
    let more = (deliveries_total > deliveries_shown as i64).then(|| {
        view! {
            <p class="muted">
                {format!("Showing the first {deliveries_shown} of {} deliveries. ", fmt_count(deliveries_total))}
                <a href=format!("/deliveries?source={}&key={}", event.source, event.idem_key)>"List them all"</a>
            </p>
        }
    });
    let reason = event
        .dead_reason
        .clone()
        .map(|r| view! { <dt>"Dead-letter reason"</dt><dd class="bad-text">{r}</dd> });
    let last_error = event
        .last_error
        .clone()
        .filter(|_| event.dead_reason.is_none())
        .map(|e| view! { <dt>"Last error"</dt><dd>{e}</dd> });
    let next = event.state.is_waiting().then(
        || view! { <dt>"Next attempt"</dt><dd><When at=event.next_attempt_at ms=true zoned=true ago=true/></dd> },
    );
    let completed = event
        .completed_at
        .map(|c| view! { <dt>"Completed"</dt><dd><When at=c ms=true zoned=true/></dd> });
    view! {
        <h1>"Event " <code>{event.idem_key.clone()}</code></h1>
        <dl class="facts" data-testid="event-facts">
            <dt>"State"</dt><dd><StateBadge state=event.state/> " since " <When at=event.state_changed_at ms=true zoned=true ago=true/></dd>
            <dt>"Source"</dt><dd><code>{event.source.clone()}</code></dd>
            {event.event_type.clone().map(|t| view! { <dt>"Event type"</dt><dd><code>{t}</code></dd> })}
            <dt>"Idempotency-Key sent"</dt><dd><code>{format!("{}:{}", event.source, event.idem_key)}</code></dd>
            <dt>"First received"</dt><dd><When at=event.first_seen_at ms=true zoned=true ago=true/></dd>
            <dt>"Last received"</dt><dd><When at=event.last_seen_at ms=true zoned=true ago=true/></dd>
            <dt>"Deliveries"</dt><dd>{event.receive_count}</dd>
            <dt>"Attempts"</dt><dd>{event.attempt_count}</dd>
            {completed}
            {next}
            {reason}
            {last_error}
        </dl>
        {event.first_delivery_id.map(|first| view! {
            <RedeliverButton delivery_id=first label="Re-deliver through the dedup layer"/>
        })}
        {
            let completed: Vec<String> = dispatches
                .iter()
                .filter(|d| d.state == State::Completed)
                .map(|d| d.destination.clone())
                .collect();
            (!completed.is_empty()).then(|| view! { <ForceForm event_id=event.id completed/> })
        }
        {
            let waiting: Vec<String> = dispatches
                .iter()
                .filter(|d| matches!(d.state, State::Queued | State::Retrying))
                .map(|d| d.destination.clone())
                .collect();
            (!waiting.is_empty()).then(|| view! { <DeadLetterForm event_id=event.id waiting/> })
        }
        <h2>"Destinations"</h2>
        <table class="lanes" data-testid="dispatches">
            <thead><tr><th>"Destination"</th><th>"State"</th><th>"Attempts"</th><th>"Details"</th><th><span class="visually-hidden">"Actions"</span></th></tr></thead>
            <tbody>
                {dispatches.into_iter().map(|d| {
                    let details = {
                        let d = d.clone();
                        move || match d.state {
                            State::Filtered => "its filter does not take this event: nothing is forwarded there".to_owned(),
                            State::Completed => format!("completed {}", d.completed_at.as_ref().map(|t| reader.stamp_ms(t)).unwrap_or_default()),
                            State::Dead => d.dead_reason.clone().unwrap_or_default(),
                            State::Queued | State::Processing | State::Retrying => match (&d.next_attempt_at, &d.last_error) {
                                (Some(next), Some(e)) => format!("next attempt {}; last error: {e}", reader.stamp_ms(next)),
                                (Some(next), None) => format!("next attempt {}", reader.stamp_ms(next)),
                                (None, _) => format!("since {}", reader.stamp_ms(&d.state_changed_at)),
                            },
                        }
                    };
                    let order = d.ordering_key.clone().map(|key| {
                        let key = if key.is_empty() { "all of its events".to_owned() } else { format!("key {key:?}") };
                        let held = match (d.held_by, d.waiting_behind) {
                            (Some(holder), _) => Some(view! {
                                <br/><span class="warn-text" data-testid="held-by">
                                    "waits behind " <a href=format!("/events/{holder}")>{format!("event {holder}")}</a>
                                </span>
                            }.into_any()),
                            (None, Some(n)) if n > 0 && d.state == State::Retrying => Some(view! {
                                <br/><span class="bad-text" data-testid="blocking">
                                    {format!("holds its key: {} wait behind it until it completes or is dead-lettered", fmt_count(n))}
                                </span>
                            }.into_any()),
                            _ => None,
                        };
                        view! { <br/><span class="muted">{format!("in receipt order with {key}")}</span>{held} }
                    });
                    // Only this destination's dispatch is revived.
                    let revive = (d.state == State::Dead)
                        .then_some(event.first_delivery_id)
                        .flatten()
                        .map(|first| view! {
                            <RedeliverButton delivery_id=first label="Re-deliver here" destination=d.destination.clone()/>
                        });
                    view! {
                        <tr data-destination=d.destination.clone()>
                            <td><code>{d.destination.clone()}</code></td>
                            <td><StateBadge state=d.state/></td>
                            <td>{d.attempt_count}</td>
                            <td class="small">{details}{order}</td>
                            <td>{revive}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        <h2>"Timeline"</h2>
        {more}
        <ol class="timeline" data-testid="timeline">
            {timeline.into_iter().map(|entry| match entry {
                TimelineEntry::Delivery(d) => {
                    let kind = if d.redelivery_of.is_some() {
                        "re-delivery"
                    } else if Some(d.id) == event.first_delivery_id {
                        "first delivery"
                    } else if d.outcome == Outcome::Claimed {
                        "delivery"
                    } else {
                        "provider retry or duplicate"
                    };
                    view! {
                        <li class="tl-delivery" data-kind="delivery">
                            <span class="tl-time"><When at=d.received_at ms=true/></span>
                            <span class="tl-what">
                                <a href=format!("/deliveries/{}", d.id)>{kind}</a>
                                " " <OutcomeBadge row=d.clone()/> " answered " {d.http_status}
                            </span>
                        </li>
                    }.into_any()
                }
                TimelineEntry::Attempt(a) => view! { <AttemptItem a/> }.into_any(),
            }).collect_view()}
        </ol>
        <h2>"Payload"</h2>
        {match first_delivery {
            Some(d) => view! { <DeliveryFacts d/> }.into_any(),
            None => view! { <p class="muted">"The first delivery is no longer stored."</p> }.into_any(),
        }}
    }
}

/// Forced re-execution of a completed event: admin only, typed key and a
/// reason, audit-logged (spec section 6).
#[component]
fn ForceForm(event_id: i64, completed: Vec<String>) -> impl IntoView {
    let action = ServerAction::<ForceReexecution>::new();
    let completed = StoredValue::new(completed);
    let result = move || {
        action.value().get().map(|r| match r {
            Ok(message) => view! { <p class="result ok" role="status">{message}</p> }.into_any(),
            Err(e) => {
                view! { <p class="result refused" role="alert">{error_text(&e)}</p> }.into_any()
            }
        })
    };
    view! {
        <IfRole role=Role::Admin>
            <details class="force" data-testid="force">
                <summary>"Force re-execution (admin)"</summary>
                <p class="small">
                    "The application will receive this completed event again, with the same Idempotency-Key and "
                    <code>"x-replaysafe-forced: true"</code> ". Type the event's key to confirm."
                </p>
                <ActionForm action=action>
                    <input type="hidden" name="event_id" value=event_id/>
                    <label>"Event key" <input name="confirm_key" required autocomplete="off"/></label>
                    <label>"Reason" <input name="reason" required size="40"/></label>
                    <label>"Destination"
                        <select name="destination">
                            <option value="">"every completed one"</option>
                            {completed.get_value().into_iter().map(|d| view! { <option value=d.clone()>{d.clone()}</option> }).collect_view()}
                        </select>
                    </label>
                    <button type="submit" class="danger" disabled=move || action.pending().get()>"Force re-execution"</button>
                </ActionForm>
                {result}
            </details>
        </IfRole>
    }
}

/// Gives up on a waiting event by hand (operator; audit-logged): it goes
/// dead with the reason, and an ordered key it holds goes on.
#[component]
fn DeadLetterForm(event_id: i64, waiting: Vec<String>) -> impl IntoView {
    let action = ServerAction::<DeadLetterEvent>::new();
    let waiting = StoredValue::new(waiting);
    let result = move || {
        action.value().get().map(|r| match r {
            Ok(done) => view! { <p class="result ok" role="status">{done.message}</p> }.into_any(),
            Err(e) => {
                view! { <p class="result refused" role="alert">{error_text(&e)}</p> }.into_any()
            }
        })
    };
    view! {
        <IfRole role=Role::Operator>
            <details class="force" data-testid="dead-letter">
                <summary>"Dead-letter by hand"</summary>
                <p class="small">
                    "Stop retrying: the event goes dead with your reason, and events of its ordering key "
                    "waiting behind it go on. It can be re-delivered later."
                </p>
                <ActionForm action=action>
                    <input type="hidden" name="event_id" value=event_id/>
                    <label>"Reason" <input name="reason" required size="40"/></label>
                    <label>"Destination"
                        <select name="destination">
                            <option value="">"every waiting one"</option>
                            {waiting.get_value().into_iter().map(|d| view! { <option value=d.clone()>{d.clone()}</option> }).collect_view()}
                        </select>
                    </label>
                    <button type="submit" class="danger" disabled=move || action.pending().get()>"Dead-letter"</button>
                </ActionForm>
                {result}
            </details>
        </IfRole>
    }
}

#[component]
fn AttemptItem(a: AttemptRow) -> impl IntoView {
    let ok = a.status.is_some_and(|s| (200..300).contains(&s));
    let class = if a.finished_at.is_none() {
        "badge badge-warn"
    } else if ok {
        "badge badge-ok"
    } else {
        "badge badge-bad"
    };
    let words = match (a.status, &a.finished_at) {
        (_, None) => "in flight".to_owned(),
        (Some(s), _) => format!("HTTP {s}"),
        (None, _) => "no answer".to_owned(),
    };
    let latency = a
        .latency_ms
        .map(|ms| format!(" in {}", fmt_ms(Some(ms as f64))));
    let error = a
        .error
        .clone()
        .map(|e| view! { <div class="tl-detail bad-text">{e}</div> });
    let excerpt = a.response_excerpt.clone().filter(|e| !e.is_empty()).map(|e| view! {
        <details class="tl-detail"><summary>"Response excerpt"</summary><pre class="payload">{e}</pre></details>
    });
    let next = a
        .next_attempt_at
        .map(|n| view! { <div class="tl-detail">"Next retry at " <When at=n ms=true zoned=true ago=true/></div> });
    view! {
        <li class="tl-attempt" data-kind="attempt">
            <span class="tl-time"><When at=a.started_at ms=true/></span>
            <span class="tl-what">
                {format!("attempt {} to {} by {}", a.number, a.destination, a.worker)} " "
                <span class=class>{words}</span>{latency}
            </span>
            {error}
            {excerpt}
            {next}
        </li>
    }
}

/// A delivery's record: verification, request line, headers and payload.
#[component]
fn DeliveryFacts(d: DeliveryDetail) -> impl IntoView {
    let verified = if d.verified {
        view! { <span class="badge badge-ok">"verified"</span> }.into_any()
    } else {
        view! { <span class="badge badge-bad">"not verified"</span> }.into_any()
    };
    let query = d.query.clone().map(|q| format!("?{q}")).unwrap_or_default();
    view! {
        <dl class="facts">
            <dt>"Verification"</dt><dd>{verified} " " {d.verification.clone().unwrap_or_default()}</dd>
            <dt>"Request"</dt><dd><code>{format!("{} /hooks/{}{query}", d.method, d.row.source)}</code></dd>
            <dt>"Content type"</dt><dd>{d.content_type.clone().unwrap_or_else(|| "none".into())}</dd>
            <dt>"Size"</dt><dd>{format!("{} bytes", fmt_count(d.body_size as i64))}</dd>
            {d.excerpt.clone().map(|e| view! {
                <dt>"Stored"</dt>
                <dd data-testid="excerpt">
                    {format!(
                        "An excerpt: the first {} bytes of the body, headers and query cut to size (a rejected request is not stored whole). ",
                        fmt_count(e.kept as i64)
                    )}
                    {e.sha256.map(|h| view! { "SHA-256 of the whole body: " <code>{h}</code> })}
                </dd>
            })}
            <dt>"From"</dt><dd>{d.remote_addr.clone().unwrap_or_else(|| "unknown".into())}</dd>
        </dl>
        {d.masked.then(|| view! {
            <p class="muted small" data-testid="masked">
                "Credentials in this request (tokens, keys, signatures) are masked. "
                <IfRole role=Role::Admin>
                    <a href="?reveal=1" data-testid="reveal">"Reveal them (admin; audit-logged)"</a>
                </IfRole>
            </p>
        })}
        <PayloadView payload=d.payload/>
        <h3>"Headers"</h3>
        <p class="muted small">"Authorization, cookies and similar secrets were redacted before storing."</p>
        <HeadersTable headers=d.headers/>
    }
}

#[component]
pub fn DeliveryPage() -> impl IntoView {
    let id = id_param("id");
    let reveal = reveal_param();
    let data = Resource::new(
        move || (id(), reveal()),
        |(id, reveal)| async move {
            match id {
                Some(id) => get_delivery(id, reveal).await,
                None => Err(ServerFnError::new("delivery not found")),
            }
        },
    );
    view! {
        <section class="page">
            <p class="crumbs"><a href="/deliveries">"Deliveries"</a> " / delivery"</p>
            <Transition fallback=|| view! { <p class="muted">"Loading the delivery…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(d) => {
                            let event = d.row.event_id.map(|e| view! {
                                <p><a href=format!("/events/{e}")>"Open its event's timeline"</a></p>
                            });
                            let reason = d.row.reject_reason.clone().map(|r| view! {
                                <p class="error">"Rejected: " {r}</p>
                            });
                            view! {
                                <h1>"Delivery " {d.row.id}</h1>
                                <p>
                                    <OutcomeBadge row=d.row.clone()/>
                                    {format!(" answered {} at ", d.row.http_status)}
                                    <When at=d.row.received_at ms=true zoned=true ago=true/>
                                </p>
                                {reason}
                                {event}
                                {if d.row.reject_kind.as_deref() == Some("timestamp") {
                                    view! { <PastWindowRedeliver delivery_id=d.row.id/> }.into_any()
                                } else {
                                    view! { <RedeliverButton delivery_id=d.row.id label="Re-deliver this delivery"/> }.into_any()
                                }}
                                <DeliveryFacts d/>
                            }.into_any()
                        }
                        Err(e) => view! { <h1>"Delivery"</h1><ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}
