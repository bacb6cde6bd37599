//! The read replica (`read_database_url`): the dashboard's and the API's
//! read-only queries go to it while it answers (`Reads`),
//! the primary otherwise; actions always go to the primary. A watcher asks
//! it every `WATCH_EVERY` how far behind the primary it is.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::DbError;
use crate::config::Secret;

/// Where the dashboard's and the API's read-only queries go: the read
/// replica (`read_database_url`) while it answers, else the primary.
/// Actions always go to the primary (`Services::pool`). The server's watcher
/// (`db::replica`) says whether the replica answers and how far behind
/// it is.
#[derive(Clone)]
pub struct Reads {
    primary: PgPool,
    replica: Option<Arc<Replica>>,
}

struct Replica {
    pool: PgPool,
    answers: std::sync::atomic::AtomicBool,
    /// Milliseconds behind the primary, as last measured.
    lag_ms: std::sync::atomic::AtomicU64,
}

/// A lag the pages show: reads this far behind may miss what just happened.
pub const LAG_SHOWN: std::time::Duration = std::time::Duration::from_secs(5);

/// A replica further behind than this is not read from: the primary is.
pub const LAG_MAX: std::time::Duration = std::time::Duration::from_secs(30);

impl Reads {
    pub fn primary_only(primary: PgPool) -> Self {
        Self {
            primary,
            replica: None,
        }
    }

    /// The same replica, with `primary` to fall back on.
    pub fn on_primary(&self, primary: PgPool) -> Self {
        Self {
            primary,
            replica: self.replica.clone(),
        }
    }

    /// Reads from `replica` once the watcher finds it answering.
    pub fn with_replica(primary: PgPool, replica: PgPool) -> Self {
        Self {
            primary,
            replica: Some(Arc::new(Replica {
                pool: replica,
                answers: Default::default(),
                lag_ms: Default::default(),
            })),
        }
    }

    /// The replica, while it answers and is less than `LAG_MAX` behind.
    fn usable(&self) -> Option<&Replica> {
        use std::sync::atomic::Ordering::Relaxed;
        self.replica.as_deref().filter(|r| {
            r.answers.load(Relaxed) && r.lag_ms.load(Relaxed) < LAG_MAX.as_millis() as u64
        })
    }

    /// The pool for a read-only query now.
    pub fn pool(&self) -> PgPool {
        self.usable()
            .map_or_else(|| self.primary.clone(), |r| r.pool.clone())
    }

    /// The replica's pool, for the watcher.
    pub fn replica(&self) -> Option<&PgPool> {
        self.replica.as_ref().map(|r| &r.pool)
    }

    /// What the watcher found: None when the replica did not answer.
    pub fn set_lag(&self, lag: Option<std::time::Duration>) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(r) = &self.replica {
            r.answers.store(lag.is_some(), Relaxed);
            if let Some(lag) = lag {
                r.lag_ms.store(lag.as_millis() as u64, Relaxed);
            }
        }
    }

    /// How far behind the primary the reads are: None when they come
    /// from the primary.
    pub fn lag(&self) -> Option<std::time::Duration> {
        self.usable().map(|r| {
            std::time::Duration::from_millis(r.lag_ms.load(std::sync::atomic::Ordering::Relaxed))
        })
    }

    /// The lag a page shows, in seconds: only past `LAG_SHOWN`.
    pub fn shown_lag_secs(&self) -> Option<f64> {
        self.lag()
            .filter(|lag| *lag >= LAG_SHOWN)
            .map(|lag| lag.as_secs_f64())
    }
}

pub const WATCH_EVERY: Duration = Duration::from_secs(2);

/// The replica's pool, connecting on demand (serve starts while it is
/// away). One host: a standby is read as it is, not followed.
pub fn pool(url: &Secret) -> Result<PgPool, DbError> {
    if super::failover::split_hosts(url.expose())
        .map_err(DbError::BadUrl)?
        .is_some()
    {
        return Err(DbError::BadUrl(
            "read_database_url names one host (a standby); several are not followed".into(),
        ));
    }
    // A page's read that a standby holds up (a hung host, a recovery
    // conflict) ends, as the pages' own requests do.
    Ok(PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(WATCH_EVERY)
        .connect_lazy_with(super::connect_options(url)?.options([("statement_timeout", "30s")])))
}

/// How far behind the primary the server behind `pool` is: nothing when it
/// is not a standby, or streams from the primary and has replayed all it
/// received; else the time since the last transaction it replayed
/// committed (a standby cut off from its primary has replayed all it
/// received, and falls behind all the same).
pub async fn lag(pool: &PgPool) -> Result<Duration, sqlx::Error> {
    let secs: f64 = sqlx::query_scalar!(
        r#"SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0
                       WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn()
                        AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')
                       THEN 0
                       ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)
                  END::float8 AS "secs!""#
    )
    .fetch_one(pool)
    .await?;
    Ok(Duration::from_secs_f64(secs.max(0.0)))
}

/// Measures the replica's lag every `WATCH_EVERY` until shutdown: reads go
/// to it while it answers, to the primary while it does not.
pub async fn watch(reads: Reads, shutdown: CancellationToken) {
    let Some(replica) = reads.replica().cloned() else {
        return;
    };
    let mut answered = None;
    loop {
        let measured = tokio::time::timeout(WATCH_EVERY, lag(&replica)).await;
        let lag = match measured {
            Ok(Ok(lag)) => Some(lag),
            Ok(Err(e)) => {
                if answered != Some(false) {
                    tracing::warn!(error = %e, "the read replica does not answer: reads go to the primary");
                }
                None
            }
            Err(_) => {
                if answered != Some(false) {
                    tracing::warn!(
                        "the read replica does not answer in time: reads go to the primary"
                    );
                }
                None
            }
        };
        if lag.is_some() && answered == Some(false) {
            tracing::info!("the read replica answers again: reads go to it");
        }
        answered = Some(lag.is_some());
        reads.set_lag(lag);
        metrics::gauge!("replaysafe_read_replica_lag_seconds")
            .set(lag.map_or(f64::NAN, |l| l.as_secs_f64()));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}
