use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::actions::{list_audit, AuditPage as Page};
use crate::components::*;
use crate::reader::{Reader, When};

#[component]
pub fn AuditPage() -> impl IntoView {
    let query = use_query_map();
    let before = move || query.with(|q| q.get("before").and_then(|b| b.parse::<i64>().ok()));
    let data = Resource::new(before, list_audit);
    view! {
        <section class="page">
            <h1>"Audit log"</h1>
            <p class="lede">"Sign-ins, re-deliveries, forced re-executions, pauses and user changes: who, when, what, and how it ended."</p>
            <Transition fallback=|| view! { <p class="muted">"Loading the audit log…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(page) => view! { <AuditTable page/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn AuditTable(page: Page) -> impl IntoView {
    let reader = Reader::current();
    if page.rows.is_empty() {
        return view! { <p class="empty">"Nothing recorded yet."</p> }.into_any();
    }
    let next = page
        .older
        .map(|b| view! { <a href=format!("/audit?before={b}") rel="next">"Older →"</a> });
    view! {
        <table class="data" data-testid="audit-table">
            <thead>
                <tr>
                    <th scope="col">{reader.label("When")}</th>
                    <th scope="col">"Who"</th>
                    <th scope="col">"Action"</th>
                    <th scope="col">"Target"</th>
                    <th scope="col">"Outcome"</th>
                    <th scope="col">"Detail"</th>
                </tr>
            </thead>
            <tbody>
                {page.rows.into_iter().map(|e| {
                    let action = e.action.clone();
                    view! {
                    <tr data-action=action>
                        <td><When at=e.at ago=true/></td>
                        <td>
                            {e.by_token.then_some("token ")}{e.username.unwrap_or_default()}
                            <div class="muted small">{e.remote_addr.unwrap_or_default()}</div>
                        </td>
                        <td><code>{e.action}</code></td>
                        <td>{e.target.unwrap_or_default()}</td>
                        <td>{e.outcome}</td>
                        <td><code class="wrap small">{e.detail.filter(|d| d != "{}").unwrap_or_default()}</code></td>
                    </tr>
                }}).collect_view()}
            </tbody>
        </table>
        <nav class="pager" aria-label="Pages">{next}</nav>
    }
    .into_any()
}
