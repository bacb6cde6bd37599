//! Accounts (spec section 7): who is calling (a signed-in person or an API
//! token), with which role; passwords, the sign-in throttle and the audit
//! log. Every operation starts with `ops::Cx::require(role)`, which answers
//! 401 or 403 through `authorize`, the one role check.

mod audit;
pub mod bad_credentials;
mod password;
mod sign_in;
mod throttle;
pub mod tokens;

pub use audit::{record, Entry};
pub use bad_credentials::BadCredentials;
pub use password::{hash_password, verify_password};
pub use sign_in::*;
pub use throttle::{prune as prune_sign_in_attempts, unlock};

use replaysafe_types::auth::{Caller, Role};
use replaysafe_types::time::Clock;
use replaysafe_types::users::{Preferences, Theme};

use crate::error::OpError;

/// The session key holding the signed-in user's id.
pub const USER_KEY: &str = "user_id";
/// The session key holding the user's password epoch at sign-in: a session
/// whose epoch is no longer the user's (the password changed) has ended.
/// A session from before epochs holds none: epoch 0.
pub const PASSWORD_EPOCH_KEY: &str = "password_epoch";

/// The client's address as the listener worked it out: the peer, or
/// behind a trusted proxy the address its `X-Forwarded-For` names.
/// Put in every request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub std::net::IpAddr);

/// The signed-in user of a session, if the account still exists, is
/// enabled and has the password it signed in with: disabling a user or
/// changing their password ends their sessions at once. With it, whether
/// they signed in with a one-time password an admin set and must choose
/// their own before anything else (read here, with the user, on every
/// request: the flag is the account's, not the session's).
/// `user_id`, `password_epoch`: what the session holds under `USER_KEY` and
/// `PASSWORD_EPOCH_KEY`.
pub async fn user_of(
    pool: &sqlx::PgPool,
    user_id: i64,
    password_epoch: i32,
) -> Result<Option<SessionUser>, sqlx::Error> {
    let row = sqlx::query!(
        "SELECT id, username, role, must_change_password, time_zone, clock, theme FROM users
         WHERE id = $1 AND NOT disabled AND password_epoch = $2",
        user_id,
        password_epoch
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.and_then(|r| {
        Role::parse(&r.role).map(|role| SessionUser {
            caller: Caller {
                id: r.id,
                username: r.username,
                role,
                via: replaysafe_types::auth::Via::Session,
            },
            must_change_password: r.must_change_password,
            preferences: Preferences {
                time_zone: r.time_zone,
                clock: Clock::parse(&r.clock).unwrap_or_default(),
                theme: Theme::parse(&r.theme).unwrap_or_default(),
            },
        })
    }))
}

/// A session's user, whether they must choose their own password first,
/// and how they read the pages.
#[derive(Clone, Debug)]
pub struct SessionUser {
    pub caller: Caller,
    pub must_change_password: bool,
    pub preferences: Preferences,
}

/// The one role check, whoever calls (a session or a token): 401
/// without a caller, 403 with too low a role.
pub fn authorize(caller: Option<&Caller>, role: Role) -> Result<&Caller, OpError> {
    match caller {
        None => Err(OpError::Unauthorized("sign in first".into())),
        Some(caller) if !caller.can(role) => Err(OpError::Forbidden(format!(
            "this needs the {} role; you are {}",
            role.as_str(),
            caller.role.as_str()
        ))),
        Some(caller) => Ok(caller),
    }
}
