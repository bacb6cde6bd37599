//! Pieces the pages share: formatting, outcome badges, payloads.

use leptos::prelude::*;

use crate::api::actions::Redeliver;
use crate::api::deliveries::{outcome_class, DeliveryRow};
use crate::api::events::Payload;
use crate::auth::Role;
use crate::Me;
use replaysafe_types::overview::Backlog;
use replaysafe_types::states::{Outcome, State};

pub fn fmt_count(n: i64) -> String {
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A capped count: "100,000+" at the cap.
pub fn fmt_capped(n: i64, cap: i64) -> String {
    if n >= cap {
        format!("{}+", fmt_count(cap))
    } else {
        fmt_count(n)
    }
}

pub fn fmt_rate(rate: Option<f64>) -> String {
    match rate {
        None => "–".into(),
        Some(r) if r > 0.0 && r < 0.001 => "<0.1%".into(),
        Some(r) => format!("{:.1}%", r * 100.0),
    }
}

pub fn fmt_ms(ms: Option<f64>) -> String {
    match ms {
        None => "–".into(),
        Some(ms) if ms < 10.0 => format!("{ms:.1} ms"),
        Some(ms) if ms < 1_000.0 => format!("{ms:.0} ms"),
        Some(ms) if ms < 60_000.0 => format!("{:.1} s", ms / 1_000.0),
        Some(ms) if ms < 3_600_000.0 => format!("{:.1} min", ms / 60_000.0),
        Some(ms) => format!("{:.1} h", ms / 3_600_000.0),
    }
}

pub fn fmt_age(secs: Option<f64>) -> String {
    match secs {
        None => "–".into(),
        Some(s) if s < 0.0 => "not yet due".into(),
        Some(s) => fmt_ms(Some(s * 1_000.0)),
    }
}

/// A backlog's size, with what of it is due, waiting and in flight.
#[component]
pub fn BacklogCell(backlog: Backlog) -> impl IntoView {
    let cap = replaysafe_types::overview::COUNT_CAP;
    let split = format!(
        "{} due, {} waiting, {} in flight",
        fmt_capped(backlog.due, cap),
        fmt_capped(backlog.waiting, cap),
        fmt_count(backlog.in_flight)
    );
    view! {
        <span data-testid="backlog-total">{fmt_capped(backlog.total(), cap)}</span>
        <div class="muted small" data-testid="backlog-split">{split}</div>
    }
}

/// A source's dead events, linked to their list, with each destination's
/// dead dispatches beside them when more than one destination has some.
#[component]
pub fn DeadLettersCell(slug: String, backlog: Backlog) -> impl IntoView {
    let cap = replaysafe_types::overview::COUNT_CAP;
    let dead: Vec<_> = backlog
        .by_destination
        .into_iter()
        .filter(|d| d.dead_letters > 0)
        .collect();
    let split = (dead.len() > 1).then(|| {
        view! {
            <div class="muted small" data-testid="dead-split">
                {dead.into_iter().enumerate().map(|(i, d)| view! {
                    {(i > 0).then_some(", ")}
                    <a href=format!("/dead?source={}&destination={}", d.source, d.destination)>
                        {d.destination.clone()}
                    </a>
                    {format!(" {}", fmt_capped(d.dead_letters, cap))}
                }).collect_view()}
            </div>
        }
    });
    view! {
        <a href=format!("/dead?source={slug}")>{fmt_capped(backlog.dead_letters, cap)}</a>
        {split}
    }
}

#[component]
pub fn OutcomeBadge(row: DeliveryRow) -> impl IntoView {
    let words = row.outcome_words();
    let title = row.reject_reason.clone().unwrap_or_default();
    view! {
        <span class=outcome_class(row.outcome) title=title data-outcome=row.outcome.as_str()>
            {words}
        </span>
    }
}

#[component]
pub fn StateBadge(state: State) -> impl IntoView {
    let class = match state {
        State::Completed => "badge badge-ok",
        State::Dead => "badge badge-bad",
        State::Retrying | State::Processing => "badge badge-warn",
        State::Queued | State::Filtered => "badge badge-info",
    };
    let words = match state {
        State::Dead => "dead-lettered",
        other => other.as_str(),
    };
    view! { <span class=class data-state=state.as_str()>{words}</span> }
}

/// A server function's error as a person should read it.
pub fn error_text(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(message) => message.clone(),
        other => other.to_string(),
    }
}

/// Says the page reads from a replica that lags (`Reads::shown_lag_secs`):
/// what just happened may be missing from it.
#[component]
pub fn ReplicaLag(secs: Option<f64>) -> impl IntoView {
    secs.map(|secs| {
        view! {
            <p class="banner banner-warn" role="status" data-testid="replica-lag">
                {format!(
                    "This page reads from a replica {} behind the primary: the newest deliveries and actions may not show yet.",
                    fmt_age(Some(secs))
                )}
            </p>
        }
    })
}

#[component]
pub fn ErrorBox(#[prop(into)] message: String) -> impl IntoView {
    view! { <p class="error" role="alert">{message}</p> }
}

/// A stored body, always as text: the browser never parses it as markup.
#[component]
pub fn PayloadView(payload: Payload) -> impl IntoView {
    match payload {
        Payload::Json(text) => view! {
            <pre class="payload" data-testid="payload" data-kind="json">{text}</pre>
        }
        .into_any(),
        Payload::Text(text) => view! {
            <pre class="payload" data-testid="payload" data-kind="text">{text}</pre>
        }
        .into_any(),
        Payload::Binary { hex, shown } => view! {
            <p class="muted">{format!("Not UTF-8 text; the first {shown} bytes in hex:")}</p>
            <pre class="payload" data-testid="payload" data-kind="binary">{hex}</pre>
        }
        .into_any(),
        Payload::Pruned => view! {
            <p class="muted" data-testid="payload">"The payload was removed by retention."</p>
        }
        .into_any(),
        Payload::NotRead => view! {
            <p class="muted" data-testid="payload">"The body was not read: the request declared more than the body limit."</p>
        }
        .into_any(),
    }
}

#[component]
pub fn HeadersTable(headers: Vec<(String, String)>) -> impl IntoView {
    view! {
        <table class="data compact" data-testid="headers">
            <thead><tr><th scope="col">"Header"</th><th scope="col">"Value"</th></tr></thead>
            <tbody>
                {headers
                    .into_iter()
                    .map(|(name, value)| view! { <tr><td><code>{name}</code></td><td><code class="wrap">{value}</code></td></tr> })
                    .collect_view()}
            </tbody>
        </table>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_read_well() {
        assert_eq!(fmt_count(1234567), "1,234,567");
        assert_eq!(fmt_count(12), "12");
        assert_eq!(fmt_capped(100_000, 100_000), "100,000+");
        assert_eq!(fmt_rate(Some(0.1234)), "12.3%");
        assert_eq!(fmt_rate(None), "–");
        assert_eq!(fmt_ms(Some(3.25)), "3.2 ms");
        assert_eq!(fmt_ms(Some(2_500.0)), "2.5 s");
    }
}

/// A counter that moves on every `every` while the page is open: a
/// resource that reads it is read again that often.
pub fn ticking(every: std::time::Duration) -> RwSignal<u64> {
    let tick = RwSignal::new(0u64);
    Effect::new(move |_| {
        let handle = set_interval_with_handle(move || tick.update(|t| *t += 1), every).ok();
        on_cleanup(move || {
            if let Some(h) = handle {
                h.clear();
            }
        });
    });
    tick
}

/// A role to choose, in a form field named `role`; `label` names it for a
/// screen reader where no visible label does.
#[component]
pub fn RoleSelect(
    #[prop(default = Role::Viewer)] selected: Role,
    #[prop(optional, into)] label: Option<String>,
) -> impl IntoView {
    view! {
        <select name="role" aria-label=label>
            {[Role::Viewer, Role::Operator, Role::Admin].into_iter().map(|r| view! {
                <option value=r.as_str() selected=r == selected>{r.as_str()}</option>
            }).collect_view()}
        </select>
    }
}

/// Renders its children only for a signed-in user holding `role`. Hiding is
/// a courtesy: every server function checks the role itself.
#[component]
pub fn IfRole(role: Role, children: ChildrenFn) -> impl IntoView {
    let me = use_context::<Me>();
    let children = StoredValue::new(children);
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                let allowed = match me {
                    Some(me) => matches!(me.await, Ok(Some(user)) if user.can(role)),
                    None => false,
                };
                allowed.then(|| children.with_value(|c| c()))
            })}
        </Transition>
    }
}

/// A delivery rejected for its timestamp: the window stops captured
/// replays, so re-delivering it is an admin's call, with a reason that goes
/// into the audit log. Others see why they cannot.
#[component]
pub fn PastWindowRedeliver(delivery_id: i64) -> impl IntoView {
    let action = ServerAction::<Redeliver>::new();
    let result = move || {
        action.value().get().map(|r| match r {
            Ok(r) => view! { <p class="result ok" role="status" data-outcome=r.outcome.as_str()>{r.message}</p> }
                .into_any(),
            Err(e) => view! { <p class="result refused" role="alert">{error_text(&e)}</p> }.into_any(),
        })
    };
    view! {
        <div class="warning" data-testid="past-window">
            <p>
                <strong>"Rejected for its timestamp."</strong>
                " The timestamp window stops anyone who captured a signed request from replaying it. "
                "Re-delivering this delivery waives the window: only an admin can, giving a reason."
            </p>
            <IfRole role=Role::Admin>
                <ActionForm action=action>
                    <input type="hidden" name="delivery_id" value=delivery_id/>
                    <label>"Reason" <input name="past_window_reason" required size="40" autocomplete="off"/></label>
                    <button type="submit" class="danger" data-testid="redeliver-past-window" disabled=move || action.pending().get()>
                        "Re-deliver despite the timestamp"
                    </button>
                </ActionForm>
                {result}
            </IfRole>
        </div>
    }
}

/// Feeds a stored delivery back through the receiver; shows what the dedup
/// layer decided.
#[component]
pub fn RedeliverButton(
    delivery_id: i64,
    label: &'static str,
    /// Revive only the event's dispatch to this destination.
    #[prop(optional, into)]
    destination: Option<String>,
) -> impl IntoView {
    let action = ServerAction::<Redeliver>::new();
    let destination = StoredValue::new(destination);
    let result = move || {
        action.value().get().map(|r| match r {
            Ok(r) => {
                let class = if r.outcome == Outcome::Claimed {
                    "result ok"
                } else {
                    "result refused"
                };
                let event = r
                    .event_id
                    .map(|e| view! { " " <a href=format!("/events/{e}")>"Open the event"</a> });
                view! { <span class=class data-outcome=r.outcome.as_str()>{r.message}</span>{event} }
                    .into_any()
            }
            Err(e) => view! { <span class="result refused">{error_text(&e)}</span> }.into_any(),
        })
    };
    view! {
        <IfRole role=Role::Operator>
            <div class="action-row">
                <ActionForm action=action attr:class="inline">
                    <input type="hidden" name="delivery_id" value=delivery_id/>
                    {destination.get_value().map(|d| view! { <input type="hidden" name="destination" value=d/> })}
                    <button type="submit" data-testid="redeliver" disabled=move || action.pending().get()>
                        {label}
                    </button>
                </ActionForm>
                <span aria-live="polite" data-testid="redeliver-result">{result}</span>
            </div>
        </IfRole>
    }
}
