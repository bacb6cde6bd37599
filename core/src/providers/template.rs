//! Templates over a request's fields (spec section 10): `{/json/pointer}`
//! into the body, `{header:Name}`, `{form:name}`, and, for what a signature
//! covers, `{body}`, `{timestamp}`, `{id}`, `{method}` and `{url}`. `{{`
//! and `}}` stand for braces. Parsed once at start; rendering reads the body
//! as JSON or as a form only when a field asks for it.

use std::borrow::Cow;
use std::cell::OnceCell;

use super::{form_pairs, sha256_hex, Inbound, Rejection};

/// One field a template reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// A JSON pointer into the body (RFC 6901): its string, number or
    /// boolean.
    Pointer(String),
    /// A header's first value, by case-insensitive name.
    Header(String),
    /// A form field's first value (`application/x-www-form-urlencoded`).
    Form(String),
    Body,
    Timestamp,
    Id,
    Method,
    Url,
}

impl Field {
    /// Whether it is read from the request itself (what a key may use).
    pub fn of_request(&self) -> bool {
        matches!(self, Field::Pointer(_) | Field::Header(_) | Field::Form(_))
    }
}

#[derive(Clone, Debug)]
enum Part {
    Text(String),
    Field(Field),
}

/// A parsed template.
#[derive(Clone, Debug)]
pub struct Template {
    parts: Vec<Part>,
    /// As written, for messages.
    text: String,
}

impl Template {
    /// Parses `text`; a field outside `allowed` is refused, named.
    pub fn parse(text: &str, allowed: impl Fn(&Field) -> bool) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if let Some(after) = rest.strip_prefix("{{") {
                literal.push('{');
                rest = after;
            } else if let Some(after) = rest.strip_prefix("}}") {
                literal.push('}');
                rest = after;
            } else if c == '}' {
                return Err(format!("{text:?}: a lone '}}' (write '}}}}' for a brace)"));
            } else if c == '{' {
                let end = rest
                    .find('}')
                    .ok_or_else(|| format!("{text:?}: a '{{' is not closed"))?;
                let field = field(&rest[1..end]).map_err(|e| format!("{text:?}: {e}"))?;
                if !allowed(&field) {
                    return Err(format!(
                        "{text:?}: {{{}}} cannot be used here",
                        &rest[1..end]
                    ));
                }
                if !literal.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut literal)));
                }
                parts.push(Part::Field(field));
                rest = &rest[end + 1..];
            } else {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        if !parts.iter().any(|p| matches!(p, Part::Field(_))) {
            return Err(format!("{text:?} reads no field: every event would get it"));
        }
        Ok(Self {
            parts,
            text: text.to_owned(),
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn fields(&self) -> impl Iterator<Item = &Field> {
        self.parts.iter().filter_map(|p| match p {
            Part::Field(f) => Some(f),
            Part::Text(_) => None,
        })
    }

    /// Renders it with `value` for each field; the first field without a
    /// value (or with an empty one) is the error, as written.
    pub fn render<'a>(
        &self,
        mut value: impl FnMut(&Field) -> Option<Cow<'a, [u8]>>,
    ) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                Part::Field(f) => match value(f) {
                    Some(v) if !v.is_empty() => out.extend_from_slice(&v),
                    _ => return Err(written(f)),
                },
            }
        }
        Ok(out)
    }
}

fn field(inside: &str) -> Result<Field, String> {
    let named = |prefix: &str| inside.strip_prefix(prefix).map(str::trim);
    Ok(match inside {
        "body" => Field::Body,
        "timestamp" => Field::Timestamp,
        "id" => Field::Id,
        "method" => Field::Method,
        "url" => Field::Url,
        p if p.starts_with('/') => Field::Pointer(p.to_owned()),
        _ => match (named("header:"), named("form:")) {
            (Some(h), _) if !h.is_empty() && h.bytes().all(is_token_byte) => {
                Field::Header(h.to_ascii_lowercase())
            }
            (Some(h), _) => return Err(format!("{h:?} is not a header name")),
            (_, Some(f)) if !f.is_empty() => Field::Form(f.to_owned()),
            _ => {
                return Err(format!(
                    "{{{inside}}} is not a field: use {{/json/pointer}}, {{header:Name}} or {{form:name}}"
                ))
            }
        },
    })
}

/// RFC 9110's token characters.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A field as a template writes it.
fn written(f: &Field) -> String {
    match f {
        Field::Pointer(p) => format!("{{{p}}}"),
        Field::Header(h) => format!("{{header:{h}}}"),
        Field::Form(n) => format!("{{form:{n}}}"),
        Field::Body => "{body}".into(),
        Field::Timestamp => "{timestamp}".into(),
        Field::Id => "{id}".into(),
        Field::Method => "{method}".into(),
        Field::Url => "{url}".into(),
    }
}

/// A request's fields as templates read them: the body parsed as JSON, or
/// split as a form, once and only if asked.
pub struct RequestFields<'a> {
    req: &'a Inbound,
    json: OnceCell<Option<serde_json::Value>>,
    form: OnceCell<Vec<(Vec<u8>, Vec<u8>)>>,
}

impl<'a> RequestFields<'a> {
    pub fn new(req: &'a Inbound) -> Self {
        Self {
            req,
            json: OnceCell::new(),
            form: OnceCell::new(),
        }
    }

    /// A field read from the request (None for the others: the caller
    /// gives those).
    pub fn get(&self, field: &Field) -> Option<Cow<'a, [u8]>> {
        match field {
            Field::Header(h) => self.req.header(h).map(|v| Cow::Borrowed(v.as_bytes())),
            Field::Pointer(p) => {
                let json = self
                    .json
                    .get_or_init(|| serde_json::from_slice(&self.req.body).ok());
                match json.as_ref()?.pointer(p)? {
                    serde_json::Value::String(s) => Some(Cow::Owned(s.clone().into_bytes())),
                    n @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => {
                        Some(Cow::Owned(n.to_string().into_bytes()))
                    }
                    _ => None,
                }
            }
            Field::Form(name) => {
                let pairs = self.form.get_or_init(|| form_pairs(&self.req.body));
                pairs
                    .iter()
                    .find(|(n, _)| n == name.as_bytes())
                    .map(|(_, v)| Cow::Owned(v.clone()))
            }
            Field::Body => Some(Cow::Borrowed(&self.req.body)),
            Field::Timestamp | Field::Id | Field::Method | Field::Url => None,
        }
    }
}

/// A source's `key` (any provider's key replaced by a template of the
/// request's fields), and what to do when a field is missing.
#[derive(Clone, Debug)]
pub struct KeyRule {
    pub template: Template,
    /// `key_fallback = "digest"`: a delivery whose fields are missing is
    /// keyed by a SHA-256 of its raw body (never of anything that changes
    /// per send), and its record says so.
    pub digest_fallback: bool,
}

impl KeyRule {
    /// Parses a `key` template: only the request's own fields.
    pub fn parse(text: &str, fallback: Option<&str>) -> Result<Self, (&'static str, String)> {
        let template = Template::parse(text, Field::of_request).map_err(|e| ("key", e))?;
        let digest_fallback = match fallback {
            None => false,
            Some("digest") => true,
            Some(other) => {
                return Err((
                    "key_fallback",
                    format!("{other:?}: the one fallback is \"digest\""),
                ))
            }
        };
        Ok(Self {
            template,
            digest_fallback,
        })
    }

    /// The key of `req`, and a note for its record when it was not the
    /// template's.
    pub fn key(&self, req: &Inbound) -> Result<(String, Option<String>), Rejection> {
        let fields = RequestFields::new(req);
        let rendered = self
            .template
            .render(|f| fields.get(f))
            .and_then(|k| String::from_utf8(k).map_err(|_| "a value that is not UTF-8".into()));
        match rendered {
            Ok(key) => Ok((key, None)),
            Err(missing) if self.digest_fallback => Ok((
                format!("sha256:{}", sha256_hex(&[&req.body])),
                Some(format!(
                    "keyed by a SHA-256 of the body: key {} lacks {missing}",
                    self.template.as_str()
                )),
            )),
            Err(missing) => Err(Rejection::key(format!(
                "key {} lacks {missing}",
                self.template.as_str()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> Inbound {
        Inbound {
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-event-id".into(), "ev-9".into()),
            ],
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn a_composed_key_reads_pointers_headers_and_forms() {
        let rule = KeyRule::parse("{/data/id}:{/type}:{header:X-Event-Id}", None).unwrap();
        let req = json(r#"{"type":"order.paid","data":{"id":42}}"#);
        assert_eq!(rule.key(&req).unwrap(), ("42:order.paid:ev-9".into(), None));
        let form = KeyRule::parse("notify:{form:notify_id}", None).unwrap();
        let req = Inbound {
            body: b"a=1&notify_id=n%2B1&notify_id=second".to_vec(),
            ..Default::default()
        };
        assert_eq!(form.key(&req).unwrap().0, "notify:n+1");
    }

    #[test]
    fn a_missing_field_is_a_400_or_the_bodys_digest() {
        let req = json(r#"{"type":"order.paid","data":{"id":null}}"#);
        let strict = KeyRule::parse("{/data/id}:{/type}", None).unwrap();
        let refused = strict.key(&req).unwrap_err();
        assert_eq!(refused.status, 400);
        assert!(refused.reason.contains("{/data/id}"), "{}", refused.reason);
        let lenient = KeyRule::parse("{/data/id}", Some("digest")).unwrap();
        let (key, note) = lenient.key(&req).unwrap();
        assert_eq!(key, format!("sha256:{}", sha256_hex(&[&req.body])));
        assert!(note.unwrap().contains("SHA-256"));
        // The same body, the same key: a retry is a duplicate.
        assert_eq!(lenient.key(&req.clone()).unwrap().0, key);
        // Not JSON at all: missing too, never a panic.
        assert!(strict.key(&json("\u{0}{{")).is_err());
    }

    #[test]
    fn templates_that_cannot_work_are_refused_at_start() {
        for bad in [
            "constant",
            "{nope}",
            "{/a",
            "x}",
            "{header:}",
            "{header:bad name}",
            "{form:}",
            "{body}",
            "{timestamp}",
        ] {
            assert!(KeyRule::parse(bad, None).is_err(), "{bad}");
        }
        assert!(KeyRule::parse("{/id}", Some("random")).is_err());
        let braces = KeyRule::parse("{{{/id}}}", None).unwrap();
        assert_eq!(braces.key(&json(r#"{"id":"a"}"#)).unwrap().0, "{a}");
    }

    #[test]
    fn payload_templates_take_the_signature_fields() {
        let t = Template::parse("{timestamp}.{body}", |_| true).unwrap();
        let req = json("{}");
        let fields = RequestFields::new(&req);
        let out = t
            .render(|f| match f {
                Field::Timestamp => Some(Cow::Borrowed(b"17".as_slice())),
                f => fields.get(f),
            })
            .unwrap();
        assert_eq!(out, b"17.{}");
    }
}
