//! Standard Webhooks: `webhook-signature` holds space-separated `v1,<base64>`
//! HMAC-SHA256 signatures of `id.timestamp.body`, keyed by the base64-decoded
//! secret after `whsec_`.

use super::{any_key_signs, check_timestamp, decode_base64, matched, Rejection, Window};
use crate::receiver::Inbound;

pub fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    decode_base64(encoded)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| "a Standard Webhooks secret is `whsec_` followed by base64".to_owned())
}

pub fn verify(
    req: &Inbound,
    secrets: &[&[u8]],
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
    let keys: Vec<Vec<u8>> = secrets
        .iter()
        .filter_map(|s| {
            std::str::from_utf8(s)
                .ok()
                .and_then(|s| decode_secret(s).ok())
        })
        .collect();
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
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
            if let Some(i) = any_key_signs(&keys, &parts, &sig) {
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
mod tests {
    use super::*;

    fn request(id: &str, ts: &str, sig: &str, body: &str) -> Inbound {
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
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TS: &str = "1649367553";
    const BODY: &str = r#"{"email":"test@example.com","username":"test_user"}"#;
    const SIG: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

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
