//! Providers as data (issue 36): a source names a preset (`provider =
//! "paddle"`) and verifies, keys and dedups that provider's real signed
//! stream over HTTP, signed here as each provider documents it.

use base64::Engine;
use hmac::Mac;
use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{hmac_hex, spawn_app, test_config, Destination, TestApp};

fn config(destination: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "billing"
provider = "paddle"
secrets = ["pdl_ntfset_secret"]
destination = "{destination}"

[[source]]
slug = "mail"
provider = "mailgun"
secrets = ["key-mailgun"]
destination = "{destination}"

[[source]]
slug = "stream"
provider = "twitch"
secrets = ["twitch-secret"]
destination = "{destination}"

[[source]]
slug = "auth"
provider = "clerk"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
destination = "{destination}"
"#
        ),
        &[],
    )
}

async fn post(app: &TestApp, slug: &str, headers: &[(&str, String)], body: &str) -> u16 {
    let mut request = app
        .client
        .post(app.url(&format!("/hooks/{slug}")))
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

/// Paddle: `ts=..;h1=..` over `ts:body`, keyed by `event_id`.
async fn paddle(app: &TestApp, event_id: &str, ts: i64, secret: &str) -> u16 {
    let body =
        format!(r#"{{"event_id":"{event_id}","event_type":"transaction.paid","data":{{}}}}"#);
    let h1 = hmac_hex(secret.as_bytes(), format!("{ts}:{body}").as_bytes());
    let header = format!("ts={ts};h1={h1}");
    post(app, "billing", &[("paddle-signature", header)], &body).await
}

/// Mailgun: the signature in the body over `timestamp + token`.
fn mailgun_body(event_id: &str, ts: i64, token: &str, secret: &str) -> String {
    let signature = hmac_hex(secret.as_bytes(), format!("{ts}{token}").as_bytes());
    format!(
        r#"{{"signature":{{"timestamp":"{ts}","token":"{token}","signature":"{signature}"}},"event-data":{{"id":"{event_id}","event":"delivered"}}}}"#
    )
}

/// Twitch: `sha256=` over `id + timestamp + body`, keyed by the message id.
async fn twitch(app: &TestApp, id: &str, ts: &str, body: &str) -> u16 {
    let signature = hmac_hex(b"twitch-secret", format!("{id}{ts}{body}").as_bytes());
    let headers = [
        ("twitch-eventsub-message-id", id.to_owned()),
        ("twitch-eventsub-message-timestamp", ts.to_owned()),
        (
            "twitch-eventsub-message-signature",
            format!("sha256={signature}"),
        ),
        ("twitch-eventsub-message-type", "notification".to_owned()),
        (
            "twitch-eventsub-subscription-type",
            "channel.follow".to_owned(),
        ),
    ];
    post(app, "stream", &headers, body).await
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn presets_verify_key_and_dedup_their_providers_streams(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let now = chrono::Utc::now().timestamp();

    // Paddle re-signs each send: a retry is a duplicate by event_id; a
    // forgery and a send older than the window are refused.
    assert_eq!(paddle(&app, "evt_01", now, "pdl_ntfset_secret").await, 200);
    assert_eq!(
        paddle(&app, "evt_01", now + 1, "pdl_ntfset_secret").await,
        200
    );
    assert_eq!(paddle(&app, "evt_02", now, "a guess").await, 401);
    assert_eq!(
        paddle(&app, "evt_03", now - 600, "pdl_ntfset_secret").await,
        401
    );

    // Mailgun signs a token, not the event: a captured request re-posted
    // with another event id is the first one's duplicate (each token once).
    let first = mailgun_body("mg-1", now, "tok-aaaa", "key-mailgun");
    assert_eq!(post(&app, "mail", &[], &first).await, 200);
    let forged = first.replace("\"mg-1\"", "\"mg-forged\"");
    assert_eq!(post(&app, "mail", &[], &forged).await, 200);
    let second = mailgun_body("mg-2", now, "tok-bbbb", "key-mailgun");
    assert_eq!(post(&app, "mail", &[], &second).await, 200);

    // Twitch: RFC 3339 timestamps with seven fractional digits; a resend
    // keeps its message id.
    let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let ts = format!("{}Z", &ts[..ts.len() - 3]);
    let body = r#"{"subscription":{"type":"channel.follow"},"event":{"user_id":"1"}}"#;
    assert_eq!(twitch(&app, "msg-1", &ts, body).await, 200);
    assert_eq!(twitch(&app, "msg-1", &ts, body).await, 200);

    // Clerk signs through Svix: keyed by svix-id.
    let key = base64::engine::general_purpose::STANDARD
        .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        .unwrap();
    let body = r#"{"type":"user.created","data":{"id":"user_1"}}"#;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("msg_clerk_1.{now}.{body}").as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let headers = [
        ("svix-id", "msg_clerk_1".to_owned()),
        ("svix-timestamp", now.to_string()),
        ("svix-signature", format!("v1,{signature}")),
    ];
    assert_eq!(post(&app, "auth", &headers, body).await, 200);
    app.drain().await;

    let events: Vec<(String, String)> =
        sqlx::query_as("SELECT source, idem_key FROM events ORDER BY source, idem_key")
            .fetch_all(&pool)
            .await
            .unwrap();
    let events: Vec<(&str, &str)> = events
        .iter()
        .map(|(s, k)| (s.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        events,
        [
            ("auth", "msg_clerk_1"),
            ("billing", "evt_01"),
            ("mail", "mg-1"),
            ("mail", "mg-2"),
            ("stream", "msg-1"),
        ]
    );
    assert_eq!(destination.count(), 5, "each forwarded once");
    let rejected: Vec<String> = sqlx::query_scalar(
        "SELECT reject_kind FROM deliveries WHERE source = 'billing' AND NOT verified ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rejected, ["signature", "timestamp"]);
}

#[test]
fn presets_take_no_signature_table_nor_reconciliation() {
    let error = |source: &str| {
        replaysafe_core::config::parse_and_validate(
            None,
            &format!("[[source]]\nslug = \"x\"\nsecrets = [\"s\"]\n{source}\n"),
            &|_| None,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    let signature = error(
        "provider = \"paddle\"\n[source.signature]\nheader = \"x\"\nalgorithm = \"hmac-sha256\"",
    );
    assert!(signature.contains("source[0].signature"), "{signature}");
    let reconcile = error(
        "provider = \"square\"\npublic_url = \"https://hooks.example/x\"\n[source.reconcile]\napi_key = \"k\"",
    );
    assert!(reconcile.contains("reconcile"), "{reconcile}");
    // {url} is signed by Square: without public_url it cannot verify.
    let url = error("provider = \"square\"");
    assert!(url.contains("public_url"), "{url}");
    let unknown = error("provider = \"nope\"");
    for name in ["paddle", "twitch", "svix", "stripe"] {
        assert!(unknown.contains(name), "{unknown}");
    }
}

const CHALLENGE: &str =
    r#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"type":"channel.follow"}}"#;

/// Zoom's url_validation and Twitch's challenge are answered by replaysafe
/// itself, in ack mode and in sync mode, only when signed; they are kept
/// and never forwarded. Twitch's revocation is an event like any other.
#[sqlx::test(migrator = "MIGRATOR")]
async fn zoom_and_twitch_handshakes_are_answered_by_replaysafe(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "meetings"
provider = "zoom"
secrets = ["old-token", "zoom-token"]
destination = "{url}"
# A key the handshake's body cannot give: it is answered all the same.
key = "{{/payload/object/uuid}}"

[[source]]
slug = "meetings-sync"
provider = "zoom"
mode = "sync"
secrets = ["zoom-token"]
destination = "{url}"

[[source]]
slug = "stream"
provider = "twitch"
secrets = ["twitch-secret"]
destination = "{url}"
"#,
            url = destination.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    let now = chrono::Utc::now().timestamp();
    let validate = |slug: &'static str, token: &'static str, secret: &'static str| {
        let body = format!(
            r#"{{"payload":{{"plainToken":"{token}"}},"event_ts":{now}000,"event":"endpoint.url_validation"}}"#
        );
        let signature = hmac_hex(secret.as_bytes(), format!("v0:{now}:{body}").as_bytes());
        app.client
            .post(app.url(&format!("/hooks/{slug}")))
            .header("content-type", "application/json")
            .header("x-zm-request-timestamp", now.to_string())
            .header("x-zm-signature", format!("v0={signature}"))
            .body(body)
            .send()
    };
    for (slug, token) in [
        ("meetings", "qgg8vlvZRS6UYooatFL8Aw"),
        ("meetings", "second-token-72h-later"),
        ("meetings-sync", "qgg8vlvZRS6UYooatFL8Aw"),
    ] {
        let answer = validate(slug, token, "zoom-token").await.unwrap();
        assert_eq!(answer.status(), 200, "{slug}");
        let answer: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(answer["plainToken"], token, "{slug}");
        assert_eq!(
            answer["encryptedToken"],
            hmac_hex(b"zoom-token", token.as_bytes()),
            "{slug}"
        );
    }
    // Unsigned, it is no handshake: refused, no token computed.
    let forged = validate("meetings", "forged", "a guess").await.unwrap();
    assert_eq!(forged.status(), 401);
    assert!(!forged.text().await.unwrap().contains("encryptedToken"));

    let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let twitch = |id: &'static str, kind: &'static str, body: &'static str| {
        let signature = hmac_hex(b"twitch-secret", format!("{id}{ts}{body}").as_bytes());
        app.client
            .post(app.url("/hooks/stream"))
            .header("content-type", "application/json")
            .header("twitch-eventsub-message-id", id)
            .header("twitch-eventsub-message-timestamp", ts.clone())
            .header(
                "twitch-eventsub-message-signature",
                format!("sha256={signature}"),
            )
            .header("twitch-eventsub-message-type", kind)
            .body(body)
            .send()
    };
    let challenge = twitch("tw-1", "webhook_callback_verification", CHALLENGE)
        .await
        .unwrap();
    assert_eq!(challenge.status(), 200);
    assert_eq!(
        challenge.headers()["content-type"].to_str().unwrap(),
        "text/plain"
    );
    assert_eq!(
        challenge.text().await.unwrap(),
        "pogchamp-kappa-360noscope-vohiyo"
    );
    // Relabelled as a notification, a captured challenge is still one: its
    // signed body says so, and it is never forwarded as an event.
    let relabelled = twitch("tw-1", "notification", CHALLENGE).await.unwrap();
    assert_eq!(
        relabelled.text().await.unwrap(),
        "pogchamp-kappa-360noscope-vohiyo"
    );
    let revoked = twitch(
        "tw-2",
        "revocation",
        r#"{"subscription":{"type":"channel.follow","status":"authorization_revoked"}}"#,
    )
    .await
    .unwrap();
    assert_eq!(revoked.status(), 200);
    app.drain().await;

    assert_eq!(destination.keys(), ["stream:tw-2"], "only the revocation");
    let handshakes: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deliveries WHERE verified AND verification LIKE '%answered by replaysafe%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(handshakes, 5);
}

/// `replaysafe send` signs samples for every shared-secret preset and for
/// a declared source, and each is verified, keyed and deduplicated: two
/// events sent twice each are two events per source. `config check` shows
/// each preset's verifier.
#[sqlx::test(migrator = "MIGRATOR")]
async fn replaysafe_send_signs_for_every_shared_secret_preset(pool: PgPool) {
    let shared: Vec<&str> = replaysafe_core::providers::declarative::presets::all()
        .iter()
        .filter(|p| p.vector.public_key.is_none())
        .map(|p| p.provider.name)
        .collect();
    assert_eq!(shared.len(), 14);
    let mut text = String::new();
    for name in &shared {
        let secret = if matches!(*name, "svix" | "clerk" | "resend") {
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        } else {
            "a-shared-secret"
        };
        text.push_str(&format!(
            "[[source]]\nslug = \"{name}\"\nprovider = \"{name}\"\nsecrets = [\"{secret}\"]\npublic_url = \"https://hooks.example/hooks/{name}\"\n\n"
        ));
    }
    text.push_str(
        "[[source]]\nslug = \"declared\"\nprovider = \"hmac\"\nsecrets = [\"s\"]\n[source.signature]\nheader = \"x-sig\"\nalgorithm = \"hmac-sha512\"\ntimestamp_header = \"x-ts\"\npayload = \"{timestamp}.{body}\"\nid_header = \"x-id\"\n",
    );
    let app = spawn_app(pool.clone(), test_config(&text, &[])).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replaysafe.toml");
    std::fs::write(&path, &text).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let url = format!("http://{}", app.addr);
    for slug in shared.iter().copied().chain(["declared"]) {
        // Async: the receiver answers from this test's runtime.
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
            .args(["send", "--source", slug, "--events", "2", "--repeat", "2"])
            .args(["--url", &url, "--config"])
            .arg(&path)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{slug}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let per_source: Vec<(String, i64)> =
        sqlx::query_as("SELECT source, count(*) FROM events GROUP BY source ORDER BY source")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(per_source.len(), 15, "{per_source:?}");
    assert!(per_source.iter().all(|(_, n)| *n == 2), "{per_source:?}");
    let refused: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE NOT verified")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(refused, 0);

    let check = std::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
        .args(["config", "check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&check.stdout);
    assert!(
        shown.contains(
            "provider        paddle (Paddle Billing, a preset of the declarative verifier)"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("hmac-sha256 (Hex) in header paddle-signature as h1= pairs"),
        "{shown}"
    );
    assert!(!shown.contains("a-shared-secret"), "{shown}");
}
