//! Accounts (spec section 7): who is signed in, with which role, and the
//! server functions to sign in and out. Every other server function starts
//! with `ssr::require(role)`, which answers 401 or 403 on the server.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// Roles, each including the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentUser {
    pub id: i64,
    pub username: String,
    pub role: Role,
}

impl CurrentUser {
    pub fn can(&self, role: Role) -> bool {
        self.role >= role
    }
}

/// Who is signed in; None when no one is (this alone needs no session).
#[server(endpoint = "me")]
pub async fn who_am_i() -> Result<Option<CurrentUser>, ServerFnError> {
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

#[server(endpoint = "logout")]
pub async fn logout() -> Result<(), ServerFnError> {
    ssr::logout().await
}

#[cfg(feature = "ssr")]
pub mod ssr {
    use std::net::SocketAddr;

    use axum::extract::ConnectInfo;
    use leptos::prelude::*;
    use tower_sessions::Session;

    use super::{CurrentUser, Role};
    use crate::api::ssr::pool;
    use crate::error::AppError;

    /// The session key holding the signed-in user's id.
    pub const USER_KEY: &str = "user_id";
    /// Failed sign-ins allowed per username from one address (so a guesser
    /// elsewhere cannot lock its owner out), and per address, in `WINDOW_MINUTES`.
    pub const MAX_FAILURES_PER_USER: i64 = 5;
    pub const MAX_FAILURES_PER_ADDRESS: i64 = 20;
    pub const WINDOW_MINUTES: i32 = 15;

    async fn session() -> Result<Session, ServerFnError> {
        leptos_axum::extract::<Session>()
            .await
            .map_err(|_| AppError::Misconfigured("sessions are not set up".into()).into())
    }

    pub async fn remote_addr() -> Option<String> {
        leptos_axum::extract::<ConnectInfo<SocketAddr>>()
            .await
            .ok()
            .map(|ConnectInfo(addr)| addr.ip().to_string())
    }

    /// The signed-in user of a session, if the account still exists and is
    /// enabled: disabling a user ends their sessions at once.
    pub async fn user_of(
        pool: &sqlx::PgPool,
        session: &Session,
    ) -> Result<Option<CurrentUser>, sqlx::Error> {
        let Ok(Some(id)) = session.get::<i64>(USER_KEY).await else {
            return Ok(None);
        };
        let row = sqlx::query!(
            "SELECT id, username, role FROM users WHERE id = $1 AND NOT disabled",
            id
        )
        .fetch_optional(pool)
        .await?;
        Ok(row.and_then(|r| {
            Role::parse(&r.role).map(|role| CurrentUser {
                id: r.id,
                username: r.username,
                role,
            })
        }))
    }

    pub async fn session_user() -> Result<Option<CurrentUser>, ServerFnError> {
        // The gate already looked the user up for this request.
        let checked = use_context::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<CurrentUser>().cloned());
        if let Some(user) = checked {
            return Ok(Some(user));
        }
        let pool = pool()?;
        let session = session().await?;
        user_of(&pool, &session)
            .await
            .map_err(|e| AppError::database(e).into())
    }

    /// The signed-in user if they hold `role`; otherwise 401 (no session)
    /// or 403 (a role too low), set on the response.
    pub async fn require(role: Role) -> Result<CurrentUser, ServerFnError> {
        match session_user().await? {
            None => Err(AppError::Unauthorized("sign in first".into()).into()),
            Some(user) if !user.can(role) => Err(AppError::Forbidden(format!(
                "this needs the {} role; you are {}",
                role.as_str(),
                user.role.as_str()
            ))
            .into()),
            Some(user) => Ok(user),
        }
    }

    /// Appends to the audit log. `detail` is JSON; never secret material.
    pub async fn audit(
        pool: &sqlx::PgPool,
        user: Option<&CurrentUser>,
        username: &str,
        action: &str,
        target: Option<&str>,
        outcome: &str,
        detail: serde_json::Value,
    ) -> Result<(), sqlx::Error> {
        sqlx::query!(
"INSERT INTO audit_log (user_id, username, action, target, outcome, detail, remote_addr)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
user.map(|u| u.id),
username,
action,
target,
outcome,
detail,
remote_addr().await
)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// The dashboard's public URL, provided by the server to every server
    /// function: where sign-in may send a browser back to.
    #[derive(Clone, Debug)]
    pub struct PublicUrl(pub url::Url);

    /// Where to go after signing in: `next` resolved against the public URL
    /// as a browser resolves a `Location` (tabs and newlines dropped,
    /// backslashes read as slashes), kept only when it stays on that origin,
    /// and given back as a path, never `/login` again.
    pub fn safe_next(public: &url::Url, next: &str) -> String {
        const HOME: &str = "/overview";
        let next = next.trim();
        let Ok(target) = public.join(next) else {
            return HOME.into();
        };
        // A path starting `//` (from `/.//x` or `/x/..//y`) would be read
        // by the browser as another host.
        if next.is_empty()
            || target.origin() != public.origin()
            || target.path().starts_with("//")
            || target.path() == "/login"
        {
            return HOME.into();
        }
        match target.query() {
            Some(query) => format!("{}?{query}", target.path()),
            None => target.path().to_owned(),
        }
    }

    /// The longest username accepted (`replaysafe user add` allows 64).
    pub const MAX_USERNAME: usize = 64;
    /// Sign-ins hashing at once (argon2id takes ~19 MiB each).
    pub const HASHING_AT_ONCE: usize = 4;

    /// The server's permits for sign-ins hashing at once, provided as
    /// context (one set per server, so tests' servers do not share one).
    #[derive(Clone, Debug)]
    pub struct HashingPermits(pub std::sync::Arc<tokio::sync::Semaphore>);

    impl Default for HashingPermits {
        fn default() -> Self {
            Self(std::sync::Arc::new(tokio::sync::Semaphore::new(
                HASHING_AT_ONCE,
            )))
        }
    }

    /// Records a sign-in attempt before its password is checked, so that a
    /// parallel burst gets no more tries than a serial one: under a lock
    /// per address, counts the failures (and attempts still being checked)
    /// of this username from this address and of the address alone in the
    /// window. Over a limit, records `rate_limited` (which itself counts
    /// toward no limit) and returns None; else the attempt's audit row.
    async fn begin_attempt(
        pool: &sqlx::PgPool,
        username: &str,
        address: &str,
    ) -> Result<Option<i64>, sqlx::Error> {
        let mut tx = pool.begin().await?;
        sqlx::query!(
            "SELECT pg_advisory_xact_lock(hashtextextended('login:' || $1, 0))",
            address
        )
        .execute(&mut *tx)
        .await?;
        let failures = sqlx::query!(
            r#"SELECT count(*) FILTER (WHERE lower(username) = lower($1)) AS "by_pair!",
                      count(*) AS "by_address!"
               FROM audit_log
               WHERE action = 'login' AND outcome IN ('failed', 'checking')
                 AND remote_addr = $2 AND at > now() - make_interval(mins => $3)"#,
            username,
            address,
            WINDOW_MINUTES
        )
        .fetch_one(&mut *tx)
        .await?;
        let limited = failures.by_pair >= MAX_FAILURES_PER_USER
            || failures.by_address >= MAX_FAILURES_PER_ADDRESS;
        let id = sqlx::query_scalar!(
            "INSERT INTO audit_log (username, action, outcome, detail, remote_addr)
             VALUES ($1, 'login', $2, '{}', $3) RETURNING id",
            username,
            if limited { "rate_limited" } else { "checking" },
            address
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((!limited).then_some(id))
    }

    /// Settles a sign-in attempt's audit row: `failed` or `succeeded`.
    async fn end_attempt(
        pool: &sqlx::PgPool,
        attempt_id: i64,
        user_id: Option<i64>,
        outcome: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query!(
            "UPDATE audit_log SET outcome = $2, user_id = $3 WHERE id = $1 AND outcome = 'checking'",
            attempt_id,
            outcome,
            user_id
        )
        .execute(pool)
        .await?;
        Ok(())
    }

    pub async fn login(
        username: String,
        password: String,
        next: String,
    ) -> Result<(), ServerFnError> {
        let pool = pool()?;
        let username = username.trim().to_owned();
        if username.chars().count() > MAX_USERNAME {
            return Err(AppError::BadRequest(format!(
                "a username is at most {MAX_USERNAME} characters"
            ))
            .into());
        }
        // Hashing takes ~19 MiB per attempt: beyond a few at once, refuse at
        // once rather than let a burst of sign-ins take the memory.
        let permits = use_context::<HashingPermits>().ok_or_else(|| {
            AppError::Misconfigured("server misconfigured: no sign-in permits".into())
        })?;
        // Owned, and moved into the hashing task: a client that goes away
        // mid-hash does not free its permit before the hash is done.
        let Ok(hashing) = permits.0.clone().try_acquire_owned() else {
            return Err(AppError::TooManyRequests(
                "too many sign-ins at once; try again in a moment".into(),
            )
            .into());
        };
        let address = remote_addr().await.unwrap_or_default();
        let Some(attempt_id) = begin_attempt(&pool, &username, &address)
            .await
            .map_err(AppError::database)?
        else {
            return Err(AppError::TooManyRequests(format!(
                "too many failed sign-ins; try again in {WINDOW_MINUTES} minutes"
            ))
            .into());
        };
        let row = sqlx::query!(
            "SELECT id, username, role, password_hash, disabled FROM users WHERE lower(username) = lower($1)",
            &username
        )
        .fetch_optional(&pool)
        .await
        .map_err(AppError::database)?
        .map(|r| (r.id, r.username, r.role, r.password_hash, r.disabled));
        // An unknown name costs the same hash as a known one: timing tells nothing.
        let hash = row.as_ref().map(|r| r.3.clone());
        let verified = tokio::task::spawn_blocking(move || {
            let _hashing = hashing;
            match hash {
                Some(hash) => verify_password(&hash, &password),
                None => {
                    let _ = verify_password(dummy_hash(), &password);
                    false
                }
            }
        })
        .await
        .unwrap_or(false);
        let user = match row {
            Some((id, name, role, _, false)) if verified => {
                Role::parse(&role).map(|role| CurrentUser {
                    id,
                    username: name,
                    role,
                })
            }
            _ => None,
        };
        let Some(user) = user else {
            end_attempt(&pool, attempt_id, None, "failed")
                .await
                .map_err(AppError::database)?;
            return Err(AppError::Unauthorized("wrong username or password".into()).into());
        };
        let session = session().await?;
        session
            .cycle_id()
            .await
            .map_err(|_| AppError::Unavailable("could not start a session".into()))?;
        session
            .insert(USER_KEY, user.id)
            .await
            .map_err(|_| AppError::Unavailable("could not start a session".into()))?;
        sqlx::query!(
            "UPDATE users SET last_login_at = now() WHERE id = $1",
            user.id
        )
        .execute(&pool)
        .await
        .map_err(AppError::database)?;
        end_attempt(&pool, attempt_id, Some(user.id), "succeeded")
            .await
            .map_err(AppError::database)?;
        let public = use_context::<PublicUrl>()
            .ok_or_else(|| AppError::Misconfigured("server misconfigured: no public URL".into()))?;
        leptos_axum::redirect(&safe_next(&public.0, &next));
        Ok(())
    }

    pub async fn logout() -> Result<(), ServerFnError> {
        let pool = pool()?;
        let session = session().await?;
        if let Some(user) = user_of(&pool, &session).await.map_err(AppError::database)? {
            audit(
                &pool,
                Some(&user),
                &user.username,
                "logout",
                None,
                "succeeded",
                serde_json::json!({}),
            )
            .await
            .map_err(AppError::database)?;
        }
        let _ = session.flush().await;
        leptos_axum::redirect("/login");
        Ok(())
    }

    /// A hash of a password nobody has, verified for unknown names.
    fn dummy_hash() -> &'static str {
        static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        DUMMY.get_or_init(|| hash_password("no account has this password"))
    }

    /// argon2id with the crate's defaults (OWASP's minimum: 19 MiB, 2 passes).
    pub fn hash_password(password: &str) -> String {
        use argon2::password_hash::{rand_core::OsRng, PasswordHasher, SaltString};
        let salt = SaltString::generate(&mut OsRng);
        argon2::Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .expect("argon2 with default parameters cannot fail")
            .to_string()
    }

    pub fn verify_password(hash: &str, password: &str) -> bool {
        use argon2::password_hash::{PasswordHash, PasswordVerifier};
        PasswordHash::new(hash)
            .map(|parsed| {
                argon2::Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false)
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::ssr::safe_next;

    #[test]
    fn sign_in_sends_back_only_to_this_site() {
        let public = url::Url::parse("https://hooks.example.com/").unwrap();
        let next = |n: &str| safe_next(&public, n);
        assert_eq!(
            next("/deliveries?source=gh&outcome=dead"),
            "/deliveries?source=gh&outcome=dead"
        );
        assert_eq!(next("/events/42"), "/events/42");
        assert_eq!(next(""), "/overview");
        assert_eq!(next("/login"), "/overview");
        assert_eq!(next("/login?next=/x"), "/overview");
        // Ways out that a browser would follow: all refused.
        for away in [
            "//evil.example",
            "https://evil.example/",
            "/\t/evil.example",
            "/\n/evil.example",
            "\\\\evil.example",
            "/\\evil.example",
            "http://hooks.example.com/",
            "https://hooks.example.com.evil.example/",
            "javascript:alert(1)",
            "https://user@evil.example",
            "/.//evil.example",
            "/%2e//evil.example",
            "/x/..//evil.example",
        ] {
            assert_eq!(next(away), "/overview", "{away:?}");
        }
        // Encoded, it is a path on this site: it stays one.
        assert_eq!(next("/%09/evil.example"), "/%09/evil.example");
        // A newline never reaches the Location header.
        assert!(!next("/deliveries\r\nSet-Cookie: x=1").contains('\n'));
    }
}
