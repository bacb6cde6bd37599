//! The database: which server to use (configured or embedded), the pool,
//! migrations and the configured sources' rows.

use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use crate::config::{Config, Secret};
use crate::embedded_pg::{EmbeddedError, EmbeddedPostgres, DATABASE_NAME};

pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Waiting longer than this for a connection answers 503 instead, so a
/// provider retries rather than timing out (spec section 3: 503 within 5 s).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    #[error("database URL is not valid: {0}")]
    BadUrl(String),
    #[error("cannot reach PostgreSQL: {0}")]
    Connect(String),
    #[error("migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
}

/// The database replaysafe uses, and the embedded cluster if it started one
/// (kept alive by holding it; it stops when dropped).
pub struct Database {
    pub url: Secret,
    pub embedded: Option<EmbeddedPostgres>,
}

/// Chooses the configured server, or starts the embedded one.
pub async fn locate(config: &Config) -> Result<Database, DbError> {
    if let Some(url) = &config.database_url {
        return Ok(Database {
            url: url.clone(),
            embedded: None,
        });
    }
    let data_dir = config.data_dir.clone();
    let pg = tokio::task::spawn_blocking(move || EmbeddedPostgres::start(&data_dir))
        .await
        .map_err(|e| DbError::Connect(e.to_string()))??;
    tracing::info!(
        cluster = %pg.cluster_dir().display(),
        port = pg.port,
        reused_running = pg.reused_running,
        "embedded PostgreSQL is up"
    );
    ensure_database(pg.url()).await?;
    Ok(Database {
        url: pg.url().clone(),
        embedded: Some(pg),
    })
}

pub fn connect_options(url: &Secret) -> Result<PgConnectOptions, DbError> {
    url.expose()
        .parse::<PgConnectOptions>()
        .map(|o| o.log_statements(tracing::log::LevelFilter::Trace))
        .map_err(|e| DbError::BadUrl(e.to_string()))
}

/// A pool that connects on demand, so the server starts and reports
/// unreadiness while the database is away, and recovers when it returns.
pub fn pool(url: &Secret, max_connections: u32) -> Result<PgPool, DbError> {
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_lazy_with(connect_options(url)?))
}

/// Creates the embedded cluster's database on first start.
async fn ensure_database(url: &Secret) -> Result<(), DbError> {
    let target = connect_options(url)?;
    let admin = target.clone().database("postgres");
    let mut conn = PgConnection::connect_with(&admin)
        .await
        .map_err(|e| DbError::Connect(e.to_string()))?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(DATABASE_NAME)
            .fetch_one(&mut conn)
            .await?;
    if !exists {
        sqlx::query(&format!("CREATE DATABASE {DATABASE_NAME}"))
            .execute(&mut conn)
            .await?;
    }
    conn.close().await?;
    Ok(())
}

pub async fn migrate(pool: &PgPool) -> Result<(), DbError> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// True when every migration this binary knows is applied.
pub async fn is_migrated(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    if !has_table {
        return Ok(false);
    }
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .all(|m| applied.contains(&m.version)))
}

/// Makes the `sources` table match the config: settings follow the file,
/// runtime state (an operator's pause) is kept, removed sources stay for their
/// history but are marked as no longer configured.
pub async fn sync_sources(pool: &PgPool, config: &Config) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    for s in &config.sources {
        sqlx::query(
            "INSERT INTO sources (slug, provider, mode, destination, attempt_timeout_secs,
                                  config_paused, in_config, synced_at)
             VALUES ($1, $2, $3, $4, $5, $6, true, now())
             ON CONFLICT (slug) DO UPDATE SET
                provider = excluded.provider, mode = excluded.mode,
                destination = excluded.destination,
                attempt_timeout_secs = excluded.attempt_timeout_secs,
                config_paused = excluded.config_paused,
                in_config = true, synced_at = now()",
        )
        .bind(&s.slug)
        .bind(s.provider.name)
        .bind(s.mode.as_str())
        .bind(&s.destination)
        .bind(i32::try_from(s.attempt_timeout_secs).unwrap_or(i32::MAX))
        .bind(s.paused)
        .execute(&mut *tx)
        .await?;
    }
    let slugs: Vec<&str> = config.sources.iter().map(|s| s.slug.as_str()).collect();
    sqlx::query("UPDATE sources SET in_config = false WHERE in_config AND slug <> ALL($1)")
        .bind(&slugs)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}
