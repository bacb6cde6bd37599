//! API tokens (issue 16): what scripts, bots and the CLI call `/api/v1` with.
//! A token holds a role like a person and is checked in the same place; what
//! it does is audit-logged under its name. Created on the command line
//! (`replaysafe token create`, printed once), listed and revoked there or on
//! the Tokens page by an admin. Only a SHA-256 of a token is stored.

use serde::{Deserialize, Serialize};

/// A token as lists show it: never the token, only its first characters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    /// viewer, operator or admin.
    pub role: String,
    /// The token's first characters, to tell tokens apart.
    pub prefix: String,
    #[serde(with = "crate::time::wire")]
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub created_by: Option<String>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub last_used_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
    pub state: crate::states::TokenState,
}

/// A token just made: the only time the token itself is shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedToken {
    pub token: String,
    pub row: TokenRow,
}
