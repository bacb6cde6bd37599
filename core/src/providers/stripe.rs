//! Stripe: `Stripe-Signature: t=<ts>,v1=<hex>[,v1=<hex>...]`, hex HMAC-SHA256
//! of `t.body` keyed by the whole `whsec_...` string's bytes (not decoded).

use hmac::Mac;

use super::{
    any_key_signs, check_timestamp, decode_hex, hmac_sha256, key_slices, matched, EventType,
    Inbound, Provider, Reconciler, Rejection, Scheme, SettingError, Settings, Signed, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "stripe",
    setup: "Stripe Dashboard, Developers, Webhooks, Add endpoint: paste the receive URL and choose the events; then reveal the endpoint's signing secret and put it in this source's `secrets`.",
    build,
    // Stripe puts everything in the body.
    event_headers: &[],
    signature_headers: &["stripe-signature"],
    credential_fields: &[],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::StripeEvents,
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// The event object's `type` (`invoice.paid`).
fn event_type(req: &Inbound) -> Option<String> {
    super::json_text(&req.body, "/type")
}

struct Stripe {
    secrets: Vec<Vec<u8>>,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    Ok(Box::new(Stripe {
        secrets: settings.shared_secrets(PROVIDER.name)?,
    }))
}

impl Scheme for Stripe {
    fn verify(&self, req: &Inbound, window: Option<Window>) -> Result<String, Rejection> {
        verify(req, &key_slices(&self.secrets), window)
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        event_id(&req.body)
    }

    fn sign_sample(&self, event_id: &str, now: i64) -> Result<Signed, String> {
        let body = serde_json::json!({
            "id": event_id, "object": "event", "type": "invoice.paid",
            "data": {"object": {"object": "invoice", "amount_paid": 4200}}
        })
        .to_string()
        .into_bytes();
        let ts = now.to_string();
        let mac = hmac_sha256(&self.secrets[0], &[ts.as_bytes(), b".", &body]);
        Ok(Signed {
            headers: vec![
                ("content-type".into(), "application/json".into()),
                (
                    "stripe-signature".into(),
                    format!("t={ts},v1={}", hex::encode(mac.finalize().into_bytes())),
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
    let header = req
        .header("stripe-signature")
        .ok_or_else(|| Rejection::signature("missing Stripe-Signature header"))?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in header.split(',') {
        match item.trim().split_once('=') {
            Some(("t", v)) => timestamp = Some(v),
            Some(("v1", v)) => signatures.push(v),
            _ => {}
        }
    }
    let timestamp =
        timestamp.ok_or_else(|| Rejection::signature("Stripe-Signature has no timestamp (t=)"))?;
    check_timestamp(timestamp, window)?;
    if signatures.is_empty() {
        return Err(Rejection::signature("Stripe-Signature has no v1 signature"));
    }
    let parts: [&[u8]; 3] = [timestamp.trim().as_bytes(), b".", &req.body];
    for sig in signatures.iter().filter_map(|s| decode_hex(s)) {
        if let Some(i) = any_key_signs(secrets, &parts, &sig) {
            return Ok(matched("v1", i, secrets.len()));
        }
    }
    Err(Rejection::signature("no v1 signature matches"))
}

/// The event's `id` (`evt_...`) from the verified JSON body.
pub fn event_id(body: &[u8]) -> Result<String, Rejection> {
    #[derive(serde::Deserialize)]
    struct Event {
        id: Option<String>,
    }
    let event: Event = serde_json::from_slice(body)
        .map_err(|_| Rejection::key("body is not a JSON Stripe event"))?;
    event
        .id
        .filter(|id| !id.is_empty())
        .ok_or_else(|| Rejection::key("Stripe event has no id"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            wrong: settings("whsec_other"),
            vector: Vector {
                request: signed(1_700_000_000, SECRET, BODY),
                now: 1_700_000_100,
                key: "evt_1",
            },
            keyless: Some(Vector {
                request: signed(1_700_000_000, SECRET, r#"{"object":"event"}"#),
                now: 1_700_000_000,
                key: "",
            }),
            pieces: ["t=", "v1=", "v0=", "evt_"].map(String::from).to_vec(),
            sdk: Some(Sdk {
                script: "sign.mjs",
                request: |now| {
                    serde_json::json!({"provider": "stripe", "secret": SECRET,
                        "body": r#"{"id":"evt_contract","object":"event"}"#, "timestamp": now})
                },
                settings: |_| settings(SECRET),
                key: Some("evt_contract"),
            }),
        }
    }

    const SECRET: &str = "whsec_test_secret";
    const BODY: &str = r#"{"id":"evt_1","object":"event","type":"invoice.paid"}"#;

    fn signed(t: i64, secret: &str, body: &str) -> Inbound {
        let sig = hex::encode(
            hmac_sha256(
                secret.as_bytes(),
                &[t.to_string().as_bytes(), b".", body.as_bytes()],
            )
            .finalize()
            .into_bytes(),
        );
        Inbound {
            headers: vec![("stripe-signature".into(), format!("t={t},v1={sig},v0=abc"))],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn signs_with_the_whole_secret_string_and_checks_the_window() {
        let w = Some(Window {
            now: 1_700_000_000,
            tolerance: 300,
        });
        assert!(verify(
            &signed(1_700_000_000, SECRET, BODY),
            &[SECRET.as_bytes()],
            w
        )
        .is_ok());
        assert!(verify(&signed(1_700_000_000, SECRET, BODY), &[b"whsec_other"], w).is_err());
        assert!(verify(
            &signed(1_699_999_000, SECRET, BODY),
            &[SECRET.as_bytes()],
            w
        )
        .is_err());
        assert_eq!(event_id(BODY.as_bytes()).unwrap(), "evt_1");
        assert_eq!(event_id(b"{}").unwrap_err().status, 400);
        assert_eq!(event_id(b"not json").unwrap_err().status, 400);
    }
}
