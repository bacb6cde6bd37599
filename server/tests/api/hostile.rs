//! Strangers at the socket (issue 15): clients that trickle headers or bodies,
//! sit idle, or open more connections than their share. Every case is a raw
//! TCP client against the real listener; the slow ones come from other
//! loopback addresses (127.0.0.2 and up), so the real deliveries from
//! 127.0.0.1 (a trusted proxy by default) are not counted with them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::{spawn_app, test_config, TestApp};

const SECRET: &[u8] = b"gh-secret";

fn config(limits: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
{limits}

[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
"#
        ),
        &[],
    )
}

/// A connection from `from` (a loopback address) to the app.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// Reads until the server closes the connection; what it sent, and when.
async fn read_until_closed(
    stream: &mut (impl AsyncReadExt + Unpin),
    within: Duration,
) -> Option<(Vec<u8>, Instant)> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some((seen, Instant::now())),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `head` and then one more byte of a header every `every`, until the
/// server closes the connection; when it did, or None within `within`.
async fn trickle_headers(
    mut stream: TcpStream,
    every: Duration,
    within: Duration,
) -> Option<Instant> {
    let started = tokio::time::Instant::now();
    if stream
        .write_all(b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .is_err()
    {
        return Some(Instant::now());
    }
    let mut buf = [0u8; 512];
    while started.elapsed() < within {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Some(Instant::now()),
                Ok(_) => {}
            },
            _ = tokio::time::sleep(every) => {
                if stream.write_all(b"a").await.is_err() {
                    return Some(Instant::now());
                }
            }
        }
    }
    None
}

/// Sends `head` and then a byte of body every 200 ms; what the server
/// answered before it closed the connection.
async fn trickle_body(to: SocketAddr, head: &[u8]) -> String {
    let (mut reader, mut writer) = connect_from("127.0.0.2", to).await.into_split();
    writer.write_all(head).await.unwrap();
    let trickle = async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if writer.write_all(b" ").await.is_err() {
                break;
            }
        }
    };
    let answered = tokio::select! {
        answered = read_until_closed(&mut reader, Duration::from_secs(30)) => answered,
        _ = trickle => None,
    };
    let (answer, _) = answered.expect("the server answers and closes");
    String::from_utf8_lossy(&answer).into_owned()
}

async fn deliver(app: &TestApp, id: &str) -> u16 {
    let body = format!(r#"{{"zen":"{id}"}}"#);
    app.github_delivery("gh", id, &body, SECRET).await
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn trickled_headers_are_cut_off_while_real_deliveries_are_answered(pool: PgPool) {
    let app = spawn_app(pool.clone(), config("header_timeout_secs = 2")).await;
    const SLOW: usize = 600;
    let started = Instant::now();
    let mut slow = tokio::task::JoinSet::new();
    for i in 0..SLOW {
        // 6 addresses: each stays within its share of connections.
        let stream = connect_from(&format!("127.0.0.{}", 2 + i % 6), app.addr).await;
        slow.spawn(trickle_headers(
            stream,
            Duration::from_millis(300),
            Duration::from_secs(60),
        ));
    }
    // Meanwhile, real deliveries are acknowledged.
    for n in 0..20 {
        assert_eq!(
            deliver(&app, &format!("real-{n}")).await,
            200,
            "delivery {n}"
        );
    }
    let mut last_closed = started;
    while let Some(closed) = slow.join_next().await {
        let closed = closed
            .unwrap()
            .expect("a trickling connection is closed by the server");
        last_closed = last_closed.max(closed);
    }
    let held = last_closed - started;
    assert!(
        held < Duration::from_secs(30),
        "the last slow connection was held {held:?}"
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 20, "only the real deliveries are recorded");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_trickled_body_gets_408_and_nothing_is_stored(pool: PgPool) {
    let app = spawn_app(pool.clone(), config("body_timeout_secs = 2")).await;
    let answer = trickle_body(
        app.addr,
        b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          X-GitHub-Event: push\r\nX-GitHub-Delivery: slow-1\r\n\
          X-Hub-Signature-256: sha256=00\r\nContent-Length: 1000\r\n\r\n{",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn silent_and_idle_connections_are_closed(pool: PgPool) {
    let app = spawn_app(
        pool,
        config("header_timeout_secs = 1\nidle_timeout_secs = 2"),
    )
    .await;
    // Connected, and never a byte.
    let mut silent = connect_from("127.0.0.2", app.addr).await;
    // One request answered, then quiet on a kept-alive HTTP/1.1 connection.
    let mut idle = connect_from("127.0.0.3", app.addr).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    for (name, stream) in [("silent", &mut silent), ("idle", &mut idle)] {
        assert!(
            read_until_closed(stream, Duration::from_secs(20))
                .await
                .is_some(),
            "the {name} connection is still open"
        );
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn an_idle_http2_connection_is_closed_and_a_busy_one_served(pool: PgPool) {
    let app = spawn_app(pool, config("idle_timeout_secs = 2")).await;
    let stream = connect_from("127.0.0.2", app.addr).await;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("HTTP/2 with prior knowledge");
    let connection = tokio::spawn(connection);
    for _ in 0..3 {
        let request = hyper::Request::get(app.url("/healthz"))
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::timeout(Duration::from_secs(20), connection)
        .await
        .expect("the idle HTTP/2 connection is closed by the server")
        .unwrap()
        .ok();
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn one_address_gets_only_its_share_of_connections(pool: PgPool) {
    let app = spawn_app(pool, config("max_connections_per_address = 20")).await;
    let hello = |mut stream: TcpStream| async move {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .ok()?;
        let mut buf = [0u8; 1024];
        let n = stream.read(&mut buf).await.ok()?;
        buf[..n].starts_with(b"HTTP/1.1 200").then_some(stream)
    };
    let mut held = Vec::new();
    for _ in 0..20 {
        let stream = connect_from("127.0.0.2", app.addr).await;
        held.push(hello(stream).await.expect("within the share"));
    }
    let over = connect_from("127.0.0.2", app.addr).await;
    assert!(hello(over).await.is_none(), "the 21st is closed unanswered");
    // Other addresses, and a trusted proxy beyond 20, are not affected.
    let other = connect_from("127.0.0.3", app.addr).await;
    assert!(hello(other).await.is_some());
    let mut proxied = Vec::new();
    for _ in 0..25 {
        let stream = connect_from("127.0.0.1", app.addr).await;
        proxied.push(hello(stream).await.expect("a trusted proxy has no share"));
    }
    // A closed connection gives its slot back.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let again = connect_from("127.0.0.2", app.addr).await;
        if hello(again).await.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn beyond_max_connections_a_client_waits_for_a_slot(pool: PgPool) {
    let app = spawn_app(pool, config("max_connections = 5")).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut stream = connect_from("127.0.0.1", app.addr).await;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(stream);
    }
    let mut sixth = connect_from("127.0.0.1", app.addr).await;
    sixth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(
        tokio::time::timeout(Duration::from_secs(1), sixth.read(&mut buf))
            .await
            .is_err(),
        "the sixth is not served while five are open"
    );
    drop(held.pop());
    let n = tokio::time::timeout(Duration::from_secs(10), sixth.read(&mut buf))
        .await
        .expect("served once a slot is free")
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn the_dashboard_reads_a_small_body_in_time_or_refuses_it(pool: PgPool) {
    let app = spawn_app(pool, config("body_timeout_secs = 2")).await;
    let big = "username=a&password=".to_owned() + &"x".repeat(100 * 1024);
    let response = app
        .client
        .post(app.url("/api/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", format!("http://{}", app.addr))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);

    let head = format!(
        "POST /api/login HTTP/1.1\r\nHost: x\r\nOrigin: http://{}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 500\r\n\r\nu",
        app.addr
    );
    let answer = trickle_body(app.addr, head.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

/// A GitHub delivery's status and body.
async fn deliver_answer(app: &TestApp, id: &str) -> (u16, Option<String>, String) {
    let body = format!(r#"{{"zen":"{id}"}}"#);
    let response = app
        .client
        .post(app.url("/hooks/gh"))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", id)
        .header(
            "x-hub-signature-256",
            format!(
                "sha256={}",
                crate::helpers::hmac_hex(SECRET, body.as_bytes())
            ),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, response.text().await.unwrap())
}

fn is_shed(answer: &(u16, Option<String>, String)) -> bool {
    answer.0 == 503 && answer.2.contains("too busy")
}

async fn stored_keys(pool: &PgPool) -> std::collections::HashSet<String> {
    sqlx::query_scalar::<_, String>("SELECT idem_key FROM deliveries WHERE idem_key IS NOT NULL")
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_saturated_claim_path_sheds_at_once_and_stores_nothing_it_shed(pool: PgPool) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let app = Arc::new(spawn_app(pool.clone(), config("")).await);
    // Every claim batch waits on this lock: the claim path is stuck.
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let shed_seen = Arc::new(AtomicUsize::new(0));
    let mut sent = tokio::task::JoinSet::new();
    for n in 0..1200 {
        let (app, shed_seen) = (app.clone(), shed_seen.clone());
        sent.spawn(async move {
            let id = format!("burst-{n}");
            let answer = deliver_answer(&app, &id).await;
            if is_shed(&answer) {
                shed_seen.fetch_add(1, Ordering::SeqCst);
            }
            (id, answer)
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while shed_seen.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    blocker.commit().await.unwrap();
    let mut answers = Vec::new();
    while let Some(answer) = sent.join_next().await {
        answers.push(answer.unwrap());
    }
    let stored = stored_keys(&pool).await;
    let shed: Vec<_> = answers.iter().filter(|(_, a)| is_shed(a)).collect();
    assert!(
        !shed.is_empty(),
        "nothing was shed while the claim path was stuck"
    );
    for (id, answer) in &answers {
        match answer.0 {
            200 => assert!(stored.contains(id), "{id} was acknowledged and not stored"),
            503 => assert_eq!(answer.1.as_deref(), Some("5"), "{id} has no Retry-After"),
            other => panic!("{id}: {other} {}", answer.2),
        }
    }
    for (id, _) in shed {
        assert!(!stored.contains(id), "{id} was shed yet stored");
    }
    // The path recovers at once.
    assert_eq!(deliver_answer(&app, "after").await.0, 200);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn bodies_beyond_the_memory_budget_are_refused_unread(pool: PgPool) {
    let app = spawn_app(
        pool.clone(),
        config("max_body_bytes = 4096\nmax_body_memory_bytes = 8192"),
    )
    .await;
    // Two senders declare 4 KiB each and send it slowly: the budget is taken.
    let mut slow = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3"] {
        let mut stream = connect_from(from, app.addr).await;
        stream
            .write_all(b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n{")
            .await
            .unwrap();
        slow.push(stream);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let (id, answer) = loop {
        // Until both slow requests hold their room.
        let id = format!("while-full-{}", rand::random::<u32>());
        let answer = deliver_answer(&app, &id).await;
        if answer.0 != 200 || Instant::now() > deadline {
            break (id, answer);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(is_shed(&answer), "{answer:?}");
    assert_eq!(answer.1.as_deref(), Some("5"));
    assert!(!stored_keys(&pool).await.contains(&id));
    drop(slow);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = deliver_answer(&app, "room-again").await;
        if answer.0 == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the budget never came back: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_flood_of_unsigned_megabytes_grows_the_database_by_a_bounded_amount(pool: PgPool) {
    use sha2::Digest;
    let app = spawn_app(pool.clone(), config("record_rejected_per_minute = 20")).await;
    let stranger = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let size = |pool: PgPool| async move {
        sqlx::query_scalar::<_, i64>("SELECT pg_total_relation_size('deliveries')")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let before = size(pool.clone()).await;
    // Random bytes: nothing for PostgreSQL's compression to shrink.
    let body: Vec<u8> = (0..1024 * 1024 - 64)
        .map(|_| rand::random::<u8>())
        .collect();
    const FLOOD: usize = 100;
    for n in 0..FLOOD {
        let response = stranger
            .post(app.url("/hooks/gh"))
            .header("x-github-event", "push")
            .header("x-github-delivery", format!("forged-{n}"))
            .header("x-hub-signature-256", "sha256=00")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "request {n}");
    }
    replaysafe_core::jobs::unrecorded::flush(&pool, &app.services.rejections)
        .await
        .unwrap();
    let growth = size(pool.clone()).await - before;
    assert!(
        growth < 2 * 1024 * 1024,
        "{FLOOD} MiB of rejected requests grew deliveries by {growth} bytes"
    );
    /// id, body_size, body, body_sha256, truncated
    type Kept = (i64, i32, Vec<u8>, Vec<u8>, bool);
    let rows: Vec<Kept> = sqlx::query_as(
        "SELECT id, body_size, body, body_sha256, truncated FROM deliveries ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    // 20 a minute: 40 if the flood crossed a minute's end.
    assert!((1..=40).contains(&rows.len()), "{} recorded", rows.len());
    let whole = sha2::Sha256::digest(&body).to_vec();
    for (_, body_size, kept, sha, truncated) in &rows {
        assert_eq!(*body_size as usize, body.len());
        assert_eq!(kept.as_slice(), &body[..8 * 1024]);
        assert_eq!(sha, &whole);
        assert!(truncated);
    }
    let unrecorded: i64 = sqlx::query_scalar(
        "SELECT sum(count)::bigint FROM unrecorded_rejections WHERE remote_addr = '127.0.0.2'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(unrecorded as usize + rows.len(), FLOOD);

    // The dashboard says how many were only counted, and what was kept.
    let (status, page) = app.server_fn("deliveries", "").await;
    assert_eq!(status, 200);
    assert_eq!(page["unrecorded"]["count"], unrecorded);
    assert_eq!(page["unrecorded"]["top"][0][0], "127.0.0.2");
    let first = rows[0].0;
    let (status, detail) = app.server_fn("delivery", &format!("id={first}")).await;
    assert_eq!(status, 200);
    assert_eq!(detail["excerpt"]["kept"], 8 * 1024);
    assert_eq!(detail["excerpt"]["sha256"], hex::encode(&whole));
    // An excerpt cannot verify again: re-delivering it is refused, not tried.
    let (status, refused) = app
        .server_fn("redeliver", &format!("delivery_id={first}"))
        .await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused.to_string().contains("excerpt"), "{refused}");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn x_forwarded_for_names_the_client_only_behind_a_trusted_proxy(pool: PgPool) {
    let app = spawn_app(pool.clone(), config("")).await;
    let from = |address: &str| {
        reqwest::Client::builder()
            .local_address(address.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap()
    };
    // (peer, X-Forwarded-For, the address recorded)
    let cases = [
        ("127.0.0.1", "198.51.100.7, 203.0.113.9", "203.0.113.9"),
        ("127.0.0.2", "203.0.113.10", "127.0.0.2"),
    ];
    for (n, (peer, forwarded, recorded)) in cases.into_iter().enumerate() {
        let client = from(peer);
        let response = client
            .post(app.url("/api/login"))
            .header("origin", format!("http://{}", app.addr))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-forwarded-for", forwarded)
            .body(format!("username=nobody{n}&password=wrong-password"))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_client_error(), "{}", response.status());
        let signed_in_from: String = sqlx::query_scalar(
            "SELECT remote_addr FROM audit_log WHERE action = 'login' AND username = $1",
        )
        .bind(format!("nobody{n}"))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            signed_in_from, recorded,
            "sign-in from {peer} with {forwarded}"
        );

        let response = client
            .post(app.url("/hooks/gh"))
            .header("x-forwarded-for", forwarded)
            .header("x-github-delivery", format!("xff-{n}"))
            .header("x-hub-signature-256", "sha256=00")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
        let delivered_from: String =
            sqlx::query_scalar("SELECT remote_addr FROM deliveries ORDER BY id DESC LIMIT 1")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(
            delivered_from, recorded,
            "delivery from {peer} with {forwarded}"
        );
    }
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn one_address_holds_only_its_share_of_the_body_memory(pool: PgPool) {
    // 64 KiB in all, 4 KiB (one whole body) per address.
    let app = spawn_app(
        pool.clone(),
        config("max_body_bytes = 4096\nmax_body_memory_bytes = 65536"),
    )
    .await;
    let hold = |from: &'static str| async move {
        let mut stream = connect_from(from, app.addr).await;
        stream
            .write_all(b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n{")
            .await
            .unwrap();
        stream
    };
    let _first = hold("127.0.0.2").await;
    // The same address's next body finds its share taken; another's does not.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = hold("127.0.0.2").await;
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(5), again.read(&mut buf))
            .await
            .expect("answered at once")
            .unwrap();
        if buf[..n].starts_with(b"HTTP/1.1 503") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    let other = connect_from("127.0.0.3", app.addr).await;
    let (mut reader, mut writer) = other.into_split();
    writer
        .write_all(b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = reader.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 401"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}
