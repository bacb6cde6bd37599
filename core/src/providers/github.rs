//! GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`; no
//! timestamp. The key, `X-GitHub-Delivery`, is scoped by the source.

use std::borrow::Cow;

use hmac::Mac;

use super::{
    any_key_signs, decode_hex, hmac_sha256, key_slices, matched, EventType, Inbound, Provider,
    Reconciler, Rejection, Scheme, SettingError, Settings, Signed, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "github",
    setup: "The repository's (or organisation's) Settings, Webhooks, Add webhook: paste the receive URL as the Payload URL, set Content type to application/json, and type a long random Secret that you also put in this source's `secrets`.",
    build,
    event_headers: &["x-github-"],
    signature_headers: &["x-hub-signature-256", "x-hub-signature"],
    credential_fields: &[],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::GitHubDeliveries,
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// `X-GitHub-Event`, with the payload's `action` where it has one
/// (`issues.opened`; `push` has none).
fn event_type(req: &Inbound) -> Option<String> {
    let event = req.header("x-github-event")?.trim();
    if event.is_empty() {
        return None;
    }
    Some(match super::json_text(&req.body, "/action") {
        Some(action) => format!("{event}.{action}"),
        None => event.to_owned(),
    })
}

struct Github {
    secrets: Vec<Vec<u8>>,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    Ok(Box::new(Github {
        secrets: settings.shared_secrets(PROVIDER.name)?,
    }))
}

impl Scheme for Github {
    fn verify(&self, req: &Inbound, _window: Option<Window>) -> Result<String, Rejection> {
        verify(req, &key_slices(&self.secrets))
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        req.required_header("x-github-delivery")
    }

    /// The signature covers the body alone.
    fn replay_content<'a>(&self, req: &'a Inbound) -> Option<Cow<'a, [u8]>> {
        Some(Cow::Borrowed(&req.body))
    }

    fn sign_sample(&self, event_id: &str, _now: i64) -> Result<Signed, String> {
        // Each event's own content, as GitHub's are: the replay guard takes
        // equal signed bodies under new ids for one event's replays.
        let body = serde_json::json!({"action": "opened", "number": 1, "sample": event_id})
            .to_string()
            .into_bytes();
        let mac = hmac_sha256(&self.secrets[0], &[&body]);
        Ok(Signed {
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-github-event".into(), "pull_request".into()),
                ("x-github-delivery".into(), event_id.into()),
                (
                    "x-hub-signature-256".into(),
                    format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
                ),
            ],
            body,
        })
    }
}

pub fn verify(req: &Inbound, secrets: &[&[u8]]) -> Result<String, Rejection> {
    let header = req
        .header("x-hub-signature-256")
        .ok_or_else(|| Rejection::signature("missing X-Hub-Signature-256 header"))?;
    let sig = header
        .trim()
        .strip_prefix("sha256=")
        .and_then(decode_hex)
        .ok_or_else(|| Rejection::signature("X-Hub-Signature-256 is not sha256=<hex>"))?;
    any_key_signs(secrets, &[&req.body], &sig)
        .map(|i| matched("sha256", i, secrets.len()))
        .ok_or_else(|| Rejection::signature("sha256 signature does not match"))
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
        let vector = |with_key: bool| {
            let mut req = request(
                "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
                "Hello, World!",
            );
            if with_key {
                req.headers
                    .push(("x-github-delivery".into(), "72d3162e-cc78".into()));
            }
            Vector {
                request: req,
                now: 1_700_000_000,
                key: "72d3162e-cc78",
            }
        };
        Contract {
            settings: settings("It's a Secret to Everybody"),
            wrong: settings("It's a secret to everybody"),
            vector: vector(true),
            keyless: Some(vector(false)),
            pieces: ["sha256=", "sha1="].map(String::from).to_vec(),
            sdk: Some(Sdk {
                script: "sign.mjs",
                request: |_| {
                    serde_json::json!({"provider": "github", "secret": "It's a Secret to Everybody",
                        "body": r#"{"action":"opened"}"#, "id": "gh-contract"})
                },
                settings: |_| settings("It's a Secret to Everybody"),
                key: Some("gh-contract"),
            }),
        }
    }

    fn request(sig: &str, body: &str) -> Inbound {
        Inbound {
            headers: vec![("x-hub-signature-256".into(), sig.into())],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn published_vectors_verify() {
        // GitHub's docs, then the @octokit/webhooks-methods fixture (vectors.md).
        let docs = request(
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "Hello, World!",
        );
        assert!(verify(&docs, &[b"It's a Secret to Everybody"]).is_ok());
        let octokit = request(
            "sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3",
            r#"{"foo":"bar"}"#,
        );
        assert!(verify(&octokit, &[b"old-secret", b"mysecret"]).is_ok());
    }

    #[test]
    fn tampered_wrong_or_garbled_is_refused() {
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(verify(
            &request(sig, "Hello, World?"),
            &[b"It's a Secret to Everybody"]
        )
        .is_err());
        assert!(verify(&request(sig, "Hello, World!"), &[b"wrong"]).is_err());
        for garbled in ["", "sha256=", "sha1=757107ea", &sig[..30], "sha256=zz"] {
            assert_eq!(
                verify(
                    &request(garbled, "Hello, World!"),
                    &[b"It's a Secret to Everybody"]
                )
                .unwrap_err()
                .status,
                401
            );
        }
    }
}
