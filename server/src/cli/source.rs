//! `replaysafe source pause|resume`: an operator's pause, stored in the
//! database, where it wins over the config file.

use clap::Subcommand;

use super::{open_migrated, CliError};
use replaysafe_core::config::Config;
use replaysafe_core::db::audit::{cli_actor, Who};

#[derive(Subcommand, Debug)]
pub enum SourceAction {
    /// Keep receiving, verifying and claiming, but forward nothing until resumed
    Pause { slug: String },
    /// Forward again, starting with what was held
    Resume { slug: String },
}

pub async fn run(config: Config, action: SourceAction) -> Result<(), CliError> {
    let (_database, pool) = open_migrated(&config).await?;
    let (slug, paused) = match &action {
        SourceAction::Pause { slug } => (slug, true),
        SourceAction::Resume { slug } => (slug, false),
    };
    let actor = cli_actor();
    replaysafe_core::db::sources::set_paused(&pool, slug, paused, Who::named(&actor)).await?;
    pool.close().await;
    println!(
        "source {slug} {}",
        if paused { "paused" } else { "resumed" }
    );
    Ok(())
}
