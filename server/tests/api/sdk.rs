//! Each verifier against signatures made by the provider's official SDK
//! (tests/sdk: npm and PyPI packages that scripts/test installs), sent over
//! real HTTP: a signer and a verifier written together would share their bugs.

use replaysafe_core::db::MIGRATOR;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::helpers::{spawn_app, test_config, TestApp};

#[path = "../sdk/signer.rs"]
mod signer;
use signer::sdk_sign;

async fn send(app: &TestApp, slug: &str, signed: &Value) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(&format!("/hooks/{slug}")))
        .body(signed["body"].as_str().unwrap().to_owned());
    for (name, value) in signed["headers"].as_object().unwrap() {
        request = request.header(name, value.as_str().unwrap());
    }
    request.send().await.unwrap()
}

const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn config() -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "standard"
provider = "standard"
secrets = ["{STANDARD_SECRET}"]
[[source]]
slug = "stripe"
provider = "stripe"
secrets = ["whsec_stripe_sdk_secret"]
[[source]]
slug = "github"
provider = "github"
secrets = ["It's a Secret to Everybody"]
[[source]]
slug = "slack"
provider = "slack"
secrets = ["8f742231b10e8888abcd99yyyzzz85a5"]
"#
        ),
        &[],
    )
}

/// Sends SDK-signed requests: each must be claimed; then the same requests
/// with a tampered body must be refused with 401.
async fn claimed_then_tampered_refused(app: &TestApp, slug: &str, signed: Vec<Value>) {
    for s in &signed {
        let response = send(app, slug, s).await;
        assert_eq!(
            response.status(),
            200,
            "{slug}: {}",
            response.text().await.unwrap()
        );
        assert_eq!(
            response.headers()["x-replaysafe-outcome"],
            "claimed",
            "{slug}"
        );
    }
    for s in &signed {
        let mut tampered = s.clone();
        tampered["body"] = json!(format!("{} ", s["body"].as_str().unwrap()));
        assert_eq!(send(app, slug, &tampered).await.status(), 401, "{slug}");
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn standard_webhooks_npm_and_pypi_sdks(pool: PgPool) {
    let app = spawn_app(pool, config()).await;
    let body = r#"{"type":"invoice.paid","note":"caf\u00e9 ☕"}"#;
    let request = |id: &str| json!({"provider": "standard", "secret": STANDARD_SECRET, "body": body, "timestamp": now(), "id": id});
    let npm = sdk_sign(
        "sign.mjs",
        json!([request("msg_npm_1"), request("msg_npm_2")]),
    );
    claimed_then_tampered_refused(&app, "standard", npm).await;
    let pypi = sdk_sign("sign.py", json!([request("msg_pypi_1")]));
    claimed_then_tampered_refused(&app, "standard", pypi).await;
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn stripe_sdk(pool: PgPool) {
    let app = spawn_app(pool, config()).await;
    let body = |id: &str| json!({"id": id, "object": "event", "type": "invoice.paid"}).to_string();
    let signed = sdk_sign(
        "sign.mjs",
        json!([
            {"provider": "stripe", "secret": "whsec_stripe_sdk_secret", "body": body("evt_sdk_1"), "timestamp": now()},
            {"provider": "stripe", "secret": "whsec_stripe_sdk_secret", "body": body("evt_sdk_2"), "timestamp": now() - 200},
        ]),
    );
    claimed_then_tampered_refused(&app, "stripe", signed).await;
    // Outside Stripe's 300 s window the same SDK's signature is refused.
    let stale = sdk_sign(
        "sign.mjs",
        json!([{"provider": "stripe", "secret": "whsec_stripe_sdk_secret", "body": body("evt_sdk_3"), "timestamp": now() - 400}]),
    );
    assert_eq!(send(&app, "stripe", &stale[0]).await.status(), 401);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn github_octokit_sdk(pool: PgPool) {
    let app = spawn_app(pool, config()).await;
    let signed = sdk_sign(
        "sign.mjs",
        json!([
            {"provider": "github", "secret": "It's a Secret to Everybody", "body": "Hello, World!", "id": "gh-delivery-1"},
            {"provider": "github", "secret": "It's a Secret to Everybody", "body": r#"{"action":"opened"}"#, "id": "gh-delivery-2"},
        ]),
    );
    assert_eq!(
        signed[0]["headers"]["X-Hub-Signature-256"],
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        "the SDK reproduces GitHub's published vector"
    );
    claimed_then_tampered_refused(&app, "github", signed).await;
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn slack_sdk(pool: PgPool) {
    let app = spawn_app(pool, config()).await;
    let signed = sdk_sign(
        "sign.py",
        json!([
            {"provider": "slack", "secret": "8f742231b10e8888abcd99yyyzzz85a5", "body": r#"{"type":"event_callback","event_id":"Ev1"}"#, "timestamp": now()},
            {"provider": "slack", "secret": "8f742231b10e8888abcd99yyyzzz85a5", "body": "command=%2Fdeploy&text=prod", "timestamp": now()},
        ]),
    );
    claimed_then_tampered_refused(&app, "slack", signed).await;
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn twilio_sdk_form_and_json_bodies(pool: PgPool) {
    let token = "twilio-auth-token-1234";
    let mut config = test_config(
        &format!(
            r#"
[[source]]
slug = "twilio"
provider = "twilio"
secrets = ["{token}"]
public_url = "https://hooks.example.com/hooks/twilio"
"#
        ),
        &[],
    );
    config.public_url = "https://hooks.example.com".into();
    let app = spawn_app(pool, config).await;
    let signed = sdk_sign(
        "sign.mjs",
        json!([
            {"provider": "twilio", "secret": token, "url": "https://hooks.example.com/hooks/twilio?region=eu",
             "params": {"CallSid": "CA1", "From": "+14158675310", "Digits": "1 2&3", "To": "+18005551212"}, "id": "idem-tw-1"},
            {"provider": "twilio", "secret": token, "url": "https://hooks.example.com/hooks/twilio",
             "body": r#"{"MessageSid":"SM1","Body":"caf\u00e9"}"#, "id": "idem-tw-2"},
        ]),
    );
    for s in &signed {
        // The SDK signed the public URL; the request reaches us on the local one, same path and query.
        let url = s["url"]
            .as_str()
            .unwrap()
            .replace("https://hooks.example.com", &app.url(""));
        let mut request = app
            .client
            .post(url)
            .body(s["body"].as_str().unwrap().to_owned());
        for (name, value) in s["headers"].as_object().unwrap() {
            request = request.header(name, value.as_str().unwrap());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        assert_eq!(response.headers()["x-replaysafe-outcome"], "claimed");
    }
    // The same signature on another path is refused: the URL is signed.
    let s = &signed[0];
    let mut request = app
        .client
        .post(app.url("/hooks/twilio?region=us"))
        .body(s["body"].as_str().unwrap().to_owned());
    for (name, value) in s["headers"].as_object().unwrap() {
        request = request.header(name, value.as_str().unwrap());
    }
    assert_eq!(request.send().await.unwrap().status(), 401);
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn discord_signatures_checked_by_discord_interactions(pool: PgPool) {
    let seed = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    let body =
        |id: &str, kind: u8| json!({"id": id, "type": kind, "application_id": "1"}).to_string();
    let signed = sdk_sign(
        "sign.mjs",
        json!([
            {"provider": "discord", "secret": seed, "body": body("ping-1", 1), "timestamp": now()},
            {"provider": "discord", "secret": seed, "body": body("interaction-1", 2), "timestamp": now()},
        ]),
    );
    let public_key = signed[0]["public_key"].as_str().unwrap();
    let destination = crate::helpers::Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "discord"
provider = "discord"
public_key = "{public_key}"
mode = "sync"
destination = "{}"
"#,
            destination.url
        ),
        &[],
    );
    let app = spawn_app(pool, config).await;
    // A PING is answered by replaysafe itself.
    let ping = send(&app, "discord", &signed[0]).await;
    assert_eq!(ping.status(), 200);
    assert_eq!(ping.text().await.unwrap(), r#"{"type":1}"#);
    // An interaction is forwarded inline and answered with the application's reply.
    let interaction = send(&app, "discord", &signed[1]).await;
    assert_eq!(interaction.status(), 200);
    assert_eq!(
        interaction.text().await.unwrap(),
        "answer from the test destination"
    );
    assert_eq!(destination.count(), 1);
    let mut tampered = signed[1].clone();
    tampered["body"] = json!(body("interaction-2", 2));
    assert_eq!(send(&app, "discord", &tampered).await.status(), 401);
}
