//! Providers as data (issue 36): each a named preset of the declarative
//! verifier in `presets.toml`, which the binary embeds: its signature, its
//! default key, where its event type is, which headers describe the event
//! and which carry signatures, and a signed vector the contract verifies.
//! Adding a provider that fits is one entry there, no Rust.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;

use super::spec::{self, RawSignature};
use super::{HandshakeKind, Spec};
use crate::providers::template::{Field, KeyRule, Template};
use crate::providers::{EventType, Inbound, Provider, Reconciler};

/// A provider described by data.
pub struct Preset {
    pub provider: Provider,
    /// How the dashboard names it (`Paddle Billing`).
    pub title: &'static str,
    pub spec: Spec,
    /// Its events' key, where a source sets none.
    pub key: KeyRule,
    /// Its own window for the signed timestamp, where a source sets none.
    pub tolerance_secs: Option<u64>,
    pub vector: Vector,
}

/// A signed request as the provider sent it, and what it verifies under.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    /// Where it was published, or that it is pinned and how it was signed.
    pub source: String,
    /// The shared secret, or the provider's public key.
    pub secret: Option<String>,
    pub public_key: Option<String>,
    pub public_url: Option<String>,
    /// The Unix time it verifies at.
    pub now: i64,
    pub headers: BTreeMap<String, String>,
    pub body: String,
    /// The key it yields; absent where the published body holds none.
    pub key: Option<String>,
}

impl Vector {
    pub fn request(&self) -> Inbound {
        let mut headers: Vec<(String, String)> = self
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
            .collect();
        headers.push(("content-type".into(), "application/json".into()));
        Inbound {
            headers,
            body: self.body.clone().into_bytes(),
            ..Default::default()
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    preset: Vec<RawPreset>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPreset {
    name: String,
    title: String,
    key: String,
    key_fallback: Option<String>,
    event_type: String,
    #[serde(default)]
    event_headers: Vec<String>,
    #[serde(default)]
    signature_headers: Vec<String>,
    #[serde(default)]
    credential_fields: Vec<String>,
    tolerance_secs: Option<u64>,
    /// `zoom_url_validation` or `twitch_challenge`: answered by replaysafe.
    handshake: Option<String>,
    signature: RawSignature,
    vector: Vector,
}

static PRESETS: LazyLock<Vec<Preset>> = LazyLock::new(|| {
    // The file is part of the binary and its tests load it: an error here
    // is a build's, never a user's.
    load(include_str!("presets.toml")).unwrap_or_else(|e| panic!("presets.toml: {e}"))
});

/// Every preset, in the file's order.
pub fn all() -> &'static [Preset] {
    &PRESETS
}

pub fn find(name: &str) -> Option<&'static Preset> {
    all().iter().find(|p| p.provider.name == name)
}

/// Names, lists and strings that live as long as the program: the presets
/// are loaded once.
fn forever(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn forever_list(list: Vec<String>) -> &'static [&'static str] {
    Box::leak(
        list.into_iter()
            .map(|s| forever(s.to_ascii_lowercase()))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

fn load(text: &str) -> Result<Vec<Preset>, String> {
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut presets: Vec<Preset> = Vec::new();
    for raw in file.preset {
        let name = raw.name.clone();
        let at = |e: String| format!("preset {name}: {e}");
        if crate::providers::REGISTRY.iter().any(|p| p.name == name)
            || presets.iter().any(|p| p.provider.name == name)
        {
            return Err(at("the name is taken".into()));
        }
        let spec = spec::parse(raw.signature)
            .map_err(|e| at(format!("signature.{}: {}", e.field, e.problem)))?;
        let key = KeyRule::parse(&raw.key, raw.key_fallback.as_deref())
            .map_err(|(k, e)| at(format!("{k}: {e}")))?;
        let event_type = Template::parse(&raw.event_type, Field::of_request)
            .ok()
            .and_then(|t| t.single_field().cloned())
            .ok_or_else(|| at(format!("event_type {:?}: one field", raw.event_type)))?;
        let handshake = match raw.handshake.as_deref() {
            None => None,
            Some("zoom_url_validation") => Some(HandshakeKind::ZoomUrlValidation),
            Some("twitch_challenge") => Some(HandshakeKind::TwitchChallenge),
            Some(other) => {
                return Err(at(format!(
                    "handshake {other:?}: zoom_url_validation or twitch_challenge"
                )))
            }
        };
        let spec = Spec {
            key: Some(key.clone()),
            handshake,
            ..spec
        };
        presets.push(Preset {
            provider: Provider {
                setup: forever(format!(
                    "Where {} asks for a webhook URL, paste the receive URL; the signing secret it shows goes in this source's `secrets`.",
                    raw.title
                )),
                name: forever(raw.name),
                build: super::build,
                event_headers: forever_list(raw.event_headers),
                signature_headers: forever_list(raw.signature_headers),
                credential_fields: forever_list(raw.credential_fields),
                event_type: EventType::Field(event_type),
                reconciler: Reconciler::None(
                    "replaysafe knows no list API of this provider's (a preset of the declarative verifier)",
                ),
                #[cfg(test)]
                contract: None,
            },
            title: forever(raw.title),
            spec,
            key,
            tolerance_secs: raw.tolerance_secs,
            vector: raw.vector,
        });
    }
    Ok(presets)
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;
    use crate::providers::{RejectKind, Scheme, Settings, Window};
    use crate::secret::Secret;

    /// The vector's settings with `key` as its secret or public key.
    fn settings(preset: &Preset, key: &str) -> Settings {
        let public = preset.vector.public_key.is_some();
        Settings {
            secrets: if public {
                vec![]
            } else {
                vec![Secret::new(key)]
            },
            public_key: public.then(|| key.to_owned()),
            signature: Some(preset.spec.clone()),
            public_url: preset.vector.public_url.clone(),
            ..Default::default()
        }
    }

    fn credential(preset: &Preset) -> &str {
        let v = &preset.vector;
        v.secret.as_deref().or(v.public_key.as_deref()).unwrap()
    }

    fn scheme(preset: &Preset, secret: &str) -> Box<dyn Scheme> {
        (preset.provider.build)(&settings(preset, secret))
            .unwrap_or_else(|e| panic!("{}: {e:?}", preset.provider.name))
    }

    /// Copies of the request with one signed byte changed each: the body's
    /// first, middle and last where the body is signed, else one byte of
    /// each signed field.
    fn tampered(preset: &Preset, request: &Inbound) -> Vec<Inbound> {
        let mut out = Vec::new();
        let payload: Vec<&Field> = preset.spec.payload.fields().collect();
        if payload.contains(&&Field::Body) {
            let last = request.body.len() - 1;
            for at in [0, last / 2, last] {
                let mut copy = request.clone();
                copy.body[at] ^= 1;
                out.push(copy);
            }
        }
        // A signed value carried in a header: the id, a named header, a
        // timestamp header (one second later, still in the window).
        let header_changed = |name: &str, change: &dyn Fn(&str) -> String| {
            let mut copy = request.clone();
            for (n, v) in copy.headers.iter_mut() {
                if n.eq_ignore_ascii_case(name) {
                    *v = change(v);
                }
            }
            assert_ne!(copy.headers, request.headers, "{name} is in the vector");
            copy
        };
        for field in payload {
            match field {
                Field::Pointer(p) => {
                    let mut json: serde_json::Value =
                        serde_json::from_slice(&request.body).unwrap();
                    let value = json.pointer_mut(p).unwrap();
                    *value = format!("{}x", value.as_str().unwrap()).into();
                    let mut copy = request.clone();
                    copy.body = serde_json::to_vec(&json).unwrap();
                    out.push(copy);
                }
                Field::Id => {
                    let id = preset.spec.id_header.as_deref().unwrap();
                    out.push(header_changed(id, &|v| format!("{v}x")));
                }
                Field::Header(h) => out.push(header_changed(h, &|v| format!("{v}x"))),
                Field::Timestamp => {
                    if let Some(super::super::TimestampAt::Header(h)) = &preset.spec.timestamp {
                        out.push(header_changed(h, &|v| match v.parse::<i64>() {
                            Ok(n) => (n + 1).to_string(),
                            // RFC 3339: another instant in the same second.
                            Err(_) => v.replacen('.', ".9", 1),
                        }));
                    }
                }
                _ => {}
            }
        }
        assert!(!out.is_empty(), "{}: nothing signed", preset.provider.name);
        out
    }

    /// The contract every provider keeps, walked over the presets: the
    /// vector verifies and yields its key; any signed byte changed, another
    /// secret or a stale timestamp is refused 401; its own sample verifies,
    /// one key per event; no seeded random input panics.
    #[test]
    fn every_preset_keeps_the_contract() {
        assert_eq!(all().len(), 15);
        for preset in all() {
            let name = preset.provider.name;
            let scheme = scheme(preset, credential(preset));
            let request = preset.vector.request();
            let now = preset.vector.now;
            let window = |now| {
                Some(Window {
                    now,
                    tolerance: preset.tolerance_secs.unwrap_or(300) as i64,
                })
            };
            let verified = scheme.verify(&request, window(now));
            assert!(verified.is_ok(), "{name}: the vector: {verified:?}");
            if let Some(key) = &preset.vector.key {
                assert_eq!(&preset.key.key(&request, 512).unwrap().0, key, "{name}");
                assert_eq!(&scheme.key(&request).unwrap(), key, "{name}");
            }
            for copy in tampered(preset, &request) {
                let verdict = scheme.verify(&copy, window(now));
                assert_eq!(verdict.map_err(|r| r.status), Err(401), "{name}");
            }
            let wrong = scheme_with_other_secret(preset);
            assert_eq!(
                wrong.verify(&request, window(now)).map_err(|r| r.status),
                Err(401),
                "{name}: another secret"
            );
            if preset.spec.timestamp.is_some() {
                let late = scheme.verify(&request, window(now + 3600)).unwrap_err();
                assert_eq!(late.kind, RejectKind::Timestamp, "{name}");
            }
            if preset.vector.public_key.is_some() {
                // Signed with the provider's private key: no sample.
                assert!(scheme.sign_sample("evt_contract_1", now).is_err(), "{name}");
                continue;
            }
            let sample = |id: &str| {
                let signed = scheme
                    .sign_sample(id, now)
                    .unwrap_or_else(|e| panic!("{name}: sample: {e}"));
                signed.into_request()
            };
            let (one, two) = (sample("evt_contract_1"), sample("evt_contract_2"));
            for s in [&one, &two] {
                let verdict = scheme.verify(s, window(now));
                assert!(verdict.is_ok(), "{name}: its own sample: {verdict:?}");
            }
            let key = |r: &Inbound| preset.key.key(r, 512).unwrap();
            assert!(
                key(&one).1.is_none(),
                "{name}: the sample is keyed by its fields"
            );
            assert_ne!(key(&one).0, key(&two).0, "{name}: one key per event");
            assert_eq!(key(&one).0, key(&sample("evt_contract_1")).0, "{name}");
        }
    }

    fn scheme_with_other_secret(preset: &Preset) -> Box<dyn Scheme> {
        let key = credential(preset);
        let other = if preset.vector.public_key.is_some() {
            // Another P-256 key, made with openssl for this test.
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENxInvkV064jHQEK1ygbkMmq0RrvoI3tKPvVMf11YYi2cXxew/1fznNG5Fc/slrlcGcGfQKJKe6W77Y+XMDhLSg==".to_owned()
        } else if key.starts_with("whsec_") {
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSx".to_owned()
        } else {
            format!("{key}-not")
        };
        scheme(preset, &other)
    }

    #[test]
    fn no_input_panics_or_passes_any_preset() {
        use crate::providers::contract::Garbage;
        for preset in all() {
            let scheme = scheme(preset, credential(preset));
            let vector = preset.vector.request();
            let pieces: Vec<String> = preset.vector.headers.values().cloned().collect();
            let mut garbage = Garbage::new(&pieces);
            for _ in 0..300 {
                let mut request = vector.clone();
                for header in request.headers.iter_mut() {
                    if garbage.rng.gen_bool(0.4) {
                        header.1 = garbage.text();
                    }
                }
                if garbage.rng.gen_bool(0.5) {
                    let at = garbage.rng.gen_range(0..=request.body.len());
                    let inserted = garbage.bytes();
                    request.body.splice(at..at, inserted);
                }
                let now = if garbage.rng.gen_bool(0.5) {
                    preset.vector.now
                } else {
                    garbage.rng.gen_range(i64::MIN..i64::MAX)
                };
                let verdict = scheme.verify(
                    &request,
                    Some(Window {
                        now,
                        tolerance: 300,
                    }),
                );
                let _ = scheme.key(&request);
                let _ = preset.key.key(&request, 512);
                let _ = scheme.replay_content(&request);
                let _ = scheme.signed_content(&request);
                let _ = preset.provider.event_type(&request);
                let signed_body = preset.spec.payload.fields().any(|f| *f == Field::Body);
                assert!(
                    verdict.is_err() || !signed_body || request.body == vector.body,
                    "{} (CONTRACT_SEED={}) accepted a changed body",
                    preset.provider.name,
                    garbage.seed
                );
            }
        }
    }

    /// The providers' own packages (server/tests/sdk/presets.mjs) accept
    /// what replaysafe signs as each preset, and refuse it with a byte
    /// changed; what Svix's package and a SendGrid-style ECDSA signer sign,
    /// replaysafe verifies.
    #[test]
    fn official_packages_agree_with_the_presets() {
        use crate::providers::contract::signer::sdk_sign;
        // The packages check the clock (Paddle allows five seconds): signed
        // at now, checked at once.
        let now = chrono::Utc::now().timestamp();
        let mut requests = Vec::new();
        let mut expected = Vec::new();
        for name in [
            "paddle", "square", "linear", "hubspot", "svix", "clerk", "resend",
        ] {
            let preset = find(name).unwrap();
            let scheme = scheme(preset, credential(preset));
            let mut request = scheme.sign_sample("evt_sdk_1", now).unwrap().into_request();
            for tamper in [false, true] {
                if tamper {
                    let at = request.body.len() / 2;
                    request.body[at] ^= 1;
                }
                let headers: serde_json::Map<String, serde_json::Value> = request
                    .headers
                    .iter()
                    .map(|(n, v)| (n.clone(), v.clone().into()))
                    .collect();
                requests.push(serde_json::json!({
                    "op": "verify", "provider": name, "secret": credential(preset),
                    "headers": headers, "body": String::from_utf8_lossy(&request.body),
                    "url": preset.vector.public_url, "timestamp": now,
                }));
                expected.push((name, !tamper));
            }
        }
        let answers = sdk_sign("presets.mjs", requests.into());
        assert_eq!(answers.len(), expected.len());
        for (answer, (name, valid)) in answers.iter().zip(expected) {
            assert_eq!(answer["valid"], valid, "{name}: {answer}");
        }

        let body = r#"{"type":"user.created","data":{"id":"u1"}}"#;
        let signed = sdk_sign(
            "presets.mjs",
            serde_json::json!([
                {"op": "sign", "provider": "svix", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                 "body": body, "timestamp": now, "id": "msg_sdk_1"},
                {"op": "sign", "provider": "sendgrid", "body": format!("[{body}]\r\n"), "timestamp": now},
            ]),
        );
        for (name, answer) in ["svix", "sendgrid"].into_iter().zip(&signed) {
            let preset = find(name).unwrap();
            let key = answer["public_key"].as_str().unwrap_or(credential(preset));
            let scheme = scheme(preset, key);
            let request = Inbound {
                headers: answer["headers"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(n, v)| (n.to_ascii_lowercase(), v.as_str().unwrap().to_owned()))
                    .collect(),
                body: answer["body"].as_str().unwrap().as_bytes().to_vec(),
                ..Default::default()
            };
            let window = Some(Window {
                now,
                tolerance: 300,
            });
            let verdict = scheme.verify(&request, window);
            assert!(verdict.is_ok(), "{name}: {verdict:?}");
        }
    }

    /// The id is signed as sent and keyed as sent: a captured Svix request
    /// whose id is padded (a no-break space, which a trim would drop) no
    /// longer verifies, so it cannot come back under a new key.
    #[test]
    fn a_padded_id_is_no_longer_the_signed_one() {
        let preset = find("svix").unwrap();
        let scheme = scheme(preset, credential(preset));
        let window = Some(Window {
            now: preset.vector.now,
            tolerance: 300,
        });
        let mut request = preset.vector.request();
        assert!(scheme.verify(&request, window).is_ok());
        for (name, value) in request.headers.iter_mut() {
            if name == "svix-id" {
                value.push('\u{a0}');
            }
        }
        assert_eq!(
            scheme.verify(&request, window).map_err(|r| r.status),
            Err(401)
        );
    }

    #[test]
    fn event_types_are_read_where_each_preset_says() {
        for (name, want) in [
            ("paddle", None),
            ("square", Some("webhooks.test_notification")),
            ("twitch", Some("channel.follow")),
            ("mailgun", Some("delivered")),
            ("lemonsqueezy", Some("order_created")),
        ] {
            let preset = find(name).unwrap();
            let got = preset.provider.event_type(&preset.vector.request());
            assert_eq!(got.as_deref(), want, "{name}");
        }
    }

    #[test]
    fn a_broken_entry_is_refused_naming_it() {
        let entry = |extra: &str| {
            format!(
                "[[preset]]\nname = \"acme\"\ntitle = \"Acme\"\nkey = \"{{/id}}\"\nevent_type = \"{{/type}}\"\n{extra}\n[preset.signature]\nheader = \"x\"\nalgorithm = \"hmac-sha256\"\n[preset.vector]\nsource = \"s\"\nsecret = \"s\"\nnow = 1\nheaders = {{}}\nbody = \"{{}}\"\n"
            )
        };
        assert!(load(&entry("")).is_ok());
        for (extra, names) in [
            ("nope = 1", "nope"),
            ("key_fallback = \"random\"", "key_fallback"),
        ] {
            let error = load(&entry(extra)).err().unwrap_or_default();
            assert!(error.contains(names), "{extra}: {error}");
        }
        let taken = entry("").replace("\"acme\"", "\"stripe\"");
        assert!(load(&taken).err().unwrap_or_default().contains("taken"));
        let two_fields = entry("").replace("\"{/type}\"", "\"{/a}:{/b}\"");
        assert!(load(&two_fields)
            .err()
            .unwrap_or_default()
            .contains("event_type"));
    }
}
