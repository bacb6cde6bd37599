use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::events::{list_dead, DeadLetterPage};
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
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <nav class="pager" aria-label="Pages">{next}</nav>
    }
    .into_any()
}
