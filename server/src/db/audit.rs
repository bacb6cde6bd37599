//! The server's audit log writes (the command line's user and source
//! changes), through one statement. The dashboard's own entries are written
//! by the app crate, which this crate builds on and so cannot be called from.

/// One line of the audit log.
pub struct Entry<'a> {
    pub user_id: Option<i64>,
    /// Who acted: a dashboard user, or `cli:$USER`.
    pub username: &'a str,
    pub action: &'a str,
    pub target: Option<&'a str>,
    pub outcome: &'a str,
    /// JSON; never secret material.
    pub detail: Option<serde_json::Value>,
}

pub async fn record(
    executor: impl sqlx::PgExecutor<'_>,
    entry: Entry<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO audit_log (user_id, username, action, target, outcome, detail)
         VALUES ($1, $2, $3, $4, $5, $6)",
        entry.user_id,
        entry.username,
        entry.action,
        entry.target,
        entry.outcome,
        entry.detail
    )
    .execute(executor)
    .await?;
    Ok(())
}

/// The actor the command line records: `cli:` and the invoking user.
pub fn cli_actor() -> String {
    format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    )
}
