//! Charts people can read: SVG with ticks on both axes, a readout of the
//! bucket under the pointer or the keyboard's focus (arrow keys move it),
//! and the same figures as a table on request, for a screen reader and for
//! anyone who wants the numbers. Times are in the reader's zone.

use std::collections::{HashMap, HashSet};

use leptos::prelude::*;
use replaysafe_types::time::Time;

use crate::reader::Reader;

/// One series: a stacked segment of a bar chart, or a chart's line.
/// `None`: no value in that bucket (a gap in a line, nothing in a bar).
#[derive(Clone)]
pub struct Series {
    pub name: &'static str,
    pub class: &'static str,
    pub values: Vec<Option<f64>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Stacked bars, one per bucket.
    Bars,
    /// One line through the buckets that have a value.
    Line,
}

/// What the reader is doing with the charts, kept apart from them: a page
/// that refreshes redraws its charts, and an open table, the moment being
/// read (its bucket's start, so a window that slides keeps it) and the
/// keyboard's focus stay where they were.
#[derive(Clone, Copy, Default)]
pub struct ChartsState {
    tables: RwSignal<HashSet<String>>,
    active: RwSignal<HashMap<String, i64>>,
    focused: RwSignal<Option<String>>,
}

impl ChartsState {
    /// The page's (provided once by a page that redraws its charts).
    pub fn provide() {
        provide_context(ChartsState::default());
    }

    fn current() -> ChartsState {
        use_context().unwrap_or_default()
    }
}

const CHART_W: f64 = 720.0;
const CHART_H: f64 = 160.0;
const PAD_LEFT: f64 = 60.0;
const PAD_TOP: f64 = 10.0;
const PAD_BOTTOM: f64 = 22.0;
const Y_TICKS: f64 = 4.0;

/// Round steps for the y axis (1, 2 or 5 times a power of ten, at least
/// `min_step`) and the axis's top, at or above `max`.
fn y_scale(max: f64, min_step: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 1.0);
    }
    let rough = (max / Y_TICKS).max(min_step);
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * magnitude);
    (step, (max / step).ceil() * step)
}

fn time_of(ms: i64) -> Time {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

#[component]
pub fn Chart(
    title: String,
    kind: Kind,
    times: Vec<i64>,
    series: Vec<Series>,
    with_date: bool,
    #[prop(into)] format: Callback<f64, String>,
    /// Counts: the y axis steps by whole numbers.
    #[prop(optional)]
    whole: bool,
) -> impl IntoView {
    let reader = Reader::current();
    let state = ChartsState::current();
    let empty = times.is_empty();
    let n = times.len().max(1);
    let value = |s: &Series, i: usize| s.values.get(i).copied().flatten();
    let totals: Vec<f64> = (0..n)
        .map(|i| match kind {
            Kind::Bars => series.iter().filter_map(|s| value(s, i)).sum(),
            Kind::Line => series
                .iter()
                .filter_map(|s| value(s, i))
                .fold(0.0, f64::max),
        })
        .collect();
    let max = totals.iter().copied().fold(0.0, f64::max);
    let (step, top) = y_scale(max, if whole { 1.0 } else { 0.0 });
    let plot_w = CHART_W - PAD_LEFT;
    let plot_h = CHART_H - PAD_TOP - PAD_BOTTOM;
    let slot = plot_w / n as f64;
    let x_mid = move |i: usize| PAD_LEFT + slot * (i as f64 + 0.5);
    let y_of = move |v: f64| PAD_TOP + plot_h - plot_h * v / top;

    // The y axis: a gridline per step, labelled where the label says
    // something new (tiny rates all read "<0.1%").
    let mut said_last = None;
    // At most a dozen, whatever the scale says.
    let ticks = (0..12)
        .map(|k| k as f64 * step)
        .take_while(|v| *v <= top + step / 2.0)
        .map(|v| {
            let y = format!("{:.1}", y_of(v));
            let label = format.run(v);
            let label = (said_last.as_ref() != Some(&label)).then(|| {
                said_last = Some(label.clone());
                label
            });
            view! {
                <line x1=PAD_LEFT x2=CHART_W y1=y.clone() y2=y.clone() class="grid"/>
                {label.map(|label| view! {
                    <text x=PAD_LEFT - 6.0 y=y class="axis" text-anchor="end" dominant-baseline="middle">
                        {label}
                    </text>
                })}
            }
        })
        .collect_view();
    // The x axis: about six labelled ticks, in the reader's zone.
    let every = (n / 6).max(1);
    let x_ticks = times
        .iter()
        .enumerate()
        .filter(|(i, _)| i.is_multiple_of(every))
        .map(|(i, &ms)| {
            let x = x_mid(i);
            let at = time_of(ms);
            let bottom = PAD_TOP + plot_h;
            view! {
                <line x1=x x2=x y1=bottom y2=bottom + 4.0 class="axis-line"/>
                <text x=format!("{:.1}", x.min(CHART_W - 34.0)) y=CHART_H - 4.0 class="axis" text-anchor="middle">
                    {move || reader.zone().minute(&at, with_date)}
                </text>
            }
        })
        .collect_view();

    let marks = match kind {
        Kind::Bars => {
            let bar_w = (slot * 0.8).max(1.0);
            let mut rects = Vec::new();
            for i in 0..n {
                let mut y = PAD_TOP + plot_h;
                for s in &series {
                    let Some(v) = value(s, i).filter(|v| *v > 0.0) else {
                        continue;
                    };
                    let h = plot_h * v / top;
                    y -= h;
                    rects.push(view! {
                        <rect x=format!("{:.1}", x_mid(i) - bar_w / 2.0) y=format!("{y:.1}")
                            width=format!("{bar_w:.1}") height=format!("{h:.1}") class=s.class/>
                    });
                }
            }
            rects.into_iter().collect_view().into_any()
        }
        Kind::Line => series
            .iter()
            .map(|s| {
                // Consecutive values form one polyline; a gap starts another.
                let mut lines: Vec<String> = Vec::new();
                let mut current = String::new();
                for i in 0..n {
                    match value(s, i) {
                        Some(v) => current.push_str(&format!("{:.1},{:.1} ", x_mid(i), y_of(v))),
                        None if !current.is_empty() => lines.push(std::mem::take(&mut current)),
                        None => {}
                    }
                }
                lines.extend((!current.is_empty()).then_some(current));
                lines
                    .into_iter()
                    .map(|points| view! { <polyline points=points class="line"/> })
                    .collect_view()
            })
            .collect_view()
            .into_any(),
    };

    // The bucket being read, found by its start (gone once the window
    // slides past it), and what it holds.
    let key = title.clone();
    let active = {
        let (key, times) = (key.clone(), times.clone());
        Memo::new(move |_| {
            let at = state.active.with(|a| a.get(&key).copied())?;
            times.iter().position(|t| *t == at)
        })
    };
    let set_active = {
        let (key, times) = (key.clone(), times.clone());
        move |i: usize| {
            if let Some(at) = times.get(i.min(n - 1)) {
                state.active.update(|a| {
                    a.insert(key.clone(), *at);
                })
            }
        }
    };
    let said = {
        let (times, series) = (times.clone(), series.clone());
        move |i: usize| {
            let at = time_of(times.get(i).copied().unwrap_or_default());
            let figures = series
                .iter()
                .map(|s| {
                    let v = value(s, i).map_or_else(|| "no data".to_owned(), |v| format.run(v));
                    if series.len() > 1 {
                        format!("{} {v}", s.name)
                    } else {
                        v
                    }
                })
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "{} {}: {figures}",
                reader.zone().minute(&at, true),
                reader.zone().abbreviation(&at)
            )
        }
    };
    let readout = {
        let said = said.clone();
        move || {
            active.get().map(&said).unwrap_or_else(|| {
                "Point at a bar, or focus the chart and use the arrow keys, to read a moment."
                    .to_owned()
            })
        }
    };
    let cursor = move || {
        active.get().map(|i| {
            let x = format!("{:.1}", x_mid(i));
            view! { <line x1=x.clone() x2=x y1=PAD_TOP y2=PAD_TOP + plot_h class="cursor"/> }
        })
    };
    let hits = (0..times.len())
        .map(|i| {
            let set_active = set_active.clone();
            view! {
                <rect x=format!("{:.1}", PAD_LEFT + slot * i as f64) y=PAD_TOP width=format!("{slot:.2}")
                    height=plot_h class="hit" on:mouseenter=move |_| set_active(i)/>
            }
        })
        .collect_view();
    let keys = {
        let set_active = set_active.clone();
        move |ev: leptos::ev::KeyboardEvent| {
            if empty {
                return;
            }
            let at = active.get().unwrap_or(n - 1);
            let next = match ev.key().as_str() {
                "ArrowLeft" => at.saturating_sub(1),
                "ArrowRight" => at + 1,
                "Home" => 0,
                "End" => n - 1,
                "PageUp" => at.saturating_sub(10),
                "PageDown" => at + 10,
                _ => return,
            };
            ev.prevent_default();
            set_active(next);
        }
    };
    let focused = {
        let (key, set_active) = (key.clone(), set_active.clone());
        move |_| {
            if active.get_untracked().is_none() {
                set_active(n - 1);
            }
            state.focused.set(Some(key.clone()));
        }
    };
    let blurred = {
        let key = key.clone();
        move |ev: leptos::ev::FocusEvent| {
            // A chart a refresh takes away loses focus too: that is not the
            // reader moving on, and the redrawn chart takes it back.
            if !event_target::<leptos::web_sys::HtmlElement>(&ev).is_connected() {
                return;
            }
            state.focused.update(|f| {
                if f.as_deref() == Some(key.as_str()) {
                    *f = None;
                }
            })
        }
    };
    // Redrawn by a refresh while it had the keyboard: it keeps it.
    let plot = NodeRef::<leptos::html::Div>::new();
    {
        let key = key.clone();
        Effect::new(move |_| {
            if let Some(el) = plot.get() {
                if state.focused.get_untracked().as_deref() == Some(key.as_str()) {
                    let _ = el.focus();
                }
            }
        });
    }

    let summary = if max > 0.0 {
        format!(
            "{title}: from 0 to {}; peak {}",
            format.run(top),
            format.run(max)
        )
    } else {
        format!("{title}: no data in this window")
    };
    let table_open = {
        let key = key.clone();
        Memo::new(move |_| state.tables.with(|t| t.contains(&key)))
    };
    let toggle = {
        let key = key.clone();
        move |_| {
            state.tables.update(|t| {
                if !t.remove(&key) {
                    t.insert(key.clone());
                }
            })
        }
    };
    let table = {
        let (times, series, title) = (times.clone(), series.clone(), title.clone());
        move || {
            table_open.get().then(|| {
                let rows = times
                    .iter()
                    .enumerate()
                    .map(|(i, &ms)| {
                        let at = time_of(ms);
                        view! {
                            <tr>
                                <th scope="row">{move || reader.zone().minute(&at, with_date)}</th>
                                {series.iter().map(|s| view! {
                                    <td>{value(s, i).map_or_else(|| "–".to_owned(), |v| format.run(v))}</td>
                                }).collect_view()}
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="data chart-table" data-testid="chart-table">
                        <caption class="visually-hidden">{title.clone()}</caption>
                        <thead><tr>
                            <th scope="col">{reader.label("Time")}</th>
                            {series.iter().map(|s| view! { <th scope="col">{s.name}</th> }).collect_view()}
                        </tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                }
            })
        }
    };
    let legend = (kind == Kind::Bars || series.len() > 1).then(|| {
        let items = series
            .iter()
            .map(|s| view! { <li><span class=format!("swatch {}", s.class)></span>{s.name}</li> })
            .collect_view();
        view! { <ul class="legend">{items}</ul> }
    });
    view! {
        <figure class="chart" data-chart=title.clone()>
            <figcaption>
                {title.clone()}
                <button type="button" class="link-like small" data-testid="chart-table-toggle"
                    aria-expanded=move || table_open.get().to_string() on:click=toggle>
                    {move || if table_open.get() { "Hide table" } else { "Show as table" }}
                </button>
            </figcaption>
            <div class="plot" node_ref=plot tabindex="0" role="group"
                aria-label=format!("{title}: use the arrow keys to read each moment")
                on:keydown=keys on:focus=focused on:blur=blurred
                on:mouseleave=move |_| {
                    // The keyboard's moment stays while the chart has focus.
                    if state.focused.with_untracked(|f| f.as_deref() != Some(key.as_str())) {
                        state.active.update(|a| { a.remove(&key); });
                    }
                }>
                <svg viewBox=format!("0 0 {CHART_W} {CHART_H}") role="img" aria-label=summary>
                    {ticks}
                    <line x1=PAD_LEFT y1=PAD_TOP x2=PAD_LEFT y2=PAD_TOP + plot_h class="axis-line"/>
                    <line x1=PAD_LEFT y1=PAD_TOP + plot_h x2=CHART_W y2=PAD_TOP + plot_h class="axis-line"/>
                    {marks}
                    {cursor}
                    {x_ticks}
                    {hits}
                </svg>
            </div>
            <p class="readout small" data-testid="chart-readout" aria-live="polite">{readout}</p>
            {legend}
            {table}
        </figure>
    }
    // Erased: four of these in one page's type outgrow the compiler's limit.
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_y_axis_steps_are_round_and_reach_the_peak() {
        assert_eq!(y_scale(7.0, 0.0), (2.0, 8.0));
        assert_eq!(y_scale(100.0, 0.0), (50.0, 100.0));
        assert_eq!(y_scale(1234.0, 0.0), (500.0, 1500.0));
        // Counts step by whole numbers.
        assert_eq!(y_scale(1.0, 1.0), (1.0, 1.0));
        assert_eq!(y_scale(2.0, 1.0), (1.0, 2.0));
        assert_eq!(y_scale(0.0, 1.0), (1.0, 1.0));
        assert_eq!(y_scale(0.0, 0.0), (1.0, 1.0));
        let (step, top) = y_scale(0.037, 0.0);
        assert!((step - 0.01).abs() < 1e-12 && (top - 0.04).abs() < 1e-12);
    }
}
