//! `replaysafe migrate`: applies the migrations (idempotent) and exits.

use super::{open_migrated, CliError};
use replaysafe_core::config::Config;

pub async fn run(config: Config) -> Result<(), CliError> {
    let (_database, pool) = open_migrated(&config).await?;
    pool.close().await;
    println!("migrations applied");
    Ok(())
}
