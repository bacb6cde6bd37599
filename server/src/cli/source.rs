//! `replaysafe source pause|resume`, the old spelling of `sources pause|resume
//! --local` (hidden), kept doing what it did.

use clap::Subcommand;

use super::{open_migrated, CliError};
use replaysafe_core::config::Config;

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
    let result = super::sources::set_paused(&pool, slug, paused).await;
    pool.close().await;
    result?;
    println!(
        "source {slug} {}",
        if paused { "paused" } else { "resumed" }
    );
    Ok(())
}
