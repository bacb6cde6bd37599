//! Twilio: `X-Twilio-Signature` is the base64 HMAC-SHA1, keyed by the auth
//! token, of the full URL Twilio requested (the source's public URL plus the
//! query) followed by every form parameter, sorted by name, as name + value
//! (URL-decoded). Bodies that are not form-encoded (JSON) are signed through
//! the URL instead: its `bodySHA256` query parameter holds the hex SHA-256 of
//! the raw body. Key: `I-Twilio-Idempotency-Token`, else the SHA-256 of the
//! URL and the body.
//!
//! Like Twilio's SDKs, the URL is also tried with its port toggled (the
//! default port added when absent, the port removed when present), because
//! Twilio's signer is not consistent about ports. A Webhook Setting may have
//! Twilio sign with HMAC-SHA256 under a shared key instead; it says so in
//! `X-Twilio-Webhooks-Signature-Settings`, and the shared key is then one of
//! the source's secrets.

use std::borrow::Cow;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};

use base64::Engine;

use super::template::Field;
use super::{
    check_form_size, decode_base64, decode_hex, form_pairs, key_slices, matched, sha256_hex,
    EventType, FormPairs, Inbound, Provider, Reconciler, Rejection, Scheme, SettingError, Settings,
    Signed, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "twilio",
    setup: "Twilio Console, the phone number or service: paste the receive URL as its webhook exactly as `public_url` spells it (Twilio signs the URL); the account's Auth Token goes in this source's `secrets`.",
    build,
    event_headers: &["i-twilio-"],
    signature_headers: &["x-twilio-signature"],
    credential_fields: &[],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::None(
        "Twilio's logs list messages and calls, not the webhook requests it made under the key replaysafe claims (I-Twilio-Idempotency-Token)",
    ),
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// A status callback's status (`MessageStatus`, `CallStatus`, `SmsStatus`),
/// or an Event Streams CloudEvent's `type`.
fn event_type(req: &Inbound) -> Option<String> {
    ["MessageStatus", "CallStatus", "SmsStatus"]
        .iter()
        .find_map(|name| super::form_text(&req.body, name))
        .or_else(|| super::json_text(&req.body, "/type"))
        .or_else(|| super::json_text(&req.body, "/0/type"))
}

struct Twilio {
    secrets: Vec<Vec<u8>>,
    public_url: String,
}

fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    let secrets = settings.shared_secrets(PROVIDER.name)?;
    let public_url = settings.public_url.clone().ok_or_else(|| {
        SettingError::new(
            "public_url",
            "twilio needs the public URL Twilio posts to: it is part of what Twilio signs",
        )
    })?;
    Ok(Box::new(Twilio {
        secrets,
        public_url,
    }))
}

impl Scheme for Twilio {
    fn verify(&self, req: &Inbound, _window: Option<Window>) -> Result<String, Rejection> {
        verify(req, &key_slices(&self.secrets), &self.public_url)
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        Ok(idempotency_key(req, &self.public_url))
    }

    fn replay_content<'a>(&self, req: &'a Inbound) -> Option<Cow<'a, [u8]>> {
        self.signed_content(req)
    }

    /// The signed string joins names and values with nothing between, so
    /// a value can take in the next pair and sign the same: no field's value
    /// is bound (the replay guard digests the signed string).
    fn covers(&self, _field: &Field) -> bool {
        false
    }

    fn signed_content<'a>(&self, req: &'a Inbound) -> Option<Cow<'a, [u8]>> {
        Some(Cow::Owned(signed_content(req, &self.public_url)))
    }

    fn sign_sample(&self, event_id: &str, _now: i64) -> Result<Signed, String> {
        let url = request_url(&self.public_url, None);
        let mut params = [
            (
                "AccountSid",
                "AC00000000000000000000000000000000".to_owned(),
            ),
            ("Body", "hello from replaysafe send".to_owned()),
            ("From", "+14155550100".to_owned()),
            ("MessageSid", format!("SM{event_id}")),
            ("To", "+14155550199".to_owned()),
        ];
        params.sort();
        let signed_text: String = params.iter().map(|(k, v)| format!("{k}{v}")).collect();
        let mac = <Hmac<Sha1> as Mac>::new_from_slice(&self.secrets[0])
            .expect("HMAC takes keys of any length")
            .chain_update(url.as_bytes())
            .chain_update(signed_text.as_bytes());
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        Ok(Signed {
            headers: vec![
                (
                    "content-type".into(),
                    "application/x-www-form-urlencoded".into(),
                ),
                ("i-twilio-idempotency-token".into(), event_id.into()),
                (
                    "x-twilio-signature".into(),
                    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()),
                ),
            ],
            body: body.into_bytes(),
        })
    }
}

/// The hash Twilio signed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algorithm {
    Sha1,
    Sha256,
}

impl Algorithm {
    fn name(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "HMAC-SHA1",
            Algorithm::Sha256 => "HMAC-SHA256",
        }
    }

    /// No settings header: the auth token and HMAC-SHA1.
    fn of(req: &Inbound) -> Result<Self, Rejection> {
        let Some(settings) = req.header("x-twilio-webhooks-signature-settings") else {
            return Ok(Algorithm::Sha1);
        };
        let named = settings
            .split(',')
            .filter_map(|item| item.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("algorithm"))
            .map(|(_, value)| value.trim());
        match named {
            None => Ok(Algorithm::Sha1),
            Some(a) if a.eq_ignore_ascii_case("HMAC_SHA1") => Ok(Algorithm::Sha1),
            Some(a) if a.eq_ignore_ascii_case("HMAC_SHA256") => Ok(Algorithm::Sha256),
            Some(_) => Err(Rejection::signature(
                "X-Twilio-Webhooks-Signature-Settings names an unsupported algorithm",
            )),
        }
    }
}

pub fn verify(req: &Inbound, secrets: &[&[u8]], public_url: &str) -> Result<String, Rejection> {
    let header = req
        .header("x-twilio-signature")
        .ok_or_else(|| Rejection::signature("missing X-Twilio-Signature header"))?;
    let sig = decode_base64(header)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Rejection::signature("X-Twilio-Signature is not base64"))?;
    let algorithm = Algorithm::of(req)?;
    let url = request_url(public_url, req.query.as_deref());
    let body_hash = body_sha256_param(req.query.as_deref())?;
    let params = match body_hash {
        // The body is covered by its hash in the URL; no parameters are signed.
        Some(_) => Vec::new(),
        None if is_form(req) || req.body.is_empty() => signed_params(&req.body)?,
        None => {
            return Err(Rejection::signature(
                "body is not form-encoded and the URL carries no bodySHA256 parameter",
            ))
        }
    };
    let index = url_variants(&url)
        .iter()
        .find_map(|candidate| {
            secrets
                .iter()
                .position(|key| signs(algorithm, key, candidate, &params, &sig))
        })
        .ok_or_else(|| {
            Rejection::signature(format!("{} signature does not match", algorithm.name()))
        })?;
    match body_hash {
        None => Ok(matched(algorithm.name(), index, secrets.len())),
        Some(expected) => {
            let actual = Sha256::digest(&req.body);
            if decode_hex(&expected).as_deref() != Some(actual.as_slice()) {
                return Err(Rejection::signature(
                    "body does not match the bodySHA256 query parameter",
                ));
            }
            Ok(matched(
                &format!("{} (bodySHA256)", algorithm.name()),
                index,
                secrets.len(),
            ))
        }
    }
}

/// `I-Twilio-Idempotency-Token` (the same on Twilio's retries), else the
/// SHA-256 of the URL and the body.
pub fn idempotency_key(req: &Inbound, public_url: &str) -> String {
    match req.header("i-twilio-idempotency-token").map(str::trim) {
        Some(token) if !token.is_empty() => token.to_owned(),
        _ => {
            let url = request_url(public_url, req.query.as_deref());
            format!("sha256:{}", sha256_hex(&[url.as_bytes(), b"\n", &req.body]))
        }
    }
}

/// What Twilio's signature covers, in signing order: the URL, then a form
/// body's sorted parameters (a JSON body is covered through the URL's
/// `bodySHA256`; it is appended so the digest follows it either way).
pub fn signed_content(req: &Inbound, public_url: &str) -> Vec<u8> {
    let mut signed = request_url(public_url, req.query.as_deref()).into_bytes();
    if is_form(req) {
        // Only called on verified requests, whose parameters were counted.
        for (name, value) in signed_params(&req.body).unwrap_or_default() {
            signed.extend_from_slice(&name);
            signed.extend_from_slice(&value);
        }
    } else {
        signed.push(b'\n');
        signed.extend_from_slice(&req.body);
    }
    signed
}

/// The URL Twilio requested: the configured public URL (any query or fragment
/// written there is dropped: the query that arrived is the one Twilio sent)
/// plus `?` and the raw query, when there is one.
pub fn request_url(public_url: &str, query: Option<&str>) -> String {
    let trimmed = public_url.trim();
    let base = trimmed.split(['?', '#']).next().unwrap_or(trimmed);
    match query {
        Some(q) => format!("{base}?{q}"),
        None => base.to_owned(),
    }
}

/// Constant-time (`verify_slice`): does `key` sign `url` + params into `sig`?
fn signs(
    algorithm: Algorithm,
    key: &[u8],
    url: &str,
    params: &[(Vec<u8>, Vec<u8>)],
    sig: &[u8],
) -> bool {
    fn check<M: Mac + KeyInit>(
        key: &[u8],
        url: &str,
        params: &[(Vec<u8>, Vec<u8>)],
        sig: &[u8],
    ) -> bool {
        let Ok(mut mac) = <M as KeyInit>::new_from_slice(key) else {
            return false;
        };
        mac.update(url.as_bytes());
        for (name, value) in params {
            mac.update(name);
            mac.update(value);
        }
        mac.verify_slice(sig).is_ok()
    }
    match algorithm {
        Algorithm::Sha1 => check::<Hmac<Sha1>>(key, url, params, sig),
        Algorithm::Sha256 => check::<Hmac<Sha256>>(key, url, params, sig),
    }
}

/// The signed parameters in signing order, as Twilio's SDKs build them:
/// sorted by name, a repeated name's distinct values sorted too.
fn signed_params(body: &[u8]) -> Result<FormPairs, Rejection> {
    let mut params = form_pairs(body);
    check_form_size(&params)?;
    params.sort();
    params.dedup();
    Ok(params)
}

/// The `bodySHA256` query parameter; more than one is refused as ambiguous.
fn body_sha256_param(query: Option<&str>) -> Result<Option<String>, Rejection> {
    let pairs = form_pairs(query.unwrap_or_default().as_bytes());
    check_form_size(&pairs)?;
    let mut found = pairs
        .into_iter()
        .filter(|(name, _)| name == b"bodySHA256")
        .map(|(_, value)| String::from_utf8_lossy(&value).into_owned());
    let first = found.next();
    if found.next().is_some() {
        return Err(Rejection::signature(
            "the URL carries more than one bodySHA256 parameter",
        ));
    }
    Ok(first)
}

fn is_form(req: &Inbound) -> bool {
    req.header("content-type")
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|essence| {
            essence
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

/// The URL as built, then as Twilio's SDKs normalize it (WHATWG URL
/// serialization percent-encodes `'` and the like in a query), each also with
/// its port toggled: the scheme's default port added when none is written,
/// any written port removed.
fn url_variants(url: &str) -> Vec<String> {
    let mut variants = vec![url.to_owned()];
    if let Some(normalized) = normalize_query(url) {
        variants.push(normalized);
    }
    for i in 0..variants.len() {
        if let Some(other) = toggle_port(&variants[i]) {
            variants.push(other);
        }
    }
    variants.dedup();
    variants
}

/// The URL with its query percent-encoded as a WHATWG URL serializes a
/// special scheme's query; None when that changes nothing.
fn normalize_query(url: &str) -> Option<String> {
    let (base, query) = url.split_once('?')?;
    let needs = |b: u8| b <= b' ' || b >= 0x7f || matches!(b, b'"' | b'#' | b'<' | b'>' | b'\'');
    if !query.bytes().any(needs) {
        return None;
    }
    let mut out = format!("{base}?");
    for b in query.bytes() {
        if needs(b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    Some(out)
}

fn toggle_port(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        "443"
    } else if scheme.eq_ignore_ascii_case("http") {
        "80"
    } else {
        return None;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host_at = authority.rfind('@').map_or(0, |i| i + 1);
    let (userinfo, host_port) = authority.split_at(host_at);
    // A port follows the last ':' after any IPv6 literal's ']'.
    let after_literal = host_port.rfind(']').map_or(0, |i| i + 1);
    match host_port[after_literal..].rfind(':') {
        Some(i) => {
            let colon = after_literal + i;
            if !host_port[colon + 1..].bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let host = &host_port[..colon];
            Some(format!("{scheme}://{userinfo}{host}{tail}"))
        }
        None => Some(format!(
            "{scheme}://{userinfo}{host_port}:{default_port}{tail}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::MAX_FORM_PAIRS;
    use rand::Rng;

    const FORM: &str = "application/x-www-form-urlencoded";

    fn request(sig: &str, query: Option<&str>, content_type: &str, body: &str) -> Inbound {
        Inbound {
            query: query.map(str::to_owned),
            headers: vec![
                ("x-twilio-signature".into(), sig.into()),
                ("content-type".into(), content_type.into()),
            ],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    // Twilio's "webhooks security" page (vectors.md).
    const TOKEN: &[u8] = b"12345";
    const URL: &str = "https://mycompany.com/myapp.php";
    const QUERY: &str = "foo=1&bar=2";
    const BODY: &str = "CallSid=CA1234567890ABCDE&Caller=%2B14158675310&Digits=1234&From=%2B14158675310&To=%2B18005551212";
    const SIG: &str = "GvWf1cFY/Q7PnoempGyD5oXAezc=";

    // The twilio npm package's own fixtures (spec/validation.spec.js): the
    // same URL, Caller and From ending in 09.
    const SDK_BODY: &str = "CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309&To=%2B18005551212";
    const SDK_SIG: &str = "RSOYDt4T1cUTdK1PDd93/VVr8B8=";
    const JSON_BODY: &str = r#"{"property": "value", "boolean": true}"#;
    const JSON_HASH: &str = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620";

    pub(super) fn contract() -> crate::providers::contract::Contract {
        use crate::providers::contract::{Contract, Sdk, Vector};
        fn settings(token: &str, url: &str) -> Settings {
            Settings {
                secrets: vec![crate::secret::Secret::new(token)],
                public_url: Some(url.into()),
                ..Default::default()
            }
        }
        let mut request = vector();
        request
            .headers
            .push(("i-twilio-idempotency-token".into(), "idem-contract".into()));
        Contract {
            settings: settings("12345", URL),
            wrong: settings("12346", URL),
            vector: Vector {
                request,
                now: 1_700_000_000,
                key: "idem-contract",
            },
            // Without the token the key is the hash of the URL and body.
            keyless: None,
            pieces: [
                "bodySHA256=",
                "bodySHA256=00",
                "%2",
                "?",
                "#",
                "algorithm=HMAC_SHA256",
                "I-Twilio-",
                BODY,
                QUERY,
                SIG,
            ]
            .map(String::from)
            .to_vec(),
            sdk: Some(Sdk {
                script: "sign.mjs",
                request: |_| {
                    serde_json::json!({"provider": "twilio", "secret": "contract-token",
                        "url": "https://hooks.example.com/hooks/twilio?region=eu",
                        "params": {"CallSid": "CA1", "Digits": "1 2&3"}, "id": "idem-sdk"})
                },
                settings: |signed| {
                    let url = signed["url"].as_str().unwrap();
                    settings("contract-token", url.split('?').next().unwrap())
                },
                key: Some("idem-sdk"),
            }),
        }
    }

    fn vector() -> Inbound {
        request(SIG, Some(QUERY), FORM, BODY)
    }

    #[test]
    fn published_vector_verifies() {
        assert_eq!(
            verify(&vector(), &[TOKEN], URL).unwrap(),
            "HMAC-SHA1 signature matched"
        );
        // Parameter order in the body does not matter: Twilio sorts them.
        let shuffled = request(
            SIG,
            Some(QUERY),
            "application/x-www-form-urlencoded; charset=utf-8",
            "To=%2B18005551212&Digits=1234&From=%2B14158675310&CallSid=CA1234567890ABCDE&Caller=%2B14158675310",
        );
        assert!(verify(&shuffled, &[TOKEN], URL).is_ok());
        // Rotation: any configured token may match.
        assert_eq!(
            verify(&vector(), &[b"old-token", TOKEN], URL).unwrap(),
            "HMAC-SHA1 signature matched secret 2 of 2"
        );
        // A query written into the configured URL is not doubled.
        assert!(verify(&vector(), &[TOKEN], "https://mycompany.com/myapp.php?foo=1").is_ok());
        assert!(verify(&vector(), &[TOKEN], " https://mycompany.com/myapp.php ").is_ok());
    }

    #[test]
    fn sdk_fixtures_verify() {
        let sdk = |sig: &str, url: &str, query: Option<&str>| {
            verify(&request(sig, query, FORM, SDK_BODY), &[TOKEN], url)
        };
        assert!(sdk(SDK_SIG, URL, Some(QUERY)).is_ok());
        // Port handling: signed without the port, received on :1234 (stripped).
        assert!(sdk(SDK_SIG, "https://mycompany.com:1234/myapp.php", Some(QUERY)).is_ok());
        // Signed with the port written.
        assert!(sdk(
            "Zmvh+3yNM1Phv2jhDCwEM3q5ebU=",
            "http://mycompany.com:1234/myapp.php",
            Some(QUERY)
        )
        .is_ok());
        // Signed with the default port added.
        assert!(sdk("kvajT1Ptam85bY51eRf/AJRuM3w=", URL, Some(QUERY)).is_ok());
        assert!(sdk(
            "0ZXoZLH/DfblKGATFgpif+LLRf4=",
            "http://mycompany.com/myapp.php",
            Some(QUERY)
        )
        .is_ok());
        // Credentials in the URL are part of it.
        assert!(sdk(
            "CukzLTc1tT5dXEDIHm/tKBanW10=",
            "https://user:pass@mycompany.com/myapp.php",
            Some(QUERY)
        )
        .is_ok());
        assert!(sdk(
            "2YRLlVAflCqxaNicjMpJcSTgzSs=",
            "https://user@mycompany.com/myapp.php",
            Some(QUERY)
        )
        .is_ok());
        assert!(sdk(
            "ZQFR1PTIZXF2MXB8ZnKCvnnA+rI=",
            "https://user:pass@mycompany.com/myapp.php",
            Some(QUERY)
        )
        .is_ok());
        // Repeated names: values sorted, duplicates signed once.
        let array =
            "MessagingBinding.Address=%2B1415xxxxxxx&MessagingBinding.Address=%2B1325xxxxxxx";
        let req = request("83O6e2vORAoJHUNzJjDWN1jz+BA=", Some(QUERY), FORM, array);
        assert!(verify(&req, &[TOKEN], URL).is_ok());
        let multi = "Sid=CA123&SidAccount=AC123&Digits=5678&Digits=1234&Digits=1234";
        let req = request("IK+Dwps556ElfBT0I3Rgjkr1wJU=", Some(QUERY), FORM, multi);
        assert!(verify(&req, &[TOKEN], URL).is_ok());
        // The SDK signs the query as a WHATWG URL serializes it: ' as %27.
        let quote = "foo=1&bar=2&Body=It's+amazing";
        assert!(sdk("TfZzewPq8wqrGlMfyAud8+/IvJ0=", URL, Some(quote)).is_ok());
        let encoded = "foo=1&bar=2&Body=It%27s+amazing";
        assert!(sdk("TfZzewPq8wqrGlMfyAud8+/IvJ0=", URL, Some(encoded)).is_ok());
    }

    #[test]
    fn json_bodies_are_signed_through_body_sha256() {
        let query = format!("{QUERY}&bodySHA256={JSON_HASH}");
        let req = request(
            "a9nBmqA0ju/hNViExpshrM61xv4=",
            Some(&query),
            "application/json",
            JSON_BODY,
        );
        assert_eq!(
            verify(&req, &[TOKEN], URL).unwrap(),
            "HMAC-SHA1 (bodySHA256) signature matched"
        );
        let empty = format!(
            "{QUERY}&bodySHA256=44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        let req = request(
            "Ldidvp12m26NI7eqEvxnEpkd9Hc=",
            Some(&empty),
            "application/json",
            "{}",
        );
        assert!(verify(&req, &[TOKEN], URL).is_ok());
        let only = format!("bodySHA256={JSON_HASH}");
        let req = request(
            "y77kIzt2vzLz71DgmJGsen2scGs=",
            Some(&only),
            "application/json",
            JSON_BODY,
        );
        assert!(verify(&req, &[TOKEN], URL).is_ok());

        // The signature is right but the body is not the one hashed.
        let req = request(
            "a9nBmqA0ju/hNViExpshrM61xv4=",
            Some(&query),
            "application/json",
            r#"{"property": "value", "boolean": false}"#,
        );
        assert!(verify(&req, &[TOKEN], URL)
            .unwrap_err()
            .reason
            .contains("bodySHA256"));
        // A JSON body without bodySHA256 is covered by nothing.
        let req = request(SIG, Some(QUERY), "application/json", JSON_BODY);
        assert_eq!(verify(&req, &[TOKEN], URL).unwrap_err().status, 401);
        // Two bodySHA256 parameters are ambiguous.
        let twice = format!("{query}&bodySHA256={JSON_HASH}");
        let req = request(
            "a9nBmqA0ju/hNViExpshrM61xv4=",
            Some(&twice),
            "application/json",
            JSON_BODY,
        );
        assert!(verify(&req, &[TOKEN], URL).is_err());
    }

    #[test]
    fn tampered_wrong_or_garbled_is_refused() {
        let refused = |req: &Inbound, url: &str| {
            let err = verify(req, &[TOKEN], url).unwrap_err();
            assert_eq!(err.status, 401, "{err:?}");
            err.reason
        };
        refused(
            &request(SIG, Some(QUERY), FORM, &BODY.replace("1234&", "1235&")),
            URL,
        );
        // A literal '+' in a form body is a space, not the '+' Twilio signed.
        refused(
            &request(SIG, Some(QUERY), FORM, &BODY.replace("%2B", "+")),
            URL,
        );
        refused(&request(SIG, Some("foo=1&bar=3"), FORM, BODY), URL);
        refused(&request(SIG, None, FORM, BODY), URL);
        refused(&vector(), "https://mycompany.com/other.php");
        refused(&vector(), "http://mycompany.com/myapp.php");
        // An extra parameter is refused.
        refused(
            &request(SIG, Some(QUERY), FORM, &format!("{BODY}&Extra=1")),
            URL,
        );
        assert!(verify(&vector(), &[b"54321"], URL).is_err());
        assert!(verify(&vector(), &[], URL).is_err());
        for garbled in ["", "!!!", "GvWf1cFY", &SIG[..20], "R3ZXZjFjRlk="] {
            let reason = refused(&request(garbled, Some(QUERY), FORM, BODY), URL);
            assert!(!reason.contains("12345"));
        }
        let mut missing = vector();
        missing.headers.remove(0);
        assert!(refused(&missing, URL).contains("X-Twilio-Signature"));
    }

    #[test]
    fn shared_key_settings_select_hmac_sha256() {
        let shared = b"shared-key-secret";
        let url = format!("{URL}?{QUERY}");
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(shared).unwrap();
        mac.update(url.as_bytes());
        for (name, value) in [
            ("CallSid", "CA1234567890ABCDE"),
            ("Caller", "+14158675310"),
            ("Digits", "1234"),
            ("From", "+14158675310"),
            ("To", "+18005551212"),
        ] {
            mac.update(name.as_bytes());
            mac.update(value.as_bytes());
        }
        let sig = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            mac.finalize().into_bytes(),
        );
        let mut req = request(&sig, Some(QUERY), FORM, BODY);
        req.headers.push((
            "x-twilio-webhooks-signature-settings".into(),
            "key=SK123,algorithm=HMAC_SHA256".into(),
        ));
        assert_eq!(
            verify(&req, &[TOKEN, shared], URL).unwrap(),
            "HMAC-SHA256 signature matched secret 2 of 2"
        );
        // Without the settings header the same signature is not HMAC-SHA1.
        req.headers.pop();
        assert!(verify(&req, &[TOKEN, shared], URL).is_err());
        req.headers.push((
            "x-twilio-webhooks-signature-settings".into(),
            "algorithm=HMAC_MD5".into(),
        ));
        assert!(verify(&req, &[TOKEN, shared], URL)
            .unwrap_err()
            .reason
            .contains("unsupported"));
    }

    #[test]
    fn url_ports_toggle() {
        assert_eq!(
            toggle_port("https://a.example/x?y=1").as_deref(),
            Some("https://a.example:443/x?y=1")
        );
        assert_eq!(
            toggle_port("http://u:p@a.example:8080").as_deref(),
            Some("http://u:p@a.example")
        );
        assert_eq!(
            toggle_port("https://[::1]:8443/x").as_deref(),
            Some("https://[::1]/x")
        );
        assert_eq!(
            toggle_port("https://[::1]/x").as_deref(),
            Some("https://[::1]:443/x")
        );
        assert_eq!(toggle_port("ftp://a.example/x"), None);
        assert_eq!(toggle_port("not a url"), None);
        assert_eq!(toggle_port("https://a.example:abc/x"), None);
        assert_eq!(
            normalize_query("https://a.example/x'y?q=it's \"é\"").as_deref(),
            Some("https://a.example/x'y?q=it%27s%20%22%C3%A9%22")
        );
        assert_eq!(normalize_query("https://a.example/x?q=1"), None);
        assert_eq!(
            url_variants("https://a.example/?q='").len(),
            4,
            "as built and normalized, each with its port toggled"
        );
    }

    #[test]
    fn form_decoding() {
        assert_eq!(
            form_pairs(b"a=1&b=%2B1+2&&c&d=%zz%4"),
            vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"b".to_vec(), b"+1 2".to_vec()),
                (b"c".to_vec(), Vec::new()),
                (b"d".to_vec(), b"%zz%4".to_vec()),
            ]
        );
        assert_eq!(form_pairs(b"x=a=b"), vec![(b"x".to_vec(), b"a=b".to_vec())]);
        assert!(form_pairs(b"").is_empty());
    }

    #[test]
    fn key_is_the_idempotency_token_or_a_hash() {
        let mut req = vector();
        let fallback = idempotency_key(&req, URL);
        assert!(fallback.starts_with("sha256:"));
        assert_eq!(fallback, idempotency_key(&vector(), URL));
        let mut other = vector();
        other.query = Some("foo=1&bar=3".into());
        assert_ne!(fallback, idempotency_key(&other, URL));
        req.headers
            .push(("i-twilio-idempotency-token".into(), " ".into()));
        assert_eq!(idempotency_key(&req, URL), fallback);
        req.headers.pop();
        req.headers
            .push(("I-Twilio-Idempotency-Token".into(), "da4b6e6f-1234".into()));
        assert_eq!(idempotency_key(&req, URL), "da4b6e6f-1234");
    }

    #[test]
    fn a_body_of_half_a_million_parameters_is_refused_unsplit() {
        let flood = "a&".repeat(500_000);
        assert_eq!(form_pairs(flood.as_bytes()).len(), MAX_FORM_PAIRS + 1);
        let req = request(SIG, Some(QUERY), FORM, &flood);
        let refused = verify(&req, &[TOKEN], URL).unwrap_err();
        assert_eq!(refused.status, 401);
        assert!(refused.reason.contains("form parameters"), "{refused:?}");
        let alipay = crate::providers::alipay::verify(
            &req,
            &crate::providers::alipay::tests::keys()[0].to_public_key(),
        )
        .unwrap_err();
        assert!(alipay.reason.contains("form parameters"), "{alipay:?}");
    }

    /// The registry's contract throws random requests at the configured
    /// URL; this throws random public URLs, which the port toggling parses.
    #[test]
    fn random_public_urls_never_panic() {
        let pieces = ["://", ":", "@", "[", "]", "?", "#", ":443", ":99999"].map(String::from);
        let mut garbage = crate::providers::contract::Garbage::new(&pieces);
        for _ in 0..400 {
            let url = format!("https://{}", garbage.text());
            let mut req = vector();
            req.query = garbage.rng.gen_bool(0.7).then(|| garbage.text());
            let _ = verify(&req, &[TOKEN], &url);
            let _ = verify(&req, &[TOKEN], &garbage.text());
            let _ = idempotency_key(&req, &url);
            let _ = signed_content(&req, &url);
        }
    }
}
