//! Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256 of v0:timestamp:body>` with
//! `X-Slack-Request-Timestamp`. Key: the Events API `event_id`, else the
//! SHA-256 of the body (slash commands and interactivity carry no id).

use super::{any_key_signs, check_timestamp, decode_hex, matched, sha256_hex, Rejection, Window};
use crate::receiver::Inbound;

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
