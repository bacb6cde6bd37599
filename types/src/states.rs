//! States that travel as words on the wire and in the database, typed
//! everywhere between.

use serde::{Deserialize, Serialize};

/// A destination's circuit breaker (`destination_gates.breaker`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(feature = "sqlx", sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum Breaker {
    /// Attempts go.
    #[default]
    Closed,
    /// Attempts wait, counting none, until the cool-down or an operator.
    Open,
    /// One probe is out.
    HalfOpen,
}

impl Breaker {
    pub fn as_str(self) -> &'static str {
        match self {
            Breaker::Closed => "closed",
            Breaker::Open => "open",
            Breaker::HalfOpen => "half_open",
        }
    }
}

impl std::fmt::Display for Breaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
