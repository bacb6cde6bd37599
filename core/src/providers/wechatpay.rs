//! WeChat Pay API v3: `Wechatpay-Signature` is the base64 SHA256withRSA
//! (PKCS#1 v1.5) signature of `timestamp\nnonce\nbody\n` by the platform key
//! that `Wechatpay-Serial` names (a platform certificate's serial or a WeChat
//! Pay public key id), with `Wechatpay-Timestamp` and `Wechatpay-Nonce`;
//! ±300 s. Signatures starting `WECHATPAY/SIGNTEST/` are WeChat's probes
//! that a merchant really verifies: they must fail. Key: the notification
//! `id`. The `resource` is AEAD_AES_256_GCM under the merchant's API v3 key.

use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use rsa::RsaPublicKey;

use super::alipay::{parse_rsa_public_key, rsa_sha256_verifies};
use super::{
    check_timestamp, decode_base64, Answer, EventType, Inbound, Provider, Reconciler, Rejection,
    Scheme, SettingError, Settings, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "wechatpay",
    setup: "WeChat Pay merchant platform: give the receive URL as the notify_url of your orders; the platform certificates' public keys go in `platform_keys` and the APIv3 key in `api_v3_key`.",
    build,
    event_headers: &["wechatpay-"],
    signature_headers: &["wechatpay-signature", "wechatpay-serial"],
    credential_fields: &[],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::None(
        "WeChat Pay can be asked about one order, but no API lists the notifications it sent",
    ),
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// The notification's `event_type` (`TRANSACTION.SUCCESS`).
fn event_type(req: &Inbound) -> Option<String> {
    super::json_text(&req.body, "/event_type")
}

struct Wechatpay {
    platform_keys: Vec<(String, RsaPublicKey)>,
    api_v3_key: Vec<u8>,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    if settings.platform_keys.is_empty() {
        return Err(SettingError::new(
            "platform_keys",
            "wechatpay needs its platform public keys by serial (platform_keys = { SERIAL = \"PEM\" })",
        ));
    }
    let mut platform_keys = Vec::with_capacity(settings.platform_keys.len());
    for (serial, pem) in &settings.platform_keys {
        let key = parse_public_key(pem)
            .map_err(|p| SettingError::new(format!("platform_keys.{serial}"), p))?;
        platform_keys.push((serial.clone(), key));
    }
    let api_v3_key = match &settings.api_v3_key {
        Some(k) if k.expose().len() == 32 => k.expose().as_bytes().to_vec(),
        Some(_) => {
            return Err(SettingError::new(
                "api_v3_key",
                "must be the 32-character API v3 key",
            ))
        }
        None => {
            return Err(SettingError::new(
                "api_v3_key",
                "wechatpay needs the API v3 key to decrypt notifications",
            ))
        }
    };
    Ok(Box::new(Wechatpay {
        platform_keys,
        api_v3_key,
    }))
}

impl Scheme for Wechatpay {
    fn verify(&self, req: &Inbound, window: Option<Window>) -> Result<String, Rejection> {
        verify(req, &self.platform_keys, window)
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        // A notification the API v3 key cannot open is useless to the application.
        decrypt_resource(&req.body, &self.api_v3_key)?;
        idempotency_key(req)
    }

    /// WeChat Pay wants 200 or 204 and no body on success.
    fn shape_answer(&self, answer: &mut Answer, _req: &Inbound, _claimed_now: bool) {
        if answer.status == 200 {
            answer.status = 204;
            answer.body.clear();
        }
    }
}

const SIGNATURE_TYPE: &str = "WECHATPAY2-SHA256-RSA2048";
const PROBE_PREFIX: &str = "WECHATPAY/SIGNTEST/";

/// A platform public key (or WeChat Pay public key) as PEM
/// SubjectPublicKeyInfo; PKCS#1 PEM and bare base64 DER are accepted too.
pub fn parse_public_key(text: &str) -> Result<RsaPublicKey, String> {
    parse_rsa_public_key(text)
}

pub fn verify(
    req: &Inbound,
    platform_keys: &[(String, RsaPublicKey)],
    window: Option<Window>,
) -> Result<String, Rejection> {
    let header = |name: &str| {
        req.header(name)
            .map(str::trim)
            .ok_or_else(|| Rejection::signature(format!("missing {name} header")))
    };
    let signature = header("Wechatpay-Signature")?;
    if signature.starts_with(PROBE_PREFIX) {
        return Err(Rejection::signature(
            "Wechatpay-Signature is a WECHATPAY/SIGNTEST/ signature probe, refused as it must be",
        ));
    }
    if let Some(kind) = req.header("Wechatpay-Signature-Type") {
        if !kind.trim().eq_ignore_ascii_case(SIGNATURE_TYPE) {
            return Err(Rejection::signature(format!(
                "Wechatpay-Signature-Type is not {SIGNATURE_TYPE}"
            )));
        }
    }
    let timestamp = header("Wechatpay-Timestamp")?;
    let nonce = header("Wechatpay-Nonce")?;
    let serial = header("Wechatpay-Serial")?;
    check_timestamp(timestamp, window)?;
    let sig = decode_base64(signature)
        .ok_or_else(|| Rejection::signature("Wechatpay-Signature is not base64"))?;
    let candidates: Vec<&(String, RsaPublicKey)> = platform_keys
        .iter()
        .filter(|(configured, _)| configured.trim().eq_ignore_ascii_case(serial))
        .collect();
    if candidates.is_empty() {
        return Err(Rejection::signature(format!(
            "Wechatpay-Serial {} names no configured platform key",
            printable(serial)
        )));
    }
    let mut message = Vec::with_capacity(timestamp.len() + nonce.len() + req.body.len() + 3);
    for part in [timestamp.as_bytes(), nonce.as_bytes(), &req.body] {
        message.extend_from_slice(part);
        message.push(b'\n');
    }
    candidates
        .iter()
        .find(|(_, key)| rsa_sha256_verifies(key, &message, &sig))
        .map(|(configured, _)| {
            format!(
                "{SIGNATURE_TYPE} signature matched platform key {}",
                configured.trim()
            )
        })
        .ok_or_else(|| Rejection::signature(format!("{SIGNATURE_TYPE} signature does not match")))
}

/// An untrusted header value, safe and short enough for a stored reason.
fn printable(value: &str) -> String {
    let shown: String = value
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(64)
        .collect();
    if shown.is_empty() {
        "(unprintable)".into()
    } else {
        shown
    }
}

/// The notification's top-level `id` (`EV-...`).
pub fn idempotency_key(req: &Inbound) -> Result<String, Rejection> {
    let notification: serde_json::Value = serde_json::from_slice(&req.body)
        .map_err(|_| Rejection::key("body is not a JSON WeChat Pay notification"))?;
    notification
        .get("id")
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| Rejection::key("WeChat Pay notification has no id"))
}

/// Decrypts the notification's `resource` (AEAD_AES_256_GCM under the 32-byte
/// API v3 key; `ciphertext` is base64 with the 16-byte tag at its end, `nonce`
/// and `associated_data` are used as their raw bytes) into its plaintext.
pub fn decrypt_resource(body: &[u8], api_v3_key: &[u8]) -> Result<Vec<u8>, Rejection> {
    let notification: serde_json::Value = serde_json::from_slice(body)
        .map_err(|_| Rejection::key("body is not a JSON WeChat Pay notification"))?;
    let resource = notification
        .get("resource")
        .filter(|r| r.is_object())
        .ok_or_else(|| Rejection::key("notification has no resource object"))?;
    let field = |name: &str| resource.get(name).and_then(serde_json::Value::as_str);
    match resource.get("algorithm") {
        None => {}
        Some(a) if a.as_str() == Some("AEAD_AES_256_GCM") => {}
        Some(_) => return Err(Rejection::key("resource algorithm is not AEAD_AES_256_GCM")),
    }
    let ciphertext = field("ciphertext")
        .and_then(decode_base64)
        .ok_or_else(|| Rejection::key("resource ciphertext is missing or not base64"))?;
    let nonce = field("nonce")
        .map(str::as_bytes)
        .filter(|n| n.len() == 12)
        .ok_or_else(|| Rejection::key("resource nonce is missing or not 12 bytes"))?;
    let aad = field("associated_data").unwrap_or_default();
    let cipher = Aes256Gcm::new_from_slice(api_v3_key)
        .map_err(|_| Rejection::key("the API v3 key is not 32 bytes"))?;
    cipher
        .decrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: &ciphertext,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| Rejection::key("resource cannot be decrypted with the API v3 key"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::alipay::tests::keys;
    use rsa::pkcs8::{EncodePublicKey, LineEnding};
    use rsa::{Pkcs1v15Sign, RsaPrivateKey};
    use sha2::{Digest, Sha256};

    const TS: i64 = 1_700_000_000;
    const SERIAL: &str = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1";
    const OTHER_SERIAL: &str = "PUB_KEY_ID_0114232134912410000000000001";
    const BODY: &str = r#"{"id":"EV-2018022511223320873","create_time":"2015-05-20T13:29:35+08:00","resource_type":"encrypt-resource","event_type":"TRANSACTION.SUCCESS","summary":"支付成功","resource":{"original_type":"transaction","algorithm":"AEAD_AES_256_GCM","ciphertext":"","associated_data":"","nonce":""}}"#;
    const NONCE: &str = "5K8264ILTKCH16CQ2502SI8ZNMTM67VS";

    fn window() -> Option<Window> {
        Some(Window {
            now: TS + 30,
            tolerance: 300,
        })
    }

    fn sign(key: &RsaPrivateKey, ts: &str, nonce: &str, body: &str) -> String {
        let message = format!("{ts}\n{nonce}\n{body}\n");
        let sig = key
            .sign(
                Pkcs1v15Sign::new::<Sha256>(),
                &Sha256::digest(message.as_bytes()),
            )
            .unwrap();
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sig)
    }

    fn request(serial: &str, ts: &str, nonce: &str, sig: &str, body: &str) -> Inbound {
        Inbound {
            headers: vec![
                ("wechatpay-serial".into(), serial.into()),
                ("wechatpay-timestamp".into(), ts.into()),
                ("wechatpay-nonce".into(), nonce.into()),
                ("wechatpay-signature".into(), sig.into()),
                ("wechatpay-signature-type".into(), SIGNATURE_TYPE.into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    fn platform_keys() -> Vec<(String, RsaPublicKey)> {
        let [first, second] = keys();
        vec![
            (OTHER_SERIAL.to_owned(), second.to_public_key()),
            (SERIAL.to_owned(), first.to_public_key()),
        ]
    }

    fn signed() -> Inbound {
        let ts = TS.to_string();
        let sig = sign(&keys()[0], &ts, NONCE, BODY);
        request(SERIAL, &ts, NONCE, &sig, BODY)
    }

    #[test]
    fn signed_notifications_verify_with_the_serials_key() {
        let platform = platform_keys();
        assert_eq!(
            verify(&signed(), &platform, window()).unwrap(),
            format!("{SIGNATURE_TYPE} signature matched platform key {SERIAL}")
        );
        // Serial case does not matter; the window may be waived.
        let mut lower = signed();
        lower.headers[0].1 = SERIAL.to_lowercase();
        assert!(verify(&lower, &platform, window()).is_ok());
        assert!(verify(&signed(), &platform, None).is_ok());
        // Without the optional Signature-Type header.
        let mut untyped = signed();
        untyped
            .headers
            .retain(|(n, _)| n != "wechatpay-signature-type");
        assert!(verify(&untyped, &platform, window()).is_ok());
        // The other serial selects the other key.
        let ts = TS.to_string();
        let by_other = sign(&keys()[1], &ts, NONCE, BODY);
        assert!(verify(
            &request(OTHER_SERIAL, &ts, NONCE, &by_other, BODY),
            &platform,
            window()
        )
        .is_ok());
        assert!(verify(
            &request(SERIAL, &ts, NONCE, &by_other, BODY),
            &platform,
            window()
        )
        .is_err());
    }

    #[test]
    fn wrong_serial_tampering_and_stale_times_are_refused() {
        let platform = platform_keys();
        let refused = |req: &Inbound| {
            let err = verify(req, &platform, window()).unwrap_err();
            assert_eq!(err.status, 401, "{err:?}");
            err.reason
        };
        let good = signed();
        let sig = good.header("wechatpay-signature").unwrap().to_owned();
        let ts = TS.to_string();

        let reason = refused(&request("UNKNOWN01", &ts, NONCE, &sig, BODY));
        assert!(reason.contains("no configured platform key"), "{reason}");
        assert!(reason.contains("UNKNOWN01"));
        let reason = refused(&request("bad\u{7}serial<script>", &ts, NONCE, &sig, BODY));
        assert!(
            !reason.contains('<') && !reason.contains('\u{7}'),
            "{reason}"
        );
        assert!(verify(&good, &[], window()).is_err());

        let reason = refused(&request(
            SERIAL,
            &ts,
            NONCE,
            &sig,
            &BODY.replace("支付成功", "退款"),
        ));
        assert!(reason.contains("does not match"));
        refused(&request(SERIAL, &ts, "OTHERNONCE", &sig, BODY));
        refused(&request(SERIAL, &(TS + 1).to_string(), NONCE, &sig, BODY));
        refused(&request(SERIAL, &ts, NONCE, &sig, &format!("{BODY}\n")));

        let late = Some(Window {
            now: TS + 301,
            tolerance: 300,
        });
        assert!(verify(&good, &platform, late)
            .unwrap_err()
            .reason
            .contains("older"));
        let early = Some(Window {
            now: TS - 301,
            tolerance: 300,
        });
        assert!(verify(&good, &platform, early)
            .unwrap_err()
            .reason
            .contains("future"));
        refused(&request(SERIAL, "yesterday", NONCE, &sig, BODY));

        for garbled in ["", "!!!", "AAAA", &sig[..40]] {
            refused(&request(SERIAL, &ts, NONCE, garbled, BODY));
        }
        let mut sm2 = signed();
        sm2.headers[4].1 = "WECHATPAY2-SM2-WITH-SM3".into();
        assert!(refused(&sm2).contains("Signature-Type"));
        for name in [
            "wechatpay-serial",
            "wechatpay-timestamp",
            "wechatpay-nonce",
            "wechatpay-signature",
        ] {
            let mut missing = signed();
            missing.headers.retain(|(n, _)| n != name);
            assert!(refused(&missing).to_lowercase().contains(name));
        }
    }

    #[test]
    fn signature_probes_are_refused() {
        let platform = platform_keys();
        let ts = TS.to_string();
        let probe = format!("{PROBE_PREFIX}{}", sign(&keys()[0], &ts, NONCE, BODY));
        let err = verify(
            &request(SERIAL, &ts, NONCE, &probe, BODY),
            &platform,
            window(),
        )
        .unwrap_err();
        assert_eq!(err.status, 401);
        assert!(err.reason.contains("signature probe"), "{}", err.reason);
        // A probe is refused even with an unknown serial and no window.
        let err = verify(
            &request("PROBE", &ts, NONCE, PROBE_PREFIX, BODY),
            &platform,
            None,
        )
        .unwrap_err();
        assert!(err.reason.contains("signature probe"));
    }

    #[test]
    fn key_is_the_notification_id() {
        assert_eq!(
            idempotency_key(&signed()).unwrap(),
            "EV-2018022511223320873"
        );
        for body in ["", "[]", "{}", r#"{"id":""}"#, r#"{"id":12}"#, "not json"] {
            let mut req = signed();
            req.body = body.as_bytes().to_vec();
            assert_eq!(idempotency_key(&req).unwrap_err().status, 400, "{body}");
        }
    }

    const API_V3_KEY: &[u8; 32] = b"a7cde1ef4e1a4f1d9c3b5a6e7d8f9012";

    fn encrypted(plaintext: &[u8], key: &[u8], nonce: &str, aad: Option<&str>) -> Vec<u8> {
        let cipher = Aes256Gcm::new_from_slice(key).unwrap();
        let ciphertext = cipher
            .encrypt(
                Nonce::from_slice(nonce.as_bytes()),
                Payload {
                    msg: plaintext,
                    aad: aad.unwrap_or_default().as_bytes(),
                },
            )
            .unwrap();
        let mut resource = serde_json::json!({
            "original_type": "transaction",
            "algorithm": "AEAD_AES_256_GCM",
            "ciphertext": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ciphertext),
            "nonce": nonce,
        });
        if let Some(aad) = aad {
            resource["associated_data"] = aad.into();
        }
        serde_json::json!({
            "id": "EV-2018022511223320873",
            "event_type": "TRANSACTION.SUCCESS",
            "resource_type": "encrypt-resource",
            "resource": resource,
        })
        .to_string()
        .into_bytes()
    }

    const PLAINTEXT: &[u8] = br#"{"mchid":"1900000109","out_trade_no":"1217752501201407033233368018","trade_state":"SUCCESS"}"#;

    pub(in crate::providers) fn contract() -> crate::providers::contract::Contract {
        use crate::providers::contract::{Contract, Vector};
        let [key, other] = keys();
        let settings = |k: &RsaPrivateKey| Settings {
            platform_keys: [(
                SERIAL.to_owned(),
                k.to_public_key().to_public_key_pem(LineEnding::LF).unwrap(),
            )]
            .into(),
            api_v3_key: Some(crate::secret::Secret::new(
                std::str::from_utf8(API_V3_KEY).unwrap(),
            )),
            ..Default::default()
        };
        let signed_body = |body: &[u8]| {
            let body = std::str::from_utf8(body).unwrap();
            let ts = TS.to_string();
            request(SERIAL, &ts, NONCE, &sign(key, &ts, NONCE, body), body)
        };
        let body = encrypted(PLAINTEXT, API_V3_KEY, "fdasflkja484", Some("transaction"));
        let mut keyless: serde_json::Value = serde_json::from_slice(&body).unwrap();
        keyless.as_object_mut().unwrap().remove("id");
        Contract {
            settings: settings(key),
            wrong: settings(other),
            vector: Vector {
                request: signed_body(&body),
                now: TS + 30,
                key: "EV-2018022511223320873",
            },
            keyless: Some(Vector {
                request: signed_body(keyless.to_string().as_bytes()),
                now: TS,
                key: "",
            }),
            // WeChat Pay's SDKs sign requests to WeChat Pay, not notifications.
            pieces: [
                "\n",
                "{",
                "}",
                PROBE_PREFIX,
                SERIAL,
                NONCE,
                BODY,
                r#"{"resource":{"nonce":"123456789012","ciphertext":"AAAAAAAAAAAAAAAAAAAAAA=="}}"#,
            ]
            .map(String::from)
            .to_vec(),
            sdk: None,
        }
    }

    #[test]
    fn resources_decrypt_with_the_api_v3_key() {
        let body = encrypted(PLAINTEXT, API_V3_KEY, "fdasflkja484", Some("transaction"));
        assert_eq!(decrypt_resource(&body, API_V3_KEY).unwrap(), PLAINTEXT);
        let no_aad = encrypted(PLAINTEXT, API_V3_KEY, "fdasflkja484", None);
        assert_eq!(decrypt_resource(&no_aad, API_V3_KEY).unwrap(), PLAINTEXT);
        let empty_aad = encrypted(PLAINTEXT, API_V3_KEY, "fdasflkja484", Some(""));
        assert_eq!(decrypt_resource(&empty_aad, API_V3_KEY).unwrap(), PLAINTEXT);

        let fails = |body: &[u8], key: &[u8]| {
            let err = decrypt_resource(body, key).unwrap_err();
            assert_eq!(err.status, 400, "{err:?}");
            err.reason
        };
        let reason = fails(&body, b"00000000000000000000000000000000");
        assert_eq!(reason, "resource cannot be decrypted with the API v3 key");
        assert!(fails(&body, b"short").contains("32 bytes"));
        // Associated data and ciphertext are authenticated.
        let mut json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        json["resource"]["associated_data"] = "refund".into();
        fails(json.to_string().as_bytes(), API_V3_KEY);
        let mut json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let ct = json["resource"]["ciphertext"].as_str().unwrap().to_owned();
        let mut raw = decode_base64(&ct).unwrap();
        raw[0] ^= 1;
        json["resource"]["ciphertext"] =
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, raw).into();
        fails(json.to_string().as_bytes(), API_V3_KEY);
        for (field, value) in [
            ("nonce", serde_json::json!("short")),
            ("nonce", serde_json::json!(12)),
            ("ciphertext", serde_json::json!("not base64!")),
            ("ciphertext", serde_json::json!("")),
            ("algorithm", serde_json::json!("AEAD_SM4_GCM")),
        ] {
            let mut json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            json["resource"][field] = value;
            fails(json.to_string().as_bytes(), API_V3_KEY);
        }
        for body in [&b""[..], b"{}", br#"{"resource":"x"}"#, b"[1]"] {
            fails(body, API_V3_KEY);
        }
    }

    #[test]
    fn public_keys_parse_as_pem() {
        let public = keys()[0].to_public_key();
        let pem = public.to_public_key_pem(LineEnding::LF).unwrap();
        assert_eq!(parse_public_key(&pem).unwrap(), public);
        assert!(
            parse_public_key("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")
                .unwrap_err()
                .contains("certificate")
        );
        assert!(parse_public_key("garbage").is_err());
    }
}
