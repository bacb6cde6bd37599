//! Signing in: the throttle's limits (counted by `throttle`), the
//! password check, the audit rows, and where to go next.

use replaysafe_types::auth::{Caller, Role, Who};

use super::password::{dummy_hash, verify_password};
use super::throttle::{self, Attempt};
use super::{record, Entry};
use crate::error::OpError;

/// Failed sign-ins allowed per username from one address (so a guesser
/// elsewhere cannot lock its owner out), and per address, in `WINDOW_MINUTES`.
pub const MAX_FAILURES_PER_USER: i64 = 5;
pub const MAX_FAILURES_PER_ADDRESS: i64 = 20;
pub const WINDOW_MINUTES: i32 = 15;

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
    /// For the session, under `PASSWORD_EPOCH_KEY`.
    pub password_epoch: i32,
    /// Signed in with a one-time password an admin set: the sign-in leads
    /// to `/account`, and the gate lets the session reach nothing else.
    pub must_change_password: bool,
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
        "SELECT id, username, role, password_hash, disabled, password_epoch, must_change_password
         FROM users WHERE lower(username) = lower($1)",
        &username
    )
    .fetch_optional(pool)
    .await?
    .map(|r| {
        (
            r.id,
            r.username,
            r.role,
            r.password_hash,
            r.disabled,
            (r.password_epoch, r.must_change_password),
        )
    });
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
        Some((id, name, role, _, false, (epoch, must_change))) if verified => Role::parse(&role)
            .map(|role| {
                let user = Caller {
                    id,
                    username: name,
                    role,
                    via: replaysafe_types::auth::Via::Session,
                };
                (user, epoch, must_change)
            }),
        _ => None,
    };
    let Some((user, password_epoch, must_change_password)) = user else {
        throttle::end(pool, attempt_id, true).await?;
        audit_sign_in(pool, &username, None, address, &bucket, "failed").await?;
        return Err(OpError::Unauthorized("wrong username or password".into()));
    };
    Ok(SignedIn {
        user,
        password_epoch,
        must_change_password,
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

/// Ends a check of a signed-in user's current password before they change
/// it (`check_sign_in`, so a wrong one is throttled and audited as a failed
/// sign-in): not a sign-in, so no row of its own; the change is audited.
pub async fn settle_password_check(pool: &sqlx::PgPool, signed: &SignedIn) -> Result<(), OpError> {
    Ok(throttle::end(pool, signed.attempt_id, false).await?)
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
