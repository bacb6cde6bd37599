//! The command line (spec section 8): plural nouns then verbs (`sources
//! pause`, `tokens create`), top-level verbs for the server's own work
//! (`serve`, `migrate`, `send`, `reconcile`, `listen`, `prove`). What exists
//! both on the database and over the API is one command: remote when a
//! server is named (`--url`, `REPLAYSAFE_URL`), local otherwise (`place`). Every subcommand
//! takes `--config` and honours `$REPLAYSAFE_CONFIG` and `$DATABASE_URL`.

pub mod alert;
pub mod config_check;
#[cfg(test)]
mod docs_check;
pub mod migrate;
pub mod output;
pub mod place;
pub mod prove;
pub mod prune;
pub mod remote;
pub mod seed;
pub mod send;
pub mod serve;
pub mod source;
pub mod sources;
pub mod token;
pub mod user;
pub mod whoami;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use place::Place;
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
    /// Config file [default: ./replaysafe.toml, else
    /// /etc/replaysafe/replaysafe.toml, else the defaults]
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
    #[command(
        after_help = "Examples:\n  replaysafe serve                                  # ./replaysafe.toml, or the defaults with PostgreSQL under ./data\n  DATABASE_URL=postgres://replaysafe@db/replaysafe replaysafe serve --config /etc/replaysafe/replaysafe.toml"
    )]
    Serve(ServeArgs),
    /// Apply database migrations (idempotent) and exit
    Migrate,
    /// Apply retention now, as `serve` does every 10 minutes, and print what went
    Prune(prune::PruneArgs),
    /// Sign sample events with a source's scheme and send them to its receiver
    #[command(
        after_help = "Examples:\n  replaysafe send --source stripe\n  replaysafe send --source stripe --events 20 --repeat 3 --concurrency 8   # a provider's retries"
    )]
    Send(send::SendArgs),
    /// Dashboard users on the database: add (password typed without echo, or
    /// piped), list, disable, enable, unlock
    #[command(
        after_help = "Examples:\n  replaysafe users add --username alice --role operator\n  printf '%s\\n' \"$PASSWORD\" | replaysafe users add --username ci --role viewer\n  replaysafe users list --json"
    )]
    Users {
        #[command(subcommand)]
        action: user::UserAction,
    },
    /// Fill the database with realistic history through the real receiver and workers
    Seed(seed::SeedArgs),
    /// Sources: list, pause, resume (on the database, or over the API when
    /// --url or REPLAYSAFE_URL is set), show and breaker open|close (over
    /// the API)
    #[command(
        after_help = "Examples:\n  replaysafe sources list\n  replaysafe sources pause stripe                  # on the database the config names\n  REPLAYSAFE_URL=https://hooks.example.com REPLAYSAFE_TOKEN=rs_... replaysafe sources pause stripe\n  replaysafe sources breaker open stripe --destination billing --url http://127.0.0.1:3000"
    )]
    Sources {
        #[command(flatten)]
        target: remote::Target,
        #[command(flatten)]
        place: Place,
        #[command(subcommand)]
        action: remote::SourcesAction,
    },
    /// Check the configuration as `serve` reads it and print what is in force (secrets hidden); exit 1 naming a bad key
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Print a shell completion script: `replaysafe completions bash > /etc/bash_completion.d/replaysafe`
    Completions { shell: clap_complete::Shell },
    /// Write a man page for every command into DIR (replaysafe.1,
    /// replaysafe-sources-pause.1, ...), as the packages install them
    #[command(hide = true)]
    Manpages { dir: PathBuf },
    /// API tokens for /api/v1 and the CLI: create (on the database, printed
    /// once), list and revoke (on the database, or over the API)
    #[command(
        after_help = "Examples:\n  replaysafe tokens create --name deploy-bot --role operator --expires 30d\n  replaysafe tokens list --json\n  replaysafe tokens revoke --name deploy-bot"
    )]
    Tokens {
        #[command(flatten)]
        target: remote::Target,
        #[command(flatten)]
        place: Place,
        #[command(subcommand)]
        action: token::TokenAction,
    },
    /// Who you are: the token's name and role on a server (remote), or the
    /// name the audit log gives commands run on the database (local)
    Whoami {
        #[command(flatten)]
        target: remote::Target,
        #[command(flatten)]
        place: Place,
    },
    /// Every source's figures, backlog and alerts on a running server (over its API)
    Overview {
        #[command(flatten)]
        target: remote::Target,
        #[arg(long, default_value = "hour", value_parser = ["hour", "day", "week"])]
        window: String,
    },
    /// Alerts: list, silence, unsilence (over the API); test a channel of
    /// the config (on this machine)
    #[command(
        after_help = "Examples:\n  replaysafe alerts list\n  replaysafe alerts silence --rule backlog --source stripe --for 2h --reason 'planned migration'\n  replaysafe alerts test --channel ops-slack"
    )]
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
    /// list, show, redeliver, force, dead-letter
    #[command(
        after_help = "Examples:\n  replaysafe events list --source stripe --outcome dead --since 2h\n  replaysafe events show 4217\n  replaysafe events redeliver 4217 4218\n  replaysafe events redeliver --dead --source stripe --since 2026-12-01T00:00:00Z --until 2026-12-02T00:00:00Z\n  replaysafe events force 4217 --key evt_1 --reason 'handler fixed'"
    )]
    Events {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: remote::EventsAction,
    },
    /// Deliveries on a running server (over its API): list, show, export, tail, redeliver
    #[command(
        after_help = "Examples:\n  replaysafe deliveries list --outcome rejected --since 30m\n  replaysafe deliveries tail --source stripe --json"
    )]
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
    #[command(
        after_help = "Examples:\n  replaysafe incidents list --state open\n  replaysafe incidents ack 12\n  replaysafe incidents redeliver 12"
    )]
    Incidents {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: remote::IncidentsAction,
    },
    /// Compare a source's events with its provider's own list and recover
    /// what never arrived, through the dedup layer (over the API; operator)
    #[command(
        after_help = "Examples:\n  replaysafe reconcile --source stripe --since 24h --dry-run\n  replaysafe reconcile --source stripe"
    )]
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
    /// Old spelling of `users` (on the database)
    #[command(hide = true)]
    User {
        #[command(subcommand)]
        action: user::UserAction,
    },
    /// Old spelling of `sources pause|resume --local`
    #[command(hide = true)]
    Source {
        #[command(subcommand)]
        action: SourceAction,
    },
    /// Old spelling of `tokens --local`
    #[command(hide = true)]
    Token {
        #[command(flatten)]
        target: remote::Target,
        #[command(subcommand)]
        action: token::TokenAction,
    },
    /// Old spelling of `alerts test`
    #[command(hide = true)]
    Alert {
        #[command(subcommand)]
        action: alert::AlertAction,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigAction {
    /// Read and validate the configuration (`--config`, `$REPLAYSAFE_CONFIG`,
    /// ./replaysafe.toml, /etc/replaysafe/replaysafe.toml)
    Check {
        /// Print what is in force as one JSON document (secrets hidden)
        #[arg(long)]
        json: bool,
    },
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
    #[error("{0}")]
    Op(replaysafe_core::error::OpError),
    #[error("{0}")]
    Io(String),
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

impl From<replaysafe_core::error::OpError> for CliError {
    fn from(e: replaysafe_core::error::OpError) -> Self {
        CliError::Op(e)
    }
}

impl CliError {
    /// The exit code this error ends the process with: the same code for
    /// the same kind of failure, whether the command ran on the database or
    /// over the API (docs/api-and-cli.md lists them per command).
    pub fn exit_code(&self) -> u8 {
        use remote::RemoteError as R;
        use replaysafe_core::accounts::tokens::TokenError;
        use replaysafe_core::db::users::UserError;
        use replaysafe_core::error::OpError;
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
            // The database is what a local command talks to.
            CliError::Db(e) if database_away(e) => exit::UNREACHABLE,
            CliError::User(UserError::Db(e))
            | CliError::Token(TokenError::Db(e))
            | CliError::Source(replaysafe_core::db::sources::SourceError::Db(e))
                if sql_away(e) =>
            {
                exit::UNREACHABLE
            }
            CliError::User(UserError::Exists(_)) | CliError::Token(TokenError::Exists(_)) => {
                exit::REFUSED
            }
            CliError::User(UserError::BadName | UserError::ShortPassword)
            | CliError::Token(TokenError::BadName) => exit::USAGE,
            CliError::Op(op) => match op {
                OpError::Unauthorized(_) | OpError::Forbidden(_) => exit::AUTH,
                OpError::Conflict(_) => exit::REFUSED,
                OpError::BadRequest(_) => exit::USAGE,
                OpError::Unavailable(_) => exit::UNREACHABLE,
                _ => exit::ERROR,
            },
            _ => exit::ERROR,
        }
    }
}

/// The database did not answer (as against refusing a statement).
fn database_away(e: &DbError) -> bool {
    match e {
        DbError::Connect(_) => true,
        DbError::Sql(e) | DbError::Migrate(sqlx::migrate::MigrateError::Execute(e)) => sql_away(e),
        _ => false,
    }
}

fn sql_away(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut)
}

/// Where a system-wide install keeps its configuration (the packages put it
/// there); read when neither `--config`, `$REPLAYSAFE_CONFIG` nor
/// `./replaysafe.toml` names one.
pub const SYSTEM_CONFIG_PATH: &str = "/etc/replaysafe/replaysafe.toml";

impl Cli {
    /// The config file in force: `--config` or `$REPLAYSAFE_CONFIG`, else
    /// `./replaysafe.toml`, else the system one; None runs with the defaults.
    pub fn config_path(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            [config::DEFAULT_CONFIG_PATH, SYSTEM_CONFIG_PATH]
                .into_iter()
                .map(PathBuf::from)
                .find(|path| path.exists())
        })
    }
}

pub async fn run(cli: Cli) -> Result<(), CliError> {
    let config_path = cli.config_path();
    // The remote commands talk to a server: they read no config file.
    let load = || Ok::<_, CliError>(config::load(config_path.as_deref())?);
    match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => serve::run(load()?, args).await,
        Command::Migrate => migrate::run(load()?).await,
        Command::Prune(args) => prune::run(load()?, args).await,
        Command::Send(args) => Ok(send::run(&load()?, args).await?),
        Command::Sources {
            target,
            place,
            action,
        } => sources::run(load, target, place, action).await,
        Command::Source { action } => source::run(load()?, action).await,
        Command::Seed(args) => seed::command(load()?, args).await,
        Command::Users { action } | Command::User { action } => {
            let (_database, pool) = open_migrated(&load()?).await?;
            let result = user::run(&pool, action).await;
            pool.close().await;
            Ok(result?)
        }
        Command::Alert { action } => Ok(alert::run(&load()?, action).await?),
        Command::Alerts {
            action: remote::AlertsAction::Test { channel },
            ..
        } => Ok(alert::run(&load()?, alert::AlertAction::Test { channel }).await?),
        Command::Config {
            action: ConfigAction::Check { json },
        } => {
            config_check::run(&load()?, json);
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
        Command::Manpages { dir } => {
            use clap::CommandFactory;
            std::fs::create_dir_all(&dir)
                .and_then(|()| clap_mangen::generate_to(Cli::command(), &dir))
                .map_err(|e| {
                    CliError::Io(format!("cannot write man pages to {}: {e}", dir.display()))
                })
        }
        Command::Tokens {
            target,
            place,
            action,
        } => token::run(load, target, place, action).await,
        Command::Token { target, action } => {
            let local = Place {
                local: true,
                remote: false,
            };
            token::run(load, target, local, action).await
        }
        Command::Whoami { target, place } => whoami::run(target, place).await,
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
        Command::Prove(args) => prove::command(config_path, *args).await,
        Command::Listen { target, args } => {
            Ok(remote::run(target, remote::Command::Listen(args)).await?)
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

/// For a command that exists both ways, run locally: the database the
/// config names, migrated, with the sources table left as the servers
/// synced it (this shell's config need not be theirs). With no config file
/// and no database URL there is nothing to run on: no embedded cluster is
/// started for a look.
pub(crate) async fn open_existing(
    config: &Config,
) -> Result<(db::Database, sqlx::PgPool), CliError> {
    if config.path.is_none() && config.database_url.is_none() {
        return Err(remote::RemoteError::BadArgument(format!(
            "no server named (--url, REPLAYSAFE_URL) and no database: no config file \
             (--config, $REPLAYSAFE_CONFIG, {}, {SYSTEM_CONFIG_PATH}) and no DATABASE_URL",
            config::DEFAULT_CONFIG_PATH
        ))
        .into());
    }
    let database = locate_one_shot(config).await?;
    let pool = db::pool(&database.url, 2).await?;
    db::migrate(&pool).await?;
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
