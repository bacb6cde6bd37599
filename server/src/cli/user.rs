//! `replaysafe user add|list|disable|enable|unlock`: accounts are made from the
//! command line (spec section 7). Passwords come from stdin, never argv.

use std::io::BufRead;

use replaysafe_types::auth::Role;
use sqlx::PgPool;

use replaysafe_core::db::users::{add, list, set_disabled, unlock, UserError};

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
            let rows = list(pool).await?;
            println!(
                "{:<24} {:<9} {:<9} last sign-in",
                "username", "role", "state"
            );
            for user in rows {
                let state = if user.disabled { "disabled" } else { "active" };
                println!(
                    "{:<24} {:<9} {state:<9} {}",
                    user.username,
                    user.role,
                    user.last_login.unwrap_or_else(|| "never".into())
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
