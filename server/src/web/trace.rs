//! A span per HTTP request with its request id: taken from `x-request-id`
//! when a trusted proxy sent one of a sane shape (`[A-Za-z0-9._:-]{1,64}`),
//! else a new UUID, and echoed back, so one id ties a caller's request to
//! every log line it caused (a stranger's id could forge or flood them).
//! The span names the method and the path only: a query string may carry a
//! secret.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::http::{HeaderName, Request};
use axum::Router;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use replaysafe_core::config::Config;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Whether a caller's request id is kept: sent by a trusted proxy, and of
/// a shape that reads safely in any log.
fn keeps_request_id(config: &Config, peer: Option<SocketAddr>, id: &[u8]) -> bool {
    peer.is_some_and(|p| config.is_trusted_proxy(p.ip()))
        && (1..=64).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

pub fn traced(router: Router, config: Arc<Config>) -> Router {
    // The last layer added sees the request first: a stranger's id is
    // dropped, the id is set, then the span opened with it, and the id
    // copied onto the response.
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
        .layer(axum::middleware::from_fn(
            move |mut request: axum::extract::Request, next: axum::middleware::Next| {
                let peer = request
                    .extensions()
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|c| c.0);
                let kept = request
                    .headers()
                    .get(&REQUEST_ID)
                    .is_none_or(|id| keeps_request_id(&config, peer, id.as_bytes()));
                if !kept {
                    request.headers_mut().remove(&REQUEST_ID);
                }
                next.run(request)
            },
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_trusted_proxys_well_formed_request_id_is_kept() {
        let config = replaysafe_core::config::parse_and_validate(
            None,
            "trusted_proxies = [\"10.0.0.0/8\"]",
            &|_| None,
        )
        .unwrap();
        let proxy = Some("10.1.2.3:40000".parse().unwrap());
        let stranger = Some("203.0.113.9:40000".parse().unwrap());
        assert!(keeps_request_id(&config, proxy, b"req-1:a.b_c"));
        assert!(!keeps_request_id(&config, stranger, b"req-1"));
        assert!(!keeps_request_id(&config, None, b"req-1"));
        for bad in [
            &b""[..],
            b"a b",
            b"<script>",
            b"line\nbreak",
            &[b'a'; 65][..],
        ] {
            assert!(!keeps_request_id(&config, proxy, bad), "{bad:?}");
        }
        assert!(keeps_request_id(&config, proxy, &[b'a'; 64]));
    }
}
