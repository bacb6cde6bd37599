//! A model test of the promise (issue 13): for many seeds, interleaved actors
//! drive the real transitions against a real PostgreSQL and a real
//! destination over HTTP, then everything is let settle and the invariant is
//! checked:
//!
//! - every dispatch (an event at one destination) got exactly one
//!   successful forward per run: its first run plus one per successful force
//!   (`2xx seen = forces + 1` when it ended completed, `= forces` when it
//!   ended dead), and none for a destination whose filter does not take it;
//! - every dispatch ends completed, dead or filtered (none stuck), and no
//!   attempt is left open;
//! - an ordered destination never has two requests of one ordering key in
//!   flight at once (among those answered within the timeout, which the
//!   forwarder waits for);
//! - a process never leases an event of a source it does not have.
//!
//! Actors: the provider (first deliveries and duplicates, ack and sync
//! sources, and a fan-out source with a plain, a rate-limited and filtering,
//! and an ordered destination), three workers (one a process without the
//! slow source), each also pacing the gated destinations, a worker that
//! leases and dies, an operator re-delivering stored deliveries (to one
//! destination or all), an admin forcing completed dispatches (one or all of
//! an event's), a reconciler recovering events from the provider's list
//! (the same bodies, through `accept_recovered`, racing the deliveries),
//! pause and resume, and retention with zero-day windows. The
//! destination answers 2xx, 4xx, 5xx, 429, slowly within the timeout, or only
//! after it.
//!
//! `MODEL_SEEDS=N` (default 6) seeds from `MODEL_SEED` (default 1); a
//! failing seed prints the command that replays it. A longer run:
//! `MODEL_SEEDS=100 cargo test -p replaysafe --test api model -- --nocapture`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replaysafe_core::db::MIGRATOR;
use replaysafe_core::ops::redeliver as server_ops;
use replaysafe_core::processing::retry::RetryPolicy;
use replaysafe_core::processing::worker::Workers;
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

/// The destination: answers by a hash of (seed, message, destination, nth
/// request), so a seed replays the same answers; counts what it answered
/// per (message, destination).
struct Behaviour {
    seed: u64,
    settle: AtomicBool,
    seen: Mutex<HashMap<(String, String), Seen>>,
    /// The ordered destination's requests in flight that answer within the
    /// timeout, per ordering key.
    ordered_in_flight: Mutex<HashMap<String, u32>>,
    /// Requests to the ordered destination that arrived while one of the
    /// same key was in flight.
    overlaps: Mutex<Vec<String>>,
}

/// The ordered destination's name in the fan-out source.
const ORDERED: &str = "ordered";

async fn start_destination(behaviour: Arc<Behaviour>) -> String {
    let app = axum::Router::new().route(
        "/{*path}",
        axum::routing::post(
            move |axum::extract::Path(path): axum::extract::Path<String>,
                  headers: axum::http::HeaderMap,
                  body: axum::body::Bytes| {
                let behaviour = behaviour.clone();
                async move {
                    let (source, destination) = match path.split_once('/') {
                        Some((source, destination)) => (source.to_owned(), destination.to_owned()),
                        None => (path.clone(), "default".to_owned()),
                    };
                    let msg = headers
                        .get("webhook-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("none")
                        .to_owned();
                    let seen_key = (msg.clone(), destination.clone());
                    let nth = {
                        let mut seen = behaviour.seen.lock().unwrap();
                        let entry = seen.entry(seen_key.clone()).or_default();
                        entry.requests += 1;
                        entry.requests
                    };
                    let timeout = if source.starts_with("slow") { 5.0 } else { 1.0 };
                    let roll = if behaviour.settle.load(Ordering::SeqCst) {
                        0
                    } else {
                        let hash = msg
                            .bytes()
                            .chain(destination.bytes())
                            .fold(7u64, |a, b| a.wrapping_mul(31) ^ b as u64);
                        let mut h =
                            StdRng::seed_from_u64(behaviour.seed ^ (nth as u64) << 32 ^ hash);
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
                    let in_time = delay <= timeout;
                    // The forwarder waits for an answer within its timeout:
                    // no other event of the key may start meanwhile.
                    let ordering_key = (destination == ORDERED).then(|| {
                        serde_json::from_slice::<serde_json::Value>(&body)
                            .ok()
                            .and_then(|v| v["key"].as_str().map(str::to_owned))
                            .unwrap_or_default()
                    });
                    if let Some(key) = &ordering_key {
                        let mut in_flight = behaviour.ordered_in_flight.lock().unwrap();
                        let running = in_flight.entry(key.clone()).or_default();
                        if *running > 0 {
                            behaviour
                                .overlaps
                                .lock()
                                .unwrap()
                                .push(format!("{msg} with key {key:?}"));
                        }
                        if in_time {
                            *running += 1;
                        }
                    }
                    if delay > 0.0 {
                        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
                    }
                    if let (Some(key), true) = (&ordering_key, in_time) {
                        *behaviour
                            .ordered_in_flight
                            .lock()
                            .unwrap()
                            .get_mut(key)
                            .unwrap() -= 1;
                    }
                    if status == 200 {
                        let mut seen = behaviour.seen.lock().unwrap();
                        let entry = seen.entry(seen_key).or_default();
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
    /// quick, sync, slow, fan.
    slugs: [String; 4],
    admin: replaysafe_types::auth::Caller,
    /// Successful forces per (event id, destination).
    forces: Mutex<HashMap<(i64, String), u32>>,
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

[[source]]
slug = "fan{seed}"
provider = "github"
secrets = ["gh-secret"]

[[source.destination]]
name = "plain"
url = "{destination}/fan{seed}/plain"
timeout_secs = 1
max_attempts = 4

[[source.destination]]
name = "limited"
url = "{destination}/fan{seed}/limited"
timeout_secs = 1
max_attempts = 4
rate_per_sec = 40
max_in_flight = 2
filter = {{ body = {{ "/kind" = "a" }} }}

[[source.destination]]
name = "{ORDERED}"
url = "{destination}/fan{seed}/{ORDERED}"
timeout_secs = 1
max_attempts = 4
ordering = "per_key"
ordering_key = "/key"
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

fn model_workers(app: &TestApp, config: Arc<replaysafe_core::config::Config>) -> Workers {
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
                let slug = &self.slugs[[0, 2, 3][rng.gen_range(0..3)]];
                let id = format!("{slug}-{n}");
                // Two ordering keys; a third of the events filtered out by
                // the fan-out source's limited destination.
                let kind = if n % 3 == 0 { "b" } else { "a" };
                let body = format!(
                    r#"{{"delivery":"{id}","key":"k{}","kind":"{kind}"}}"#,
                    n % 2
                );
                self.app
                    .github_delivery(slug, &id, &body, b"gh-secret")
                    .await;
            }
            _ => self.sync_request(n).await,
        }
    }

    /// Reconciliation recovers an event from the provider's list: the same
    /// body a delivery of it carries, claimed through `accept_recovered`
    /// while the provider's deliveries and retries of it race.
    async fn reconciler_recovers(&self, rng: &mut StdRng) {
        let n = rng.gen_range(0..KEYS);
        let slug = &self.slugs[[0, 3][rng.gen_range(0..2)]];
        let id = format!("{slug}-{n}");
        let kind = if n % 3 == 0 { "b" } else { "a" };
        let body = format!(
            r#"{{"delivery":"{id}","key":"k{}","kind":"{kind}"}}"#,
            n % 2
        );
        let source = self.app.config.source(slug).unwrap();
        let inbound = replaysafe_core::receiver::Inbound {
            query: None,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-github-event".into(), "push".into()),
                ("x-github-delivery".into(), id),
            ],
            body: body.into_bytes(),
            remote_addr: None,
        };
        let recovered = replaysafe_core::receiver::claim::Recovered {
            run_id: 0,
            from: "model".into(),
        };
        replaysafe_core::receiver::accept_recovered(&self.app.pool, source, &inbound, recovered)
            .await
            .unwrap();
    }

    async fn sync_request(&self, n: u32) {
        let body = format!("payload={}-{n}", self.slugs[1]);
        self.app.slack_interaction(&self.slugs[1], &body).await;
    }

    /// A stored delivery, to all its event's destinations or (sometimes, for
    /// the fan-out source) one.
    async fn redeliver(&self, rng: &mut StdRng) {
        let picked: Option<(i64, String)> = sqlx::query_as(
            "SELECT id, source FROM deliveries WHERE source = ANY($1) AND body IS NOT NULL
             ORDER BY random() LIMIT 1",
        )
        .bind(&self.slugs[..])
        .fetch_optional(&self.app.pool)
        .await
        .unwrap();
        if let Some((id, source)) = picked {
            let destination = (source == self.slugs[3] && rng.gen_bool(0.5))
                .then(|| ["plain", "limited", ORDERED][rng.gen_range(0..3)].to_owned());
            let _ = server_ops::redeliver(
                &self.app.services,
                id,
                self.admin.clone(),
                None,
                None,
                destination,
            )
            .await;
        }
    }

    /// A completed dispatch, forced alone or with its event's others.
    async fn force(&self, rng: &mut StdRng) {
        let picked: Option<(i64, String)> = sqlx::query_as(
            "SELECT event_id, destination FROM dispatches
             WHERE source = ANY($1) AND state = 'completed'
             ORDER BY random() LIMIT 1",
        )
        .bind(&self.slugs[..])
        .fetch_optional(&self.app.pool)
        .await
        .unwrap();
        let Some((event, destination)) = picked else {
            return;
        };
        let alone = rng.gen_bool(0.5);
        let forced = server_ops::force(
            &self.app.services,
            event,
            "model".into(),
            self.admin.clone(),
            alone.then(|| destination.clone()),
        )
        .await;
        if let Ok(queued) = forced {
            // Only this actor forces: the dispatch picked is still completed
            // (or retention forgot the event, and the force found nothing).
            if alone {
                assert_eq!(
                    queued,
                    std::slice::from_ref(&destination),
                    "a force of one destination"
                );
            }
            assert!(
                queued.contains(&destination),
                "{queued:?} lacks {destination}"
            );
            let mut forces = self.forces.lock().unwrap();
            for queued in queued {
                *forces.entry((event, queued)).or_default() += 1;
            }
        }
    }

    async fn toggle_pause(&self, rng: &mut StdRng) {
        let slug = &self.slugs[rng.gen_range(0..self.slugs.len())];
        let paused = rng.gen_bool(0.5);
        replaysafe_core::db::sources::set_paused(
            &self.app.pool,
            slug,
            paused,
            replaysafe_types::auth::Who::named("model"),
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
        ordered_in_flight: Default::default(),
        overlaps: Default::default(),
    });
    let destination = start_destination(behaviour.clone()).await;
    let config = test_config(&config_text(seed, &destination, true), &[]);
    let app = spawn_app(pool.clone(), config).await;
    let slugs = [
        format!("quick{seed}"),
        format!("sync{seed}"),
        format!("slow{seed}"),
        format!("fan{seed}"),
    ];
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
        admin: replaysafe_types::auth::Caller {
            id: admin_id,
            username: "model-admin".into(),
            role: replaysafe_types::auth::Role::Admin,
            via: replaysafe_types::auth::Via::Session,
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
                workers.pace_once(&id).await.unwrap();
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
            let mut conn = w.app.pool.acquire().await.unwrap();
            replaysafe_core::events::lease(&mut conn, &id, 2, &crasher.runnable())
                .await
                .unwrap();
            rng
        }
    }));
    actors.spawn(actor_loop(
        world.clone(),
        7,
        (60, 250),
        |w, mut rng| async move {
            w.redeliver(&mut rng).await;
            rng
        },
    ));
    actors.spawn(actor_loop(
        world.clone(),
        8,
        (100, 400),
        |w, mut rng| async move {
            w.force(&mut rng).await;
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
            replaysafe_core::jobs::retention::prune(&w.app.pool, 0, 0, 0)
                .await
                .unwrap();
            rng
        },
    ));
    actors.spawn(actor_loop(
        world.clone(),
        11,
        (50, 300),
        |w, mut rng| async move {
            w.reconciler_recovers(&mut rng).await;
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
        replaysafe_core::db::sources::set_paused(
            pool,
            slug,
            false,
            replaysafe_types::auth::Who::named("model"),
        )
        .await
        .unwrap();
    }
    let started = Instant::now();
    loop {
        // Two workers, so that a lapsed lease would be taken over here too.
        let (settler_a, settler_b) = (format!("settler-a-{seed}"), format!("settler-b-{seed}"));
        let other = full.apart();
        let (a, b, c, d) = tokio::join!(
            full.run_once(&settler_a),
            other.run_once(&settler_b),
            full.pace_once(&settler_a),
            other.pace_once(&settler_b)
        );
        for ran in [a, b, c, d] {
            ran.unwrap();
        }
        let waiting: Vec<(String, String)> = sqlx::query_as(
            "SELECT state, forwarder FROM dispatches WHERE source = ANY($1)
               AND state NOT IN ('completed', 'dead', 'filtered')",
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
    let overlaps = behaviour.overlaps.lock().unwrap().clone();
    if !overlaps.is_empty() {
        return Err(format!(
            "the ordered destination had two of a key in flight: {overlaps:?}"
        ));
    }
    let dispatches: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT event_id, destination, state FROM dispatches WHERE source = ANY($1)",
    )
    .bind(&world.slugs[..])
    .fetch_all(pool)
    .await
    .unwrap();
    let seen = behaviour.seen.lock().unwrap();
    let forces = world.forces.lock().unwrap();
    let mut checked = std::collections::HashSet::new();
    for (event, destination, state) in &dispatches {
        let key = (format!("msg_{event}"), destination.clone());
        checked.insert(key.clone());
        let s = seen.get(&key);
        let (sure, requests) = s.map_or((0, 0), |s| (s.sure, s.requests));
        let f = forces
            .get(&(*event, destination.clone()))
            .copied()
            .unwrap_or(0);
        let ok = match state.as_str() {
            "completed" => sure == f + 1,
            "filtered" => requests == 0,
            _ => sure == f,
        };
        if !ok {
            return Err(format!(
                "event {event} at {destination} ({state}): {sure} sure 2xx, {} late, \
                 {requests} requests, {f} forces",
                s.map_or(0, |s| s.late)
            ));
        }
    }
    for ((msg, destination), s) in seen.iter() {
        if checked.contains(&(msg.clone(), destination.clone())) {
            continue;
        }
        let Some(id) = msg
            .strip_prefix("msg_")
            .and_then(|id| id.parse::<i64>().ok())
        else {
            return Err(format!("a forward without our webhook-id: {msg}"));
        };
        // Pruned once settled: it ended completed or dead.
        let f = forces.get(&(id, destination.clone())).copied().unwrap_or(0);
        if s.sure != f + 1 && s.sure != f {
            return Err(format!(
                "pruned event {id} at {destination}: {} sure 2xx, {} late, {} requests, {f} forces",
                s.sure, s.late, s.requests
            ));
        }
    }
    let mut summary = HashMap::<&str, u32>::new();
    for (_, state) in &events {
        *summary.entry(state.as_str()).or_default() += 1;
    }
    let mut by_state = HashMap::<&str, u32>::new();
    for (_, _, state) in &dispatches {
        *by_state.entry(state.as_str()).or_default() += 1;
    }
    let forwarded: u32 = seen.values().map(|s| s.requests).sum();
    let forced: u32 = forces.values().sum();
    Ok(format!(
        "{} events {summary:?}, {} dispatches {by_state:?}, {forwarded} forwards, \
         {forced} forces, settled in {:.1} s",
        events.len(),
        dispatches.len(),
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
