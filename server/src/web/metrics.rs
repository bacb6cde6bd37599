//! `GET /metrics`: the Prometheus exposition of `telemetry::metrics`,
//! behind `metrics_token` when one is configured.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::AppState;
use replaysafe_core::ops::overview::refresh_gauges;
use replaysafe_core::telemetry::metrics::install;

pub async fn handler(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.services.config.metrics_token {
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
    if let Err(e) = refresh_gauges(&state.services.pool, &state.gauges_read).await {
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
