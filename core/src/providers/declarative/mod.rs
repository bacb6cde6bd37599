//! The declarative verifier (`provider = "hmac"`, spec section 10): where
//! the signature is, how it is encoded, which algorithm and what it covers,
//! all from the source's `[source.signature]`, checked once at start. One
//! of the schemes like the nine: constant-time compared, every signature a
//! header holds tried (rotation), no panic on any input.

pub mod presets;
pub mod spec;

use std::borrow::Cow;

use base64::Engine;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};

use super::template::{Field, KeyRule, RequestFields, Template, Unrendered, Use};
use super::{
    decode_base64, json_text, matched, Answer, EventType, Handshake, Inbound, Provider, Reconciler,
    Rejection, Scheme, SettingError, Settings, Signed, Window,
};

pub const PROVIDER: Provider = Provider {
    name: "hmac",
    setup: "Paste the receive URL where the provider asks for a webhook URL; the secret it gives you goes in this source's `secrets`, how it signs in `[source.signature]`.",
    build,
    // Its headers are the source's own: none is forwarded as the event's.
    event_headers: &[],
    signature_headers: &[],
    credential_fields: &[],
    event_type: EventType::Read(event_type),
    reconciler: Reconciler::None(
        "a provider described by [source.signature] brings no list API replaysafe knows",
    ),
    #[cfg(test)]
    contract: Some(tests::contract),
};

/// The payload's `type`, the common name; a source's filters may match it.
fn event_type(req: &Inbound) -> Option<String> {
    json_text(&req.body, "/type")
}

/// `[source.signature]`, typed (the config parses the names).
#[derive(Clone, Debug)]
pub struct Spec {
    pub location: Location,
    pub algorithm: Algorithm,
    pub encoding: Encoding,
    /// Before each signature (`sha256=`, `v1,`); one without it is not one.
    pub prefix: Option<String>,
    pub format: Format,
    pub secret_encoding: SecretEncoding,
    /// What is signed; `{body}` by default.
    pub payload: Template,
    pub timestamp: Option<TimestampAt>,
    pub timestamp_format: TimestampFormat,
    /// Where `{id}` (and the key, unless the source sets `key`) comes from.
    pub id_header: Option<String>,
    /// The provider's public key (PEM, or base64 DER) for the public-key
    /// algorithms; else the source's `public_key`.
    pub public_key: Option<String>,
    /// A preset's key for its events, where the source sets none.
    pub key: Option<KeyRule>,
    /// A preset's handshake, answered by replaysafe.
    pub handshake: Option<HandshakeKind>,
}

/// The handshakes replaysafe answers for a provider: without them the
/// provider will not register the endpoint at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeKind {
    /// `{"event":"endpoint.url_validation","payload":{"plainToken":..}}`,
    /// answered with the token and its hex HMAC-SHA256 under the secret;
    /// Zoom repeats it every 72 hours.
    ZoomUrlValidation,
    /// `Twitch-Eventsub-Message-Type: webhook_callback_verification`, told
    /// by its signed body's `challenge`: answered with it as plain text.
    TwitchChallenge,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A header (lowercase name); each of its values is read.
    Header(String),
    /// A JSON pointer into the body (Mailgun's `/signature/signature`).
    Field(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    HmacSha1,
    HmacSha256,
    HmacSha512,
    Ed25519,
    /// ECDSA over P-256 with SHA-256, DER signatures (SendGrid).
    EcdsaP256,
}

/// What a source verifies with: shared secrets, each tried (rotation), or
/// the provider's public key.
enum Keys {
    Hmac {
        hash: Hash,
        secrets: Vec<Vec<u8>>,
    },
    Ed25519(ed25519_dalek::VerifyingKey),
    /// An uncompressed P-256 point.
    EcdsaP256(Vec<u8>),
}

#[derive(Clone, Copy)]
enum Hash {
    Sha1,
    Sha256,
    Sha512,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// The value is the signature; several separated by spaces are each
    /// tried.
    Plain,
    /// `t=..,v1=..,v1=..`: `separator` between pairs, the signatures under
    /// `signature_name` (each tried), the timestamp under `timestamp_name`.
    Kv {
        separator: String,
        signature_name: String,
        timestamp_name: Option<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretEncoding {
    Raw,
    Base64,
    /// `whsec_` and base64 (Standard Webhooks, Svix).
    Whsec,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimestampAt {
    Header(String),
    Field(String),
    /// The signature header's `timestamp_name` pair (format `kv`).
    Kv,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampFormat {
    Unix,
    UnixMs,
    Rfc3339,
}

struct Declared {
    spec: Spec,
    keys: Keys,
    /// The source's public URL, for `{url}`.
    url: Option<String>,
}

pub fn build(settings: &Settings) -> Result<Box<dyn Scheme>, SettingError> {
    let spec = settings.signature.clone().ok_or_else(|| {
        SettingError::new(
            "signature",
            "provider hmac is described by a [source.signature] table: give one",
        )
    })?;
    let hash = match spec.algorithm {
        Algorithm::HmacSha1 => Some(Hash::Sha1),
        Algorithm::HmacSha256 => Some(Hash::Sha256),
        Algorithm::HmacSha512 => Some(Hash::Sha512),
        Algorithm::Ed25519 | Algorithm::EcdsaP256 => None,
    };
    let keys = match hash {
        Some(hash) => {
            settings.shared_secrets(PROVIDER.name)?;
            let secrets = settings
                .secrets
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    decode_secret(s.expose(), spec.secret_encoding)
                        .map_err(|p| SettingError::new(format!("secrets[{i}]"), p))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Keys::Hmac { hash, secrets }
        }
        None => {
            let text = spec
                .public_key
                .as_deref()
                .or(settings.public_key.as_deref())
                .ok_or_else(|| {
                    SettingError::new(
                        "public_key",
                        "a public-key algorithm needs the provider's public key (PEM, or the base64 DER the provider shows)",
                    )
                })?;
            public_key(text, spec.algorithm).map_err(|p| SettingError::new("public_key", p))?
        }
    };
    for field in spec.payload.fields() {
        match field {
            Field::Timestamp if spec.timestamp.is_none() => {
                return Err(SettingError::new(
                    "signature.payload",
                    "{timestamp} needs timestamp_header, timestamp_field or a kv timestamp_name",
                ))
            }
            Field::Id if spec.id_header.is_none() => {
                return Err(SettingError::new(
                    "signature.payload",
                    "{id} needs id_header",
                ))
            }
            Field::Url if settings.public_url.is_none() => {
                return Err(SettingError::new(
                    "signature.payload",
                    "{url} needs the source's public_url (the URL the provider calls)",
                ))
            }
            _ => {}
        }
    }
    Ok(Box::new(Declared {
        spec,
        keys,
        url: settings.public_url.clone(),
    }))
}

/// A SubjectPublicKeyInfo, PEM or base64 DER, of the algorithm's kind.
fn public_key(text: &str, algorithm: Algorithm) -> Result<Keys, String> {
    use spki::der::pem;
    const ED25519: spki::ObjectIdentifier = spki::ObjectIdentifier::new_unwrap("1.3.101.112");
    const EC_PUBLIC_KEY: spki::ObjectIdentifier =
        spki::ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
    const P256: spki::ObjectIdentifier = spki::ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
    let text = text.trim();
    let der = if text.starts_with("-----BEGIN") {
        match pem::decode_vec(text.as_bytes()) {
            Ok(("PUBLIC KEY", der)) => der,
            Ok((label, _)) => return Err(format!("a {label} PEM, not a PUBLIC KEY")),
            Err(e) => return Err(format!("not PEM: {e}")),
        }
    } else {
        decode_base64(text).ok_or("neither PEM nor base64 DER")?
    };
    let info = spki::SubjectPublicKeyInfoRef::try_from(der.as_slice())
        .map_err(|e| format!("not a public key (SubjectPublicKeyInfo): {e}"))?;
    let oids = info.algorithm.oids().map_err(|e| e.to_string())?;
    let bytes = info
        .subject_public_key
        .as_bytes()
        .ok_or("the key's bit string is not whole bytes")?;
    match (algorithm, oids) {
        (Algorithm::Ed25519, (ED25519, None)) => {
            let bytes: [u8; 32] = bytes.try_into().map_err(|_| "an Ed25519 key is 32 bytes")?;
            let key = ed25519_dalek::VerifyingKey::from_bytes(&bytes)
                .map_err(|_| "not an Ed25519 point")?;
            if key.is_weak() {
                return Err("a weak (small-order) Ed25519 key is refused".into());
            }
            Ok(Keys::Ed25519(key))
        }
        (Algorithm::EcdsaP256, (EC_PUBLIC_KEY, Some(P256))) => {
            if bytes.len() != 65 || bytes[0] != 4 {
                return Err("a P-256 key is an uncompressed point of 65 bytes".into());
            }
            Ok(Keys::EcdsaP256(bytes.to_vec()))
        }
        (_, (oid, params)) => Err(format!(
            "a key of algorithm {oid}{}, not {}",
            params.map_or(String::new(), |p| format!(" ({p})")),
            algorithm_name(algorithm)
        )),
    }
}

fn decode_secret(secret: &str, encoding: SecretEncoding) -> Result<Vec<u8>, String> {
    match encoding {
        SecretEncoding::Raw => Ok(secret.as_bytes().to_vec()),
        SecretEncoding::Base64 => decode_base64(secret)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| "secret_encoding = \"base64\": the secret is not base64".to_owned()),
        SecretEncoding::Whsec => secret
            .strip_prefix("whsec_")
            .and_then(decode_base64)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                "secret_encoding = \"whsec\": the secret is `whsec_` followed by base64".to_owned()
            }),
    }
}

/// What one request says: its signatures (decoded) and its timestamp as
/// sent.
struct Presented {
    signatures: Vec<Vec<u8>>,
    timestamp: Option<String>,
    /// Something looked like a signature but would not decode.
    undecodable: bool,
}

impl Declared {
    fn presented(&self, req: &Inbound, fields: &RequestFields<'_>) -> Presented {
        let spec = &self.spec;
        let values: Vec<Cow<'_, str>> = match &spec.location {
            Location::Header(h) => req
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(h))
                .map(|(_, v)| Cow::Borrowed(v.as_str()))
                .collect(),
            Location::Field(p) => fields
                .get(&Field::Pointer(p.clone()))
                .and_then(|v| String::from_utf8(v.into_owned()).ok())
                .map(Cow::Owned)
                .into_iter()
                .collect(),
        };
        let mut out = Presented {
            signatures: Vec::new(),
            timestamp: None,
            undecodable: false,
        };
        let mut raw: Vec<&str> = Vec::new();
        for value in &values {
            match &spec.format {
                Format::Plain => raw.extend(value.split_whitespace()),
                Format::Kv {
                    separator,
                    signature_name,
                    timestamp_name,
                } => {
                    for pair in value.split(separator.as_str()) {
                        let Some((name, v)) = pair.split_once('=') else {
                            continue;
                        };
                        let (name, v) = (name.trim(), v.trim());
                        if name == signature_name {
                            raw.push(v);
                        } else if Some(name) == timestamp_name.as_deref() && out.timestamp.is_none()
                        {
                            out.timestamp = Some(v.to_owned());
                        }
                    }
                }
            }
        }
        // At most a handful: a header of ten thousand candidates is no
        // rotation, and each costs an HMAC per secret.
        let prefixed = raw.into_iter().filter_map(|sig| match &spec.prefix {
            Some(p) => sig.strip_prefix(p.as_str()),
            None => Some(sig),
        });
        for sig in prefixed.take(MAX_SIGNATURES) {
            let decoded = match spec.encoding {
                Encoding::Hex => hex::decode(sig).ok(),
                Encoding::Base64 => base64::engine::general_purpose::STANDARD.decode(sig).ok(),
            };
            match decoded {
                Some(d) if !d.is_empty() => out.signatures.push(d),
                _ => out.undecodable = true,
            }
        }
        match &spec.timestamp {
            Some(TimestampAt::Header(h)) => {
                out.timestamp = req.header(h).map(|v| v.trim().to_owned())
            }
            Some(TimestampAt::Field(p)) => {
                out.timestamp = fields
                    .get(&Field::Pointer(p.clone()))
                    .and_then(|v| String::from_utf8(v.into_owned()).ok())
            }
            Some(TimestampAt::Kv) | None => {}
        }
        out
    }

    /// The signed timestamp in Unix seconds, checked against the window.
    fn check_time(&self, sent: &str, window: Option<Window>) -> Result<(), Rejection> {
        let seconds = match self.spec.timestamp_format {
            TimestampFormat::Unix => digits(sent),
            TimestampFormat::UnixMs => digits(sent).map(|ms| ms.div_euclid(1000)),
            TimestampFormat::Rfc3339 => chrono::DateTime::parse_from_rfc3339(sent)
                .ok()
                .map(|t| t.timestamp()),
        }
        .ok_or_else(|| Rejection::signature("the signed timestamp is not in its format"))?;
        super::check_timestamp(&seconds.to_string(), window).map(drop)
    }

    fn payload(
        &self,
        fields: &RequestFields<'_>,
        timestamp: Option<&str>,
        req: &Inbound,
    ) -> Result<Vec<u8>, Rejection> {
        self.spec
            .payload
            .render(Use::Signed, |f| match f {
                Field::Timestamp => timestamp.map(|t| Cow::Owned(t.as_bytes().to_vec())),
                Field::Id => self
                    .spec
                    .id_header
                    .as_deref()
                    .and_then(|h| req.header(h))
                    // As sent: a key reading the header reads it so too.
                    .map(|v| Cow::Owned(v.as_bytes().to_vec())),
                Field::Method => Some(Cow::Borrowed(b"POST".as_slice())),
                Field::Url => self
                    .url
                    .as_deref()
                    .map(|u| Cow::Owned(u.as_bytes().to_vec())),
                other => fields.get(other),
            })
            .map_err(|e| match e {
                Unrendered::Missing(field) => {
                    Rejection::signature(format!("the signed payload lacks {field}"))
                }
                ambiguous @ Unrendered::Ambiguous(..) => {
                    Rejection::signature(format!("the signed payload has {ambiguous}"))
                }
            })
    }

    fn encode(&self, mac: &[u8]) -> String {
        match self.spec.encoding {
            Encoding::Hex => hex::encode(mac),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(mac),
        }
    }
}

/// A Unix time as a provider writes it: ASCII digits only (no sign, no
/// spaces), so a signed payload's split cannot move a byte into it.
fn digits(sent: &str) -> Option<i64> {
    // No leading zero either: `0170..` would let a digit move in.
    if sent.is_empty() || !sent.bytes().all(|b| b.is_ascii_digit()) || sent.starts_with('0') {
        return None;
    }
    sent.parse().ok()
}

fn algorithm_name(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::HmacSha1 => "hmac-sha1",
        Algorithm::HmacSha256 => "hmac-sha256",
        Algorithm::HmacSha512 => "hmac-sha512",
        Algorithm::Ed25519 => "ed25519",
        Algorithm::EcdsaP256 => "ecdsa-p256",
    }
}

/// The keyed MAC of `payload`, unfinished: checked (constant time) or
/// finished by the caller.
fn mac(hash: Hash, key: &[u8], payload: &[u8]) -> AnyMac {
    fn of<M: Mac + KeyInit>(key: &[u8], payload: &[u8]) -> M {
        let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
        Mac::update(&mut mac, payload);
        mac
    }
    match hash {
        Hash::Sha1 => AnyMac::Sha1(of(key, payload)),
        Hash::Sha256 => AnyMac::Sha256(of(key, payload)),
        Hash::Sha512 => AnyMac::Sha512(of(key, payload)),
    }
}

/// An HMAC of one of the algorithms, keyed and fed.
#[derive(Clone)]
enum AnyMac {
    Sha1(Hmac<sha1::Sha1>),
    Sha256(Hmac<sha2::Sha256>),
    Sha512(Hmac<sha2::Sha512>),
}

impl AnyMac {
    /// Constant time, as `Mac::verify_slice`.
    fn signs(&self, signature: &[u8]) -> bool {
        match self.clone() {
            AnyMac::Sha1(m) => m.verify_slice(signature).is_ok(),
            AnyMac::Sha256(m) => m.verify_slice(signature).is_ok(),
            AnyMac::Sha512(m) => m.verify_slice(signature).is_ok(),
        }
    }

    fn bytes(self) -> Vec<u8> {
        match self {
            AnyMac::Sha1(m) => m.finalize().into_bytes().to_vec(),
            AnyMac::Sha256(m) => m.finalize().into_bytes().to_vec(),
            AnyMac::Sha512(m) => m.finalize().into_bytes().to_vec(),
        }
    }
}

/// Signatures read from one request at most.
const MAX_SIGNATURES: usize = 8;

impl Scheme for Declared {
    fn verify(&self, req: &Inbound, window: Option<Window>) -> Result<String, Rejection> {
        let fields = RequestFields::new(req);
        let presented = self.presented(req, &fields);
        if presented.signatures.is_empty() {
            return Err(Rejection::signature(if presented.undecodable {
                "the signature is not in its encoding"
            } else {
                match &self.spec.location {
                    Location::Header(_) => "no signature in the signature header",
                    Location::Field(_) => "no signature in the signature field",
                }
            }));
        }
        if self.spec.timestamp.is_some() {
            let sent = presented
                .timestamp
                .as_deref()
                .ok_or_else(|| Rejection::signature("the signed timestamp is missing"))?;
            self.check_time(sent, window)?;
        }
        let payload = self.payload(&fields, presented.timestamp.as_deref(), req)?;
        let name = algorithm_name(self.spec.algorithm);
        let signed = match &self.keys {
            Keys::Hmac { hash, secrets } => {
                for (i, key) in secrets.iter().enumerate() {
                    let mac = mac(*hash, key, &payload);
                    if presented.signatures.iter().any(|s| mac.signs(s)) {
                        return Ok(matched(name, i, secrets.len()));
                    }
                }
                false
            }
            Keys::Ed25519(key) => presented.signatures.iter().any(|s| {
                ed25519_dalek::Signature::from_slice(s)
                    .is_ok_and(|sig| key.verify_strict(&payload, &sig).is_ok())
            }),
            Keys::EcdsaP256(point) => {
                let key = ring::signature::UnparsedPublicKey::new(
                    &ring::signature::ECDSA_P256_SHA256_ASN1,
                    point,
                );
                presented
                    .signatures
                    .iter()
                    .any(|s| key.verify(&payload, s).is_ok())
            }
        };
        if signed {
            return Ok(matched(name, 0, 1));
        }
        Err(Rejection::signature("no signature matches"))
    }

    fn key(&self, req: &Inbound) -> Result<String, Rejection> {
        match (&self.spec.key, &self.spec.id_header) {
            (Some(rule), _) => rule.key(req, usize::MAX).map(|(key, _)| key),
            // As sent, as `{id}` is signed.
            (None, Some(h)) => match req.header(h) {
                Some(v) if !v.is_empty() => Ok(v.to_owned()),
                _ => Err(Rejection::key(format!("missing {h} header"))),
            },
            (None, None) => Err(Rejection::key(
                "the source has neither key nor signature.id_header",
            )),
        }
    }

    /// The default key (`id_header`) unsigned: a captured request re-posted
    /// under a fresh id, within the timestamp's tolerance or without one,
    /// repeats the signed payload.
    fn replay_content<'a>(&self, req: &'a Inbound) -> Option<Cow<'a, [u8]>> {
        let bound = match &self.spec.key {
            Some(rule) => rule.is_bound(|f| self.covers(f)),
            None => self.covers(&Field::Header(self.spec.id_header.clone()?)),
        };
        if bound {
            return None;
        }
        self.signed_content(req)
    }

    fn covers(&self, field: &Field) -> bool {
        let payload = || self.spec.payload.fields();
        let body_signed = payload().any(|f| *f == Field::Body);
        match field {
            Field::Body | Field::BodySha256 | Field::Pointer(_) | Field::Form(_) if body_signed => {
                true
            }
            Field::Header(h) if self.spec.id_header.as_deref() == Some(h.as_str()) => {
                payload().any(|f| *f == Field::Id || f == field)
            }
            _ => payload().any(|f| f == field),
        }
    }

    /// The signed payload, its timestamp included.
    fn signed_content<'a>(&self, req: &'a Inbound) -> Option<Cow<'a, [u8]>> {
        let fields = RequestFields::new(req);
        let presented = self.presented(req, &fields);
        self.payload(&fields, presented.timestamp.as_deref(), req)
            .ok()
            .map(Cow::Owned)
    }

    fn handshake(&self, req: &Inbound) -> Option<Handshake> {
        let json = || serde_json::from_slice::<serde_json::Value>(&req.body).ok();
        match self.spec.handshake? {
            HandshakeKind::ZoomUrlValidation => {
                let body = json()?;
                if body.pointer("/event")?.as_str()? != "endpoint.url_validation" {
                    return None;
                }
                let token = body.pointer("/payload/plainToken")?.as_str()?;
                // Under the secret the request was signed with (rotation).
                let key = self.signing_key(req)?;
                let encrypted = super::hmac_sha256(key, &[token.as_bytes()])
                    .finalize()
                    .into_bytes();
                Some(Handshake {
                    answer: Answer {
                        status: 200,
                        content_type: "application/json".into(),
                        body: serde_json::json!({
                            "plainToken": token,
                            "encryptedToken": hex::encode(encrypted),
                        })
                        .to_string()
                        .into_bytes(),
                        headers: Vec::new(),
                    },
                    note: "Zoom's endpoint.url_validation, answered by replaysafe",
                })
            }
            // Told by the signed body (its `challenge`), not by the unsigned
            // message-type header: a relabelled challenge is still one, and
            // never reaches the application as an event.
            HandshakeKind::TwitchChallenge => {
                let challenge = json()?.get("challenge")?.as_str()?.to_owned();
                Some(Handshake {
                    answer: Answer {
                        status: 200,
                        content_type: "text/plain".into(),
                        body: challenge.into_bytes(),
                        headers: Vec::new(),
                    },
                    note: "Twitch's webhook_callback_verification, answered by replaysafe",
                })
            }
        }
    }

    fn describe(&self) -> Option<String> {
        let spec = &self.spec;
        let place = match &spec.location {
            Location::Header(h) => format!("header {h}"),
            Location::Field(p) => format!("body field {p}"),
        };
        let format = match &spec.format {
            Format::Plain => String::new(),
            Format::Kv {
                separator,
                signature_name,
                ..
            } => format!(" as {signature_name}= pairs split by {separator:?}"),
        };
        let prefix = spec
            .prefix
            .as_deref()
            .map_or(String::new(), |p| format!(" after {p:?}"));
        let timestamp = match (&spec.timestamp, spec.timestamp_format) {
            (None, _) => "no signed timestamp".to_owned(),
            (Some(at), format) => {
                let at = match at {
                    TimestampAt::Header(h) => format!("header {h}"),
                    TimestampAt::Field(p) => format!("body field {p}"),
                    TimestampAt::Kv => "the signature header".to_owned(),
                };
                format!("timestamp from {at} ({format:?})")
            }
        };
        Some(format!(
            "{} ({:?}) in {place}{format}{prefix}, over {}; {timestamp}",
            algorithm_name(self.spec.algorithm),
            spec.encoding,
            spec.payload.as_str()
        ))
    }

    fn signature_header(&self) -> Option<&str> {
        match &self.spec.location {
            Location::Header(h) => Some(h),
            Location::Field(_) => None,
        }
    }

    /// A sample shaped by what the key and the payload read: the event id
    /// in every field the key reads (and in the body's `id`), a value of
    /// its own in every other field the payload reads, the timestamp and
    /// the signature where the provider puts them.
    fn sign_sample(&self, event_id: &str, now: i64) -> Result<Signed, String> {
        let spec = &self.spec;
        let (hash, first) = match &self.keys {
            Keys::Hmac { hash, secrets } => (*hash, secrets.first().ok_or("no secret")?),
            Keys::Ed25519(_) | Keys::EcdsaP256(_) => {
                return Err(
                    "the provider signs with its private key, which replaysafe does not hold"
                        .into(),
                )
            }
        };
        let timestamp = match spec.timestamp_format {
            TimestampFormat::Unix => now.to_string(),
            TimestampFormat::UnixMs => now.saturating_mul(1000).to_string(),
            TimestampFormat::Rfc3339 => chrono::DateTime::from_timestamp(now, 0)
                .ok_or("a time out of range")?
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        let key_fields: Vec<&Field> = match &spec.key {
            Some(rule) => rule.template.fields().collect(),
            None => Vec::new(),
        };
        let batch = key_fields
            .iter()
            .copied()
            .chain(spec.payload.fields())
            .any(|f| matches!(f, Field::Pointer(p) if p.starts_with("/0/")));
        let event =
            serde_json::json!({"id": event_id, "type": "sample.created", "data": {"amount": 4200}});
        // A provider that posts batches (`/0/...`) posts an array.
        let mut body = if batch {
            serde_json::json!([event])
        } else {
            event
        };
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        if let Some(h) = &spec.id_header {
            headers.push((h.clone(), event_id.to_owned()));
        }
        for field in &key_fields {
            match field {
                Field::Pointer(p) => set_pointer(&mut body, p, event_id.into()),
                Field::Header(h) if !headers.iter().any(|(n, _)| n == h) => {
                    headers.push((h.clone(), event_id.to_owned()))
                }
                Field::Form(_) => return Err("a key read from a form is not sampled".into()),
                _ => {}
            }
        }
        match &spec.timestamp {
            Some(TimestampAt::Header(h)) => headers.push((h.clone(), timestamp.clone())),
            // A number, as providers that put it in the body write one.
            Some(TimestampAt::Field(p)) => {
                let value = match timestamp.parse::<i64>() {
                    Ok(n) => n.into(),
                    Err(_) => timestamp.clone().into(),
                };
                set_pointer(&mut body, p, value)
            }
            Some(TimestampAt::Kv) | None => {}
        }
        let own = super::sha256_hex(&[event_id.as_bytes()]);
        for field in spec.payload.fields() {
            match field {
                Field::Pointer(p) if body.pointer(p).is_none() => {
                    set_pointer(&mut body, p, own[..32].into())
                }
                Field::Header(h) if !headers.iter().any(|(n, _)| n == h) => {
                    headers.push((h.clone(), own[..16].to_owned()))
                }
                _ => {}
            }
        }
        let req = Inbound {
            headers: headers.clone(),
            body: body.to_string().into_bytes(),
            ..Default::default()
        };
        let fields = RequestFields::new(&req);
        let payload = self
            .payload(&fields, Some(&timestamp), &req)
            .map_err(|r| r.reason)?;
        let signature = format!(
            "{}{}",
            spec.prefix.as_deref().unwrap_or(""),
            self.encode(&mac(hash, first, &payload).bytes())
        );
        let value = match &spec.format {
            Format::Plain => signature,
            Format::Kv {
                separator,
                signature_name,
                timestamp_name,
            } => match timestamp_name {
                Some(t) => format!("{t}={timestamp}{separator}{signature_name}={signature}"),
                None => format!("{signature_name}={signature}"),
            },
        };
        match &spec.location {
            Location::Header(h) => headers.push((h.clone(), value)),
            // The payload cannot hold the body here (refused at start):
            // the signature goes in after it was computed.
            Location::Field(p) => set_pointer(&mut body, p, value.into()),
        }
        Ok(Signed {
            headers,
            body: body.to_string().into_bytes(),
        })
    }
}

/// Sets `value` at a JSON pointer, making the objects and arrays on its way
/// (a numeric step into nothing makes an array).
fn set_pointer(root: &mut serde_json::Value, pointer: &str, value: serde_json::Value) {
    let mut at = root;
    for step in pointer.split('/').skip(1) {
        let step = step.replace("~1", "/").replace("~0", "~");
        if at.is_null() {
            *at = match step.parse::<usize>() {
                Ok(_) => serde_json::Value::Array(Vec::new()),
                Err(_) => serde_json::Value::Object(Default::default()),
            };
        }
        at = match at {
            serde_json::Value::Array(items) => {
                let i = step.parse::<usize>().unwrap_or(items.len());
                while items.len() <= i {
                    items.push(serde_json::Value::Null);
                }
                &mut items[i]
            }
            serde_json::Value::Object(map) => map.entry(step).or_insert(serde_json::Value::Null),
            other => {
                *other = serde_json::Value::Object(Default::default());
                other
                    .as_object_mut()
                    .expect("just made an object")
                    .entry(step)
                    .or_insert(serde_json::Value::Null)
            }
        };
    }
    *at = value;
}

impl Declared {
    /// The secret a request's signature was made with.
    fn signing_key(&self, req: &Inbound) -> Option<&[u8]> {
        let fields = RequestFields::new(req);
        let presented = self.presented(req, &fields);
        let payload = self
            .payload(&fields, presented.timestamp.as_deref(), req)
            .ok()?;
        let Keys::Hmac { hash, secrets } = &self.keys else {
            return None;
        };
        secrets
            .iter()
            .find(|key| {
                let mac = mac(*hash, key, &payload);
                presented.signatures.iter().any(|s| mac.signs(s))
            })
            .map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    // Standard Webhooks' published vector (vectors.md), described
    // declaratively: the declarative verifier must reproduce the built-in.
    use crate::providers::standard::tests::{request, BODY, ID, SECRET, SIG, TS};

    pub fn standard_spec() -> Spec {
        Spec {
            location: Location::Header("webhook-signature".into()),
            algorithm: Algorithm::HmacSha256,
            encoding: Encoding::Base64,
            prefix: Some("v1,".into()),
            format: Format::Plain,
            secret_encoding: SecretEncoding::Whsec,
            payload: Template::parse("{id}.{timestamp}.{body}", |_| true).unwrap(),
            timestamp: Some(TimestampAt::Header("webhook-timestamp".into())),
            timestamp_format: TimestampFormat::Unix,
            id_header: Some("webhook-id".into()),
            public_key: None,
            key: None,
            handshake: None,
        }
    }

    fn settings(spec: Spec, secret: &str) -> Settings {
        Settings {
            secrets: vec![Secret::new(secret)],
            signature: Some(spec),
            ..Default::default()
        }
    }

    pub(super) fn contract() -> crate::providers::contract::Contract {
        use crate::providers::contract::{Contract, Sdk, Vector};
        let mut keyless = request(ID, TS, SIG, BODY);
        keyless.headers.retain(|(name, _)| name != "webhook-id");
        Contract {
            settings: settings(standard_spec(), SECRET),
            wrong: settings(standard_spec(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            vector: Vector {
                request: request(ID, TS, SIG, BODY),
                now: 1649367553 + 10,
                key: ID,
            },
            // Without its id the payload cannot be formed: refused anyway.
            keyless: Some(Vector {
                request: keyless,
                now: 1649367553,
                key: "",
            }),
            pieces: ["v1,", "t=", ",v1=", "sha256="].map(String::from).to_vec(),
            sdk: Some(Sdk {
                script: "sign.mjs",
                request: |now| {
                    serde_json::json!({"provider": "standard", "secret": SECRET,
                        "body": BODY, "timestamp": now, "id": "msg_contract"})
                },
                settings: |_| settings(standard_spec(), SECRET),
                key: Some("msg_contract"),
            }),
        }
    }

    fn build_with(spec: Spec, secret: &str) -> Box<dyn Scheme> {
        build(&settings(spec, secret)).unwrap()
    }

    /// GitHub's and Stripe's schemes, described declaratively, verify their
    /// own published vectors (vectors.md).
    #[test]
    fn the_declarative_verifier_describes_github_and_stripe() {
        let github = Spec {
            location: Location::Header("x-hub-signature-256".into()),
            prefix: Some("sha256=".into()),
            encoding: Encoding::Hex,
            secret_encoding: SecretEncoding::Raw,
            payload: Template::parse("{body}", |_| true).unwrap(),
            timestamp: None,
            id_header: Some("x-github-delivery".into()),
            ..standard_spec()
        };
        let scheme = build_with(github, "It's a Secret to Everybody");
        let req = Inbound {
            headers: vec![(
                "x-hub-signature-256".into(),
                "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".into(),
            )],
            body: b"Hello, World!".to_vec(),
            ..Default::default()
        };
        assert!(scheme.verify(&req, None).is_ok());
        assert!(
            scheme.replay_content(&req).is_some(),
            "nothing per-send is signed"
        );

        let stripe = Spec {
            location: Location::Header("stripe-signature".into()),
            prefix: None,
            encoding: Encoding::Hex,
            format: Format::Kv {
                separator: ",".into(),
                signature_name: "v1".into(),
                timestamp_name: Some("t".into()),
            },
            secret_encoding: SecretEncoding::Raw,
            payload: Template::parse("{timestamp}.{body}", |_| true).unwrap(),
            timestamp: Some(TimestampAt::Kv),
            id_header: None,
            ..standard_spec()
        };
        let scheme = build_with(stripe, "whsec_test_secret");
        let body = r#"{"id":"evt_1"}"#;
        let mac = hex::encode(
            super::super::hmac_sha256(b"whsec_test_secret", &[b"1700000000.", body.as_bytes()])
                .finalize()
                .into_bytes(),
        );
        let req = Inbound {
            headers: vec![(
                "stripe-signature".into(),
                format!("t=1700000000,v1=00ff,v1={mac}"),
            )],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        };
        let window = |now| {
            Some(Window {
                now,
                tolerance: 300,
            })
        };
        assert_eq!(
            scheme.verify(&req, window(1700000010)).unwrap(),
            "hmac-sha256 signature matched"
        );
        assert_eq!(
            scheme.verify(&req, window(1700009999)).unwrap_err().kind,
            super::super::RejectKind::Timestamp
        );
    }

    /// The replay guard stays on wherever the default key is not signed,
    /// a signed timestamp or not: within its tolerance a capture could be
    /// re-posted under a fresh id.
    #[test]
    fn the_replay_guard_follows_what_the_signature_covers() {
        let standard = build_with(standard_spec(), SECRET);
        let req = request(ID, TS, SIG, BODY);
        assert!(standard.replay_content(&req).is_none(), "the id is signed");
        assert!(standard.covers(&Field::Header("webhook-id".into())));
        assert!(standard.covers(&Field::Pointer("/type".into())));
        assert!(!standard.covers(&Field::Header("x-other".into())));

        let unsigned_id = Spec {
            payload: Template::parse("{timestamp}.{body}", |_| true).unwrap(),
            ..standard_spec()
        };
        let scheme = build_with(unsigned_id, SECRET);
        let content = scheme.replay_content(&req).expect("the id is not signed");
        assert_eq!(*content, format!("{TS}.{BODY}").into_bytes()[..]);
        assert!(!scheme.covers(&Field::Header("webhook-id".into())));

        // Mailgun's shape: two body fields signed, the rest of the body not.
        let fields = Spec {
            location: Location::Field("/signature/signature".into()),
            payload: Template::parse("{timestamp}{/signature/token}", |_| true).unwrap(),
            timestamp: Some(TimestampAt::Field("/signature/timestamp".into())),
            encoding: Encoding::Hex,
            prefix: None,
            secret_encoding: SecretEncoding::Raw,
            ..standard_spec()
        };
        let scheme = build_with(fields, "key-1");
        assert!(scheme.covers(&Field::Pointer("/signature/token".into())));
        assert!(!scheme.covers(&Field::Pointer("/event-data/id".into())));
        assert!(!scheme.covers(&Field::Body));
        assert_eq!(scheme.signature_header(), None);
    }

    #[test]
    fn timestamps_and_signatures_are_read_strictly() {
        let scheme = build_with(standard_spec(), SECRET);
        let window = Some(Window {
            now: 1649367553,
            tolerance: 300,
        });
        for ts in ["+1649367553", "1649367553.0", "", "-1"] {
            let req = request(ID, ts, SIG, BODY);
            assert!(scheme.verify(&req, window).is_err(), "{ts:?}");
        }
        // An empty signature, one without its prefix: none to try.
        for sig in ["v1,", "", "v2,abc", "v1"] {
            let req = request(ID, TS, sig, BODY);
            assert_eq!(
                scheme.verify(&req, window).unwrap_err().kind,
                super::super::RejectKind::Signature,
                "{sig:?}"
            );
        }
        // A valid one after a thousand without the prefix is still found.
        let many = format!("{} {SIG}", "v2,x ".repeat(1000));
        assert!(scheme.verify(&request(ID, TS, &many, BODY), window).is_ok());
        let ms = Spec {
            timestamp_format: TimestampFormat::UnixMs,
            ..standard_spec()
        };
        let scheme = build_with(ms, SECRET);
        assert!(scheme.sign_sample("e", i64::MAX).is_ok(), "no overflow");
        let rfc = Spec {
            timestamp_format: TimestampFormat::Rfc3339,
            ..standard_spec()
        };
        let scheme = build_with(rfc, SECRET);
        assert!(
            scheme.sign_sample("e", i64::MAX).is_err(),
            "out of range, said"
        );
        sample_verifies(scheme.as_ref(), "e", 1_700_000_100);
    }

    /// A sample signed 100 s before `now` verifies at `now`.
    fn sample_verifies(scheme: &dyn Scheme, id: &str, now: i64) -> Inbound {
        let req = scheme.sign_sample(id, now - 100).unwrap().into_request();
        let window = Some(Window {
            now,
            tolerance: 300,
        });
        assert!(scheme.verify(&req, window).is_ok());
        req
    }

    /// Seeded random requests against declared shapes the contract's one
    /// vector does not walk (kv, a signature in the body, milliseconds,
    /// RFC 3339, base64 secrets): nothing panics.
    #[test]
    fn no_input_panics_any_declared_shape() {
        use rand::Rng;
        let kv = Spec {
            location: Location::Header("x-sig".into()),
            format: Format::Kv {
                separator: ";".into(),
                signature_name: "s".into(),
                timestamp_name: Some("ts".into()),
            },
            prefix: Some("sha512=".into()),
            algorithm: Algorithm::HmacSha512,
            encoding: Encoding::Hex,
            timestamp: Some(TimestampAt::Kv),
            timestamp_format: TimestampFormat::UnixMs,
            secret_encoding: SecretEncoding::Raw,
            payload: Template::parse("{timestamp}:{method}:{url}:{header:x-a}:{body}", |_| true)
                .unwrap(),
            ..standard_spec()
        };
        let field = Spec {
            location: Location::Field("/signature/signature".into()),
            payload: Template::parse("{timestamp}{/signature/token}", |_| true).unwrap(),
            timestamp: Some(TimestampAt::Field("/signature/timestamp".into())),
            timestamp_format: TimestampFormat::Rfc3339,
            algorithm: Algorithm::HmacSha1,
            secret_encoding: SecretEncoding::Base64,
            ..standard_spec()
        };
        let mut garbage = crate::providers::contract::Garbage::new(
            &[
                "s=",
                "ts=",
                ";",
                "sha512=",
                "\"signature\":",
                "{\"signature\":{\"token\":\"t\"}}",
            ]
            .map(String::from),
        );
        for (spec, secret) in [(kv, "raw"), (field, "c2VjcmV0"), (standard_spec(), SECRET)] {
            let scheme = build(&Settings {
                secrets: vec![Secret::new(secret)],
                signature: Some(spec),
                public_url: Some("https://hooks.example/in".into()),
                ..Default::default()
            })
            .unwrap();
            for _ in 0..500 {
                let mut req = Inbound::default();
                for name in [
                    "x-sig",
                    "webhook-signature",
                    "webhook-timestamp",
                    "webhook-id",
                    "x-a",
                ] {
                    if garbage.rng.gen_bool(0.7) {
                        req.headers.push((name.into(), garbage.text()));
                    }
                }
                req.body = garbage.bytes();
                let now = garbage.rng.gen_range(i64::MIN..i64::MAX);
                let _ = scheme.verify(
                    &req,
                    Some(Window {
                        now,
                        tolerance: 300,
                    }),
                );
                let _ = scheme.key(&req);
                let _ = scheme.replay_content(&req);
                let _ = scheme.signed_content(&req);
            }
        }
    }

    /// Ed25519 and ECDSA P-256 (DER) signatures, made here with keys of
    /// the test's own (ed25519-dalek's and ring's signers), verify under
    /// the public key as PEM or base64 DER; another key, a changed byte or
    /// a key of the other kind do not.
    #[test]
    fn public_key_algorithms_verify_their_signatures() {
        use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
        let b64 = |der: &[u8]| base64::engine::general_purpose::STANDARD.encode(der);
        let pem = |der: &[u8]| {
            spki::der::pem::encode_string("PUBLIC KEY", spki::der::pem::LineEnding::LF, der)
                .unwrap()
        };
        let body = r#"{"id":"evt_pk","type":"t"}"#;
        let spec = |algorithm, public_key: String| Spec {
            algorithm,
            prefix: None,
            secret_encoding: SecretEncoding::Raw,
            public_key: Some(public_key),
            ..standard_spec()
        };
        let signed = |signature: &[u8]| {
            let mut req = request(ID, "1700000000", "", body);
            req.headers.retain(|(n, _)| n != "webhook-signature");
            req.headers
                .push(("webhook-signature".into(), b64(signature)));
            req
        };
        let window = Some(Window {
            now: 1_700_000_000,
            tolerance: 300,
        });
        let payload = format!("{ID}.1700000000.{body}");

        let ed = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let mut ed_der = hex::decode("302a300506032b6570032100").unwrap();
        ed_der.extend_from_slice(ed.verifying_key().as_bytes());
        let ed_sig = ed25519_dalek::Signer::sign(&ed, payload.as_bytes()).to_bytes();

        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let mut ec_der =
            hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").unwrap();
        ec_der.extend_from_slice(ec.public_key().as_ref());
        let ec_sig = ec.sign(&rng, payload.as_bytes()).unwrap();

        for (algorithm, der, signature) in [
            (Algorithm::Ed25519, &ed_der, ed_sig.to_vec()),
            (Algorithm::EcdsaP256, &ec_der, ec_sig.as_ref().to_vec()),
        ] {
            for text in [pem(der), b64(der)] {
                let scheme = build(&Settings {
                    signature: Some(spec(algorithm, text)),
                    ..Default::default()
                })
                .unwrap();
                let req = signed(&signature);
                assert_eq!(
                    scheme.verify(&req, window).unwrap(),
                    format!("{} signature matched", algorithm_name(algorithm))
                );
                let mut tampered = req.clone();
                tampered.body[3] ^= 1;
                assert!(scheme.verify(&tampered, window).is_err());
                assert!(scheme.sign_sample("e", 1_700_000_000).is_err());
            }
        }
        // A key of the other kind, or none at all, is refused at start.
        let crossed = build(&Settings {
            signature: Some(spec(Algorithm::EcdsaP256, b64(&ed_der))),
            ..Default::default()
        });
        assert!(crossed.is_err());
        let none = Spec {
            public_key: None,
            ..spec(Algorithm::Ed25519, String::new())
        };
        let missing = build(&Settings {
            signature: Some(none),
            ..Default::default()
        });
        assert_eq!(missing.err().unwrap().field, "public_key");
        // The SendGrid vector under another P-256 key.
        let other = build(&Settings {
            signature: Some(spec(Algorithm::EcdsaP256, b64(&ec_der))),
            ..Default::default()
        })
        .unwrap();
        assert!(other.verify(&signed(&ed_sig), window).is_err());
    }

    #[test]
    fn what_the_payload_needs_is_checked_at_start() {
        let spec = Spec {
            id_header: None,
            ..standard_spec()
        };
        assert!(build(&settings(spec, SECRET)).is_err());
        let spec = Spec {
            payload: Template::parse("{url}{body}", |_| true).unwrap(),
            ..standard_spec()
        };
        assert!(build(&settings(spec, SECRET)).is_err());
        let bad = Spec {
            secret_encoding: SecretEncoding::Base64,
            ..standard_spec()
        };
        assert!(build(&settings(bad, "not base64!")).is_err());
    }

    #[test]
    fn a_sample_it_signs_verifies() {
        let scheme = build_with(standard_spec(), SECRET);
        let req = sample_verifies(scheme.as_ref(), "evt_sample", 1_700_000_000);
        assert_eq!(scheme.key(&req).unwrap(), "evt_sample");
    }
}
