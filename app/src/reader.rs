//! How the signed-in person reads the pages: their zone (or UTC), their
//! theme, and the moment "3 min ago" counts from. The server renders a page
//! with the preferences stored with their account and writes them on
//! `<html>`; the browser starts from those attributes, so hydration renders
//! the same text and the first paint has the right colours. The browser
//! then reports its own zone once, when it differs from the stored one.

use leptos::prelude::*;
use replaysafe_types::time::{ago, rfc3339, Clock, Time, Zone};
use replaysafe_types::users::{Preferences, Theme};

/// How often relative times ("3 min ago") move on while a page is open.
const AGO_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

#[derive(Clone, Copy)]
pub struct Reader {
    pub preferences: RwSignal<Preferences>,
    pub now: RwSignal<Time>,
}

impl Reader {
    /// The reader of this render: the server's from the request (the gate
    /// put the preferences there), the browser's from `<html>`.
    pub fn current() -> Reader {
        if let Some(reader) = use_context::<Reader>() {
            return reader;
        }
        let (preferences, now) = initial();
        let reader = Reader {
            preferences: RwSignal::new(preferences),
            now: RwSignal::new(now),
        };
        provide_context(reader);
        reader
    }

    /// The zone the pages show times in (tracked).
    pub fn zone(&self) -> Zone {
        self.preferences.with(Preferences::zone)
    }

    /// The zone now, for code that must not re-run when it changes.
    pub fn zone_untracked(&self) -> Zone {
        self.preferences.with_untracked(Preferences::zone)
    }

    /// A time with its zone, for sentences: `2026-12-03 10:05:16 CET`.
    pub fn stamp(&self, t: &Time) -> String {
        let zone = self.zone();
        format!("{} {}", zone.shown(t), zone.abbreviation(t))
    }

    /// `stamp` with milliseconds.
    pub fn stamp_ms(&self, t: &Time) -> String {
        let zone = self.zone();
        format!("{} {}", zone.shown_ms(t), zone.abbreviation(t))
    }

    pub fn ago(&self, t: &Time) -> String {
        self.now.with(|now| ago(now, t))
    }

    /// A column heading or label naming the zone its times are in.
    pub fn label(&self, text: &'static str) -> impl Fn() -> String + Send + Sync + 'static {
        let reader = *self;
        move || format!("{text} ({})", reader.zone().name())
    }
}

/// A filter's time as typed in `zone`, as the server takes it (RFC 3339);
/// left as typed when it does not read, for the server to say why.
pub fn filter_time(zone: Zone, typed: &str) -> String {
    if typed.trim().is_empty() {
        return String::new();
    }
    zone.read("", typed)
        .map(|t| rfc3339(&t))
        .unwrap_or_else(|_| typed.to_owned())
}

/// A filter's time typed in `typed_in`, as an input in `zone` shows it.
pub fn input_in(zone: Zone, typed_in: Zone, typed: &str) -> String {
    match (typed_in != zone).then(|| typed_in.read("", typed)) {
        Some(Ok(t)) => zone.input_value(&t),
        _ => typed.to_owned(),
    }
}

/// `<html>`'s attributes for this reader (the server writes them).
pub fn html_attributes(reader: Reader) -> (Option<&'static str>, String, &'static str, String) {
    let p = reader.preferences.get_untracked();
    let theme = (p.theme != Theme::System).then_some(p.theme.as_str());
    (
        theme,
        p.time_zone.unwrap_or_default(),
        p.clock.as_str(),
        rfc3339(&reader.now.get_untracked()),
    )
}

#[cfg(feature = "ssr")]
fn initial() -> (Preferences, Time) {
    let preferences = use_context::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Preferences>().cloned())
        .unwrap_or_default();
    // Whole seconds: `<html data-now>` carries them, so both sides agree.
    let now = chrono::Utc::now();
    let now = chrono::DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now);
    (preferences, now)
}

#[cfg(not(feature = "ssr"))]
fn initial() -> (Preferences, Time) {
    let root = document().document_element();
    let attr = |name: &str| root.as_ref().and_then(|r| r.get_attribute(name));
    let preferences = Preferences {
        time_zone: attr("data-zone").filter(|z| !z.is_empty()),
        clock: attr("data-clock")
            .and_then(|c| Clock::parse(&c))
            .unwrap_or_default(),
        theme: attr("data-theme")
            .and_then(|t| Theme::parse(&t))
            .unwrap_or_default(),
    };
    let now = attr("data-now")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_else(browser_now);
    (preferences, now)
}

#[cfg(not(feature = "ssr"))]
fn browser_now() -> Time {
    #[cfg(feature = "hydrate")]
    let millis = js_sys::Date::now() as i64;
    #[cfg(not(feature = "hydrate"))]
    let millis = 0;
    chrono::DateTime::from_timestamp_millis(millis).unwrap_or_default()
}

/// Keeps relative times moving (on the server's clock: the browser's may
/// be off), and follows who is signed in: the first person's preferences
/// came with the page; another who signs in in this tab gets theirs read
/// again. A browser zone that differs from the stored one is saved once per
/// person, and the page re-reads in it.
pub fn run_in_browser(reader: Reader, user: Signal<Option<i64>>) {
    #[cfg(feature = "hydrate")]
    {
        let skew = reader.now.get_untracked() - browser_now();
        let tick = crate::components::ticking(AGO_EVERY);
        Effect::new(move |_| {
            if tick.get() > 0 {
                reader.now.set(browser_now() + skew);
            }
        });
        Effect::new(move |before: Option<Option<i64>>| {
            let now = user.get();
            match (before, now) {
                // The page's own reader: its preferences came with it.
                (None, Some(_)) => report_zone(reader),
                (Some(before), now) if before != now => {
                    leptos::task::spawn_local(async move {
                        let theirs = match now {
                            Some(_) => my_preferences().await.unwrap_or_default(),
                            None => Preferences::default(),
                        };
                        apply_theme(theirs.theme);
                        reader.preferences.set(theirs);
                        if now.is_some() {
                            report_zone(reader);
                        }
                    });
                }
                _ => {}
            }
            now
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (reader, user, AGO_EVERY);
}

/// Saves the browser's zone when it differs from the stored one.
#[cfg(feature = "hydrate")]
fn report_zone(reader: Reader) {
    let Some(zone) = browser_zone() else {
        return;
    };
    if reader
        .preferences
        .with_untracked(|p| p.time_zone.as_deref() == Some(&zone))
    {
        return;
    }
    leptos::task::spawn_local(async move {
        if save_preferences(Some(zone.clone()), None, None)
            .await
            .is_ok()
        {
            reader.preferences.update(|p| p.time_zone = Some(zone));
        }
    });
}

/// The zone the browser runs in (`Intl.DateTimeFormat`), if it is one we know.
#[cfg(feature = "hydrate")]
fn browser_zone() -> Option<String> {
    let options = js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new())
        .resolved_options();
    js_sys::Reflect::get(&options, &"timeZone".into())
        .ok()?
        .as_string()
        .and_then(|name| Zone::named(&name))
        .map(|zone| zone.name().to_owned())
}

/// Shows times in UTC or in the reader's zone; kept with their account.
pub fn set_clock(reader: Reader, clock: Clock) {
    reader.preferences.update(|p| p.clock = clock);
    leptos::task::spawn_local(async move {
        let _ = save_preferences(None, Some(clock.as_str().to_owned()), None).await;
    });
}

/// Changes the theme at once (on `<html data-theme>`); kept with the account.
pub fn set_theme(reader: Reader, theme: Theme) {
    reader.preferences.update(|p| p.theme = theme);
    apply_theme(theme);
    leptos::task::spawn_local(async move {
        let _ = save_preferences(None, None, Some(theme.as_str().to_owned())).await;
    });
}

/// The theme on `<html data-theme>`, which the stylesheet follows.
fn apply_theme(theme: Theme) {
    #[cfg(feature = "hydrate")]
    if let Some(root) = document().document_element() {
        let _ = match theme {
            Theme::System => root.remove_attribute("data-theme"),
            chosen => root.set_attribute("data-theme", chosen.as_str()),
        };
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = theme;
}

/// The signed-in person's reading preferences, as the server renders with.
#[server(endpoint = "my-preferences")]
pub async fn my_preferences() -> Result<Preferences, ServerFnError> {
    Ok(use_context::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Preferences>().cloned())
        .unwrap_or_default())
}

/// Keeps the signed-in person's reading preferences; each given replaces
/// theirs (`ops::users::set_own_preferences`).
#[server(endpoint = "preferences")]
pub async fn save_preferences(
    #[server(default)] time_zone: Option<String>,
    #[server(default)] clock: Option<String>,
    #[server(default)] theme: Option<String>,
) -> Result<(), ServerFnError> {
    let cx = crate::api::cx().await?;
    replaysafe_core::ops::users::set_own_preferences(
        &cx,
        time_zone.as_deref(),
        clock.as_deref(),
        theme.as_deref(),
    )
    .await
    .map_err(crate::api::fail)
}

/// A time as the reader reads it: in their zone, its zone and UTC in the
/// tooltip; `ms` adds milliseconds, `zoned` the zone's abbreviation (where a
/// sentence, not a column heading, says the zone), `ago` how long ago.
#[component]
pub fn When(
    at: Time,
    #[prop(optional)] ms: bool,
    #[prop(optional)] zoned: bool,
    #[prop(optional)] ago: bool,
) -> impl IntoView {
    let reader = Reader::current();
    let text = move || match (ms, zoned) {
        (false, false) => reader.zone().shown(&at),
        (true, false) => reader.zone().shown_ms(&at),
        (false, true) => reader.stamp(&at),
        (true, true) => reader.stamp_ms(&at),
    };
    let title = move || {
        let zone = reader.zone();
        let local = format!("{} {}", zone.shown_ms(&at), zone.abbreviation(&at));
        if zone.is_utc() {
            local
        } else {
            format!("{local} ({} UTC)", Zone::UTC.shown_ms(&at))
        }
    };
    view! {
        <time datetime=rfc3339(&at) title=title>{text}</time>
        {ago.then(|| view! { " " <span class="ago">{move || reader.ago(&at)}</span> })}
    }
}
