//! The declarative verifier (issue 36, spec section 10): a source described
//! only by `[source.signature]` and `key`, no preset, verifies and dedups a
//! real signed stream over HTTP: duplicates and concurrent copies are one
//! event each, a bad signature and a stale timestamp are refused 401.

use base64::Engine;
use hmac::Mac;
use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{spawn_app, test_config, Destination, TestApp};

const SECRET: &str = "declared-secret-never-shown";

fn config(destination: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "acme"
provider = "hmac"
secrets = ["old-secret", "{SECRET}"]
destination = "{destination}"
key = "{{/data/id}}:{{/action}}"

[source.signature]
header = "X-Acme-Signature"
algorithm = "hmac-sha512"
encoding = "base64"
format = "kv"
kv_separator = ";"
signature_name = "s"
timestamp_name = "ts"
payload = "{{timestamp}}:{{method}}:{{body}}"
"#
        ),
        &[],
    )
}

/// Posts `body` signed as the Acme sender would, at `ts`.
async fn post(app: &TestApp, body: &str, ts: i64, secret: &str) -> u16 {
    let mut mac = hmac::Hmac::<sha2::Sha512>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{ts}:POST:{body}").as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    app.client
        .post(app.url("/hooks/acme"))
        .header("content-type", "application/json")
        .header(
            "x-acme-signature",
            format!("ts={ts}; s=bm90IGl0; s={signature}"),
        )
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_declared_source_verifies_and_dedups_a_signed_stream(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let now = chrono::Utc::now().timestamp();
    let body =
        |i: u32, n: u32| format!(r#"{{"action":"created","data":{{"id":"ord_{i}"}},"sent":{n}}}"#);
    for i in 0..20 {
        assert_eq!(post(&app, &body(i, 1), now, SECRET).await, 200);
        // The sender's retry: another send of the same event, signed anew.
        assert_eq!(post(&app, &body(i, 2), now + 1, SECRET).await, 200);
    }
    let copy = body(99, 1);
    let copies = (0..8).map(|_| post(&app, &copy, now, SECRET));
    for status in futures_util::future::join_all(copies).await {
        assert_eq!(status, 200);
    }
    // Forged, and captured long ago: refused.
    assert_eq!(post(&app, &body(50, 1), now, "a guess").await, 401);
    assert_eq!(post(&app, &body(51, 1), now - 3600, SECRET).await, 401);
    app.drain().await;

    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE source = 'acme'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(events, 21);
    let mut keys = destination.keys();
    keys.sort();
    keys.dedup();
    assert_eq!(destination.count(), 21, "each event forwarded once");
    assert_eq!(keys.len(), 21);
    assert!(keys.contains(&"acme:ord_99:created".to_owned()), "{keys:?}");
    let rejected: Vec<String> = sqlx::query_scalar(
        "SELECT reject_kind FROM deliveries WHERE source = 'acme' AND NOT verified ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rejected, ["signature", "timestamp"]);
    let verification: String = sqlx::query_scalar(
        "SELECT verification FROM deliveries WHERE source = 'acme' AND verified LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(verification, "hmac-sha512 signature matched secret 2 of 2");
}

#[test]
fn what_the_declarative_verifier_cannot_do_is_refused_at_start() {
    let parse = |signature: &str, key: &str| {
        replaysafe_core::config::parse_and_validate(
            None,
            &format!(
                "[[source]]\nslug = \"x\"\nprovider = \"hmac\"\nsecrets = [\"s\"]\n{key}\n[source.signature]\n{signature}\n"
            ),
            &|_| None,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    let ok_key = "key = \"{/id}\"";
    for (signature, key, names) in [
        (
            "header = \"x\"\nalgorithm = \"md5\"",
            ok_key,
            "signature.algorithm",
        ),
        // A public-key algorithm without the provider's key, a key for a
        // shared-secret one.
        (
            "header = \"x\"\nalgorithm = \"ed25519\"",
            ok_key,
            "public_key",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\npublic_key = \"k\"",
            ok_key,
            "signature.public_key",
        ),
        ("algorithm = \"hmac-sha256\"", ok_key, "signature.header"),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\nsignature_name = \"v1\"",
            ok_key,
            "signature.signature_name",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\npayload = \"{timestamp}.{body}\"",
            ok_key,
            "signature.payload",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\ntimestamp_format = \"unix\"",
            ok_key,
            "signature.timestamp_format",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\nnope = 1",
            ok_key,
            "nope",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"",
            "",
            "source[0].key",
        ),
        // A timestamp read but not signed would be anyone's to change.
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\ntimestamp_header = \"t\"",
            ok_key,
            "signature.payload",
        ),
        // A signature inside the body cannot sign the body.
        (
            "field = \"/sig\"\nalgorithm = \"hmac-sha256\"",
            ok_key,
            "signature.payload",
        ),
        // Two values touching: where one ends cannot be told.
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\npayload = \"{header:a}{body}\"",
            ok_key,
            "signature.payload",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\nformat = \"kv\"\nsignature_name = \"t\"\ntimestamp_name = \"t\"\npayload = \"{timestamp}.{body}\"",
            ok_key,
            "signature.timestamp_name",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\nformat = \"kv\"\nsignature_name = \"v=1\"",
            ok_key,
            "signature.signature_name",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"\nprefix = \"v1 \"",
            ok_key,
            "signature.prefix",
        ),
        (
            "header = \"x\"\nalgorithm = \"hmac-sha256\"",
            "key = \"{/a}{/b}\"",
            "source[0].key",
        ),
    ] {
        let error = parse(signature, key);
        assert!(error.contains(names), "{signature} / {key}: {error:?}");
    }
    // And on a provider with its own scheme.
    let error = replaysafe_core::config::parse_and_validate(
        None,
        "[[source]]\nslug = \"x\"\nprovider = \"github\"\nsecrets = [\"s\"]\n[source.signature]\nheader = \"x\"\nalgorithm = \"hmac-sha256\"\n",
        &|_| None,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(error.contains("source[0].signature"), "{error}");
}

/// Whoever holds one captured signed request re-posts it within the
/// timestamp's tolerance with the key's unsigned header changed: the guard
/// takes it for the first one's duplicate, on a declared source and on a
/// built-in one (Stripe signs its timestamp, not the header the key reads).
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_capture_reposted_under_a_new_unsigned_key_runs_once(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "loose"
provider = "hmac"
secrets = ["{SECRET}"]
destination = "{url}"
key = "{{header:X-Event-Id}}"

[source.signature]
header = "X-Sig"
algorithm = "hmac-sha256"
timestamp_header = "X-Ts"
payload = "{{timestamp}}.{{body}}"

[[source]]
slug = "stripe-orders"
provider = "stripe"
secrets = ["whsec_orders"]
destination = "{url}"
key = "{{header:X-Order}}"
"#,
            url = destination.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    let now = chrono::Utc::now().timestamp();
    let body = r#"{"type":"order.paid","id":"o-1"}"#;
    let signed = |secret: &str| {
        crate::helpers::hmac_hex(secret.as_bytes(), format!("{now}.{body}").as_bytes())
    };
    let declared = |event_id: &'static str| {
        app.client
            .post(app.url("/hooks/loose"))
            .header("content-type", "application/json")
            .header("x-sig", signed(SECRET))
            .header("x-ts", now.to_string())
            .header("x-event-id", event_id)
            .body(body)
            .send()
    };
    let stripe = |order: &'static str| {
        app.client
            .post(app.url("/hooks/stripe-orders"))
            .header("content-type", "application/json")
            .header(
                "stripe-signature",
                format!("t={now},v1={}", signed("whsec_orders")),
            )
            .header("x-order", order)
            .body(body)
            .send()
    };
    for (first, replayed) in [
        (declared("e-1"), declared("e-2")),
        (stripe("a"), stripe("b")),
    ] {
        assert_eq!(first.await.unwrap().status(), 200);
        assert_eq!(replayed.await.unwrap().status(), 200);
    }
    app.drain().await;
    let keys: Vec<(String, String)> =
        sqlx::query_as("SELECT source, idem_key FROM events ORDER BY source")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        keys,
        [
            ("loose".to_owned(), "e-1".to_owned()),
            ("stripe-orders".to_owned(), "a".to_owned())
        ]
    );
    assert_eq!(destination.count(), 2, "each forwarded once");
    let replays: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE verification LIKE '%replay%'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(replays, 2);
}
