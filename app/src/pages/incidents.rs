use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};
use replaysafe_types::states::IncidentState;

use crate::api::incidents::{
    get_incident, list_incidents, Incident, IncidentDetail, MoveIncident, RedeliverIncident,
};
use crate::api::jobs::bulk_job_progress;
use crate::auth::Role;
use crate::components::*;
use crate::reader::{Reader, When};

/// How often the pages read incidents again.
const REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

fn state_badge(state: IncidentState) -> &'static str {
    match state {
        IncidentState::Open => "badge badge-bad",
        IncidentState::Acknowledged => "badge badge-warn",
        IncidentState::Resolved => "badge badge-ok",
        IncidentState::Ignored => "badge badge-muted",
    }
}

/// "HTTP 400 invalid currency", "timed out".
fn headline(i: &Incident) -> String {
    if i.fingerprint.is_empty() {
        i.kind.clone()
    } else {
        format!("{} {}", i.kind, i.fingerprint)
    }
}

/// Failures grouped as on-call people think of them: "billing answered 400
/// invalid currency to 41 events since 02:10", newest first.
#[component]
pub fn IncidentsPage() -> impl IntoView {
    let query = use_query_map();
    let state = move || query.with(|q| q.get("state").unwrap_or_default());
    let tick = ticking(REFRESH);
    let data = Resource::new(
        move || (state(), tick.get()),
        |(state, _)| list_incidents(state),
    );
    view! {
        <section class="page">
            <h1>"Incidents"</h1>
            <p class="lede">
                "Failing attempts grouped by source, destination, the answer's status (or the transport error) and its first line, "
                "numbers and ids left out: the same " <code>"400 invalid currency"</code> " is one incident, a new message a new one. "
                "An incident resolves by itself after 10 minutes without a failure of its kind while its destination answered 2xx."
            </p>
            <nav class="filters-inline" aria-label="Incidents by state">
                <a href="/incidents">"All"</a>
                {IncidentState::ALL.iter().map(|s| view! {
                    <a href=format!("/incidents?state={}", s.as_str())>{s.as_str()}</a>
                }).collect_view()}
            </nav>
            <Transition fallback=|| view! { <p class="muted">"Loading incidents…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(rows) if rows.is_empty() => view! {
                            <p class="empty">"No incidents: every destination answered as hoped."</p>
                        }.into_any(),
                        Ok(rows) => view! { <IncidentTable rows/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn IncidentTable(rows: Vec<Incident>) -> impl IntoView {
    let reader = Reader::current();
    view! {
        <table class="data" data-testid="incidents-table">
            <thead>
                <tr>
                    <th scope="col">"Incident"</th>
                    <th scope="col">"Where"</th>
                    <th scope="col">"State"</th>
                    <th scope="col">"Events"</th>
                    <th scope="col">{reader.label("First")}</th>
                    <th scope="col">{reader.label("Last")}</th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|i| {
                    let title = headline(&i);
                    view! {
                        <tr data-incident=i.id data-state=i.state.as_str()>
                            <td><a href=format!("/incidents/{}", i.id)>{title}</a></td>
                            <td><code>{format!("{}/{}", i.source, i.destination)}</code></td>
                            <td>
                                <span class=state_badge(i.state)>{i.state.as_str()}</span>
                                {i.state_changed_by.clone().map(|by| view! { <div class="muted small">{format!("by {by}")}</div> })}
                            </td>
                            <td>{fmt_count(i.count)} <span class="muted small">{format!(" ({})", counted(i.failures, "failure", "failures"))}</span></td>
                            <td><When at=i.first_seen_at/></td>
                            <td><When at=i.last_seen_at ago=true/></td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// One incident: what failed, a sample answer, the affected events, the
/// moves (operators) and the guarded re-delivery of its dead events.
#[component]
pub fn IncidentPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").and_then(|v| v.parse::<i64>().ok()));
    let moved = ServerAction::<MoveIncident>::new();
    let redeliver = ServerAction::<RedeliverIncident>::new();
    let tick = ticking(REFRESH);
    let data = Resource::new(
        move || (id(), moved.version().get(), tick.get()),
        |(id, _, _)| async move {
            match id {
                Some(id) => get_incident(id).await,
                None => Err(ServerFnError::new("no incident has that id")),
            }
        },
    );
    provide_context(moved);
    provide_context(redeliver);
    view! {
        <section class="page">
            <p class="crumbs"><a href="/incidents">"Incidents"</a> " / incident"</p>
            {move || moved.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorBox message=error_text(&e)/> })}
            <Transition fallback=|| view! { <p class="muted">"Loading the incident…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(detail) => view! { <IncidentBody detail/> }.into_any(),
                        Err(e) => view! { <h1>"Incident"</h1><ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn IncidentBody(detail: IncidentDetail) -> impl IntoView {
    let reader = Reader::current();
    let IncidentDetail {
        incident: i,
        affected,
        dead_now,
    } = detail;
    let summary = {
        let i = i.clone();
        move || {
            format!(
                "{}/{} answered {} to {} since {} (last {}, {}).",
                i.source,
                i.destination,
                headline(&i),
                counted(i.count, "event", "events"),
                reader.stamp(&i.first_seen_at),
                reader.stamp(&i.last_seen_at),
                counted(i.failures, "failure", "failures")
            )
        }
    };
    let who = {
        let (state, by, at) = (i.state, i.state_changed_by.clone(), i.state_changed_at);
        move || match (state, &by) {
            (IncidentState::Open, _) => String::new(),
            (IncidentState::Resolved, None) => format!(" by itself at {}", reader.stamp(&at)),
            (_, Some(by)) => format!(" by {by} at {}", reader.stamp(&at)),
            (_, None) => String::new(),
        }
    };
    view! {
        <h1 data-testid="incident-title">{headline(&i)}</h1>
        <p data-testid="incident-facts" data-state=i.state.as_str()>
            <span class=state_badge(i.state)>{i.state.as_str()}</span> {who} " " {summary}
        </p>
        <IncidentMoves id=i.id state=i.state/>
        <Redeliver id=i.id dead_now/>
        <h2>"A sample answer"</h2>
        <p class="small">
            {i.sample_status.map(|s| format!("HTTP {s}")).unwrap_or_else(|| "no answer".into())}
            {i.sample_event_id.map(|e| view! { " to " <a href=format!("/events/{e}")>{format!("event {e}")}</a> })}
        </p>
        <pre class="payload" data-testid="incident-sample">{i.sample_response.clone().unwrap_or_default()}</pre>
        <h2>{format!("Affected events ({})", fmt_count(i.count))}</h2>
        <table class="data" data-testid="incident-events">
            <thead><tr><th scope="col">"Event"</th><th scope="col">"Key"</th><th scope="col">"At this destination now"</th></tr></thead>
            <tbody>
                {affected.into_iter().map(|e| {
                    let state = e.state.clone();
                    view! {
                        <tr data-state=state>
                            <td><a href=format!("/events/{}", e.event_id)>{e.event_id}</a></td>
                            <td><code>{e.idem_key}</code></td>
                            <td>{e.state}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

fn counted(n: i64, one: &str, many: &str) -> String {
    format!("{} {}", fmt_count(n), if n == 1 { one } else { many })
}

/// Acknowledge, resolve, ignore: what the state allows (operators).
#[component]
fn IncidentMoves(id: i64, state: IncidentState) -> impl IntoView {
    let moved = expect_context::<ServerAction<MoveIncident>>();
    let moves: &[(&str, &str)] = match state {
        IncidentState::Open => &[
            ("ack", "Acknowledge"),
            ("resolve", "Resolve"),
            ("ignore", "Ignore"),
        ],
        IncidentState::Acknowledged => &[("resolve", "Resolve"), ("ignore", "Ignore")],
        IncidentState::Ignored => &[("resolve", "Resolve")],
        IncidentState::Resolved => &[],
    };
    view! {
        <IfRole role=Role::Operator>
            <div class="action-row">
                {moves.iter().map(|(how, label)| view! {
                    <ActionForm action=moved attr:class="inline">
                        <input type="hidden" name="id" value=id/>
                        <input type="hidden" name="how" value=*how/>
                        <button type="submit" class="secondary" data-testid=format!("incident-{how}")>{*label}</button>
                    </ActionForm>
                }).collect_view()}
            </div>
        </IfRole>
    }
}

/// "Re-deliver the N affected events": the bulk job with the incident's
/// filter (its events dead at its destination), each through the dedup
/// guard; then its progress until it is done.
#[component]
fn Redeliver(id: i64, dead_now: i64) -> impl IntoView {
    let redeliver = expect_context::<ServerAction<RedeliverIncident>>();
    let progress = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        let Some(Ok(job)) = redeliver.value().get() else {
            return;
        };
        let job_id = job.id;
        let done = StoredValue::new(false);
        let handle = set_interval_with_handle(
            move || {
                if done.get_value() {
                    return;
                }
                leptos::task::spawn_local(async move {
                    if let Ok(p) = bulk_job_progress(job_id, None).await {
                        let j = p.job;
                        done.set_value(j.finished());
                        progress.set(Some(format!(
                            "Job {}: {} of {} re-delivered, {} queued again, {} refused{}",
                            j.id,
                            j.done,
                            j.total.max(j.done),
                            j.requeued,
                            j.refused(),
                            if j.finished() { " — done." } else { "…" }
                        )));
                    }
                });
            },
            std::time::Duration::from_millis(500),
        )
        .ok();
        on_cleanup(move || {
            if let Some(h) = handle {
                h.clear();
            }
        });
    });
    let label = format!(
        "Re-deliver the {} affected events dead at this destination",
        fmt_count(dead_now)
    );
    view! {
        <IfRole role=Role::Operator>
            {
                let label = label.clone();
                view! {
                    <ActionForm action=redeliver attr:class="inline">
                        <input type="hidden" name="id" value=id/>
                        <button type="submit" data-testid="incident-redeliver"
                            disabled=move || dead_now == 0 || redeliver.pending().get() || redeliver.value().get().is_some_and(|r| r.is_ok())>
                            {label}
                        </button>
                    </ActionForm>
                }
            }
            <p class="small muted">"Each goes through the dedup layer as a single re-delivery does: a completed or in-progress event is refused."</p>
            {move || redeliver.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorBox message=error_text(&e)/> })}
            {move || progress.get().map(|p| view! { <p role="status" data-testid="incident-redeliver-progress">{p}</p> })}
        </IfRole>
    }
}
