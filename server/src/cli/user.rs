//! `replaysafe users add|list|disable|enable|unlock`: accounts are made from
//! the command line (spec section 7), on the database. Passwords are typed
//! without echo at a terminal, or read from stdin when it is piped; never
//! from argv.

use std::io::{BufRead, IsTerminal};

use replaysafe_types::auth::Role;
use replaysafe_types::time::shown;
use sqlx::PgPool;

use super::output::{json, table};
use replaysafe_core::db::users::{add, rows, set_disabled, unlock, UserError, MIN_PASSWORD};

#[derive(Debug, clap::Subcommand)]
pub enum UserAction {
    /// Create a user; the password is typed twice without echo at a
    /// terminal, or read from stdin (one line) when it is piped
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
    List {
        /// One JSON document instead of a table
        #[arg(long)]
        json: bool,
    },
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
    /// Lift a sign-in lockout at once: of a username (from every address),
    /// of an address, or both
    Unlock {
        #[arg(long, required_unless_present = "address")]
        username: Option<String>,
        #[arg(long)]
        address: Option<std::net::IpAddr>,
    },
}

pub async fn run(pool: &PgPool, action: UserAction) -> Result<(), UserError> {
    match action {
        UserAction::Add {
            username,
            role,
            update,
        } => {
            let password = read_password(&username)?;
            let role = Role::parse(&role).expect("clap checked the role");
            let created = add(pool, &username, &password, role, update).await?;
            let verb = if created { "created" } else { "updated" };
            println!("user {username} {verb} with role {}", role.as_str());
        }
        UserAction::List { json: as_json } => {
            let users = rows(pool).await?;
            if as_json {
                json(&users);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = users
                .into_iter()
                .map(|user| {
                    let state = if user.disabled { "disabled" } else { "active" };
                    vec![
                        user.username,
                        user.role.as_str().to_owned(),
                        state.to_owned(),
                        user.last_login_at
                            .as_ref()
                            .map_or_else(|| "never".into(), shown),
                    ]
                })
                .collect();
            table(&["USERNAME", "ROLE", "STATE", "LAST SIGN-IN (UTC)"], &rows);
        }
        UserAction::Disable { username } => {
            set_disabled(pool, &username, true).await?;
            println!("user {username} disabled; their sessions have ended");
        }
        UserAction::Enable { username } => {
            set_disabled(pool, &username, false).await?;
            println!("user {username} enabled");
        }
        UserAction::Unlock { username, address } => {
            // Sign-ins are counted by the address's bucket (IPv6: its /64).
            let address = address.map(|a| replaysafe_core::config::address::bucket(a).to_string());
            unlock(pool, username.as_deref(), address.as_deref()).await?;
            if let Some(username) = username {
                println!("earlier failed sign-ins of {username} no longer count (an address that is locked out stays so until --address lifts it)");
            }
            if let Some(address) = address {
                println!("earlier failed sign-ins from {address} no longer count");
            }
            println!(
                "servers stop refusing from memory within {} s",
                replaysafe_core::accounts::REFUSED_FOR.as_secs()
            );
        }
    }
    Ok(())
}

/// The new password: typed twice without echo at a terminal, else one line
/// of stdin (a script's pipe).
fn read_password(username: &str) -> Result<String, UserError> {
    if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(format!(
            "password for {username} (at least {MIN_PASSWORD} characters): "
        ))
        .map_err(UserError::Stdin)?;
        let again = rpassword::prompt_password("the same again: ").map_err(UserError::Stdin)?;
        if first != again {
            return Err(UserError::Stdin(std::io::Error::other(
                "the two passwords differ",
            )));
        }
        return Ok(first);
    }
    let mut password = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut password)
        .map_err(UserError::Stdin)?;
    Ok(password.trim_end_matches(['\r', '\n']).to_owned())
}
