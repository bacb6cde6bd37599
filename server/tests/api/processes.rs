//! Several real replaysafe processes on one database: the claim and the
//! queue hold across processes, not only across tasks.

use std::collections::HashSet;
use std::time::Duration;

use hmac::{Hmac, Mac};
use replaysafe_core::db::MIGRATOR;
use sha2::Sha256;
use sqlx::PgPool;

use crate::helpers::{database_url, Destination, Outage, ServerProcess};

fn signed_github(
    client: &reqwest::Client,
    base: &str,
    delivery: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut mac = Hmac::<Sha256>::new_from_slice(b"gh-secret").unwrap();
    mac.update(body.as_bytes());
    client
        .post(format!("{base}/hooks/gh"))
        .header("content-type", "application/json")
        .header("x-github-delivery", delivery)
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
        )
        .body(body.to_owned())
}

fn config(destination: &str) -> String {
    format!(
        r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
"#
    )
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn two_processes_claim_a_storm_once(pool: PgPool) {
    let url = database_url(&pool).await;
    let cfg = config("http://127.0.0.1:9/unused");
    let (a, b) = tokio::join!(
        ServerProcess::start(&cfg, &url, &["--workers", "0"]),
        ServerProcess::start(&cfg, &url, &["--workers", "0"])
    );
    let client = reqwest::Client::new();
    let storm = (0..20).map(|i| {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        signed_github(&client, base, "storm-1", "{}").send()
    });
    let responses = futures_util::future::join_all(storm).await;
    let claimed = responses
        .iter()
        .filter(|r| r.as_ref().unwrap().headers()["x-replaysafe-outcome"] == "claimed")
        .count();
    assert_eq!(claimed, 1);
    let deliveries: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(deliveries, 20);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn two_processes_forward_each_event_once(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let url = database_url(&pool).await;
    let cfg = config(&destination.url);
    let (a, b) = tokio::join!(
        ServerProcess::start(&cfg, &url, &["--workers", "4"]),
        ServerProcess::start(&cfg, &url, &["--workers", "4"])
    );
    let client = reqwest::Client::new();
    let sends = (0..90).map(|i| {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        signed_github(
            &client,
            base,
            &format!("evt-{}", i % 30),
            &format!("{{\"n\":{}}}", i % 30),
        )
        .send()
    });
    for r in futures_util::future::join_all(sends).await {
        assert_eq!(r.unwrap().status(), 200);
    }
    for _ in 0..100 {
        let done: i64 =
            sqlx::query_scalar("SELECT count(*) FROM event_summaries WHERE state = 'completed'")
                .fetch_one(&pool)
                .await
                .unwrap();
        if done == 30 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Give a would-be second forward time to show up.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let received = destination.received.lock().unwrap().clone();
    let keys: HashSet<String> = received
        .iter()
        .map(|c| c.headers["idempotency-key"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(received.len(), 30, "each event forwarded exactly once");
    assert_eq!(keys.len(), 30);
    let workers: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT split_part(worker, ':', 2)) FROM attempts")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(workers >= 1);
}

/// A process killed outright (SIGKILL) in the middle of an attempt: another
/// process takes the event over once its lease expires, within the attempt
/// timeout plus 30 s, and it is delivered.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_killed_workers_event_is_taken_over_by_another_process(pool: PgPool) {
    // The first forward hangs, as a slow application would, while its worker dies.
    let destination = Destination::start(vec![crate::helpers::Scripted {
        status: 200,
        headers: vec![],
        delay: Duration::from_secs(60),
    }])
    .await;
    let url = database_url(&pool).await;
    let cfg = format!("{}attempt_timeout_secs = 1\n", config(&destination.url));
    let mut doomed = ServerProcess::start(&cfg, &url, &["--workers", "1"]).await;
    let client = reqwest::Client::new();
    let sent = signed_github(&client, &doomed.base, "evt-crash", "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    for _ in 0..100 {
        if destination.count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(destination.count(), 1, "the first attempt is in flight");
    doomed.child.start_kill().unwrap();
    doomed.child.wait().await.unwrap();
    let killed_at = std::time::Instant::now();

    let _survivor = ServerProcess::start(&cfg, &url, &["--workers", "1"]).await;
    let mut state = String::new();
    while killed_at.elapsed() < Duration::from_secs(1 + 30 + 5) {
        state =
            sqlx::query_scalar("SELECT state FROM event_summaries WHERE idem_key = 'evt-crash'")
                .fetch_one(&pool)
                .await
                .unwrap();
        if state == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(state, "completed");
    assert!(
        killed_at.elapsed() <= Duration::from_secs(1 + 30),
        "taken over after {:?}",
        killed_at.elapsed()
    );
    assert_eq!(
        destination.count(),
        2,
        "forwarded again, under the same Idempotency-Key"
    );
    let abandoned: String = sqlx::query_scalar("SELECT error FROM attempts WHERE number = 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(abandoned, "worker lost its lease; taken over");
}

/// Issue 18's whole promise, on two real processes: a source with three
/// destinations, one filtered (issue events only), one rate limited, one
/// broken and then healed (its breaker opens, is probed and closes), gets
/// each event exactly once to each destination that wants it, provider
/// retries and all.
#[sqlx::test(migrator = "MIGRATOR")]
async fn three_destinations_across_two_processes_each_get_each_event_once(pool: PgPool) {
    let issues_only = Destination::start(vec![]).await;
    let limited = Destination::start(vec![]).await;
    let broken = Outage::start().await;
    let cfg = format!(
        r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
max_attempts = 20

[[source.destination]]
name = "issues"
url = "{}"
filter = "issues.*"

[[source.destination]]
name = "limited"
url = "{}"
rate_per_sec = 20

[[source.destination]]
name = "broken"
url = "{}"
breaker_failures = 3
breaker_cooldown_secs = 1
"#,
        issues_only.url, limited.url, broken.url
    );
    let url = database_url(&pool).await;
    let (a, b) = tokio::join!(
        ServerProcess::start(&cfg, &url, &[]),
        ServerProcess::start(&cfg, &url, &[])
    );
    let client = reqwest::Client::new();
    let n = 60;
    // Every event twice, the copy to the other process: a provider's retry.
    let sends = (0..2 * n).map(|i| {
        let event = i % n;
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        let kind = if event % 2 == 0 { "issues" } else { "push" };
        signed_github(
            &client,
            base,
            &format!("evt-{event}"),
            &format!(r#"{{"action":"opened","n":{event}}}"#),
        )
        .header("x-github-event", kind)
        .send()
    });
    for r in futures_util::future::join_all(sends).await {
        assert_eq!(r.unwrap().status(), 200);
    }
    let breaker = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT breaker FROM destination_gates WHERE source = 'gh' AND destination = 'broken'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while breaker().await.as_deref() != Some("open") {
        assert!(
            std::time::Instant::now() < deadline,
            "the breaker never opened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failed_while_down = broken.answered().len();
    broken.up.store(true, std::sync::atomic::Ordering::SeqCst);
    let delivered = |d: &Destination| {
        let mut keys = d.keys();
        keys.sort();
        keys
    };
    let expected = |filter: fn(usize) -> bool| {
        let mut keys: Vec<String> = (0..n)
            .filter(|&e| filter(e))
            .map(|e| format!("gh:evt-{e}"))
            .collect();
        keys.sort();
        keys
    };
    let (issue_keys, all_keys) = (expected(|e| e % 2 == 0), expected(|_| true));
    let healed = || {
        let mut keys: Vec<String> = broken
            .answered()
            .into_iter()
            .filter(|(_, status)| *status == 200)
            .map(|(key, _)| key)
            .collect();
        keys.sort();
        keys
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while delivered(&issues_only) != issue_keys
        || delivered(&limited) != all_keys
        || healed() != all_keys
    {
        assert!(
            std::time::Instant::now() < deadline,
            "issues {} of {}, limited {} of {n}, broken healed {} of {n}",
            issues_only.count(),
            issue_keys.len(),
            limited.count(),
            healed().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Give a would-be second forward time to show up.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        delivered(&issues_only),
        issue_keys,
        "issue events once each"
    );
    assert_eq!(delivered(&limited), all_keys, "every event once");
    assert_eq!(healed(), all_keys, "every event once after healing");
    assert_eq!(breaker().await.as_deref(), Some("closed"));
    // Its moves are metrics of the processes that made them.
    let mut moved = std::collections::BTreeMap::<String, f64>::new();
    for base in [&a.base, &b.base] {
        let text = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in text.lines().filter(|l| {
            l.starts_with("replaysafe_breaker_transitions_total")
                && l.contains(r#"destination="broken""#)
        }) {
            let to = line
                .split(r#"to=""#)
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            *moved.entry(to.to_owned()).or_default() += count;
        }
    }
    for to in ["open", "half_open", "closed"] {
        assert!(moved.get(to).copied().unwrap_or(0.0) >= 1.0, "{moved:?}");
    }
    assert!(
        failed_while_down >= 3,
        "{failed_while_down} failures before the breaker opened"
    );
    let mut arrivals: Vec<_> = limited
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.at)
        .collect();
    arrivals.sort();
    let busiest = (0..arrivals.len())
        .map(|i| {
            arrivals[i..]
                .iter()
                .take_while(|t| t.duration_since(arrivals[i]) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap();
    assert!(busiest <= 25, "{busiest} requests in one second at 20/s");
    let states: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT destination, state, count(*) FROM dispatches GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        states,
        vec![
            ("broken".into(), "completed".into(), n as i64),
            ("issues".into(), "completed".into(), n as i64 / 2),
            ("issues".into(), "filtered".into(), n as i64 / 2),
            ("limited".into(), "completed".into(), n as i64),
        ]
    );
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM attempts WHERE result = 'dead'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(dead, 0, "the breaker dead-letters nothing");
}
