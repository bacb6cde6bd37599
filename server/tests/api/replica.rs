//! The read replica (issue 19, `read_database_url`): the API's and the
//! dashboard's reads come from a real streaming standby while actions go to
//! the primary; a lagging replica's lag is shown; reads fall back to the
//! primary while the replica does not answer.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::failover::{cluster_root, primary_and_standby};
use crate::helpers::{github_request, make_token, Destination, Scripted, ServerProcess};

/// GET `path` of the API as `token`.
async fn get(client: &reqwest::Client, base: &str, token: &str, path: &str) -> Value {
    let answer = client
        .get(format!("{base}/api/v1{path}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "{path}");
    answer.json().await.unwrap()
}

async fn waits_for(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(45);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_come_from_the_replica_and_its_lag_is_shown() {
    let root = cluster_root("replaysafe-replica");
    let (primary, standby) = primary_and_standby(root.path(), false);
    struct Stop<'a>(&'a crate::failover::Cluster, &'a crate::failover::Cluster);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.stop();
            self.1.stop();
        }
    }
    let _stop = Stop(&primary, &standby);
    let destination = Destination::start(vec![Scripted::status(200); 100]).await;
    let config = format!(
        "read_database_url = \"{}\"\n[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"{}\"\n",
        standby.url(),
        destination.url
    );
    let server = ServerProcess::start(&config, &primary.url(), &[]).await;
    let on_primary = sqlx::PgPool::connect(&primary.url()).await.unwrap();
    let token = make_token(&on_primary, "replica-test", "operator", None).await;
    let client = reqwest::Client::new();
    let deliver = |key: &'static str| {
        github_request(
            &client,
            &format!("{}/hooks/gh", server.base),
            key,
            &format!(r#"{{"key":"{key}"}}"#),
            b"gh-secret",
        )
        .send()
    };
    let keys = |page: &Value| -> Vec<String> {
        page["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["idem_key"].as_str().unwrap().to_owned())
            .collect()
    };

    assert_eq!(deliver("first").await.unwrap().status(), 200);
    let on_standby = sqlx::PgPool::connect(&standby.url()).await.unwrap();
    waits_for("the replica holds the first event", async || {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM events WHERE idem_key = 'first'")
            .fetch_one(&on_standby)
            .await
            .unwrap()
            == 1
            && keys(&get(&client, &server.base, &token, "/events").await) == ["first"]
    })
    .await;

    // The replica stops replaying: what the primary stores now is not read.
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&on_standby)
        .await
        .unwrap();
    waits_for("replay pauses", async || {
        sqlx::query_scalar::<_, String>("SELECT pg_get_wal_replay_pause_state()")
            .fetch_one(&on_standby)
            .await
            .unwrap()
            == "paused"
    })
    .await;
    assert_eq!(deliver("second").await.unwrap().status(), 200);
    let on_primary_now: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&on_primary)
        .await
        .unwrap();
    assert_eq!(on_primary_now, 2);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        keys(&get(&client, &server.base, &token, "/events").await),
        ["first"],
        "the events are read from the replica"
    );
    // Its lag shows once it passes a few seconds.
    waits_for("the overview shows the replica's lag", async || {
        get(&client, &server.base, &token, "/overview").await["replica_lag_secs"]
            .as_f64()
            .is_some_and(|lag| lag >= 5.0)
    })
    .await;
    // Actions go to the primary: the second event is re-delivered by id,
    // which only the primary knows of.
    let second: i64 = sqlx::query_scalar("SELECT id FROM events WHERE idem_key = 'second'")
        .fetch_one(&on_primary)
        .await
        .unwrap();
    let redeliver = client
        .post(format!("{}/api/v1/events/{second}/redeliver", server.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        redeliver.status(),
        409,
        "the event, which only the primary has, is found there and guarded"
    );
    // Past LAG_MAX behind, the replica is not read from: the primary is.
    waits_for("reads leave a replica too far behind", async || {
        let overview = get(&client, &server.base, &token, "/overview").await;
        overview["replica_lag_secs"].is_null()
            && keys(&get(&client, &server.base, &token, "/events").await).len() == 2
    })
    .await;

    // Replaying again, the replica catches up and the lag goes.
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&on_standby)
        .await
        .unwrap();
    waits_for("the replica catches up", async || {
        let overview = get(&client, &server.base, &token, "/overview").await;
        overview["replica_lag_secs"].is_null()
            && keys(&get(&client, &server.base, &token, "/events").await).len() == 2
    })
    .await;

    // The replica gone, reads go to the primary.
    on_standby.close().await;
    standby.stop();
    assert_eq!(deliver("third").await.unwrap().status(), 200);
    // (Until the watcher notices, a read may fail.)
    waits_for("reads fall back to the primary", async || {
        let Ok(answer) = client
            .get(format!("{}/api/v1/events", server.base))
            .bearer_auth(&token)
            .send()
            .await
        else {
            return false;
        };
        answer.status() == 200 && keys(&answer.json().await.unwrap()).contains(&"third".to_owned())
    })
    .await;
    on_primary.close().await;
}
