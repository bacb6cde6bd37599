//! `replaysafe seed --deliveries N`: fills a database with realistic history
//! through the real code paths (signed requests through `receive`, the claim
//! batcher, workers forwarding to a local destination that sometimes fails),
//! then spreads it over past days so the charts and the page benchmark see a
//! week of history, and folds the rollups.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use futures_util::stream::{self, StreamExt};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::CliError;
use replaysafe_core::config::{Config, SourceConfig};
use replaysafe_core::db::{self, DbError};
use replaysafe_core::processing::retry::RetryPolicy;
use replaysafe_core::processing::worker::Workers;
use replaysafe_core::processing::{intake, Services};
use replaysafe_core::receiver::{Inbound, Receipt};

#[derive(Debug, clap::Args)]
pub struct SeedArgs {
    /// Deliveries to record (about 20% duplicates and 3% bad signatures)
    #[arg(long)]
    pub deliveries: u64,
    /// The source to seed [default: the first one `send` can sign for]
    #[arg(long)]
    pub source: Option<String>,
    /// Days of history the deliveries are spread over, ending now
    #[arg(long, default_value_t = 7)]
    pub days: u32,
    /// One JSON document of what was made at the end (progress goes to
    /// stderr)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("no source in the config can be seeded (need standard, stripe, github, shopify, slack or twilio{0})")]
    NoSource(String),
    #[error(transparent)]
    Send(#[from] super::send::SendError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("local destination: {0}")]
    Io(#[from] std::io::Error),
    #[error("forwarding: {0}")]
    Work(#[from] replaysafe_core::processing::worker::WorkError),
}

/// Requests in flight while seeding: enough to fill the claim batches.
const CONCURRENCY: usize = 64;

/// Keys the local destination has failed once.
type FailedOnce = Arc<Mutex<HashSet<String>>>;

/// What the local destination does, by the key's last digit: mostly
/// accepts, sometimes fails once (a retry), sometimes refuses (dead letter).
async fn destination(State(failed): State<FailedOnce>, headers: HeaderMap) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    match key.bytes().last() {
        Some(b'7') if key.len() % 3 == 0 => StatusCode::UNPROCESSABLE_ENTITY,
        Some(b'3')
            if failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.to_owned()) =>
        {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::OK,
    }
}

pub async fn run(config: &Config, pool: &PgPool, args: SeedArgs) -> Result<(), SeedError> {
    let source = config
        .sources
        .iter()
        .find(|s| match &args.source {
            Some(slug) => &s.slug == slug,
            // The first source replaysafe can sign samples for.
            None => s.scheme.sign_sample("probe", 0).is_ok(),
        })
        .ok_or_else(|| {
            SeedError::NoSource(
                args.source
                    .as_ref()
                    .map(|s| format!("; {s:?} is not configured"))
                    .unwrap_or_default(),
            )
        })?;

    // The destination: on loopback, in this process.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let destination_url = format!("http://{}/seed", listener.local_addr()?);
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let app = axum::Router::new()
                .route("/seed", post(destination))
                .with_state(FailedOnce::default());
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        }
    });
    let mut source: SourceConfig = source.clone();
    let mut destination = source.destination().cloned().unwrap_or_else(|| {
        replaysafe_core::config::Destination::default_to(destination_url.clone())
    });
    destination.url = destination_url;
    source.destinations = vec![destination];
    source.mode = replaysafe_core::config::Mode::Ack;
    let mut seeded_config = config.clone();
    seeded_config.sources = vec![source.clone()];
    let seeded_config = Arc::new(seeded_config);

    let first_id: i64 =
        sqlx::query_scalar!(r#"SELECT coalesce(max(id), 0) AS "max!" FROM deliveries"#)
            .fetch_one(pool)
            .await?;
    let started = Instant::now();
    let run_tag = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    // Retried at once: the history needs retries, not their waits.
    let policy = RetryPolicy {
        schedule: vec![Duration::ZERO],
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    let services = Services::with_policy(pool.clone(), seeded_config, Default::default(), policy);
    let workers = Workers::new(&services);
    let now = chrono::Utc::now().timestamp();
    // In rounds: receive a round, then forward it all, so that copies of an
    // event from an earlier round find it completed or dead, as late
    // provider retries do in production.
    let mut round_start = 0;
    while round_start < args.deliveries {
        let round_end = (round_start + ROUND).min(args.deliveries);
        stream::iter(round_start..round_end)
            .map(|n| receive_one(&services, &source, &run_tag, now, n))
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        drain(&workers).await?;
        round_start = round_end;
        progress(
            args.json,
            &format!("  {round_end} deliveries received and forwarded"),
        );
    }
    progress(
        args.json,
        &format!(
            "received and forwarded {} deliveries in {:.1} s",
            args.deliveries,
            started.elapsed().as_secs_f64()
        ),
    );
    stop.cancel();

    spread_over_days(pool, first_id, args.days).await?;
    sqlx::query!("DELETE FROM minute_stats")
        .execute(pool)
        .await?;
    sqlx::query!("UPDATE rollup_progress SET last_id = 0")
        .execute(pool)
        .await?;
    replaysafe_core::jobs::rollup::fold_all(pool).await?;
    if args.json {
        super::output::json(&serde_json::json!({
            "source": source.slug,
            "deliveries": args.deliveries,
            "days": args.days,
            "seconds": started.elapsed().as_secs_f64(),
        }));
    } else {
        println!(
            "spread over {} days and rollups rebuilt; {:.1} s in all",
            args.days,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// A line of progress: on stdout for a person, on stderr beside `--json`.
fn progress(json: bool, line: &str) {
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// Deliveries per round of receiving then forwarding.
const ROUND: u64 = 20_000;

/// One signed delivery through the receiver. One in 7 repeats the event just
/// sent (a quick provider retry, usually still in progress), one in 11 an
/// event from the previous round (completed or dead by then); one in 33 is
/// signed with a wrong secret.
async fn receive_one(
    services: &Services,
    source: &SourceConfig,
    run_tag: &str,
    now: i64,
    n: u64,
) -> Result<(), SeedError> {
    let event = match n {
        n if n % 7 == 6 => n - 1,
        n if n % 11 == 10 && n >= ROUND => n - ROUND,
        n => n,
    };
    let signed = super::send::sign_sample(source, &format!("seed_{run_tag}_{event}"), now)?;
    let mut headers = signed.headers;
    if n % 33 == 32 {
        for (name, value) in headers.iter_mut() {
            if name.contains("signature") || name.contains("hmac") {
                value.push('0');
            }
        }
    }
    let inbound = Inbound {
        query: None,
        headers,
        body: signed.body,
        remote_addr: Some("127.0.0.1".into()),
    };
    let receipt = Receipt {
        waive_timestamp: true,
        ..Receipt::now()
    };
    intake::receive(services, source, &inbound, receipt).await;
    Ok(())
}

/// Runs workers until no event is due.
async fn drain(workers: &Workers) -> Result<(), SeedError> {
    loop {
        let rounds = (0..8).map(|n| {
            let workers = workers.clone();
            async move { workers.run_once(&format!("seed-{n}")).await }
        });
        let processed: usize = futures_util::future::join_all(rounds)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .sum();
        if processed == 0 {
            return Ok(());
        }
    }
}

/// Moves the seeded rows back in time, oldest id furthest, so they cover the
/// last `days` days in order; events and attempts move with their deliveries.
async fn spread_over_days(pool: &PgPool, after_id: i64, days: u32) -> Result<(), sqlx::Error> {
    // The rows move into their days' partitions.
    db::history::ensure_from(pool, days as i32 + 1).await?;
    let mut tx = pool.begin().await?;
    // Statements on temporary tables made here: checked when they run.
    sqlx::query(
        "CREATE TEMP TABLE shift ON COMMIT DROP AS
         SELECT id, (max(id) OVER () - id)::float8 / greatest(max(id) OVER () - $1, 1)
                    * make_interval(days => $2) AS back
         FROM deliveries WHERE id > $1",
    )
    .bind(after_id)
    .bind(days as i32)
    .execute(&mut *tx)
    .await?;
    sqlx::query("ALTER TABLE shift ADD PRIMARY KEY (id)")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
"UPDATE deliveries d SET received_at = d.received_at - s.back FROM shift s WHERE s.id = d.id"
)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "CREATE TEMP TABLE event_shift ON COMMIT DROP AS
         SELECT e.id, s.back FROM events e JOIN shift s ON s.id = e.first_delivery_id",
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE events e SET first_seen_at = first_seen_at - s.back,
             last_seen_at = last_seen_at - s.back
         FROM event_shift s WHERE s.id = e.id",
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE dispatches p SET state_changed_at = state_changed_at - s.back,
             next_attempt_at = next_attempt_at - s.back, completed_at = completed_at - s.back
         FROM event_shift s WHERE s.id = p.event_id",
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE attempts a SET started_at = started_at - s.back, finished_at = finished_at - s.back
         FROM event_shift s WHERE s.id = a.event_id",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The `seed` command: its own pool, as large as `serve`'s, for batched claims.
pub async fn command(config: Config, args: SeedArgs) -> Result<(), CliError> {
    let database = super::locate_one_shot(&config).await?;
    // Seeding claims in batches like `serve` does: it needs as many connections.
    let pool = db::pool(&database.url, 16).await?;
    db::migrate(&pool).await?;
    db::sources::sync(&pool, &config)
        .await
        .map_err(DbError::from)?;
    run(&config, &pool, args).await?;
    pool.close().await;
    Ok(())
}
