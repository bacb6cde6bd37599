//! Forwarding benchmark (issues: processing, fan-out): attempts per second
//! to destinations that answer at once, with one destination per event and
//! with three (`DESTINATIONS`), and end-to-end latency from receipt to each
//! destination's answer at a fixed 1,000 deliveries/s. Not a timed test:
//! run it on a quiet machine with `bench/forward`, which starts a PostgreSQL
//! with stock durability and sets DATABASE_URL to its admin database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use replaysafe::web::{Application, Role};
use replaysafe_core::config::{self, Config};
use replaysafe_core::processing::worker::Workers;
use replaysafe_core::processing::Services;
use sqlx::{Connection, PgPool};
use tokio_util::sync::CancellationToken;

/// When each (Idempotency-Key, destination) first reached the application.
type Arrivals = Arc<Mutex<HashMap<(String, String), Instant>>>;

#[tokio::main]
async fn main() {
    let admin =
        std::env::var("DATABASE_URL").expect("DATABASE_URL: an admin URL of a PostgreSQL server");
    let events: i64 = env_or("EVENTS", 20_000);
    let list = |name: &str, default: &str| -> Vec<usize> {
        std::env::var(name)
            .unwrap_or_else(|_| default.into())
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect()
    };
    let worker_counts = list("WORKERS", "8 32");
    let fan_outs = list("DESTINATIONS", "1 3");
    let rate: u64 = env_or("RATE", 1000);
    let seconds: u64 = env_or("SECONDS", 20);

    let url = fresh_database(&admin, "replaysafe_forward_bench").await;
    let pool = replaysafe_core::db::pool(&config::Secret::new(url), 64)
        .await
        .unwrap();
    replaysafe_core::db::migrate(&pool).await.unwrap();
    let arrivals: Arrivals = Default::default();
    let destination = start_destination(arrivals.clone()).await;

    let mut rows = Vec::new();
    for &fan_out in &fan_outs {
        let config = Arc::new(bench_config(&destination, fan_out));
        replaysafe_core::db::sources::sync(&pool, &config)
            .await
            .unwrap();
        println!(
            "{fan_out} destination(s) per event, each answering at once: {events} queued events"
        );
        let mut best = 0.0f64;
        for &workers in &worker_counts {
            reset(&pool).await;
            arrivals.lock().unwrap().clear();
            queue_events(&pool, events, fan_out).await;
            let attempts = events * fan_out as i64;
            let shutdown = CancellationToken::new();
            let started = Instant::now();
            let mut set = Workers::new(&Services::new(
                pool.clone(),
                config.clone(),
                Default::default(),
            ))
            .spawn(workers, shutdown.clone());
            while (arrivals.lock().unwrap().len() as i64) < attempts {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            loop {
                let done: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM dispatches WHERE state = 'completed'")
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                if done == attempts {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let elapsed = started.elapsed().as_secs_f64();
            shutdown.cancel();
            while set.join_next().await.is_some() {}
            let per_sec = attempts as f64 / elapsed;
            best = best.max(per_sec);
            println!(
                "  workers={workers:<3} {per_sec:>7.0} attempts/s, {:>7.0} events/s  ({attempts} attempts in {elapsed:.2} s)",
                events as f64 / elapsed
            );
        }
        let latency = end_to_end(&pool, &config, &arrivals, rate, seconds, fan_out).await;
        rows.push((fan_out, best, latency));
    }
    println!();
    println!("| destinations per event | attempts/s (best of WORKERS) | e2e p50 ms | e2e p99 ms | at events/s | forwarded |");
    println!("|---|---|---|---|---|---|");
    for (fan_out, best, (p50, p99, forwarded, expected)) in rows {
        println!(
            "| {fan_out} | {best:.0} | {p50:.1} | {p99:.1} | {rate} | {forwarded} of {expected} |"
        );
    }
}

/// Deliveries posted at `rate` a second for `seconds` through the receiver
/// (the default `serve`: 8 workers, claims handed to them), each timed from
/// its post to each destination's answer. Returns p50, p99 (ms), and the
/// (key, destination) arrivals seen of those expected.
async fn end_to_end(
    pool: &PgPool,
    config: &Arc<Config>,
    arrivals: &Arrivals,
    rate: u64,
    seconds: u64,
    fan_out: usize,
) -> (f64, f64, usize, usize) {
    println!("  end-to-end latency at {rate} deliveries/s for {seconds} s (receipt to each destination's answer)");
    reset(pool).await;
    arrivals.lock().unwrap().clear();
    let shutdown = CancellationToken::new();
    let wake = Arc::new(replaysafe_core::processing::wake::Wake::for_config(config));
    let services = Services::new(pool.clone(), config.clone(), wake);
    let app = Application::bind(services.clone(), Role::Full)
        .await
        .unwrap();
    let hook = format!("http://{}/hooks/bench", app.addr);
    tokio::spawn(app.run(shutdown.clone()));
    let mut workers = Workers::new(&services).spawn(8, shutdown.clone());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .unwrap();
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
    let source = config.sources[0].clone();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sends = tokio::task::JoinSet::new();
    for i in 0..rate * seconds {
        tick.tick().await;
        let id = format!("msg_{i}");
        let signed = source
            .scheme
            .sign_sample(&id, chrono::Utc::now().timestamp())
            .unwrap();
        let (client, hook, sent) = (client.clone(), hook.clone(), sent.clone());
        sends.spawn(async move {
            sent.lock()
                .unwrap()
                .insert(format!("bench:{id}"), Instant::now());
            let mut request = client.post(&hook).body(signed.body);
            for (name, value) in signed.headers {
                request = request.header(name, value);
            }
            request
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        });
    }
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    while let Some(status) = sends.join_next().await {
        *statuses.entry(status.unwrap()).or_default() += 1;
    }
    let expected = (rate * seconds) as usize * fan_out;
    let deadline = Instant::now() + Duration::from_secs(30);
    while arrivals.lock().unwrap().len() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    while workers.join_next().await.is_some() {}
    let sent = sent.lock().unwrap();
    let arrived = arrivals.lock().unwrap();
    let mut latencies: Vec<f64> = arrived
        .iter()
        .filter_map(|((key, _), got)| {
            sent.get(key)
                .map(|at| got.duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "  sent {} (answers {statuses:?}), answered by a destination {} of {expected}: p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        sent.len(),
        latencies.len(),
        pct(0.50),
        pct(0.95),
        pct(0.99),
        latencies.last().copied().unwrap_or_default()
    );
    (pct(0.50), pct(0.99), latencies.len(), expected)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn fresh_database(admin: &str, name: &str) -> String {
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("connecting to DATABASE_URL");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let (server, _) = admin.rsplit_once('/').unwrap();
    format!("{server}/{name}")
}

/// The application: answers 200 at once at `/hook/{destination}` and
/// notes when each key first arrived there.
async fn start_destination(arrivals: Arrivals) -> String {
    let app = axum::Router::new().route(
        "/hook/{destination}",
        axum::routing::post(
            move |axum::extract::Path(destination): axum::extract::Path<String>,
                  headers: axum::http::HeaderMap| {
                let arrivals = arrivals.clone();
                async move {
                    if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok())
                    {
                        arrivals
                            .lock()
                            .unwrap()
                            .entry((key.to_owned(), destination))
                            .or_insert_with(Instant::now);
                    }
                    "ok"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Source `bench` (Standard Webhooks) with `fan_out` destinations, `d0`...
fn bench_config(destination: &str, fan_out: usize) -> Config {
    let mut text = String::from(
        "listen = \"127.0.0.1:0\"\n[[source]]\nslug = \"bench\"\nprovider = \"standard\"\n\
         secrets = [\"whsec_KYsXT+ZdE/1k3re89N9/1tLY8zKnVGqjHtXsQmkXQtA=\"]\n",
    );
    for d in 0..fan_out {
        text.push_str(&format!(
            "[[source.destination]]\nname = \"d{d}\"\nurl = \"{destination}/d{d}\"\n\
             secret = \"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"\n"
        ));
    }
    config::parse_and_validate(None, &text, &|_| None).unwrap()
}

async fn reset(pool: &PgPool) {
    sqlx::query("TRUNCATE attempts, deliveries, events, dispatches")
        .execute(pool)
        .await
        .unwrap();
}

/// Queued events as the receiver leaves them, a dispatch per destination:
/// a delivery with a ~650-byte body each.
async fn queue_events(pool: &PgPool, n: i64, fan_out: usize) {
    let destinations: Vec<String> = (0..fan_out).map(|d| format!("d{d}")).collect();
    sqlx::query(
        "WITH d AS (
             INSERT INTO deliveries (source, idem_key, outcome, http_status, verified, headers, body,
                                     body_size, content_type)
             SELECT 'bench', 'evt_' || g, 'claimed', 200, true,
                    '[[\"webhook-id\",\"x\"]]'::jsonb, convert_to(repeat('x', 650), 'UTF8'), 650,
                    'application/json'
             FROM generate_series(1, $1) g
             RETURNING id, idem_key
         ),
         e AS (
             INSERT INTO events (source, idem_key, first_delivery_id)
             SELECT 'bench', idem_key, id FROM d
             RETURNING id
         )
         INSERT INTO dispatches (event_id, destination, source, state)
         SELECT e.id, name, 'bench', 'queued' FROM e, unnest($2::text[]) AS name",
    )
    .bind(n)
    .bind(&destinations)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE events").execute(pool).await.unwrap();
    sqlx::query("ANALYZE dispatches")
        .execute(pool)
        .await
        .unwrap();
}
