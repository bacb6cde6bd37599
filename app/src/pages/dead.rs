use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_query_map;
use replaysafe_types::states::JobState;

use crate::api::actions::{DeadFilter, RedeliveryResult};
use crate::api::events::{list_dead, DeadLetterPage};
use crate::api::jobs::{
    bulk_job_progress, cancel_bulk_job, recent_bulk_jobs, start_bulk_job, BulkJob,
};
use crate::auth::Role;
use crate::components::*;
use crate::reader::{filter_time, Reader, When};

#[component]
pub fn DeadLettersPage() -> impl IntoView {
    let query = use_query_map();
    let params = move || {
        let q = query.get();
        let before = q.get("before").and_then(|v| v.parse::<i64>().ok());
        let before_id = q.get("before_id").and_then(|v| v.parse::<i64>().ok());
        (
            q.get("source").unwrap_or_default(),
            q.get("destination").unwrap_or_default(),
            before,
            before_id,
        )
    };
    let data = Resource::new(params, |(source, destination, before, before_id)| {
        list_dead(Some(source), Some(destination), before, before_id)
    });
    view! {
        <section class="page">
            <h1>"Dead letters"</h1>
            <BulkRedeliver
                source=Signal::derive(move || params().0)
                destination=Signal::derive(move || params().1)
            />
            <p class="lede">
                "Events the destination refused or that ran out of attempts. Nothing is lost: the payload is kept until it is re-delivered or retention removes it."
            </p>
            <Transition fallback=|| view! { <p class="muted">"Loading dead letters…"</p> }>
                {move || Suspend::new(async move {
                    let (source, destination, ..) = params();
                    match data.await {
                        Ok(page) => view! { <DeadTable page source destination/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn DeadTable(page: DeadLetterPage, source: String, destination: String) -> impl IntoView {
    let reader = Reader::current();
    let scope = match (source.is_empty(), destination.is_empty()) {
        (true, true) => None,
        (false, true) => Some(view! { <p>"Source " <code>{source.clone()}</code> ". " <a href="/dead">"Show every source"</a></p> }.into_any()),
        (_, false) => Some(view! {
            <p data-testid="dead-scope">
                "Dead at destination " <code>{destination.clone()}</code>
                {(!source.is_empty()).then(|| view! { " of source " <code>{source.clone()}</code> })}
                ". " <a href="/dead">"Show every destination"</a>
            </p>
        }.into_any()),
    };
    if page.rows.is_empty() {
        return view! { {scope} <p class="empty">"No dead letters. Every event was delivered or is still being tried."</p> }.into_any();
    }
    let next = page.older.map(|(micros, id)| {
        let mut scope = String::new();
        for (name, value) in [("source", &source), ("destination", &destination)] {
            if !value.is_empty() {
                // Slugs and destination names need no escaping.
                scope.push_str(&format!("{name}={value}&"));
            }
        }
        view! { <a href=format!("/dead?{scope}before={micros}&before_id={id}") rel="next">"Older →"</a> }
    });
    let chosen = (!destination.is_empty()).then(|| destination.clone());
    view! {
        {scope}
        <table class="data" data-testid="dead-table">
            <thead>
                <tr>
                    <th scope="col">{reader.label("Dead since")}</th>
                    <th scope="col">"Source"</th>
                    <th scope="col">"Key"</th>
                    <th scope="col">"Dead at"</th>
                    <th scope="col">"Reason"</th>
                    <th scope="col">"Attempts"</th>
                    <th scope="col">"Deliveries"</th>
                    <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                </tr>
            </thead>
            <tbody>
                {page.rows.into_iter().map(|d| view! {
                    <tr data-event=d.id>
                        <td><When at=d.died_at ms=true ago=true/></td>
                        <td><a href=format!("/dead?source={}", d.source)><code>{d.source.clone()}</code></a></td>
                        <td><a href=format!("/events/{}", d.id)><code>{d.idem_key}</code></a></td>
                        <td>{d.destinations.iter().map(|name| view! {
                            <a href=format!("/dead?source={}&destination={name}", d.source)><code>{name.clone()}</code></a> " "
                        }).collect_view()}</td>
                        <td class="bad-text">{d.dead_reason.unwrap_or_default()}</td>
                        <td>{d.attempt_count}</td>
                        <td>{d.receive_count}</td>
                        <td>{d.first_delivery_id.map(|first| match chosen.clone() {
                            Some(destination) => view! { <RedeliverButton delivery_id=first label="Re-deliver here" destination/> }.into_any(),
                            None => view! { <RedeliverButton delivery_id=first label="Re-deliver"/> }.into_any(),
                        })}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <nav class="pager" aria-label="Pages">{next}</nav>
    }
    .into_any()
}

/// How often a page watching a bulk job asks for its progress.
const WATCH_MS: u64 = 500;

/// Starts a bulk re-delivery job over every dead event matching a filter
/// (the server runs it, each event through the same guard as a single
/// re-delivery) and follows it: progress, each event's outcome, cancel.
#[component]
/// `source` and `destination` follow the page's URL: a link to another
/// filter (the "Dead at" column's) fills the form with it.
fn BulkRedeliver(source: Signal<String>, destination: Signal<String>) -> impl IntoView {
    let reader = Reader::current();
    let job = RwSignal::new(None::<BulkJob>);
    let results = RwSignal::new(Vec::<RedeliveryResult>::new());
    let after = StoredValue::new(None::<i64>);
    let error = RwSignal::new(None::<String>);
    // Bumped when a job finishes, so the recent jobs are read again.
    let finished = RwSignal::new(0usize);
    let (source_in, destination_in, from_in, to_in, reason_in) = (
        NodeRef::<leptos::html::Input>::new(),
        NodeRef::<leptos::html::Input>::new(),
        NodeRef::<leptos::html::Input>::new(),
        NodeRef::<leptos::html::Input>::new(),
        NodeRef::<leptos::html::Input>::new(),
    );
    // Until the job has finished and every outcome is shown, or a poll
    // failed (the error says why); a memo, so the interval below lives
    // as long as that, not one poll.
    let watching = Memo::new(move |_| {
        error.with(Option::is_none)
            && job.with(|j| {
                j.as_ref()
                    .is_some_and(|j| !j.finished() || results.with(|r| (r.len() as i64) < j.done))
            })
    });
    let busy = StoredValue::new(false);
    Effect::new(move |_| {
        if !watching.get() {
            return;
        }
        let handle = set_interval_with_handle(
            move || {
                let Some(id) = job.with_untracked(|j| j.as_ref().map(|j| j.id)) else {
                    return;
                };
                if busy.get_value() {
                    return;
                }
                busy.set_value(true);
                spawn_local(async move {
                    let answer = bulk_job_progress(id, after.get_value()).await;
                    busy.set_value(false);
                    // A late answer about a job no longer shown is dropped.
                    if job.with_untracked(|j| j.as_ref().map(|j| j.id)) != Some(id) {
                        return;
                    }
                    match answer {
                        Ok(progress) => {
                            if let Some(next) = progress.results.next_after {
                                after.set_value(Some(next));
                            }
                            results.update(|r| r.extend(progress.results.results));
                            if progress.job.finished() {
                                finished.update(|n| *n += 1);
                            }
                            job.set(Some(progress.job));
                        }
                        Err(e) => error.set(Some(error_text(&e))),
                    }
                });
            },
            std::time::Duration::from_millis(WATCH_MS),
        )
        .ok();
        on_cleanup(move || {
            if let Some(h) = handle {
                h.clear();
            }
        });
    });
    let start = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let value =
            |r: NodeRef<leptos::html::Input>| r.get().map(|i| i.value()).unwrap_or_default();
        let filter = DeadFilter {
            source: value(source_in),
            // The times mean what the inputs show: wall times in the
            // reader's zone, sent with their offset.
            from: filter_time(reader.zone_untracked(), &value(from_in)),
            to: filter_time(reader.zone_untracked(), &value(to_in)),
            reason: value(reason_in),
            destination: value(destination_in),
            incident: None,
        };
        job.set(None);
        results.set(Vec::new());
        after.set_value(None);
        error.set(None);
        spawn_local(async move {
            match start_bulk_job(filter).await {
                Ok(started) => job.set(Some(started)),
                Err(e) => error.set(Some(error_text(&e))),
            }
        });
    };
    // The runner stops before its next step; the poll shows when.
    let cancel = move |_| {
        let Some(id) = job.with_untracked(|j| j.as_ref().map(|j| j.id)) else {
            return;
        };
        spawn_local(async move {
            if let Err(e) = cancel_bulk_job(id).await {
                error.set(Some(error_text(&e)));
            }
        });
    };
    let running = move || job.with(|j| j.as_ref().is_some_and(|j| !j.finished()));
    let summary = move || {
        job.get().map(|j| {
            let total = j.total.max(j.done);
            let ending = match j.state {
                JobState::Done => " — done.".to_owned(),
                JobState::Cancelled => format!(
                    " — cancelled by {}.",
                    j.cancelled_by.clone().unwrap_or_default()
                ),
                JobState::Failed => format!(" — failed: {}", j.error.clone().unwrap_or_default()),
                JobState::Queued | JobState::Running => match &j.cancelled_by {
                    Some(by) => format!(" — cancelling (asked by {by}), after the step under way…"),
                    None => String::new(),
                },
            };
            view! {
                <p role="status" data-testid="bulk-progress" data-state=j.state.as_str()>
                    <progress max=total.max(1) value=j.done></progress>
                    {format!(
                        " Job {}: {} of {total} re-delivered, {} queued again, {} refused{ending}",
                        j.id, j.done, j.requeued, j.refused()
                    )}
                </p>
            }
        })
    };
    view! {
        <IfRole role=Role::Operator>
            {
                view! {
                    <form class="bulk" on:submit=start aria-label="Re-deliver dead letters in bulk">
                        <label>"Source" <input node_ref=source_in name="source" value=source prop:value=source placeholder="any"/></label>
                        <label>"Dead at destination" <input node_ref=destination_in name="destination" value=destination prop:value=destination placeholder="any"/></label>
                        <label>{reader.label("Dead since")} " " <input node_ref=from_in type="datetime-local" name="from"/></label>
                        <label>{reader.label("Dead before")} " " <input node_ref=to_in type="datetime-local" name="to"/></label>
                        <label>"Reason contains" <input node_ref=reason_in name="reason" placeholder="e.g. 400"/></label>
                        <button type="submit" data-testid="bulk-redeliver" disabled=running>
                            "Re-deliver all matching"
                        </button>
                        {move || (running() && job.with(|j| j.as_ref().is_some_and(|j| j.cancelled_by.is_none()))).then(|| view! {
                            <button type="button" class="secondary" data-testid="bulk-cancel" on:click=cancel>"Cancel"</button>
                        })}
                    </form>
                }
            }
            {move || error.get().map(|message| view! { <ErrorBox message/> })}
            {summary}
            <ul class="bulk-results" data-testid="bulk-results">
                <For each=move || results.get() key=|r| (r.event_id, r.delivery_id) let:r>
                    <li data-outcome=r.outcome.as_str()>
                        <code>{r.idem_key.clone().unwrap_or_default()}</code> ": " {r.message.clone()}
                    </li>
                </For>
            </ul>
        </IfRole>
        <RecentJobs refresh=finished/>
    }
}

/// Bulk jobs started here, from the API or the CLI, by anyone.
#[component]
fn RecentJobs(refresh: RwSignal<usize>) -> impl IntoView {
    let reader = Reader::current();
    let jobs = Resource::new(move || refresh.get(), |_| recent_bulk_jobs());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match jobs.await {
                    Ok(list) if list.is_empty() => ().into_any(),
                    Ok(list) => view! {
                        <details class="recent-jobs" data-testid="recent-jobs">
                            <summary>{format!("Recent bulk jobs ({})", list.len())}</summary>
                            <table class="data">
                                <thead><tr>
                                    <th scope="col">"Job"</th><th scope="col">{reader.label("Started")}</th>
                                    <th scope="col">"By"</th><th scope="col">"Source"</th>
                                    <th scope="col">"State"</th><th scope="col">"Re-delivered"</th>
                                    <th scope="col">"Queued again"</th>
                                </tr></thead>
                                <tbody>
                                    {list.into_iter().map(|j| view! {
                                        <tr data-job=j.id data-state=j.state.as_str()>
                                            <td>{j.id}</td><td><When at=j.created_at ago=true/></td>
                                            <td>{j.started_by.clone()}</td>
                                            <td><code>{if j.filter.source.is_empty() { "any".to_owned() } else { j.filter.source.clone() }}</code></td>
                                            <td>{j.state.as_str()}</td>
                                            <td>{format!("{} of {}", j.done, j.total.max(j.done))}</td>
                                            <td>{j.requeued}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                        </details>
                    }.into_any(),
                    Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                }
            })}
        </Transition>
    }
}
