use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::actions::{redeliver_dead, DeadFilter, RedeliveryResult};
use crate::api::events::{list_dead, DeadLetterPage};
use crate::auth::Role;
use crate::components::*;

#[component]
pub fn DeadLettersPage() -> impl IntoView {
    let query = use_query_map();
    let params = move || {
        let q = query.get();
        let before = q.get("before").and_then(|v| v.parse::<i64>().ok());
        let before_id = q.get("before_id").and_then(|v| v.parse::<i64>().ok());
        (q.get("source").unwrap_or_default(), before, before_id)
    };
    let data = Resource::new(params, |(source, before, before_id)| {
        list_dead(Some(source), before, before_id)
    });
    view! {
        <section class="page">
            <h1>"Dead letters"</h1>
            <BulkRedeliver source=params().0/>
            <p class="lede">
                "Events the destination refused or that ran out of attempts. Nothing is lost: the payload is kept until it is re-delivered or retention removes it."
            </p>
            <Transition fallback=|| view! { <p class="muted">"Loading dead letters…"</p> }>
                {move || Suspend::new(async move {
                    let (source, ..) = params();
                    match data.await {
                        Ok(page) => view! { <DeadTable page source/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn DeadTable(page: DeadLetterPage, source: String) -> impl IntoView {
    let scope = (!source.is_empty()).then(|| {
        view! { <p>"Source " <code>{source.clone()}</code> ". " <a href="/dead">"Show every source"</a></p> }
    });
    if page.rows.is_empty() {
        return view! { {scope} <p class="empty">"No dead letters. Every event was delivered or is still being tried."</p> }.into_any();
    }
    let next = page.older.map(|(micros, id)| {
        let source = if source.is_empty() { String::new() } else { format!("source={source}&") };
        view! { <a href=format!("/dead?{source}before={micros}&before_id={id}") rel="next">"Older →"</a> }
    });
    view! {
        {scope}
        <table class="data" data-testid="dead-table">
            <thead>
                <tr>
                    <th scope="col">"Dead since (UTC)"</th>
                    <th scope="col">"Source"</th>
                    <th scope="col">"Key"</th>
                    <th scope="col">"Reason"</th>
                    <th scope="col">"Attempts"</th>
                    <th scope="col">"Deliveries"</th>
                    <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                </tr>
            </thead>
            <tbody>
                {page.rows.into_iter().map(|d| view! {
                    <tr data-event=d.id>
                        <td>{d.died_at}</td>
                        <td><a href=format!("/dead?source={}", d.source)><code>{d.source.clone()}</code></a></td>
                        <td><a href=format!("/events/{}", d.id)><code>{d.idem_key}</code></a></td>
                        <td class="bad-text">{d.dead_reason.unwrap_or_default()}</td>
                        <td>{d.attempt_count}</td>
                        <td>{d.receive_count}</td>
                        <td>{d.first_delivery_id.map(|first| view! { <RedeliverButton delivery_id=first label="Re-deliver"/> })}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <nav class="pager" aria-label="Pages">{next}</nav>
    }
    .into_any()
}

/// Re-delivers every dead event matching a filter, a step at a time, each
/// through the same guard as a single re-delivery; shows progress and each
/// event's outcome.
#[component]
fn BulkRedeliver(source: String) -> impl IntoView {
    let results = RwSignal::new(Vec::<RedeliveryResult>::new());
    let remaining = RwSignal::new(None::<i64>);
    let running = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let (source_in, from_in, to_in, reason_in) = (
        NodeRef::<leptos::html::Input>::new(),
        NodeRef::<leptos::html::Input>::new(),
        NodeRef::<leptos::html::Input>::new(),
        NodeRef::<leptos::html::Input>::new(),
    );
    let start = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let value =
            |r: NodeRef<leptos::html::Input>| r.get().map(|i| i.value()).unwrap_or_default();
        let filter = DeadFilter {
            source: value(source_in),
            from: value(from_in),
            to: value(to_in),
            reason: value(reason_in),
        };
        results.set(Vec::new());
        error.set(None);
        running.set(true);
        leptos::task::spawn_local(async move {
            let mut after = None;
            loop {
                match redeliver_dead(filter.clone(), after).await {
                    Ok(step) => {
                        results.update(|r| r.extend(step.results));
                        remaining.set(Some(step.remaining));
                        match step.next_after {
                            Some(next) => after = Some(next),
                            None => break,
                        }
                    }
                    Err(e) => {
                        error.set(Some(error_text(&e)));
                        break;
                    }
                }
            }
            running.set(false);
        });
    };
    let summary = move || {
        let done = results.with(|r| r.len());
        let requeued = results.with(|r| r.iter().filter(|r| r.requeued).count());
        let left = remaining.get().unwrap_or(0);
        (done > 0 || running.get()).then(|| {
            view! {
                <p role="status" data-testid="bulk-progress">
                    <progress max=(done as i64 + left).max(1) value=done></progress>
                    {format!(" {done} re-delivered, {requeued} queued again, {left} left")}
                    {move || (!running.get()).then_some(" — done.")}
                </p>
            }
        })
    };
    view! {
        <IfRole role=Role::Operator>
            {
                let source = source.clone();
                view! {
                    <form class="bulk" on:submit=start aria-label="Re-deliver dead letters in bulk">
                        <label>"Source" <input node_ref=source_in name="source" value=source placeholder="any"/></label>
                        <label>"Dead since (UTC)" <input node_ref=from_in type="datetime-local" name="from"/></label>
                        <label>"Dead before (UTC)" <input node_ref=to_in type="datetime-local" name="to"/></label>
                        <label>"Reason contains" <input node_ref=reason_in name="reason" placeholder="e.g. 400"/></label>
                        <button type="submit" data-testid="bulk-redeliver" disabled=move || running.get()>
                            "Re-deliver all matching"
                        </button>
                    </form>
                }
            }
            {move || error.get().map(|message| view! { <ErrorBox message/> })}
            {summary}
            <ul class="bulk-results" data-testid="bulk-results">
                <For each=move || results.get() key=|r| (r.event_id, r.delivery_id) let:r>
                    <li data-outcome=r.outcome.clone()>
                        <code>{r.idem_key.clone().unwrap_or_default()}</code> ": " {r.message.clone()}
                    </li>
                </For>
            </ul>
        </IfRole>
    }
}
