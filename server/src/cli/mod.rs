//! The command line (spec section 8). Every subcommand takes `--config` and
//! honours `$REPLAYSAFE_CONFIG` and `$DATABASE_URL`.

pub mod alert;
pub mod config_check;
pub mod migrate;
pub mod prove;
pub mod prune;
pub mod remote;
pub mod seed;
pub mod send;
pub mod serve;
pub mod source;
pub mod token;
pub mod user;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use replaysafe_core::config::{self, Config, ConfigError};
use replaysafe_core::db::{self, DbError};
use serve::ServeArgs;
use source::SourceAction;

#[derive(Parser, Debug)]
#[command(
    name = "replaysafe",
    version = replaysafe_core::telemetry::VERSION_AND_COMMIT,
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
    /// Runs the server (`serve`, or no command at all).
    pub fn serves(&self) -> bool {
        matches!(self.command, None | Some(Command::Serve(_)))
    }

    /// The runtime's worker threads: half the cores leaves the rest to
    /// PostgreSQL beside it, and waking a parked thread for every hand-off
    /// between a request and its commit costs more than the work itself
    /// (bench/README, "Why the tuning constants are what they are").
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
    /// Apply retention now, as `serve` does every 10 minutes, and print what went
    Prune,
    /// Sign sample events with a source's scheme and send them to its receiver
    Send(send::SendArgs),
    /// Manage dashboard users: add (password from stdin), list, disable, enable
    User {
        #[command(subcommand)]
        action: user::UserAction,
    },
    /// Fill the database with realistic history through the real receiver and workers
    Seed(seed::SeedArgs),
    /// Pause or resume a source's forwarding (stored in the database)
    Source {
        #[command(subcommand)]
        action: SourceAction,
    },
    /// Check the configuration as `serve` reads it and print what is in force (secrets hidden); exit 1 naming a bad key
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Print a shell completion script: `replaysafe completions bash > /etc/bash_completion.d/replaysafe`
    Completions { shell: clap_complete::Shell },
    /// Alert channels: send a test message to one
    Alert {
        #[command(subcommand)]
        action: alert::AlertAction,
    },
    /// Manage API tokens for /api/v1 and the CLI: create (printed once), list, revoke
    Token {
        #[command(subcommand)]
        action: token::TokenAction,
    },
    /// Every source's figures, backlog and alerts on a running server (over its API)
    Overview {
        #[command(flatten)]
        target: remote::Target,
        #[arg(long, default_value = "hour", value_parser = ["hour", "day", "week"])]
        window: String,
    },
    /// Alerts on a running server (over its API): list, silence, unsilence
    Alerts {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: remote::AlertsAction,
    },
    /// The audit log of a running server, newest first (over its API)
    Audit {
        #[command(flatten)]
        target: remote::Target,
        /// At most this many entries (pages of 100 are followed)
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Events on a running server (over its API; REPLAYSAFE_URL, REPLAYSAFE_TOKEN):
    /// list, show, redeliver, force
    Events {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: remote::EventsAction,
    },
    /// Deliveries on a running server (over its API): list, show, tail
    Deliveries {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: remote::DeliveriesAction,
    },
    /// Bulk re-delivery jobs on a running server (over its API): list, show, watch, cancel
    Jobs {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: remote::JobsAction,
    },
    /// Incidents on a running server (over its API): list, show, ack,
    /// resolve, ignore, redeliver
    Incidents {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: remote::IncidentsAction,
    },
    /// Sources on a running server (over its API): list, pause, resume
    Sources {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: remote::SourcesAction,
    },
    /// Compare a source's events with its provider's own list and recover
    /// what never arrived, through the dedup layer (over the API; operator)
    Reconcile {
        #[command(flatten)]
        target: remote::Target,
        #[command(flatten)]
        args: remote::ReconcileArgs,
    },
    /// Send the events a running server claims from now on to a handler on
    /// this machine, as replaysafe forwards them, one line each (over the
    /// API; any role, bodies whole for an admin token only)
    #[command(
        after_help = "Example:\n  REPLAYSAFE_URL=https://hooks.example.com REPLAYSAFE_TOKEN=rs_... \\\n    replaysafe listen --source stripe --forward-to http://localhost:4242/webhooks"
    )]
    Listen {
        #[command(flatten)]
        target: remote::Target,
        #[command(flatten)]
        args: remote::ListenArgs,
    },
    /// Show whether a handler is idempotent: send one stored event to it
    /// N times with the same Idempotency-Key, some at once and some in
    /// sequence, and count its side effects with your check before and
    /// after (exit 0 idempotent, 6 not, with the evidence)
    #[command(
        after_help = "Examples:\n  replaysafe prove --event 4217 --to http://localhost:4242/webhooks \\\n    --check 'psql -tAc \"select count(*) from orders\"'\n  replaysafe deliveries export 9120 --out captured.json   # admin, once\n  replaysafe prove --from-file captured.json --to http://localhost:4242/webhooks --check-url http://localhost:4242/orders/count"
    )]
    Prove(Box<prove::ProveArgs>),
}

#[derive(Subcommand, Debug)]
pub enum ConfigAction {
    /// Read and validate the configuration (`--config`, `$REPLAYSAFE_CONFIG`, ./replaysafe.toml)
    Check,
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
    Send(#[from] send::SendError),
    #[error(transparent)]
    Source(#[from] replaysafe_core::db::sources::SourceError),
    #[error(transparent)]
    Seed(#[from] seed::SeedError),
    #[error(transparent)]
    User(#[from] replaysafe_core::db::users::UserError),
    #[error(transparent)]
    Token(#[from] replaysafe_core::accounts::tokens::TokenError),
    #[error(transparent)]
    Remote(#[from] remote::RemoteError),
    #[error(transparent)]
    Alert(#[from] alert::AlertError),
    #[error("server error: {0}")]
    Serve(std::io::Error),
    /// `prove` could not reach a verdict (the handler never accepted the
    /// event, the check failed or did not move).
    #[error("{0}")]
    Prove(String),
    /// `prove` found the handler not idempotent: the verdict, with its evidence.
    #[error("{0}")]
    NotIdempotent(String),
}

/// The process's exit codes (spec section 10), decided here alone.
pub mod exit {
    pub const OK: u8 = 0;
    pub const ERROR: u8 = 1;
    /// What was asked cannot be read (clap's own code for its parse errors).
    pub const USAGE: u8 = 2;
    /// Refused by the dedup layer or a guard (already completed, in
    /// progress, a filter, a state that forbids it).
    pub const REFUSED: u8 = 3;
    /// No token, a dead one, or too low a role.
    pub const AUTH: u8 = 4;
    /// The server did not answer.
    pub const UNREACHABLE: u8 = 5;
    /// `prove` found the handler not idempotent.
    pub const NOT_IDEMPOTENT: u8 = 6;
}

impl CliError {
    /// The exit code this error ends the process with.
    pub fn exit_code(&self) -> u8 {
        use remote::RemoteError as R;
        match self {
            CliError::Remote(remote) => match remote {
                R::NoToken => exit::AUTH,
                R::BadUrl(_) | R::BadArgument(_) => exit::USAGE,
                R::Unreachable { .. } => exit::UNREACHABLE,
                R::Refused { status, .. } => match status {
                    401 | 403 => exit::AUTH,
                    400 | 422 => exit::USAGE,
                    409 => exit::REFUSED,
                    _ => exit::ERROR,
                },
                R::SomeRefused { .. } => exit::REFUSED,
                R::Unfinished { .. } | R::Stopped(_) | R::Decode(_) | R::Io(_) => exit::ERROR,
            },
            CliError::NotIdempotent(_) => exit::NOT_IDEMPOTENT,
            _ => exit::ERROR,
        }
    }
}

pub async fn run(cli: Cli) -> Result<(), CliError> {
    // The remote commands talk to a server: they read no config file.
    let load = || config::load(cli.config.as_deref());
    match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => serve::run(load()?, args).await,
        Command::Migrate => migrate::run(load()?).await,
        Command::Prune => prune::run(load()?).await,
        Command::Send(args) => Ok(send::run(&load()?, args).await?),
        Command::Source { action } => source::run(load()?, action).await,
        Command::Seed(args) => seed::command(load()?, args).await,
        Command::User { action } => {
            let (_database, pool) = open_migrated(&load()?).await?;
            let result = user::run(&pool, action).await;
            pool.close().await;
            Ok(result?)
        }
        Command::Alert { action } => Ok(alert::run(&load()?, action).await?),
        Command::Config {
            action: ConfigAction::Check,
        } => {
            config_check::print(&load()?);
            Ok(())
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "replaysafe",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Token { action } => {
            let (_database, pool) = open_migrated(&load()?).await?;
            let result = token::run(&pool, action).await;
            pool.close().await;
            Ok(result?)
        }
        Command::Overview { target, window } => {
            Ok(remote::run(target, remote::Command::Overview { window }).await?)
        }
        Command::Alerts { target, action } => {
            Ok(remote::run(target, remote::Command::Alerts(action)).await?)
        }
        Command::Audit { target, limit } => {
            Ok(remote::run(target, remote::Command::Audit { limit }).await?)
        }
        Command::Events { target, action } => {
            Ok(remote::run(target, remote::Command::Events(action)).await?)
        }
        Command::Deliveries { target, action } => {
            Ok(remote::run(target, remote::Command::Deliveries(action)).await?)
        }
        Command::Jobs { target, action } => {
            Ok(remote::run(target, remote::Command::Jobs(action)).await?)
        }
        Command::Incidents { target, action } => {
            Ok(remote::run(target, remote::Command::Incidents(action)).await?)
        }
        Command::Reconcile { target, args } => {
            Ok(remote::run(target, remote::Command::Reconcile(args)).await?)
        }
        Command::Prove(args) => prove::command(cli.config, *args).await,
        Command::Listen { target, args } => {
            Ok(remote::run(target, remote::Command::Listen(args)).await?)
        }
        Command::Sources { target, action } => {
            Ok(remote::run(target, remote::Command::Sources(action)).await?)
        }
    }
}

/// For one-shot commands: the database, migrated, with the config's sources.
/// Keep the returned `Database` alive while the pool is used.
pub(crate) async fn open_migrated(
    config: &Config,
) -> Result<(db::Database, sqlx::PgPool), CliError> {
    let database = locate_one_shot(config).await?;
    let pool = db::pool(&database.url, 2).await?;
    db::migrate(&pool).await?;
    db::sources::sync(&pool, config)
        .await
        .map_err(DbError::from)?;
    Ok((database, pool))
}

/// The database for a one-shot command: an embedded cluster that a running
/// `serve` started is used and left running.
pub(crate) async fn locate_one_shot(config: &Config) -> Result<db::Database, CliError> {
    let database = db::locate(config).await?;
    if let Some(pg) = &database.embedded {
        pg.leave_running_if_reused();
    }
    Ok(database)
}
