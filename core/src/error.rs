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
    /// A bug or a state the code did not expect: logged with its cause.
    Internal(String),
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
            OpError::Misconfigured(_) | OpError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
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
            OpError::Misconfigured(_) | OpError::Internal(_) => "internal",
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
            | OpError::Misconfigured(m)
            | OpError::Internal(m) => m,
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
            OpError::Internal(_) => OpError::Internal(message),
        }
    }

    /// `what` does not exist.
    pub fn not_found(what: &str) -> Self {
        OpError::NotFound(format!("{what} not found"))
    }

    /// A database failure, logged with its cause and where it was met:
    /// one that passes (the server away, a failover, a conflict between
    /// transactions) is a 503 to try again; anything else is a 500, since
    /// trying again will not mend it.
    #[track_caller]
    pub fn database(e: sqlx::Error) -> Self {
        let at = std::panic::Location::caller();
        if is_transient(&e) {
            tracing::warn!(error = %e, %at, "the database did not answer an operation");
            OpError::Unavailable("the database is unavailable; try again shortly".into())
        } else {
            tracing::error!(error = %e, %at, "database error in an operation");
            OpError::Internal("internal error: the server's log has the cause".into())
        }
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl From<sqlx::Error> for OpError {
    #[track_caller]
    fn from(e: sqlx::Error) -> Self {
        OpError::database(e)
    }
}

/// Whether `e` is the database being away or unable for now (a broken or
/// refused connection, a failover's standby or read-only server, a
/// shutdown, a serialization failure or deadlock): worth retrying as long
/// as it takes. Anything else (a statement the server refuses for its
/// content, a row that does not decode) fails again the same way.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || matches!(code.as_ref(), "25006" | "40001" | "40P01")
        }),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_passing_database_errors_ask_to_try_again() {
        assert_eq!(
            OpError::database(sqlx::Error::PoolTimedOut).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let bug = OpError::database(sqlx::Error::ColumnNotFound("x".into()));
        assert_eq!(bug.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(bug.code(), "internal");
        assert!(!bug.message().contains('x'), "the cause stays in the log");
    }
}
