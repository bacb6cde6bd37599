//! API tokens (issue 16): what scripts, bots and the CLI call `/api/v1` with.
//! A token holds a role like a person and is checked in the same place; what
//! it does is audit-logged under its name. Created, listed and revoked on
//! the command line (`replaysafe tokens create`) or on the Tokens page by an
//! admin; a token is shown once. Only a SHA-256 of a token is stored.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::ops::tokens as ops;
pub use replaysafe_types::tokens::*;
#[server(endpoint = "tokens")]
pub async fn list_tokens() -> Result<Vec<TokenRow>, ServerFnError> {
    ops::tokens(&crate::api::cx().await?).await.map_err(fail)
}

#[server(endpoint = "token-revoke")]
pub async fn revoke_token(id: i64) -> Result<TokenRow, ServerFnError> {
    ops::revoke(&crate::api::cx().await?, id)
        .await
        .map_err(fail)
}

/// Makes a token (admin): the answer is the only time it is shown.
/// `expires_in_days`: 7, 30, 90, 365, or empty for never.
#[server(endpoint = "token-create")]
pub async fn create_token(
    name: String,
    role: String,
    #[server(default)] expires_in_days: String,
) -> Result<CreatedToken, ServerFnError> {
    use replaysafe_core::error::OpError;
    let role = replaysafe_types::auth::Role::parse(&role).ok_or_else(|| {
        fail(OpError::BadRequest(
            "a role is viewer, operator or admin".into(),
        ))
    })?;
    let days = match expires_in_days.trim() {
        "" | "never" => None,
        text => Some(text.parse::<i64>().map_err(|_| {
            fail(OpError::BadRequest(
                "an expiry is a number of days, or never".into(),
            ))
        })?),
    };
    ops::create(&crate::api::cx().await?, &name, role, days)
        .await
        .map_err(fail)
}
