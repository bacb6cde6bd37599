use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::reconcile::{
    reconciliation, ReconcileFinding, ReconcileRun, ReconcileSource, RunReconcile,
};
use crate::auth::Role;
use crate::components::*;
use crate::reader::{Reader, When};

/// What reconciliation found: per reconciled source, its latest runs and
/// the events its provider sent that never reached replaysafe, linked to
/// what they became; operators run one on demand. `?source=` shows one.
#[component]
pub fn ReconcilePage() -> impl IntoView {
    let run = ServerAction::<RunReconcile>::new();
    let query = use_query_map();
    let only = move || query.with(|q| q.get("source").filter(|s| !s.is_empty()));
    let data = Resource::new(move || run.version().get(), |_| reconciliation());
    view! {
        <section class="page">
            <h1>"Reconciliation"</h1>
            <p class="lede">
                "What each provider says it sent, compared with what replaysafe received. "
                "An event that never reached us is recovered through the same dedup claim (Stripe) "
                "or sent again by the provider, signed (GitHub), so nothing runs twice."
            </p>
            {move || run.value().get().map(|r| match r {
                Ok(v) => view! { <p class="result ok" role="status" data-testid="run-result">{verdict_sentence(&v)}</p> }.into_any(),
                Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
            })}
            <Transition fallback=|| view! { <p class="muted">"Loading reconciliation…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(page) => {
                            let only = only();
                            let sources: Vec<ReconcileSource> = page
                                .sources
                                .into_iter()
                                .filter(|s| only.as_ref().is_none_or(|o| *o == s.source))
                                .collect();
                            let empty = sources.is_empty().then(|| view! {
                                <p class="empty">"No source is reconciled. A Stripe or GitHub source takes a "
                                    <code>"[source.reconcile]"</code> " table (see the README)."</p>
                            });
                            let others = (!page.not_reconciled.is_empty() && only.is_none()).then(|| view! {
                                <h2>"Not reconciled"</h2>
                                <table class="data" data-testid="not-reconciled">
                                    <thead><tr><th scope="col">"Source"</th><th scope="col">"Provider"</th><th scope="col">"Why"</th></tr></thead>
                                    <tbody>
                                        {page.not_reconciled.into_iter().map(|n| view! {
                                            <tr data-source=n.source.clone()><td><code>{n.source.clone()}</code></td><td>{n.provider}</td><td>{n.why}</td></tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            });
                            view! {
                                {empty}
                                {sources.into_iter().map(|s| view! { <SourcePanel source=s run/> }).collect_view()}
                                {others}
                            }.into_any()
                        }
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

fn verdict_sentence(v: &ReconcileRun) -> String {
    let what = if v.dry_run { "Dry run of" } else { "Run of" };
    let mut s = format!(
        "{what} {}: {} seen, {} already received, {} recovered, {} redelivery requested, {} still missing.",
        v.source, v.seen, v.already_received, v.recovered, v.redelivery_requested, v.still_missing
    );
    if let Some(e) = &v.error {
        s.push_str(&format!(" Stopped early: {e}"));
    }
    s
}

#[component]
fn SourcePanel(source: ReconcileSource, run: ServerAction<RunReconcile>) -> impl IntoView {
    let slug = source.source.clone();
    let schedule = match source.every_minutes {
        Some(m) => format!("every {m} minutes"),
        None => "on demand only".to_owned(),
    };
    let last = source.runs.first().cloned();
    let label = format!("Run reconciliation of {slug}");
    view! {
        <section class="panel" data-testid="reconcile-source" data-source=slug.clone()>
            <h2><code>{source.source.clone()}</code> " · " {source.provider.clone()}</h2>
            <p class="muted">
                {format!("Compared {schedule}, over the last {} hours. ", source.lookback_hours)}
                <span data-testid="missed-total">{format!("{} events found missing in all", fmt_count(source.missed_total))}</span>
                "."
            </p>
            {match last {
                Some(r) => view! { <LastRun run=r/> }.into_any(),
                None => view! { <p class="empty">"Never run yet."</p> }.into_any(),
            }}
            <IfRole role=Role::Operator>
                {
                    let (slug, label) = (source.source.clone(), label.clone());
                    view! {
                        <ActionForm action=run attr:class="filters">
                            <input type="hidden" name="source" value=slug/>
                            <label>"Over" <select name="since_hours">
                                <option value="0">"the whole lookback"</option>
                                <option value="1">"the last hour"</option>
                                <option value="6">"the last 6 hours"</option>
                                <option value="24">"the last day"</option>
                            </select></label>
                            <label>"Mode" <select name="mode">
                                <option value="dry_run">"compare only (dry run)"</option>
                                <option value="recover">"compare and recover"</option>
                            </select></label>
                            <button type="submit" aria-label=label disabled=move || run.pending().get()>"Run now"</button>
                        </ActionForm>
                    }
                }
            </IfRole>
            <h3>"Found missing"</h3>
            <Findings rows=source.findings/>
            <h3>"Recent runs"</h3>
            <Runs rows=source.runs/>
        </section>
    }
}

#[component]
fn LastRun(run: ReconcileRun) -> impl IntoView {
    let reader = Reader::current();
    let (started_at, finished_at, started_by, dry_run) = (
        run.started_at,
        run.finished_at,
        run.started_by.clone(),
        run.dry_run,
    );
    let said = move || {
        let finished = finished_at.as_ref().map_or_else(
            || "still running".to_owned(),
            |t| format!("finished {}", reader.stamp(t)),
        );
        format!(
            "Last run: started {} by {started_by}, {finished}{}.",
            reader.stamp(&started_at),
            if dry_run { " (dry run)" } else { "" }
        )
    };
    let error = run.error.clone().map(|e| {
        view! {
            <p class="error" data-testid="last-run-error">"It stopped early: " {e}</p>
        }
    });
    view! {
        <div data-testid="last-run">
            <p>
                {said}
            </p>
            <div class="stats">
                <div class="stat"><div class="stat-label">"Seen at the provider"</div><div class="stat-value" data-figure="seen">{fmt_count(run.seen)}</div></div>
                <div class="stat"><div class="stat-label">"Already received"</div><div class="stat-value" data-figure="already_received">{fmt_count(run.already_received)}</div></div>
                <div class="stat"><div class="stat-label">"Recovered"</div><div class="stat-value" data-figure="recovered">{fmt_count(run.recovered)}</div></div>
                <div class="stat"><div class="stat-label">"Redelivery requested"</div><div class="stat-value" data-figure="redelivery_requested">{fmt_count(run.redelivery_requested)}</div></div>
                <div class="stat"><div class="stat-label">"Still missing"</div><div class="stat-value" data-figure="still_missing">{fmt_count(run.still_missing)}</div></div>
                <div class="stat"><div class="stat-label">"Provider counts failed, we completed"</div><div class="stat-value" data-figure="provider_failed_we_completed">{fmt_count(run.provider_failed_we_completed)}</div></div>
            </div>
            {error}
        </div>
    }
}

#[component]
fn Findings(rows: Vec<ReconcileFinding>) -> impl IntoView {
    let reader = Reader::current();
    if rows.is_empty() {
        return view! { <p class="empty">"Nothing found missing yet."</p> }.into_any();
    }
    view! {
        <table class="data" data-testid="findings">
            <thead><tr>
                <th scope="col">"Provider's id"</th><th scope="col">"Type"</th>
                <th scope="col">{reader.label("Found")}</th><th scope="col">"What the run did"</th>
                <th scope="col">"Now"</th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|f| {
                    let did = match (f.verdict.as_str(), f.missing_why.as_deref()) {
                        ("recovered", _) => "recovered from the provider's list".to_owned(),
                        ("redelivery_requested", _) => format!("asked the provider to send it again ({}×)", f.redelivery_requests),
                        (_, Some("dry_run")) => "found by a dry run: a real run would act on it".to_owned(),
                        (_, Some("refused")) => "the provider cannot send it again (too old or gone)".to_owned(),
                        (_, Some("given_up")) => format!("still missing after {} redelivery requests: asked no more", f.redelivery_requests),
                        (_, Some("unkeyed")) => "the provider's copy has no key: see the logs".to_owned(),
                        _ => "the run stopped before acting on it: run again".to_owned(),
                    };
                    let now = match (f.event_id, f.state) {
                        (Some(id), Some(state)) => view! {
                            <a href=format!("/events/{id}")>"event " {id}</a> " " <StateBadge state/>
                        }.into_any(),
                        _ => view! { <span class="badge badge-bad">"not received"</span> }.into_any(),
                    };
                    view! {
                        <tr data-key=f.idem_key.clone() data-verdict=f.verdict.clone()>
                            <td><code>{f.idem_key.clone()}</code></td>
                            <td>{f.event_type.clone().unwrap_or_default()}</td>
                            <td><When at=f.found_at ago=true/><div class="muted small">"last " <When at=f.last_found_at/></div></td>
                            <td>{did}</td>
                            <td>{now}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

#[component]
fn Runs(rows: Vec<ReconcileRun>) -> impl IntoView {
    let reader = Reader::current();
    if rows.is_empty() {
        return ().into_any();
    }
    view! {
        <table class="data" data-testid="runs">
            <thead><tr>
                <th scope="col">{reader.label("Started")}</th><th scope="col">"By"</th>
                <th scope="col">"Seen"</th><th scope="col">"Received"</th>
                <th scope="col">"Recovered"</th><th scope="col">"Redelivery asked"</th>
                <th scope="col">"Missing"</th><th scope="col">"Outcome"</th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|r| view! {
                    <tr data-run=r.id>
                        <td><When at=r.started_at ago=true/>{r.dry_run.then(|| view! { <span class="muted small">" dry run"</span> })}</td>
                        <td>{r.started_by.clone()}</td>
                        <td>{fmt_count(r.seen)}</td>
                        <td>{fmt_count(r.already_received)}</td>
                        <td>{fmt_count(r.recovered)}</td>
                        <td>{fmt_count(r.redelivery_requested)}</td>
                        <td>{fmt_count(r.still_missing)}</td>
                        <td>{match (&r.error, &r.finished_at) {
                            (Some(e), _) => e.clone(),
                            (None, Some(_)) => "complete".to_owned(),
                            (None, None) => "running".to_owned(),
                        }}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
