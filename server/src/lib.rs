//! replaysafe: an inbound-webhook gateway with safe-replay semantics.
//! `main` parses the command line and calls into this library.
//!
//! The modules, each using only those listed after it:
//! - `cli`: one file per command; `serve` builds the `Services` once.
//! - `web`: the router, the dashboard's gate and operations, `/hooks`,
//!   health and metrics endpoints; below `cli`, the only module that knows
//!   axum.
//! - `jobs`: retention, rollups, the session sweeper, bulk re-delivery.
//! - `alerts`: the alert evaluator and its channels (webhook, Slack, email).
//! - `processing`: receiving end to end, forwarding, retries, workers and
//!   sync mode; `Services`, the handles they share.
//! - `receiver`: verify, key and claim a delivery; answers.
//! - `events`: the one owner of `events.state`.
//! - `db`: the pool, the embedded PostgreSQL, sources, users, audit writes.
//! - `config`: the TOML file, read and validated once.
//! - `providers`, `telemetry`, `secret`: provider rules, logs and metrics,
//!   redacted secrets.

/// mimalloc rather than glibc's malloc: forwarding spent an eighth of both
/// cores in glibc's allocator (bench/README, "The allocator, and one round
/// trip a statement"). Declared here, so that the server, its benchmarks
/// and its tests run on one.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod alerts;
pub mod cli;
pub mod config;
pub mod db;
pub mod events;
pub mod jobs;
pub mod processing;
pub mod providers;
pub mod receiver;
pub mod secret;
pub mod telemetry;
pub mod web;
