//! The audit log: one statement for every writer (`app::auth::ssr::record`,
//! the app crate's, which this crate builds on), and the actor the command
//! line records.

pub use app::auth::ssr::{record, Entry};
pub use app::auth::Who;

/// The actor the command line records: `cli:` and the invoking user.
pub fn cli_actor() -> String {
    format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    )
}
