//! Bulk re-delivery as a job (issue 16): over the API against the real
//! server and its runner, and a model of the job's life for many seeds,
//! with runners that stall, die between a step's re-deliveries and its
//! record, and take over from each other, and an operator who cancels.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replaysafe_core::db::MIGRATOR;
use replaysafe_core::jobs::queue::{self as jobs, Next, Owned};
use replaysafe_core::ops::Cx;
use replaysafe_types::actions::DeadFilter;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::helpers::{gh_config, spawn_app, Destination, Scripted, TestApp};
use crate::rest::{call, token};

/// Dead events per test: three steps of 20, the last short.
const EVENTS: usize = 41;

/// EVENTS dead events on source gh (max_attempts = 1, the destination
/// answers 400 until `refusals` run out).
async fn dead_events(app: &TestApp) {
    for i in 0..EVENTS {
        let key = format!("job-{i}");
        let status = app
            .github_delivery("gh", &key, &format!(r#"{{"id":"{key}"}}"#), b"gh-secret")
            .await;
        assert!((200..300).contains(&status), "{status}");
    }
    app.drain().await;
    assert_eq!(dead(&app.pool).await, EVENTS as i64);
}

async fn dead(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM event_summaries WHERE state = 'dead'")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn wait_finished(app: &TestApp, token: &str, id: i64) -> Value {
    let started = Instant::now();
    loop {
        let job = call(app, "get", &format!("/jobs/{id}"), Some(token), None).await;
        assert_eq!(job.status, 200, "{}", job.body);
        if ["done", "cancelled", "failed"].contains(&job.body["state"].as_str().unwrap()) {
            return job.body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "job {id} never finished: {}",
            job.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_bulk_job_runs_on_the_server_and_records_every_events_outcome(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400); EVENTS]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    dead_events(&app).await;
    let operator = token(&app, "night-shift", "operator", None).await;
    let viewer = token(&app, "watcher", "viewer", None).await;

    let started = call(
        &app,
        "post",
        "/dead-letters/redeliver",
        Some(&operator),
        Some(json!({"source": "gh", "since": "2000-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(started.status, 202, "{}", started.body);
    let id = started.body["id"].as_i64().unwrap();
    assert_eq!(
        started.headers["location"].to_str().unwrap(),
        format!("/api/v1/jobs/{id}")
    );
    assert_eq!(started.body["total"], EVENTS as i64);
    assert_eq!(started.body["started_by"], "night-shift");

    // Anyone may follow it; it runs without anyone asking.
    let job = wait_finished(&app, &viewer, id).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["done"], EVENTS as i64);
    assert_eq!(job["requeued"], EVENTS as i64);
    assert_eq!(dead(&pool).await, 0);

    // Its outcomes, page by page from `after`, one per event.
    let mut outcomes: Vec<Value> = Vec::new();
    let mut after = 0;
    loop {
        let page = call(
            &app,
            "get",
            &format!("/jobs/{id}/results?after={after}"),
            Some(&viewer),
            None,
        )
        .await;
        assert_eq!(page.status, 200, "{}", page.body);
        let results = page.body["results"].as_array().unwrap().clone();
        if results.is_empty() {
            assert!(page.body["next_after"].is_null());
            break;
        }
        after = page.body["next_after"].as_i64().unwrap();
        outcomes.extend(results);
    }
    assert_eq!(outcomes.len(), EVENTS);
    assert!(
        outcomes.iter().all(|r| r["requeued"] == true),
        "{outcomes:?}"
    );
    let mut keys: Vec<&str> = outcomes
        .iter()
        .map(|r| r["idem_key"].as_str().unwrap())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), EVENTS, "one outcome per event");

    // Each event was forwarded once more, and only once.
    app.drain().await;
    assert_eq!(destination.count(), 2 * EVENTS);
    let completed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM event_summaries WHERE state = 'completed'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(completed, EVENTS as i64);

    // Audit-logged under the token's name: the start, and each step.
    let audit = call(&app, "get", "/audit", Some(&viewer), None).await;
    let by_token: Vec<&Value> = audit.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["username"] == "night-shift" && r["by_token"] == true)
        .collect();
    let actions: Vec<&str> = by_token
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions
            .iter()
            .filter(|a| **a == "redeliver.bulk.start")
            .count(),
        1,
        "{actions:?}"
    );
    assert_eq!(
        actions.iter().filter(|a| **a == "redeliver.bulk").count(),
        EVENTS.div_ceil(20),
        "{actions:?}"
    );

    // Nothing is dead now: the next job is done at once; a finished job
    // cannot be cancelled; a viewer starts none.
    let empty = call(
        &app,
        "post",
        "/dead-letters/redeliver",
        Some(&operator),
        Some(json!({"source": "gh"})),
    )
    .await;
    assert_eq!(
        (empty.status, &empty.body["state"], &empty.body["total"]),
        (202, &json!("done"), &json!(0))
    );
    let late = call(
        &app,
        "delete",
        &format!("/jobs/{id}"),
        Some(&operator),
        None,
    )
    .await;
    assert_eq!((late.status, &late.body["code"]), (409, &json!("conflict")));
    let refused = call(
        &app,
        "post",
        "/dead-letters/redeliver",
        Some(&viewer),
        Some(json!({})),
    )
    .await;
    assert_eq!(refused.status, 403);
    let listed = call(&app, "get", "/jobs", Some(&viewer), None).await;
    let ids: Vec<i64> = listed
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![empty.body["id"].as_i64().unwrap(), id],
        "newest first"
    );
    let missing = call(&app, "get", "/jobs/999999", Some(&viewer), None).await;
    assert_eq!(missing.status, 404);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_job_is_bounded_and_fails_when_its_token_is_revoked(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400); EVENTS]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    dead_events(&app).await;
    let cx = by_hand(&app, "temp").await;
    let all = DeadFilter::default();
    for _ in 0..replaysafe_types::jobs::UNFINISHED_JOBS_MAX {
        jobs::start(&cx, &all).await.unwrap();
    }
    let busy = jobs::start(&cx, &all).await.unwrap_err();
    assert_eq!(busy.status(), 409, "{busy}");
    let bad = jobs::start(
        &cx,
        &DeadFilter {
            from: "yesterday".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(bad.status(), 400, "{bad}");

    // Revoked before its first step: the job fails, re-delivering nothing.
    let owned = jobs::take(&pool, "runner", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    replaysafe_core::accounts::tokens::revoke_where(
        &pool,
        replaysafe_core::accounts::tokens::Target::Name("temp"),
        replaysafe_types::auth::Who::named("test"),
        None,
    )
    .await
    .unwrap();
    let why = jobs::caller(&pool, &owned).await.unwrap().unwrap_err();
    jobs::fail(&pool, owned.id, "runner", &why).await.unwrap();
    let failed = jobs::show(&cx, owned.id).await.unwrap();
    assert_eq!(failed.state, replaysafe_types::states::JobState::Failed);
    assert!(failed.error.unwrap().contains("revoked"));
    assert_eq!(dead(&pool).await, EVENTS as i64);
}

/// Stops the app's own runner, so the test runs the jobs by hand, as an
/// operator token named `name`.
async fn by_hand(app: &TestApp, name: &str) -> Cx {
    app.stop_serving();
    let operator = token(app, name, "operator", None).await;
    Cx {
        services: app.services.clone(),
        caller: Some(
            replaysafe_core::accounts::tokens::caller(&app.pool, &operator)
                .await
                .unwrap(),
        ),
        remote_addr: None,
    }
}

/// Where a runner of the model is in a step, as `jobs::bulk` runs one.
#[derive(Clone)]
enum Phase {
    /// Holds the job, between steps.
    Between,
    /// Its events chosen and marked pending, none re-delivered yet.
    Chosen(jobs::Step),
    /// Re-delivered, answers not yet recorded.
    Answered(jobs::Step, Vec<replaysafe_types::actions::RedeliveryResult>),
}

struct Runner {
    name: String,
    held: Option<(Owned, Phase)>,
}

/// Seeds of the model (`JOB_SEEDS`, default 100) from `JOB_SEED` (default 1).
fn seeds() -> std::ops::Range<u64> {
    let from = std::env::var("JOB_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let n: u64 = std::env::var("JOB_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    from..from + n
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn jobs_survive_stalled_and_dead_runners_and_cancels_for_many_seeds(pool: PgPool) {
    let destination = Destination::start(vec![Scripted::status(400); 100_000]).await;
    let app = spawn_app(pool.clone(), gh_config(&destination.url, "")).await;
    dead_events(&app).await;
    let cx = by_hand(&app, "model").await;
    let stale = Duration::from_secs(30);
    // How often the seeds met what the model is for.
    let (mut cancels, mut takeovers, mut recovered) = (0, 0, 0);
    for seed in seeds() {
        let replay =
            format!("JOB_SEED={seed} JOB_SEEDS=1 cargo test -p replaysafe --test api jobs_survive");
        let mut rng = StdRng::seed_from_u64(seed);
        let mark: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM deliveries")
            .fetch_one(&pool)
            .await
            .unwrap();
        let job = jobs::start(
            &cx,
            &DeadFilter {
                source: "gh".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(job.total, EVENTS as i64, "{replay}");
        let cancel_at = rng.gen_bool(0.3).then(|| rng.gen_range(0..10));
        let mut cancelled = false;
        let mut cancel_mark = i64::MAX;
        let mut chosen_before_cancel: Vec<i64> = Vec::new();
        let mut runners: Vec<Runner> = (0..2)
            .map(|r| Runner {
                name: format!("runner-{r}"),
                held: None,
            })
            .collect();
        let mut restarts = 0;
        for tick in 0..600 {
            if cancel_at == Some(tick) {
                cancelled = jobs::cancel(&cx, job.id).await.is_ok();
                cancel_mark = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM deliveries")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                chosen_before_cancel =
                    sqlx::query_scalar("SELECT event_id FROM bulk_job_results WHERE job_id = $1")
                        .bind(job.id)
                        .fetch_all(&pool)
                        .await
                        .unwrap();
            }
            // The workers forward what was queued again; the destination
            // refuses, so it is dead again at once, and a runner that
            // re-delivered it twice would queue it twice.
            if rng.gen_range(0..5) == 0 {
                app.drain().await;
                continue;
            }
            let runner = &mut runners[rng.gen_range(0..2)];
            let fate = rng.gen_range(0..12);
            let Some((owned, phase)) = runner.held.take() else {
                runner.held = jobs::take(&pool, &runner.name, stale)
                    .await
                    .unwrap()
                    .map(|owned| (owned, Phase::Between));
                continue;
            };
            if fate <= 1 {
                // Its heartbeat goes stale, so another may take the job over.
                sqlx::query(
                    "UPDATE bulk_jobs SET heartbeat_at = now() - interval '1 hour' WHERE owner = $1",
                )
                .bind(&runner.name)
                .execute(&pool)
                .await
                .unwrap();
                if fate == 0 {
                    // It stalled, and goes on later as if nothing happened.
                    runner.held = Some((owned, phase));
                } else {
                    // It died, wherever it was in its step, and comes back
                    // as a new process.
                    restarts += 1;
                    runner.name = format!("restarted-{restarts}");
                }
                continue;
            }
            runner.held = match phase {
                Phase::Between => jobs::begin_step(&pool, owned.id, &runner.name)
                    .await
                    .unwrap()
                    .map(|step| (owned, Phase::Chosen(step))),
                Phase::Chosen(step) => {
                    let Ok(caller) = jobs::caller(&pool, &owned).await.unwrap() else {
                        panic!("the token is live: {replay}");
                    };
                    let as_caller = Cx {
                        caller: Some(caller),
                        ..cx.clone()
                    };
                    let results = replaysafe_core::ops::actions::redeliver_each(
                        &as_caller,
                        owned.id,
                        &step.chosen,
                        None,
                    )
                    .await
                    .unwrap();
                    Some((owned, Phase::Answered(step, results)))
                }
                Phase::Answered(step, results) => {
                    match jobs::record(&pool, owned.id, &runner.name, &results, step.next_after)
                        .await
                        .unwrap()
                    {
                        Next::Continue => Some((owned, Phase::Between)),
                        Next::Stop => None,
                    }
                }
            };
            let state: String = sqlx::query_scalar("SELECT state FROM bulk_jobs WHERE id = $1")
                .bind(job.id)
                .fetch_one(&pool)
                .await
                .unwrap();
            let mid_step = runners
                .iter()
                .any(|r| matches!(r.held, Some((_, Phase::Chosen(_) | Phase::Answered(..)))));
            if state != "queued" && state != "running" && !mid_step {
                break;
            }
        }
        cancels += cancelled as usize;
        takeovers += (restarts > 0) as usize;
        let job = jobs::show(&cx, job.id).await.unwrap();
        assert!(job.finished(), "job stuck {job:?}: {replay}");
        // Asked to stop, it stops before its next step (or ends done, when
        // the step under way was its last).
        let ended = if cancelled {
            &["cancelled", "done"][..]
        } else {
            &["done"][..]
        };
        assert!(ended.contains(&job.state.as_str()), "{job:?}: {replay}");

        // Its counts are its answered rows; every event has at most one.
        let rows: Vec<(i64, bool, String)> = sqlx::query_as(
            "SELECT event_id, requeued, outcome FROM bulk_job_results
             WHERE job_id = $1 AND outcome <> 'pending'",
        )
        .bind(job.id)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(rows.len() as i64, job.done, "{replay}");
        assert_eq!(
            rows.iter().filter(|r| r.1).count() as i64,
            job.requeued,
            "{replay}"
        );
        if !cancelled {
            assert_eq!(
                rows.len(),
                EVENTS,
                "done: every event has its outcome: {replay}"
            );
        }
        let pending: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM bulk_job_results WHERE job_id = $1 AND outcome = 'pending'",
        )
        .bind(job.id)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            pending, 0,
            "a finished job answered every event it took: {replay}"
        );

        // The promise: the job queued no event again twice (one claimed
        // delivery of the job's per event, whichever runner made it), its
        // outcomes say which it queued again, exactly, and after the
        // cancel it queued none but those chosen before.
        let claims: HashMap<i64, i64> = sqlx::query_as::<_, (i64, i64)>(
            "SELECT event_id, count(*) FROM deliveries
             WHERE bulk_job_id = $1 AND outcome = 'claimed' GROUP BY event_id",
        )
        .bind(job.id)
        .fetch_all(&pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
        assert!(claims.values().all(|n| *n == 1), "{claims:?}: {replay}");
        let mut claimed: Vec<i64> = claims.keys().copied().collect();
        claimed.sort();
        let mut said_requeued: Vec<i64> = rows.iter().filter(|r| r.1).map(|r| r.0).collect();
        said_requeued.sort();
        assert_eq!(said_requeued, claimed, "{rows:?}: {replay}");
        if !cancelled {
            assert_eq!(claimed.len(), EVENTS, "{replay}");
        }
        let other_claims: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM deliveries
             WHERE id > $1 AND outcome = 'claimed' AND bulk_job_id IS DISTINCT FROM $2",
        )
        .bind(mark)
        .bind(job.id)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(other_claims, 0, "every claim is the job's: {replay}");
        let after_cancel: Vec<i64> = sqlx::query_scalar(
            "SELECT event_id FROM deliveries
             WHERE id > $1 AND bulk_job_id = $2 AND outcome = 'claimed'",
        )
        .bind(if cancelled { cancel_mark } else { i64::MAX })
        .bind(job.id)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert!(
            after_cancel
                .iter()
                .all(|e| chosen_before_cancel.contains(e)),
            "{after_cancel:?} requeued after the cancel: {replay}"
        );
        recovered += sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM bulk_job_results
             WHERE job_id = $1 AND message LIKE 'queued again (by an earlier try%'",
        )
        .bind(job.id)
        .fetch_one(&pool)
        .await
        .unwrap() as usize;

        // Dead again for the next seed (the destination refuses them).
        app.drain().await;
        assert_eq!(dead(&pool).await, EVENTS as i64, "{replay}");
    }
    if seeds().count() >= 16 {
        assert!(
            cancels > 0 && takeovers > 0 && recovered > 0,
            "the seeds met too little: {cancels} cancels, {takeovers} takeovers, {recovered} answers recovered"
        );
    }
    println!("{cancels} cancels, {takeovers} takeovers, {recovered} answers recovered");
}
