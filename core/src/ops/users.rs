//! Accounts in the browser (issue 40): an admin lists users, makes one with
//! a one-time password, resets one, changes a role, disables or enables;
//! every signed-in person changes their own password. The changes
//! themselves (and their guards: the last active admin stays one) are
//! `db::users`'; each is audit-logged, refusals too.

use replaysafe_types::auth::Role;
use replaysafe_types::users::{OneTimePassword, UserRow};

use crate::accounts::{check_sign_in, settle_password_check, SignInLimits};
use crate::db::users::{self, ChangeError, UserError};
use crate::error::OpError;
use crate::ops::Cx;

/// Every user (admin).
pub async fn list(cx: &Cx) -> Result<Vec<UserRow>, OpError> {
    cx.require(Role::Admin)?;
    Ok(users::rows(&cx.services.pool).await?)
}

/// Makes an account; its one-time password is in the answer, only there.
pub async fn add(cx: &Cx, username: &str, role: Role) -> Result<OneTimePassword, OpError> {
    let admin = cx.require(Role::Admin)?;
    let made = users::create_one_time(
        &cx.services.pool,
        username,
        role,
        admin.who(),
        cx.remote_addr.as_deref(),
    )
    .await;
    refused_audited(cx, "user.add", username, made).await
}

/// A new one-time password for a user: their sessions end.
pub async fn reset_password(cx: &Cx, id: i64) -> Result<OneTimePassword, OpError> {
    let admin = cx.require(Role::Admin)?;
    let reset = users::reset_one_time(
        &cx.services.pool,
        id,
        admin.who(),
        cx.remote_addr.as_deref(),
    )
    .await;
    refused_audited(cx, "user.reset_password", &format!("#{id}"), reset).await
}

pub async fn set_role(cx: &Cx, id: i64, role: Role) -> Result<UserRow, OpError> {
    let admin = cx.require(Role::Admin)?;
    let changed = users::set_role(
        &cx.services.pool,
        id,
        role,
        admin.who(),
        cx.remote_addr.as_deref(),
    )
    .await;
    refused_audited(cx, "user.role", &format!("#{id}"), changed).await
}

pub async fn set_enabled(cx: &Cx, id: i64, enabled: bool) -> Result<UserRow, OpError> {
    let admin = cx.require(Role::Admin)?;
    let changed = users::set_enabled(
        &cx.services.pool,
        id,
        enabled,
        admin.who(),
        cx.remote_addr.as_deref(),
    )
    .await;
    let action = if enabled {
        "user.enable"
    } else {
        "user.disable"
    };
    refused_audited(cx, action, &format!("#{id}"), changed).await
}

/// The signed-in person's own password: the current one is checked as a
/// sign-in is (throttled; a wrong one counts as a failed sign-in), the new
/// one set, and every other session of theirs ends. Returns the new
/// password epoch, for the session that made the change to keep.
pub async fn change_own_password(
    cx: &Cx,
    limits: &SignInLimits,
    current: String,
    new: &str,
    confirm: &str,
) -> Result<i32, OpError> {
    let caller = cx.require(Role::Viewer)?;
    if caller.user_id().is_none() {
        return Err(OpError::Forbidden(
            "an API token has no password; sign in to change yours".into(),
        ));
    }
    if new != confirm {
        return Err(OpError::BadRequest(
            "the new password and its confirmation differ".into(),
        ));
    }
    if new == current {
        return Err(OpError::BadRequest(
            "the new password is the current one".into(),
        ));
    }
    if new.chars().count() < users::MIN_PASSWORD {
        return Err(OpError::BadRequest(format!(
            "a password is at least {} characters",
            users::MIN_PASSWORD
        )));
    }
    let address = cx.remote_addr.clone().unwrap_or_default();
    let checked = check_sign_in(
        &cx.services.pool,
        limits,
        &caller.username,
        current,
        &address,
    )
    .await
    .map_err(|e| match e {
        OpError::Unauthorized(_) => OpError::BadRequest("your current password is not that".into()),
        other => other,
    })?;
    settle_password_check(&cx.services.pool, &checked).await?;
    if checked.user.id != caller.id {
        return Err(OpError::Conflict(
            "your account changed; sign in again".into(),
        ));
    }
    // The new password's hash takes the memory a sign-in's does: within the
    // same few at once.
    let Ok(_hashing) = limits.hashing.clone().try_acquire_owned() else {
        return Err(OpError::TooManyRequests(
            "too many passwords being checked at once; try again in a moment".into(),
        ));
    };
    users::change_own_password(
        &cx.services.pool,
        caller.who(),
        checked.password_epoch,
        new,
        cx.remote_addr.as_deref(),
    )
    .await
    .map_err(|e| match e {
        // Changed meanwhile (by another session, or an admin's reset).
        ChangeError::Unknown(_) => {
            OpError::Conflict("your password changed meanwhile; sign in again".into())
        }
        other => other.into(),
    })
}

/// An admin's change as it went: a refusal (last admin, yourself, a taken
/// name) is audit-logged too, with why.
async fn refused_audited<T>(
    cx: &Cx,
    action: &str,
    target: &str,
    result: Result<T, ChangeError>,
) -> Result<T, OpError> {
    match result {
        Ok(v) => Ok(v),
        Err(
            e @ (ChangeError::LastAdmin(_)
            | ChangeError::Yourself
            | ChangeError::User(UserError::Exists(_))),
        ) => {
            if let Some(admin) = cx.caller.as_ref() {
                cx.audit(
                    admin,
                    action,
                    Some(target),
                    "refused",
                    serde_json::json!({"reason": e.to_string()}),
                )
                .await?;
            }
            Err(e.into())
        }
        Err(e) => Err(e.into()),
    }
}

/// The signed-in person's reading preferences, each given one replacing
/// theirs: the zone their browser reports (an IANA name), their clock
/// (`local` or `utc`) and theme (`system`, `light`, `dark`).
pub async fn set_own_preferences(
    cx: &Cx,
    time_zone: Option<&str>,
    clock: Option<&str>,
    theme: Option<&str>,
) -> Result<(), OpError> {
    let caller = cx.require(Role::Viewer)?;
    let Some(id) = caller.user_id() else {
        return Err(OpError::Forbidden(
            "an API token has no pages to read; sign in to set these".into(),
        ));
    };
    let bad = |what: &str, value: &str| OpError::BadRequest(format!("{what}: unknown {value:?}"));
    let time_zone = match time_zone {
        Some(name) => Some(
            replaysafe_types::time::Zone::named(name)
                .ok_or_else(|| bad("time zone", name))?
                .name(),
        ),
        None => None,
    };
    let clock = clock
        .map(|c| replaysafe_types::time::Clock::parse(c).ok_or_else(|| bad("clock", c)))
        .transpose()?;
    let theme = theme
        .map(|t| replaysafe_types::users::Theme::parse(t).ok_or_else(|| bad("theme", t)))
        .transpose()?;
    Ok(users::set_preferences(&cx.services.pool, id, time_zone, clock, theme).await?)
}
