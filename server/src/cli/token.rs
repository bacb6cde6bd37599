//! `replaysafe token create|list|revoke`: API tokens, on the database
//! directly (like `user`), so the first one needs no token. A token is
//! printed once, at creation; only its SHA-256 is stored.

use replaysafe_types::time::shown;
use std::time::Duration;

use replaysafe_core::accounts::tokens::{self as tokens, Target, TokenError};
use replaysafe_types::auth::{Role, Who};
use sqlx::PgPool;

use replaysafe_core::db::audit::cli_actor;

#[derive(Debug, clap::Subcommand)]
pub enum TokenAction {
    /// Create a token and print it (once) for REPLAYSAFE_TOKEN
    Create {
        /// What the token is for; the audit log names its actions so
        #[arg(long)]
        name: String,
        /// viewer (reads), operator (re-delivers, pauses), admin (forces)
        #[arg(long, value_parser = ["viewer", "operator", "admin"])]
        role: String,
        /// Expire after this long (90d, 12h; at most 10 years), or `never`
        #[arg(long, value_parser = lifetime, default_value = "90d")]
        expires: Lifetime,
    },
    /// List tokens: name, role, prefix, created, last used, expires, state
    List,
    /// Revoke a live token by name; it is refused from its next use on
    Revoke {
        #[arg(long)]
        name: String,
    },
}

/// A token's lifetime: a second to ten years, or (None) `never`.
#[derive(Clone, Copy, Debug)]
pub struct Lifetime(Option<Duration>);

fn lifetime(text: &str) -> Result<Lifetime, String> {
    const MAX: Duration = Duration::from_secs(10 * 366 * 24 * 3600);
    if text == "never" {
        return Ok(Lifetime(None));
    }
    match humantime::parse_duration(text) {
        Ok(d) if d >= Duration::from_secs(1) && d <= MAX => Ok(Lifetime(Some(d))),
        Ok(_) => Err("expected between 1s and 10 years".into()),
        Err(e) => Err(format!("{e} (write it like 90d or 12h)")),
    }
}

pub async fn run(pool: &PgPool, action: TokenAction) -> Result<(), TokenError> {
    let actor = cli_actor();
    match action {
        TokenAction::Create {
            name,
            role,
            expires,
        } => {
            let role = Role::parse(&role).expect("clap checked the role");
            let secs = expires.0.map(|d| d.as_secs() as i64);
            if secs.is_none() {
                eprintln!(
                    "warning: this token never expires; revoke it (`replaysafe token revoke \
                     --name {name}`) when it is no longer needed"
                );
            }
            let (token, row) =
                tokens::create(pool, &name, role, secs, Who::named(&actor), None).await?;
            eprintln!(
                "token {} ({}) created{}; it is shown this once:",
                row.name,
                row.role,
                row.expires_at
                    .map(|at| format!(", expires {} UTC", shown(&at)))
                    .unwrap_or_default()
            );
            println!("{token}");
        }
        TokenAction::List => {
            let rows = tokens::list(pool).await?;
            println!(
                "{:<24} {:<9} {:<12} {:<20} {:<20} {:<20} state",
                "name", "role", "prefix", "created (UTC)", "last used", "expires"
            );
            for t in rows {
                println!(
                    "{:<24} {:<9} {:<12} {:<20} {:<20} {:<20} {}",
                    t.name,
                    t.role,
                    t.prefix,
                    shown(&t.created_at),
                    t.last_used_at
                        .as_ref()
                        .map_or_else(|| "never".into(), shown),
                    t.expires_at.as_ref().map_or_else(|| "never".into(), shown),
                    t.state
                );
            }
        }
        TokenAction::Revoke { name } => {
            let row =
                tokens::revoke_where(pool, Target::Name(&name), Who::named(&actor), None).await?;
            println!(
                "token {} ({}) revoked; it is refused from now on",
                row.name, row.prefix
            );
        }
    }
    Ok(())
}
