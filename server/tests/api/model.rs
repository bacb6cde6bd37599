//! A model test of the promise (issue 13): for many seeds, interleaved actors
//! drive the real transitions against a real PostgreSQL and a real
//! destination over HTTP, then everything is let settle and the invariant is
//! checked:
//!
//! - every event got exactly one successful forward per run: its first run
//!   plus one per successful force (`2xx seen = forces + 1` when it ended
//!   completed, `= forces` when it ended dead);
//! - every event ends completed or dead (none stuck), and no attempt is left
//!   open;
//! - a process never leases an event of a source it does not have.
//!
//! Actors: the provider (first deliveries and duplicates, ack and sync
//! sources), three workers (one a process without the slow source), a
//! worker that leases and dies, an operator re-delivering stored
//! deliveries, an admin forcing completed events, pause and resume, and
//! retention with zero-day windows. The destination answers 2xx, 4xx, 5xx,
//! 429, slowly within the timeout, or only after it.
//!
//! `MODEL_SEEDS=N` (default 6) seeds from `MODEL_SEED` (default 1); a
//! failing seed prints the command that replays it. A longer run:
//! `MODEL_SEEDS=100 cargo test -p replaysafe --test api model -- --nocapture`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use app::api::actions::ssr::Operations;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replaysafe::db::MIGRATOR;
use replaysafe::processing::retry::RetryPolicy;
use replaysafe::processing::worker::Workers;
use sqlx::PgPool;

use crate::helpers::{spawn_app, test_config, TestApp};

/// How long the actors run per seed.
const CHAOS: Duration = Duration::from_millis(4000);
/// The most a seed may take to settle once the actors stop.
const SETTLE: Duration = Duration::from_secs(30);
/// Distinct events per source per seed.
const KEYS: u32 = 6;
/// Leases outlive attempt timeouts by this much here (25 s in production).
const MARGIN: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Seen {
    /// 2xx answers the forwarder surely received (answered within its timeout).
    sure: u32,
    /// 2xx answers sent after the forwarder had given up (may be seen or not).
    late: u32,
    requests: u32,
}

/// The destination: answers by a hash of (seed, message, nth request), so a
/// seed replays the same answers; counts what it answered per event.
struct Behaviour {
    seed: u64,
    settle: AtomicBool,
    seen: Mutex<HashMap<String, Seen>>,
}

async fn start_destination(behaviour: Arc<Behaviour>) -> String {
    let app = axum::Router::new().route(
        "/{source}",
        axum::routing::post(
            move |axum::extract::Path(source): axum::extract::Path<String>,
                  headers: axum::http::HeaderMap| {
                let behaviour = behaviour.clone();
                async move {
                    let msg = headers
                        .get("webhook-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("none")
                        .to_owned();
                    let nth = {
                        let mut seen = behaviour.seen.lock().unwrap();
                        let entry = seen.entry(msg.clone()).or_default();
                        entry.requests += 1;
                        entry.requests
                    };
                    let timeout = if source.starts_with("slow") { 5.0 } else { 1.0 };
                    let roll = if behaviour.settle.load(Ordering::SeqCst) {
                        0
                    } else {
                        let mut h = StdRng::seed_from_u64(
                            behaviour.seed
                                ^ (nth as u64) << 32
                                ^ msg.bytes().fold(7u64, |a, b| a.wrapping_mul(31) ^ b as u64),
                        );
                        h.gen_range(0..100)
                    };
                    // The slow source often answers only after its timeout, so
                    // that its attempts hold a worker's batch back.
                    let roll = if source.starts_with("slow") && (45..75).contains(&roll) {
                        85
                    } else {
                        roll
                    };
                    let (status, delay, sure) = match roll {
                        0..=44 => (200, 0.0, true),
                        45..=54 => (200, timeout * 0.1, true),
                        55..=69 => (500, 0.0, false),
                        70..=74 => (429, 0.0, false),
                        75..=81 => (400, 0.0, false),
                        82..=89 => (200, timeout + 1.5, false),
                        _ => (503, timeout * 0.1, false),
                    };
                    if delay > 0.0 {
                        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
                    }
                    if status == 200 {
                        let mut seen = behaviour.seen.lock().unwrap();
                        let entry = seen.entry(msg).or_default();
                        if sure {
                            entry.sure += 1;
                        } else {
                            entry.late += 1;
                        }
                    }
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

struct World {
    seed: u64,
    app: TestApp,
    slugs: [String; 3],
    ops: Arc<replaysafe::web::operations::ServerOperations>,
    admin: app::auth::Caller,
    /// Successful forces per event id.
    forces: Mutex<HashMap<i64, u32>>,
    stop: AtomicBool,
}

fn config_text(seed: u64, destination: &str, with_slow: bool) -> String {
    let mut text = format!(
        r#"
[[source]]
slug = "quick{seed}"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}/quick{seed}"
attempt_timeout_secs = 1
max_attempts = 4

[[source]]
slug = "sync{seed}"
provider = "slack"
secrets = ["slack-secret"]
mode = "sync"
destination = "{destination}/sync{seed}"
attempt_timeout_secs = 1
max_attempts = 4
"#
    );
    if with_slow {
        text += &format!(
            r#"
[[source]]
slug = "slow{seed}"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}/slow{seed}"
attempt_timeout_secs = 5
max_attempts = 4
"#
        );
    }
    text
}

fn model_workers(app: &TestApp, config: Arc<replaysafe::config::Config>) -> Workers {
    let mut workers = Workers::new(&app.services);
    workers.config = config;
    workers.policy = Arc::new(RetryPolicy {
        schedule: vec![Duration::from_millis(50)],
        jitter: 0.0,
        min_retry_after: Duration::from_millis(50),
        max_retry_after: Duration::from_millis(50),
    });
    workers.lease_margin = MARGIN;
    // Sync events whose provider does not retry are adopted quickly here.
    workers.request_grace = Duration::from_secs(1);
    workers
}

impl World {
    async fn provider_sends(&self, rng: &mut StdRng) {
        let n = rng.gen_range(0..KEYS);
        match rng.gen_range(0..3) {
            0 | 1 => {
                let slug = if rng.gen_bool(0.5) {
                    &self.slugs[0]
                } else {
                    &self.slugs[2]
                };
                let id = format!("{slug}-{n}");
                let body = format!(r#"{{"delivery":"{id}"}}"#);
                self.app
                    .github_delivery(slug, &id, &body, b"gh-secret")
                    .await;
            }
            _ => self.sync_request(n).await,
        }
    }

    async fn sync_request(&self, n: u32) {
        let body = format!("payload={}-{n}", self.slugs[1]);
        self.app.slack_interaction(&self.slugs[1], &body).await;
    }

    async fn redeliver(&self) {
        let picked: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM deliveries WHERE source = ANY($1) AND body IS NOT NULL
             ORDER BY random() LIMIT 1",
        )
        .bind(&self.slugs[..])
        .fetch_optional(&self.app.pool)
        .await
        .unwrap();
        if let Some(id) = picked {
            let _ = self
                .ops
                .redeliver(id, self.admin.clone(), None, None, None)
                .await;
        }
    }

    async fn force(&self) {
        let picked: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM event_summaries WHERE source = ANY($1) AND state = 'completed'
             ORDER BY random() LIMIT 1",
        )
        .bind(&self.slugs[..])
        .fetch_optional(&self.app.pool)
        .await
        .unwrap();
        if let Some(event) = picked {
            if self
                .ops
                .force(event, "model".into(), self.admin.clone(), None)
                .await
                .is_ok()
            {
                *self.forces.lock().unwrap().entry(event).or_default() += 1;
            }
        }
    }

    async fn toggle_pause(&self, rng: &mut StdRng) {
        let slug = &self.slugs[rng.gen_range(0..3)];
        let paused = rng.gen_bool(0.5);
        replaysafe::db::sources::set_paused(
            &self.app.pool,
            slug,
            paused,
            app::auth::Who::named("model"),
        )
        .await
        .unwrap();
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::SeqCst)
    }
}

async fn actor_loop<F, Fut>(world: Arc<World>, actor: u64, pause_ms: (u64, u64), mut step: F)
where
    F: FnMut(Arc<World>, StdRng) -> Fut,
    Fut: std::future::Future<Output = StdRng>,
{
    let mut rng = StdRng::seed_from_u64(world.seed.wrapping_mul(1000) + actor);
    while world.running() {
        rng = step(world.clone(), rng).await;
        let ms = rng.gen_range(pause_ms.0..=pause_ms.1);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

async fn run_seed(pool: &PgPool, seed: u64) -> Result<String, String> {
    let behaviour = Arc::new(Behaviour {
        seed,
        settle: AtomicBool::new(false),
        seen: Default::default(),
    });
    let destination = start_destination(behaviour.clone()).await;
    let config = test_config(&config_text(seed, &destination, true), &[]);
    let app = spawn_app(pool.clone(), config).await;
    let slugs = [
        format!("quick{seed}"),
        format!("sync{seed}"),
        format!("slow{seed}"),
    ];
    let ops = Arc::new(replaysafe::web::operations::ServerOperations {
        services: app.services.clone(),
    });
    let admin_id: i64 = sqlx::query_scalar(
        "INSERT INTO users (username, password_hash, role) VALUES ($1, 'x', 'admin')
         ON CONFLICT (username) DO UPDATE SET role = 'admin' RETURNING id",
    )
    .bind("model-admin")
    .fetch_one(pool)
    .await
    .unwrap();
    let world = Arc::new(World {
        seed,
        slugs,
        ops,
        admin: app::auth::Caller {
            id: admin_id,
            username: "model-admin".into(),
            role: app::auth::Role::Admin,
            via: app::auth::Via::Session,
        },
        forces: Default::default(),
        stop: AtomicBool::new(false),
        app,
    });
    let full = model_workers(&world.app, world.app.config.clone());
    // A process whose config lacks the slow source.
    let partial_config = Arc::new(test_config(&config_text(seed, &destination, false), &[]));
    let partial = model_workers(&world.app, partial_config);
    let partial_id = format!("partial-{seed}");

    let mut actors = tokio::task::JoinSet::new();
    actors.spawn(actor_loop(
        world.clone(),
        1,
        (5, 40),
        |w, mut rng| async move {
            w.provider_sends(&mut rng).await;
            rng
        },
    ));
    actors.spawn(actor_loop(
        world.clone(),
        2,
        (5, 60),
        |w, mut rng| async move {
            w.provider_sends(&mut rng).await;
            rng
        },
    ));
    for (n, workers, id) in [
        // Each as if in its own process: their leases race.
        (3, full.apart(), format!("worker-a-{seed}")),
        (4, full.apart(), format!("worker-b-{seed}")),
        (5, partial.clone(), partial_id.clone()),
    ] {
        // Polling slower than deliveries arrive, so that batches hold several events.
        actors.spawn(actor_loop(world.clone(), n, (100, 400), move |_, rng| {
            let (workers, id) = (workers.clone(), id.clone());
            async move {
                workers.run_once(&id).await.unwrap();
                rng
            }
        }));
    }
    let crasher = full.apart();
    actors.spawn(actor_loop(world.clone(), 6, (100, 400), move |w, rng| {
        let crasher = crasher.clone();
        async move {
            // Leases and dies before forwarding: its lease must lapse.
            let id = format!("crashed-{}-{}", w.seed, rand::random::<u32>());
            replaysafe::events::lease(&w.app.pool, &id, 2, &crasher.runnable())
                .await
                .unwrap();
            rng
        }
    }));
    actors.spawn(actor_loop(
        world.clone(),
        7,
        (60, 250),
        |w, rng| async move {
            w.redeliver().await;
            rng
        },
    ));
    actors.spawn(actor_loop(
        world.clone(),
        8,
        (100, 400),
        |w, rng| async move {
            w.force().await;
            rng
        },
    ));
    actors.spawn(actor_loop(
        world.clone(),
        9,
        (150, 500),
        |w, mut rng| async move {
            w.toggle_pause(&mut rng).await;
            rng
        },
    ));
    actors.spawn(actor_loop(
        world.clone(),
        10,
        (600, 1200),
        |w, rng| async move {
            replaysafe::jobs::retention::prune(&w.app.pool, 0, 0, 0)
                .await
                .unwrap();
            rng
        },
    ));
    tokio::time::sleep(CHAOS).await;
    world.stop.store(true, Ordering::SeqCst);
    while let Some(done) = actors.join_next().await {
        done.map_err(|e| format!("an actor failed: {e}"))?;
    }

    // Settle: sources resumed, the destination answers 2xx, workers run, and
    // the provider retries what its own sync requests still hold.
    behaviour.settle.store(true, Ordering::SeqCst);
    for slug in &world.slugs {
        replaysafe::db::sources::set_paused(pool, slug, false, app::auth::Who::named("model"))
            .await
            .unwrap();
    }
    let started = Instant::now();
    loop {
        // Two workers, so that a lapsed lease would be taken over here too.
        let (settler_a, settler_b) = (format!("settler-a-{seed}"), format!("settler-b-{seed}"));
        let other = full.apart();
        let (a, b) = tokio::join!(full.run_once(&settler_a), other.run_once(&settler_b));
        a.unwrap();
        b.unwrap();
        let waiting: Vec<(String, String)> = sqlx::query_as(
            "SELECT state, forwarder FROM dispatches WHERE source = ANY($1)
               AND state NOT IN ('completed', 'dead')",
        )
        .bind(&world.slugs[..])
        .fetch_all(pool)
        .await
        .unwrap();
        if waiting.is_empty() {
            break;
        }
        if waiting.iter().any(|(_, f)| f == "request") {
            for n in 0..KEYS {
                world.sync_request(n).await;
            }
        }
        if started.elapsed() > SETTLE {
            return Err(format!("stuck after settling: {waiting:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The invariant.
    let events: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, state FROM event_summaries WHERE source = ANY($1)")
            .bind(&world.slugs[..])
            .fetch_all(pool)
            .await
            .unwrap();
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM attempts a JOIN events e ON e.id = a.event_id
         WHERE e.source = ANY($1) AND a.finished_at IS NULL",
    )
    .bind(&world.slugs[..])
    .fetch_one(pool)
    .await
    .unwrap();
    if open > 0 {
        return Err(format!("{open} attempts left open"));
    }
    let foreign: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM attempts a JOIN events e ON e.id = a.event_id
         WHERE e.source = $1 AND a.worker = $2",
    )
    .bind(&world.slugs[2])
    .bind(&partial_id)
    .fetch_one(pool)
    .await
    .unwrap();
    if foreign > 0 {
        return Err(format!(
            "a process without source {} leased {foreign} of its events",
            world.slugs[2]
        ));
    }
    let seen = behaviour.seen.lock().unwrap();
    let forces = world.forces.lock().unwrap();
    let present: HashMap<i64, &str> = events.iter().map(|(id, s)| (*id, s.as_str())).collect();
    let mut summary = HashMap::<&str, u32>::new();
    for (msg, s) in seen.iter() {
        let Some(id) = msg
            .strip_prefix("msg_")
            .and_then(|id| id.parse::<i64>().ok())
        else {
            return Err(format!("a forward without our webhook-id: {msg}"));
        };
        let f = forces.get(&id).copied().unwrap_or(0);
        let ok = match present.get(&id) {
            Some(&"completed") => s.sure == f + 1,
            Some(_) => s.sure == f,
            // Pruned once settled: it ended completed or dead.
            None => s.sure == f + 1 || s.sure == f,
        };
        if !ok {
            return Err(format!(
                "event {id} ({:?}): {} sure 2xx, {} late, {} requests, {f} forces",
                present.get(&id),
                s.sure,
                s.late,
                s.requests
            ));
        }
    }
    for (_, state) in &events {
        *summary.entry(state.as_str()).or_default() += 1;
    }
    let forwarded: u32 = seen.values().map(|s| s.requests).sum();
    let forced: u32 = forces.values().sum();
    Ok(format!(
        "{} events {summary:?}, {forwarded} forwards, {forced} forces, settled in {:.1} s",
        events.len(),
        started.elapsed().as_secs_f64()
    ))
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn nothing_runs_twice_and_nothing_sticks(pool: PgPool) {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let first = env("MODEL_SEED", 1);
    let count = env("MODEL_SEEDS", 6);
    for seed in first..first + count {
        match run_seed(&pool, seed).await {
            Ok(summary) => println!("model seed {seed}: {summary}"),
            Err(failure) => panic!(
                "model seed {seed} failed: {failure}\nreplay: MODEL_SEED={seed} MODEL_SEEDS=1 \
                 cargo test -p replaysafe --test api model -- --nocapture"
            ),
        }
    }
}
