//! The audit log: one statement for every writer (`crate::accounts::record`,
//! the app crate's, which this crate builds on), and the actor the command
//! line records.

pub use crate::accounts::{record, Entry};
pub use replaysafe_types::auth::Who;

/// The actor the command line records: `cli:` and the invoking user.
pub fn cli_actor() -> String {
    format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    )
}
