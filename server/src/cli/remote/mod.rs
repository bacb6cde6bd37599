//! `replaysafe events|deliveries|sources ...`: the CLI over a running
//! replaysafe's `/api/v1` (issue 16, spec section 9), in the habits of the
//! Stripe and GitHub CLIs: tables for people, `--json` for scripts (one JSON
//! document, or JSON lines for `tail`), and a non-zero exit when the server
//! refused. `--url` / `$REPLAYSAFE_URL` and `--token` / `$REPLAYSAFE_TOKEN`
//! say where and as whom; no config file and no database are needed.

mod alerts;
mod client;
mod deliveries;
mod events;
mod incidents;
mod jobs;
mod listen;

mod overview;
use super::output;
mod reconcile;
mod sources;

use clap::{Args, Subcommand};

pub use client::Remote;
pub use client::RemoteError;
pub use listen::ListenArgs;
pub use reconcile::ReconcileArgs;
pub use sources::print as print_sources;

/// Where the server is and the token to call it with.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// The replaysafe server [default: http://127.0.0.1:3000]
    #[arg(long, global = true, env = "REPLAYSAFE_URL", value_name = "URL")]
    pub url: Option<String>,
    /// An API token (`replaysafe tokens create`); prefer the environment
    /// variable, which stays out of the shell history and `ps`
    #[arg(
        long,
        global = true,
        env = "REPLAYSAFE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Print JSON (one document; JSON lines for `tail`) instead of tables
    #[arg(long, global = true)]
    pub json: bool,
    /// Send the token over plain http to a host that is not this machine
    /// (anyone on the way can read it and act as it)
    #[arg(long, global = true)]
    pub insecure: bool,
}

#[derive(Subcommand, Debug)]
pub enum EventsAction {
    /// Events, newest first
    List(ListFilter),
    /// An event with its timeline of deliveries and attempts
    Show { id: i64 },
    /// Re-deliver events through the dedup layer: by id, or every dead one
    /// matching --dead and its filters (a dead event is queued again exactly
    /// once; completed and in-progress ones are refused)
    Redeliver(events::RedeliverArgs),
    /// Run a completed event again (admin): same Idempotency-Key, audit-logged
    Force {
        id: i64,
        /// The event's idempotency key, typed out to confirm
        #[arg(long)]
        key: String,
        /// Why: it goes into the audit log
        #[arg(long)]
        reason: String,
        /// Only its completed dispatch to this destination (default: every completed one)
        #[arg(long)]
        destination: Option<String>,
    },
    /// Give up on a waiting event (operator): it goes dead with the reason,
    /// so an ordered destination's key it holds goes on; audit-logged
    #[command(name = "dead-letter")]
    DeadLetter {
        id: i64,
        /// Why: kept as the dead-letter reason and in the audit log
        #[arg(long)]
        reason: String,
        /// Only its waiting dispatch to this destination (default: every waiting one)
        #[arg(long)]
        destination: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum DeliveriesAction {
    /// Deliveries, newest first, with the dashboard's filters
    List(deliveries::ListArgs),
    /// One delivery: outcome, headers and payload as the dashboard shows them
    Show { id: i64 },
    /// A stored delivery whole, as JSON: every header as received and the
    /// exact body in base64 (admin; audit-logged: it holds what the
    /// dashboard masks). `replaysafe prove --from-file` sends it on
    Export {
        id: i64,
        /// Write it to this file (created readable by its owner only)
        /// instead of standard output
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
    /// Follow new deliveries as they arrive, one line each
    Tail {
        #[arg(long)]
        source: Option<String>,
    },
    /// Re-deliver stored deliveries through the receiver and the dedup
    /// layer (operator): a rejected one that now verifies is claimed like a
    /// first delivery
    Redeliver {
        #[arg(required = true)]
        ids: Vec<i64>,
        /// For a delivery rejected for its timestamp: an admin's reason to
        /// re-deliver it anyway (audit-logged)
        #[arg(long)]
        past_window_reason: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum SourcesAction {
    /// Every source, paused or not (on the database, or over the API: viewer)
    List,
    /// A source's figures over a window, as the dashboard shows them (over
    /// the API: viewer)
    Show {
        slug: String,
        #[arg(long, default_value = "hour", value_parser = ["hour", "day", "week"])]
        window: String,
    },
    /// Keep receiving, verifying and claiming, but forward nothing (on the
    /// database, or over the API: operator); audit-logged
    Pause { slug: String },
    /// Forward again, starting with what was held (on the database, or over
    /// the API: operator); audit-logged
    Resume { slug: String },
    /// Open or close a destination's circuit breaker by hand (operator;
    /// over the API only: the breaker lives in the running servers)
    Breaker {
        #[command(subcommand)]
        action: BreakerAction,
    },
}

#[derive(Subcommand, Debug)]
pub enum BreakerAction {
    /// Hold the destination's dispatches until an operator closes it
    Open {
        slug: String,
        /// The destination's name (a single `destination` is named default)
        #[arg(long, default_value = "default")]
        destination: String,
    },
    /// Let its failures start over and its waiting dispatches go out
    Close {
        slug: String,
        #[arg(long, default_value = "default")]
        destination: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum AlertsAction {
    /// Firing and recently resolved alerts, and the silences in force
    List,
    /// Send a test message through a channel of the config's
    /// `[[alerts.channel]]`, as alerts are sent (on this machine: reads the
    /// config, needs no server)
    Test {
        #[arg(long)]
        channel: String,
    },
    /// Hold back a rule's notifications for a while (admin; audit-logged)
    Silence {
        /// duplicate_storm, dead_letters, backlog, signature_failures, destination_failing, missed_events or incident_opened
        #[arg(long)]
        rule: String,
        /// Only this source (default: every source)
        #[arg(long)]
        source: Option<String>,
        /// How long: 30m, 4h, 1d (at most a week)
        #[arg(long = "for", value_name = "DURATION")]
        duration: String,
        /// Why: it goes into the audit log
        #[arg(long)]
        reason: String,
    },
    /// End a silence now (admin)
    Unsilence { id: i64 },
}

#[derive(Subcommand, Debug)]
pub enum JobsAction {
    /// The most recent bulk re-delivery jobs
    List,
    /// A job's state and counts
    Show { id: i64 },
    /// Follow a job to its end, with each event's outcome (Ctrl-C cancels it)
    Watch { id: i64 },
    /// Stop a job before its next step (operator)
    Cancel { id: i64 },
}

#[derive(Subcommand, Debug)]
pub enum IncidentsAction {
    /// Incidents, newest first by their last failure
    List {
        /// open, acknowledged, resolved or ignored
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        source: Option<String>,
    },
    /// An incident: a sample answer and its affected events
    Show { id: i64 },
    /// Say you are on it (operator)
    Ack { id: i64 },
    /// Close it by hand (operator); a later failure of its kind opens a new one
    Resolve { id: i64 },
    /// Keep it, counting, but notify nobody of it (operator)
    Ignore { id: i64 },
    /// Re-deliver its events that are dead at its destination, through the
    /// dedup layer, and follow the job (operator)
    Redeliver { id: i64 },
}

pub enum Command {
    Overview { window: String },
    Audit { limit: usize },
    Alerts(AlertsAction),
    Events(EventsAction),
    Jobs(JobsAction),
    Incidents(IncidentsAction),
    Deliveries(DeliveriesAction),
    Sources(SourcesAction),
    Reconcile(reconcile::ReconcileArgs),
    Listen(listen::ListenArgs),
}

pub async fn run(target: Target, command: Command) -> Result<(), RemoteError> {
    let remote = Remote::new(&target)?;
    let json = target.json;
    match command {
        Command::Overview { window } => overview::overview(&remote, &window, json).await,
        Command::Audit { limit } => overview::audit(&remote, limit, json).await,
        Command::Alerts(action) => alerts::run(&remote, action, json).await,
        Command::Events(action) => events::run(&remote, action, json).await,
        Command::Jobs(action) => jobs::run(&remote, action, json).await,
        Command::Incidents(action) => incidents::run(&remote, action, json).await,
        Command::Deliveries(action) => deliveries::run(&remote, action, json).await,
        Command::Sources(action) => sources::run(&remote, action, json).await,
        Command::Reconcile(args) => reconcile::run(&remote, args, json).await,
        Command::Listen(args) => listen::run(&remote, args, json).await,
    }
}

/// A Standard Webhooks secret of 32 random bytes, for `listen` and `prove`.
pub fn new_secret() -> String {
    use base64::Engine as _;
    let bytes: [u8; 32] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The innermost cause of an error (reqwest's outer ones say only "error
/// sending request").
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Query parameters, as the client sends them (empty values left out).
pub type Query = Vec<(&'static str, String)>;

/// What `events list` and `deliveries list` filter by.
#[derive(clap::Args, Debug)]
pub struct ListFilter {
    #[arg(long)]
    source: Option<String>,
    /// Events: dead, completed, in_progress (queued, processing or
    /// retrying) or a state. Deliveries: claimed, completed, in_progress,
    /// dead, rejected or unavailable
    #[arg(long)]
    outcome: Option<String>,
    #[arg(long)]
    key: Option<String>,
    /// First received since: `2h`, `30m` ago, or a UTC time (RFC 3339)
    #[arg(long)]
    since: Option<String>,
    #[arg(long)]
    until: Option<String>,
    /// At most this many (pages of 50 are followed)
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

impl ListFilter {
    /// The API's query parameters, and the limit.
    fn query(self) -> Result<(Query, usize), RemoteError> {
        let query = vec![
            ("since", when_or_empty(self.since.as_deref())?),
            ("until", when_or_empty(self.until.as_deref())?),
            ("source", self.source.unwrap_or_default()),
            ("outcome", self.outcome.unwrap_or_default()),
            ("key", self.key.unwrap_or_default()),
        ];
        Ok((query, self.limit))
    }
}

/// A `--since`/`--until` value as the API takes it: `2h` (ago), or a time
/// passed through (RFC 3339, or `2026-11-30T14:05` in UTC).
pub(super) fn when(value: &str) -> Result<String, RemoteError> {
    let Ok(ago) = humantime::parse_duration(value.trim()) else {
        return Ok(value.trim().to_owned());
    };
    chrono::Duration::from_std(ago)
        .ok()
        .and_then(|ago| chrono::Utc::now().checked_sub_signed(ago))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .ok_or_else(|| {
            RemoteError::BadArgument(format!("{value:?} is further back than time goes"))
        })
}

/// An optional `--since`/`--until`, for a query string ("" when absent).
fn when_or_empty(value: Option<&str>) -> Result<String, RemoteError> {
    value.map(when).transpose().map(Option::unwrap_or_default)
}
