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

impl Credentials {
    /// Where `source`'s provider puts credentials (a source no longer
    /// configured: every provider's).
    pub fn of(config: &crate::config::Config, source: &str) -> Self {
        let configured = config.source(source);
        let provider = configured.map(|s| s.provider);
        // A source no longer configured: every provider's. Only the
        // signatures themselves (not Slack's timestamp, WeChat's serial).
        let signature_headers: Vec<&str> = match provider {
            Some(p) => p.signature_headers.to_vec(),
            None => crate::providers::REGISTRY
                .iter()
                .flat_map(|p| p.signature_headers.iter().copied())
                .collect(),
        };
        let fields: Vec<&str> = match provider {
            Some(p) => p.credential_fields.to_vec(),
            None => crate::providers::REGISTRY
                .iter()
                .flat_map(|p| p.credential_fields.iter().copied())
                .collect(),
        };
        // The header a declarative source names holds its signature, named
        // however its provider names it.
        let declared = configured.and_then(|s| s.scheme.signature_header());
        Credentials {
            fields: fields.into_iter().map(str::to_owned).collect(),
            headers: signature_headers
                .into_iter()
                .filter(|h| h.contains("signature") || h.contains("hmac"))
                .chain(declared)
                .map(str::to_owned)
                .collect(),
        }
    }

    fn is_field(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        ANY_PROVIDER_FIELDS.contains(&name.as_str()) || self.fields.contains(&name)
    }

    /// The body with credential fields masked, or None when it holds none.
    /// JSON and forms are masked field by field; text that parses as neither
    /// (an excerpt cut mid-JSON) by the fields' `"name": "value"` pattern.
    pub fn body(&self, body: &[u8]) -> Option<Vec<u8>> {
        if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) {
            return self
                .json(&mut value)
                .then(|| serde_json::to_vec(&value).unwrap_or_default());
        }
        let text = String::from_utf8_lossy(body);
        let trimmed = text.trim_start();
        if !text.contains('=') || trimmed.starts_with('{') || trimmed.starts_with('[') {
            return self.text(&text).map(String::into_bytes);
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
            let masked = match serde_json::from_str::<serde_json::Value>(&value) {
                Ok(mut inner) if inner.is_object() => {
                    self.json(&mut inner).then(|| inner.to_string())
                }
                _ => self.text(&value),
            };
            match masked {
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

    /// Text that is not whole JSON: each `"field": "value"` of a credential
    /// field has its value masked, up to its closing quote or the text's end.
    /// Strings are read whole (escapes included), so quotes inside values
    /// cannot shift what is read as a name.
    fn text(&self, text: &str) -> Option<String> {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        let mut changed = false;
        while let Some(open) = text[at..].find('"').map(|i| at + i) {
            let name_end = open + 1 + string_end(&text[open + 1..]);
            let name = &text[open + 1..name_end];
            let after_name = (name_end + 1).min(text.len());
            let rest = &text[after_name..];
            let value_open = rest
                .trim_start()
                .strip_prefix(':')
                .map(str::trim_start)
                .filter(|v| v.starts_with('"'))
                .map(|v| after_name + rest.len() - v.len());
            match value_open {
                Some(value_open) if self.is_field(name) => {
                    let value_end = value_open + 1 + string_end(&text[value_open + 1..]);
                    out.push_str(&text[at..=value_open]);
                    out.push_str(MASKED);
                    changed = true;
                    at = value_end;
                    if at < text.len() {
                        out.push('"');
                        at += 1;
                    }
                }
                _ => {
                    out.push_str(&text[at..after_name]);
                    at = after_name;
                }
            }
            if at >= text.len() {
                break;
            }
        }
        out.push_str(&text[at.min(text.len())..]);
        changed.then_some(out)
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

/// Where a JSON string's text ends: its closing quote, or the end of a cut text.
fn string_end(quoted: &str) -> usize {
    let mut escaped = false;
    for (i, c) in quoted.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return i,
            _ => {}
        }
    }
    quoted.len()
}

/// The query with parameters named like credentials masked, or None.
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

#[cfg(test)]
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
    fn an_excerpt_cut_mid_json_is_masked_by_pattern() {
        let cut = br#"{"token": "xoxb-secret-1", "event": {"text": "say \"hi\"", "response_url":"https://hooks.slack.com/cut-he"#;
        let masked = String::from_utf8(slack().body(cut).unwrap()).unwrap();
        assert!(
            !masked.contains("xoxb-secret-1") && !masked.contains("hooks.slack.com"),
            "{masked}"
        );
        assert!(masked.contains(r#""text": "say \"hi\"""#), "{masked}");
        let form_cut = "payload=%7B%22token%22%3A%22abc123%22%2C%22type%22%3A%22block";
        let masked = String::from_utf8(slack().body(form_cut.as_bytes()).unwrap()).unwrap();
        let value = form_urlencoded::parse(masked.as_bytes())
            .next()
            .unwrap()
            .1
            .into_owned();
        assert_eq!(value, r#"{"token":"[masked]","type":"block"#);
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

#[cfg(test)]
mod declared {
    use super::Credentials;

    /// A declared source's signature header is masked as a provider's own,
    /// whatever it is called.
    #[test]
    fn a_declared_sources_signature_header_is_masked() {
        let config = crate::config::parse_and_validate(
            None,
            "[[source]]\nslug = \"acme\"\nprovider = \"hmac\"\nsecrets = [\"s\"]\nkey = \"{/id}\"\n[source.signature]\nheader = \"X-Acme-Auth\"\nalgorithm = \"hmac-sha256\"\n",
            &|_| None,
        )
        .unwrap();
        let credentials = Credentials::of(&config, "acme");
        assert_eq!(credentials.headers, ["x-acme-auth"]);
        let mut headers = vec![("X-Acme-Auth".to_owned(), "abcdef".to_owned())];
        assert!(credentials.headers(&mut headers));
        assert!(headers[0].1.starts_with("[signature"), "{headers:?}");
    }
}
