//! The providers, one module each, holding all of that provider's rules: how
//! it verifies, where its key is, which of its headers describe the event,
//! the answer it expects and how to sign a sample. Adding a provider is one
//! module and one line in `REGISTRY`. Nothing here knows about HTTP
//! frameworks, the database or the configuration file.

pub mod alipay;
pub mod declarative;
pub mod discord;
pub mod github;
pub mod shopify;
pub mod slack;
pub mod standard;
pub mod stripe;
pub mod template;
pub mod twilio;
pub mod wechatpay;

#[cfg(test)]
pub mod contract;

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::secret::Secret;

/// Every provider replaysafe verifies, by its config name.
pub const REGISTRY: &[&Provider] = &[
    &standard::PROVIDER,
    &stripe::PROVIDER,
    &github::PROVIDER,
    &shopify::PROVIDER,
    &slack::PROVIDER,
    &twilio::PROVIDER,
    &alipay::PROVIDER,
    &wechatpay::PROVIDER,
    &discord::PROVIDER,
    &declarative::PROVIDER,
];

/// The provider named `name` in the config, if there is one.
pub fn find(name: &str) -> Option<&'static Provider> {
    REGISTRY
        .iter()
        .copied()
        .find(|p| p.name == name)
        .or_else(|| declarative::presets::find(name).map(|p| &p.provider))
}

/// Every provider name a source may give: the modules' and the presets'.
pub fn names() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .map(|p| p.name)
        .chain(declarative::presets::all().iter().map(|p| p.provider.name))
        .collect()
}

/// A provider's entry in the registry.
/// How a source's events are compared with what its provider says it
/// sent (issue 34). Each provider states its own: one added later has none
/// until it brings one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconciler {
    /// `GET /v1/events`: every event, by the id replaysafe claims; a missing
    /// one is claimed from the list.
    StripeEvents,
    /// A hook's deliveries, by guid (the key); GitHub is asked to deliver a
    /// missing one again, signed.
    GitHubDeliveries,
    /// Nothing to compare with, and why.
    None(&'static str),
}

pub struct Provider {
    /// Its name in the config (`provider = "..."`) and on the dashboard.
    pub name: &'static str,
    /// What to paste where in the provider's own settings, and which
    /// setting of the source takes its secret: the Sources page says it.
    pub setup: &'static str,
    /// Builds a source's rules from its settings, once at start: a wrong
    /// setting fails then, not as 401s later.
    pub build: fn(&Settings) -> Result<Box<dyn Scheme>, SettingError>,
    /// Prefixes of its headers that describe the event and go on to the
    /// application. Only the source's own provider's are forwarded, so a
    /// request cannot smuggle another provider's (`X-GitHub-Event` on a
    /// Shopify source) past the application.
    pub event_headers: &'static [&'static str],
    /// Its signature headers: replaysafe checked them, the application
    /// checks replaysafe's own, so they are never forwarded; on screen they
    /// are masked.
    pub signature_headers: &'static [&'static str],
    /// Body fields (JSON keys at any depth, form parameters) holding
    /// credentials that let a reader act as the app: masked on screen.
    pub credential_fields: &'static [&'static str],
    /// The event's type, as destinations' filters match it (Stripe's
    /// `type`, GitHub's `X-GitHub-Event` and `action`, ...); only asked of
    /// verified requests.
    pub event_type: EventType,
    /// What its own API can say about what it sent (`[source.reconcile]`).
    pub reconciler: Reconciler,
    /// Signed requests and settings for the contract every provider passes
    /// (a preset's are its data's: `declarative::presets` walks them).
    #[cfg(test)]
    pub contract: Option<fn() -> contract::Contract>,
}

/// Where a provider says what type an event is.
#[derive(Clone, Debug)]
pub enum EventType {
    /// Its module reads it.
    Read(fn(&Inbound) -> Option<String>),
    /// One field of the request (a preset's `event_type`).
    Field(template::Field),
}

impl Provider {
    /// The event's type, as destinations' filters match it.
    pub fn event_type(&self, req: &Inbound) -> Option<String> {
        match &self.event_type {
            EventType::Read(read) => read(req),
            EventType::Field(field) => template::RequestFields::new(req)
                .get(field)
                .and_then(|v| String::from_utf8(v.into_owned()).ok())
                .filter(|t| !t.is_empty()),
        }
    }

    /// Whether a stored header of this provider's goes on to the application.
    pub fn forwards_header(&self, lowercase_name: &str) -> bool {
        self.event_headers
            .iter()
            .any(|p| lowercase_name.starts_with(p))
            && !self.signature_headers.contains(&lowercase_name)
    }
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Provider {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// What a source's config gives its provider (secrets already resolved).
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub secrets: Vec<Secret>,
    /// Alipay's RSA public key (PEM or base64) or Discord's Ed25519 one (hex).
    pub public_key: Option<String>,
    /// WeChat Pay's platform public keys (PEM) by `Wechatpay-Serial`.
    pub platform_keys: BTreeMap<String, String>,
    /// WeChat Pay's API v3 key (AES-256-GCM, 32 bytes).
    pub api_v3_key: Option<Secret>,
    /// The public URL the provider posts to (Twilio signs it).
    pub public_url: Option<String>,
    /// The source answers its provider with the destination's reply.
    pub sync: bool,
    /// `[source.signature]`: the declarative verifier's description.
    pub signature: Option<declarative::Spec>,
}

impl Settings {
    /// The shared secrets of a provider that signs with one: at least one.
    pub fn shared_secrets(&self, provider: &str) -> Result<Vec<Vec<u8>>, SettingError> {
        if self.secrets.is_empty() {
            return Err(SettingError::new(
                "secrets",
                format!("provider {provider} signs with a shared secret: give at least one"),
            ));
        }
        Ok(self
            .secrets
            .iter()
            .map(|s| s.expose().as_bytes().to_vec())
            .collect())
    }
}

/// A setting the provider cannot work with: its field (below `source[i].`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    pub field: String,
    pub problem: String,
}

impl SettingError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// A source's provider rules, built once from its settings.
pub trait Scheme: Send + Sync {
    /// Checks the signature on the raw bytes, and a signed timestamp against
    /// `window` (None when waived). Returns what matched, for the delivery
    /// record (never secret material).
    fn verify(&self, req: &Inbound, window: Option<Window>) -> Result<String, Rejection>;

    /// The provider's stable event id; only asked of verified requests.
    fn key(&self, req: &Inbound) -> Result<String, Rejection>;

    /// What the signature covers, for providers whose signature binds
    /// neither the key nor a timestamp (GitHub, Shopify, Twilio): a captured
    /// request re-posted under a fresh id covers the same content. None
    /// where the signature already binds one of them. Borrowed where it is
    /// the body itself: no copy of the body per delivery.
    fn replay_content<'a>(&self, _req: &'a Inbound) -> Option<std::borrow::Cow<'a, [u8]>> {
        None
    }

    /// Whether the signature covers a field's value, so that a source `key`
    /// reading only such fields is bound by the signature. By default the
    /// raw body is signed, and with it every field inside it.
    fn covers(&self, field: &template::Field) -> bool {
        use template::Field;
        matches!(
            field,
            Field::Body | Field::BodySha256 | Field::Pointer(_) | Field::Form(_)
        )
    }

    /// What the signature covers (or a part of it no re-post can change),
    /// for the replay guard of a source whose `key` reads a field the
    /// signature does not cover. By default the raw body.
    fn signed_content<'a>(&self, req: &'a Inbound) -> Option<std::borrow::Cow<'a, [u8]>> {
        Some(std::borrow::Cow::Borrowed(&req.body))
    }

    /// How it verifies, in a line, where the config describes it (the
    /// declarative verifier and its presets); `config check` shows it.
    fn describe(&self) -> Option<String> {
        None
    }

    /// The header the source's signature is in, where the source says it
    /// (the declarative verifier): masked on screen as the providers' own.
    fn signature_header(&self) -> Option<&str> {
        None
    }

    /// Reshapes replaysafe's answer to a verified delivery into the form the
    /// provider expects; `claimed_now` when this delivery claimed its event.
    fn shape_answer(&self, _answer: &mut Answer, _req: &Inbound, _claimed_now: bool) {}

    /// An answer the provider wants from replaysafe itself, not from the
    /// application (Discord's PING); sync sources only.
    fn own_answer(&self, _req: &Inbound) -> Option<Answer> {
        None
    }

    /// The provider's handshake (Zoom's `endpoint.url_validation`,
    /// Twitch's verification challenge), answered by replaysafe itself in
    /// every mode: recorded like any delivery, never forwarded. Only asked
    /// of verified requests; None for everything else.
    fn handshake(&self, _req: &Inbound) -> Option<Handshake> {
        None
    }

    /// Signs a sample event as the provider would, for `replaysafe send`.
    fn sign_sample(&self, _event_id: &str, _now: i64) -> Result<Signed, String> {
        Err("the provider signs with its private key, which replaysafe does not hold".into())
    }
}

impl fmt::Debug for dyn Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scheme([redacted])")
    }
}

/// One request as it reached a source: raw bytes, nothing trusted yet.
#[derive(Clone, Debug, Default)]
pub struct Inbound {
    /// The raw query string, without `?`.
    pub query: Option<String>,
    /// Header names in lowercase, values as sent, in order (repeats kept).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub remote_addr: Option<String>,
}

impl Inbound {
    /// A stored delivery's headers (`deliveries.headers`: `[[name, value], ...]`).
    pub fn stored_headers(stored: &serde_json::Value) -> Vec<(String, String)> {
        let serde_json::Value::Array(pairs) = stored else {
            return Vec::new();
        };
        pairs
            .iter()
            .filter_map(|pair| {
                Some((
                    pair.get(0)?.as_str()?.to_owned(),
                    pair.get(1)?.as_str()?.to_owned(),
                ))
            })
            .collect()
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first value of a header, trimmed, or a key rejection.
    pub fn required_header(&self, name: &str) -> Result<String, Rejection> {
        match self.header(name).map(str::trim) {
            Some(v) if !v.is_empty() => Ok(v.to_owned()),
            _ => Err(Rejection::key(format!("missing {name} header"))),
        }
    }
}

/// An answer to the provider, before the receiver adds its own headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
}

/// A handshake's answer, and what it was for the delivery's record.
pub struct Handshake {
    pub answer: Answer,
    pub note: &'static str,
}

/// A sample request signed as its provider would sign it.
pub struct Signed {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Signed {
    /// The request as it would reach a source.
    pub fn into_request(self) -> Inbound {
        Inbound {
            headers: self.headers,
            body: self.body,
            ..Default::default()
        }
    }
}

/// Why a delivery is refused: 401 (signature, or a timestamp outside the
/// window), 400 (key), 413 (size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub status: u16,
    pub reason: String,
    /// What failed, as stored in `deliveries.reject_kind`.
    pub kind: RejectKind,
}

/// What a rejection was about. A `Timestamp` rejection protects against
/// captured replays, so undoing it by re-delivery takes an admin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectKind {
    Signature,
    Timestamp,
    Key,
    Size,
}

impl RejectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectKind::Signature => "signature",
            RejectKind::Timestamp => "timestamp",
            RejectKind::Key => "key",
            RejectKind::Size => "size",
        }
    }
}

impl Rejection {
    pub fn signature(reason: impl Into<String>) -> Self {
        Self {
            status: 401,
            reason: reason.into(),
            kind: RejectKind::Signature,
        }
    }
    /// A signed timestamp outside the window: 401, as a bad signature.
    pub fn timestamp(reason: impl Into<String>) -> Self {
        Self {
            status: 401,
            reason: reason.into(),
            kind: RejectKind::Timestamp,
        }
    }
    pub fn key(reason: impl Into<String>) -> Self {
        Self {
            status: 400,
            reason: reason.into(),
            kind: RejectKind::Key,
        }
    }
    pub fn too_large(size: usize) -> Self {
        Self {
            status: 413,
            reason: format!("body of {size} bytes or more is over the limit"),
            kind: RejectKind::Size,
        }
    }
}

/// The timestamp window of schemes that sign a timestamp; None when waived.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub now: i64,
    pub tolerance: i64,
}

/// Parses a signed Unix timestamp and checks it against the window.
pub fn check_timestamp(value: &str, window: Option<Window>) -> Result<i64, Rejection> {
    let ts: i64 = value
        .trim()
        .parse()
        .map_err(|_| Rejection::signature("timestamp is not a Unix time in seconds"))?;
    if let Some(w) = window {
        if ts < w.now.saturating_sub(w.tolerance) {
            return Err(Rejection::timestamp(format!(
                "timestamp is older than the {} s window",
                w.tolerance
            )));
        }
        if ts > w.now.saturating_add(w.tolerance) {
            return Err(Rejection::timestamp(format!(
                "timestamp is more than {} s in the future",
                w.tolerance
            )));
        }
    }
    Ok(ts)
}

pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac
}

/// Constant-time: true when `signature` is the HMAC-SHA256 of `parts` under any key.
pub fn any_key_signs(keys: &[&[u8]], parts: &[&[u8]], signature: &[u8]) -> Option<usize> {
    keys.iter()
        .position(|key| hmac_sha256(key, parts).verify_slice(signature).is_ok())
}

pub fn decode_hex(value: &str) -> Option<Vec<u8>> {
    hex::decode(value.trim()).ok()
}

pub fn decode_base64(value: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()
}

pub fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hex::encode(hasher.finalize())
}

/// Names the matching secret by position, so rotation is visible without exposing it.
pub fn matched(scheme: &str, index: usize, of: usize) -> String {
    if of > 1 {
        format!("{scheme} signature matched secret {} of {of}", index + 1)
    } else {
        format!("{scheme} signature matched")
    }
}

/// Splits an `application/x-www-form-urlencoded` body into decoded (name,
/// value) byte pairs, in order, repeats kept. Split by hand over bytes and
/// not with `form_urlencoded::parse`, which decodes into UTF-8 text: a body
/// in another charset (Alipay's GBK) must be checked exactly as signed.
/// At most `MAX_FORM_PAIRS` + 1 pairs are split out, whatever the body: a
/// 1 MiB body of `a&a&a...` must not become half a million allocations.
pub fn form_pairs(raw: &[u8]) -> FormPairs {
    let decode = |part: &[u8]| -> Vec<u8> {
        let spaced: Vec<u8> = part
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        percent_encoding::percent_decode(&spaced).collect()
    };
    raw.split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .take(MAX_FORM_PAIRS + 1)
        .map(|pair| match pair.iter().position(|&b| b == b'=') {
            Some(i) => (decode(&pair[..i]), decode(&pair[i + 1..])),
            None => (decode(pair), Vec::new()),
        })
        .collect()
}

/// The text at `pointer` (RFC 6901) in a JSON body, if it is a string.
pub fn json_text(body: &[u8], pointer: &str) -> Option<String> {
    match serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .pointer(pointer)?
    {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// The first non-empty value of a form parameter, as text.
pub fn form_text(body: &[u8], name: &str) -> Option<String> {
    form_pairs(body)
        .into_iter()
        .find(|(n, v)| n == name.as_bytes() && !v.is_empty())
        .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
}

/// Decoded (name, value) pairs of a form, in order, repeats kept.
pub type FormPairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Form parameters a signed body may carry: providers send a few dozen.
pub const MAX_FORM_PAIRS: usize = 1000;

/// Refuses a form body with more parameters than any provider sends, before
/// anything is checked over them.
pub fn check_form_size(pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<(), Rejection> {
    if pairs.len() > MAX_FORM_PAIRS {
        return Err(Rejection::signature(format!(
            "more than {MAX_FORM_PAIRS} form parameters"
        )));
    }
    Ok(())
}

/// Borrowed views of owned keys, as `any_key_signs` takes them.
pub fn key_slices(keys: &[Vec<u8>]) -> Vec<&[u8]> {
    keys.iter().map(Vec::as_slice).collect()
}

#[cfg(test)]
mod event_types {
    use super::*;

    fn request(headers: &[(&str, &str)], body: &str) -> Inbound {
        Inbound {
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    /// Provider, headers, body, and the type it names.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, Option<&'a str>);

    #[test]
    fn each_provider_names_the_type_its_filters_match() {
        let cases: &[Case] = &[
            (
                "standard",
                &[],
                r#"{"type":"user.created","data":{}}"#,
                Some("user.created"),
            ),
            (
                "stripe",
                &[],
                r#"{"id":"evt_1","type":"invoice.paid"}"#,
                Some("invoice.paid"),
            ),
            ("stripe", &[], r#"{"id":"evt_1"}"#, None),
            (
                "github",
                &[("x-github-event", "issues")],
                r#"{"action":"opened"}"#,
                Some("issues.opened"),
            ),
            (
                "github",
                &[("x-github-event", "push")],
                r#"{"ref":"main"}"#,
                Some("push"),
            ),
            ("github", &[], r#"{"action":"opened"}"#, None),
            (
                "shopify",
                &[("x-shopify-topic", "orders/create")],
                "{}",
                Some("orders/create"),
            ),
            (
                "slack",
                &[],
                r#"{"type":"event_callback","event":{"type":"app_mention"}}"#,
                Some("app_mention"),
            ),
            (
                "slack",
                &[],
                r#"{"type":"url_verification","challenge":"x"}"#,
                Some("url_verification"),
            ),
            (
                "slack",
                &[],
                "payload=%7B%22type%22%3A%22block_actions%22%7D",
                Some("block_actions"),
            ),
            ("slack", &[], "command=%2Fdeploy&text=now", Some("/deploy")),
            (
                "twilio",
                &[],
                "MessageSid=SM1&MessageStatus=delivered",
                Some("delivered"),
            ),
            (
                "twilio",
                &[],
                r#"[{"type":"com.twilio.messaging.message.delivered"}]"#,
                Some("com.twilio.messaging.message.delivered"),
            ),
            (
                "alipay",
                &[],
                "notify_type=trade_status_sync&trade_status=TRADE_SUCCESS",
                Some("trade_status_sync"),
            ),
            (
                "wechatpay",
                &[],
                r#"{"id":"1","event_type":"TRANSACTION.SUCCESS"}"#,
                Some("TRANSACTION.SUCCESS"),
            ),
            (
                "discord",
                &[],
                r#"{"id":"1","type":2}"#,
                Some("APPLICATION_COMMAND"),
            ),
            ("discord", &[], r#"{"id":"1","type":1}"#, Some("PING")),
        ];
        for (provider, headers, body, want) in cases {
            let got = find(provider).unwrap().event_type(&request(headers, body));
            assert_eq!(got.as_deref(), *want, "{provider} {body}");
        }
        for p in REGISTRY {
            assert_eq!(
                p.event_type(&request(&[], "\u{0}garbage")),
                None,
                "{}",
                p.name
            );
        }
    }
}
