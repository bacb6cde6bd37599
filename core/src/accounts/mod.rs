//! Accounts (spec section 7): who is calling (a signed-in person or an API
//! token), with which role; passwords, the sign-in throttle and the audit
//! log. Every operation starts with `ops::Cx::require(role)`, which answers
//! 401 or 403 through `authorize`, the one role check.

mod throttle;
pub mod tokens;

use throttle::Attempt;
pub use throttle::{prune as prune_sign_in_attempts, unlock};

use replaysafe_types::auth::{Caller, Role, Who};

use crate::error::OpError;

/// The session key holding the signed-in user's id.
pub const USER_KEY: &str = "user_id";
/// Failed sign-ins allowed per username from one address (so a guesser
/// elsewhere cannot lock its owner out), and per address, in `WINDOW_MINUTES`.
pub const MAX_FAILURES_PER_USER: i64 = 5;
pub const MAX_FAILURES_PER_ADDRESS: i64 = 20;
pub const WINDOW_MINUTES: i32 = 15;

/// The client's address as the listener worked it out: the peer, or
/// behind a trusted proxy the address its `X-Forwarded-For` names.
/// Put in every request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub std::net::IpAddr);

/// The signed-in user of a session, if the account still exists and is
/// enabled: disabling a user ends their sessions at once.
/// `user_id`: what the session holds under `USER_KEY`.
pub async fn user_of(pool: &sqlx::PgPool, user_id: i64) -> Result<Option<Caller>, sqlx::Error> {
    let id = user_id;
    let row = sqlx::query!(
        "SELECT id, username, role FROM users WHERE id = $1 AND NOT disabled",
        id
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.and_then(|r| {
        Role::parse(&r.role).map(|role| Caller {
            id: r.id,
            username: r.username,
            role,
            via: replaysafe_types::auth::Via::Session,
        })
    }))
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

/// One line of the audit log.
pub struct Entry<'a> {
    pub who: Who<'a>,
    pub action: &'a str,
    pub target: Option<&'a str>,
    pub outcome: &'a str,
    /// JSON; never secret material.
    pub detail: Option<serde_json::Value>,
    pub remote_addr: Option<&'a str>,
}

/// Appends to the audit log: the one statement every writer uses.
pub async fn record(
    executor: impl sqlx::PgExecutor<'_>,
    entry: Entry<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO audit_log (user_id, token_id, username, action, target, outcome, detail, remote_addr)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        entry.who.user_id,
        entry.who.token_id,
        entry.who.name,
        entry.action,
        entry.target,
        entry.outcome,
        entry.detail,
        entry.remote_addr
    )
    .execute(executor)
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

/// How long a refused address (or username from it) is refused from
/// memory before the database is asked again (a flood of refused tries
/// costs the database one a few seconds, not one each); also how long
/// an unlock (`replaysafe user unlock`) may take to reach every process.
pub const REFUSED_FOR: std::time::Duration = std::time::Duration::from_secs(5);
/// Refusals remembered at once; beyond, the database is asked.
const REFUSALS_KEPT: usize = 100_000;

/// A server's sign-in limits in memory, provided as context (one per
/// server, so tests' servers do not share them): the permits for
/// sign-ins hashing at once, and who was refused a moment ago.
#[derive(Clone, Debug)]
pub struct SignInLimits {
    pub hashing: std::sync::Arc<tokio::sync::Semaphore>,
    refused:
        std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>>,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self {
            hashing: std::sync::Arc::new(tokio::sync::Semaphore::new(HASHING_AT_ONCE)),
            refused: Default::default(),
        }
    }
}

/// What a refusal was over: the username from this address, or the address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Over {
    Pair,
    Address,
}

impl SignInLimits {
    fn keys(address: &str, username: &str) -> [String; 2] {
        [
            address.to_owned(),
            format!("{address}\n{}", username.to_lowercase()),
        ]
    }

    fn refused_recently(&self, address: &str, username: &str) -> bool {
        let now = std::time::Instant::now();
        let refused = self.refused.lock().expect("never poisoned");
        Self::keys(address, username)
            .iter()
            .any(|key| refused.get(key).is_some_and(|until| *until > now))
    }

    fn note_refused(&self, address: &str, username: &str, over: Over) {
        let now = std::time::Instant::now();
        let mut refused = self.refused.lock().expect("never poisoned");
        if refused.len() >= REFUSALS_KEPT {
            refused.retain(|_, until| *until > now);
            if refused.len() >= REFUSALS_KEPT {
                return;
            }
        }
        let [by_address, by_pair] = Self::keys(address, username);
        let key = match over {
            Over::Address => by_address,
            Over::Pair => by_pair,
        };
        refused.insert(key, now + REFUSED_FOR);
    }
}

/// Appends a sign-in's audit row: `failed`, `succeeded`, or `error`.
async fn audit_sign_in(
    pool: &sqlx::PgPool,
    username: &str,
    user_id: Option<i64>,
    address: &str,
    bucket: &str,
    outcome: &str,
) -> Result<(), sqlx::Error> {
    record(
        pool,
        Entry {
            who: Who {
                user_id,
                token_id: None,
                name: username,
            },
            action: "login",
            target: Some(&format!("from:{bucket}")),
            outcome,
            detail: None,
            remote_addr: Some(address),
        },
    )
    .await
}

/// A sign-in whose password was right: its audit row waits for
/// `settle_sign_in`, which says whether the session could start.
pub struct SignedIn {
    pub user: Caller,
    attempt_id: i64,
    address: String,
    bucket: String,
}

/// Checks a sign-in from `address` against the throttle and the password;
/// the caller starts the session, then settles the attempt.
pub async fn check_sign_in(
    pool: &sqlx::PgPool,
    limits: &SignInLimits,
    username: &str,
    password: String,
    address: &str,
) -> Result<SignedIn, OpError> {
    let username = username.trim().to_owned();
    if username.chars().count() > MAX_USERNAME {
        return Err(OpError::BadRequest(format!(
            "a username is at most {MAX_USERNAME} characters"
        )));
    }
    let bucket = throttle::bucket_of(address);
    let locked_out = || {
        OpError::TooManyRequests(format!(
            "too many failed sign-ins; try again in {WINDOW_MINUTES} minutes"
        ))
    };
    // Refused a moment ago: refused again without asking the database.
    if limits.refused_recently(&bucket, &username) {
        return Err(locked_out());
    }
    let attempt_id = match throttle::begin(pool, &username, address, &bucket).await? {
        Attempt::Checking(id) => id,
        Attempt::Refused(over) => {
            limits.note_refused(&bucket, &username, over);
            return Err(locked_out());
        }
    };
    // Hashing takes ~19 MiB per attempt: beyond a few at once, refuse at
    // once rather than let a burst of sign-ins take the memory. Taken
    // after the attempt is recorded, so a flood that is refused anyway
    // holds no permit. Owned, and moved into the hashing task: a client
    // that goes away mid-hash does not free its permit before the hash is done.
    let Ok(hashing) = limits.hashing.clone().try_acquire_owned() else {
        // Not checked, so not recorded (a flood must not write a row
        // each while the permits are taken).
        throttle::end(pool, attempt_id, false).await?;
        return Err(OpError::TooManyRequests(
            "too many sign-ins at once; try again in a moment".into(),
        ));
    };
    let row = sqlx::query!(
        "SELECT id, username, role, password_hash, disabled FROM users WHERE lower(username) = lower($1)",
        &username
    )
    .fetch_optional(pool)
    .await
    ?
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
        Some((id, name, role, _, false)) if verified => Role::parse(&role).map(|role| Caller {
            id,
            username: name,
            role,
            via: replaysafe_types::auth::Via::Session,
        }),
        _ => None,
    };
    let Some(user) = user else {
        throttle::end(pool, attempt_id, true).await?;
        audit_sign_in(pool, &username, None, address, &bucket, "failed").await?;
        return Err(OpError::Unauthorized("wrong username or password".into()));
    };
    Ok(SignedIn {
        user,
        attempt_id,
        address: address.to_owned(),
        bucket,
    })
}

/// Ends a sign-in whose password was right: its audit row says
/// `succeeded`, or `error` when the session could not start (no failed
/// guess either way).
pub async fn settle_sign_in(
    pool: &sqlx::PgPool,
    signed: &SignedIn,
    session_started: bool,
) -> Result<(), OpError> {
    if session_started {
        sqlx::query!(
            "UPDATE users SET last_login_at = now() WHERE id = $1",
            signed.user.id
        )
        .execute(pool)
        .await?;
    }
    let outcome = if session_started {
        "succeeded"
    } else {
        "error"
    };
    throttle::end(pool, signed.attempt_id, false).await?;
    Ok(audit_sign_in(
        pool,
        &signed.user.username,
        Some(signed.user.id),
        &signed.address,
        &signed.bucket,
        outcome,
    )
    .await?)
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

#[cfg(test)]
mod tests {
    use super::safe_next;

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
