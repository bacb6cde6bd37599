//! The receiver over real HTTP against a real database: verify, key, claim.

use std::collections::HashMap;

use base64::Engine;
use hmac::{Hmac, Mac};
use replaysafe_core::db::MIGRATOR;
use sha2::Sha256;
use sqlx::PgPool;

use crate::helpers::{spawn_app, spawn_app_with, test_config, TestApp};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ROTATED_IN: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn config() -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
max_body_bytes = 4096

[[source]]
slug = "std"
provider = "standard"
secrets = ["{SECRET}", "{ROTATED_IN}"]

[[source]]
slug = "stripe"
provider = "stripe"
secrets = ["whsec_stripe"]

[[source]]
slug = "slack"
provider = "slack"
secrets = ["slack-secret"]
"#
        ),
        &[],
    )
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Headers of a Standard Webhooks delivery signed with `secret`.
fn standard_headers(secret: &str, id: &str, ts: i64, body: &str) -> Vec<(String, String)> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(secret.trim_start_matches("whsec_")).unwrap();
    let sig = b64.encode(hmac(&key, format!("{id}.{ts}.{body}").as_bytes()));
    vec![
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), ts.to_string()),
        ("webhook-signature".into(), format!("v1,{sig}")),
        ("content-type".into(), "application/json".into()),
    ]
}

async fn post(
    app: &TestApp,
    slug: &str,
    headers: &[(String, String)],
    body: &str,
) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(&format!("/hooks/{slug}")))
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request.send().await.unwrap()
}

fn outcome(response: &reqwest::Response) -> String {
    response.headers()["x-replaysafe-outcome"]
        .to_str()
        .unwrap()
        .to_owned()
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_signed_delivery_is_claimed_recorded_and_queued(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let body = r#"{"type":"invoice.paid","amount":42}"#;
    let mut headers = standard_headers(SECRET, "msg_1", now(), body);
    headers.push(("authorization".into(), "Bearer provider-token".into()));

    let response = post(&app, "std", &headers, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(outcome(&response), "claimed");

    let (state, receive_count): (String, i32) = sqlx::query_as(
        "SELECT state, receive_count FROM event_summaries WHERE source = 'std' AND idem_key = 'msg_1'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((state.as_str(), receive_count), ("queued", 1));
    let (stored_body, headers, verification, status): (Vec<u8>, serde_json::Value, String, i16) =
        sqlx::query_as(
            "SELECT d.body, d.headers, d.verification, d.http_status FROM deliveries d
         JOIN events e ON e.first_delivery_id = d.id WHERE e.idem_key = 'msg_1'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        stored_body,
        body.as_bytes(),
        "the body is kept byte for byte"
    );
    assert_eq!(status, 200);
    assert_eq!(verification, "v1 signature matched secret 1 of 2");
    let shown = headers.to_string();
    assert!(
        !shown.contains("provider-token"),
        "Authorization is redacted: {shown}"
    );
    assert!(shown.contains("[redacted]"));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn the_same_delivery_ten_times_claims_once(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let body = r#"{"n":1}"#;
    let headers = standard_headers(SECRET, "msg_repeat", now(), body);
    let mut outcomes = Vec::new();
    for _ in 0..10 {
        let response = post(&app, "std", &headers, body).await;
        assert_eq!(response.status(), 200);
        outcomes.push(outcome(&response));
    }
    assert_eq!(outcomes[0], "claimed");
    assert!(
        outcomes[1..].iter().all(|o| o == "in_progress"),
        "{outcomes:?}"
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM events").await, 1);
    assert_eq!(
        count(&pool, "SELECT receive_count::bigint FROM events").await,
        10
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM deliveries").await, 10);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM deliveries WHERE outcome = 'claimed'"
        )
        .await,
        1
    );
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn twenty_at_once_claim_exactly_once(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let body = r#"{"n":2}"#;
    let headers = standard_headers(SECRET, "msg_storm", now(), body);
    let sends = (0..20).map(|_| post(&app, "std", &headers, body));
    let responses = futures_util::future::join_all(sends).await;
    let mut tally: HashMap<String, usize> = HashMap::new();
    for response in &responses {
        assert_eq!(response.status(), 200);
        *tally.entry(outcome(response)).or_default() += 1;
    }
    assert_eq!(tally.get("claimed"), Some(&1), "{tally:?}");
    assert_eq!(tally.get("in_progress"), Some(&19), "{tally:?}");
    assert_eq!(count(&pool, "SELECT count(*) FROM events").await, 1);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn two_servers_on_one_database_claim_once(pool: PgPool) {
    let url = replaysafe_core::config::Secret::new(crate::helpers::database_url(&pool).await);
    let first = spawn_app(pool.clone(), config()).await;
    let second = spawn_app_with(replaysafe_core::db::pool(&url, 8).await.unwrap(), config()).await;
    let body = r#"{"n":3}"#;
    let headers = standard_headers(SECRET, "msg_two_servers", now(), body);
    let sends = (0..20).map(|i| {
        let app = if i % 2 == 0 { &first } else { &second };
        post(app, "std", &headers, body)
    });
    let responses = futures_util::future::join_all(sends).await;
    let claimed = responses.iter().filter(|r| outcome(r) == "claimed").count();
    assert_eq!(claimed, 1);
    assert_eq!(count(&pool, "SELECT count(*) FROM events").await, 1);
    assert_eq!(count(&pool, "SELECT count(*) FROM deliveries").await, 20);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_rotated_in_secret_is_accepted(pool: PgPool) {
    let app = spawn_app(pool, config()).await;
    let body = "{}";
    let response = post(
        &app,
        "std",
        &standard_headers(ROTATED_IN, "msg_rot", now(), body),
        body,
    )
    .await;
    assert_eq!(response.status(), 200);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn bad_signatures_are_401_and_recorded_with_their_reason(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let body = r#"{"amount":1}"#;
    let good = standard_headers(SECRET, "msg_bad", now(), body);

    let tampered = post(&app, "std", &good, r#"{"amount":1000}"#).await;
    assert_eq!(tampered.status(), 401);
    assert_eq!(outcome(&tampered), "rejected");
    let wrong_secret = standard_headers("whsec_AAAAAAAAAAAAAAAAAAAAAAAA", "msg_bad", now(), body);
    assert_eq!(post(&app, "std", &wrong_secret, body).await.status(), 401);
    let stale = standard_headers(SECRET, "msg_bad", now() - 301, body);
    assert_eq!(post(&app, "std", &stale, body).await.status(), 401);
    let future = standard_headers(SECRET, "msg_bad", now() + 301, body);
    assert_eq!(post(&app, "std", &future, body).await.status(), 401);
    let unsigned: Vec<(String, String)> = good
        .iter()
        .filter(|(n, _)| n != "webhook-signature")
        .cloned()
        .collect();
    assert_eq!(post(&app, "std", &unsigned, body).await.status(), 401);

    assert_eq!(
        count(&pool, "SELECT count(*) FROM events").await,
        0,
        "nothing claimed"
    );
    let reasons: Vec<String> = sqlx::query_scalar(
        "SELECT reject_reason FROM deliveries WHERE outcome = 'rejected' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(reasons.len(), 5);
    assert_eq!(reasons[0], "no v1 signature matches");
    assert!(reasons[2].contains("older than"), "{reasons:?}");
    assert!(reasons[3].contains("future"), "{reasons:?}");
    assert_eq!(reasons[4], "missing webhook-signature header");
    let statuses: Vec<i16> = sqlx::query_scalar("SELECT http_status FROM deliveries")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(statuses.iter().all(|&s| s == 401));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_verified_delivery_without_its_key_is_400(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let body = r#"{"object":"event"}"#;
    let t = now();
    let sig = hex::encode(hmac(b"whsec_stripe", format!("{t}.{body}").as_bytes()));
    let headers = vec![("stripe-signature".to_owned(), format!("t={t},v1={sig}"))];
    let response = post(&app, "stripe", &headers, body).await;
    assert_eq!(response.status(), 400);
    let reason: String = sqlx::query_scalar("SELECT reject_reason FROM deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(reason, "Stripe event has no id");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn limits_unknown_slugs_and_methods(pool: PgPool) {
    let app = spawn_app(pool.clone(), config()).await;
    let big = "x".repeat(5000);
    let response = post(
        &app,
        "std",
        &standard_headers(SECRET, "msg_big", now(), &big),
        &big,
    )
    .await;
    assert_eq!(response.status(), 413);
    let (outcome, body_stored): (String, bool) =
        sqlx::query_as("SELECT outcome, body IS NOT NULL FROM deliveries")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((outcome.as_str(), body_stored), ("rejected", false));

    assert_eq!(post(&app, "nope", &[], "{}").await.status(), 404);
    let get = app.client.get(app.url("/hooks/std")).send().await.unwrap();
    assert_eq!(get.status(), 405);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn slack_retries_of_held_events_are_told_not_to_retry(pool: PgPool) {
    let app = spawn_app(pool, config()).await;
    let body = r#"{"type":"event_callback","event_id":"Ev42"}"#;
    let ts = now();
    let sig = hex::encode(hmac(b"slack-secret", format!("v0:{ts}:{body}").as_bytes()));
    let mut headers = vec![
        ("x-slack-request-timestamp".to_owned(), ts.to_string()),
        ("x-slack-signature".to_owned(), format!("v0={sig}")),
    ];
    let first = post(&app, "slack", &headers, body).await;
    assert_eq!(outcome(&first), "claimed");
    assert!(first.headers().get("x-slack-no-retry").is_none());
    headers.push(("x-slack-retry-num".to_owned(), "1".to_owned()));
    let retry = post(&app, "slack", &headers, body).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["x-slack-no-retry"], "1");
}

#[tokio::test]
async fn an_unreachable_database_answers_503_within_5_seconds() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = listener.local_addr().unwrap().port();
    drop(listener);
    let url =
        replaysafe_core::config::Secret::new(format!("postgres://nobody@127.0.0.1:{dead_port}/x"));
    let app = spawn_app_with(replaysafe_core::db::pool(&url, 2).await.unwrap(), config()).await;
    let body = "{}";
    let started = std::time::Instant::now();
    let response = post(
        &app,
        "std",
        &standard_headers(SECRET, "msg_down", now(), body),
        body,
    )
    .await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A client's mistake is still the client's: not a 5xx.
    let big = "x".repeat(5000);
    let response = post(
        &app,
        "std",
        &standard_headers(SECRET, "msg_big", now(), &big),
        &big,
    )
    .await;
    assert_eq!(response.status(), 413);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn send_signs_every_supported_provider_and_repeats_make_duplicates(pool: PgPool) {
    let mut config = test_config(
        r#"
[[source]]
slug = "std"
provider = "standard"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[source]]
slug = "stripe"
provider = "stripe"
secrets = ["whsec_stripe"]
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
[[source]]
slug = "shop"
provider = "shopify"
secrets = ["shop-secret"]
[[source]]
slug = "slack"
provider = "slack"
secrets = ["slack-secret"]
"#,
        &[],
    );
    let app = spawn_app(pool.clone(), config.clone()).await;
    config.public_url = app.url("");
    for source in ["std", "stripe", "gh", "shop", "slack"] {
        let args = replaysafe::cli::send::SendArgs {
            source: source.into(),
            events: 2,
            repeat: 3,
            concurrency: 3,
            url: None,
            json: false,
        };
        replaysafe::cli::send::run(&config, args).await.unwrap();
        let (events, deliveries, claimed): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM events WHERE source = $1),
                    (SELECT count(*) FROM deliveries WHERE source = $1),
                    (SELECT count(*) FROM deliveries WHERE source = $1 AND outcome = 'claimed')",
        )
        .bind(source)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!((events, deliveries, claimed), (2, 6, 2), "{source}");
    }
}

/// Alipay and WeChat Pay sign with their private keys: keys generated here,
/// requests signed as their docs describe, over real HTTP.
#[sqlx::test(migrator = "MIGRATOR")]
async fn alipay_and_wechatpay_with_keys_generated_in_the_test(pool: PgPool) {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    use rsa::pkcs8::{EncodePublicKey, LineEnding};
    use rsa::signature::{SignatureEncoding, Signer};

    let b64 = base64::engine::general_purpose::STANDARD;
    let mut rng = rand::thread_rng();
    let alipay_key = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
    let wechat_key = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
    let pem = |k: &rsa::RsaPrivateKey| k.to_public_key().to_public_key_pem(LineEnding::LF).unwrap();
    let api_v3_key = "0123456789abcdef0123456789ABCDEF";
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "alipay"
provider = "alipay"
public_key = """{}"""

[[source]]
slug = "wechat"
provider = "wechatpay"
api_v3_key = "{api_v3_key}"
platform_keys = {{ "5157F09EFDC096DE15EBE81A47057A7232F1B8E1" = """{}""" }}
"#,
            pem(&alipay_key),
            pem(&wechat_key)
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;

    // Alipay: RSA2 over the sorted params except sign and sign_type, values decoded.
    let params = [
        ("notify_id", "ac05099524730693a8b330c5ecf72da9786"),
        ("out_trade_no", "6823789339978248"),
        ("subject", "caf\u{e9} & cake"),
        ("total_amount", "88.88"),
        ("trade_status", "TRADE_SUCCESS"),
    ];
    let signed_text = params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let signer = rsa::pkcs1v15::SigningKey::<Sha256>::new(alipay_key);
    let sign = b64.encode(signer.sign(signed_text.as_bytes()).to_bytes());
    let form = |params: &[(&str, &str)], sign: &str| {
        let mut pairs: Vec<String> = params
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
                )
            })
            .collect();
        pairs.push(format!(
            "sign={}",
            form_urlencoded::byte_serialize(sign.as_bytes()).collect::<String>()
        ));
        pairs.push("sign_type=RSA2".into());
        pairs.join("&")
    };
    let content_type = [(
        "content-type".to_owned(),
        "application/x-www-form-urlencoded".to_owned(),
    )];
    let response = post(&app, "alipay", &content_type, &form(&params, &sign)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.text().await.unwrap(),
        "success",
        "Alipay needs exactly this body"
    );
    let mut tampered = params;
    tampered[3] = ("total_amount", "0.01");
    assert_eq!(
        post(&app, "alipay", &content_type, &form(&tampered, &sign))
            .await
            .status(),
        401
    );

    // WeChat Pay API v3: resource encrypted under the API v3 key, RSA over ts\nnonce\nbody\n.
    let cipher = aes_gcm::Aes256Gcm::new_from_slice(api_v3_key.as_bytes()).unwrap();
    let ciphertext = cipher
        .encrypt(
            aes_gcm::Nonce::from_slice(b"fdasflkja484"),
            Payload {
                msg: br#"{"out_trade_no":"1217752501201407033233368018"}"#,
                aad: b"transaction",
            },
        )
        .unwrap();
    let body = serde_json::json!({
        "id": "EV-2018022511223320873",
        "event_type": "TRANSACTION.SUCCESS",
        "resource": {"algorithm": "AEAD_AES_256_GCM", "ciphertext": b64.encode(ciphertext),
                     "nonce": "fdasflkja484", "associated_data": "transaction"}
    })
    .to_string();
    let ts = now().to_string();
    let signer = rsa::pkcs1v15::SigningKey::<Sha256>::new(wechat_key);
    let signature = b64.encode(
        signer
            .sign(format!("{ts}\nnonce-1\n{body}\n").as_bytes())
            .to_bytes(),
    );
    let headers = |signature: &str| {
        vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            (
                "wechatpay-serial".to_owned(),
                "5157F09EFDC096DE15EBE81A47057A7232F1B8E1".to_owned(),
            ),
            ("wechatpay-timestamp".to_owned(), ts.clone()),
            ("wechatpay-nonce".to_owned(), "nonce-1".to_owned()),
            ("wechatpay-signature".to_owned(), signature.to_owned()),
        ]
    };
    let response = post(&app, "wechat", &headers(&signature), &body).await;
    assert_eq!(response.status(), 204);
    assert_eq!(response.headers()["x-replaysafe-outcome"], "claimed");
    let probe = post(
        &app,
        "wechat",
        &headers(&format!("WECHATPAY/SIGNTEST/{signature}")),
        &body,
    )
    .await;
    assert_eq!(probe.status(), 401, "signature probes must fail");
    let reason: String = sqlx::query_scalar(
        "SELECT reject_reason FROM deliveries WHERE source = 'wechat' AND outcome = 'rejected'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(reason.contains("probe"), "{reason}");
}

/// A verified delivery of source `std` for the batcher, its key in its body.
pub fn pending_claim(idem_key: String) -> replaysafe_core::receiver::batch::PendingClaim {
    replaysafe_core::receiver::batch::PendingClaim {
        source: "std".into(),
        verification: "test".into(),
        query: None,
        content_type: Some("application/json".into()),
        headers: serde_json::json!([["webhook-id", idem_key]]),
        body: format!("{{\"k\":\"{idem_key}\"}}").into_bytes(),
        idem_key,
        remote_addr: None,
        started: std::time::Instant::now(),
        replay_digest: None,
        plan: vec![replaysafe_core::receiver::claim::Route {
            destination: "default".into(),
            wanted: true,
            ordering_key: None,
        }],
        event_type: None,
    }
}

/// The group-commit batcher directly: duplicates inside one batch, duplicates
/// of stored events, and one claim per key whatever the interleaving.
#[sqlx::test(migrator = "MIGRATOR")]
async fn batched_claims_claim_each_key_once(pool: PgPool) {
    use replaysafe_core::receiver::batch::ClaimBatcher;
    replaysafe_core::db::sources::sync(&pool, &config())
        .await
        .unwrap();
    let batcher = ClaimBatcher::start(pool.clone(), 1);
    let pending = |key: usize| pending_claim(format!("key-{key}"));
    for round in 0..2 {
        let claims = (0..50).map(|i| batcher.claim(pending(i % 10)));
        let results = futures_util::future::join_all(claims).await;
        let claimed = results
            .iter()
            .filter(|r| {
                r.as_ref().unwrap().outcome == replaysafe_core::receiver::claim::Outcome::Claimed
            })
            .count();
        assert_eq!(claimed, if round == 0 { 10 } else { 0 }, "round {round}");
    }
    assert_eq!(count(&pool, "SELECT count(*) FROM events").await, 10);
    assert_eq!(
        count(&pool, "SELECT min(receive_count)::bigint FROM events").await,
        10
    );
    assert_eq!(
        count(&pool, "SELECT max(receive_count)::bigint FROM events").await,
        10
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM deliveries").await, 100);
    assert_eq!(
        count(&pool, "SELECT count(DISTINCT id) FROM deliveries").await,
        100
    );
    // Each event's first delivery is its claim, with its own body.
    let mismatched = count(
        &pool,
        "SELECT count(*) FROM events e JOIN deliveries d ON d.id = e.first_delivery_id
         WHERE d.outcome <> 'claimed' OR d.idem_key <> e.idem_key OR d.event_id <> e.id",
    )
    .await;
    assert_eq!(mismatched, 0);
}

/// Two batchers on one database (as two server processes), two committers
/// each, claiming the same keys in opposite orders: every key is claimed
/// once, every copy is recorded and counted, and no batch fails (a deadlock
/// between batches would answer 503). A duplicate's outcome is its event's
/// state, whether the copy came in the same batch as the claim or later.
#[sqlx::test(migrator = "MIGRATOR")]
async fn concurrent_batches_never_deadlock_and_count_every_copy(pool: PgPool) {
    use replaysafe_core::receiver::batch::ClaimBatcher;
    use replaysafe_core::receiver::claim::Outcome;
    replaysafe_core::db::sources::sync(&pool, &config())
        .await
        .unwrap();
    let pending = |key: usize| pending_claim(format!("key-{key:02}"));
    let (a, b) = (
        ClaimBatcher::start(pool.clone(), 2),
        ClaimBatcher::start(pool.clone(), 2),
    );
    let mut claims = Vec::new();
    for round in 0..10 {
        for key in 0..20 {
            claims.push(a.claim(pending(key)));
            claims.push(b.claim(pending(if round % 2 == 0 { 19 - key } else { key })));
        }
    }
    let results = futures_util::future::join_all(claims).await;
    let outcomes: Vec<Outcome> = results
        .into_iter()
        .map(|r| r.expect("no batch failed").outcome)
        .collect();
    assert_eq!(
        outcomes.iter().filter(|&&o| o == Outcome::Claimed).count(),
        20
    );
    assert!(outcomes
        .iter()
        .all(|&o| o == Outcome::Claimed || o == Outcome::InProgress));
    assert_eq!(count(&pool, "SELECT count(*) FROM events").await, 20);
    assert_eq!(
        count(&pool, "SELECT sum(receive_count)::bigint FROM events").await,
        400
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM deliveries").await, 400);

    // Settled events (by the real transitions): a later copy reports the event's state.
    let runnable = replaysafe_core::events::Runnable::new(
        [("std", "default", std::time::Duration::from_secs(5))],
        std::time::Duration::from_secs(25),
    );
    let mut conn = pool.acquire().await.unwrap();
    let leased = replaysafe_core::events::lease(&mut conn, "settler", 20, &runnable)
        .await
        .unwrap();
    for l in leased {
        let next = match l.idem_key.as_str() {
            "key-00" => replaysafe_core::events::Next::Completed,
            "key-01" => replaysafe_core::events::Next::Dead("refused".into()),
            _ => continue,
        };
        let done = replaysafe_core::events::Done {
            leased: l,
            record: Default::default(),
            next,
            response: None,
        };
        assert!(replaysafe_core::events::finish(&pool, "settler", &done)
            .await
            .unwrap());
    }
    let later = futures_util::future::join_all([
        a.claim(pending(0)),
        a.claim(pending(1)),
        a.claim(pending(0)),
    ])
    .await;
    let later: Vec<Outcome> = later.into_iter().map(|r| r.unwrap().outcome).collect();
    assert_eq!(
        later,
        [Outcome::Completed, Outcome::Dead, Outcome::Completed]
    );
    assert_eq!(
        count(
            &pool,
            "SELECT receive_count::bigint FROM events WHERE idem_key = 'key-00'"
        )
        .await,
        22
    );
}
