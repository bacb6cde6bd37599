//! The edge under random input (issue 15): raw HTTP requests, seeded and
//! generated (methods, paths and their encodings, header counts and sizes,
//! bodies, Content-Length or chunked or neither, chunk sizes), against a
//! source of every provider. For each: an answer comes back, never a 5xx
//! for a client's mistake, and nothing is forwarded, since none is signed.
//! `EDGE_SEED=N` replays one seed; `EDGE_CASES` sets the cases per seed.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{spawn_app, test_config, Destination, TestApp};

const SLUGS: [&str; 9] = [
    "standard",
    "stripe",
    "github",
    "shopify",
    "slack",
    "twilio",
    "alipay",
    "wechatpay",
    "discord",
];

/// Headers the verifiers read, given garbage values.
const SIGNATURE_HEADERS: [&str; 16] = [
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "stripe-signature",
    "x-hub-signature-256",
    "x-github-delivery",
    "x-shopify-hmac-sha256",
    "x-shopify-webhook-id",
    "x-slack-signature",
    "x-slack-request-timestamp",
    "x-twilio-signature",
    "wechatpay-signature",
    "wechatpay-serial",
    "wechatpay-timestamp",
    "x-signature-ed25519",
    "x-signature-timestamp",
];

fn config(destination: &str) -> replaysafe_core::config::Config {
    use rsa::pkcs8::{EncodePublicKey, LineEnding};
    let mut rng = StdRng::seed_from_u64(7);
    let key = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
    let pem = key
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    let discord = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    test_config(
        &format!(
            r#"
max_body_bytes = 65536
[[source]]
slug = "standard"
provider = "standard"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
destination = "{destination}"
[[source]]
slug = "stripe"
provider = "stripe"
secrets = ["whsec_stripe"]
destination = "{destination}"
[[source]]
slug = "github"
provider = "github"
secrets = ["gh"]
destination = "{destination}"
[[source]]
slug = "shopify"
provider = "shopify"
secrets = ["shop"]
destination = "{destination}"
[[source]]
slug = "slack"
provider = "slack"
secrets = ["slack"]
destination = "{destination}"
[[source]]
slug = "twilio"
provider = "twilio"
secrets = ["token"]
public_url = "https://example.com/hooks/twilio"
destination = "{destination}"
[[source]]
slug = "alipay"
provider = "alipay"
public_key = """{pem}"""
destination = "{destination}"
[[source]]
slug = "wechatpay"
provider = "wechatpay"
api_v3_key = "0123456789abcdef0123456789ABCDEF"
platform_keys = {{ "SERIAL1" = """{pem}""" }}
destination = "{destination}"
[[source]]
slug = "discord"
provider = "discord"
mode = "sync"
public_key = "{}"
destination = "{destination}"
"#,
            hex::encode(discord.verifying_key().to_bytes())
        ),
        &[],
    )
}

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.gen_range(0..items.len())]
}

fn token(rng: &mut StdRng, max: usize) -> String {
    const CHARS: &[u8] =
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=,.:;/+ %";
    let len = rng.gen_range(0..=max);
    (0..len).map(|_| *pick(rng, CHARS) as char).collect()
}

fn body(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..6) {
        0 => Vec::new(),
        1 => (0..rng.gen_range(1..4096)).map(|_| rng.gen()).collect(),
        2 => format!(
            r#"{{"id":"evt_{}","type":"{}","data":{{"object":{{"id":{}}}}},"event_id":"{}","token":"{}"}}"#,
            token(rng, 12),
            token(rng, 20),
            rng.gen::<i64>(),
            token(rng, 8),
            token(rng, 8)
        )
        .into_bytes(),
        3 => (0..rng.gen_range(0..300))
            .map(|_| format!("{}={}", token(rng, 8), token(rng, 16)))
            .collect::<Vec<_>>()
            .join("&")
            .into_bytes(),
        4 => "a&".repeat(rng.gen_range(1..3000)).into_bytes(),
        _ => "\u{1F600}\u{0}\u{FEFF}é".repeat(rng.gen_range(1..200)).into_bytes(),
    }
}

/// One raw request, as a client that means no harm or a fuzzer would write it.
fn request(rng: &mut StdRng) -> Vec<u8> {
    let method = *pick(
        rng,
        &[
            "POST", "POST", "POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW",
        ],
    );
    let slug = *pick(rng, &SLUGS);
    let path = match rng.gen_range(0..8) {
        0 => format!("/hooks/{slug}?{}", token(rng, 200).replace(' ', "+")),
        1 => format!("/hooks/{}", slug.to_uppercase()),
        2 => format!("/hooks/%2e%2e/{slug}"),
        3 => format!("/hooks//{slug}"),
        4 => format!("/hooks/{slug}/extra"),
        5 => format!("/hooks/{slug}%00"),
        _ => format!("/hooks/{slug}"),
    };
    let payload = body(rng);
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for _ in 0..rng.gen_range(0..12) {
        let name = *pick(rng, &SIGNATURE_HEADERS);
        head += &format!("{name}: {}\r\n", token(rng, 120));
    }
    let many = if rng.gen_bool(0.1) { 150 } else { 10 };
    for _ in 0..rng.gen_range(0..many) {
        head += &format!(
            "x-{}: {}\r\n",
            token(rng, 10).replace([' ', ':', '/', ',', ';', '=', '%'], "a"),
            token(rng, 300)
        );
    }
    head += *pick(
        rng,
        &[
            "Content-Type: application/json\r\n",
            "Content-Type: application/x-www-form-urlencoded\r\n",
            "Content-Type: text/plain; charset=latin1\r\n",
            "Content-Encoding: gzip\r\n",
            "",
        ],
    );
    let mut out = Vec::new();
    match rng.gen_range(0..4) {
        // Chunked, in random pieces.
        0 => {
            head += "Transfer-Encoding: chunked\r\n\r\n";
            out.extend_from_slice(head.as_bytes());
            let mut rest = payload.as_slice();
            while !rest.is_empty() {
                let n = rng.gen_range(1..=rest.len().min(700));
                out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                out.extend_from_slice(&rest[..n]);
                out.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
        // A length that lies (shorter than the body: the rest is a bad next request).
        1 if !payload.is_empty() => {
            head += &format!(
                "Content-Length: {}\r\n\r\n",
                rng.gen_range(0..payload.len())
            );
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(&payload);
        }
        // Nothing about the body at all.
        2 => {
            head += "\r\n";
            out.extend_from_slice(head.as_bytes());
        }
        _ => {
            head += &format!("Content-Length: {}\r\n\r\n", payload.len());
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(&payload);
        }
    }
    out
}

/// Sends one request in random pieces and reads the status line of the answer.
async fn send(app: &TestApp, rng: &mut StdRng, raw: &[u8]) -> Result<u16, String> {
    let mut stream = tokio::net::TcpStream::connect(app.addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut rest = raw;
    while !rest.is_empty() {
        let n = rng.gen_range(1..=rest.len().min(4096));
        if stream.write_all(&rest[..n]).await.is_err() {
            // The server may answer (431, 413) before reading everything.
            break;
        }
        rest = &rest[n..];
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        while !answer.windows(2).any(|w| w == b"\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    if read.is_err() {
        return Err("no answer within 30 s".into());
    }
    let line = String::from_utf8_lossy(&answer);
    line.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status line: {line:?}"))
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn random_requests_to_every_provider_never_get_a_5xx_or_a_forward(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let seeds: Vec<u64> = match std::env::var("EDGE_SEED") {
        Ok(seed) => vec![seed.parse().unwrap()],
        Err(_) => (1..=3).collect(),
    };
    let cases: usize = std::env::var("EDGE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(150);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        for case in 0..cases {
            let raw = request(&mut rng);
            let status = send(&app, &mut rng, &raw).await.unwrap_or_else(|e| {
                panic!(
                    "seed {seed} case {case}: {e}\n{}",
                    String::from_utf8_lossy(&raw[..raw.len().min(600)])
                )
            });
            assert!(
                status < 500,
                "seed {seed} case {case}: {status} for\n{}",
                String::from_utf8_lossy(&raw[..raw.len().min(600)])
            );
            *statuses.entry(status).or_default() += 1;
        }
    }
    // The server is whole, and nothing unsigned went on.
    assert_eq!(
        app.client
            .get(app.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    app.drain().await;
    assert_eq!(
        destination.count(),
        0,
        "forwarded without a valid signature"
    );
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(events, 0, "claimed without a valid signature");
    assert!(statuses.len() > 3, "too little variety: {statuses:?}");
    println!("answers by status: {statuses:?}");
}
