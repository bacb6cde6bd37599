//! Strangers at the socket (issue 15): clients that trickle headers or bodies,
//! sit idle, or open more connections than their share. Every case is a raw
//! TCP client against the real listener; the slow ones come from other
//! loopback addresses (127.0.0.2 and up), so the real deliveries from
//! 127.0.0.1 (a trusted proxy by default) are not counted with them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use replaysafe::db::MIGRATOR;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::{spawn_app, test_config, TestApp};

const SECRET: &[u8] = b"gh-secret";

fn config(limits: &str) -> replaysafe::config::Config {
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
