//! Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256 of v0:timestamp:body>` with
//! `X-Slack-Request-Timestamp`. Key: the Events API `event_id`, else the
//! SHA-256 of the body (slash commands and interactivity carry no id).

use hmac::Mac;

use super::{
    any_key_signs, check_timestamp, decode_hex, hmac_sha256, key_slices, matched, sha256_hex,
    Answer, EventType, Inbound, Provider, Reconciler, Rejection, Scheme, SettingError, Settings,
    Signed, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "slack",
    setup: "api.slack.com/apps, your app: paste the receive URL as the Request URL under Event Subscriptions (and Interactivity, Slash Commands); the app's Signing Secret (Basic Information) goes in this source's `secrets`.",
    build,
    event_headers: &["x-slack-"],
    signature_headers: &["x-slack-signature", "x-slack-request-timestamp"],
    credential_fields: &["token", "response_url"],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::None(
        "Slack keeps no list of the interaction and Events API requests it sent: a missed one is retried by Slack or lost",
    ),
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// The Events API's inner event type (`app_mention`), else the envelope's
/// (`url_verification`); for forms, an interaction payload's `type`
/// (`block_actions`) or a slash command (`/deploy`).
fn event_type(req: &Inbound) -> Option<String> {
    if let Some(payload) = super::form_text(&req.body, "payload") {
        return super::json_text(payload.as_bytes(), "/type");
    }
    if let Some(command) = super::form_text(&req.body, "command") {
        return Some(command);
    }
    match super::json_text(&req.body, "/type").as_deref() {
        Some("event_callback") => super::json_text(&req.body, "/event/type"),
        other => other.map(str::to_owned),
    }
}

struct Slack {
    secrets: Vec<Vec<u8>>,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    Ok(Box::new(Slack {
        secrets: settings.shared_secrets(PROVIDER.name)?,
    }))
}

impl Scheme for Slack {
    fn verify(&self, req: &Inbound, window: Option<Window>) -> Result<String, Rejection> {
        verify(req, &key_slices(&self.secrets), window)
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        Ok(event_key(&req.body))
    }

    /// Slack stops retrying an event replaysafe already holds when told so.
    fn shape_answer(&self, answer: &mut Answer, req: &Inbound, claimed_now: bool) {
        if !claimed_now && req.header("x-slack-retry-num").is_some() {
            answer.headers.push(("x-slack-no-retry", "1".into()));
        }
    }

    fn sign_sample(&self, event_id: &str, now: i64) -> Result<Signed, String> {
        let body = serde_json::json!({
            "type": "event_callback", "event_id": event_id,
            "event": {"type": "app_mention", "text": "hello"}
        })
        .to_string()
        .into_bytes();
        let ts = now.to_string();
        let mac = hmac_sha256(&self.secrets[0], &[b"v0:", ts.as_bytes(), b":", &body]);
        Ok(Signed {
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-slack-request-timestamp".into(), ts),
                (
                    "x-slack-signature".into(),
                    format!("v0={}", hex::encode(mac.finalize().into_bytes())),
                ),
            ],
            body,
        })
    }
}

pub fn verify(
    req: &Inbound,
    secrets: &[&[u8]],
    window: Option<Window>,
) -> Result<String, Rejection> {
    let timestamp = req
        .header("x-slack-request-timestamp")
        .ok_or_else(|| Rejection::signature("missing X-Slack-Request-Timestamp header"))?;
    let header = req
        .header("x-slack-signature")
        .ok_or_else(|| Rejection::signature("missing X-Slack-Signature header"))?;
    check_timestamp(timestamp, window)?;
    let sig = header
        .trim()
        .strip_prefix("v0=")
        .and_then(decode_hex)
        .ok_or_else(|| Rejection::signature("X-Slack-Signature is not v0=<hex>"))?;
    let parts: [&[u8]; 4] = [b"v0:", timestamp.trim().as_bytes(), b":", &req.body];
    any_key_signs(secrets, &parts, &sig)
        .map(|i| matched("v0", i, secrets.len()))
        .ok_or_else(|| Rejection::signature("v0 signature does not match"))
}

pub fn event_key(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Envelope {
        event_id: Option<String>,
    }
    serde_json::from_slice::<Envelope>(body)
        .ok()
        .and_then(|e| e.event_id)
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| format!("sha256:{}", sha256_hex(&[body])))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Slack's "verifying requests" page (vectors.md).
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: &str = "1531420618";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    pub(super) fn contract() -> crate::providers::contract::Contract {
        use crate::providers::contract::{Contract, Sdk, Vector};
        fn settings(secret: &str) -> Settings {
            Settings {
                secrets: vec![crate::secret::Secret::new(secret)],
                ..Default::default()
            }
        }
        Contract {
            settings: settings(SECRET),
            wrong: settings("8f742231b10e8888abcd99yyyzzz85a6"),
            vector: Vector {
                request: request(TS, SIG, BODY),
                now: 1531420618 + 5,
                key: "sha256:390eeeff8d0cb7c9f6ecf8a88c3df6452fea0914eb02f64844369f3758d8d330",
            },
            // Slash commands carry no id: the key is the body's hash.
            keyless: None,
            pieces: ["v0=", "v0:", "event_id"].map(String::from).to_vec(),
            sdk: Some(Sdk {
                script: "sign.py",
                request: |now| {
                    serde_json::json!({"provider": "slack", "secret": SECRET,
                        "body": r#"{"type":"event_callback","event_id":"EvContract"}"#, "timestamp": now})
                },
                settings: |_| settings(SECRET),
                key: Some("EvContract"),
            }),
        }
    }

    fn request(ts: &str, sig: &str, body: &str) -> Inbound {
        Inbound {
            headers: vec![
                ("x-slack-request-timestamp".into(), ts.into()),
                ("x-slack-signature".into(), sig.into()),
            ],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn published_vector_verifies_within_its_window() {
        let w = Some(Window {
            now: 1531420618 + 5,
            tolerance: 300,
        });
        assert!(verify(&request(TS, SIG, BODY), &[SECRET.as_bytes()], w).is_ok());
        let late = Some(Window {
            now: 1531420618 + 600,
            tolerance: 300,
        });
        assert!(verify(&request(TS, SIG, BODY), &[SECRET.as_bytes()], late).is_err());
        assert!(verify(
            &request(TS, SIG, &BODY.replace("foobar", "foobaz")),
            &[SECRET.as_bytes()],
            w
        )
        .is_err());
        assert!(verify(&request("1531420619", SIG, BODY), &[SECRET.as_bytes()], w).is_err());
    }

    #[test]
    fn key_is_the_event_id_or_the_body_hash() {
        assert_eq!(
            event_key(br#"{"type":"event_callback","event_id":"Ev123"}"#),
            "Ev123"
        );
        assert!(event_key(BODY.as_bytes()).starts_with("sha256:"));
        assert_eq!(event_key(b"a"), event_key(b"a"));
        assert_ne!(event_key(b"a"), event_key(b"b"));
    }
}
