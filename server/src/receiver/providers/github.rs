//! GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`; no
//! timestamp. The key, `X-GitHub-Delivery`, is scoped by the source.

use super::{any_key_signs, decode_hex, matched, Rejection};
use crate::receiver::Inbound;

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
