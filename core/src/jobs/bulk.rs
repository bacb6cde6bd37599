//! The bulk re-delivery runner: every dashboard process runs one. It takes
//! a queued job (or one whose runner died), runs its steps as the caller
//! who started it, records each step's outcomes, and stops when the job is
//! done or cancelled. The job's states belong to `crate::jobs::queue`.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::error::OpError;
use crate::jobs::queue::{self as jobs, Next, Owned};
use crate::ops::actions::redeliver_each;
use crate::ops::Cx;
use crate::processing::Services;

/// How often an idle runner looks for a job.
const POLL: Duration = Duration::from_millis(500);
/// How often a runner renews its claim on the job it runs.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// A job whose heartbeat is older than this has lost its runner.
const STALE: Duration = Duration::from_secs(30);
/// After the database fails a step: wait, then try the step again.
const RETRY: Duration = Duration::from_secs(1);

pub async fn run(services: Services, shutdown: CancellationToken) {
    // A job acts on what it reads: the primary.
    let services = Services {
        reads: crate::db::replica::Reads::primary_only(services.pool.clone()),
        ..services
    };
    let pool = services.pool.clone();
    let owner = format!("{}-{:016x}", std::process::id(), rand::random::<u64>());
    // The listener, and so this, starts before the migrations have run.
    while !matches!(crate::db::is_migrated(&pool).await, Ok(true)) {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
    loop {
        match jobs::take(&pool, &owner, STALE).await {
            Ok(Some(job)) => run_job(&services, &owner, job, &shutdown).await,
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "could not look for bulk jobs; retrying"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

async fn run_job(services: &Services, owner: &str, job: Owned, shutdown: &CancellationToken) {
    let (id, pool) = (job.id, &services.pool);
    tracing::info!(job = id, "bulk re-delivery job started");
    let heartbeat = tokio::spawn({
        let (pool, owner) = (pool.clone(), owner.to_owned());
        async move {
            loop {
                tokio::time::sleep(HEARTBEAT).await;
                if let Ok(false) = jobs::heartbeat(&pool, id, &owner).await {
                    return;
                }
            }
        }
    });
    loop {
        if shutdown.is_cancelled() {
            if let Err(e) = jobs::release(pool, id, owner).await {
                tracing::warn!(job = id, error = %e, "could not hand the bulk job back; another runner takes it over once its heartbeat is stale");
            }
            break;
        }
        let caller = match jobs::caller(pool, &job).await {
            Ok(Ok(caller)) => caller,
            Ok(Err(why)) => {
                finish_failed(pool, id, owner, &why).await;
                break;
            }
            Err(e) => {
                tracing::warn!(job = id, error = %e, "could not read a bulk job's caller; retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let cx = Cx {
            services: services.clone(),
            caller: Some(caller),
            remote_addr: job.remote_addr.clone(),
        };
        // Cancelled (or taken over) since the last step: None, stop here.
        let step = match jobs::begin_step(pool, id, owner).await {
            Ok(Some(step)) => step,
            Ok(None) => break,
            Err(OpError::Unavailable(why)) => {
                tracing::warn!(job = id, "could not begin a bulk step ({why}); retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(refused) => {
                finish_failed(pool, id, owner, refused.message()).await;
                break;
            }
        };
        let results = match redeliver_each(&cx, id, &step.chosen, step.destination.as_deref()).await
        {
            Ok(results) => results,
            // The step's events stay pending: the next try takes them again.
            Err(OpError::Unavailable(why)) => {
                tracing::warn!(job = id, "a bulk step failed ({why}); trying it again");
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(refused) => {
                finish_failed(pool, id, owner, refused.message()).await;
                break;
            }
        };
        // The re-deliveries happened: their answers must be recorded. (A
        // runner stopped here leaves them pending to the next owner.)
        let next = loop {
            match jobs::record(pool, id, owner, &results, step.next_after).await {
                Ok(next) => break next,
                Err(_) if shutdown.is_cancelled() => break Next::Stop,
                Err(e) => {
                    tracing::warn!(job = id, error = %e, "could not record a bulk step; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        };
        if next == Next::Stop {
            break;
        }
    }
    heartbeat.abort();
    tracing::info!(job = id, "bulk re-delivery job stopped");
}

async fn finish_failed(pool: &PgPool, id: i64, owner: &str, why: &str) {
    tracing::warn!(job = id, "bulk re-delivery job failed: {why}");
    if let Err(e) = jobs::fail(pool, id, owner, why).await {
        tracing::warn!(job = id, error = %e, "could not mark the bulk job failed");
    }
}
