//! Server functions and the data they return. Database access happens only on
//! the server (`ssr`); the browser sees these types and nothing else.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// A configured source as the Sources page shows it. Secrets never leave the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct SourceSummary {
    pub slug: String,
    pub provider: String,
    pub mode: String,
    pub destination: Option<String>,
    pub paused: bool,
    /// Paused or resumed by an operator, overriding the config file.
    pub paused_by_operator: bool,
    /// False for a source removed from the config whose history remains.
    pub in_config: bool,
}

#[server(endpoint = "sources")]
pub async fn list_sources() -> Result<Vec<SourceSummary>, ServerFnError> {
    use ssr::*;
    let pool = pool()?;
    sqlx::query_as::<_, SourceSummary>(
        "SELECT slug, provider, mode, destination,
                coalesce(paused_override, config_paused) AS paused,
                paused_override IS NOT NULL AS paused_by_operator,
                in_config
         FROM sources ORDER BY in_config DESC, slug",
    )
    .fetch_all(&pool)
    .await
    .map_err(db_error)
}

#[cfg(feature = "ssr")]
pub mod ssr {
    use leptos::prelude::*;
    pub use sqlx::PgPool;

    /// The pool the server provides as context to every render and server function.
    pub fn pool() -> Result<PgPool, ServerFnError> {
        use_context::<PgPool>().ok_or_else(|| ServerFnError::new("server misconfigured"))
    }

    /// The browser gets a stable message; the cause goes to the server log.
    pub fn db_error(e: sqlx::Error) -> ServerFnError {
        tracing::error!(error = %e, "database error in a server function");
        ServerFnError::new("the database is unavailable; try again shortly")
    }
}
