//! One module per provider, each holding that provider's rules: which headers
//! carry the signature, what is signed, how it is encoded, the timestamp
//! window, where the idempotency key lives, and the answer it expects.

pub mod alipay;
pub mod discord;
pub mod github;
pub mod shopify;
pub mod slack;
pub mod standard;
pub mod stripe;
pub mod twilio;
pub mod wechatpay;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::claim::{Claimed, Outcome};
use super::{Inbound, Reply};
use crate::config::{Mode, Provider, SourceConfig};

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

/// Checks a configured secret's form at start, so a typo fails loudly then
/// rather than as 401s later.
pub fn check_secret(provider: Provider, secret: &str) -> Result<(), String> {
    match provider {
        Provider::Standard => standard::decode_secret(secret).map(|_| ()),
        _ => Ok(()),
    }
}

/// Verifies the request with the provider's scheme on the raw bytes. Returns
/// what matched, for the delivery record (never secret material).
pub fn verify(
    source: &SourceConfig,
    req: &Inbound,
    now: i64,
    waive_timestamp: bool,
) -> Result<String, Rejection> {
    let window = (!waive_timestamp).then_some(Window {
        now,
        tolerance: i64::try_from(source.tolerance_secs).unwrap_or(i64::MAX),
    });
    let secrets: Vec<&[u8]> = source
        .secrets
        .iter()
        .map(|s| s.expose().as_bytes())
        .collect();
    match source.provider {
        Provider::Standard => standard::verify(req, &secrets, window),
        Provider::Stripe => stripe::verify(req, &secrets, window),
        Provider::Github => github::verify(req, &secrets),
        Provider::Shopify => shopify::verify(req, &secrets),
        Provider::Slack => slack::verify(req, &secrets, window),
        Provider::Twilio => twilio::verify(
            req,
            &secrets,
            source.public_url.as_deref().unwrap_or_default(),
        ),
        Provider::Alipay => match &source.verify_keys.rsa {
            Some(key) => alipay::verify(req, key),
            None => Err(Rejection::signature("no Alipay public key configured")),
        },
        Provider::Wechatpay => wechatpay::verify(req, &source.verify_keys.platform, window),
        Provider::Discord => match &source.verify_keys.ed25519 {
            Some(key) => discord::verify(req, key, window),
            None => Err(Rejection::signature("no Discord public key configured")),
        },
    }
}

/// The provider's stable event id; only called on verified requests.
pub fn idempotency_key(source: &SourceConfig, req: &Inbound) -> Result<String, Rejection> {
    let key = match source.provider {
        Provider::Standard => required_header(req, "webhook-id")?,
        Provider::Stripe => stripe::event_id(&req.body)?,
        Provider::Github => required_header(req, "x-github-delivery")?,
        Provider::Shopify => required_header(req, "x-shopify-webhook-id")?,
        Provider::Slack => slack::event_key(&req.body),
        Provider::Twilio => {
            twilio::idempotency_key(req, source.public_url.as_deref().unwrap_or_default())
        }
        Provider::Alipay => alipay::idempotency_key(req)?,
        Provider::Wechatpay => {
            // A notification the API v3 key cannot open is useless to the application.
            let key = source
                .api_v3_key
                .as_ref()
                .map(|k| k.expose().as_bytes())
                .unwrap_or_default();
            wechatpay::decrypt_resource(&req.body, key)?;
            wechatpay::idempotency_key(req)?
        }
        Provider::Discord => discord::idempotency_key(req)?,
    };
    if key.len() > 512 {
        return Err(Rejection::key("idempotency key longer than 512 bytes"));
    }
    Ok(key)
}

/// For providers whose signature covers neither the key nor a timestamp
/// (GitHub, Shopify, Twilio), the SHA-256 of what the signature covers: a
/// captured request re-posted under a fresh id has the same digest. None
/// where the signature already binds the key or a timestamp, or where the
/// source turned the guard off. Only called on verified requests.
pub fn replay_digest(source: &SourceConfig, req: &Inbound) -> Option<Vec<u8>> {
    if !source.replay_guard {
        return None;
    }
    let signed = match source.provider {
        Provider::Github | Provider::Shopify => req.body.clone(),
        Provider::Twilio => {
            twilio::signed_content(req, source.public_url.as_deref().unwrap_or_default())
        }
        _ => return None,
    };
    Some(Sha256::digest(&signed).to_vec())
}

fn required_header(req: &Inbound, name: &str) -> Result<String, Rejection> {
    match req.header(name).map(str::trim) {
        Some(v) if !v.is_empty() => Ok(v.to_owned()),
        _ => Err(Rejection::key(format!("missing {name} header"))),
    }
}

/// The answer for a verified delivery, in the form its provider expects.
pub fn reply(source: &SourceConfig, req: &Inbound, claimed: &Claimed) -> Reply {
    let outcome = claimed.outcome;
    // Sync mode: a later duplicate gets the destination's stored answer, byte for byte.
    if let (Mode::Sync, Some(stored)) = (source.mode, &claimed.stored_response) {
        if matches!(outcome, Outcome::Completed | Outcome::Dead) {
            return Reply {
                status: stored.status as u16,
                content_type: stored
                    .content_type
                    .clone()
                    .unwrap_or_else(|| "application/octet-stream".into()),
                body: stored.body.clone(),
                headers: vec![("x-replaysafe-outcome", outcome.as_str().to_owned())],
                outcome,
                delivery_id: Some(claimed.delivery_id),
            };
        }
    }
    let mut reply = json_reply(
        outcome.status(source.mode),
        outcome,
        serde_json::json!({ "outcome": outcome, "event_id": claimed.event_id }),
    );
    reply.delivery_id = Some(claimed.delivery_id);
    match source.provider {
        // Alipay keeps retrying until the body is exactly `success`.
        Provider::Alipay if reply.status == 200 => {
            reply.content_type = "text/plain".into();
            reply.body = b"success".to_vec();
        }
        // WeChat Pay wants 200 or 204 and no body on success.
        Provider::Wechatpay if reply.status == 200 => {
            reply.status = 204;
            reply.body.clear();
        }
        _ => {}
    }
    if source.provider == Provider::Slack
        && outcome != Outcome::Claimed
        && req.header("x-slack-retry-num").is_some()
    {
        // Slack stops retrying an event we already hold.
        reply.headers.push(("x-slack-no-retry", "1".into()));
    }
    reply
}

pub fn rejection_reply(_source: &SourceConfig, rejection: &Rejection) -> Reply {
    json_reply(
        rejection.status,
        Outcome::Rejected,
        serde_json::json!({ "outcome": Outcome::Rejected, "error": rejection.reason }),
    )
}

pub fn unavailable_reply() -> Reply {
    let mut reply = json_reply(
        503,
        Outcome::Unavailable,
        serde_json::json!({ "outcome": Outcome::Unavailable, "error": "storage unavailable; retry later" }),
    );
    reply.headers.push(("retry-after", "5".into()));
    reply
}

fn json_reply(status: u16, outcome: Outcome, body: serde_json::Value) -> Reply {
    Reply {
        status,
        content_type: "application/json".into(),
        body: body.to_string().into_bytes(),
        headers: vec![("x-replaysafe-outcome", outcome.as_str().to_owned())],
        outcome,
        delivery_id: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Secret, VerifyKeys};
    use rand::{Rng, SeedableRng};

    fn source(provider: Provider) -> SourceConfig {
        SourceConfig {
            slug: "s".into(),
            provider,
            secrets: vec![Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")],
            mode: Mode::Ack,
            destination: None,
            destination_secret: None,
            tolerance_secs: 300,
            max_attempts: 8,
            attempt_timeout_secs: 10,
            paused: false,
            public_key: None,
            platform_keys: Default::default(),
            api_v3_key: Some(Secret::new("0123456789abcdef0123456789abcdef")),
            public_url: Some("https://example.com/hooks/s".into()),
            replay_guard: true,
            verify_keys: VerifyKeys {
                ed25519: Some(ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key()),
                ..Default::default()
            },
        }
    }

    const HEADERS: [&str; 24] = [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "stripe-signature",
        "x-hub-signature-256",
        "x-github-delivery",
        "x-shopify-hmac-sha256",
        "x-shopify-webhook-id",
        "x-slack-signature",
        "x-slack-request-timestamp",
        "x-twilio-signature",
        "i-twilio-idempotency-token",
        "content-type",
        "wechatpay-signature",
        "wechatpay-serial",
        "wechatpay-timestamp",
        "wechatpay-nonce",
        "x-signature-ed25519",
        "x-signature-timestamp",
        "x-twilio-webhooks-signature-settings",
        "x-slack-retry-num",
        "authorization",
        "webhook-signature",
        "stripe-signature",
    ];
    const PIECES: [&str; 16] = [
        "",
        "v1,",
        "t=",
        "sha256=",
        "v0=",
        "=",
        ",",
        " ",
        "%",
        "&",
        "\u{0}",
        "é",
        "999999999999999999999",
        "-1",
        "WECHATPAY/SIGNTEST/",
        "{\"id\":",
    ];

    fn garbage(rng: &mut impl Rng) -> String {
        let mut s = String::new();
        for _ in 0..rng.gen_range(0..6) {
            if rng.gen_bool(0.5) {
                s.push_str(PIECES[rng.gen_range(0..PIECES.len())]);
            } else {
                let n = rng.gen_range(0..40);
                s.extend((0..n).map(|_| rng.gen_range(0x20u8..0x7f) as char));
            }
        }
        s
    }

    /// No input makes any verifier or key extractor panic: seeded, so a failure replays.
    #[test]
    fn no_input_panics_any_provider() {
        let providers = [
            Provider::Standard,
            Provider::Stripe,
            Provider::Github,
            Provider::Shopify,
            Provider::Slack,
            Provider::Twilio,
            Provider::Alipay,
            Provider::Wechatpay,
            Provider::Discord,
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        for round in 0..3000 {
            let provider = providers[round % providers.len()];
            let source = source(provider);
            let mut req = Inbound {
                query: rng.gen_bool(0.3).then(|| garbage(&mut rng)),
                ..Default::default()
            };
            for _ in 0..rng.gen_range(0..8) {
                req.headers.push((
                    HEADERS[rng.gen_range(0..HEADERS.len())].into(),
                    garbage(&mut rng),
                ));
            }
            req.body = if rng.gen_bool(0.5) {
                garbage(&mut rng).into_bytes()
            } else {
                (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect()
            };
            let now = rng.gen_range(i64::MIN..i64::MAX);
            let _ = verify(&source, &req, now, rng.gen_bool(0.2));
            let _ = idempotency_key(&source, &req);
        }
    }
}
