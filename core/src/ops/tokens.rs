//! API tokens on the Tokens page and `/api/v1/tokens`: listed and revoked
//! by an admin (created on the command line, `accounts::tokens::create`).

use replaysafe_types::auth::Role;
use replaysafe_types::tokens::TokenRow;

use crate::accounts::tokens::{list, revoke_where, Target, TokenError};
use crate::error::OpError;
use crate::ops::Cx;

/// The Tokens page's list (admin).
pub async fn tokens(cx: &Cx) -> Result<Vec<TokenRow>, OpError> {
    cx.require(Role::Admin)?;
    Ok(list(&cx.services.pool).await?)
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
