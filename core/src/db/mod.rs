//! The database: which server to use (configured or embedded), the pool,
//! migrations and the configured sources' rows.

pub mod audit;
pub mod embedded;
pub mod failover;
pub mod history;
pub mod own;
pub mod replica;
pub mod sources;
pub mod users;

use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;
use tower_sessions_sqlx_store::PostgresStore;

use crate::config::{Config, Secret};
use embedded::{EmbeddedError, EmbeddedPostgres, DATABASE_NAME};

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
    parse_options(url.expose())
}

/// Every connection runs with JIT off: our statements are short, and the
/// partitioned tables' plans cost past PostgreSQL's JIT threshold, which
/// then compiled each lease anew (2.6 s of JIT for a 3 ms statement,
/// bench/README).
fn parse_options(url: &str) -> Result<PgConnectOptions, DbError> {
    url.parse::<PgConnectOptions>()
        .map(|o| {
            o.log_statements(tracing::log::LevelFilter::Trace)
                .options([("jit", "off")])
        })
        .map_err(|e| DbError::BadUrl(e.to_string()))
}

/// A pool that connects on demand, so the server starts and reports
/// unreadiness while the database is away, and recovers when it returns.
/// A multi-host URL (pg_auto_failover's) gets a pool that follows the
/// writable primary (`failover`).
pub async fn pool(url: &Secret, max_connections: u32) -> Result<PgPool, DbError> {
    if let Some(hosts) = failover::split_hosts(url.expose()).map_err(DbError::BadUrl)? {
        let hosts = hosts
            .iter()
            .map(|u| parse_options(u))
            .collect::<Result<Vec<_>, _>>()?;
        return failover::pool(hosts, max_connections).await;
    }
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
    let exists: bool = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "exists!""#,
        DATABASE_NAME
    )
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

pub use crate::error::is_transient;

/// A transaction whose statements run on their generic plans. The workers'
/// statements join partitioned history: planned anew for each call
/// (PostgreSQL keeps custom plans when a generic one's estimate is higher),
/// their planning cost three times their execution (bench/README, "Planned
/// anew for each call"). The busiest run on an `own::OwnConnection`.
pub async fn begin_generic(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    // One round trip: under load each costs the lease a wake-up of its backend.
    pool.begin_with("BEGIN; SET LOCAL plan_cache_mode = force_generic_plan")
        .await
}

/// True when every migration this binary knows is applied.
pub async fn is_migrated(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let has_table: bool =
        sqlx::query_scalar!(r#"SELECT to_regclass('_sqlx_migrations') IS NOT NULL AS "present!""#)
            .fetch_one(pool)
            .await?;
    if !has_table {
        return Ok(false);
    }
    let applied: Vec<i64> =
        sqlx::query_scalar!("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .all(|m| applied.contains(&m.version)))
}

/// Applies migrations and syncs the configured sources, retrying while the
/// database is away; `/readyz` reports 503 until this has succeeded.
pub async fn prepare(pool: PgPool, config: Arc<Config>, shutdown: CancellationToken) {
    let mut delay = Duration::from_millis(250);
    loop {
        let result = async {
            migrate(&pool).await?;
            // The session store's own table (tower_sessions.session).
            PostgresStore::new(pool.clone()).migrate().await?;
            sources::sync(&pool, &config).await?;
            // A database left alone past the partitions made ahead (or
            // restored from an old backup) gets today's before any claim.
            history::ensure(&pool).await?;
            Ok::<_, DbError>(())
        }
        .await;
        match result {
            Ok(()) => {
                tracing::info!("database migrated; sources synced");
                return;
            }
            Err(e) => tracing::warn!(error = %e, retry_in = ?delay, "database not ready"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}
