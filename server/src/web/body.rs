//! Reading a request's body under a size limit and a deadline: a client that
//! trickles its body gets 408, one that sends too much 413, and neither holds
//! a task or memory for longer than `body_timeout`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::shares::{AddressShares, Share};
use super::AppState;

/// The memory request bodies being read may take, counted in KiB, with a
/// share per client address (IPv6: per /64), so that one client's bodies
/// that never finish cannot take the room of everyone's.
#[derive(Clone)]
pub struct BodyBudget {
    all: Arc<Semaphore>,
    per_address: AddressShares,
}

/// One address may hold this fraction of the budget (at least one body of
/// the largest size).
const ADDRESS_SHARE: u32 = 16;

impl BodyBudget {
    pub fn new(bytes: usize, max_body_bytes: usize) -> Self {
        let total = kib(bytes);
        Self {
            all: Arc::new(Semaphore::new(total as usize)),
            per_address: AddressShares::new(
                (total / ADDRESS_SHARE).max(kib(max_body_bytes)) as usize
            ),
        }
    }

    /// Room for a body of `bytes` from `client`, held until dropped; None
    /// when that client's share or the whole budget is taken.
    pub fn reserve(&self, bytes: usize, client: IpAddr) -> Option<Reserved> {
        let wanted = kib(bytes);
        let share = self.per_address.take(client, wanted as usize)?;
        let permit = self.all.clone().try_acquire_many_owned(wanted).ok()?;
        Some(Reserved {
            _share: share,
            _permit: permit,
        })
    }
}

/// A body's room in the budget; given back when dropped.
pub struct Reserved {
    _share: Share,
    _permit: OwnedSemaphorePermit,
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

/// The client a request came from, as the listener worked it out.
pub fn client_of(request: &Request) -> IpAddr {
    if let Some(replaysafe_core::accounts::ClientAddr(ip)) = request.extensions().get() {
        return *ip;
    }
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |info| info.0.ip())
}

/// Middleware for the dashboard: its handlers get a body read whole
/// already, within the deadline and within the client's share of memory.
pub async fn bounded(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let deadline = Instant::now() + state.services.config.http.body_timeout;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let may_have_body = declared.is_some_and(|n| n > 0)
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    let _reserved = if may_have_body {
        let room = declared
            .unwrap_or(DASHBOARD_MAX_BODY)
            .min(DASHBOARD_MAX_BODY);
        match state.body_budget.reserve(room, client_of(&request)) {
            Some(reserved) => Some(reserved),
            None => {
                replaysafe_core::telemetry::metrics::shed("body_memory");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "5")],
                    "too busy to read this request now; retry later",
                )
                    .into_response();
            }
        }
    } else {
        None
    };
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
