//! Shopify: `X-Shopify-Hmac-Sha256` is the base64 HMAC-SHA256 of the raw body
//! under the app's secret; no timestamp. Key: `X-Shopify-Webhook-Id`.

use base64::Engine;
use std::borrow::Cow;

use hmac::Mac;

use super::{
    any_key_signs, decode_base64, hmac_sha256, key_slices, matched, EventType, Inbound, Provider,
    Reconciler, Rejection, Scheme, SettingError, Settings, Signed, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "shopify",
    setup: "Shopify admin, Settings, Notifications, Webhooks (or your app's webhook subscriptions): paste the receive URL; the signing key Shopify shows there (for an app, its API secret key) goes in this source's `secrets`.",
    build,
    event_headers: &["x-shopify-"],
    signature_headers: &["x-shopify-hmac-sha256"],
    credential_fields: &[],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::None(
        "Shopify's Admin API lists no webhooks it sent (only its Partner Dashboard shows delivery metrics): there is nothing to compare with",
    ),
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// `X-Shopify-Topic` (`orders/create`).
fn event_type(req: &Inbound) -> Option<String> {
    req.header("x-shopify-topic")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

struct Shopify {
    secrets: Vec<Vec<u8>>,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    Ok(Box::new(Shopify {
        secrets: settings.shared_secrets(PROVIDER.name)?,
    }))
}

impl Scheme for Shopify {
    fn verify(&self, req: &Inbound, _window: Option<Window>) -> Result<String, Rejection> {
        verify(req, &key_slices(&self.secrets))
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        req.required_header("x-shopify-webhook-id")
    }

    /// The signature covers the body alone.
    fn replay_content<'a>(&self, req: &'a Inbound) -> Option<Cow<'a, [u8]>> {
        Some(Cow::Borrowed(&req.body))
    }

    fn sign_sample(&self, event_id: &str, _now: i64) -> Result<Signed, String> {
        let body = serde_json::json!({"id": 820982911946154508_u64, "total_price": "42.00", "sample": event_id})
            .to_string()
            .into_bytes();
        let mac = hmac_sha256(&self.secrets[0], &[&body]);
        Ok(Signed {
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-shopify-topic".into(), "orders/create".into()),
                ("x-shopify-webhook-id".into(), event_id.into()),
                (
                    "x-shopify-hmac-sha256".into(),
                    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()),
                ),
            ],
            body,
        })
    }
}

pub fn verify(req: &Inbound, secrets: &[&[u8]]) -> Result<String, Rejection> {
    let header = req
        .header("x-shopify-hmac-sha256")
        .ok_or_else(|| Rejection::signature("missing X-Shopify-Hmac-Sha256 header"))?;
    let sig = decode_base64(header)
        .ok_or_else(|| Rejection::signature("X-Shopify-Hmac-Sha256 is not base64"))?;
    any_key_signs(secrets, &[&req.body], &sig)
        .map(|i| matched("hmac-sha256", i, secrets.len()))
        .ok_or_else(|| Rejection::signature("hmac-sha256 signature does not match"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Pinned with Python: base64(hmac.new(b"shpss_secret", body, sha256).digest()).
    const BODY: &str = r#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    const SIG: &str = "vo+n5h/cLxNKGlgJ0Fd1aDzU0aOaajK8Hs9m0hPqWiQ=";

    pub(super) fn contract() -> crate::providers::contract::Contract {
        use crate::providers::contract::{Contract, Vector};
        let settings = |secret: &str| Settings {
            secrets: vec![crate::secret::Secret::new(secret)],
            ..Default::default()
        };
        let vector = |with_key: bool| {
            let mut req = request(SIG, BODY);
            if with_key {
                req.headers
                    .push(("x-shopify-webhook-id".into(), "b54557e4-bdd9".into()));
            }
            Vector {
                request: req,
                now: 1_700_000_000,
                key: "b54557e4-bdd9",
            }
        };
        Contract {
            settings: settings("shpss_secret"),
            wrong: settings("shpss_other"),
            vector: vector(true),
            keyless: Some(vector(false)),
            // Shopify publishes no signer: its libraries only verify.
            pieces: ["==", "/"].map(String::from).to_vec(),
            sdk: None,
        }
    }

    fn request(sig: &str, body: &str) -> Inbound {
        Inbound {
            headers: vec![("x-shopify-hmac-sha256".into(), sig.into())],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn pinned_vector_verifies_and_tampering_fails() {
        assert!(verify(&request(SIG, BODY), &[b"shpss_secret"]).is_ok());
        assert!(verify(
            &request(SIG, &BODY.replace("jon", "eve")),
            &[b"shpss_secret"]
        )
        .is_err());
        assert!(verify(&request(SIG, BODY), &[b"other"]).is_err());
        assert!(verify(&request("%%%", BODY), &[b"shpss_secret"]).is_err());
    }
}
