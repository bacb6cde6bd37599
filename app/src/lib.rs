//! replaysafe's web UI: Leptos components rendered on the server and hydrated
//! in the browser, and the server functions they call.

#![recursion_limit = "256"]

pub mod api;
pub mod auth;
pub mod charts;
pub mod components;
pub mod pages;
pub mod reader;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Redirect, Route, Router, Routes, A};
use leptos_router::hooks::use_location;
use leptos_router::{ParamSegment, SsrMode, StaticSegment};

use crate::auth::{who_am_i, Caller, Logout};
use crate::pages::account::AccountPage;
use crate::pages::alerts::AlertsPage;
use crate::pages::audit::AuditPage;
use crate::pages::dead::DeadLettersPage;
use crate::pages::deliveries::DeliveriesPage;
use crate::pages::event::{DeliveryPage, EventPage};
use crate::pages::incidents::{IncidentPage, IncidentsPage};
use crate::pages::login::LoginPage;
use crate::pages::overview::OverviewPage;
use crate::pages::reconcile::ReconcilePage;
use crate::pages::sources::SourcesPage;
use crate::pages::tokens::TokensPage;
use crate::pages::users::UsersPage;

/// The Content Security Policy of a dashboard page: its own scripts, the
/// inline ones Leptos streams only with this response's nonce, wasm, its own
/// stylesheet, and no framing by any site.
pub fn page_csp(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// The HTML document around the app, rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let (Some(nonce), Some(response)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) {
        if let Ok(policy) = axum::http::HeaderValue::from_str(&page_csp(&nonce)) {
            response.insert_header(axum::http::header::CONTENT_SECURITY_POLICY, policy);
        }
    }
    // The reader's zone, clock and theme, for the browser to start from.
    let (theme, zone, clock, now) = reader::html_attributes(reader::Reader::current());
    view! {
        <!DOCTYPE html>
        <html lang="en" data-theme=theme data-zone=zone data-clock=clock data-now=now>
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    reader::Reader::current();
    // Browser tests wait for this marker before they click.
    Effect::new(move |_| {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });

    view! {
        <Stylesheet id="leptos" href="/pkg/replaysafe.css"/>
        <Title text="replaysafe"/>
        <Router>
            <a class="skip" href="#main">"Skip to content"</a>
            <Layout/>
        </Router>
    }
}

/// Who is signed in, re-read on every navigation; pages read it as context
/// to show only the controls the role allows (the server checks anyway).
pub type Me = Resource<Result<Option<Caller>, ServerFnError>>;

#[component]
fn Layout() -> impl IntoView {
    let location = use_location();
    let me: Me = Resource::new(move || location.pathname.get(), |_| who_am_i());
    provide_context(me);
    let user = Signal::derive(move || match me.get() {
        Some(Ok(Some(caller))) => Some(caller.id),
        _ => None,
    });
    reader::run_in_browser(reader::Reader::current(), user);
    view! {
            <TopBar me/>
            <main id="main">
                // Async: a page is sent whole once its data is read, so its
                // status (404, a redirect to login) can still be set.
                <Routes fallback=NotFound>
                    <Route path=StaticSegment("") view=|| view! { <Redirect path="/overview"/> }/>
                    <Route path=StaticSegment("overview") ssr=SsrMode::Async view=OverviewPage/>
                    <Route path=StaticSegment("deliveries") ssr=SsrMode::Async view=DeliveriesPage/>
                    <Route path=(StaticSegment("deliveries"), ParamSegment("id")) ssr=SsrMode::Async view=DeliveryPage/>
                    <Route path=(StaticSegment("events"), ParamSegment("id")) ssr=SsrMode::Async view=EventPage/>
                    <Route path=StaticSegment("dead") ssr=SsrMode::Async view=DeadLettersPage/>
                    <Route path=StaticSegment("incidents") ssr=SsrMode::Async view=IncidentsPage/>
                    <Route path=(StaticSegment("incidents"), ParamSegment("id")) ssr=SsrMode::Async view=IncidentPage/>
                    <Route path=StaticSegment("sources") ssr=SsrMode::Async view=SourcesPage/>
                    <Route path=StaticSegment("login") ssr=SsrMode::Async view=LoginPage/>
                    <Route path=StaticSegment("alerts") ssr=SsrMode::Async view=AlertsPage/>
                    <Route path=StaticSegment("reconciliation") ssr=SsrMode::Async view=ReconcilePage/>
                    <Route path=StaticSegment("audit") ssr=SsrMode::Async view=AuditPage/>
                    <Route path=StaticSegment("tokens") ssr=SsrMode::Async view=TokensPage/>
                    <Route path=StaticSegment("users") ssr=SsrMode::Async view=UsersPage/>
                    <Route path=StaticSegment("account") ssr=SsrMode::Async view=AccountPage/>
                </Routes>
            </main>
    }
}

#[component]
fn TopBar(me: Me) -> impl IntoView {
    let logout = ServerAction::<Logout>::new();
    view! {
        <header class="topbar">
            <a class="brand" href="/">"replaysafe"</a>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    match me.await {
                        Ok(Some(user)) => view! {
                            <nav aria-label="Main">
                                <A href="/overview">"Overview"</A>
                                <A href="/deliveries">"Deliveries"</A>
                                <A href="/incidents">"Incidents"</A>
                                <A href="/dead">"Dead letters"</A>
                                <A href="/sources">"Sources"</A>
                                <A href="/reconciliation">"Reconciliation"</A>
                                <A href="/alerts">"Alerts"</A>
                                <A href="/audit">"Audit log"</A>
                                {user.can(crate::auth::Role::Admin).then(|| view! {
                                    <A href="/tokens">"Tokens"</A>
                                    <A href="/users">"Users"</A>
                                })}
                            </nav>
                            <ReadingControls/>
                            <div class="whoami">
                                <a href="/account" data-testid="whoami" title="Your account">{user.username.clone()} " · " {user.role.as_str()}</a>
                                <ActionForm action=logout attr:class="inline">
                                    <button type="submit" class="link-button">"Sign out"</button>
                                </ActionForm>
                            </div>
                        }.into_any(),
                        _ => ().into_any(),
                    }
                })}
            </Transition>
        </header>
    }
}

/// The zone the page's times are in, a UTC toggle and the theme: kept with
/// the account, so every page (and the next sign-in) reads the same.
#[component]
fn ReadingControls() -> impl IntoView {
    use replaysafe_types::time::Clock;
    use replaysafe_types::users::Theme;
    let reader = reader::Reader::current();
    let utc = move || reader.preferences.with(|p| p.clock == Clock::Utc);
    let theme = move || reader.preferences.with(|p| p.theme);
    view! {
        <div class="reading">
            <span class="zone" data-testid="zone" title="The pages show times in this zone">
                {move || reader.zone().name()}
            </span>
            <button type="button" class="toggle" data-testid="utc-toggle"
                aria-pressed=move || utc().to_string()
                title="Show every time in UTC instead of your zone"
                on:click=move |_| reader::set_clock(reader, if utc() { Clock::Local } else { Clock::Utc })>
                "UTC"
            </button>
            <select data-testid="theme" aria-label="Theme"
                on:change=move |ev| {
                    if let Some(chosen) = Theme::parse(&event_target_value(&ev)) {
                        reader::set_theme(reader, chosen);
                    }
                }>
                {[(Theme::System, "System theme"), (Theme::Light, "Light"), (Theme::Dark, "Dark")]
                    .into_iter()
                    .map(|(t, words)| view! {
                        <option value=t.as_str() selected=move || theme() == t>{words}</option>
                    })
                    .collect_view()}
            </select>
        </div>
    }
}

#[component]
fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <section class="page">
            <h1>"Not found"</h1>
            <p>"There is no page at this address. " <a href="/overview">"Go to the overview"</a></p>
        </section>
    }
}

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
