//! Dashboard accounts (spec section 7): the one module that changes a
//! user's role, password, state and must-change flag. From the command line
//! (`add`, `set_disabled`: the machine's holder, not limited) and from the
//! browser by an admin (`create_one_time`, `reset_one_time`, `set_role`,
//! `set_enabled`: the last active admin can be neither demoted nor
//! disabled) or by the user (`change_own_password`). Every change is audited.

use replaysafe_types::auth::{Role, Who};
use replaysafe_types::time::Time;
use replaysafe_types::users::{OneTimePassword, UserRow};
use serde_json::json;
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
    #[error("password must be at least {MIN_PASSWORD} characters")]
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
        // Any conflict: the name, or one differing only in case (users_username_lower).
        "INSERT INTO users (username, password_hash, role) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING RETURNING id",
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
        "UPDATE users SET password_hash = $2, role = $3, password_epoch = password_epoch + 1,
                          must_change_password = false
         WHERE lower(username) = lower($1)",
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
        // Disabling moves the password epoch on: the sessions it ends stay
        // ended when the user is enabled again.
        "UPDATE users SET disabled = $2,
                          password_epoch = password_epoch + CASE WHEN $2 THEN 1 ELSE 0 END
         WHERE username = $1",
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

/// Why an admin's change to a user was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("no user has id {0}")]
    Unknown(i64),
    #[error("{0} is the last active admin: make another admin first")]
    LastAdmin(String),
    #[error("you cannot disable your own account")]
    Yourself,
    #[error("{0} changed meanwhile: look again")]
    Changed(String),
    #[error(transparent)]
    User(#[from] UserError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl From<ChangeError> for crate::error::OpError {
    fn from(e: ChangeError) -> Self {
        use crate::error::OpError;
        match e {
            ChangeError::Unknown(_) => OpError::NotFound(e.to_string()),
            ChangeError::LastAdmin(_) | ChangeError::Yourself | ChangeError::Changed(_) => {
                OpError::Conflict(e.to_string())
            }
            ChangeError::User(UserError::Db(e)) | ChangeError::Db(e) => OpError::database(e),
            ChangeError::User(UserError::Exists(_)) => OpError::Conflict(e.to_string()),
            ChangeError::User(_) => OpError::BadRequest(e.to_string()),
        }
    }
}

/// Every user, as the Users page lists them.
pub async fn rows(pool: &PgPool) -> Result<Vec<UserRow>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT id, username, role, disabled, must_change_password,
                  created_at AS "created_at: Time", last_login_at AS "last_login_at: Time"
           FROM users ORDER BY lower(username), id"#
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            Some(UserRow {
                id: r.id,
                username: r.username,
                role: Role::parse(&r.role)?,
                disabled: r.disabled,
                must_change_password: r.must_change_password,
                created_at: r.created_at,
                last_login_at: r.last_login_at,
            })
        })
        .collect())
}

async fn row(executor: impl sqlx::PgExecutor<'_>, id: i64) -> Result<UserRow, ChangeError> {
    let r = sqlx::query!(
        r#"SELECT id, username, role, disabled, must_change_password,
                  created_at AS "created_at: Time", last_login_at AS "last_login_at: Time"
           FROM users WHERE id = $1"#,
        id
    )
    .fetch_optional(executor)
    .await?
    .ok_or(ChangeError::Unknown(id))?;
    Ok(UserRow {
        id: r.id,
        username: r.username,
        role: Role::parse(&r.role).ok_or(ChangeError::Unknown(id))?,
        disabled: r.disabled,
        must_change_password: r.must_change_password,
        created_at: r.created_at,
        last_login_at: r.last_login_at,
    })
}

/// A password for one sign-in: 20 letters and digits (about 119 bits).
fn one_time_password() -> String {
    use rand::distributions::{Alphanumeric, DistString};
    Alphanumeric.sample_string(&mut rand::rngs::OsRng, 20)
}

async fn hash(password: &str) -> String {
    let owned = password.to_owned();
    tokio::task::spawn_blocking(move || crate::accounts::hash_password(&owned))
        .await
        .expect("hashing does not panic")
}

/// Makes an account with a one-time password, returned this once.
pub async fn create_one_time(
    pool: &PgPool,
    username: &str,
    role: Role,
    by: Who<'_>,
    from: Option<&str>,
) -> Result<OneTimePassword, ChangeError> {
    let username = username.trim();
    if !replaysafe_types::auth::valid_name(username) {
        return Err(UserError::BadName.into());
    }
    let password = one_time_password();
    let hash = hash(&password).await;
    let mut tx = pool.begin().await?;
    let id = sqlx::query_scalar!(
        // Usernames sign in case-blind: one that differs only in case is
        // taken (users_username_lower), whoever made it first.
        "INSERT INTO users (username, password_hash, role, must_change_password)
         VALUES ($1, $2, $3, true)
         ON CONFLICT DO NOTHING RETURNING id",
        username,
        &hash,
        role.as_str()
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| UserError::Exists(username.into()))?;
    audited(
        &mut tx,
        by,
        from,
        "user.add",
        username,
        json!({"role": role.as_str()}),
    )
    .await?;
    let user = row(&mut *tx, id).await?;
    tx.commit().await?;
    Ok(OneTimePassword { user, password })
}

/// Gives an account a new one-time password (returned this once): its
/// sessions end, and it must choose its own at the next sign-in.
pub async fn reset_one_time(
    pool: &PgPool,
    id: i64,
    by: Who<'_>,
    from: Option<&str>,
) -> Result<OneTimePassword, ChangeError> {
    let password = one_time_password();
    let hash = hash(&password).await;
    let mut tx = pool.begin().await?;
    let username = sqlx::query_scalar!(
        "UPDATE users SET password_hash = $2, password_epoch = password_epoch + 1,
                          must_change_password = true
         WHERE id = $1 RETURNING username",
        id,
        &hash
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(ChangeError::Unknown(id))?;
    audited(
        &mut tx,
        by,
        from,
        "user.reset_password",
        &username,
        json!({}),
    )
    .await?;
    let user = row(&mut *tx, id).await?;
    tx.commit().await?;
    Ok(OneTimePassword { user, password })
}

/// Locks every active admin's row, so two admins demoting or disabling
/// each other at once are serialised: the second sees the first's change.
async fn lock_active_admins(tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    // In id order: two transactions lock them in one order, never crosswise.
    sqlx::query!(
        "SELECT id FROM users WHERE role = 'admin' AND NOT disabled ORDER BY id FOR UPDATE"
    )
    .fetch_all(tx)
    .await?;
    Ok(())
}

/// Whether another active admin than `id` exists (after `lock_active_admins`).
async fn another_admin(tx: &mut sqlx::PgConnection, id: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM users WHERE role = 'admin' AND NOT disabled AND id <> $1) AS "e!""#,
        id
    )
    .fetch_one(tx)
    .await
}

/// Changes a user's role; the last active admin keeps theirs. Takes effect
/// on the user's next request.
pub async fn set_role(
    pool: &PgPool,
    id: i64,
    role: Role,
    by: Who<'_>,
    from: Option<&str>,
) -> Result<UserRow, ChangeError> {
    let mut tx = pool.begin().await?;
    lock_active_admins(&mut tx).await?;
    let before = row(&mut *tx, id).await?;
    if before.role == role {
        return Ok(before);
    }
    let keeps_an_admin =
        before.role != Role::Admin || before.disabled || another_admin(&mut tx, id).await?;
    if !keeps_an_admin {
        return Err(ChangeError::LastAdmin(before.username));
    }
    // Guarded by the role it leaves: a change made meanwhile is not overwritten.
    let changed = sqlx::query!(
        "UPDATE users SET role = $3 WHERE id = $1 AND role = $2",
        id,
        before.role.as_str(),
        role.as_str()
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if changed == 0 {
        return Err(ChangeError::Changed(before.username));
    }
    audited(
        &mut tx,
        by,
        from,
        "user.role",
        &before.username,
        json!({"from": before.role.as_str(), "to": role.as_str()}),
    )
    .await?;
    let user = row(&mut *tx, id).await?;
    tx.commit().await?;
    Ok(user)
}

/// Disables (their sessions end at once) or enables a user; the last
/// active admin stays enabled, and nobody disables themselves here.
pub async fn set_enabled(
    pool: &PgPool,
    id: i64,
    enabled: bool,
    by: Who<'_>,
    from: Option<&str>,
) -> Result<UserRow, ChangeError> {
    if !enabled && by.user_id == Some(id) {
        return Err(ChangeError::Yourself);
    }
    let mut tx = pool.begin().await?;
    lock_active_admins(&mut tx).await?;
    let before = row(&mut *tx, id).await?;
    if before.disabled != enabled {
        return Ok(before);
    }
    if !enabled && before.role == Role::Admin && !another_admin(&mut tx, id).await? {
        return Err(ChangeError::LastAdmin(before.username));
    }
    let changed = sqlx::query!(
        // Disabling moves the password epoch on, so the sessions it ends
        // stay ended when the user is enabled again.
        "UPDATE users SET disabled = $2,
                          password_epoch = password_epoch + CASE WHEN $2 THEN 1 ELSE 0 END
         WHERE id = $1 AND disabled = $3",
        id,
        !enabled,
        before.disabled
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if changed == 0 {
        return Err(ChangeError::Changed(before.username));
    }
    let action = if enabled {
        "user.enable"
    } else {
        "user.disable"
    };
    audited(&mut tx, by, from, action, &before.username, json!({})).await?;
    let user = row(&mut *tx, id).await?;
    tx.commit().await?;
    Ok(user)
}

/// Sets a user's own new password once their current one was checked
/// (`accounts::check_password`, throttled like a sign-in): every session
/// signed in with the old one ends. Guarded by the epoch the check saw, so
/// of two changes at once only one lands. Returns the new epoch, which the
/// session that made the change keeps.
pub async fn change_own_password(
    pool: &PgPool,
    user: Who<'_>,
    checked_epoch: i32,
    new_password: &str,
    from: Option<&str>,
) -> Result<i32, ChangeError> {
    let id = user.user_id.ok_or(ChangeError::Unknown(0))?;
    if new_password.chars().count() < MIN_PASSWORD {
        return Err(UserError::ShortPassword.into());
    }
    let hash = hash(new_password).await;
    let mut tx = pool.begin().await?;
    let epoch = sqlx::query_scalar!(
        "UPDATE users SET password_hash = $3, password_epoch = password_epoch + 1,
                          must_change_password = false
         WHERE id = $1 AND password_epoch = $2 AND NOT disabled
         RETURNING password_epoch",
        id,
        checked_epoch,
        &hash
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(ChangeError::Unknown(id))?;
    audited(&mut tx, user, from, "user.password", user.name, json!({})).await?;
    tx.commit().await?;
    Ok(epoch)
}

async fn audited(
    tx: &mut sqlx::PgConnection,
    by: Who<'_>,
    from: Option<&str>,
    action: &str,
    username: &str,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error> {
    audit::record(
        tx,
        audit::Entry {
            who: by,
            action,
            target: Some(username),
            outcome: "succeeded",
            detail: Some(detail),
            remote_addr: from,
        },
    )
    .await
}

/// A person's own reading preferences (not audited: they change only what
/// their own pages look like). Each field given replaces the stored one.
pub async fn set_preferences(
    pool: &PgPool,
    id: i64,
    time_zone: Option<&str>,
    clock: Option<replaysafe_types::time::Clock>,
    theme: Option<replaysafe_types::users::Theme>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE users SET time_zone = coalesce($2, time_zone), clock = coalesce($3, clock),
                          theme = coalesce($4, theme)
         WHERE id = $1",
        id,
        time_zone,
        clock.map(|c| c.as_str()),
        theme.map(|t| t.as_str())
    )
    .execute(pool)
    .await?;
    Ok(())
}
