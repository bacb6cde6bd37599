//! Forwarding benchmark (issue: processing): events forwarded per second to a
//! destination that answers at once, and end-to-end latency from receipt to
//! the destination's answer at a fixed 500 deliveries/s. Not a timed test:
//! run it on a quiet machine with `bench/forward`, which starts a PostgreSQL
//! with stock durability and sets DATABASE_URL to its admin database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use replaysafe::config::{self, Config};
use replaysafe::processing::worker::Workers;
use replaysafe::processing::Services;
use replaysafe::web::{Application, Role};
use sqlx::{Connection, PgPool};
use tokio_util::sync::CancellationToken;

type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

#[tokio::main]
async fn main() {
    let admin =
        std::env::var("DATABASE_URL").expect("DATABASE_URL: an admin URL of a PostgreSQL server");
    let events: i64 = env_or("EVENTS", 20_000);
    let worker_counts: Vec<usize> = std::env::var("WORKERS")
        .unwrap_or_else(|_| "8 16 32".into())
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    let rate: u64 = env_or("RATE", 500);
    let seconds: u64 = env_or("SECONDS", 20);

    let url = fresh_database(&admin, "replaysafe_forward_bench").await;
    let pool = replaysafe::db::pool(&config::Secret::new(url), 64)
        .await
        .unwrap();
    replaysafe::db::migrate(&pool).await.unwrap();
    let arrivals: Arrivals = Default::default();
    let destination = start_destination(arrivals.clone()).await;
    let config = Arc::new(bench_config(&destination));
    replaysafe::db::sources::sync(&pool, &config).await.unwrap();

    println!("forwarding throughput: {events} queued events, destination answers at once");
    for &workers in &worker_counts {
        reset(&pool).await;
        queue_events(&pool, events).await;
        let shutdown = CancellationToken::new();
        let started = Instant::now();
        let mut set = Workers::new(&Services::new(
            pool.clone(),
            config.clone(),
            Default::default(),
        ))
        .spawn(workers, shutdown.clone());
        loop {
            let done: i64 =
                sqlx::query_scalar("SELECT count(*) FROM events WHERE state = 'completed'")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            if done == events {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed().as_secs_f64();
        shutdown.cancel();
        while set.join_next().await.is_some() {}
        let forwards = arrivals.lock().unwrap().len();
        arrivals.lock().unwrap().clear();
        println!(
            "  workers={workers:<3} {:>7.0} events/s  ({events} in {elapsed:.2} s; destination saw {forwards} distinct keys)",
            events as f64 / elapsed
        );
    }

    println!("end-to-end latency at {rate} deliveries/s for {seconds} s (receipt to the destination's answer)");
    reset(&pool).await;
    let shutdown = CancellationToken::new();
    let wake = Arc::new(replaysafe::processing::wake::Wake::for_config(&config));
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
    let deadline = Instant::now() + Duration::from_secs(30);
    while arrivals.lock().unwrap().len() < (rate * seconds) as usize && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    while workers.join_next().await.is_some() {}
    let sent = sent.lock().unwrap();
    let arrived = arrivals.lock().unwrap();
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(key, at)| {
            arrived
                .get(key)
                .map(|got| got.duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "  sent {} (answers {statuses:?}), forwarded {}: p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        sent.len(),
        latencies.len(),
        pct(0.50),
        pct(0.95),
        pct(0.99),
        latencies.last().copied().unwrap_or_default()
    );
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

/// The application: answers 200 at once and notes when each key first arrived.
async fn start_destination(arrivals: Arrivals) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let arrivals = arrivals.clone();
            async move {
                if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) {
                    arrivals
                        .lock()
                        .unwrap()
                        .entry(key.to_owned())
                        .or_insert_with(Instant::now);
                }
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn bench_config(destination: &str) -> Config {
    let text = format!(
        "listen = \"127.0.0.1:0\"\n[[source]]\nslug = \"bench\"\nprovider = \"standard\"\n\
         secrets = [\"whsec_KYsXT+ZdE/1k3re89N9/1tLY8zKnVGqjHtXsQmkXQtA=\"]\n\
         destination = \"{destination}\"\ndestination_secret = \"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"\n"
    );
    config::parse_and_validate(None, &text, &|_| None).unwrap()
}

async fn reset(pool: &PgPool) {
    sqlx::query("TRUNCATE attempts, deliveries, events")
        .execute(pool)
        .await
        .unwrap();
}

/// Queued events (the column's default state) as the receiver leaves them:
/// a delivery with a ~650-byte body each.
async fn queue_events(pool: &PgPool, n: i64) {
    sqlx::query(
        "WITH d AS (
             INSERT INTO deliveries (source, idem_key, outcome, http_status, verified, headers, body,
                                     body_size, content_type)
             SELECT 'bench', 'evt_' || g, 'claimed', 200, true,
                    '[[\"webhook-id\",\"x\"]]'::jsonb, convert_to(repeat('x', 650), 'UTF8'), 650,
                    'application/json'
             FROM generate_series(1, $1) g
             RETURNING id, idem_key
         )
         INSERT INTO events (source, idem_key, first_delivery_id)
         SELECT 'bench', idem_key, id FROM d",
    )
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE events").execute(pool).await.unwrap();
}
