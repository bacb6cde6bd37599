//! Pieces the pages share: formatting, outcome badges, charts, payloads.

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

/// `MM-DD HH:MM` UTC for a Unix time in milliseconds (civil-from-days).
pub fn fmt_utc_minute(ms: i64, with_date: bool) -> String {
    let minutes = ms.div_euclid(60_000);
    let (days, minute_of_day) = (minutes.div_euclid(1440), minutes.rem_euclid(1440));
    let hm = format!("{:02}:{:02}", minute_of_day / 60, minute_of_day % 60);
    if !with_date {
        return hm;
    }
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    format!("{month:02}-{day:02} {hm}")
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

/// One bar segment series of a stacked bar chart.
#[derive(Clone)]
pub struct Series {
    pub name: &'static str,
    pub class: &'static str,
    pub values: Vec<f64>,
}

const CHART_W: f64 = 720.0;
const CHART_H: f64 = 150.0;
const PAD_LEFT: f64 = 56.0;
const PAD_BOTTOM: f64 = 20.0;

fn x_labels(times: &[i64], with_date: bool) -> impl IntoView {
    let n = times.len().max(1);
    let step = (n / 6).max(1);
    let plot_w = CHART_W - PAD_LEFT;
    times
        .iter()
        .enumerate()
        .filter(|(i, _)| i.is_multiple_of(step))
        .map(|(i, &t)| {
            // Labels stay inside the drawing, even at the right edge.
            let x = (PAD_LEFT + plot_w * (i as f64 + 0.5) / n as f64).min(CHART_W - 34.0);
            view! {
                <text x=format!("{x:.1}") y=format!("{}", CHART_H - 4.0) class="axis" text-anchor="middle">
                    {fmt_utc_minute(t, with_date)}
                </text>
            }
        })
        .collect_view()
}

/// The y axis (0 to the top value) and the x axis.
fn axes(plot_h: f64, top: String) -> impl IntoView {
    let bottom = format!("{}", 8.0 + plot_h);
    view! {
        <line x1=PAD_LEFT y1="8" x2=PAD_LEFT y2=bottom.clone() class="axis-line"/>
        <line x1=PAD_LEFT y1=bottom.clone() x2=CHART_W y2=bottom.clone() class="axis-line"/>
        <text x=PAD_LEFT - 6.0 y="14" class="axis" text-anchor="end">{top}</text>
        <text x=PAD_LEFT - 6.0 y=bottom class="axis" text-anchor="end">"0"</text>
    }
}

/// Stacked bars over time, drawn as SVG, with a legend in words.
#[component]
pub fn BarChart(
    title: String,
    times: Vec<i64>,
    series: Vec<Series>,
    with_date: bool,
    #[prop(into)] format: Callback<f64, String>,
) -> impl IntoView {
    let n = times.len().max(1);
    let totals: Vec<f64> = (0..n)
        .map(|i| {
            series
                .iter()
                .map(|s| s.values.get(i).copied().unwrap_or(0.0))
                .sum()
        })
        .collect();
    let max = totals.iter().copied().fold(0.0, f64::max);
    let scale_max = if max > 0.0 { max } else { 1.0 };
    let plot_w = CHART_W - PAD_LEFT;
    let plot_h = CHART_H - PAD_BOTTOM - 8.0;
    let bar_w = (plot_w / n as f64 * 0.8).max(1.0);
    let mut rects = Vec::new();
    for i in 0..n {
        let mut y = 8.0 + plot_h;
        for s in &series {
            let v = s.values.get(i).copied().unwrap_or(0.0);
            if v <= 0.0 {
                continue;
            }
            let h = plot_h * v / scale_max;
            y -= h;
            let x = PAD_LEFT + plot_w * i as f64 / n as f64 + (plot_w / n as f64 - bar_w) / 2.0;
            let label = format!(
                "{} {}: {}",
                fmt_utc_minute(times.get(i).copied().unwrap_or(0), with_date),
                s.name,
                format.run(v)
            );
            rects.push(view! {
                <rect x=format!("{x:.1}") y=format!("{y:.1}") width=format!("{bar_w:.1}")
                    height=format!("{h:.1}") class=s.class>
                    <title>{label}</title>
                </rect>
            });
        }
    }
    let summary = format!("{title}: peak {}", format.run(max));
    let legend = series
        .iter()
        .map(|s| view! { <li><span class=format!("swatch {}", s.class)></span>{s.name}</li> })
        .collect_view();
    view! {
        <figure class="chart">
            <figcaption>{title.clone()}</figcaption>
            <svg viewBox=format!("0 0 {CHART_W} {CHART_H}") role="img" aria-label=summary>
                {axes(plot_h, format.run(max))}
                {rects}
                {x_labels(&times, with_date)}
            </svg>
            <ul class="legend">{legend}</ul>
        </figure>
    }
}

/// A line over time (gaps where there is no value), drawn as SVG.
#[component]
pub fn LineChart(
    title: String,
    times: Vec<i64>,
    values: Vec<Option<f64>>,
    with_date: bool,
    #[prop(into)] format: Callback<f64, String>,
) -> impl IntoView {
    let n = times.len().max(1);
    let max = values.iter().flatten().copied().fold(0.0, f64::max);
    let scale_max = if max > 0.0 { max } else { 1.0 };
    let plot_w = CHART_W - PAD_LEFT;
    let plot_h = CHART_H - PAD_BOTTOM - 8.0;
    let point = |i: usize, v: f64| {
        (
            PAD_LEFT + plot_w * (i as f64 + 0.5) / n as f64,
            8.0 + plot_h - plot_h * v / scale_max,
        )
    };
    // Consecutive values form one polyline; a gap starts a new one.
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut dots = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) => {
                let (x, y) = point(i, *v);
                current.push_str(&format!("{x:.1},{y:.1} "));
                let label = format!(
                    "{}: {}",
                    fmt_utc_minute(times.get(i).copied().unwrap_or(0), with_date),
                    format.run(*v)
                );
                dots.push(view! {
                    <circle cx=format!("{x:.1}") cy=format!("{y:.1}") r="2.5" class="dot">
                        <title>{label}</title>
                    </circle>
                });
            }
            None if !current.is_empty() => lines.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        lines.push(current);
    }
    let summary = if max > 0.0 {
        format!("{title}: peak {}", format.run(max))
    } else {
        format!("{title}: no data in this window")
    };
    view! {
        <figure class="chart">
            <figcaption>{title.clone()}</figcaption>
            <svg viewBox=format!("0 0 {CHART_W} {CHART_H}") role="img" aria-label=summary>
                {axes(plot_h, format.run(max))}
                {lines.into_iter().map(|points| view! { <polyline points=points class="line"/> }).collect_view()}
                {dots}
                {x_labels(&times, with_date)}
            </svg>
        </figure>
    }
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
        // 2026-11-30 14:46 UTC
        assert_eq!(fmt_utc_minute(1_796_049_960_000, true), "11-30 14:46");
    }
}

/// Renders its children only for a signed-in user holding `role`. Hiding is
/// a courtesy: every server function checks the role itself.
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
