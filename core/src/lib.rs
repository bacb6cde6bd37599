//! replaysafe's domain: everything but the web edge and the command line.
//! The dashboard (`app`), `/api/v1` and the CLI (`server`) call the same
//! functions here for the same operation; nothing here knows axum or
//! Leptos, and the types they exchange are `replaysafe_types`.
//!
//! The modules, each using only those listed after it:
//! - `ops`: the operations every front end shares (what a server function,
//!   an `/api/v1` handler and a CLI command call), each checking the
//!   caller's role first (`ops::Cx::require`).
//! - `jobs`: retention, rollups, the session sweeper, bulk re-delivery and
//!   its queue.
//! - `reconcile`: comparing a source's events with its provider's own list
//!   of what it sent, and recovering what never arrived.
//! - `alerts`: the rules' conditions, the evaluator and its channels
//!   (webhook, Slack, email).
//! - `processing`: receiving end to end, forwarding, retries, workers and
//!   sync mode; `Services`, the handles they share.
//! - `receiver`: verify, key and claim a delivery; answers.
//! - `events`: the one owner of the events' and dispatches' states.
//! - `accounts`: who is calling: users, passwords, API tokens, the audit
//!   log, the sign-in throttle.
//! - `db`: the pool, the embedded PostgreSQL, sources, users, audit writes.
//! - `config`: the TOML file, read and validated once.
//! - `providers`, `telemetry`, `secret`, `error`: provider rules, logs and
//!   metrics, redacted secrets, the operations' one error.

pub mod accounts;
pub mod alerts;
pub mod config;
pub mod db;
pub mod error;
pub mod events;
pub mod incidents;
pub mod jobs;
pub mod ops;
pub mod processing;
pub mod providers;
pub mod receiver;
pub mod reconcile;
pub mod secret;
pub mod telemetry;
