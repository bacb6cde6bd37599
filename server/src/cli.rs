//! The command line (spec section 8). Every subcommand takes `--config` and
//! honours `$REPLAYSAFE_CONFIG` and `$DATABASE_URL`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config, ConfigError};
use crate::db::{self, DbError};
use crate::startup::{self, Application};

#[derive(Parser, Debug)]
#[command(
    name = "replaysafe",
    version,
    about = "Inbound-webhook gateway with safe-replay semantics"
)]
pub struct Cli {
    /// Config file [default: ./replaysafe.toml]
    #[arg(long, global = true, env = "REPLAYSAFE_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Receive, verify, claim and forward webhooks, and serve the dashboard (the default)
    Serve,
    /// Apply database migrations (idempotent) and exit
    Migrate,
    /// Sign sample events with a source's scheme and send them to its receiver
    Send(crate::send::SendArgs),
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Send(#[from] crate::send::SendError),
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

pub async fn run(cli: Cli) -> Result<(), CliError> {
    let config = config::load(cli.config.as_deref())?;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(config).await,
        Command::Migrate => migrate(config).await,
        Command::Send(args) => Ok(crate::send::run(&config, args).await?),
    }
}

async fn migrate(config: Config) -> Result<(), CliError> {
    let database = db::locate(&config).await?;
    let pool = db::pool(&database.url, 2)?;
    db::migrate(&pool).await?;
    db::sync_sources(&pool, &config)
        .await
        .map_err(DbError::from)?;
    pool.close().await;
    println!("migrations applied");
    Ok(())
}

async fn serve(config: Config) -> Result<(), CliError> {
    let config = Arc::new(config);
    let database = db::locate(&config).await?;
    let pool = db::pool(&database.url, 32)?;
    let shutdown = CancellationToken::new();

    let app = Application::bind(config.clone(), pool.clone())
        .await
        .map_err(|source| CliError::Listen {
            addr: config.listen,
            source,
        })?;
    tracing::info!(
        "replaysafe is listening on http://{} (public URL {})",
        app.addr,
        config.public_url
    );
    let prepare = tokio::spawn(startup::prepare_database(
        pool.clone(),
        config.clone(),
        shutdown.clone(),
    ));
    let server = tokio::spawn(app.run(shutdown.clone()));

    tokio::select! {
        _ = startup::shutdown_signal() => tracing::info!("shutting down"),
        _ = shutdown.cancelled() => {}
    }
    shutdown.cancel();
    let served = server.await;
    let _ = prepare.await;
    pool.close().await;
    // Dropping the database stops an embedded PostgreSQL.
    drop(database);
    match served {
        Ok(result) => result.map_err(CliError::Serve),
        Err(join) => Err(CliError::Serve(std::io::Error::other(join))),
    }
}
