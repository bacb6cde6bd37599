//! Reading a request's body under a size limit and a deadline: a client that
//! trickles its body gets 408, one that sends too much 413, and neither holds
//! a task or memory for longer than `body_timeout`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::AppState;

/// The memory `/hooks` bodies being read may take, counted in KiB.
#[derive(Clone)]
pub struct BodyBudget(Arc<Semaphore>);

impl BodyBudget {
    pub fn new(bytes: usize) -> Self {
        Self(Arc::new(Semaphore::new(kib(bytes) as usize)))
    }

    /// Room for a body of `bytes`, held until the permit drops; None when
    /// the bodies being read hold the budget already.
    pub fn reserve(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_many_owned(kib(bytes)).ok()
    }
}

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX)
}

/// Dashboard requests are forms and server-function arguments: small, and
/// read for strangers too (the sign-in form), so kept well below a payload.
pub const DASHBOARD_MAX_BODY: usize = 64 * 1024;

pub enum BodyError {
    TooLarge,
    TooSlow,
    /// The sender went away mid-body.
    Broken,
}

/// The whole body, at most `limit` bytes, by `deadline`.
pub async fn read(body: Body, limit: usize, deadline: Instant) -> Result<Bytes, BodyError> {
    match tokio::time::timeout_at(deadline.into(), axum::body::to_bytes(body, limit)).await {
        Err(_) => {
            metrics::counter!("replaysafe_body_timeouts_total").increment(1);
            Err(BodyError::TooSlow)
        }
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_over_limit(&e) => Err(BodyError::TooLarge),
        Ok(Err(_)) => Err(BodyError::Broken),
    }
}

/// 408 closes the connection: the rest of the body is not waited for.
pub fn too_slow() -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        [(header::CONNECTION, "close")],
        "request body not received in time",
    )
        .into_response()
}

fn is_over_limit(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = err.source();
    }
    false
}

/// Middleware for the dashboard: its handlers get a body read whole already.
pub async fn bounded(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let deadline = Instant::now() + state.services.config.http.body_timeout;
    let (parts, body) = request.into_parts();
    match read(body, DASHBOARD_MAX_BODY, deadline).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(BodyError::TooSlow) => too_slow(),
        Err(BodyError::TooLarge) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(header::CONNECTION, "close")],
            "request body too large",
        )
            .into_response(),
        Err(BodyError::Broken) => {
            (StatusCode::BAD_REQUEST, "request body could not be read").into_response()
        }
    }
}
