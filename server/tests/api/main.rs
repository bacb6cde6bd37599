//! Integration tests: the real server on a free port, a fresh PostgreSQL
//! database per test (sqlx::test, from $DATABASE_URL).

mod accounts;
mod alerts;
mod architecture;
mod auto_failover;
mod bulk_jobs;
mod credentials;
mod dashboard;
mod declarative;
mod edge;
mod embedded;
mod exactly_once;
mod failover;
mod fanout;
mod handoff;
mod health;
mod helpers;
mod history;
mod hostile;
mod keys;
mod model;
mod ops;
mod outage;
mod poison;
mod presets;
mod processes;
mod processing;
mod receiver;
mod reconcile;
mod reconcile_github;
mod remote_cli;
mod replica;
mod rest;
mod sdk;
mod sources;
mod wakeups;
