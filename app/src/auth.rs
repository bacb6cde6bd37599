//! Signing in and out, and who is signed in: the session is the web edge's,
//! the password check, the throttle and the audit log are
//! `replaysafe_core::accounts`'.

use leptos::prelude::*;
pub use replaysafe_types::auth::*;

/// Who is signed in; None when no one is (this alone needs no session).
#[server(endpoint = "me")]
pub async fn who_am_i() -> Result<Option<Caller>, ServerFnError> {
    ssr::session_user().await
}

/// Signs in: the session id is renewed, so an id planted before sign-in is
/// worthless after it. Failures are rate-limited per user and per address.
#[server(endpoint = "login")]
pub async fn login(
    username: String,
    password: String,
    #[server(default)] next: String,
) -> Result<(), ServerFnError> {
    ssr::login(username, password, next).await
}

/// Changes the signed-in person's own password: the current one checked as
/// a sign-in is; every other session of theirs ends, this one goes on.
#[server(endpoint = "password")]
pub async fn change_password(
    current: String,
    new: String,
    confirm: String,
) -> Result<(), ServerFnError> {
    ssr::change_password(current, new, confirm).await
}

/// Whether this session must choose its own password before anything else
/// (it signed in with a one-time password an admin set).
#[server(endpoint = "must-change-password")]
pub async fn must_change_password() -> Result<bool, ServerFnError> {
    ssr::must_change_password().await
}

#[server(endpoint = "logout")]
pub async fn logout() -> Result<(), ServerFnError> {
    ssr::logout().await
}

#[cfg(feature = "ssr")]
pub mod ssr {
    use std::net::SocketAddr;

    use axum::extract::ConnectInfo;
    use leptos::prelude::*;
    use replaysafe_core::accounts::{
        self, ClientAddr, PublicUrl, SessionUser, SignInLimits, PASSWORD_EPOCH_KEY, USER_KEY,
    };
    use replaysafe_core::error::OpError;
    use tower_sessions::Session;

    use super::Caller;
    use crate::api::{fail, services};

    async fn session() -> Result<Session, ServerFnError> {
        leptos_axum::extract::<Session>()
            .await
            .map_err(|_| fail(OpError::Misconfigured("sessions are not set up".into())))
    }

    /// The client's address as the listener worked it out (`ClientAddr`),
    /// else the peer's.
    pub async fn remote_addr() -> Option<String> {
        if let Ok(axum::Extension(ClientAddr(addr))) =
            leptos_axum::extract::<axum::Extension<ClientAddr>>().await
        {
            return Some(addr.to_string());
        }
        leptos_axum::extract::<ConnectInfo<SocketAddr>>()
            .await
            .ok()
            .map(|ConnectInfo(addr)| addr.ip().to_string())
    }

    /// The user a session holds, if the account still exists, is enabled
    /// and has the password the session signed in with (`accounts::user_of`).
    pub async fn caller_of(
        pool: &replaysafe_core::ops::PgPool,
        session: &Session,
    ) -> Result<Option<SessionUser>, OpError> {
        // The session store is the database: an error there is an outage,
        // not a stranger's cookie.
        let unavailable = |_: tower_sessions::session::Error| {
            OpError::Unavailable("the database is unavailable; try again shortly".into())
        };
        let Some(id) = session.get::<i64>(USER_KEY).await.map_err(unavailable)? else {
            return Ok(None);
        };
        let epoch = session
            .get::<i32>(PASSWORD_EPOCH_KEY)
            .await
            .map_err(unavailable)?
            .unwrap_or(0);
        let user = accounts::user_of(pool, id, epoch).await?;
        if user.is_none() {
            // Ended (disabled, or its password changed): its cookie goes, so a
            // page left open stops presenting it.
            session.flush().await.map_err(unavailable)?;
        }
        Ok(user)
    }

    pub async fn session_user() -> Result<Option<Caller>, ServerFnError> {
        // The gate already looked the user up for this request.
        let checked = use_context::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>().cloned());
        if let Some(user) = checked {
            return Ok(Some(user));
        }
        let pool = services()?.pool;
        Ok(caller_of(&pool, &session().await?)
            .await
            .map_err(fail)?
            .map(|u| u.caller))
    }

    pub async fn login(
        username: String,
        password: String,
        next: String,
    ) -> Result<(), ServerFnError> {
        let pool = services()?.pool;
        let limits = use_context::<SignInLimits>().ok_or_else(|| {
            fail(OpError::Misconfigured(
                "server misconfigured: no sign-in limits".into(),
            ))
        })?;
        let address = remote_addr().await.unwrap_or_default();
        let signed = accounts::check_sign_in(&pool, &limits, &username, password, &address)
            .await
            .map_err(fail)?;
        let started = async {
            let session = session().await?;
            let unstarted = |_| fail(OpError::Unavailable("could not start a session".into()));
            session.cycle_id().await.map_err(unstarted)?;
            session
                .insert(USER_KEY, signed.user.id)
                .await
                .map_err(unstarted)?;
            session
                .insert(PASSWORD_EPOCH_KEY, signed.password_epoch)
                .await
                .map_err(unstarted)?;
            Ok::<_, ServerFnError>(())
        }
        .await;
        accounts::settle_sign_in(&pool, &signed, started.is_ok())
            .await
            .map_err(fail)?;
        started?;
        let public = use_context::<PublicUrl>().ok_or_else(|| {
            fail(OpError::Misconfigured(
                "server misconfigured: no public URL".into(),
            ))
        })?;
        let next = if signed.must_change_password {
            "/account".to_owned()
        } else {
            accounts::safe_next(&public.0, &next)
        };
        leptos_axum::redirect(&next);
        Ok(())
    }

    pub async fn must_change_password() -> Result<bool, ServerFnError> {
        let pool = services()?.pool;
        Ok(caller_of(&pool, &session().await?)
            .await
            .map_err(fail)?
            .is_some_and(|u| u.must_change_password))
    }

    pub async fn change_password(
        current: String,
        new: String,
        confirm: String,
    ) -> Result<(), ServerFnError> {
        let limits = use_context::<SignInLimits>().ok_or_else(|| {
            fail(OpError::Misconfigured(
                "server misconfigured: no sign-in limits".into(),
            ))
        })?;
        let cx = crate::api::cx().await?;
        let epoch =
            replaysafe_core::ops::users::change_own_password(&cx, &limits, current, &new, &confirm)
                .await
                .map_err(fail)?;
        // This session goes on under the new epoch (and a new id); every
        // other one still holds the old epoch, and has ended.
        let session = session().await?;
        let kept = async {
            session.cycle_id().await?;
            session.insert(PASSWORD_EPOCH_KEY, epoch).await?;
            Ok::<_, tower_sessions::session::Error>(())
        }
        .await;
        kept.map_err(|_| {
            fail(OpError::Unavailable(
                "your password changed; sign in again with it".into(),
            ))
        })
    }

    pub async fn logout() -> Result<(), ServerFnError> {
        let pool = services()?.pool;
        let session = session().await?;
        if let Some(SessionUser { caller: user, .. }) =
            caller_of(&pool, &session).await.map_err(fail)?
        {
            let address = remote_addr().await;
            accounts::record(
                &pool,
                accounts::Entry {
                    who: user.who(),
                    action: "logout",
                    target: None,
                    outcome: "succeeded",
                    detail: Some(serde_json::json!({})),
                    remote_addr: address.as_deref(),
                },
            )
            .await
            .map_err(|e| fail(OpError::database(e)))?;
        }
        let _ = session.flush().await;
        leptos_axum::redirect("/login");
        Ok(())
    }
}
