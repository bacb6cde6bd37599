//! The contract every registered provider passes, walked over `REGISTRY` so
//! that a new provider is held to it by its registry line alone: its
//! published vector verifies and yields its key; the official SDK's
//! signature verifies where there is an SDK; its sample signer's requests
//! verify; a tampered body, a wrong secret or key, and a request without its
//! key are refused; and no input makes it panic (seeded, so a failure
//! replays with `CONTRACT_SEED`).

use rand::{Rng, SeedableRng};

use super::{Inbound, Scheme, Settings, Window, REGISTRY};

#[path = "../../../server/tests/sdk/signer.rs"]
pub(crate) mod signer;

/// What a provider module gives the contract.
pub struct Contract {
    /// Settings the requests below verify under.
    pub settings: Settings,
    /// The same with another secret or key: nothing verifies under it.
    pub wrong: Settings,
    /// A published (or pinned) signed request and its key.
    pub vector: Vector,
    /// A correctly signed request without its key; None where the provider
    /// derives a key from the content when it sends none (Slack, Twilio).
    pub keyless: Option<Vector>,
    /// The provider's official SDK signer, where there is one.
    pub sdk: Option<Sdk>,
    /// Fragments of the provider's syntax for random input.
    pub pieces: Vec<String>,
}

/// A signed request and the Unix time it verifies at.
pub struct Vector {
    pub request: Inbound,
    pub now: i64,
    /// The key it yields (unused for a keyless request).
    pub key: &'static str,
}

/// A signer in `tests/sdk` (its README gives the JSON it reads and writes).
pub struct Sdk {
    /// `sign.mjs` (run by node) or `sign.py` (python3).
    pub script: &'static str,
    /// The request for the signer, signed at `now`.
    pub request: fn(now: i64) -> serde_json::Value,
    /// The settings its output verifies under (the signer returns Twilio's
    /// signed URL and Discord's public key).
    pub settings: fn(signed: &serde_json::Value) -> Settings,
    /// The key the signed request yields, where it is fixed.
    pub key: Option<&'static str>,
}

fn window(now: i64) -> Option<Window> {
    Some(Window {
        now,
        tolerance: 300,
    })
}

fn build(name: &str, settings: &Settings) -> Box<dyn Scheme> {
    let provider = super::find(name).expect("registered");
    (provider.build)(settings).unwrap_or_else(|e| panic!("{name}: {e:?}"))
}

/// Flips the lowest bit of the byte at `at`: never an equivalent encoding
/// (`%4a` and `%4A` differ in another bit).
fn tampered(request: &Inbound, at: usize) -> Inbound {
    let mut copy = request.clone();
    copy.body[at] ^= 1;
    copy
}

fn accepted(scheme: &dyn Scheme, request: &Inbound, now: i64) -> Result<String, String> {
    scheme
        .verify(request, window(now))
        .and_then(|_| scheme.key(request))
        .map_err(|r| format!("{} {}", r.status, r.reason))
}

fn refused_unverified(name: &str, what: &str, scheme: &dyn Scheme, request: &Inbound, now: i64) {
    let verdict = scheme.verify(request, window(now));
    assert_eq!(
        verdict.as_ref().map_err(|r| r.status),
        Err(401),
        "{name}: {what} must be refused as unsigned, got {verdict:?}"
    );
}

#[test]
fn every_provider_keeps_the_contract() {
    assert!(REGISTRY.len() >= 9);
    for provider in REGISTRY {
        let name = provider.name;
        let contract = (provider.contract.expect("every module brings its contract"))();
        let scheme = build(name, &contract.settings);
        let Vector { request, now, key } = &contract.vector;
        assert_eq!(
            accepted(scheme.as_ref(), request, *now).as_deref(),
            Ok(*key),
            "{name}: the vector"
        );
        let last = request.body.len() - 1;
        for at in [0, last / 2, last] {
            let what = format!("the vector with byte {at} of its body changed");
            refused_unverified(name, &what, scheme.as_ref(), &tampered(request, at), *now);
        }
        let wrong = build(name, &contract.wrong);
        refused_unverified(
            name,
            "the vector under another secret or key",
            wrong.as_ref(),
            request,
            *now,
        );
        let late = now + 3600;
        if scheme.verify(request, None).is_ok() && scheme.verify(request, window(late)).is_err() {
            let refusal = scheme.verify(request, window(late)).unwrap_err();
            assert_eq!(refusal.kind, super::RejectKind::Timestamp, "{name}");
        }
        if let Some(keyless) = &contract.keyless {
            let verdict = accepted(scheme.as_ref(), &keyless.request, keyless.now);
            assert!(
                verdict.is_err(),
                "{name}: a request without its key gave {verdict:?}"
            );
        }
        match scheme.sign_sample("evt_contract_1", *now) {
            Ok(signed) => {
                let sample = signed.into_request();
                let got = accepted(scheme.as_ref(), &sample, *now);
                assert!(
                    got.as_deref().is_ok_and(|k| k.contains("evt_contract_1")),
                    "{name}: its own sample gave {got:?}"
                );
            }
            // Only a provider that signs with its private key has no sample.
            Err(_) => assert!(contract.settings.secrets.is_empty(), "{name}"),
        }
    }
}

#[test]
fn official_sdk_signatures_verify() {
    let now = chrono::Utc::now().timestamp();
    let mut checked = 0;
    for provider in REGISTRY {
        let name = provider.name;
        let Some(sdk) = (provider.contract.expect("every module brings its contract"))().sdk else {
            continue;
        };
        let signed =
            signer::sdk_sign(sdk.script, serde_json::json!([(sdk.request)(now)])).remove(0);
        let url = signed["url"].as_str();
        let request = Inbound {
            query: url
                .and_then(|u| u.split_once('?'))
                .map(|(_, q)| q.to_owned()),
            headers: signed["headers"]
                .as_object()
                .expect("headers")
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str().unwrap().to_owned()))
                .collect(),
            body: signed["body"].as_str().unwrap().as_bytes().to_vec(),
            ..Default::default()
        };
        let scheme = build(name, &(sdk.settings)(&signed));
        let got = accepted(scheme.as_ref(), &request, now);
        assert!(got.is_ok(), "{name}: the SDK's signature gave {got:?}");
        if let Some(key) = sdk.key {
            assert_eq!(got.as_deref(), Ok(key), "{name}");
        }
        let last = request.body.len() - 1;
        refused_unverified(
            name,
            "the SDK's request tampered",
            scheme.as_ref(),
            &tampered(&request, last),
            now,
        );
        checked += 1;
    }
    assert!(checked >= 6, "SDK signers for {checked} providers");
}

/// Header names every provider reads, and pieces of their syntax.
const HEADERS: [&str; 22] = [
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
    "x-slack-retry-num",
    "x-twilio-signature",
    "i-twilio-idempotency-token",
    "x-twilio-webhooks-signature-settings",
    "content-type",
    "wechatpay-signature",
    "wechatpay-serial",
    "wechatpay-timestamp",
    "wechatpay-nonce",
    "x-signature-ed25519",
    "x-signature-timestamp",
    "authorization",
];
const PIECES: [&str; 19] = [
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
    "+",
    "\u{0}",
    "é",
    "999999999999999999999",
    "-1",
    "WECHATPAY/SIGNTEST/",
    "{\"id\":",
    "bodySHA256=",
    "sign=",
];

/// Seeded random input built from syntax fragments: `CONTRACT_SEED` replays
/// a failure.
pub struct Garbage {
    pub rng: rand::rngs::StdRng,
    pub seed: u64,
    pieces: Vec<String>,
}

impl Garbage {
    /// The common fragments and a provider's own.
    pub fn new(extra: &[String]) -> Self {
        let seed = std::env::var("CONTRACT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed_u64);
        let mut pieces: Vec<String> = PIECES.iter().map(|p| p.to_string()).collect();
        pieces.extend_from_slice(extra);
        Self {
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            seed,
            pieces,
        }
    }

    /// Fragments and printable runs, up to six of them.
    pub fn text(&mut self) -> String {
        let mut s = String::new();
        for _ in 0..self.rng.gen_range(0..6) {
            if self.rng.gen_bool(0.5) {
                s.push_str(&self.pieces[self.rng.gen_range(0..self.pieces.len())]);
            } else {
                let n = self.rng.gen_range(0..40);
                s.extend((0..n).map(|_| self.rng.gen_range(0x20u8..0x7f) as char));
            }
        }
        s
    }

    /// Fragments with raw bytes, valid UTF-8 or not.
    pub fn bytes(&mut self) -> Vec<u8> {
        let mut out = self.text().into_bytes();
        if self.rng.gen_bool(0.5) {
            out.extend((0..self.rng.gen_range(0..64)).map(|_| self.rng.gen::<u8>()));
        }
        out
    }
}

/// Random requests, most built on the provider's own signed vector, at
/// random times: nothing panics, and a changed body is never accepted.
#[test]
fn no_input_panics_or_passes_any_provider() {
    for provider in REGISTRY {
        let contract = (provider.contract.expect("every module brings its contract"))();
        let scheme = build(provider.name, &contract.settings);
        let mut garbage = Garbage::new(&contract.pieces);
        let vector = &contract.vector.request;
        for _ in 0..600 {
            let rng = &mut garbage.rng;
            let mut request = if rng.gen_bool(0.8) {
                vector.clone()
            } else {
                Inbound::default()
            };
            let replace: Vec<bool> = request.headers.iter().map(|_| rng.gen_bool(0.4)).collect();
            for (header, replace) in request.headers.iter_mut().zip(replace) {
                if replace {
                    header.1 = garbage.text();
                }
            }
            for _ in 0..garbage.rng.gen_range(0..4) {
                let name = HEADERS[garbage.rng.gen_range(0..HEADERS.len())];
                let value = garbage.text();
                request.headers.insert(0, (name.into(), value));
            }
            if garbage.rng.gen_bool(0.3) {
                request.query = Some(garbage.text());
            }
            match garbage.rng.gen_range(0..3) {
                0 => request.body = garbage.bytes(),
                1 => {
                    let at = garbage.rng.gen_range(0..=request.body.len());
                    let inserted = garbage.bytes();
                    request.body.splice(at..at, inserted);
                }
                _ => {}
            }
            let now = if garbage.rng.gen_bool(0.5) {
                contract.vector.now
            } else {
                garbage.rng.gen_range(i64::MIN..i64::MAX)
            };
            let waived = garbage.rng.gen_bool(0.2);
            let verdict = scheme.verify(
                &request,
                (!waived).then_some(Window {
                    now,
                    tolerance: 300,
                }),
            );
            let _ = scheme.key(&request);
            let _ = scheme.replay_content(&request);
            let _ = scheme.signed_content(&request);
            let _ = scheme.own_answer(&request);
            assert!(
                verdict.is_err() || request.body == vector.body,
                "{} (CONTRACT_SEED={}) accepted a changed body: {request:?}",
                provider.name,
                garbage.seed
            );
        }
    }
}
