//! `replaysafe tokens create|list|revoke`: API tokens. `create` works on the
//! database only (so the first token needs none); `list` and `revoke` also
//! over the API with an admin token. A token is printed once, at creation;
//! only its SHA-256 is stored.

use std::time::Duration;

use replaysafe_core::accounts::tokens::{self as tokens, Target as Which};
use replaysafe_core::db::audit::cli_actor;
use replaysafe_types::auth::{Role, Who};
use replaysafe_types::time::shown;
use replaysafe_types::tokens::TokenRow;

use super::output::{json, or_dash, table};
use super::place::{Place, Runs};
use super::remote::{Remote, RemoteError, Target};
use super::{open_existing, open_migrated, CliError};
use replaysafe_core::config::Config;

#[derive(Debug, clap::Subcommand)]
pub enum TokenAction {
    /// Create a token and print it (once) for REPLAYSAFE_TOKEN (on the
    /// database only)
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
    /// (on the database, or over the API with an admin token)
    List,
    /// Revoke a live token by name; it is refused from its next use on (on
    /// the database, or over the API with an admin token)
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

pub async fn run(
    config: impl FnOnce() -> Result<Config, CliError>,
    target: Target,
    place: Place,
    action: TokenAction,
) -> Result<(), CliError> {
    let as_json = target.json;
    let runs = match action {
        TokenAction::Create { .. } => {
            place.local_only("tokens create")?;
            Runs::Local
        }
        _ => place.resolve(&target),
    };
    if runs == Runs::Remote {
        let remote = Remote::new(&target)?;
        match action {
            TokenAction::List => print(remote.get("tokens", &[]).await?, as_json),
            TokenAction::Revoke { name } => {
                let rows: Vec<TokenRow> = remote.get("tokens", &[]).await?;
                let live = rows
                    .into_iter()
                    .find(|t| t.name == name && t.revoked_at.is_none())
                    .ok_or_else(|| RemoteError::Refused {
                        status: 404,
                        code: "not_found".into(),
                        detail: format!("no live token is named {name:?}"),
                        body: Box::default(),
                        retry_after: None,
                    })?;
                revoked(
                    remote.delete(&format!("tokens/{}", live.id)).await?,
                    as_json,
                )
            }
            TokenAction::Create { .. } => {
                return Err(RemoteError::BadArgument("tokens create runs locally".into()).into())
            }
        }
        return Ok(());
    }
    let config = config()?;
    // Creating the first token may come before the first `serve`: the
    // sources are synced as `serve` would; listing and revoking leave them.
    let (_database, pool) = match action {
        TokenAction::Create { .. } => open_migrated(&config).await?,
        _ => open_existing(&config).await?,
    };
    let actor = cli_actor();
    let result = match action {
        TokenAction::Create {
            name,
            role,
            expires,
        } => {
            let role = Role::parse(&role).expect("clap checked the role");
            let secs = expires.0.map(|d| d.as_secs() as i64);
            if secs.is_none() {
                eprintln!(
                    "warning: this token never expires; revoke it (`replaysafe tokens revoke \
                     --name {name}`) when it is no longer needed"
                );
            }
            tokens::create(&pool, &name, role, secs, Who::named(&actor), None)
                .await
                .map(|(token, row)| {
                    if as_json {
                        json(&replaysafe_types::tokens::CreatedToken { token, row });
                    } else {
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
                })
        }
        TokenAction::List => tokens::list(&pool)
            .await
            .map(|rows| print(rows, as_json))
            .map_err(Into::into),
        TokenAction::Revoke { name } => {
            tokens::revoke_where(&pool, Which::Name(&name), Who::named(&actor), None)
                .await
                .map(|row| revoked(row, as_json))
        }
    };
    pool.close().await;
    Ok(result?)
}

fn print(rows: Vec<TokenRow>, as_json: bool) {
    if as_json {
        return json(&rows);
    }
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|t| {
            vec![
                t.name,
                t.role,
                t.prefix,
                shown(&t.created_at),
                t.last_used_at
                    .as_ref()
                    .map_or_else(|| "never".into(), shown),
                t.expires_at.as_ref().map_or_else(|| "never".into(), shown),
                t.state.as_str().to_owned(),
                or_dash(t.created_by),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "ROLE",
            "PREFIX",
            "CREATED (UTC)",
            "LAST USED",
            "EXPIRES",
            "STATE",
            "CREATED BY",
        ],
        &rows,
    );
}

fn revoked(row: TokenRow, as_json: bool) {
    if as_json {
        json(&row);
    } else {
        println!(
            "token {} ({}) revoked; it is refused from now on",
            row.name, row.prefix
        );
    }
}
