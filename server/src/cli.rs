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
    /// Threads running requests, workers and the dashboard [default: half
    /// the cores, at least 1]. The work is mostly waiting on the network and
    /// the database; PostgreSQL beside it on the same machine needs the rest.
    #[arg(long, global = true, env = "REPLAYSAFE_THREADS", value_name = "N")]
    pub threads: Option<std::num::NonZeroUsize>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// The runtime's worker threads. Measured on a 2-core machine running
    /// PostgreSQL too (bench/run, c=8): one thread answered about 20% more
    /// deliveries than two, because waking a parked thread for every hand-off
    /// between a request and its commit cost more than the work itself.
    pub fn runtime_threads(&self) -> usize {
        self.threads.map(|n| n.get()).unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cores / 2).max(1)
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Receive, verify, claim and forward webhooks, and serve the dashboard (the default)
    Serve(ServeArgs),
    /// Apply database migrations (idempotent) and exit
    Migrate,
    /// Sign sample events with a source's scheme and send them to its receiver
    Send(crate::send::SendArgs),
    /// Manage dashboard users: add (password from stdin), list, disable, enable
    User {
        #[command(subcommand)]
        action: crate::users::UserAction,
    },
    /// Fill the database with realistic history through the real receiver and workers
    Seed(crate::seed::SeedArgs),
    /// Pause or resume a source's forwarding (stored in the database)
    Source {
        #[command(subcommand)]
        action: SourceAction,
    },
}

#[derive(Subcommand, Debug)]
pub enum SourceAction {
    /// Keep receiving, verifying and claiming, but forward nothing until resumed
    Pause { slug: String },
    /// Forward again, starting with what was held
    Resume { slug: String },
}

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Workers forwarding events in this process; 0 runs a receiver only
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Run workers only: no receiver and no dashboard, just /healthz and /readyz
    #[arg(long)]
    pub worker_only: bool,
}

impl Default for ServeArgs {
    fn default() -> Self {
        Self {
            workers: 8,
            worker_only: false,
        }
    }
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
    #[error(transparent)]
    Source(#[from] crate::sources::SourceError),
    #[error(transparent)]
    Seed(#[from] crate::seed::SeedError),
    #[error(transparent)]
    User(#[from] crate::users::UserError),
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

pub async fn run(cli: Cli) -> Result<(), CliError> {
    let config = config::load(cli.config.as_deref())?;
    match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => serve(config, args).await,
        Command::Migrate => migrate(config).await,
        Command::Send(args) => Ok(crate::send::run(&config, args).await?),
        Command::Source { action } => source(config, action).await,
        Command::Seed(args) => seed(config, args).await,
        Command::User { action } => {
            let (_database, pool) = open_migrated(&config).await?;
            let result = crate::users::run(&pool, action).await;
            pool.close().await;
            Ok(result?)
        }
    }
}

/// For one-shot commands: the database, migrated, with the config's sources.
/// Keep the returned `Database` alive while the pool is used.
async fn open_migrated(config: &Config) -> Result<(db::Database, sqlx::PgPool), CliError> {
    let database = locate_one_shot(config).await?;
    let pool = db::pool(&database.url, 2)?;
    db::migrate(&pool).await?;
    db::sync_sources(&pool, config)
        .await
        .map_err(DbError::from)?;
    Ok((database, pool))
}

/// The database for a one-shot command: an embedded cluster that a running
/// `serve` started is used and left running.
async fn locate_one_shot(config: &Config) -> Result<db::Database, CliError> {
    let database = db::locate(config).await?;
    if let Some(pg) = &database.embedded {
        pg.leave_running_if_reused();
    }
    Ok(database)
}

async fn seed(config: Config, args: crate::seed::SeedArgs) -> Result<(), CliError> {
    let database = locate_one_shot(&config).await?;
    // Seeding claims in batches like `serve` does: it needs as many connections.
    let pool = db::pool(&database.url, 16)?;
    db::migrate(&pool).await?;
    db::sync_sources(&pool, &config)
        .await
        .map_err(DbError::from)?;
    crate::seed::run(&config, &pool, args).await?;
    pool.close().await;
    Ok(())
}

async fn migrate(config: Config) -> Result<(), CliError> {
    let (_database, pool) = open_migrated(&config).await?;
    pool.close().await;
    println!("migrations applied");
    Ok(())
}

async fn source(config: Config, action: SourceAction) -> Result<(), CliError> {
    let (_database, pool) = open_migrated(&config).await?;
    let (slug, paused) = match &action {
        SourceAction::Pause { slug } => (slug, true),
        SourceAction::Resume { slug } => (slug, false),
    };
    let actor = format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    );
    crate::sources::set_paused(&pool, slug, paused, &actor, None).await?;
    pool.close().await;
    println!(
        "source {slug} {}",
        if paused { "paused" } else { "resumed" }
    );
    Ok(())
}

async fn serve(config: Config, args: ServeArgs) -> Result<(), CliError> {
    for s in &config.sources {
        if s.destination.is_some() && s.destination_secret.is_none() {
            tracing::warn!(
                source = %s.slug,
                "no destination_secret: forwards carry no webhook-signature, so the application cannot tell them from forgeries"
            );
        }
    }
    let config = Arc::new(config);
    let database = db::locate(&config).await?;
    let pool = db::pool(&database.url, 32)?;
    let shutdown = CancellationToken::new();
    let wake = Arc::new(tokio::sync::Notify::new());
    let role = if args.worker_only {
        startup::Role::WorkerOnly
    } else {
        startup::Role::Full
    };

    let app = Application::bind(config.clone(), pool.clone(), wake.clone(), role)
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
    let server = tokio::spawn(app.run(shutdown.clone()));
    let pruner = tokio::spawn(crate::retention::run(
        pool.clone(),
        config.retention_days,
        config.dedup_ttl_days,
        shutdown.clone(),
    ));
    // Workers start once the schema is in place.
    let processing = tokio::spawn({
        let (pool, config, shutdown) = (pool.clone(), config.clone(), shutdown.clone());
        async move {
            startup::prepare_database(pool.clone(), config.clone(), shutdown.clone()).await;
            if shutdown.is_cancelled() {
                return;
            }
            let rollup = tokio::spawn(crate::rollup::run(pool.clone(), shutdown.clone()));
            let sessions = tokio::spawn(crate::gate::delete_expired_sessions(
                pool.clone(),
                shutdown.clone(),
            ));
            let mut workers = crate::processing::worker::Workers::new(pool, config, wake)
                .spawn(args.workers, shutdown);
            tracing::info!(
                workers = args.workers,
                worker_only = args.worker_only,
                "processing started"
            );
            while workers.join_next().await.is_some() {}
            let _ = rollup.await;
            let _ = sessions.await;
        }
    });
    tokio::select! {
        _ = startup::shutdown_signal() => tracing::info!("shutting down"),
        _ = shutdown.cancelled() => {}
    }
    shutdown.cancel();
    let served = server.await;
    let _ = processing.await;
    let _ = pruner.await;
    pool.close().await;
    // Dropping the database stops an embedded PostgreSQL.
    drop(database);
    match served {
        Ok(result) => result.map_err(CliError::Serve),
        Err(join) => Err(CliError::Serve(std::io::Error::other(join))),
    }
}
