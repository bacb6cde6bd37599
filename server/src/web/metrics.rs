//! `GET /metrics`: the Prometheus exposition of `telemetry::metrics`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;

use super::AppState;
use crate::telemetry::metrics::{install, refresh_gauges};

pub async fn handler(State(state): State<AppState>) -> impl IntoResponse {
    let handle = install();
    // A scrape still answers (with the counters) when the database is away.
    if let Err(e) = refresh_gauges(&state.services.pool).await {
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
}
