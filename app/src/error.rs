//! The dashboard's one server-side error: what went wrong, with one status
//! mapping. A server function ending in one sets that status on its response
//! and the message is what the page shows; a database failure's cause goes
//! to the server log, never to the browser.

use http::StatusCode;
use leptos::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppError {
    /// No session: sign in first.
    Unauthorized(String),
    /// Signed in, but the role is too low.
    Forbidden(String),
    NotFound(String),
    /// The request conflicts with the record's state (an event in flight).
    Conflict(String),
    BadRequest(String),
    TooManyRequests(String),
    /// The database or a dependency is away: try again shortly.
    Unavailable(String),
    /// The server is set up wrongly (no session layer, no context).
    Misconfigured(String),
}

impl AppError {
    pub fn status(&self) -> StatusCode {
        match self {
            AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::Conflict(_) => StatusCode::CONFLICT,
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            AppError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Misconfigured(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The API's stable name for it (`{"code", "detail"}`).
    pub fn code(&self) -> &'static str {
        match self {
            AppError::Unauthorized(_) => "unauthorized",
            AppError::Forbidden(_) => "forbidden",
            AppError::NotFound(_) => "not_found",
            AppError::Conflict(_) => "conflict",
            AppError::BadRequest(_) => "bad_request",
            AppError::TooManyRequests(_) => "rate_limited",
            AppError::Unavailable(_) => "unavailable",
            AppError::Misconfigured(_) => "internal",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            AppError::Unauthorized(m)
            | AppError::Forbidden(m)
            | AppError::NotFound(m)
            | AppError::Conflict(m)
            | AppError::BadRequest(m)
            | AppError::TooManyRequests(m)
            | AppError::Unavailable(m)
            | AppError::Misconfigured(m) => m,
        }
    }

    /// The same error with another message.
    pub fn with_message(self, message: String) -> Self {
        match self {
            AppError::Unauthorized(_) => AppError::Unauthorized(message),
            AppError::Forbidden(_) => AppError::Forbidden(message),
            AppError::NotFound(_) => AppError::NotFound(message),
            AppError::Conflict(_) => AppError::Conflict(message),
            AppError::BadRequest(_) => AppError::BadRequest(message),
            AppError::TooManyRequests(_) => AppError::TooManyRequests(message),
            AppError::Unavailable(_) => AppError::Unavailable(message),
            AppError::Misconfigured(_) => AppError::Misconfigured(message),
        }
    }

    /// `what` does not exist.
    pub fn not_found(what: &str) -> Self {
        AppError::NotFound(format!("{what} not found"))
    }

    /// A database failure: logged with its cause, shown as a stable message.
    pub fn database(e: sqlx::Error) -> Self {
        tracing::error!(error = %e, "database error in a server function");
        AppError::Unavailable("the database is unavailable; try again shortly".into())
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        AppError::database(e)
    }
}

// Not `std::error::Error`: server_fn converts every such error into a
// ServerFnError by its message alone, and this one carries a status too.
impl From<AppError> for ServerFnError {
    fn from(e: AppError) -> Self {
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(e.status());
        }
        ServerFnError::new(e.message())
    }
}
