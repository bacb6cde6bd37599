//! A connection of its own, outside the pool, for a stage that runs one
//! statement after another: the receiver's claim committers, the workers'
//! lease and the recorder. A pool pings the server on every acquire and
//! every release, and a transaction that sets generic plans adds a `BEGIN`
//! and a `COMMIT`: three round trips or more per statement where this takes
//! one (bench/README, "The allocator, and one round trip a statement").

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::time::Instant;

/// Idle longer than this, the connection is pinged before its next
/// statement: under load it never is, and a quiet stage can afford the
/// round trip.
const IDLE_PING: Duration = Duration::from_millis(100);

/// Its cached generic plans are dropped this often (`DISCARD PLANS`; the
/// prepared statements stay) and made anew from the tables as they are
/// then. A generic plan is made at a statement's first run: on a new
/// database, from empty tables, and a plan for an empty table may scan the
/// whole of it once it holds a backlog (bench/README, "A lease planned for
/// an empty queue").
pub const REPLAN: Duration = Duration::from_secs(5);

pub struct OwnConnection {
    open: Option<PgConnection>,
    /// Whose connect options it opens with: the pool's, which follow the
    /// primary after a failover (`db::failover`).
    pool: PgPool,
    /// The pool's options the open connection was made with: when the pool
    /// has moved since, the connection is to the old primary.
    opened_with: Option<Arc<PgConnectOptions>>,
    /// When it last answered.
    used: Instant,
    /// When its plans were last dropped (or it opened).
    planned: Instant,
}

impl OwnConnection {
    /// Opens nothing until the first statement.
    pub fn new(pool: &PgPool) -> Self {
        Self {
            open: None,
            pool: pool.clone(),
            opened_with: None,
            used: Instant::now(),
            planned: Instant::now(),
        }
    }

    /// The open connection, pinged first if it sat idle or `suspect` (a
    /// sibling's connection broke), else (re)opened: to the host the pool
    /// follows, its statements on their generic plans
    /// (each runs often, with arrays as its parameters: a plan of its own
    /// per call costs more than the call).
    pub async fn ready(&mut self, suspect: bool) -> Result<&mut PgConnection, sqlx::Error> {
        let options = self.pool.connect_options();
        if !self
            .opened_with
            .as_ref()
            .is_some_and(|with| Arc::ptr_eq(with, &options))
        {
            self.open = None;
        }
        if let Some(conn) = self.open.as_mut() {
            if suspect || self.used.elapsed() > IDLE_PING {
                let alive = tokio::time::timeout(super::ACQUIRE_TIMEOUT, conn.ping()).await;
                if !matches!(alive, Ok(Ok(()))) {
                    self.open = None;
                }
            }
        }
        if let Some(conn) = self.open.as_mut() {
            if self.planned.elapsed() > REPLAN {
                let discarded = tokio::time::timeout(
                    super::ACQUIRE_TIMEOUT,
                    sqlx::query("DISCARD PLANS").execute(&mut *conn),
                )
                .await;
                if !matches!(discarded, Ok(Ok(_))) {
                    self.open = None;
                }
                self.planned = Instant::now();
            }
        }
        if self.open.is_none() {
            let generic = (*options)
                .clone()
                .options([("plan_cache_mode", "force_generic_plan")]);
            let opened =
                tokio::time::timeout(super::ACQUIRE_TIMEOUT, PgConnection::connect_with(&generic))
                    .await
                    .map_err(|_| sqlx::Error::PoolTimedOut)??;
            // A standby takes connections too (the pool's host just became
            // one): it refuses the first write itself (25006), and `settle`
            // closes the connection for the next statement to reconnect.
            self.open = Some(opened);
            self.opened_with = Some(options);
            self.planned = Instant::now();
        }
        Ok(self.open.as_mut().expect("opened above"))
    }

    /// After a statement: a statement the server refused leaves the
    /// connection usable; anything else (a broken socket, a timeout, a
    /// read-only server, 25006: a standby, or an old primary) may not have,
    /// and it is closed, for the next statement to reconnect to the primary
    /// the pool follows now. Returns whether it closed one.
    pub fn settle(&mut self, failure: Option<&sqlx::Error>) -> bool {
        match failure {
            None => {}
            Some(sqlx::Error::Database(d)) if d.code().as_deref() != Some("25006") => {}
            Some(_) => return self.close(),
        }
        self.used = Instant::now();
        false
    }

    /// Closes it (the next statement reconnects); whether one was open.
    pub fn close(&mut self) -> bool {
        self.open.take().is_some()
    }
}
