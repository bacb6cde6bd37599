//! `replaysafe user add|list|disable|enable`: accounts are made from the
//! command line (spec section 7). Passwords come from stdin, never argv.

use std::io::BufRead;

use app::auth::Role;
use sqlx::PgPool;

#[derive(Debug, clap::Subcommand)]
pub enum UserAction {
    /// Create a user; the password is read from stdin (one line)
    Add {
        #[arg(long)]
        username: String,
        /// viewer (reads), operator (re-delivers, pauses), admin (forces, users)
        #[arg(long, value_parser = ["viewer", "operator", "admin"])]
        role: String,
        /// Set the password and role of a user who already exists
        #[arg(long)]
        update: bool,
    },
    /// List users and their roles
    List,
    /// Stop a user from signing in; their open sessions end at once
    Disable {
        #[arg(long)]
        username: String,
    },
    /// Let a disabled user sign in again
    Enable {
        #[arg(long)]
        username: String,
    },
}

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

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

fn actor() -> String {
    format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    )
}

async fn audit(
    pool: &PgPool,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit_log (username, action, target, outcome, detail)
         VALUES ($1, $2, $3, 'succeeded', $4)",
    )
    .bind(actor())
    .bind(action)
    .bind(target)
    .bind(detail)
    .execute(pool)
    .await?;
    Ok(())
}

/// Creates (or with `update`, resets) a user; returns whether it was new.
pub async fn add(
    pool: &PgPool,
    username: &str,
    password: &str,
    role: Role,
    update: bool,
) -> Result<bool, UserError> {
    if !valid_name(username) {
        return Err(UserError::BadName);
    }
    if password.chars().count() < MIN_PASSWORD {
        return Err(UserError::ShortPassword);
    }
    let owned = password.to_owned();
    let hash = tokio::task::spawn_blocking(move || app::auth::ssr::hash_password(&owned))
        .await
        .expect("hashing does not panic");
    let inserted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO users (username, password_hash, role) VALUES ($1, $2, $3)
         ON CONFLICT (username) DO NOTHING RETURNING id",
    )
    .bind(username)
    .bind(&hash)
    .bind(role.as_str())
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
    sqlx::query("UPDATE users SET password_hash = $2, role = $3 WHERE username = $1")
        .bind(username)
        .bind(&hash)
        .bind(role.as_str())
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
    let changed = sqlx::query("UPDATE users SET disabled = $2 WHERE username = $1")
        .bind(username)
        .bind(disabled)
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

pub async fn run(pool: &PgPool, action: UserAction) -> Result<(), UserError> {
    match action {
        UserAction::Add {
            username,
            role,
            update,
        } => {
            let mut password = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut password)
                .map_err(UserError::Stdin)?;
            let password = password.trim_end_matches(['\r', '\n']);
            let role = Role::parse(&role).expect("clap checked the role");
            let created = add(pool, &username, password, role, update).await?;
            let verb = if created { "created" } else { "updated" };
            println!("user {username} {verb} with role {}", role.as_str());
        }
        UserAction::List => {
            let rows: Vec<(String, String, bool, Option<String>)> = sqlx::query_as(
                "SELECT username, role, disabled,
                        to_char(last_login_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC'
                 FROM users ORDER BY username",
            )
            .fetch_all(pool)
            .await?;
            println!(
                "{:<24} {:<9} {:<9} last sign-in",
                "username", "role", "state"
            );
            for (name, role, disabled, last) in rows {
                let state = if disabled { "disabled" } else { "active" };
                println!(
                    "{name:<24} {role:<9} {state:<9} {}",
                    last.unwrap_or_else(|| "never".into())
                );
            }
        }
        UserAction::Disable { username } => {
            set_disabled(pool, &username, true).await?;
            println!("user {username} disabled; their sessions have ended");
        }
        UserAction::Enable { username } => {
            set_disabled(pool, &username, false).await?;
            println!("user {username} enabled");
        }
    }
    Ok(())
}
