//! API tokens (issue 16): what scripts, bots and the CLI call `/api/v1` with.
//! A token holds a role like a person and is checked in the same place; what
//! it does is audit-logged under its name. Created on the command line
//! (`replaysafe token create`, printed once), listed and revoked there or on
//! the Tokens page by an admin. Only a SHA-256 of a token is stored.

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
