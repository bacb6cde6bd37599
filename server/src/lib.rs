//! replaysafe: an inbound-webhook gateway with safe-replay semantics.
//! `main` parses the command line and calls into this library.

pub mod cli;
pub mod config;
pub mod db;
pub mod demo;
pub mod embedded_pg;
pub mod events;
pub mod gate;
pub mod health;
pub mod metrics_export;
pub mod operations;
pub mod processing;
pub mod providers;
pub mod receiver;
pub mod retention;
pub mod rollup;
pub mod secret;
pub mod seed;
pub mod send;
pub mod sources;
pub mod startup;
pub mod telemetry;
pub mod users;
