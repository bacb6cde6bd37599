//! Attempts that any worker of this process finished are recorded
//! together: one statement, so one commit and one WAL sync, for all that
//! ended while the previous one ran. Each worker recording its own batch
//! made as many commits as claims did, and the claims' commits queued
//! behind them for the WAL (bench/README, "Handed over at the claim").

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use crate::events::{self, Done};

/// Most attempts one statement records.
const MAX_ROWS: usize = 1024;

struct Request {
    holder: String,
    done: Arc<[Done]>,
    moved: oneshot::Sender<Result<usize, String>>,
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
    pub async fn record(&self, holder: &str, done: Arc<[Done]>) -> Result<usize, String> {
        let (moved, answer) = oneshot::channel();
        let request = Request {
            holder: holder.to_owned(),
            done,
            moved,
        };
        self.requests
            .send(request)
            .map_err(|_| "the recorder has stopped".to_owned())?;
        answer
            .await
            .map_err(|_| "the recorder has stopped".to_owned())?
    }
}

async fn run(pool: PgPool, mut waiting: mpsc::UnboundedReceiver<Request>) {
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
        let all: Vec<(&str, &Done)> = batch
            .iter()
            .flat_map(|r| r.done.iter().map(move |d| (r.holder.as_str(), d)))
            .collect();
        let result = events::finish_each(&pool, &all).await;
        drop(all);
        match result {
            Ok(moved) => {
                let moved: std::collections::HashSet<i64> = moved.into_iter().collect();
                for request in batch {
                    let n = request
                        .done
                        .iter()
                        .filter(|d| moved.contains(&d.leased.event_id))
                        .count();
                    let _ = request.moved.send(Ok(n));
                }
            }
            Err(e) => {
                let e = e.to_string();
                for request in batch {
                    let _ = request.moved.send(Err(e.clone()));
                }
            }
        }
    }
}
