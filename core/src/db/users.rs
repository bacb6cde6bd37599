//! Dashboard accounts: created, reset, disabled and listed from the command
//! line (spec section 7); every change is audited.

use replaysafe_types::auth::Role;
use sqlx::PgPool;

use super::audit;

#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("a user named {0:?} exists already (add --update to change their password and role)")]
    Exists(String),
    #[error("no user named {0:?}")]
    Unknown(String),
    #[error("username must be 1 to 64 letters, digits, '.', '_', '-' or '@'")]
    BadName,
    #[error("password must be at least {MIN_PASSWORD} characters (read from stdin)")]
    ShortPassword,
    #[error("reading the password from stdin: {0}")]
    Stdin(std::io::Error),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

pub const MIN_PASSWORD: usize = 10;

/// Records a change made from the command line.
async fn audit(
    pool: &PgPool,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error> {
    let actor = audit::cli_actor();
    audit::record(
        pool,
        audit::Entry {
            who: audit::Who::named(&actor),
            action,
            target: Some(target),
            outcome: "succeeded",
            detail: Some(detail),
            remote_addr: None,
        },
    )
    .await
}

/// Creates (or with `update`, resets) a user; returns whether it was new.
pub async fn add(
    pool: &PgPool,
    username: &str,
    password: &str,
    role: Role,
    update: bool,
) -> Result<bool, UserError> {
    if !replaysafe_types::auth::valid_name(username) {
        return Err(UserError::BadName);
    }
    if password.chars().count() < MIN_PASSWORD {
        return Err(UserError::ShortPassword);
    }
    let owned = password.to_owned();
    let hash = tokio::task::spawn_blocking(move || crate::accounts::hash_password(&owned))
        .await
        .expect("hashing does not panic");
    let inserted: Option<i64> = sqlx::query_scalar!(
        "INSERT INTO users (username, password_hash, role) VALUES ($1, $2, $3)
         ON CONFLICT (username) DO NOTHING RETURNING id",
        username,
        &hash,
        role.as_str()
    )
    .fetch_optional(pool)
    .await?;
    if inserted.is_some() {
        audit(
            pool,
            "user.add",
            username,
            serde_json::json!({"role": role.as_str()}),
        )
        .await?;
        return Ok(true);
    }
    if !update {
        return Err(UserError::Exists(username.into()));
    }
    sqlx::query!(
        // A new password ends the sessions signed in with the old one.
        "UPDATE users SET password_hash = $2, role = $3, password_epoch = password_epoch + 1
         WHERE username = $1",
        username,
        &hash,
        role.as_str()
    )
    .execute(pool)
    .await?;
    audit(
        pool,
        "user.update",
        username,
        serde_json::json!({"role": role.as_str()}),
    )
    .await?;
    Ok(false)
}

pub async fn set_disabled(pool: &PgPool, username: &str, disabled: bool) -> Result<(), UserError> {
    let changed = sqlx::query!(
        "UPDATE users SET disabled = $2 WHERE username = $1",
        username,
        disabled
    )
    .execute(pool)
    .await?
    .rows_affected();
    if changed == 0 {
        return Err(UserError::Unknown(username.into()));
    }
    let action = if disabled {
        "user.disable"
    } else {
        "user.enable"
    };
    audit(pool, action, username, serde_json::json!({})).await?;
    Ok(())
}

/// Lifts sign-in lockouts: failures recorded before this no longer count
/// against the username (from any address) or the address
/// (`accounts::unlock`); each unlock is audit-logged.
pub async fn unlock(
    pool: &PgPool,
    username: Option<&str>,
    address: Option<&str>,
) -> Result<(), UserError> {
    crate::accounts::unlock(pool, username, address).await?;
    let targets = username
        .map(|u| format!("user:{}", u.to_lowercase()))
        .into_iter()
        .chain(address.map(|a| format!("address:{a}")));
    let actor = audit::cli_actor();
    for target in targets {
        audit::record(
            pool,
            audit::Entry {
                who: audit::Who::named(&actor),
                action: "login.unlock",
                target: Some(&target),
                outcome: "succeeded",
                detail: None,
                remote_addr: None,
            },
        )
        .await?;
    }
    Ok(())
}

/// One account as `user list` shows it.
pub struct Listed {
    pub username: String,
    pub role: String,
    pub disabled: bool,
    /// `YYYY-MM-DD HH:MM UTC`, or None before the first sign-in.
    pub last_login: Option<String>,
}

pub async fn list(pool: &PgPool) -> Result<Vec<Listed>, sqlx::Error> {
    sqlx::query_as!(
        Listed,
        r#"SELECT username, role, disabled,
                  to_char(last_login_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC'
                      AS last_login
           FROM users ORDER BY username"#
    )
    .fetch_all(pool)
    .await
}
