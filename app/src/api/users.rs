//! Users in the browser (issue 40): an admin's list and changes, each a
//! call of `replaysafe_core::ops::users`, which checks the role.

#[cfg(feature = "ssr")]
use crate::api::fail;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use replaysafe_core::ops::users as ops;
#[cfg(feature = "ssr")]
use replaysafe_types::auth::Role;
pub use replaysafe_types::users::*;

#[cfg(feature = "ssr")]
fn role_of(text: &str) -> Result<Role, ServerFnError> {
    Role::parse(text).ok_or_else(|| {
        fail(replaysafe_core::error::OpError::BadRequest(
            "a role is viewer, operator or admin".into(),
        ))
    })
}

#[server(endpoint = "users")]
pub async fn list_users() -> Result<Vec<UserRow>, ServerFnError> {
    ops::list(&crate::api::cx().await?).await.map_err(fail)
}

#[server(endpoint = "user-add")]
pub async fn add_user(username: String, role: String) -> Result<OneTimePassword, ServerFnError> {
    ops::add(&crate::api::cx().await?, &username, role_of(&role)?)
        .await
        .map_err(fail)
}

#[server(endpoint = "user-reset-password")]
pub async fn reset_user_password(id: i64) -> Result<OneTimePassword, ServerFnError> {
    ops::reset_password(&crate::api::cx().await?, id)
        .await
        .map_err(fail)
}

#[server(endpoint = "user-role")]
pub async fn set_user_role(id: i64, role: String) -> Result<UserRow, ServerFnError> {
    ops::set_role(&crate::api::cx().await?, id, role_of(&role)?)
        .await
        .map_err(fail)
}

#[server(endpoint = "user-enabled")]
pub async fn set_user_enabled(id: i64, enabled: bool) -> Result<UserRow, ServerFnError> {
    ops::set_enabled(&crate::api::cx().await?, id, enabled)
        .await
        .map_err(fail)
}
