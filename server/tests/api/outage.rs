//! A database outage: the receiver answers 503 (never a 2xx for what is not
//! stored) and recovers without a restart; an attempt whose answer came
//! while the database was away is recorded once it is back, and its event is
//! not forwarded again.

use std::time::Duration;

use hmac::{Hmac, Mac};
use replaysafe_core::config::Secret;
use replaysafe_core::db::MIGRATOR;
use sha2::Sha256;
use sqlx::PgPool;

use crate::helpers::{
    database_url, spawn_app_with, test_config, DbProxy, Destination, Scripted, ServerProcess,
};

async fn deliver(client: &reqwest::Client, url: &str, id: &str) -> reqwest::Response {
    let body = format!("{{\"id\":\"{id}\"}}");
    let mut mac = Hmac::<Sha256>::new_from_slice(b"gh-secret").unwrap();
    mac.update(body.as_bytes());
    client
        .post(url)
        .header("x-github-delivery", id)
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
        )
        .body(body)
        .send()
        .await
        .unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn an_outage_loses_nothing_and_heals_without_a_restart(pool: PgPool) {
    let destination = Destination::start(vec![Scripted {
        status: 200,
        headers: vec![],
        delay: Duration::from_millis(800),
    }])
    .await;
    let direct = database_url(&pool).await;
    let proxy = DbProxy::in_front_of(&direct).await;
    let config = test_config(
        &format!(
            "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"{}\"\nattempt_timeout_secs = 5",
            destination.url
        ),
        &[],
    );
    replaysafe_core::db::sources::sync(&pool, &config)
        .await
        .unwrap();
    let through_proxy = replaysafe_core::db::pool(&Secret::new(proxy.url(&direct)), 8)
        .await
        .unwrap();
    let app = spawn_app_with(through_proxy, config).await;
    let hook = app.url("/hooks/gh");

    assert_eq!(deliver(&app.client, &hook, "before").await.status(), 200);

    // The first attempt is under way (the destination answers slowly) when the database goes.
    let workers = app.workers();
    let attempt = tokio::spawn({
        let w = workers.clone();
        async move { w.run_once("cut-off").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.cut();
    let started = std::time::Instant::now();
    let during = deliver(&app.client, &hook, "during").await;
    assert_eq!(during.status(), 503, "nothing unstored is acknowledged");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    proxy.restore();
    // The provider's retry of the same event now succeeds: no restart needed.
    assert_eq!(deliver(&app.client, &hook, "during").await.status(), 200);

    // The attempt's answer came while the database was away: it is
    // recorded now, and nothing takes the event over to forward it again.
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(30), attempt)
            .await
            .expect("the attempt is recorded once the database is back")
            .unwrap()
            .unwrap(),
        1
    );
    assert_eq!(app.drain().await, 1);
    let states: Vec<(String, String)> =
        sqlx::query_as("SELECT idem_key, state FROM event_summaries ORDER BY idem_key")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        [
            ("before".into(), "completed".into()),
            ("during".into(), "completed".into())
        ]
    );
    let keys: Vec<String> = destination.keys();
    assert_eq!(keys.iter().filter(|k| *k == "gh:before").count(), 1);
    assert_eq!(keys.iter().filter(|k| *k == "gh:during").count(), 1);
}

/// While the database is away, a server's workers knock at the poll's pace,
/// not in a loop: a failed lease used to wake its worker again at once, and
/// each of eight workers tried (and logged a warning) hundreds of times a
/// second until the database came back.
#[sqlx::test(migrator = "MIGRATOR")]
async fn workers_wait_between_tries_while_the_database_is_away(pool: PgPool) {
    let direct = database_url(&pool).await;
    let proxy = DbProxy::in_front_of(&direct).await;
    let server = ServerProcess::start(
        "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"http://127.0.0.1:9/x\"\n",
        &proxy.url(&direct),
        &["--workers", "8"],
    )
    .await;
    proxy.cut();
    let before = proxy.refused.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let knocks = proxy.refused.load(std::sync::atomic::Ordering::SeqCst) - before;
    // Eight workers at two polls a second, and the background jobs and the
    // listener on their own pace, over four seconds: well under 300.
    assert!(knocks < 300, "{knocks} connection attempts in 4 s");
    assert!(knocks > 0, "the server kept trying");
    proxy.restore();
    // And it recovers: a delivery is claimed again.
    let mut status = 0;
    for _ in 0..100 {
        status = deliver(
            &reqwest::Client::new(),
            &format!("{}/hooks/gh", server.base),
            "after",
        )
        .await
        .status()
        .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200);
}
