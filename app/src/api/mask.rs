//! Credentials inside stored requests, masked for everyone but an admin who
//! asks: Slack's `token` and `response_url` and Discord's interaction
//! `token` let whoever reads them act as the app; query strings carry keys;
//! signature headers were checked already and are not needed on screen.

use serde::{Deserialize, Serialize};

/// What a source's provider puts credentials in, beside the generic ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// Body fields (JSON keys at any depth, form parameters), lowercase.
    pub fields: Vec<String>,
    /// Signature headers, lowercase.
    pub headers: Vec<String>,
}

pub const MASKED: &str = "[masked]";

/// Fields that are credentials whoever sends them.
const ANY_PROVIDER_FIELDS: &[&str] = &[
    "password",
    "secret",
    "client_secret",
    "access_token",
    "refresh_token",
    "api_key",
    "apikey",
];

/// Query parameter names holding any of these are masked.
const QUERY_WORDS: &[&str] = &["token", "key", "secret", "password", "sig", "auth"];

#[cfg(feature = "ssr")]
impl Credentials {
    fn is_field(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        ANY_PROVIDER_FIELDS.contains(&name.as_str()) || self.fields.contains(&name)
    }

    /// The body with credential fields masked, or None when it holds none.
    pub fn body(&self, body: &[u8]) -> Option<Vec<u8>> {
        if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) {
            return self
                .json(&mut value)
                .then(|| serde_json::to_vec(&value).unwrap_or_default());
        }
        let text = std::str::from_utf8(body).ok()?;
        if !text.contains('=') {
            return None;
        }
        let mut changed = false;
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (name, value) in form_urlencoded::parse(text.as_bytes()) {
            if self.is_field(&name) {
                changed = true;
                out.append_pair(&name, MASKED);
                continue;
            }
            // Slack's interactivity posts its JSON in a `payload` parameter.
            let masked_json = serde_json::from_str::<serde_json::Value>(&value)
                .ok()
                .filter(serde_json::Value::is_object)
                .and_then(|mut inner| self.json(&mut inner).then(|| inner.to_string()));
            match masked_json {
                Some(inner) => {
                    changed = true;
                    out.append_pair(&name, &inner);
                }
                None => {
                    out.append_pair(&name, &value);
                }
            }
        }
        changed.then(|| out.finish().into_bytes())
    }

    fn json(&self, value: &mut serde_json::Value) -> bool {
        let mut changed = false;
        match value {
            serde_json::Value::Object(map) => {
                for (name, inner) in map.iter_mut() {
                    if self.is_field(name) && (inner.is_string() || inner.is_number()) {
                        *inner = serde_json::Value::String(MASKED.into());
                        changed = true;
                    } else {
                        changed |= self.json(inner);
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for inner in items {
                    changed |= self.json(inner);
                }
            }
            _ => {}
        }
        changed
    }

    /// Signature headers' values replaced.
    pub fn headers(&self, headers: &mut [(String, String)]) -> bool {
        let mut changed = false;
        for (name, value) in headers.iter_mut() {
            if self.headers.contains(&name.to_ascii_lowercase()) {
                *value = format!(
                    "[signature, {} characters, verified on receipt]",
                    value.len()
                );
                changed = true;
            }
        }
        changed
    }
}

/// The query with parameters named like credentials masked, or None.
#[cfg(feature = "ssr")]
pub fn query(query: &str) -> Option<String> {
    let mut changed = false;
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let lower = name.to_ascii_lowercase();
        if QUERY_WORDS.iter().any(|w| lower.contains(w)) {
            changed = true;
            out.append_pair(&name, MASKED);
        } else {
            out.append_pair(&name, &value);
        }
    }
    changed.then(|| out.finish())
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    fn slack() -> Credentials {
        Credentials {
            fields: vec!["token".into(), "response_url".into()],
            headers: vec!["x-slack-signature".into()],
        }
    }

    #[test]
    fn json_fields_are_masked_at_any_depth_and_the_rest_kept() {
        let body = br#"{"token":"xoxb-1","event":{"type":"message","response_url":"https://hooks.slack.com/x"},"n":[{"password":"p"}]}"#;
        let masked: serde_json::Value =
            serde_json::from_slice(&slack().body(body).unwrap()).unwrap();
        assert_eq!(
            masked,
            serde_json::json!({"token": MASKED, "event": {"type": "message", "response_url": MASKED}, "n": [{"password": MASKED}]})
        );
        assert_eq!(slack().body(br#"{"type":"ping"}"#), None);
    }

    #[test]
    fn form_parameters_and_json_inside_them_are_masked() {
        let payload =
            r#"{"type":"block_actions","token":"abc","response_url":"https://hooks.slack.com/y"}"#;
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", payload)
            .append_pair("team", "T1")
            .finish();
        let masked = String::from_utf8(slack().body(body.as_bytes()).unwrap()).unwrap();
        let pairs: Vec<(String, String)> = form_urlencoded::parse(masked.as_bytes())
            .into_owned()
            .collect();
        assert_eq!(pairs[1], ("team".into(), "T1".into()));
        let inner: serde_json::Value = serde_json::from_str(&pairs[0].1).unwrap();
        assert_eq!(inner["token"], MASKED);
        assert_eq!(inner["response_url"], MASKED);
        assert_eq!(inner["type"], "block_actions");
        let command = slack()
            .body(b"token=abc&command=%2Fdeploy&response_url=https%3A%2F%2Fx")
            .unwrap();
        assert_eq!(
            String::from_utf8(command).unwrap(),
            "token=%5Bmasked%5D&command=%2Fdeploy&response_url=%5Bmasked%5D"
        );
    }

    #[test]
    fn query_keys_and_signature_headers_are_masked() {
        assert_eq!(
            query("bodySHA256=abc&api_key=k&page=2").as_deref(),
            Some("bodySHA256=abc&api_key=%5Bmasked%5D&page=2")
        );
        assert_eq!(query("page=2"), None);
        let mut headers = vec![
            ("X-Slack-Signature".to_owned(), "v0=abcd".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
        ];
        assert!(slack().headers(&mut headers));
        assert!(headers[0].1.starts_with("[signature, 7 characters"));
        assert_eq!(headers[1].1, "application/json");
    }
}
