//! The dashboard's front door: sessions (tower-sessions, stored in
//! PostgreSQL), the sign-in requirement for every page and server function,
//! and the cross-site request check for every state-changing request. Each
//! server function still checks its role itself (`replaysafe_core::ops::Cx::require`).

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, Session, SessionManagerLayer};
use tower_sessions_sqlx_store::PostgresStore;

use super::AppState;
use replaysafe_core::config::Config;

pub const COOKIE: &str = "replaysafe_session";

/// Paths anyone may reach: the sign-in page, the bundle, probes, metrics.
/// Matched on the path as decoded, and never one with a dot segment or an
/// empty one (`/pkg/../overview`, `/pkg/%2e%2e/x`, `//login`), which a file
/// server or a router could read as another path.
fn is_public(path: &str) -> bool {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let plain = decoded
        .split('/')
        .skip(1)
        .all(|segment| !matches!(segment, "" | "." | "..") && !segment.contains('\\'));
    let plain = plain || decoded == "/";
    plain
        && (matches!(
            decoded.as_ref(),
            "/login"
                | "/api/login"
                | "/api/me"
                | "/healthz"
                | "/readyz"
                | "/metrics"
                | "/favicon.ico"
        ) || decoded.starts_with("/pkg/"))
}

pub fn session_layer(config: &Config, store: PostgresStore) -> SessionManagerLayer<PostgresStore> {
    SessionManagerLayer::new(store)
        .with_name(COOKIE)
        .with_http_only(true)
        // Strict: the browser never sends the cookie on a cross-site request.
        .with_same_site(SameSite::Strict)
        .with_secure(config.public_url.starts_with("https://"))
        .with_expiry(Expiry::OnInactivity(
            tower_sessions::cookie::time::Duration::minutes(config.session_idle_minutes as i64),
        ))
}

/// A state-changing request must come from this site: its Origin (or, when
/// a browser sends none, its Referer) has the scheme, host and port of the
/// public URL (`Config::dashboard_origins`). The `Host` header proves nothing (any client sets it), and a
/// request carrying neither header is refused too.
pub fn same_origin(headers: &HeaderMap, origins: &[String]) -> bool {
    let origin_of = |text: &str| url::Url::parse(text).ok().map(|u| u.origin());
    let claimed = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .and_then(origin_of);
    let Some(claimed) = claimed.filter(|c| c.is_tuple()) else {
        return false;
    };
    origins
        .iter()
        .any(|accepted| origin_of(accepted).as_ref() == Some(&claimed))
}

/// One warning line per client address and minute for refused cross-site
/// requests: a page elsewhere posting in a loop must not flood the log.
static CROSS_SITE_NOTED: NotedOncePerMinute = NotedOncePerMinute::new();

struct NotedOncePerMinute(
    std::sync::Mutex<Option<std::collections::HashMap<std::net::IpAddr, std::time::Instant>>>,
);

impl NotedOncePerMinute {
    const fn new() -> Self {
        Self(std::sync::Mutex::new(None))
    }

    fn first_this_minute(&self, request: &Request) -> bool {
        const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);
        const KEPT: usize = 10_000;
        let Some(replaysafe_core::accounts::ClientAddr(ip)) = request.extensions().get().copied()
        else {
            return true;
        };
        let bucket = replaysafe_core::config::address::bucket(ip);
        let now = std::time::Instant::now();
        let mut noted = self.0.lock().expect("never poisoned");
        let noted = noted.get_or_insert_with(Default::default);
        if noted
            .get(&bucket)
            .is_some_and(|at| now.duration_since(*at) < MINUTE)
        {
            return false;
        }
        if noted.len() >= KEPT {
            noted.retain(|_, at| now.duration_since(*at) < MINUTE);
        }
        noted.insert(bucket, now);
        true
    }
}

/// Whether the request sends a `replaysafe_session` cookie.
fn carries_session_cookie(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(tower_sessions::cookie::Cookie::split_parse)
        .any(|c| c.is_ok_and(|c| c.name() == COOKIE))
}

/// What a session that must choose its own password may reach: the page
/// and the server functions that do it, signing out, and how the page reads
/// (its zone, clock and theme).
fn reached_before_a_new_password(path: &str) -> bool {
    matches!(
        path,
        "/account"
            | "/api/password"
            | "/api/must-change-password"
            | "/api/logout"
            | "/api/me"
            | "/api/preferences"
            | "/api/my-preferences"
    )
}

pub async fn gate(
    State(state): State<AppState>,
    session: Session,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    let changes_state = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if changes_state
        && !same_origin(
            request.headers(),
            &state.services.config.dashboard_origins(),
        )
    {
        if CROSS_SITE_NOTED.first_this_minute(&request) {
            tracing::warn!(%path, "refused a cross-site request");
        }
        return (StatusCode::FORBIDDEN, "cross-site request refused").into_response();
    }
    // A session cookie that does not verify is counted against its address,
    // which is refused (429) past the limit before the session is looked up.
    let cookie_from = carries_session_cookie(request.headers())
        .then(|| {
            request
                .extensions()
                .get::<replaysafe_core::accounts::ClientAddr>()
                .map(|a| a.0)
        })
        .flatten();
    let bad = &state.services.bad_credentials;
    if let Some(wait) = cookie_from.and_then(|a| bad.refused(a)) {
        let secs = wait.as_secs_f64().ceil().max(1.0).to_string();
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, secs)],
            "too many session cookies that do not verify from this address",
        )
            .into_response();
    }
    // `/api/me` is public (the sign-in page asks it) but looks the session
    // up: checked here, so its cookies count too.
    if is_public(&path) && !(path == "/api/me" && cookie_from.is_some()) {
        return next.run(request).await;
    }
    let user = app::auth::ssr::caller_of(&state.services.pool, &session).await;
    if let (Ok(None), Some(address)) = (&user, cookie_from) {
        bad.failed(address);
    }
    if is_public(&path) {
        if let Ok(Some(user)) = user {
            request.extensions_mut().insert(user.caller);
            request.extensions_mut().insert(user.preferences);
        }
        return next.run(request).await;
    }
    match user {
        Ok(Some(replaysafe_core::accounts::SessionUser {
            caller: user,
            must_change_password,
            preferences,
        })) => {
            if must_change_password && !reached_before_a_new_password(&path) {
                return if path.starts_with("/api/") {
                    (
                        StatusCode::FORBIDDEN,
                        "choose your own password first (/account)",
                    )
                        .into_response()
                } else {
                    Redirect::to("/account").into_response()
                };
            }
            // Server functions and pages read them from here instead of
            // asking again.
            request.extensions_mut().insert(user);
            request.extensions_mut().insert(preferences);
            next.run(request).await
        }
        Ok(None) if path.starts_with("/api/") => {
            (StatusCode::UNAUTHORIZED, "sign in first").into_response()
        }
        Ok(None) => {
            let target = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            let next: String = form_urlencoded::byte_serialize(target.as_bytes()).collect();
            Redirect::to(&format!("/login?next={next}")).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "session check: database unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "5")],
                "the database is unavailable; try again shortly",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_this_site_may_change_state() {
        let public = &["https://hooks.example.com".to_owned()];
        assert!(same_origin(
            &headers(&[("origin", "https://hooks.example.com")]),
            public
        ));
        assert!(same_origin(
            &headers(&[("origin", "https://hooks.example.com:443")]),
            public
        ));
        // The Host header is the client's to set: it proves nothing.
        assert!(!same_origin(
            &headers(&[
                ("origin", "http://127.0.0.1:3000"),
                ("host", "127.0.0.1:3000")
            ]),
            public
        ));
        // Scheme and port are part of the origin.
        assert!(!same_origin(
            &headers(&[("origin", "http://hooks.example.com")]),
            public
        ));
        assert!(!same_origin(
            &headers(&[("origin", "https://hooks.example.com:8443")]),
            public
        ));
        assert!(same_origin(
            &headers(&[("referer", "https://hooks.example.com/deliveries?x=1")]),
            public
        ));
        assert!(!same_origin(
            &headers(&[("origin", "https://evil.example")]),
            public
        ));
        assert!(!same_origin(
            &headers(&[("origin", "https://hooks.example.com.evil.example")]),
            public
        ));
        assert!(
            !same_origin(&headers(&[("host", "hooks.example.com")]), public),
            "no origin at all"
        );
        assert!(!same_origin(&headers(&[("origin", "null")]), public));
    }

    #[test]
    fn public_paths_match_only_as_written_plainly() {
        for public in [
            "/login",
            "/api/login",
            "/healthz",
            "/pkg/replaysafe.js",
            "/pkg/x/y.css",
        ] {
            assert!(is_public(public), "{public}");
        }
        for private in [
            "/overview",
            "/pkg/../overview",
            "/pkg/%2e%2e/api/redeliver",
            "/pkg/./x",
            "//login",
            "/login/",
            "/pkg/..%2fapi",
            "/api/login/../redeliver",
            "/pkg/\\..\\api",
        ] {
            assert!(!is_public(private), "{private}");
        }
    }
}
