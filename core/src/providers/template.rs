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
    /// The SHA-256 of the raw body, in hex: for a provider that sends no
    /// event id, with stable fields or alone (a retry of the same bytes).
    BodySha256,
    Body,
    Timestamp,
    Id,
    Method,
    Url,
}

impl Field {
    /// Whether it is read from the request itself (what a key may use).
    pub fn of_request(&self) -> bool {
        matches!(
            self,
            Field::Pointer(_) | Field::Header(_) | Field::Form(_) | Field::BodySha256
        )
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

    /// The field, where the template is that one field and nothing else.
    pub fn single_field(&self) -> Option<&Field> {
        match self.parts.as_slice() {
            [Part::Field(f)] => Some(f),
            _ => None,
        }
    }

    pub fn fields(&self) -> impl Iterator<Item = &Field> {
        self.parts.iter().filter_map(|p| match p {
            Part::Field(f) => Some(f),
            Part::Text(_) => None,
        })
    }

    /// Pairs of fields with no text between them: where one value ends
    /// and the next begins cannot be told.
    pub fn adjacent(&self) -> impl Iterator<Item = (&Field, &Field)> {
        self.parts.windows(2).filter_map(|w| match w {
            [Part::Field(a), Part::Field(b)] => Some((a, b)),
            _ => None,
        })
    }

    /// Renders it with `value` for each field. A signed payload's split must
    /// be the sender's: a value holding the text that follows it (where a
    /// captured request could move bytes from one field to the next) is
    /// refused. A key's values but the last are escaped instead: `%` and
    /// every character of the template's own text become `%XX`, so two keys
    /// are equal only when their values are (the last value ends the key:
    /// it needs no escaping, and a one-field key is its value).
    pub fn render<'a>(
        &self,
        use_: Use,
        mut value: impl FnMut(&Field) -> Option<Cow<'a, [u8]>>,
    ) -> Result<Vec<u8>, Unrendered> {
        let mut out = Vec::new();
        let last_field = self.parts.iter().rposition(|p| matches!(p, Part::Field(_)));
        for (i, part) in self.parts.iter().enumerate() {
            match part {
                Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                Part::Field(f) => {
                    let v = match value(f) {
                        Some(v) if !v.is_empty() => v,
                        _ => return Err(Unrendered::Missing(written(f))),
                    };
                    match use_ {
                        Use::Signed => {
                            if let (Some(Part::Text(next)), Some(Part::Field(_))) =
                                (self.parts.get(i + 1), self.parts.get(i + 2))
                            {
                                if !splits_at_end(&v, next.as_bytes()) {
                                    return Err(Unrendered::Ambiguous(written(f), next.clone()));
                                }
                            }
                            out.extend_from_slice(&v);
                        }
                        Use::Key if Some(i) == last_field => out.extend_from_slice(&v),
                        Use::Key => self.escape_into(&v, &mut out),
                    }
                }
            }
        }
        Ok(out)
    }

    fn escape_into(&self, value: &[u8], out: &mut Vec<u8>) {
        let special = |b: u8| {
            b == b'%'
                || self.parts.iter().any(|p| match p {
                    Part::Text(t) => t.as_bytes().contains(&b),
                    Part::Field(_) => false,
                })
        };
        for &b in value {
            if special(b) {
                out.extend_from_slice(format!("%{b:02X}").as_bytes());
            } else {
                out.push(b);
            }
        }
    }
}

/// What a template renders: a signed payload, or a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    Signed,
    Key,
}

/// Why a template did not render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unrendered {
    /// The field, as written, has no value (or an empty one).
    Missing(String),
    /// The field's value holds the text that follows it.
    Ambiguous(String, String),
}

impl std::fmt::Display for Unrendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unrendered::Missing(field) => f.write_str(field),
            Unrendered::Ambiguous(field, next) => {
                write!(f, "{field} whose value holds {next:?}, the text after it")
            }
        }
    }
}

/// Whether `separator` first occurs in `value + separator` where the value
/// ends: the reader's split is then the sender's.
fn splits_at_end(value: &[u8], separator: &[u8]) -> bool {
    let joined = [value, separator].concat();
    joined.windows(separator.len()).position(|w| w == separator) == Some(value.len())
}

fn field(inside: &str) -> Result<Field, String> {
    let named = |prefix: &str| inside.strip_prefix(prefix).map(str::trim);
    Ok(match inside {
        "body" => Field::Body,
        "body_sha256" => Field::BodySha256,
        "timestamp" => Field::Timestamp,
        "id" => Field::Id,
        "method" => Field::Method,
        "url" => Field::Url,
        p if p.starts_with('/') => {
            // RFC 6901: `~` is `~0` or `~1`, nothing else.
            let mut tildes = p.match_indices('~');
            if tildes.any(|(i, _)| !matches!(p.as_bytes().get(i + 1), Some(b'0' | b'1'))) {
                return Err(format!("{p:?}: in a JSON pointer `~` is written ~0 and `/` ~1"));
            }
            Field::Pointer(p.to_owned())
        }
        _ => match (named("header:"), named("form:")) {
            (Some(h), _) if !h.is_empty() && h.bytes().all(is_token_byte) => {
                Field::Header(h.to_ascii_lowercase())
            }
            (Some(h), _) => return Err(format!("{h:?} is not a header name")),
            (_, Some(f)) if !f.is_empty() => Field::Form(f.to_owned()),
            _ => {
                return Err(format!(
                    "{{{inside}}} is not a field: use {{/json/pointer}}, {{header:Name}}, {{form:name}} or {{body_sha256}}"
                ))
            }
        },
    })
}

/// RFC 9110's token characters.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&written(self))
    }
}

/// A field as a template writes it.
fn written(f: &Field) -> String {
    match f {
        Field::Pointer(p) => format!("{{{p}}}"),
        Field::Header(h) => format!("{{header:{h}}}"),
        Field::Form(n) => format!("{{form:{n}}}"),
        Field::Body => "{body}".into(),
        Field::BodySha256 => "{body_sha256}".into(),
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
                let form = self.req.header("content-type").is_some_and(|t| {
                    t.trim_start()
                        .to_ascii_lowercase()
                        .starts_with("application/x-www-form-urlencoded")
                });
                if !form {
                    return None;
                }
                let pairs = self.form.get_or_init(|| form_pairs(&self.req.body));
                pairs
                    .iter()
                    .find(|(n, _)| n == name.as_bytes())
                    .map(|(_, v)| Cow::Owned(v.clone()))
            }
            Field::Body => Some(Cow::Borrowed(&self.req.body)),
            Field::BodySha256 => Some(Cow::Owned(sha256_hex(&[&self.req.body]).into_bytes())),
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
    /// Parses a `key` template: only the request's own fields, each with
    /// text between it and the next.
    pub fn parse(text: &str, fallback: Option<&str>) -> Result<Self, (&'static str, String)> {
        let template = Template::parse(text, Field::of_request).map_err(|e| ("key", e))?;
        if !text.is_ascii() {
            return Err((
                "key",
                format!("{text:?}: a key's own text is ASCII (values are escaped byte by byte)"),
            ));
        }
        if let Some((a, b)) = template.adjacent().next() {
            return Err((
                "key",
                format!(
                    "{text:?}: {} and {} touch; put text between them (\":\") so two keys differ when their values do",
                    written(a),
                    written(b)
                ),
            ));
        }
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

    /// Whether the signature binds every key this rule can give: each field
    /// covered, and a fallback digest only where the body is signed and no
    /// form field could go missing by a changed (unsigned) content type.
    pub fn is_bound(&self, covers: impl Fn(&Field) -> bool) -> bool {
        self.template.fields().all(&covers)
            && (!self.digest_fallback
                || (covers(&Field::Body)
                    && !self.template.fields().any(|f| matches!(f, Field::Form(_)))))
    }

    /// The key of `req`, at most `max_bytes` long, and a note for its
    /// record when it was not the template's.
    pub fn key(
        &self,
        req: &Inbound,
        max_bytes: usize,
    ) -> Result<(String, Option<String>), Rejection> {
        let fields = RequestFields::new(req);
        let written = self.template.as_str();
        let rendered = match self.template.render(Use::Key, |f| fields.get(f)) {
            Err(missing) => Err(format!("key {written} lacks {missing}")),
            Ok(k) if k.len() > max_bytes => {
                Err(format!("key {written} makes a key over {max_bytes} bytes"))
            }
            Ok(k) => String::from_utf8(k)
                .map_err(|_| format!("key {written} reads a value that is not UTF-8")),
        };
        match rendered {
            Ok(key) => Ok((key, None)),
            Err(why) if self.digest_fallback => Ok((
                format!("sha256:{}", sha256_hex(&[&req.body])),
                Some(format!("keyed by a SHA-256 of the body: {why}")),
            )),
            Err(why) => Err(Rejection::key(why)),
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
        assert_eq!(
            rule.key(&req, 512).unwrap(),
            ("42:order.paid:ev-9".into(), None)
        );
        let form = KeyRule::parse("notify:{form:notify_id}", None).unwrap();
        let mut req = Inbound {
            headers: vec![(
                "content-type".into(),
                "application/x-www-form-urlencoded; charset=utf-8".into(),
            )],
            body: b"a=1&notify_id=n%2B1&notify_id=second".to_vec(),
            ..Default::default()
        };
        assert_eq!(form.key(&req, 512).unwrap().0, "notify:n+1");
        // A body that is not a form has no form fields.
        req.headers.clear();
        assert!(form.key(&req, 512).is_err());
    }

    #[test]
    fn keys_are_equal_only_when_their_values_are() {
        let rule = KeyRule::parse("{/a}:{/b}", None).unwrap();
        let one = rule.key(&json(r#"{"a":"x:y","b":"z"}"#), 512).unwrap().0;
        let two = rule.key(&json(r#"{"a":"x","b":"y:z"}"#), 512).unwrap().0;
        assert_ne!(one, two);
        assert_eq!(one, "x%3Ay:z");
        assert_eq!(
            rule.key(&json(r#"{"a":"100%","b":"%3A"}"#), 512).unwrap().0,
            "100%25:%3A"
        );
        assert!(KeyRule::parse("{/a}{/b}", None).is_err(), "fields touching");
    }

    #[test]
    fn a_missing_field_is_a_400_or_the_bodys_digest() {
        let req = json(r#"{"type":"order.paid","data":{"id":null}}"#);
        let strict = KeyRule::parse("{/data/id}:{/type}", None).unwrap();
        let refused = strict.key(&req, 512).unwrap_err();
        assert_eq!(refused.status, 400);
        assert!(refused.reason.contains("{/data/id}"), "{}", refused.reason);
        let lenient = KeyRule::parse("{/data/id}", Some("digest")).unwrap();
        let (key, note) = lenient.key(&req, 512).unwrap();
        assert_eq!(key, format!("sha256:{}", sha256_hex(&[&req.body])));
        assert!(note.unwrap().contains("SHA-256"));
        // The same body, the same key: a retry is a duplicate.
        assert_eq!(lenient.key(&req.clone(), 512).unwrap().0, key);
        // Not JSON at all: missing too, never a panic.
        assert!(strict.key(&json("\u{0}{{"), 512).is_err());
        // Too long: refused, or the digest.
        let long = json(&format!(
            r#"{{"type":"t","data":{{"id":"{}"}}}}"#,
            "x".repeat(600)
        ));
        assert!(strict.key(&long, 512).unwrap_err().reason.contains("512"));
        let lenient = KeyRule::parse("{/data/id}:{/type}", Some("digest")).unwrap();
        assert!(lenient.key(&long, 512).unwrap().0.starts_with("sha256:"));
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
            "{/a~2b}",
            "{/a~}",
        ] {
            assert!(KeyRule::parse(bad, None).is_err(), "{bad}");
        }
        assert!(KeyRule::parse("{/a~1b}:{/c~0}", None).is_ok());
        assert!(KeyRule::parse("{/id}", Some("random")).is_err());
        let braces = KeyRule::parse("{{{/id}}}", None).unwrap();
        assert_eq!(braces.key(&json(r#"{"id":"a"}"#), 512).unwrap().0, "{a}");
    }

    #[test]
    fn payload_templates_take_the_signature_fields() {
        let t = Template::parse("{timestamp}.{body}", |_| true).unwrap();
        let req = json("{}");
        let fields = RequestFields::new(&req);
        let render = |ts: &'static [u8]| {
            t.render(Use::Signed, |f| match f {
                Field::Timestamp => Some(Cow::Borrowed(ts)),
                f => fields.get(f),
            })
        };
        assert_eq!(render(b"17").unwrap(), b"17.{}");
        // Text after the last field may appear in it: the split is known.
        let tail = Template::parse("{timestamp}\n{body}\n", |_| true).unwrap();
        let multiline = json("{\n}");
        let fields = RequestFields::new(&multiline);
        assert!(tail
            .render(Use::Signed, |f| match f {
                Field::Timestamp => Some(Cow::Borrowed(b"17".as_slice())),
                f => fields.get(f),
            })
            .is_ok());
        // A separator that overlaps the value's end is caught too.
        assert!(!splits_at_end(b"x:", b"::"));
        assert!(splits_at_end(b"x", b"::"));
        // A value holding the text after it could be split elsewhere.
        assert!(matches!(render(b"17.5"), Err(Unrendered::Ambiguous(..))));
    }
}
