//! `GET /metrics`: the Prometheus exposition of `telemetry::metrics`,
//! behind `metrics_token` when one is configured; with neither a token nor
//! `metrics_listen`, beside a receiver listening beyond loopback, only to
//! this machine's own clients.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sha2::{Digest, Sha256};

use super::AppState;
use replaysafe_core::accounts::ClientAddr;
use replaysafe_core::config::Config;
use replaysafe_core::ops::overview::refresh_gauges;
use replaysafe_core::telemetry::metrics::install;

/// Whether `/metrics` is open to anyone who reaches the receiver: it lists
/// every source's slug and traffic, so it is when a token guards it, it is
/// served on an address of its own, or the receiver listens on loopback.
pub fn open_to_all(config: &Config) -> bool {
    config.metrics_token.is_some()
        || config.metrics_listen.is_some()
        || config.listen.ip().is_loopback()
}

pub async fn handler(
    State(state): State<AppState>,
    client: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
) -> Response {
    let config = &state.services.config;
    let local = client.is_some_and(|Extension(ClientAddr(ip))| ip.to_canonical().is_loopback());
    if !open_to_all(config) && !local {
        return StatusCode::NOT_FOUND.into_response();
    }
    if let Some(token) = &config.metrics_token {
        if !bearer_is(&headers, token.expose()) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "metrics need the configured bearer token",
            )
                .into_response();
        }
    }
    let handle = install();
    // A scrape still answers (with the counters) when the database is away.
    if let Err(e) = refresh_gauges(&state.services, &state.gauges_read).await {
        tracing::warn!(error = %e, "metrics: could not read backlog gauges");
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// `Authorization: Bearer <token>`, compared through digests so the time
/// taken tells nothing about how much of a guess was right.
fn bearer_is(headers: &HeaderMap, token: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token)
        .unwrap_or_default();
    Sha256::digest(given.trim().as_bytes()) == Sha256::digest(token.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let text = format!(
            "{extra}\n[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"s\"]\n"
        );
        replaysafe_core::config::parse_and_validate(None, &text, &|_| None).unwrap()
    }

    #[test]
    fn metrics_beside_a_public_receiver_need_a_token_or_an_address_of_their_own() {
        assert!(open_to_all(&config("listen = \"127.0.0.1:3000\"")));
        assert!(!open_to_all(&config("listen = \"0.0.0.0:3000\"")));
        assert!(!open_to_all(&config("listen = \"[::]:3000\"")));
        assert!(open_to_all(&config(
            "listen = \"0.0.0.0:3000\"\nmetrics_token = \"t0123456789abcdef\""
        )));
        assert!(open_to_all(&config(
            "listen = \"0.0.0.0:3000\"\nmetrics_listen = \"127.0.0.1:9464\""
        )));
    }
}
