use leptos::prelude::*;
use replaysafe_types::overview::BlockedKey;
use replaysafe_types::states::Breaker;

use crate::api::actions::{SetBreaker, SetSourcePaused};
use crate::api::events::list_blocked_keys;
use crate::api::overview::{load_overview, SourceFigures};
use crate::api::{list_sources, RevealDestinationUrl, SourceSummary};
use crate::auth::Role;
use crate::components::*;
use crate::reader::{Reader, When};

#[component]
pub fn SourcesPage() -> impl IntoView {
    let toggle = ServerAction::<SetSourcePaused>::new();
    let breaker = ServerAction::<SetBreaker>::new();
    // Re-read after every pause, resume or breaker change.
    let sources = Resource::new(
        move || (toggle.version().get(), breaker.version().get()),
        |_| list_sources(),
    );
    let figures = Resource::new(|| (), |_| load_overview(None, "day".into()));
    let blocked = Resource::new(|| (), |_| list_blocked_keys(None));
    provide_context(toggle);
    provide_context(breaker);
    let failure = move || {
        toggle
            .value()
            .get()
            .and_then(|r| r.err())
            .or_else(|| breaker.value().get().and_then(|r| r.err()))
            .map(|e| view! { <ErrorBox message=error_text(&e)/> })
    };
    view! {
        <section class="page">
            <h1>"Sources"</h1>
            <p class="lede">
                "Each source is an endpoint " <code>"POST /hooks/{slug}"</code>
                " that verifies one provider's signatures and forwards to its destination. Figures cover the last 24 hours."
            </p>
            {failure}
            <Transition fallback=|| view! { <p class="muted">"Loading sources…"</p> }>
                {move || Suspend::new(async move {
                    let figures = figures.await.map(|o| o.per_source).unwrap_or_default();
                    match sources.await {
                        Ok(rows) if rows.is_empty() => view! {
                            <p class="empty">
                                "No sources are configured. Add a " <code>"[[source]]"</code>
                                " table to the config file and restart."
                            </p>
                        }.into_any(),
                        Ok(rows) => view! { <SourcesTable rows=rows.clone() figures/> <Connect rows/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    blocked.await.ok().filter(|keys| !keys.is_empty()).map(|keys| view! { <BlockedKeys keys/> })
                })}
            </Transition>
        </section>
    }
}

/// Where each provider posts, to paste into its settings, and what goes
/// where.
#[component]
fn Connect(rows: Vec<SourceSummary>) -> impl IntoView {
    view! {
        <h2>"Connect a provider"</h2>
        <p class="small">"Paste a source's receive URL into its provider's webhook settings; its secret goes in the source's table of the config file."</p>
        <dl class="connect" data-testid="receive-urls">
            {rows.into_iter().filter(|s| s.in_config).map(|s| {
                let id = format!("receive-url-{}", s.slug);
                view! {
                    <dt><code>{s.slug.clone()}</code> " · " {s.provider.clone()}</dt>
                    <dd data-slug=s.slug.clone()>
                        <label class="visually-hidden" for=id.clone()>{format!("Receive URL of {}", s.slug)}</label>
                        <input id=id class="receive-url" readonly value=s.receive_url.clone() size="60"/>
                        <CopyButton text=s.receive_url.clone() label=format!("Copy the receive URL of {}", s.slug)/>
                        <p class="small">{s.setup.clone()}</p>
                    </dd>
                }
            }).collect_view()}
        </dl>
    }
}

/// Copies `text` to the clipboard; where the browser allows no clipboard
/// (a page over plain http on another host), says to copy it by hand.
#[component]
fn CopyButton(text: String, label: String) -> impl IntoView {
    let said = RwSignal::new("");
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let text = text.clone();
            let navigator = window().navigator();
            let has = js_sys::Reflect::get(&navigator, &"clipboard".into())
                .map(|c| !c.is_undefined())
                .unwrap_or(false);
            if !has {
                said.set("select it and copy by hand");
                return;
            }
            let promise = navigator.clipboard().write_text(&text);
            leptos::task::spawn_local(async move {
                let done = wasm_bindgen_futures::JsFuture::from(promise).await;
                said.set(if done.is_ok() {
                    "copied"
                } else {
                    "select it and copy by hand"
                });
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &text;
    };
    view! {
        <button type="button" class="secondary" aria-label=label on:click=copy>"Copy"</button>
        <span class="muted small" role="status" data-testid="copied">{move || said.get()}</span>
    }
}

/// Ordered destinations' keys held by an event that keeps failing: the
/// key's later events wait until it completes or is dead-lettered.
#[component]
fn BlockedKeys(keys: Vec<BlockedKey>) -> impl IntoView {
    let reader = Reader::current();
    view! {
        <h2>"Blocked ordered keys"</h2>
        <p class="small">
            "Each key below is held by an event that failed and waits to be retried; the key's later events wait behind it. "
            "Open the event to dead-letter it by hand if it cannot succeed."
        </p>
        <table class="data" data-testid="blocked-keys">
            <thead>
                <tr>
                    <th scope="col">"Source"</th>
                    <th scope="col">"Destination"</th>
                    <th scope="col">"Key"</th>
                    <th scope="col">"Held by"</th>
                    <th scope="col">"Attempts"</th>
                    <th scope="col">{reader.label("Next attempt")}</th>
                    <th scope="col">"Waiting behind"</th>
                    <th scope="col">"Last error"</th>
                </tr>
            </thead>
            <tbody>
                {keys.into_iter().map(|k| view! {
                    <tr>
                        <td><code>{k.source.clone()}</code></td>
                        <td><code>{k.destination.clone()}</code></td>
                        <td><code>{if k.ordering_key.is_empty() { "(all events)".to_owned() } else { k.ordering_key.clone() }}</code></td>
                        <td><a href=format!("/events/{}", k.event_id)><code>{k.idem_key.clone()}</code></a></td>
                        <td>{k.attempt_count}</td>
                        <td><When at=k.next_attempt_at ms=true ago=true/></td>
                        <td>{fmt_count(k.waiting)}</td>
                        <td class="small">{k.last_error.clone().unwrap_or_default()}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn SourcesTable(rows: Vec<SourceSummary>, figures: Vec<SourceFigures>) -> impl IntoView {
    view! {
        <table class="data" data-testid="sources-table">
            <thead>
                <tr>
                    <th scope="col">"Slug"</th>
                    <th scope="col">"Provider"</th>
                    <th scope="col">"Mode"</th>
                    <th scope="col">"Destination"</th>
                    <th scope="col">"State"</th>
                    <th scope="col">"Deliveries (24 h)"</th>
                    <th scope="col">"Duplicates"</th>
                    <th scope="col">"Backlog"</th>
                    <th scope="col">"Dead letters"</th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|s| {
                    let f = figures.iter().find(|f| f.slug == s.slug).cloned();
                    view! { <SourceRow s f/> }
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn SourceRow(s: SourceSummary, f: Option<SourceFigures>) -> impl IntoView {
    let reader = Reader::current();
    let state = match (s.in_config, s.paused) {
        (false, _) => ("badge badge-muted", "removed from config"),
        (true, true) => ("badge badge-warn", "paused"),
        (true, false) => ("badge badge-ok", "active"),
    };
    let changed_at = s.paused_changed_at;
    let by_operator = s.paused_by_operator.then_some(move || {
        format!(
            " (set by an operator{})",
            changed_at
                .as_ref()
                .map(|t| format!(" at {}", reader.stamp(t)))
                .unwrap_or_default()
        )
    });
    let slug = s.slug.clone();
    let f = f.unwrap_or_else(|| SourceFigures {
        slug: slug.clone(),
        provider: s.provider.clone(),
        paused: s.paused,
        figures: Default::default(),
        backlog: Default::default(),
    });
    view! {
        <tr data-slug=slug.clone()>
            <td><a href=format!("/overview?window=day&source={slug}")><code>{s.slug}</code></a></td>
            <td>{s.provider}</td>
            <td>{s.mode}</td>
            <td>
                {if s.destinations.is_empty() {
                    view! { <span class="muted">"none"</span> }.into_any()
                } else {
                    view! {
                        <ul class="destinations">
                            {s.destinations.into_iter().map(|d| view! {
                                <li data-destination=d.name.clone()>
                                    <strong>{d.name.clone()}</strong> " "
                                    <DestinationUrl slug=slug.clone() destination=d.name.clone() shown=d.url/>
                                    {d.filter.map(|f| view! { <div class="muted small">{f}</div> })}
                                    {d.limits.map(|l| view! { <div class="muted small">{l}</div> })}
                                    <BreakerControl slug=slug.clone() destination=d.name.clone()
                                        state=d.breaker by_hand=d.breaker_by_hand/>
                                </li>
                            }).collect_view()}
                        </ul>
                    }.into_any()
                }}
                <div class="muted small">{format!("attempt timeout {} s", s.attempt_timeout_secs)}</div>
            </td>
            <td>
                <span class=state.0>{state.1}</span>{by_operator}
                {s.in_config.then(|| view! { <PauseButton slug=slug.clone() paused=s.paused/> })}
            </td>
            <td><a href=format!("/deliveries?source={slug}")>{fmt_count(f.figures.deliveries)}</a></td>
            <td>{fmt_rate(f.figures.duplicate_rate())}</td>
            <td><BacklogCell backlog=f.backlog.clone()/></td>
            <td><DeadLettersCell slug=slug.clone() backlog=f.backlog/></td>
        </tr>
    }
}

/// Pause keeps receiving and claiming but forwards nothing; resume forwards
/// what was held (operators).
#[component]
fn PauseButton(slug: String, paused: bool) -> impl IntoView {
    let toggle = expect_context::<ServerAction<SetSourcePaused>>();
    let label = if paused { "Resume" } else { "Pause" };
    let aria = format!("{label} {slug}");
    view! {
        <IfRole role=Role::Operator>
            {
                let (slug, aria) = (slug.clone(), aria.clone());
                view! {
                    <ActionForm action=toggle attr:class="inline">
                        <input type="hidden" name="slug" value=slug/>
                        <input type="hidden" name="paused" value=(!paused).to_string()/>
                        <button type="submit" class="secondary" data-testid="pause-toggle"
                            aria-label=aria>{label}</button>
                    </ActionForm>
                }
            }
        </IfRole>
    }
}

/// A destination's URL, its credentials masked; an admin may reveal it
/// whole (audit-logged).
#[component]
fn DestinationUrl(slug: String, destination: String, shown: String) -> impl IntoView {
    let reveal = ServerAction::<RevealDestinationUrl>::new();
    let label = format!("Reveal the URL of {slug}/{destination}");
    let masked = shown.contains("***");
    view! {
        <code data-testid="destination-url">
            {move || match reveal.value().get() {
                Some(Ok(url)) => url,
                _ => shown.clone(),
            }}
        </code>
        {move || reveal.value().get().and_then(Result::err).map(|e| view! { <ErrorBox message=error_text(&e)/> })}
        {masked.then(|| view! {
            <IfRole role=Role::Admin>
                {
                    let (slug, destination, label) = (slug.clone(), destination.clone(), label.clone());
                    view! {
                        <ActionForm action=reveal attr:class="inline">
                            <input type="hidden" name="slug" value=slug/>
                            <input type="hidden" name="destination" value=destination/>
                            <button type="submit" class="secondary" aria-label=label>"Reveal"</button>
                        </ActionForm>
                    }
                }
            </IfRole>
        })}
    }
}

/// A destination's circuit breaker, and (operators) opening or closing it by hand.
#[component]
fn BreakerControl(
    slug: String,
    destination: String,
    state: Breaker,
    by_hand: bool,
) -> impl IntoView {
    let set = expect_context::<ServerAction<SetBreaker>>();
    let (class, words) = match (state, by_hand) {
        (Breaker::Closed, _) => ("badge badge-ok", "breaker closed"),
        (Breaker::Open, true) => ("badge badge-bad", "breaker opened by an operator"),
        (Breaker::Open, false) => ("badge badge-bad", "breaker open: attempts wait"),
        (Breaker::HalfOpen, _) => ("badge badge-warn", "breaker half-open"),
    };
    let open = state == Breaker::Closed;
    let label = if open {
        "Open breaker"
    } else {
        "Close breaker"
    };
    view! {
        <div class="small" data-testid="breaker" data-state=state.as_str()>
            <span class=class>{words}</span>
            <IfRole role=Role::Operator>
                {
                    let (slug, destination) = (slug.clone(), destination.clone());
                    let aria = format!("{label} of {slug}/{destination}");
                    view! {
                        <ActionForm action=set attr:class="inline">
                            <input type="hidden" name="slug" value=slug/>
                            <input type="hidden" name="destination" value=destination/>
                            <input type="hidden" name="open" value=open.to_string()/>
                            <button type="submit" class="secondary" aria-label=aria>{label}</button>
                        </ActionForm>
                    }
                }
            </IfRole>
        </div>
    }
}
