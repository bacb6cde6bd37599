//! Accounts (spec section 7): who is calling (a signed-in person or an API
//! token), and with which role.

use serde::{Deserialize, Serialize};

/// Roles, each including the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// On-call: reads everything.
    Viewer,
    /// Re-delivers, pauses and resumes.
    Operator,
    /// Forces re-execution; manages users.
    Admin,
}

impl Role {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// Who acts: a person signed in to the dashboard, or an API token. Both
/// hold a role, and every operation checks it in one place
/// (`replaysafe_core::ops::Cx::require`), whichever way the call came.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Caller {
    /// The user's id, or the token's (see `via`).
    pub id: i64,
    /// The username, or the token's name.
    pub username: String,
    pub role: Role,
    pub via: Via,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Session,
    Token,
}

impl Caller {
    pub fn can(&self, role: Role) -> bool {
        self.role >= role
    }

    pub fn user_id(&self) -> Option<i64> {
        (self.via == Via::Session).then_some(self.id)
    }

    pub fn token_id(&self) -> Option<i64> {
        (self.via == Via::Token).then_some(self.id)
    }

    /// How the audit log names this caller.
    pub fn who(&self) -> Who<'_> {
        Who {
            user_id: self.user_id(),
            token_id: self.token_id(),
            name: &self.username,
        }
    }
}

/// A username or an API token's name: 1 to 64 letters, digits, '.', '_',
/// '-' or '@' (the audit log names either; neither may hide anything).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

/// Who an audit entry is by: a user, a token, or neither (the command line,
/// an unknown name at sign-in), always with a name.
#[derive(Clone, Copy, Debug)]
pub struct Who<'a> {
    pub user_id: Option<i64>,
    pub token_id: Option<i64>,
    pub name: &'a str,
}

impl<'a> Who<'a> {
    /// Neither a user nor a token: `cli:$USER`, an unknown name.
    pub fn named(name: &'a str) -> Self {
        Who {
            user_id: None,
            token_id: None,
            name,
        }
    }
}
