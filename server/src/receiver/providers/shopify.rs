//! Shopify: `X-Shopify-Hmac-Sha256` is the base64 HMAC-SHA256 of the raw body
//! under the app's secret; no timestamp. Key: `X-Shopify-Webhook-Id`.

use super::{any_key_signs, decode_base64, matched, Rejection};
use crate::receiver::Inbound;

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
