use std::time::Duration;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::alerts::Condition;
use crate::api::overview::{load_overview, Figures, Overview, SourceFigures, Window, COUNT_CAP};
use crate::charts::{Chart, ChartsState, Kind, Series};
use crate::components::*;
use crate::reader::Reader;

/// The overview refreshes itself this often (it reads rollups: cheap).
const REFRESH: Duration = Duration::from_secs(5);

#[component]
pub fn OverviewPage() -> impl IntoView {
    let query = use_query_map();
    let params = move || {
        let q = query.get();
        (
            q.get("source").unwrap_or_default(),
            q.get("window").unwrap_or_else(|| "hour".into()),
        )
    };
    let data = Resource::new(params, |(source, window)| {
        load_overview(Some(source).filter(|s| !s.is_empty()), window)
    });
    // The refresh redraws the charts; what the reader does with them stays.
    ChartsState::provide();
    Effect::new(move |_| {
        let handle = set_interval_with_handle(move || data.refetch(), REFRESH).ok();
        on_cleanup(move || {
            if let Some(handle) = handle {
                handle.clear();
            }
        });
    });
    view! {
        <section class="page">
            <h1>"Overview"</h1>
            <Transition fallback=|| view! { <p class="muted">"Loading figures…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(o) => view! { <OverviewBody o/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

fn link(source: &Option<String>, window: Window) -> String {
    match source {
        Some(s) => format!("/overview?window={}&source={s}", window.as_str()),
        None => format!("/overview?window={}", window.as_str()),
    }
}

#[component]
fn OverviewBody(o: Overview) -> impl IntoView {
    let reader = Reader::current();
    let Overview {
        window,
        source,
        generated_at,
        totals,
        backlog,
        per_source,
        series,
        bucket_minutes,
        alerts,
        replica_lag_secs,
    } = o;
    let windows = [Window::Hour, Window::Day, Window::Week]
        .into_iter()
        .map(|w| {
            let current = (w == window).then_some("page");
            view! { <a href=link(&source, w) aria-current=current class="pill">{w.label()}</a> }
        })
        .collect_view();
    let scopes = std::iter::once(None)
        .chain(per_source.iter().map(|s| Some(s.slug.clone())))
        .map(|s| {
            let current = (s == source).then_some("page");
            let label = s.clone().unwrap_or_else(|| "all sources".into());
            view! { <a href=link(&s, window) aria-current=current class="pill">{label}</a> }
        })
        .collect_view();
    let scope_label = source.clone().unwrap_or_else(|| "all sources".into());
    let with_date = window != Window::Hour;
    let times: Vec<i64> = series.iter().map(|p| p.at_ms).collect();
    let per_bar = match bucket_minutes {
        1 => "per minute".to_owned(),
        m if m % 60 == 0 => format!("per {} hours", m / 60),
        m => format!("per {m} minutes"),
    };
    let count = |v: f64| fmt_count(v as i64);
    let rates: Vec<Option<f64>> = series
        .iter()
        .map(|p| {
            let verified = p.deliveries - p.rejected;
            (verified > 0).then(|| p.duplicates as f64 / verified as f64)
        })
        .collect();
    view! {
        <div class="controls">
            <nav aria-label="Time window" class="pills">{windows}</nav>
            <nav aria-label="Source" class="pills">{scopes}</nav>
        </div>
        <Alerts alerts/>
        <ReplicaLag secs=replica_lag_secs/>
        <p class="muted small">
            {move || format!("{scope_label}, {}; figures as of {}, refreshed every 5 s.", window.label(), reader.stamp(&generated_at))}
        </p>
        <Stats totals=totals.clone() backlog=backlog/>
        <div class="charts">
            <Chart
                title=format!("Deliveries {per_bar}")
                kind=Kind::Bars
                times=times.clone()
                series=vec![
                    Series { name: "claimed", class: "s-ok", values: series.iter().map(|p| Some((p.deliveries - p.duplicates - p.rejected) as f64)).collect() },
                    Series { name: "duplicates", class: "s-info", values: series.iter().map(|p| Some(p.duplicates as f64)).collect() },
                    Series { name: "rejected", class: "s-bad", values: series.iter().map(|p| Some(p.rejected as f64)).collect() },
                ]
                with_date
                format=count
                whole=true
            />
            <Chart
                title="Duplicate rate".to_owned()
                kind=Kind::Line
                times=times.clone()
                series=vec![Series { name: "duplicate rate", class: "s-info", values: rates }]
                with_date
                format=|v: f64| fmt_rate(Some(v))
            />
            <Chart
                title="Acknowledgement p99".to_owned()
                kind=Kind::Line
                times=times.clone()
                series=vec![Series { name: "p99", class: "s-info", values: series.iter().map(|p| p.ack_p99_ms).collect() }]
                with_date
                format=|v: f64| fmt_ms(Some(v))
            />
            <Chart
                title="End-to-end p99 (received to completed)".to_owned()
                kind=Kind::Line
                times=times
                series=vec![Series { name: "p99", class: "s-info", values: series.iter().map(|p| p.e2e_p99_ms).collect() }]
                with_date
                format=|v: f64| fmt_ms(Some(v))
            />
        </div>
        <h2>"By source"</h2>
        <SourceFiguresTable rows=per_source window/>
    }
}

#[component]
fn Alerts(alerts: Vec<Condition>) -> impl IntoView {
    alerts
        .into_iter()
        .map(|a| {
            let class = if a.rule == "duplicate_storm" { "banner banner-bad" } else { "banner banner-warn" };
            view! {
                <div class=class role="alert" data-testid=a.rule.replace('_', "-") data-source=a.source.clone()>
                    <strong>{a.title()} " on " <code>{a.source.clone()}</code></strong>
                    {format!(": {}. ", a.summary)}
                    <a href=a.link.clone()>{a.link_text()}</a> " · " <a href="/alerts">"All alerts"</a>
                </div>
            }
        })
        .collect_view()
}

#[component]
fn Stats(totals: Figures, backlog: crate::api::overview::Backlog) -> impl IntoView {
    let stat = |label: &'static str, value: String, note: String, testid: &'static str| {
        view! {
            <div class="stat" data-testid=testid>
                <div class="stat-label">{label}</div>
                <div class="stat-value">{value}</div>
                <div class="stat-note">{note}</div>
            </div>
        }
    };
    view! {
        <div class="stats">
            {stat("Deliveries", fmt_count(totals.deliveries),
                format!("{} claimed, {} rejected", fmt_count(totals.claimed), fmt_count(totals.rejected)), "stat-deliveries")}
            {stat("Duplicate rate", fmt_rate(totals.duplicate_rate()),
                format!("{} duplicates", fmt_count(totals.duplicates)), "stat-duplicates")}
            {stat("Ack latency p50 / p95 / p99", format!("{} / {} / {}",
                fmt_ms(totals.ack_ms(0.5)), fmt_ms(totals.ack_ms(0.95)), fmt_ms(totals.ack_ms(0.99))),
                "receipt to claim written; the commit wait is in /metrics".into(), "stat-ack")}
            {stat("End-to-end p50 / p95 / p99", format!("{} / {} / {}",
                fmt_ms(totals.e2e_ms(0.5)), fmt_ms(totals.e2e_ms(0.95)), fmt_ms(totals.e2e_ms(0.99))),
                "first receipt to completed".into(), "stat-e2e")}
            {stat("Backlog", fmt_capped(backlog.total(), COUNT_CAP),
                format!("{} due, {} waiting, {} in flight; oldest due waited {}",
                    fmt_capped(backlog.due, COUNT_CAP), fmt_capped(backlog.waiting, COUNT_CAP),
                    fmt_count(backlog.in_flight), fmt_age(backlog.oldest_due_secs)), "stat-backlog")}
            {stat("Dead letters", fmt_capped(backlog.dead_letters, COUNT_CAP),
                format!("events; {} in the last 10 minutes", fmt_count(backlog.dead_last_10m)), "stat-dead")}
            {stat("Signature failures", fmt_count(totals.bad_signature),
                "rejected with 401".into(), "stat-signatures")}
            {stat("Attempts per event", totals.attempts_per_event().map_or("–".into(), |a| format!("{a:.2}")),
                format!("{} attempts, {} failed", fmt_count(totals.attempts), fmt_count(totals.attempts_failed)), "stat-attempts")}
        </div>
    }
}

#[component]
fn SourceFiguresTable(rows: Vec<SourceFigures>, window: Window) -> impl IntoView {
    view! {
        <table class="data" data-testid="per-source">
            <thead>
                <tr>
                    <th scope="col">"Source"</th>
                    <th scope="col">"Deliveries"</th>
                    <th scope="col">"Duplicate rate"</th>
                    <th scope="col">"Ack p99"</th>
                    <th scope="col">"End-to-end p99"</th>
                    <th scope="col">"Backlog"</th>
                    <th scope="col">"Dead letters"</th>
                    <th scope="col">"Signature failures"</th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|s| {
                    let f = s.figures;
                    let paused = s.paused.then(|| view! { " " <span class="badge badge-warn">"paused"</span> });
                    view! {
                        <tr data-slug=s.slug.clone()>
                            <th scope="row">
                                <a href=format!("/overview?window={}&source={}", window.as_str(), s.slug)><code>{s.slug.clone()}</code></a>
                                <span class="muted">" " {s.provider}</span>{paused}
                            </th>
                            <td>{fmt_count(f.deliveries)}</td>
                            <td>{fmt_rate(f.duplicate_rate())}</td>
                            <td>{fmt_ms(f.ack_ms(0.99))}</td>
                            <td>{fmt_ms(f.e2e_ms(0.99))}</td>
                            <td><BacklogCell backlog=s.backlog.clone()/></td>
                            <td><DeadLettersCell slug=s.slug.clone() backlog=s.backlog/></td>
                            <td>{fmt_count(f.bad_signature)}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}
