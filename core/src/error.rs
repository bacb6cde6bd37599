//! The operations' one error: what went wrong, with one status mapping. A
//! server function ending in one sets that status on its response and the
//! message is what the page shows; `/api/v1` answers it as `{code, detail}`;
//! a database failure's cause goes to the server log, never to a client.

use http::StatusCode;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpError {
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

impl OpError {
    pub fn status(&self) -> StatusCode {
        match self {
            OpError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            OpError::Forbidden(_) => StatusCode::FORBIDDEN,
            OpError::NotFound(_) => StatusCode::NOT_FOUND,
            OpError::Conflict(_) => StatusCode::CONFLICT,
            OpError::BadRequest(_) => StatusCode::BAD_REQUEST,
            OpError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            OpError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            OpError::Misconfigured(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The API's stable name for it (`{"code", "detail"}`).
    pub fn code(&self) -> &'static str {
        match self {
            OpError::Unauthorized(_) => "unauthorized",
            OpError::Forbidden(_) => "forbidden",
            OpError::NotFound(_) => "not_found",
            OpError::Conflict(_) => "conflict",
            OpError::BadRequest(_) => "bad_request",
            OpError::TooManyRequests(_) => "rate_limited",
            OpError::Unavailable(_) => "unavailable",
            OpError::Misconfigured(_) => "internal",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            OpError::Unauthorized(m)
            | OpError::Forbidden(m)
            | OpError::NotFound(m)
            | OpError::Conflict(m)
            | OpError::BadRequest(m)
            | OpError::TooManyRequests(m)
            | OpError::Unavailable(m)
            | OpError::Misconfigured(m) => m,
        }
    }

    /// The same error with another message.
    pub fn with_message(self, message: String) -> Self {
        match self {
            OpError::Unauthorized(_) => OpError::Unauthorized(message),
            OpError::Forbidden(_) => OpError::Forbidden(message),
            OpError::NotFound(_) => OpError::NotFound(message),
            OpError::Conflict(_) => OpError::Conflict(message),
            OpError::BadRequest(_) => OpError::BadRequest(message),
            OpError::TooManyRequests(_) => OpError::TooManyRequests(message),
            OpError::Unavailable(_) => OpError::Unavailable(message),
            OpError::Misconfigured(_) => OpError::Misconfigured(message),
        }
    }

    /// `what` does not exist.
    pub fn not_found(what: &str) -> Self {
        OpError::NotFound(format!("{what} not found"))
    }

    /// A database failure: logged with its cause, shown as a stable message.
    pub fn database(e: sqlx::Error) -> Self {
        tracing::error!(error = %e, "database error in a server function");
        OpError::Unavailable("the database is unavailable; try again shortly".into())
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl From<sqlx::Error> for OpError {
    fn from(e: sqlx::Error) -> Self {
        OpError::database(e)
    }
}
