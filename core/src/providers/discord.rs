//! Discord interactions: `X-Signature-Ed25519` is the hex Ed25519 signature,
//! by the application's public key, of `X-Signature-Timestamp` (Unix
//! seconds) followed by the raw body. Key: the interaction `id`. A PING
//! (`type` 1) is answered with `{"type":1}`; sync mode only.

use ed25519_dalek::{Signature, VerifyingKey};

use super::{
    check_timestamp, decode_hex, matched, Answer, EventType, Inbound, Provider, Reconciler,
    Rejection, Scheme, SettingError, Settings, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "discord",
    setup: "Discord Developer Portal, your application, General Information: paste the receive URL as the Interactions Endpoint URL (replaysafe answers Discord's PING); the application's Public Key goes in this source's `public_key`.",
    build,
    event_headers: &["x-discord-"],
    signature_headers: &["x-signature-ed25519"],
    credential_fields: &["token"],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::None(
        "Discord interactions are answered inside their request and expire in minutes: nothing lists or replays them later",
    ),
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// The interaction's type by Discord's name for it (`APPLICATION_COMMAND`).
fn event_type(req: &Inbound) -> Option<String> {
    let kind = serde_json::from_slice::<serde_json::Value>(&req.body)
        .ok()?
        .get("type")?
        .as_u64()?;
    Some(
        match kind {
            1 => "PING",
            2 => "APPLICATION_COMMAND",
            3 => "MESSAGE_COMPONENT",
            4 => "APPLICATION_COMMAND_AUTOCOMPLETE",
            5 => "MODAL_SUBMIT",
            other => return Some(other.to_string()),
        }
        .to_owned(),
    )
}

struct Discord {
    public_key: VerifyingKey,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    if !settings.sync {
        return Err(SettingError::new(
            "mode",
            "discord interactions must be answered inline: use mode = \"sync\"",
        ));
    }
    let text = settings.public_key.as_deref().ok_or_else(|| {
        SettingError::new(
            "public_key",
            "discord needs the application's Ed25519 public key (hex)",
        )
    })?;
    let public_key = parse_public_key(text).map_err(|p| SettingError::new("public_key", p))?;
    Ok(Box::new(Discord { public_key }))
}

impl Scheme for Discord {
    fn verify(&self, req: &Inbound, window: Option<Window>) -> Result<String, Rejection> {
        verify(req, &self.public_key, window)
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        idempotency_key(req)
    }

    /// Discord checks the endpoint with PINGs: answered here, not forwarded.
    fn own_answer(&self, req: &Inbound) -> Option<Answer> {
        is_ping(&req.body).then(|| Answer {
            status: 200,
            content_type: "application/json".into(),
            body: br#"{"type":1}"#.to_vec(),
            headers: Vec::new(),
        })
    }
}

/// The application's public key as the developer portal shows it: 64 hex characters.
pub fn parse_public_key(hex_text: &str) -> Result<VerifyingKey, String> {
    let bytes: [u8; 32] = decode_hex(hex_text)
        .and_then(|b| b.try_into().ok())
        .ok_or("a Discord public key is 64 hex characters")?;
    let key = VerifyingKey::from_bytes(&bytes)
        .map_err(|_| "not an Ed25519 public key (the point does not decompress)")?;
    if key.is_weak() {
        return Err("a weak (small-order) Ed25519 public key is refused".into());
    }
    Ok(key)
}

pub fn verify(
    req: &Inbound,
    public_key: &VerifyingKey,
    window: Option<Window>,
) -> Result<String, Rejection> {
    let header = |name: &str| {
        req.header(name)
            .map(str::trim)
            .ok_or_else(|| Rejection::signature(format!("missing {name} header")))
    };
    let signature = header("X-Signature-Ed25519")?;
    let timestamp = header("X-Signature-Timestamp")?;
    check_timestamp(timestamp, window)?;
    let signature: [u8; 64] = decode_hex(signature)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Rejection::signature("X-Signature-Ed25519 is not 64 bytes of hex"))?;
    let signature = Signature::from_bytes(&signature);
    let mut message = Vec::with_capacity(timestamp.len() + req.body.len());
    message.extend_from_slice(timestamp.as_bytes());
    message.extend_from_slice(&req.body);
    public_key
        .verify_strict(&message, &signature)
        .map(|()| matched("Ed25519", 0, 1))
        .map_err(|_| Rejection::signature("Ed25519 signature does not match"))
}

/// The interaction's `id` (a snowflake, as a string).
pub fn idempotency_key(req: &Inbound) -> Result<String, Rejection> {
    let interaction: serde_json::Value = serde_json::from_slice(&req.body)
        .map_err(|_| Rejection::key("body is not a JSON Discord interaction"))?;
    interaction
        .get("id")
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| Rejection::key("Discord interaction has no id"))
}

/// A PING (`type` 1), which Discord expects answered with `{"type":1}`.
pub fn is_ping(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("type").and_then(serde_json::Value::as_u64))
        == Some(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey, Verifier};
    use rand::RngCore;

    const TS: &str = "1700000000";
    const BODY: &str = r#"{"id":"1234567890123456789","application_id":"9876","type":2,"token":"t","version":1,"data":{"name":"ping"}}"#;

    fn window() -> Option<Window> {
        Some(Window {
            now: 1_700_000_000 + 5,
            tolerance: 300,
        })
    }

    /// RFC 8032's first test seed, so the contract's key is fixed.
    const SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

    pub(super) fn contract() -> crate::providers::contract::Contract {
        use crate::providers::contract::{Contract, Sdk, Vector};
        fn settings(public: &str) -> Settings {
            Settings {
                public_key: Some(public.into()),
                sync: true,
                ..Default::default()
            }
        }
        let key = SigningKey::from_bytes(&decode_hex(SEED).unwrap().try_into().unwrap());
        let public = hex::encode(key.verifying_key().as_bytes());
        let keyless = r#"{"application_id":"9876","type":2}"#;
        Contract {
            settings: settings(&public),
            wrong: settings(&hex::encode(signing_key().verifying_key().as_bytes())),
            vector: Vector {
                request: request(&sign(&key, TS, BODY), TS, BODY),
                now: 1_700_000_000 + 5,
                key: "1234567890123456789",
            },
            keyless: Some(Vector {
                request: request(&sign(&key, TS, keyless), TS, keyless),
                now: 1_700_000_000,
                key: "",
            }),
            pieces: [
                "0",
                "00",
                "ff",
                "\"id\":",
                "\"type\":1",
                TS,
                BODY,
                "99999999999999999999",
            ]
            .map(String::from)
            .to_vec(),
            sdk: Some(Sdk {
                script: "sign.mjs",
                request: |now| {
                    serde_json::json!({"provider": "discord", "secret": SEED,
                        "body": r#"{"id":"555","type":2}"#, "timestamp": now})
                },
                settings: |signed| settings(signed["public_key"].as_str().unwrap()),
                key: Some("555"),
            }),
        }
    }

    /// `SigningKey::generate` without the `rand_core` feature: the same 32 random bytes.
    fn signing_key() -> SigningKey {
        let mut secret = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut secret);
        SigningKey::from_bytes(&secret)
    }

    fn sign(key: &SigningKey, ts: &str, body: &str) -> String {
        hex::encode(key.sign(format!("{ts}{body}").as_bytes()).to_bytes())
    }

    fn request(sig: &str, ts: &str, body: &str) -> Inbound {
        Inbound {
            headers: vec![
                ("x-signature-ed25519".into(), sig.into()),
                ("x-signature-timestamp".into(), ts.into()),
            ],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn signed_interactions_verify() {
        let key = signing_key();
        let public = parse_public_key(&hex::encode(key.verifying_key().as_bytes())).unwrap();
        let sig = sign(&key, TS, BODY);
        assert_eq!(
            verify(&request(&sig, TS, BODY), &public, window()).unwrap(),
            "Ed25519 signature matched"
        );
        assert!(verify(&request(&sig.to_uppercase(), TS, BODY), &public, window()).is_ok());
        assert!(verify(&request(&sig, TS, BODY), &public, None).is_ok());
        assert_eq!(
            idempotency_key(&request(&sig, TS, BODY)).unwrap(),
            "1234567890123456789"
        );
    }

    #[test]
    fn tampered_wrong_key_and_garbled_are_refused() {
        let key = signing_key();
        let public = key.verifying_key();
        let sig = sign(&key, TS, BODY);
        let refused = |req: &Inbound, public: &VerifyingKey| {
            let err = verify(req, public, window()).unwrap_err();
            assert_eq!(err.status, 401, "{err:?}");
            err.reason
        };
        assert!(
            refused(&request(&sig, TS, &BODY.replace("ping", "pong")), &public)
                .contains("does not match")
        );
        refused(&request(&sig, "1700000001", BODY), &public);
        refused(&request(&sig, TS, &format!("{BODY} ")), &public);
        refused(&request(&sig, TS, BODY), &signing_key().verifying_key());
        for garbled in [
            "",
            "zz",
            &sig[..126],
            &sig[..64],
            &format!("{sig}00"),
            &sig.replace(|c: char| c.is_ascii_digit(), "g"),
        ] {
            refused(&request(garbled, TS, BODY), &public);
        }
        // A signature from one body does not carry to another.
        refused(&request(&sign(&key, TS, "{}"), TS, BODY), &public);
        // Stale and future timestamps, and ones that are not Unix seconds.
        let late = Some(Window {
            now: 1_700_000_000 + 301,
            tolerance: 300,
        });
        assert!(verify(&request(&sig, TS, BODY), &public, late)
            .unwrap_err()
            .reason
            .contains("older"));
        let early = Some(Window {
            now: 1_700_000_000 - 301,
            tolerance: 300,
        });
        assert!(verify(&request(&sig, TS, BODY), &public, early)
            .unwrap_err()
            .reason
            .contains("future"));
        let iso = "2023-11-14T22:13:20Z";
        refused(&request(&sign(&key, iso, BODY), iso, BODY), &public);
        let mut missing = request(&sig, TS, BODY);
        missing.headers.remove(0);
        assert!(refused(&missing, &public).contains("X-Signature-Ed25519"));
        let mut missing = request(&sig, TS, BODY);
        missing.headers.remove(1);
        assert!(refused(&missing, &public).contains("X-Signature-Timestamp"));
    }

    #[test]
    fn malleated_and_small_order_signatures_are_refused() {
        // S + L (the group order) is the same signature with a non-canonical S.
        let key = signing_key();
        let public = key.verifying_key();
        let sig = key.sign(format!("{TS}{BODY}").as_bytes()).to_bytes();
        const L: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let mut malleated = sig;
        let mut carry = 0u16;
        for i in 0..32 {
            let sum = u16::from(malleated[32 + i]) + u16::from(L[i]) + carry;
            malleated[32 + i] = (sum & 0xff) as u8;
            carry = sum >> 8;
        }
        let req = request(&hex::encode(malleated), TS, BODY);
        assert!(verify(&req, &public, window()).is_err());

        // The identity as public key and as R, with S = 0, passes plain
        // Ed25519 verification for every message; verify_strict refuses it
        // (and parse_public_key refuses such a key up front).
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let weak = VerifyingKey::from_bytes(&identity).unwrap();
        let mut forged = [0u8; 64];
        forged[0] = 1;
        let forged = Signature::from_bytes(&forged);
        assert!(weak
            .verify(format!("{TS}{BODY}").as_bytes(), &forged)
            .is_ok());
        let req = request(&hex::encode(forged.to_bytes()), TS, BODY);
        assert!(verify(&req, &weak, window()).is_err());
    }

    #[test]
    fn public_keys_parse_from_hex() {
        let key = signing_key().verifying_key();
        let text = hex::encode(key.as_bytes());
        assert_eq!(parse_public_key(&text).unwrap(), key);
        assert_eq!(
            parse_public_key(&format!(" {} ", text.to_uppercase())).unwrap(),
            key
        );
        for bad in [
            "",
            "zz",
            &text[..62],
            &format!("{text}00"),
            // The identity point: small order, so weak.
            "0100000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert!(parse_public_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pings_and_keys() {
        assert!(is_ping(br#"{"id":"1","type":1}"#));
        assert!(is_ping(br#"{"type":1,"application_id":"2"}"#));
        for body in [
            &br#"{"type":2}"#[..],
            br#"{"type":"1"}"#,
            br#"{"type":1.5}"#,
            b"[1]",
            b"1",
            b"",
            b"not json",
        ] {
            assert!(!is_ping(body), "{body:?}");
        }
        for body in ["", "{}", r#"{"id":""}"#, r#"{"id":123}"#, "[]", "x"] {
            let err = idempotency_key(&request("", TS, body)).unwrap_err();
            assert_eq!(err.status, 400, "{body}");
        }
    }
}
