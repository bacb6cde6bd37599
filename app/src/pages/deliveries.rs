use replaysafe_types::time::Zone;
use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_query_map;

use crate::api::deliveries::{
    list_deliveries, DeliveryFilter, DeliveryPage, DeliveryRow, OUTCOMES, UNRECORDED_HOURS,
};
use crate::api::list_sources;
use crate::components::*;
use crate::reader::{filter_time, input_in, Reader, When};

/// How often the first page asks for newer deliveries.
const POLL: Duration = Duration::from_secs(2);
/// The live list keeps at most this many rows.
const LIVE_ROWS: usize = 200;

#[component]
pub fn DeliveriesPage() -> impl IntoView {
    let query = use_query_map();
    let params = move || {
        let q = query.get();
        let get = |k: &str| q.get(k).unwrap_or_default();
        let filter = DeliveryFilter {
            source: get("source"),
            outcome: get("outcome"),
            status: get("status"),
            key: get("key"),
            from: get("from"),
            to: get("to"),
        };
        let before = q.get("before").and_then(|b| b.parse::<i64>().ok());
        // The zone the times were typed in travels with them, so a link
        // means the same instants to whoever opens it; without one, UTC.
        let typed_in = q
            .get("tz")
            .and_then(|z| Zone::named(&z))
            .unwrap_or(Zone::UTC);
        (filter, before, typed_in)
    };
    let page = Resource::new(
        move || {
            let (mut filter, before, typed_in) = params();
            filter.from = filter_time(typed_in, &filter.from);
            filter.to = filter_time(typed_in, &filter.to);
            (filter, before)
        },
        |(filter, before)| list_deliveries(filter, before, None),
    );
    let sources = Resource::new(|| (), |_| list_sources());
    view! {
        <section class="page">
            <h1>"Deliveries"</h1>
            <p class="lede">"Every request the receiver recorded, newest first, with what the dedup layer did."</p>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    let slugs: Vec<String> = sources.await.map(|s| s.into_iter().map(|s| s.slug).collect()).unwrap_or_default();
                    let (filter, _, typed_in) = params();
                    view! { <FilterForm filter typed_in slugs/> }
                })}
            </Transition>
            <Transition fallback=|| view! { <p class="muted">"Loading deliveries…"</p> }>
                {move || Suspend::new(async move {
                    let (filter, before, typed_in) = params();
                    match page.await {
                        Ok(p) => view! { <DeliveryList page=p filter typed_in live=before.is_none()/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn FilterForm(filter: DeliveryFilter, typed_in: Zone, slugs: Vec<String>) -> impl IntoView {
    let reader = Reader::current();
    let (from, to) = (filter.from.clone(), filter.to.clone());
    let source_options = slugs
        .into_iter()
        .map(|s| {
            let selected = s == filter.source;
            view! { <option value=s.clone() selected=selected>{s.clone()}</option> }
        })
        .collect_view();
    let outcome_options = OUTCOMES
        .iter()
        .map(|o| {
            let selected = *o == filter.outcome;
            view! { <option value=*o selected=selected>{o.replace('_', " ")}</option> }
        })
        .collect_view();
    view! {
        <form method="get" action="/deliveries" class="filters" role="search" aria-label="Filter deliveries">
            <label>"Source"
                <select name="source">
                    <option value="">"any"</option>
                    {source_options}
                </select>
            </label>
            <label>"Outcome"
                <select name="outcome">
                    <option value="">"any"</option>
                    {outcome_options}
                </select>
            </label>
            <label>"Status"
                <input name="status" value=filter.status.clone() placeholder="409 or 4xx" size="8"/>
            </label>
            <label>"Key or provider id"
                <input name="key" value=filter.key.clone() placeholder="evt_… or slug:key" size="24"/>
            </label>
            <label>{reader.label("From")}
                <input type="datetime-local" name="from" value=move || input_in(reader.zone(), typed_in, &from)/>
            </label>
            <label>{reader.label("To")}
                <input type="datetime-local" name="to" value=move || input_in(reader.zone(), typed_in, &to)/>
            </label>
            <input type="hidden" name="tz" value=move || reader.zone().name()/>
            <div class="filter-actions">
                <button type="submit">"Apply"</button>
                <a href="/deliveries">"Clear"</a>
            </div>
        </form>
    }
}

fn page_link(filter: &DeliveryFilter, typed_in: Zone, before: Option<i64>) -> String {
    let times_given = !(filter.from.is_empty() && filter.to.is_empty());
    let tz = if times_given {
        typed_in.name().to_owned()
    } else {
        String::new()
    };
    let mut parts: Vec<String> = [
        ("source", &filter.source),
        ("outcome", &filter.outcome),
        ("status", &filter.status),
        ("key", &filter.key),
        ("from", &filter.from),
        ("to", &filter.to),
        ("tz", &tz),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| {
        format!(
            "{k}={}",
            form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
        )
    })
    .collect();
    if let Some(before) = before {
        parts.push(format!("before={before}"));
    }
    if parts.is_empty() {
        "/deliveries".into()
    } else {
        format!("/deliveries?{}", parts.join("&"))
    }
}

#[component]
fn DeliveryList(
    page: DeliveryPage,
    filter: DeliveryFilter,
    typed_in: Zone,
    live: bool,
) -> impl IntoView {
    let reader = Reader::current();
    if let Some(message) = page.filter_error {
        return view! { <ErrorBox message/> }.into_any();
    }
    let older = page.older;
    let rows = RwSignal::new(page.rows);
    let fresh = RwSignal::new(std::collections::HashSet::<i64>::new());
    let arrived = RwSignal::new(0usize);
    // Someone reading a row at 3 a.m. can stop the table moving under them.
    let paused = RwSignal::new(false);
    if live {
        let mut filter = filter.clone();
        filter.from = filter_time(typed_in, &filter.from);
        filter.to = filter_time(typed_in, &filter.to);
        Effect::new(move |_| {
            let busy = StoredValue::new(false);
            let filter = filter.clone();
            let handle = set_interval_with_handle(
                move || {
                    if busy.get_value() || paused.get_untracked() {
                        return;
                    }
                    busy.set_value(true);
                    let newest = rows.with_untracked(|r| r.first().map(|r| r.id));
                    let filter = filter.clone();
                    spawn_local(async move {
                        if let Ok(newer) =
                            list_deliveries(filter, None, Some(newest.unwrap_or(0))).await
                        {
                            if !newer.rows.is_empty() {
                                let ids: Vec<i64> = newer.rows.iter().map(|r| r.id).collect();
                                arrived.update(|n| *n += ids.len());
                                fresh.update(|f| f.extend(ids));
                                rows.update(|r| {
                                    let mut merged = newer.rows;
                                    merged.append(r);
                                    merged.truncate(LIVE_ROWS);
                                    *r = merged;
                                });
                            }
                        }
                        busy.set_value(false);
                    });
                },
                POLL,
            )
            .ok();
            on_cleanup(move || {
                if let Some(handle) = handle {
                    handle.clear();
                }
            });
        });
    }
    let status = move || match (live, paused.get(), arrived.get()) {
        (false, _, _) => "Older deliveries; new ones show on the first page.".to_owned(),
        (true, true, _) => "Paused: new deliveries wait until you resume.".to_owned(),
        (true, false, 0) => "Live: new deliveries appear here as they arrive.".to_owned(),
        (true, false, n) => format!("Live: {n} new since this page opened."),
    };
    let pause = live.then(|| {
        view! {
            <button type="button" class="secondary" data-testid="live-pause"
                aria-pressed=move || paused.get().to_string()
                on:click=move |_| paused.update(|p| *p = !*p)>
                {move || if paused.get() { "Resume live updates" } else { "Pause live updates" }}
            </button>
        }
    });
    let next = older.map(|b| page_link(&filter, typed_in, Some(b)));
    let newest = (!live).then(|| page_link(&filter, typed_in, None));
    let unrecorded = page.unrecorded.map(|u| {
        let top = u
            .top
            .iter()
            .map(|(address, n)| format!("{address} ({})", fmt_count(*n)))
            .collect::<Vec<_>>()
            .join(", ");
        view! {
            <p class="banner banner-warn" data-testid="unrecorded">
                {format!(
                    "{} more rejected requests in the last {UNRECORDED_HOURS} hours were counted but not recorded: their addresses sent more than the recording rate allows. Most from: {top}.",
                    fmt_count(u.count)
                )}
            </p>
        }
    });
    view! {
        {unrecorded}
        <ReplicaLag secs=page.replica_lag_secs/>
        <p class="muted small" aria-live="polite" data-testid="live-status">{status} " " {pause}</p>
        <Show
            when=move || rows.with(|r| !r.is_empty())
            fallback=|| view! { <p class="empty">"No deliveries match. Send one with " <code>"replaysafe send"</code> ", or clear the filters."</p> }
        >
            <table class="data" data-testid="deliveries-table">
                <thead>
                    <tr>
                        <th scope="col">{reader.label("Received")}</th>
                        <th scope="col">"Source"</th>
                        <th scope="col">"Key"</th>
                        <th scope="col">"Outcome"</th>
                        <th scope="col">"Status"</th>
                        <th scope="col">"Ack"</th>
                    </tr>
                </thead>
                <tbody>
                    <For
                        each=move || rows.get()
                        key=|r| r.id
                        children=move |r: DeliveryRow| {
                            let id = r.id;
                            let is_fresh = move || fresh.with(|f| f.contains(&id));
                            view! { <DeliveryTr r fresh=Signal::derive(is_fresh)/> }
                        }
                    />
                </tbody>
            </table>
        </Show>
        <nav class="pager" aria-label="Pages">
            {newest.map(|href| view! { <a href=href>"← Newest"</a> })}
            {next.map(|href| view! { <a href=href rel="next">"Older →"</a> })}
        </nav>
    }
    .into_any()
}

#[component]
fn DeliveryTr(r: DeliveryRow, fresh: Signal<bool>) -> impl IntoView {
    let detail = format!("/deliveries/{}", r.id);
    let key_cell = match (&r.idem_key, r.event_id) {
        (Some(key), Some(event)) => {
            view! { <a href=format!("/events/{event}")><code>{key.clone()}</code></a> }.into_any()
        }
        (Some(key), None) => view! { <code>{key.clone()}</code> }.into_any(),
        (None, _) => view! { <span class="muted">"none"</span> }.into_any(),
    };
    let redelivery = r
        .redelivery_of
        .map(|_| view! { " " <span class="badge badge-muted">"re-delivery"</span> });
    let ack = r
        .ack_micros
        .map(|us| fmt_ms(Some(us as f64 / 1000.0)))
        .unwrap_or_else(|| "–".into());
    view! {
        <tr data-id=r.id class:fresh=move || fresh.get()>
            <td><a href=detail title="Open this delivery"><When at=r.received_at ms=true ago=true/></a></td>
            <td><code>{r.source.clone()}</code></td>
            <td>{key_cell}</td>
            <td><OutcomeBadge row=r.clone()/>{redelivery}</td>
            <td>{r.http_status}</td>
            <td>{ack}</td>
        </tr>
    }
}
