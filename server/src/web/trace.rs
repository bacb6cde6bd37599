//! A span per HTTP request with its request id: taken from `x-request-id`
//! when the caller sent one (a proxy, a provider), else a new UUID, and
//! echoed back, so one id ties a caller's request to every log line it
//! caused. The span names the method and the path only: a query string may
//! carry a secret.

use axum::http::{HeaderName, Request};
use axum::Router;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub fn traced(router: Router) -> Router {
    // The last layer added sees the request first: the id is set, then the
    // span opened with it, and the id copied onto the response.
    router
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(
            // No line per 5xx (tower-http logs each at ERROR): a shed or a
            // database outage answers thousands of 503s, each counted in the
            // metrics and logged once where it began.
            TraceLayer::new_for_http()
                .on_failure(())
                .make_span_with(|request: &Request<_>| {
                    let id = request
                        .headers()
                        .get(&REQUEST_ID)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default();
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %request.uri().path(),
                        request_id = %id,
                    )
                }),
        )
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}
