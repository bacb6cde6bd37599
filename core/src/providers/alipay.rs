//! Alipay asynchronous notifications: a form-encoded body whose `sign` is the
//! base64 RSA2 signature (SHA256withRSA, PKCS#1 v1.5) by Alipay's public key
//! over every other parameter except `sign_type`, empty values skipped, sorted
//! by name and joined as `name=value&...` with the values URL-decoded. Key:
//! `notify_id`. The answer Alipay expects is the body `success`.
//!
//! Some notifications (the open platform's, such as service-market orders)
//! sign `sign_type` too; Alipay's Node SDK checks both forms, and so does this
//! module: without `sign_type` first, then with it when the body carries it.

use std::borrow::Cow;

use rsa::pkcs1::DecodeRsaPublicKey;
use rsa::pkcs8::DecodePublicKey;
use rsa::traits::PublicKeyParts;
use rsa::{Pkcs1v15Sign, RsaPublicKey};
use sha2::{Digest, Sha256};

use super::template::Field;
use super::{
    check_form_size, decode_base64, form_pairs, matched, Answer, EventType, Inbound, Provider,
    Reconciler, Rejection, Scheme, SettingError, Settings, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "alipay",
    setup: "Alipay Open Platform, your app: give the receive URL as the notify_url of your payment requests; Alipay's public key goes in this source's `public_key`.",
    build,
    // Alipay puts everything in the body.
    event_headers: &[],
    signature_headers: &[],
    credential_fields: &[],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::None(
        "Alipay can be asked about one trade (alipay.trade.query), but no API lists the notifications it sent",
    ),
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// `notify_type` (`trade_status_sync`); filters reach `trade_status` through
/// the body.
fn event_type(req: &Inbound) -> Option<String> {
    super::form_text(&req.body, "notify_type")
}

struct Alipay {
    public_key: RsaPublicKey,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    let text = settings.public_key.as_deref().ok_or_else(|| {
        SettingError::new(
            "public_key",
            "alipay needs Alipay's RSA public key (PEM or base64)",
        )
    })?;
    let public_key = parse_public_key(text).map_err(|p| SettingError::new("public_key", p))?;
    Ok(Box::new(Alipay { public_key }))
}

impl Scheme for Alipay {
    fn verify(&self, req: &Inbound, _window: Option<Window>) -> Result<String, Rejection> {
        verify(req, &self.public_key)
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        idempotency_key(req)
    }

    /// The signed string is rebuilt from the parameters (`k=v&k=v`,
    /// sorted), so one parameter's value can take in the next pair and sign
    /// the same: no field's value is bound, and the replay guard digests
    /// the signed string, which every such re-encoding leaves equal.
    fn covers(&self, _field: &Field) -> bool {
        false
    }

    fn replay_content<'a>(&self, req: &'a Inbound) -> Option<Cow<'a, [u8]>> {
        self.signed_content(req)
    }

    fn signed_content<'a>(&self, req: &'a Inbound) -> Option<Cow<'a, [u8]>> {
        Some(Cow::Owned(signed_content(&form_pairs(&req.body), false)))
    }

    /// Alipay keeps retrying until the body is exactly `success`.
    fn shape_answer(&self, answer: &mut Answer, _req: &Inbound, _claimed_now: bool) {
        if answer.status == 200 {
            answer.content_type = "text/plain".into();
            answer.body = b"success".to_vec();
        }
    }
}

/// Alipay's public key as its console shows it (bare base64, no armour) or
/// as PEM: SubjectPublicKeyInfo (`BEGIN PUBLIC KEY`) or PKCS#1 (`BEGIN RSA
/// PUBLIC KEY`).
pub fn parse_public_key(text: &str) -> Result<RsaPublicKey, String> {
    parse_rsa_public_key(text)
}

/// Shared with WeChat Pay: an RSA public key of 2048 bits or more, as PEM
/// (SubjectPublicKeyInfo or PKCS#1, any line width or line ending) or as the
/// bare base64 of its DER.
pub fn parse_rsa_public_key(text: &str) -> Result<RsaPublicKey, String> {
    let text = text.trim();
    // Text before the armour (openssl's "Bag Attributes", a comment) is ignored.
    let armoured = text
        .find("-----BEGIN ")
        .map(|at| &text[at + "-----BEGIN ".len()..]);
    let (label, encoded) = match armoured {
        Some(rest) => {
            let (label, rest) = rest
                .split_once("-----")
                .ok_or("PEM armour has no end to its BEGIN line")?;
            let end = format!("-----END {label}-----");
            let (body, _) = rest
                .split_once(end.as_str())
                .ok_or_else(|| format!("PEM armour has no {end} line"))?;
            (Some(label), body)
        }
        None => (None, text),
    };
    let encoded: String = encoded
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let der = decode_base64(&encoded).ok_or("an RSA public key is PEM or bare base64 DER")?;
    let key = match label {
        Some("PUBLIC KEY") => RsaPublicKey::from_public_key_der(&der)
            .map_err(|e| format!("not an RSA SubjectPublicKeyInfo: {e}"))?,
        Some("RSA PUBLIC KEY") => RsaPublicKey::from_pkcs1_der(&der)
            .map_err(|e| format!("not a PKCS#1 RSA public key: {e}"))?,
        Some("CERTIFICATE") => {
            return Err("this is a certificate; configure its public key instead \
                 (openssl x509 -pubkey -noout -in cert.pem)"
                .into())
        }
        Some(other) => return Err(format!("PEM label {other:?} is not an RSA public key")),
        None => RsaPublicKey::from_public_key_der(&der)
            .or_else(|_| RsaPublicKey::from_pkcs1_der(&der))
            .map_err(|_| "bare base64 is neither an RSA SubjectPublicKeyInfo nor PKCS#1")?,
    };
    let bits = key.n().bits();
    if bits < 2048 {
        return Err(format!(
            "RSA key of {bits} bits is too small (2048 or more)"
        ));
    }
    Ok(key)
}

/// Constant time is not needed here: the signature is checked with a public key.
pub fn rsa_sha256_verifies(key: &RsaPublicKey, message: &[u8], signature: &[u8]) -> bool {
    key.verify(
        Pkcs1v15Sign::new::<Sha256>(),
        &Sha256::digest(message),
        signature,
    )
    .is_ok()
}

pub fn verify(req: &Inbound, public_key: &RsaPublicKey) -> Result<String, Rejection> {
    let params = form_pairs(&req.body);
    check_form_size(&params)?;
    let mut names: Vec<&[u8]> = params.iter().map(|(n, _)| n.as_slice()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        // Alipay never repeats a parameter; a repeat could make the signed
        // value and the one the application reads differ.
        return Err(Rejection::signature(
            "a form parameter appears more than once",
        ));
    }
    let value = |name: &[u8]| {
        params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    };
    let sign = value(b"sign")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Rejection::signature("missing sign parameter"))?;
    // A '+' sent unencoded arrives as a space; `sign` itself is not signed.
    let sign = std::str::from_utf8(sign)
        .ok()
        .and_then(|s| decode_base64(&s.replace(' ', "+")))
        .ok_or_else(|| Rejection::signature("sign is not base64"))?;
    let sign_type = value(b"sign_type");
    match sign_type {
        None | Some(b"RSA2") => {}
        Some(b"RSA") => {
            return Err(Rejection::signature(
                "sign_type RSA (SHA1withRSA) is refused; only RSA2 is accepted",
            ))
        }
        Some(_) => return Err(Rejection::signature("sign_type is not RSA2")),
    }
    if rsa_sha256_verifies(public_key, &signed_content(&params, false), &sign) {
        return Ok(matched("RSA2", 0, 1));
    }
    if sign_type.is_some() && rsa_sha256_verifies(public_key, &signed_content(&params, true), &sign)
    {
        return Ok("RSA2 signature (sign_type included) matched".into());
    }
    Err(Rejection::signature("RSA2 signature does not match"))
}

/// `name=value&...`, sorted by name, without `sign` (and `sign_type` unless
/// asked), empty values skipped; raw decoded bytes, whatever the charset.
fn signed_content(params: &[(Vec<u8>, Vec<u8>)], with_sign_type: bool) -> Vec<u8> {
    let mut signed: Vec<&(Vec<u8>, Vec<u8>)> = params
        .iter()
        .filter(|(name, value)| {
            !value.is_empty()
                && name.as_slice() != b"sign"
                && (with_sign_type || name.as_slice() != b"sign_type")
        })
        .collect();
    signed.sort();
    let mut content = Vec::new();
    for (i, (name, value)) in signed.into_iter().enumerate() {
        if i > 0 {
            content.push(b'&');
        }
        content.extend_from_slice(name);
        content.push(b'=');
        content.extend_from_slice(value);
    }
    content
}

/// The notification's `notify_id`.
pub fn idempotency_key(req: &Inbound) -> Result<String, Rejection> {
    form_pairs(&req.body)
        .into_iter()
        .find(|(name, _)| name == b"notify_id")
        .and_then(|(_, value)| String::from_utf8(value).ok())
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
        .ok_or_else(|| Rejection::key("missing notify_id parameter"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rsa::pkcs1::EncodeRsaPublicKey;
    use rsa::pkcs8::{EncodePublicKey, LineEnding};
    use rsa::RsaPrivateKey;
    use std::sync::OnceLock;

    /// Two 2048-bit key pairs, made once (slow in debug builds).
    pub(crate) fn keys() -> &'static [RsaPrivateKey; 2] {
        static KEYS: OnceLock<[RsaPrivateKey; 2]> = OnceLock::new();
        KEYS.get_or_init(|| {
            let mut rng = rand::thread_rng();
            [
                RsaPrivateKey::new(&mut rng, 2048).unwrap(),
                RsaPrivateKey::new(&mut rng, 2048).unwrap(),
            ]
        })
    }

    pub(in crate::providers) fn contract() -> crate::providers::contract::Contract {
        use crate::providers::contract::{Contract, Vector};
        let [key, other] = keys();
        let pem = |k: &RsaPrivateKey| Settings {
            public_key: Some(k.to_public_key().to_public_key_pem(LineEnding::LF).unwrap()),
            ..Default::default()
        };
        let without_id: Vec<(&str, &str)> = NOTIFY
            .iter()
            .copied()
            .filter(|(k, _)| *k != "notify_id")
            .collect();
        let sig = sign(key, &without_id);
        let mut keyless = without_id.clone();
        keyless.push(("sign", &sig));
        Contract {
            settings: pem(key),
            wrong: pem(other),
            // Alipay's own signed fixtures are checked below; the contract's
            // requests need this key's private half for the keyless case.
            vector: Vector {
                request: request(body_of(&signed_notify(key))),
                now: 1_700_000_000,
                key: "ac05099524730693a8b330c5ecf72da9786",
            },
            keyless: Some(Vector {
                request: request(form(&keyless)),
                now: 1_700_000_000,
                key: "",
            }),
            // No official signer is installed: alipay-sdk signs requests to
            // Alipay, not notifications.
            pieces: [
                "%zz",
                "sign=",
                "sign_type=RSA2",
                "sign_type=RSA",
                "notify_id=",
                "sign=AAAA",
            ]
            .map(String::from)
            .to_vec(),
            sdk: None,
        }
    }

    fn encode(value: &str) -> String {
        value
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    fn form(params: &[(&str, &str)]) -> Vec<u8> {
        params
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&")
            .into_bytes()
    }

    fn request(body: Vec<u8>) -> Inbound {
        Inbound {
            headers: vec![(
                "content-type".into(),
                "application/x-www-form-urlencoded; charset=utf-8".into(),
            )],
            body,
            ..Default::default()
        }
    }

    /// Signs as Alipay's docs describe: every parameter but `sign` and
    /// `sign_type`, empty values skipped, sorted, `k=v&k=v`, SHA256withRSA.
    fn sign(key: &RsaPrivateKey, params: &[(&str, &str)]) -> String {
        let mut signed: Vec<_> = params
            .iter()
            .filter(|(k, v)| !v.is_empty() && *k != "sign" && *k != "sign_type")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        signed.sort();
        let content = signed.join("&");
        let sig = key
            .sign(
                Pkcs1v15Sign::new::<Sha256>(),
                &Sha256::digest(content.as_bytes()),
            )
            .unwrap();
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sig)
    }

    const NOTIFY: [(&str, &str); 9] = [
        ("notify_time", "2024-05-01 12:00:00"),
        ("notify_type", "trade_status_sync"),
        ("notify_id", "ac05099524730693a8b330c5ecf72da9786"),
        ("app_id", "2014072300007148"),
        ("charset", "utf-8"),
        ("version", "1.0"),
        ("trade_no", "2013112011001004330000121536"),
        ("subject", "语雀空间 500人 & more+"),
        ("trade_status", "TRADE_SUCCESS"),
    ];

    fn signed_notify(key: &RsaPrivateKey) -> Vec<(String, String)> {
        let sig = sign(key, &NOTIFY);
        NOTIFY
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([
                ("sign".to_owned(), sig),
                ("sign_type".to_owned(), "RSA2".to_owned()),
            ])
            .collect()
    }

    fn body_of(params: &[(String, String)]) -> Vec<u8> {
        let borrowed: Vec<(&str, &str)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        form(&borrowed)
    }

    fn with(params: &[(String, String)], name: &str, value: Option<&str>) -> Vec<u8> {
        let mut params: Vec<_> = params.iter().filter(|(k, _)| k != name).cloned().collect();
        if let Some(v) = value {
            params.push((name.to_owned(), v.to_owned()));
        }
        body_of(&params)
    }

    // Real notifications signed by Alipay, from the fixtures of Alipay's
    // official Node SDK (alipay-sdk, test/alipay.test.ts).
    const SDK_PUBLIC_KEY_BARE: &str = "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAqObrdC7hrgAVM98tK0nv3hSQRGGKT4lBsQjHiGjeYZjOPIPHR5knm2jnnz/YGIXIofVHkA/tAlBAd5DrY7YpvI4tP5EONLtZKC2ghBMx7McI2wRD0xiqzxOQr1FuhZGJ8/AUokBzJrzY+aGX2xcOrxFYRlFilvVLTXg4LWjR1tdPkO6+i7wQZAIVMClPkwVRZEbaERRHlKqTzv2gGv5rDU8gRoe1LeaN+6BlbTqHWkQcNCUNrA8C6l17XAXGKDsm/9TFWwO8EPHHHCaQdjtV5/FdcWIt+L8SR1ss7EXTjYDFtxcKVv9rEoY1lX8T4mX+GbXfZHraG5NCF1+XioL5JwIDAQAB";
    const SDK_PUBLIC_KEY_PEM: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAk6DCsBIUhWriFohzRV8F
ic6oQWNnLKKILNk97VU5qcHEuxYzCujKoyva5gy1170mFJw4IcgJF8AyS7iDUwzA
wF4Pp9CpWxDhUhe7mdQJhjBmvTcPLGFFrzlj6unO5lAcbdwaxPUtSxOaNxPJGrTK
/wnKQSbjTMMltp1J68q2Tfgrsn/NdZ6lrxO9rvmky8kowqaH5NjntyHO59jCGabM
j5sI14z8N61wB/QuIJrDuzIPMPrSNbq0cOWcSCDG09oUHTp9fk7suDB8UiFcmVTX
OvK3d4HbeX8V9YsEMxrwxEoYgRRj6K2qrC6oxw480cqf2ueumCmHg6xrcgkyXK81
hwIDAQAB
-----END PUBLIC KEY-----
";
    const SDK_TRADE: [(&str, &str); 25] = [
        ("gmt_create", "2019-08-15 15:56:22"),
        ("charset", "utf-8"),
        ("seller_email", "z97-yuquerevenue@service.aliyun.com"),
        ("subject", "语雀空间 500人规模"),
        ("sign", "QfTb8tqE1BMhS5qAnXtvsF3/jBkEvu9q9en0pdbBUDDjvKycZhQb7h8GDs4FKfi049PynaNuatxSgLb/nLWZpXyyh0LEWdK2S6Ri7nPwrVgOs08zugLO20vOQz44y3ti2Ncm8/wZts1Fr2gZ7pShnVX3d1B50hbsXnObT1r/U8ONNQjWXd0HIul4TG+Q3fm3svmSvFEy0WnzuhcyHPX5Gm4ELNctL6Qd5YniGJFNcc7kopHYtI/XD9YCKCH6Ct02rzUs9i11C9CsadtZn+WhxF26Dqt9sGEFajkJ8cxUTLi8+VCpLHsgPE8P0y095uQcDdK0YjCh4x7wVSov+lrmOQ=="),
        ("buyer_id", "2088102534368455"),
        ("invoice_amount", "0.10"),
        ("notify_id", "2019081500222155624068450559358070"),
        ("fund_bill_list", r#"[{"amount":"0.10","fundChannel":"ALIPAYACCOUNT"}]"#),
        ("notify_type", "trade_status_sync"),
        ("trade_status", "TRADE_SUCCESS"),
        ("receipt_amount", "0.10"),
        ("buyer_pay_amount", "0.10"),
        ("sign_type", "RSA2"),
        ("app_id", "2019073166072302"),
        ("seller_id", "2088531891668739"),
        ("gmt_payment", "2019-08-15 15:56:24"),
        ("notify_time", "2019-08-15 15:56:25"),
        ("version", "1.0"),
        ("out_trade_no", "20190815155618536-564-57"),
        ("total_amount", "0.10"),
        ("trade_no", "2019081522001468450512505578"),
        ("auth_app_id", "2019073166072302"),
        ("buyer_logon_id", "xud***@126.com"),
        ("point_amount", "0.00"),
    ];
    const SDK_MARKET: [(&str, &str); 21] = [
        ("app_id", "2017122801303261"),
        ("charset", "UTF-8"),
        ("commodity_order_id", "2019030800000018079639"),
        ("contactor", "技术支持测试的公司"),
        ("merchant_pid", "2088721996721370"),
        ("method", "alipay.open.servicemarket.order.notify"),
        ("name", "技术支持测试的公司"),
        ("notify_id", "2019030800222102023008121054923345"),
        ("notify_time", "2019-03-08 10:20:23"),
        ("notify_type", "servicemarket_order_notify"),
        ("order_item_num", "1"),
        ("order_ticket", "29b1c37d99ab48c5bd5bdaeaeaefbB37"),
        ("order_time", "2019-03-08 10:20:08"),
        ("phone", "17826894615"),
        ("service_code", "58621634"),
        ("sign", "MsK5SCw8oqLw4f0hiNSd5OVGXxBY3wnQeT8vn5PklJSZFWSZbK4hQbNvkp4ZezeXQH514cEv0ul6Qow8yh6e6yM06LfEL+EZjcpZ0nxzFGRNQ5qq2AUc1OaXQdk92AGvxh+Iq4NGpPQFBd4D8EBJa3NJd8+czMfQskceosOQFqUtLQMYa5DPs+VpN7VM5BdXjaVIuKn5d9Wm2B9dI9ObIM+YRySDkZZPv14DVmUvcrcqJfOR8aHvtSd7B4l92wUQPQgQKNcOQho7xOHS/Bk+Y74AZL2y7TkNmdDoq9OGsThuF5tDW9rI9nVwXxOtsuB+bstra+W7aw9x9DvkKgdSRw=="),
        ("sign_type", "RSA2"),
        ("timestamp", "2019-03-08 10:20:23"),
        ("title", "麦禾商城模版"),
        ("total_price", "0.00"),
        ("version", "1.0"),
    ];

    #[test]
    fn alipay_signed_notifications_verify() {
        let trade = SDK_TRADE.to_vec();
        let key = parse_public_key(SDK_PUBLIC_KEY_BARE).unwrap();
        let req = request(form(&trade));
        assert_eq!(verify(&req, &key).unwrap(), "RSA2 signature matched");
        assert_eq!(
            idempotency_key(&req).unwrap(),
            "2019081500222155624068450559358070"
        );
        let without_type: Vec<_> = trade
            .iter()
            .copied()
            .filter(|(k, _)| *k != "sign_type")
            .collect();
        assert!(verify(&request(form(&without_type)), &key).is_ok());
        let tampered: Vec<_> = trade
            .iter()
            .map(|&(k, v)| {
                if k == "total_amount" {
                    (k, "1000.00")
                } else {
                    (k, v)
                }
            })
            .collect();
        assert!(verify(&request(form(&tampered)), &key).is_err());

        // The open platform's notifications sign sign_type too.
        let key = parse_public_key(SDK_PUBLIC_KEY_PEM).unwrap();
        assert_eq!(
            verify(&request(form(&SDK_MARKET)), &key).unwrap(),
            "RSA2 signature (sign_type included) matched"
        );
        let tampered: Vec<_> = SDK_MARKET
            .iter()
            .map(|&(k, v)| {
                if k == "service_code" {
                    (k, "58621634111")
                } else {
                    (k, v)
                }
            })
            .collect();
        assert!(verify(&request(form(&tampered)), &key).is_err());
        // Each fixture's key is not the other's.
        assert!(verify(
            &request(form(&SDK_MARKET)),
            &parse_public_key(SDK_PUBLIC_KEY_BARE).unwrap()
        )
        .is_err());
    }

    #[test]
    fn signed_as_the_docs_describe_verifies() {
        let [key, other] = keys();
        let params = signed_notify(key);
        let public = key.to_public_key();
        assert_eq!(
            verify(&request(body_of(&params)), &public).unwrap(),
            "RSA2 signature matched"
        );
        // Order in the body does not matter; empty parameters are not signed.
        let mut reordered = params.clone();
        reordered.reverse();
        reordered.push(("passback_params".into(), String::new()));
        assert!(verify(&request(body_of(&reordered)), &public).is_ok());
        // Without sign_type too.
        assert!(verify(&request(with(&params, "sign_type", None)), &public).is_ok());
        assert_eq!(
            idempotency_key(&request(body_of(&params))).unwrap(),
            "ac05099524730693a8b330c5ecf72da9786"
        );

        let refused = |body: Vec<u8>, key: &RsaPublicKey| {
            let err = verify(&request(body), key).unwrap_err();
            assert_eq!(err.status, 401, "{err:?}");
            err.reason
        };
        refused(
            with(&params, "trade_status", Some("TRADE_FINISHED")),
            &public,
        );
        refused(with(&params, "extra", Some("1")), &public);
        refused(with(&params, "subject", None), &public);
        refused(body_of(&params), &other.to_public_key());
        assert!(refused(with(&params, "sign", None), &public).contains("missing sign"));
        assert!(refused(with(&params, "sign", Some("")), &public).contains("missing sign"));
        assert!(refused(with(&params, "sign", Some("not base64!")), &public).contains("base64"));
        refused(with(&params, "sign", Some("AAAA")), &public);
        assert!(refused(with(&params, "sign_type", Some("RSA")), &public).contains("SHA1"));
        refused(with(&params, "sign_type", Some("rsa2")), &public);
        refused(with(&params, "sign_type", Some("")), &public);
        // A repeated parameter is refused, even a harmless-looking one.
        let mut repeated = body_of(&params);
        repeated.extend_from_slice(b"&trade_status=TRADE_SUCCESS");
        assert!(refused(repeated, &public).contains("more than once"));
        let mut double_sign = body_of(&params);
        double_sign.extend_from_slice(b"&sign=AAAA");
        refused(double_sign, &public);
    }

    #[test]
    fn values_are_signed_as_decoded_bytes() {
        let [key, _] = keys();
        let public = key.to_public_key();
        // A GBK notification: the signed bytes are the decoded ones, not UTF-8.
        let gbk_subject: &[u8] = &[0xd3, 0xef, 0xc8, 0xb8];
        let mut content = b"charset=GBK&notify_id=n1&subject=".to_vec();
        content.extend_from_slice(gbk_subject);
        let sig = key
            .sign(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(&content))
            .unwrap();
        let sig = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sig);
        let body = format!(
            "subject=%D3%EF%C8%B8&charset=GBK&notify_id=n1&sign_type=RSA2&sign={}",
            encode(&sig)
        );
        assert!(verify(&request(body.into_bytes()), &public).is_ok());
        // `sign` with its '+' left unencoded (arriving as spaces) still decodes.
        let raw_plus = format!(
            "subject=%D3%EF%C8%B8&charset=GBK&notify_id=n1&sign_type=RSA2&sign={}",
            sig.replace('/', "%2F").replace('=', "%3D")
        );
        assert!(verify(&request(raw_plus.into_bytes()), &public).is_ok());
    }

    #[test]
    fn public_keys_parse_in_every_form_alipay_shows() {
        let [key, _] = keys();
        let public = key.to_public_key();
        let spki = public.to_public_key_pem(LineEnding::LF).unwrap();
        assert_eq!(parse_public_key(&spki).unwrap(), public);
        let crlf = public.to_public_key_pem(LineEnding::CRLF).unwrap();
        assert_eq!(parse_public_key(&crlf).unwrap(), public);
        let pkcs1 = public.to_pkcs1_pem(LineEnding::LF).unwrap();
        assert_eq!(parse_public_key(&pkcs1).unwrap(), public);
        let bare: String = spki.lines().filter(|l| !l.starts_with("-----")).collect();
        assert_eq!(parse_public_key(&format!("  {bare}\n")).unwrap(), public);
        // One long line inside the armour, as pasted from a console.
        let one_line = format!("-----BEGIN PUBLIC KEY-----\n{bare}\n-----END PUBLIC KEY-----");
        assert_eq!(parse_public_key(&one_line).unwrap(), public);
        let preceded = format!("subject=/CN=Alipay\n{spki}\ntrailing note");
        assert_eq!(parse_public_key(&preceded).unwrap(), public);
        let bare_pkcs1: String = pkcs1.lines().filter(|l| !l.starts_with("-----")).collect();
        assert_eq!(parse_public_key(&bare_pkcs1).unwrap(), public);

        for bad in [
            "",
            "not a key",
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----",
            "-----BEGIN PUBLIC KEY-----\nAAAA",
            "-----BEGIN PUBLIC KEY",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
            "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA",
        ] {
            assert!(parse_public_key(bad).is_err(), "{bad:?}");
        }
        // Keys under 2048 bits are refused.
        let small = RsaPrivateKey::new(&mut rand::thread_rng(), 1024).unwrap();
        let small_pem = small
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        assert!(parse_public_key(&small_pem).unwrap_err().contains("1024"));
    }

    #[test]
    fn key_is_the_notify_id() {
        assert_eq!(
            idempotency_key(&request(b"a=1&notify_id=abc%20def&b=2".to_vec())).unwrap(),
            "abc def"
        );
        for body in [
            &b""[..],
            b"notify_id=",
            b"notify_id",
            b"notify_id=%FF",
            b"x=1",
        ] {
            assert_eq!(
                idempotency_key(&request(body.to_vec())).unwrap_err().status,
                400
            );
        }
    }

    /// A notification whose `notify_id` takes in the next pair signs the
    /// same string: the key is not bound, and the replay guard digests the
    /// signed string, equal for both encodings.
    #[test]
    fn a_reencoded_notification_is_the_same_signed_content() {
        let scheme = Alipay {
            public_key: keys()[0].to_public_key(),
        };
        let plain = request(b"notify_id=abc&notify_time=2024-01-01&sign=x".to_vec());
        let merged = request(b"notify_id=abc%26notify_time%3D2024-01-01&sign=x".to_vec());
        assert_ne!(idempotency_key(&plain), idempotency_key(&merged));
        assert_eq!(
            scheme.replay_content(&plain).unwrap(),
            scheme.replay_content(&merged).unwrap()
        );
        assert!(!scheme.covers(&Field::Form("notify_id".into())));
    }
}
