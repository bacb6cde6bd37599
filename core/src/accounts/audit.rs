//! The audit log's one statement: every writer appends through `record`
//! (the database refuses any change to a row, `audit_log_append_only`).

use replaysafe_types::auth::Who;

/// One line of the audit log.
pub struct Entry<'a> {
    pub who: Who<'a>,
    pub action: &'a str,
    pub target: Option<&'a str>,
    pub outcome: &'a str,
    /// JSON; never secret material.
    pub detail: Option<serde_json::Value>,
    pub remote_addr: Option<&'a str>,
}

/// Appends to the audit log: the one statement every writer uses.
pub async fn record(
    executor: impl sqlx::PgExecutor<'_>,
    entry: Entry<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO audit_log (user_id, token_id, username, action, target, outcome, detail, remote_addr)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        entry.who.user_id,
        entry.who.token_id,
        entry.who.name,
        entry.action,
        entry.target,
        entry.outcome,
        entry.detail,
        entry.remote_addr
    )
    .execute(executor)
    .await?;
    Ok(())
}
