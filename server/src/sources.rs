//! Runtime state of sources that operators change: pause and resume.
//! Stored in the database, where it wins over the config file.

use sqlx::PgPool;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("no source {0:?} is configured")]
    Unknown(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Pauses or resumes a source; `actor` is recorded in the audit log.
/// A paused source still receives, verifies and claims, and forwards nothing.
pub async fn set_paused(
    pool: &PgPool,
    slug: &str,
    paused: bool,
    actor: &str,
    user_id: Option<i64>,
) -> Result<(), SourceError> {
    let mut tx = pool.begin().await?;
    let updated = sqlx::query(
        "UPDATE sources SET paused_override = $2, paused_changed_at = now(), paused_changed_by = $3
         WHERE slug = $1 AND in_config",
    )
    .bind(slug)
    .bind(paused)
    .bind(user_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if updated == 0 {
        return Err(SourceError::Unknown(slug.to_owned()));
    }
    sqlx::query(
        "INSERT INTO audit_log (user_id, username, action, target, outcome)
         VALUES ($1, $2, $3, $4, 'succeeded')",
    )
    .bind(user_id)
    .bind(actor)
    .bind(if paused {
        "source.pause"
    } else {
        "source.resume"
    })
    .bind(slug)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}
