//! Attempts that any worker of this process finished are recorded
//! together: one statement, so one commit and one WAL sync, for all that
//! ended while the previous one ran. Each worker recording its own batch
//! made as many commits as claims did, and the claims' commits queued
//! behind them for the WAL (bench/README, "Handed over at the claim").

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use crate::db::own::OwnConnection;
use crate::events::{self, Done};

/// Most attempts one statement records.
const MAX_ROWS: usize = 1024;

struct Request {
    holder: String,
    done: Arc<[Done]>,
    moved: oneshot::Sender<Result<usize, RecordError>>,
}

/// Why attempts were not recorded.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct RecordError {
    /// The database is away or unable for now (`db::is_transient`): worth
    /// retrying as long as it takes.
    pub transient: bool,
    message: String,
}

impl RecordError {
    fn stopped() -> Self {
        Self {
            transient: false,
            message: "the recorder has stopped".to_owned(),
        }
    }
}

impl From<&sqlx::Error> for RecordError {
    fn from(e: &sqlx::Error) -> Self {
        Self {
            transient: crate::db::is_transient(e),
            message: e.to_string(),
        }
    }
}

#[derive(Clone)]
pub struct Recorder {
    requests: mpsc::UnboundedSender<Request>,
}

impl Recorder {
    /// Starts the recording task on the current runtime; it ends when the
    /// last handle is dropped.
    pub fn start(pool: PgPool) -> Self {
        let (requests, waiting) = mpsc::unbounded_channel();
        tokio::spawn(run(pool, waiting));
        Self { requests }
    }

    /// Records `done`, held by `holder`, with whatever else is waiting.
    /// Returns how many of its events moved (the rest had lost their lease).
    pub async fn record(&self, holder: &str, done: Arc<[Done]>) -> Result<usize, RecordError> {
        let (moved, answer) = oneshot::channel();
        let request = Request {
            holder: holder.to_owned(),
            done,
            moved,
        };
        self.requests
            .send(request)
            .map_err(|_| RecordError::stopped())?;
        answer.await.map_err(|_| RecordError::stopped())?
    }
}

async fn run(pool: PgPool, mut waiting: mpsc::UnboundedReceiver<Request>) {
    let mut db = OwnConnection::new(&pool);
    while let Some(first) = waiting.recv().await {
        let mut rows = first.done.len();
        let mut batch = vec![first];
        while rows < MAX_ROWS {
            match waiting.try_recv() {
                Ok(more) => {
                    rows += more.done.len();
                    batch.push(more);
                }
                Err(_) => break,
            }
        }
        let result = finish(&mut db, &batch).await;
        match result {
            Ok(moved) => answer(batch, &moved),
            // A statement the database refuses for what one request holds
            // (not for being away) would fail every batch it joins: each
            // request is tried alone, and only that one fails.
            Err(e) if batch.len() > 1 && !crate::db::is_transient(&e) => {
                for request in batch {
                    let alone = [request];
                    match finish(&mut db, &alone).await {
                        Ok(moved) => answer(alone, &moved),
                        Err(e) => {
                            let [request] = alone;
                            let _ = request.moved.send(Err((&e).into()));
                        }
                    }
                }
            }
            Err(e) => {
                let e = RecordError::from(&e);
                for request in batch {
                    let _ = request.moved.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Records every attempt of `batch` in one statement; the ids of the events
/// that moved.
async fn finish(
    db: &mut OwnConnection,
    batch: &[Request],
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    let all: Vec<(&str, &Done)> = batch
        .iter()
        .flat_map(|r| r.done.iter().map(move |d| (r.holder.as_str(), d)))
        .collect();
    let moved = match db.ready(false).await {
        Ok(conn) => events::finish_each(conn, &all).await,
        Err(e) => Err(e),
    };
    db.settle(moved.as_ref().err());
    moved
}

/// Tells each request of `batch` how many of its dispatches moved.
fn answer(batch: impl IntoIterator<Item = Request>, moved: &[(i64, String)]) {
    let moved: std::collections::HashSet<(i64, &str)> =
        moved.iter().map(|(e, d)| (*e, d.as_str())).collect();
    for request in batch {
        let n = request
            .done
            .iter()
            .filter(|d| moved.contains(&(d.leased.event_id, d.leased.destination.as_str())))
            .count();
        let _ = request.moved.send(Ok(n));
    }
}
