//! Dashboard accounts as the Users page shows them (issue 40): made, reset,
//! promoted, demoted and disabled by an admin there or on the command line;
//! a password an admin sets is shown once and changed at first sign-in.

use serde::{Deserialize, Serialize};

use crate::auth::Role;

/// A user as the list shows one: never a password or its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub role: Role,
    pub disabled: bool,
    /// Signs in with a one-time password an admin set; must choose its own.
    pub must_change_password: bool,
    #[serde(with = "crate::time::wire")]
    pub created_at: chrono::DateTime<chrono::Utc>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub last_login_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// A one-time password an admin set (a new account, or a reset), shown
/// this once; the user changes it at first sign-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OneTimePassword {
    pub user: UserRow,
    pub password: String,
}
