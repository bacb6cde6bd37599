//! The HTTP adapter: `POST /hooks/{slug}` turns an axum request into an
//! `Inbound` and a `Reply` back into a response. Limits live here.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use replaysafe_core::accounts::ClientAddr;

use super::body::{self, BodyError};
use super::AppState;
use replaysafe_core::processing::intake;
use replaysafe_core::receiver::{Inbound, Receipt, Reply};

pub async fn hook(
    State(state): State<AppState>,
    Path(slug): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    client: Option<Extension<ClientAddr>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let receipt = Receipt::now();
    let services = &state.services;
    let Some(source) = services.config.sources.iter().find(|s| s.slug == slug) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":"no source with this slug"}"#,
        )
            .into_response();
    };
    let mut inbound = Inbound {
        query: uri.query().map(str::to_owned),
        headers: headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: Vec::new(),
        remote_addr: Some(
            client
                .as_ref()
                .map_or(peer.ip(), |Extension(ClientAddr(ip))| *ip)
                .to_string(),
        ),
    };
    let limit = services.config.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(size) = declared.filter(|&size| size > limit) {
        return into_response(intake::oversized(services, source, &inbound, size, receipt).await);
    }
    // Declared lengths are at most the limit here; a chunked body may take all of it.
    let client = client.map_or(peer.ip(), |Extension(ClientAddr(ip))| ip);
    let Some(_reserved) = state.body_budget.reserve(declared.unwrap_or(limit), client) else {
        return into_response(intake::shed(source, receipt));
    };
    let deadline = receipt.started + services.config.http.body_timeout;
    match body::read(body, limit, deadline).await {
        Ok(bytes) => inbound.body = bytes.into(),
        Err(BodyError::TooLarge) => {
            return into_response(
                intake::oversized(services, source, &inbound, limit + 1, receipt).await,
            )
        }
        // Nothing whole to verify, nothing to store.
        Err(BodyError::TooSlow) => return body::too_slow(),
        Err(BodyError::Broken) => {
            return (StatusCode::BAD_REQUEST, "request body could not be read").into_response()
        }
    }
    // A claim's workers were told of it as it committed (`processing::handoff`).
    into_response(intake::receive(services, source, &inbound, receipt).await)
}

fn into_response(reply: Reply) -> Response {
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    if let Ok(content_type) = HeaderValue::from_str(&reply.content_type) {
        headers.insert(header::CONTENT_TYPE, content_type);
    }
    for (name, value) in reply.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.append(HeaderName::from_static(name), value);
        }
    }
    response
}
