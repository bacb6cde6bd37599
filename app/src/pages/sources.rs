use leptos::prelude::*;

use crate::api::{list_sources, SourceSummary};

#[component]
pub fn SourcesPage() -> impl IntoView {
    let sources = Resource::new(|| (), |_| list_sources());
    view! {
        <section class="page">
            <h1>"Sources"</h1>
            <p class="lede">
                "Each source is an endpoint " <code>"POST /hooks/{slug}"</code>
                " that verifies one provider's signatures and forwards to its destination."
            </p>
            <Transition fallback=|| view! { <p class="muted">"Loading sources…"</p> }>
                {move || Suspend::new(async move {
                    match sources.await {
                        Ok(rows) if rows.is_empty() => view! {
                            <p class="empty">
                                "No sources are configured. Add a " <code>"[[source]]"</code>
                                " table to the config file and restart."
                            </p>
                        }.into_any(),
                        Ok(rows) => view! { <SourcesTable rows/> }.into_any(),
                        Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn SourcesTable(rows: Vec<SourceSummary>) -> impl IntoView {
    view! {
        <table class="data" data-testid="sources-table">
            <thead>
                <tr>
                    <th scope="col">"Slug"</th>
                    <th scope="col">"Provider"</th>
                    <th scope="col">"Mode"</th>
                    <th scope="col">"Destination"</th>
                    <th scope="col">"State"</th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|s| view! { <SourceRow s/> }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn SourceRow(s: SourceSummary) -> impl IntoView {
    let state = match (s.in_config, s.paused) {
        (false, _) => ("badge badge-muted", "removed from config"),
        (true, true) => ("badge badge-warn", "paused"),
        (true, false) => ("badge badge-ok", "active"),
    };
    let by_operator = s.paused_by_operator.then_some(" (set by an operator)");
    let slug = s.slug.clone();
    view! {
        <tr data-slug=slug>
            <td><code>{s.slug}</code></td>
            <td>{s.provider}</td>
            <td>{s.mode}</td>
            <td>
                {match s.destination {
                    Some(d) => view! { <code>{d}</code> }.into_any(),
                    None => view! { <span class="muted">"none"</span> }.into_any(),
                }}
            </td>
            <td><span class=state.0>{state.1}</span>{by_operator}</td>
        </tr>
    }
}
