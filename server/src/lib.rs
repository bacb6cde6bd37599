//! replaysafe: an inbound-webhook gateway with safe-replay semantics.
//! `main` parses the command line and calls into this library.
//!
//! The binary's two parts over `replaysafe_core`, which holds the domain:
//! - `cli`: one file per command; `serve` builds the `Services` once.
//! - `web`: the router, the dashboard's gate, `/hooks`, `/api/v1`, health
//!   and metrics endpoints; the only module that knows axum.

/// mimalloc rather than glibc's malloc: forwarding spent an eighth of both
/// cores in glibc's allocator (bench/README, "The allocator, and one round
/// trip a statement"). Declared here, so that the server, its benchmarks
/// and its tests run on one.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod cli;
pub mod web;
