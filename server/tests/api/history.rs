//! Partitioned history (issue 19, migration 18): the upgrade converts a
//! seeded database without losing or changing a row, claims go on through
//! the converted tables, and retention drops a whole day's partition, but
//! never one holding the payload of an event still waiting to be forwarded.

use replaysafe_core::db::MIGRATOR;
use sqlx::migrate::Migrate;
use sqlx::PgPool;

use crate::helpers::{github_request, spawn_app, test_config, Destination, Scripted};

const PARTITIONING: i64 = 20261202000018;

/// A fingerprint of every row of `table`, in id order.
async fn fingerprint(pool: &PgPool, table: &str) -> (i64, String) {
    sqlx::query_as(&format!(
        "SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '')
         FROM {table} t"
    ))
    .fetch_one(pool)
    .await
    .unwrap()
}

fn config(destination: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"{destination}\"\n"
        ),
        &[],
    )
}

#[sqlx::test(migrations = false)]
async fn the_upgrade_partitions_a_seeded_database_without_losing_a_row(pool: PgPool) {
    // The database as the release before the upgrade left it.
    let mut conn = pool.acquire().await.unwrap();
    conn.ensure_migrations_table().await.unwrap();
    for migration in MIGRATOR.iter().filter(|m| m.version < PARTITIONING) {
        conn.apply(migration).await.unwrap();
    }
    drop(conn);
    // 40 days of history: events, their deliveries (a fifth of them
    // duplicates) and rejections, and their attempts.
    sqlx::query(
        "INSERT INTO events (source, idem_key, state, first_delivery_id, first_seen_at, last_seen_at,
                             state_changed_at, attempt_count)
         SELECT 'gh', 'k-' || g, CASE WHEN g % 50 = 0 THEN 'queued' ELSE 'completed' END,
                g, now() - make_interval(mins => 60 * 24 * 40 - g * 2),
                now() - make_interval(mins => 60 * 24 * 40 - g * 2), now(), 1
         FROM generate_series(1, 20000) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO deliveries (id, source, received_at, event_id, idem_key, outcome, http_status,
                                 verified, headers, body, body_size)
         SELECT g, 'gh', now() - make_interval(mins => 60 * 24 * 40 - g * 2),
                CASE WHEN g % 10 = 7 THEN NULL ELSE ((g - 1) % 20000) + 1 END,
                'k-' || (((g - 1) % 20000) + 1),
                CASE WHEN g % 10 = 7 THEN 'rejected' WHEN g > 20000 THEN 'completed' ELSE 'claimed' END,
                CASE WHEN g % 10 = 7 THEN 401 ELSE 200 END, g % 10 <> 7,
                jsonb_build_object('x-github-delivery', 'd-' || g), convert_to('{\"n\":' || g || '}', 'UTF8'), 8
         FROM generate_series(1, 25000) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("SELECT setval('deliveries_id_seq', 25000)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO attempts (event_id, number, worker, started_at, finished_at, status, latency_ms, result)
         SELECT e.id, 1, 'w', e.first_seen_at, e.first_seen_at + interval '5 ms', 200, 5, 'completed'
         FROM events e WHERE e.state = 'completed'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let deliveries = fingerprint(&pool, "deliveries").await;
    let attempts = fingerprint(&pool, "attempts").await;
    assert_eq!(deliveries.0, 25_000);
    assert_eq!(attempts.0, 19_600);

    let mut conn = pool.acquire().await.unwrap();
    for migration in MIGRATOR.iter().filter(|m| m.version == PARTITIONING) {
        conn.apply(migration).await.unwrap();
    }
    drop(conn);

    assert_eq!(fingerprint(&pool, "deliveries").await, deliveries);
    assert_eq!(fingerprint(&pool, "attempts").await, attempts);
    // The migrations after it (dispatches) on the partitioned history.
    MIGRATOR.run(&pool).await.unwrap();
    let dispatches: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dispatches p JOIN events e ON e.id = p.event_id
         WHERE p.destination = 'default' AND p.source = e.source",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        dispatches, 20_000,
        "each event's state is its default dispatch's"
    );
    let partitioned: Vec<String> = sqlx::query_scalar(
        "SELECT relname::text FROM pg_class WHERE relkind = 'p' ORDER BY relname",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(partitioned, ["attempts", "deliveries"]);
    // Every old row is in the legacy partition, attached as it was; the
    // days ahead have their partitions.
    let legacy: i64 = sqlx::query_scalar("SELECT count(*) FROM ONLY deliveries_legacy")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(legacy, 25_000);
    let ahead: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'deliveries'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    // The legacy one covers today: the daily ones begin tomorrow.
    assert_eq!(
        ahead,
        1 + i64::from(replaysafe_core::db::history::DAYS_AHEAD)
    );

    // Claims go on through the converted tables, ids after the old ones.
    let destination = Destination::start(vec![Scripted::status(200)]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let answer = github_request(
        &app.client,
        &app.url("/hooks/gh"),
        "after-upgrade",
        r#"{"after":"upgrade"}"#,
        b"gh-secret",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        app.drain().await,
        1 + 400,
        "the new event and the 400 queued before"
    );
    let (id, attempt): (i64, i64) = sqlx::query_as(
        "SELECT d.id, (SELECT count(*) FROM attempts a WHERE a.event_id = d.event_id)
         FROM deliveries d WHERE d.idem_key = 'after-upgrade'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(id > 25_000, "delivery ids go on from the sequence: {id}");
    assert_eq!(attempt, 1);

    // Retention deletes the legacy partition's old rows as before, keeping
    // the payloads of the events still queued (none here: all forwarded).
    let pruned = replaysafe_core::jobs::retention::prune(&pool, 30, 30, 365)
        .await
        .unwrap();
    let expected: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deliveries WHERE received_at >= now() - interval '30 days'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(pruned.deliveries as i64, 25_001 - expected);
    assert!(pruned.attempts > 0);
    assert!(pruned.partitions.dropped.is_empty(), "{pruned:?}");
}

/// Names of the partitions of `parent` for the day `days` ago (UTC).
async fn day_partition(pool: &PgPool, parent: &str, days: i32) -> String {
    sqlx::query_scalar(&format!(
        "SELECT '{parent}_p' || to_char((now() - make_interval(days => $1)) AT TIME ZONE 'UTC', 'YYYYMMDD')"
    ))
    .bind(days)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Makes the database one partitioned by day `days` days ago (no legacy
/// partition); returns how many partitions that made.
async fn partitioned_since(pool: &PgPool, days: i32) -> i32 {
    sqlx::query("DROP TABLE deliveries_legacy, attempts_legacy")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("UPDATE history_partitions SET first_day = (now() AT TIME ZONE 'UTC')::date - $1")
        .bind(days)
        .execute(pool)
        .await
        .unwrap();
    replaysafe_core::db::history::ensure_from(pool, days)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn retention_drops_a_day_but_never_the_payload_of_an_event_in_flight(pool: PgPool) {
    // A database partitioned for 45 days already: daily partitions back
    // then, no legacy one.
    assert_eq!(
        partitioned_since(&pool, 45).await,
        2 * 46,
        "today and the 45 days before, for each table"
    );

    let destination = Destination::start(vec![Scripted::status(200)]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    for key in ["done", "waiting"] {
        let answer = github_request(
            &app.client,
            &app.url("/hooks/gh"),
            key,
            &format!(r#"{{"key":"{key}"}}"#),
            b"gh-secret",
        )
        .send()
        .await
        .unwrap();
        assert_eq!(answer.status(), 200);
    }
    sqlx::query(
        "UPDATE dispatches SET next_attempt_at = now() + interval '1 hour' WHERE event_id IN (SELECT id FROM events WHERE idem_key = 'waiting')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(app.drain().await, 1);
    // "done" was received 35 days ago, "waiting" 34: both days are past
    // retention. The first day holds more, rejected deliveries.
    sqlx::query(
        "UPDATE deliveries SET received_at = now() - make_interval(days => CASE idem_key WHEN 'done' THEN 35 ELSE 34 END)",
    )
    .execute(&pool)
    .await
    .unwrap();
    // Each event first seen when its delivery came, as the claim writes them.
    sqlx::query(
        "UPDATE events e SET first_seen_at = d.received_at FROM deliveries d WHERE d.id = e.first_delivery_id",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("UPDATE attempts SET started_at = now() - interval '35 days'")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO deliveries (source, received_at, outcome, http_status, verified, headers, body_size)
         SELECT 'gh', now() - interval '35 days', 'rejected', 401, false, '{}', 0
         FROM generate_series(1, 100)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let done_day = day_partition(&pool, "deliveries", 35).await;
    let waiting_day = day_partition(&pool, "deliveries", 34).await;
    let in_done_day: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {done_day}"))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(in_done_day, 101, "rows moved into their day's partition");

    // A retirement cut short between its detach and its drop left two
    // days detached: one empty, one holding the waiting event's payload.
    let empty_day = day_partition(&pool, "deliveries", 36).await;
    for day in [&empty_day, &waiting_day] {
        sqlx::query(&format!("ALTER TABLE deliveries DETACH PARTITION {day}"))
            .execute(&pool)
            .await
            .unwrap();
    }

    let pruned = replaysafe_core::jobs::retention::prune(&pool, 30, 30, 365)
        .await
        .unwrap();
    let dropped = &pruned.partitions.dropped;
    assert!(dropped.contains(&empty_day), "{pruned:?}");
    assert!(dropped.contains(&done_day), "{pruned:?}");
    assert!(dropped.contains(&day_partition(&pool, "attempts", 35).await));
    // Every partition whose whole day is past retention went, but one.
    assert_eq!(dropped.len(), 2 * 15 - 1, "{dropped:?}");
    assert_eq!(pruned.partitions.kept, [(waiting_day.clone(), 1)]);
    assert_eq!(pruned.deliveries, 0, "nothing left to delete row by row");
    let left: Vec<String> = sqlx::query_scalar("SELECT idem_key FROM deliveries")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        left,
        ["waiting"],
        "the waiting event's payload stays, attached again"
    );

    // Forwarded at last, the event needs its payload no more: its day goes.
    sqlx::query("UPDATE dispatches SET next_attempt_at = now() WHERE event_id IN (SELECT id FROM events WHERE idem_key = 'waiting')")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(app.drain().await, 1);
    assert_eq!(
        destination.keys(),
        ["gh:done", "gh:waiting"],
        "each forwarded once, with its payload"
    );
    let pruned = replaysafe_core::jobs::retention::prune(&pool, 30, 30, 365)
        .await
        .unwrap();
    assert_eq!(pruned.partitions.dropped, [waiting_day]);
    assert!(pruned.partitions.kept.is_empty());

    // Claims go on as ever; the days ahead are there.
    let answer = github_request(
        &app.client,
        &app.url("/hooks/gh"),
        "later",
        r#"{"key":"later"}"#,
        b"gh-secret",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    let partitions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'deliveries'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        partitions,
        45 - 15 + 1 + i64::from(replaysafe_core::db::history::DAYS_AHEAD),
        "days -30 to today, and the days ahead"
    );
}

/// replaysafe's connections run without JIT: the partitioned tables' plans
/// cost past its threshold, and it compiled a lease for seconds.
#[sqlx::test(migrator = "MIGRATOR")]
async fn connections_run_without_jit(pool: PgPool) {
    let url = crate::helpers::database_url(&pool).await;
    let ours = replaysafe_core::db::pool(&replaysafe_core::config::Secret::new(url), 1)
        .await
        .unwrap();
    let jit: String = sqlx::query_scalar("SHOW jit")
        .fetch_one(&ours)
        .await
        .unwrap();
    assert_eq!(jit, "off");
    let default: String = sqlx::query_scalar("SHOW jit")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(default, "on", "the server's default, which ours overrides");
}

/// The partitions a read of `statement` (with constants) opens, by name.
async fn partitions_read(pool: &PgPool, statement: &str) -> Vec<String> {
    let plan: serde_json::Value = sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {statement}"))
        .fetch_one(pool)
        .await
        .unwrap();
    fn walk(node: &serde_json::Value, found: &mut Vec<String>) {
        if let Some(name) = node.get("Relation Name").and_then(|n| n.as_str()) {
            found.push(name.to_owned());
        }
        for child in node
            .get("Plans")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
        {
            walk(child, found);
        }
    }
    let mut found = Vec::new();
    walk(&plan[0]["Plan"], &mut found);
    found.sort();
    found
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn reads_by_delivery_id_open_only_the_days_that_can_hold_it(pool: PgPool) {
    // Ten days of history, partitioned by day since before them.
    partitioned_since(&pool, 10).await;
    let destination = Destination::start(vec![Scripted::status(200)]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    // One event a day, ids ascending with time as claims draw them, and a
    // copy of each a day later; a rejection and a 409 for the status filter.
    for day in (1..=9).rev() {
        assert_eq!(
            app.github_delivery(
                "gh",
                &format!("k{day}"),
                &format!(r#"{{"day":{day}}}"#),
                b"gh-secret"
            )
            .await,
            200
        );
        sqlx::query(
            "UPDATE deliveries SET received_at = (now() AT TIME ZONE 'UTC')::date - $1 + interval '12 hours'
             WHERE id = (SELECT max(id) FROM deliveries)",
        )
        .bind(day)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "UPDATE events e SET first_seen_at = d.received_at, last_seen_at = d.received_at
         FROM deliveries d WHERE d.id = e.first_delivery_id",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO deliveries (source, received_at, outcome, http_status, verified, headers, body_size)
         VALUES ('gh', now(), 'in_progress', 409, true, '{}', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    // The ten whole days before today are noted (the ninth and tenth
    // empty).
    sqlx::query("DELETE FROM history_id_ranges")
        .execute(&pool)
        .await
        .unwrap();
    // A day is noted an hour past its end: until 01:00 UTC, yesterday is not.
    let (noted, whole_days): (i32, i32) = sqlx::query_as(
        "SELECT history_id_ranges_note(),
                CASE WHEN now() < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                  + interval '1 hour' THEN 9 ELSE 10 END",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        noted, whole_days,
        "the whole days before today, an hour past their end"
    );

    // A claim that began before midnight and committed after its day was
    // noted: its id is past every noted range, its row in a noted day.
    let straggler: i64 = sqlx::query_scalar(
        "INSERT INTO deliveries (source, received_at, outcome, http_status, verified, headers, body_size)
         VALUES ('gh', (now() AT TIME ZONE 'UTC')::date - 4 + interval '23 hours 59 minutes 59 seconds',
                 'rejected', 401, false, '{}', 0)
         RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let id_of = |key: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT first_delivery_id FROM events WHERE idem_key = $1")
                .bind(key)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let middle = id_of("k5").await;
    let bounds: (
        Option<chrono::DateTime<chrono::Utc>>,
        Option<chrono::DateTime<chrono::Utc>>,
    ) = sqlx::query_as("SELECT lo, hi FROM delivery_received_bounds($1)")
        .bind(middle)
        .fetch_one(&pool)
        .await
        .unwrap();
    let (lo, hi) = (bounds.0.unwrap(), bounds.1.unwrap());
    assert_eq!(hi - lo, chrono::Duration::days(1), "one day holds it");
    assert_eq!(
        partitions_read(
            &pool,
            &format!(
                "SELECT * FROM deliveries WHERE id = {middle} AND received_at >= '{lo}' AND received_at < '{hi}'"
            )
        )
        .await,
        vec![day_partition(&pool, "deliveries", 5).await],
        "the read by id opens that day's partition only"
    );

    // Through the dashboard: the bounded read, the straggler found by the
    // read anywhere after the bounded one missed, and a stranger id.
    for (id, status) in [
        (middle, 200),
        (straggler, 200),
        (id_of("k1").await, 200),
        (987_654_321, 404),
    ] {
        let (got, body) = app.server_fn("delivery", &format!("id={id}")).await;
        assert_eq!(got, status, "delivery {id}: {body}");
        if status == 200 {
            assert_eq!(body["row"]["id"], id);
        }
    }
    let (got, body) = app.server_fn("deliveries", "filter[status]=4xx").await;
    assert_eq!(got, 200, "{body}");
    let statuses: Vec<i64> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["http_status"].as_i64().unwrap())
        .collect();
    assert_eq!(
        statuses,
        vec![401, 409],
        "the 4xx answers, newest first: {body}"
    );
    let newest: i64 = sqlx::query_scalar("SELECT id FROM deliveries WHERE http_status = 409")
        .fetch_one(&pool)
        .await
        .unwrap();
    // A delivery received after the last noted day (today's).
    let (got, body) = app.server_fn("delivery", &format!("id={newest}")).await;
    assert_eq!((got, body["row"]["http_status"].as_i64()), (200, Some(409)));

    // The events are forwarded (their payloads read through each event),
    // and an operator's re-delivery reads its stored request by id (five
    // days old: an admin's, with a reason): the dedup layer answers
    // completed and records the re-delivery.
    app.drain().await;
    assert_eq!(destination.count(), 9, "every event forwarded once");
    let (got, body) = app
        .server_fn(
            "redeliver",
            &format!("delivery_id={middle}&past_window_reason=checking%20day%205"),
        )
        .await;
    assert_eq!(got, 200, "{body}");
    assert_eq!(
        (body["redelivered"].as_i64(), body["outcome"].as_str()),
        (Some(middle), Some("completed"))
    );

    // An event's story through its first seen time: a copy received a
    // day later, and one whose statement began a moment before the claim's
    // (it waited on the claim's row lock), are in its timeline.
    let event: i64 = sqlx::query_scalar("SELECT id FROM events WHERE idem_key = 'k5'")
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO deliveries (source, received_at, event_id, idem_key, outcome, http_status, verified, headers, body_size)
         SELECT 'gh', e.first_seen_at + offs, e.id, 'k5', 'completed', 200, true, '{}', 0
         FROM events e, unnest(ARRAY[interval '1 day', interval '-2 seconds']) offs WHERE e.id = $1",
    )
    .bind(event)
    .execute(&pool)
    .await
    .unwrap();
    let (got, body) = app.server_fn("event", &format!("id={event}")).await;
    assert_eq!(got, 200, "{body}");
    // With the operator's re-delivery above: four.
    assert_eq!(body["deliveries_total"], 4, "{body}");
    assert_eq!(body["deliveries_shown"], 4, "{body}");
    assert_eq!(body["first_delivery"]["row"]["id"], middle);
}
