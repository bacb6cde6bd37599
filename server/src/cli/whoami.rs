//! `replaysafe whoami`: whom the server takes the token for (remote), or
//! whom the audit log names for commands run on the database (local).

use replaysafe_core::db::audit::cli_actor;
use replaysafe_types::auth::Caller;

use super::output::json;
use super::place::{Place, Runs};
use super::remote::{Remote, Target};
use super::CliError;

pub async fn run(target: Target, place: Place) -> Result<(), CliError> {
    let as_json = target.json;
    if place.resolve(&target) == Runs::Remote {
        let remote = Remote::new(&target)?;
        let me: Caller = remote.get("me", &[]).await?;
        if as_json {
            json(&me);
        } else {
            println!(
                "{} ({}, by token) on {}",
                me.username,
                me.role.as_str(),
                remote.base()
            );
        }
        return Ok(());
    }
    let actor = cli_actor();
    if as_json {
        json(
            &serde_json::json!({"id": null, "username": actor, "role": "admin", "via": "database"}),
        );
    } else {
        println!("{actor} (on the database: every role; the audit log names you so)");
    }
    Ok(())
}
