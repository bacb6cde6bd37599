//! Standard Webhooks: `webhook-signature` holds space-separated `v1,<base64>`
//! HMAC-SHA256 signatures of `id.timestamp.body`, keyed by the base64-decoded
//! secret after `whsec_`.

use base64::Engine;
use hmac::Mac;

use super::template::Field;
use super::{
    any_key_signs, check_timestamp, decode_base64, hmac_sha256, key_slices, matched, EventType,
    Inbound, Provider, Reconciler, Rejection, Scheme, SettingError, Settings, Signed, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "standard",
    setup: "Where the sender (Svix, Resend, Clerk, any Standard Webhooks sender) asks for an endpoint URL, paste the receive URL; the endpoint's signing secret (it starts with `whsec`) goes in this source's `secrets`.",
    build,
    // Standard Webhooks senders put everything in the body.
    event_headers: &[],
    signature_headers: &["webhook-signature"],
    credential_fields: &[],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::None(
        "Standard Webhooks names no API for listing what a sender sent: a sender's own (Svix's, for one) is not part of the standard",
    ),
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// The payload's `type` (Standard Webhooks' payload structure).
fn event_type(req: &Inbound) -> Option<String> {
    super::json_text(&req.body, "/type")
}

/// The decoded secrets, checked at start.
struct Standard {
    keys: Vec<Vec<u8>>,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    settings.shared_secrets(PROVIDER.name)?;
    let keys = settings
        .secrets
        .iter()
        .enumerate()
        .map(|(i, s)| {
            decode_secret(s.expose()).map_err(|p| SettingError::new(format!("secrets[{i}]"), p))
        })
        .collect::<Result<_, _>>()?;
    Ok(Box::new(Standard { keys }))
}

impl Scheme for Standard {
    fn verify(&self, req: &Inbound, window: Option<Window>) -> Result<String, Rejection> {
        verify_with_keys(req, &key_slices(&self.keys), window)
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        req.required_header("webhook-id")
    }

    /// The body and the message id are signed.
    fn covers(&self, field: &Field) -> bool {
        matches!(
            field,
            Field::Body | Field::BodySha256 | Field::Pointer(_) | Field::Form(_)
        ) || matches!(field, Field::Header(h) if h == "webhook-id")
    }

    fn sign_sample(&self, event_id: &str, now: i64) -> Result<Signed, String> {
        let body = serde_json::json!({
            "type": "invoice.paid",
            "data": {"invoice": event_id, "amount_cents": 4200, "currency": "eur"}
        })
        .to_string()
        .into_bytes();
        Ok(Signed {
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("webhook-id".into(), event_id.into()),
                ("webhook-timestamp".into(), now.to_string()),
                (
                    "webhook-signature".into(),
                    sign(&self.keys[0], event_id, now, &body),
                ),
            ],
            body,
        })
    }
}

/// A `webhook-signature` value: `v1,` and the base64 HMAC-SHA256 of
/// `id.timestamp.body` under the decoded key. replaysafe signs its own
/// forwards this way too.
pub fn sign(key: &[u8], message_id: &str, timestamp: i64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mac = hmac_sha256(
        key,
        &[message_id.as_bytes(), b".", ts.as_bytes(), b".", body],
    );
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

pub fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    decode_base64(encoded)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| "a Standard Webhooks secret is `whsec_` followed by base64".to_owned())
}

/// Verifies with the secrets as written (`whsec_...`); undecodable ones never match.
pub fn verify(
    req: &Inbound,
    secrets: &[&[u8]],
    window: Option<Window>,
) -> Result<String, Rejection> {
    let keys: Vec<Vec<u8>> = secrets
        .iter()
        .filter_map(|s| {
            std::str::from_utf8(s)
                .ok()
                .and_then(|s| decode_secret(s).ok())
        })
        .collect();
    verify_with_keys(req, &key_slices(&keys), window)
}

fn verify_with_keys(
    req: &Inbound,
    keys: &[&[u8]],
    window: Option<Window>,
) -> Result<String, Rejection> {
    let header = |name: &str| {
        req.header(name)
            .ok_or_else(|| Rejection::signature(format!("missing {name} header")))
    };
    let id = header("webhook-id")?;
    let timestamp = header("webhook-timestamp")?;
    let signatures = header("webhook-signature")?;
    check_timestamp(timestamp, window)?;
    let parts: [&[u8]; 5] = [
        id.as_bytes(),
        b".",
        timestamp.trim().as_bytes(),
        b".",
        &req.body,
    ];
    let mut seen_v1 = false;
    for candidate in signatures.split(' ') {
        let Some(encoded) = candidate.strip_prefix("v1,") else {
            continue; // other versions (v1a, ...) are not ours to check
        };
        seen_v1 = true;
        if let Some(sig) = decode_base64(encoded) {
            if let Some(i) = any_key_signs(keys, &parts, &sig) {
                return Ok(matched("v1", i, keys.len()));
            }
        }
    }
    Err(Rejection::signature(if seen_v1 {
        "no v1 signature matches"
    } else {
        "webhook-signature holds no v1 signature"
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn request(id: &str, ts: &str, sig: &str, body: &str) -> Inbound {
        Inbound {
            headers: vec![
                ("webhook-id".into(), id.into()),
                ("webhook-timestamp".into(), ts.into()),
                ("webhook-signature".into(), sig.into()),
            ],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    // The Rust reference library's fixture (vectors.md).
    pub(crate) const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    pub(crate) const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    pub(crate) const TS: &str = "1649367553";
    pub(crate) const BODY: &str = r#"{"email":"test@example.com","username":"test_user"}"#;
    pub(crate) const SIG: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    pub(super) fn contract() -> crate::providers::contract::Contract {
        use crate::providers::contract::{Contract, Sdk, Vector};
        fn settings(secret: &str) -> Settings {
            Settings {
                secrets: vec![crate::secret::Secret::new(secret)],
                ..Default::default()
            }
        }
        let mut keyless = request(ID, TS, SIG, BODY);
        keyless.headers.retain(|(name, _)| name != "webhook-id");
        Contract {
            settings: settings(SECRET),
            wrong: settings("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            vector: Vector {
                request: request(ID, TS, SIG, BODY),
                now: 1649367553 + 10,
                key: ID,
            },
            keyless: Some(Vector {
                request: keyless,
                now: 1649367553,
                key: "",
            }),
            pieces: ["v1,", "v1a,", "whsec_"].map(String::from).to_vec(),
            sdk: Some(Sdk {
                script: "sign.mjs",
                request: |now| {
                    serde_json::json!({"provider": "standard", "secret": SECRET,
                        "body": BODY, "timestamp": now, "id": "msg_contract"})
                },
                settings: |_| settings(SECRET),
                key: Some("msg_contract"),
            }),
        }
    }

    fn window() -> Option<Window> {
        Some(Window {
            now: 1649367553 + 10,
            tolerance: 300,
        })
    }

    #[test]
    fn published_vector_verifies() {
        let req = request(ID, TS, SIG, BODY);
        assert!(verify(&req, &[SECRET.as_bytes()], window()).is_ok());
    }

    #[test]
    fn any_of_several_signatures_and_secrets_may_match() {
        let req = request(ID, TS, &format!("v1,AAAA v1a,xyz {SIG}"), BODY);
        let got = verify(
            &req,
            &[b"whsec_AAAAAAAAAAAAAAAAAAAAAAAA", SECRET.as_bytes()],
            window(),
        )
        .unwrap();
        assert_eq!(got, "v1 signature matched secret 2 of 2");
    }

    #[test]
    fn tampering_wrong_secrets_and_stale_times_are_refused() {
        let tampered = request(ID, TS, SIG, &BODY.replace("test_user", "admin"));
        assert_eq!(
            verify(&tampered, &[SECRET.as_bytes()], window())
                .unwrap_err()
                .status,
            401
        );
        let other_id = request("msg_other", TS, SIG, BODY);
        assert!(verify(&other_id, &[SECRET.as_bytes()], window()).is_err());
        let good = request(ID, TS, SIG, BODY);
        assert!(verify(
            &good,
            &[b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
            window()
        )
        .is_err());
        let late = Some(Window {
            now: 1649367553 + 301,
            tolerance: 300,
        });
        assert!(verify(&good, &[SECRET.as_bytes()], late)
            .unwrap_err()
            .reason
            .contains("older"));
        let early = Some(Window {
            now: 1649367553 - 301,
            tolerance: 300,
        });
        assert!(verify(&good, &[SECRET.as_bytes()], early)
            .unwrap_err()
            .reason
            .contains("future"));
        // Stored deliveries are re-verified with the window waived.
        assert!(verify(&good, &[SECRET.as_bytes()], None).is_ok());
    }

    #[test]
    fn garbled_headers_are_refused() {
        for sig in [
            "",
            "v1,",
            "v1,not base64!",
            "v2,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
            &SIG[..20],
        ] {
            let req = request(ID, TS, sig, BODY);
            assert_eq!(
                verify(&req, &[SECRET.as_bytes()], window())
                    .unwrap_err()
                    .status,
                401,
                "{sig:?}"
            );
        }
        let bad_ts = request(ID, "yesterday", SIG, BODY);
        assert!(verify(&bad_ts, &[SECRET.as_bytes()], window()).is_err());
        let mut missing = request(ID, TS, SIG, BODY);
        missing.headers.remove(0);
        assert!(verify(&missing, &[SECRET.as_bytes()], window())
            .unwrap_err()
            .reason
            .contains("webhook-id"));
    }
}
