//! The session sweeper: dashboard sessions live in PostgreSQL
//! (tower-sessions); expired ones are deleted so the table holds live ones.

use tower_sessions_sqlx_store::PostgresStore;

/// Removes expired sessions hourly, so the table holds live sessions only.
pub async fn run(pool: sqlx::PgPool, shutdown: tokio_util::sync::CancellationToken) {
    use tower_sessions::ExpiredDeletion;
    let store = PostgresStore::new(pool);
    loop {
        if let Err(e) = store.delete_expired().await {
            tracing::warn!(error = %e, "could not delete expired sessions; retrying later");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(3600)) => {}
        }
    }
}
