//! Liveness and readiness, for load balancers and orchestrators.

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;

/// The process is up and serving HTTP.
pub async fn healthz() -> &'static str {
    "ok"
}

/// The database answers and every migration is applied.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    match replaysafe_core::db::is_migrated(&state.services.pool).await {
        Ok(true) => (StatusCode::OK, "ready"),
        Ok(false) => (StatusCode::SERVICE_UNAVAILABLE, "migrations pending"),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable")
        }
    }
}
