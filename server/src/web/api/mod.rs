//! `/api/v1` (issue 16, spec section 9): what the dashboard does, for
//! scripts, bots and the CLI, with `Authorization: Bearer <token>`. Each
//! handler calls the operation the dashboard's server function calls
//! (`replaysafe_types::…`), handing it a `Cx` whose caller is the token, so roles
//! and rules are checked in one place. No session and no cross-site check:
//! a browser never sends a bearer token by itself. Errors are
//! `{"code", "detail"}`. The OpenAPI document is generated from these
//! handlers (utoipa) and served at `/api/v1/openapi.json` without a token.

mod limiter;
mod routes;
mod stream;

use std::sync::Arc;

use axum::extract::{FromRef, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use replaysafe_core::accounts::ClientAddr;
use replaysafe_core::error::OpError;
use replaysafe_core::ops::Cx;
use replaysafe_types::auth::Caller;

use super::AppState;
use replaysafe_types::states::Outcome;

/// What the API's handlers share.
#[derive(Clone)]
pub struct ApiState {
    services: replaysafe_core::processing::Services,
    /// Requests per token. A stranger's made-up tokens are counted per
    /// address instead (`Services::bad_credentials`).
    limiter: Arc<limiter::Limiter<i64>>,
    /// Event streams open, per caller.
    streams: Arc<stream::Streams>,
    /// Cancelled when the server shuts down: streams end instead of
    /// holding the shutdown for its grace.
    ending: tokio_util::sync::CancellationToken,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "replaysafe",
        description = "The dashboard's operations for scripts and tools: sources, deliveries, \
                       events (re-delivery through the dedup layer, forced re-execution), dead \
                       letters, the audit log. Every call takes `Authorization: Bearer <token>` \
                       (`replaysafe tokens create`); errors are `{\"code\", \"detail\"}`."
    ),
    servers((url = "/api/v1")),
    modifiers(&Conventions),
    tags(
        (name = "sources"), (name = "deliveries"), (name = "events"),
        (name = "dead letters"), (name = "incidents"), (name = "audit"), (name = "tokens")
    )
)]
struct ApiDoc;

/// The bearer scheme on every operation, and the answers every operation
/// may give besides its own: written once here rather than on each handler.
struct Conventions;

impl utoipa::Modify for Conventions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        components.schemas.insert(
            "Error".to_owned(),
            <ErrorBody as utoipa::PartialSchema>::schema(),
        );
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(utoipa::openapi::Ref::from_schema_name("Error")))
                            .build(),
                    )
                    .build(),
            )
        };
        let requirement = utoipa::openapi::security::SecurityRequirement::new::<
            &str,
            [&str; 0],
            &str,
        >("token", []);
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                operation.security = Some(vec![requirement.clone()]);
                let responses = &mut operation.responses.responses;
                for (status, description) in [
                    ("400", "A parameter or body that cannot be read"),
                    ("401", "No token, or not a live one"),
                    ("403", "The token's role is too low"),
                    ("429", "Too many requests for this token: see Retry-After"),
                    (
                        "503",
                        "The database is unavailable: try again (Retry-After)",
                    ),
                ] {
                    responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error(description));
                }
            }
        }
    }
}

/// The API, nested under `/api/v1` by the caller.
pub fn router(state: &AppState) -> Router {
    let api = ApiState {
        services: state.services.clone(),
        limiter: Arc::new(limiter::Limiter::new(
            state.services.config.api_requests_per_second,
        )),
        streams: Default::default(),
        ending: state.ending.clone(),
    };
    let (routes, doc) = OpenApiRouter::<ApiState>::with_openapi(ApiDoc::openapi())
        .merge(routes::router())
        .split_for_parts();
    let doc = Arc::new(doc);
    // Bodies are read only once the token is known (a stranger's are not).
    let routes = routes
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::body::bounded,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            api.clone(),
            authenticate,
        ));
    Router::new()
        .merge(routes)
        .route(
            "/openapi.json",
            get(move || {
                let doc = doc.clone();
                async move { Json(doc.as_ref().clone()) }
            }),
        )
        .fallback(|| async {
            ApiError::from(OpError::NotFound(
                "no such API route: see /api/v1/openapi.json".into(),
            ))
        })
        .with_state(api)
        .layer(axum::middleware::map_response(as_error_body))
}

/// Answers that layers below the handlers write as text (413 and 408 from
/// the body limits, 405) in the API's `{"code", "detail"}` too.
async fn as_error_body(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let code = match status {
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        StatusCode::TOO_MANY_REQUESTS => "rate_limited",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let detail = match String::from_utf8_lossy(&text).trim() {
        "" => status.canonical_reason().unwrap_or("error").to_owned(),
        text => text.to_owned(),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = Json(serde_json::json!({"code": code, "detail": detail}));
    let mut response = body.into_response();
    *response.status_mut() = status;
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    }
    response
}

/// Resolves the bearer token to its caller (401 unless live) and applies
/// the token's rate (429); the caller goes into the request's extensions.
/// An address that sent `bad_credentials::LIMIT` tokens that did not
/// verify within a minute gets 429 without a look-up for the rest of it.
async fn authenticate(State(api): State<ApiState>, mut request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .map(str::to_owned);
    let Some(presented) = presented else {
        return ApiError::from(OpError::Unauthorized(
            "send Authorization: Bearer <token> (replaysafe tokens create)".into(),
        ))
        .into_response();
    };
    let address = request
        .extensions()
        .get::<replaysafe_core::accounts::ClientAddr>()
        .map(|a| a.0);
    let bad = &api.services.bad_credentials;
    if let Some(wait) = address.and_then(|a| bad.refused(a)) {
        return too_many(
            "too many tokens that do not verify from this address".into(),
            wait,
        );
    }
    let caller =
        match replaysafe_core::accounts::tokens::caller(&api.services.pool, &presented).await {
            Ok(caller) => caller,
            Err(refusal) => {
                if let (OpError::Unauthorized(_), Some(address)) = (&refusal, address) {
                    bad.failed(address);
                }
                return ApiError::from(refusal).into_response();
            }
        };
    if let Err(wait) = api.limiter.take(caller.id) {
        return too_many(
            format!(
                "this token may make {} requests a second",
                api.limiter.per_second()
            ),
            wait,
        );
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// 429 with the seconds to wait.
fn too_many(detail: String, wait: std::time::Duration) -> Response {
    let mut response = ApiError::from(OpError::TooManyRequests(detail)).into_response();
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_str(&secs.to_string()).expect("digits"),
    );
    response
}

/// An error as the API answers it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable: unauthorized, forbidden, not_found, conflict, bad_request,
    /// invalid, rate_limited, unavailable, internal, or a refusal of the
    /// dedup layer (already_completed, in_progress, dead_lettered, rejected).
    code: String,
    /// For people: what went wrong, and what to do.
    detail: String,
    /// A refused re-delivery: the dedup layer's whole answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<replaysafe_types::actions::RedeliveryResult>,
}

pub enum ApiError {
    App(OpError),
    /// Well-formed JSON whose values do not fit (422).
    Invalid(String),
    /// The dedup layer refused a re-delivery (409), with its answer.
    Refused(replaysafe_types::actions::RedeliveryResult),
}

impl From<OpError> for ApiError {
    fn from(e: OpError) -> Self {
        ApiError::App(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            ApiError::App(e) => (
                e.status(),
                ErrorBody {
                    code: e.code().into(),
                    detail: e.message().into(),
                    result: None,
                },
            ),
            ApiError::Invalid(detail) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorBody {
                    code: "invalid".into(),
                    detail,
                    result: None,
                },
            ),
            ApiError::Refused(result) => (
                StatusCode::CONFLICT,
                ErrorBody {
                    code: match result.outcome {
                        Outcome::Completed => "already_completed",
                        Outcome::InProgress => "in_progress",
                        Outcome::Dead => "dead_lettered",
                        Outcome::Rejected => "rejected",
                        Outcome::Claimed | Outcome::Unavailable | Outcome::Refused => "refused",
                    }
                    .into(),
                    detail: result.message.clone(),
                    result: Some(result),
                },
            ),
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

pub type ApiResult<T> = Result<Json<T>, ApiError>;

/// The operations' context for this request: the token's caller (set by
/// `authenticate`), the server's services, the client address.
pub struct ApiCx(pub Cx);

impl<S> FromRequestParts<S> for ApiCx
where
    ApiState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let api = ApiState::from_ref(state);
        let caller = parts.extensions.get::<Caller>().cloned();
        let remote_addr = parts
            .extensions
            .get::<ClientAddr>()
            .map(|ClientAddr(addr)| addr.to_string());
        Ok(ApiCx(Cx {
            services: api.services,
            caller,
            remote_addr,
        }))
    }
}

/// Query parameters, refused as `{"code": "bad_request"}`.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e| OpError::BadRequest(e.body_text()).into())
    }
}

/// A path parameter, refused as `{"code": "bad_request"}`.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| OpError::BadRequest(e.body_text()).into())
    }
}

/// A JSON body: unreadable is 400, values that do not fit 422. An empty
/// body reads as `{}`, so bodies of optional fields may be left out.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|e| ApiError::from(OpError::BadRequest(e.body_text())))?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        serde_path_to_error::deserialize(&mut deserializer)
            .map(ApiJson)
            .map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                if inner.is_data() {
                    ApiError::Invalid(format!("{path}: {inner}"))
                } else {
                    ApiError::from(OpError::BadRequest(format!(
                        "the body is not JSON: {inner}"
                    )))
                }
            })
    }
}
