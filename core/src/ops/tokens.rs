//! API tokens on the Tokens page and `/api/v1/tokens`: made (shown once),
//! listed and revoked by an admin, as the command line does on the database
//! (`accounts::tokens::create`).

use replaysafe_types::auth::Role;
use replaysafe_types::tokens::{CreatedToken, TokenRow};

use crate::accounts::tokens::{create as create_token, list, revoke_where, Target, TokenError};
use crate::error::OpError;
use crate::ops::Cx;

/// The Tokens page's list (admin).
pub async fn tokens(cx: &Cx) -> Result<Vec<TokenRow>, OpError> {
    cx.require(Role::Admin)?;
    Ok(list(&cx.services.pool).await?)
}

/// The lifetimes a token can be made with in the browser, in days (None:
/// never, which the page warns about); the command line takes any.
pub const LIFETIMES_DAYS: &[Option<i64>] = &[Some(7), Some(30), Some(90), Some(365), None];

/// Makes a token (admin); the answer is the only place it is shown.
pub async fn create(
    cx: &Cx,
    name: &str,
    role: Role,
    expires_in_days: Option<i64>,
) -> Result<CreatedToken, OpError> {
    let admin = cx.require(Role::Admin)?;
    if !LIFETIMES_DAYS.contains(&expires_in_days) {
        return Err(OpError::BadRequest(
            "a token expires in 7, 30, 90 or 365 days, or never".into(),
        ));
    }
    let secs = expires_in_days.map(|d| d * 24 * 3600);
    let (token, row) = create_token(
        &cx.services.pool,
        name.trim(),
        role,
        secs,
        admin.who(),
        cx.remote_addr.as_deref(),
    )
    .await
    .map_err(|e| match e {
        TokenError::Db(e) => OpError::database(e),
        TokenError::Exists(_) => OpError::Conflict(e.to_string()),
        other => OpError::BadRequest(other.to_string()),
    })?;
    Ok(CreatedToken { token, row })
}

/// Revokes a token by id (admin).
pub async fn revoke(cx: &Cx, id: i64) -> Result<TokenRow, OpError> {
    let admin = cx.require(Role::Admin)?;
    revoke_where(
        &cx.services.pool,
        Target::Id(id),
        admin.who(),
        cx.remote_addr.as_deref(),
    )
    .await
    .map_err(|e| match e {
        TokenError::Db(e) => OpError::database(e),
        TokenError::Unknown(_) => OpError::NotFound("no live token has that id".into()),
        other => OpError::BadRequest(other.to_string()),
    })
}
