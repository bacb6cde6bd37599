//! A source's destinations (spec section 9): `[[source.destination]]`
//! tables, or the single-string `destination` of section 2, which is one
//! destination named `default`. Each destination gets each event it wants
//! exactly once; its filter says which it wants.

use serde::Deserialize;

use super::alerts::{Invalid, SecretOf};
use super::{check_http_url, units, Mode, Secret};

/// The name the single-string `destination` goes by.
pub const DEFAULT_NAME: &str = "default";

/// A destination's URL as anyone but an admin's audit-logged reveal sees
/// it: scheme, host, port and path; credentials in its userinfo or query
/// (`https://user:pass@app/hook?token=...`) masked, for whoever reads it
/// could post straight to the application.
pub fn shown_url(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        return "(not a URL)".into();
    };
    let userinfo = if parsed.username().is_empty() && parsed.password().is_none() {
        ""
    } else {
        "***@"
    };
    let host = parsed.host_str().unwrap_or_default();
    let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
    let query = if parsed.query().is_some() { "?***" } else { "" };
    format!(
        "{}://{userinfo}{host}{port}{}{query}",
        parsed.scheme(),
        parsed.path()
    )
}

#[derive(Debug, Clone)]
pub struct Destination {
    /// Unique within its source; attempts and dispatches are recorded by it.
    pub name: String,
    pub url: String,
    /// The Standard Webhooks secret replaysafe signs what it forwards with.
    pub secret: Option<Secret>,
    pub timeout_secs: u64,
    pub max_attempts: u32,
    /// None: it wants every event.
    pub filter: Option<Filter>,
    /// Attempts per second across every process sharing the database.
    pub rate_per_sec: Option<f64>,
    /// Attempts running at once across every process.
    pub max_in_flight: Option<u32>,
    pub ordering: Ordering,
    pub breaker: Breaker,
}

/// When a destination's circuit breaker opens, and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct Breaker {
    /// Failed attempts in a row (connection errors, timeouts, 408, 429,
    /// 5xx) that open it; 0: never on a count.
    pub failures: u32,
    /// Or this share of failed attempts in `window_secs` (at least
    /// `RATIO_MIN_ATTEMPTS` of them).
    pub ratio: Option<f64>,
    pub window_secs: u64,
    /// Its first cool-down; each failed probe doubles it, up to
    /// `MAX_COOLDOWN_SECS`.
    pub cooldown_secs: u64,
}

pub const ORDERING_KEY_MAX: usize = 256;

pub const RATIO_MIN_ATTEMPTS: i32 = 20;
pub const MAX_COOLDOWN_SECS: u64 = 600;

/// Twenty failures in a row: more than any retry schedule of one event, so
/// only a destination that fails every event opens it.
pub const DEFAULT_BREAKER: Breaker = Breaker {
    failures: 20,
    ratio: None,
    window_secs: 60,
    cooldown_secs: 30,
};

impl Destination {
    /// The single-string `destination`, with the source's defaults.
    pub fn default_to(url: String) -> Self {
        Self {
            name: DEFAULT_NAME.into(),
            url,
            secret: None,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            filter: None,
            rate_per_sec: None,
            max_in_flight: None,
            ordering: Ordering::None,
            breaker: DEFAULT_BREAKER,
        }
    }

    /// Its attempts are limited (`rate_per_sec`, `max_in_flight`) or
    /// ordered: they are leased through its gate, never handed over at the
    /// claim. The gate's row lock makes its leases take turns, each in a
    /// snapshot taken after the one before committed: a limit counts every
    /// lease, and an ordered lease sees every dispatch another lease took
    /// (or an operator revived) in the meantime.
    pub fn is_gated(&self) -> bool {
        self.rate_per_sec.is_some() || self.max_in_flight.is_some() || self.is_ordered()
    }

    /// Its events go one at a time per ordering key (see `events::lease`).
    pub fn is_ordered(&self) -> bool {
        self.ordering != Ordering::None
    }

    /// The ordering key of an event whose verified body is `body`, for an
    /// ordered destination (None: not ordered). The value at the pointer,
    /// a string as it is and anything else as JSON text; '' when the
    /// destination names no pointer (all its events share one order) or the
    /// body has no value there (those events share one order too). Cut to
    /// `ORDERING_KEY_MAX` bytes: two keys sharing that much only wait for
    /// each other, which never breaks an order.
    pub fn ordering_key(&self, body: &Body) -> Option<String> {
        let Ordering::PerKey { key } = &self.ordering else {
            return None;
        };
        let found = key
            .as_deref()
            .and_then(|pointer| body.value()?.pointer(pointer))
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default();
        Some(found[..found.floor_char_boundary(ORDERING_KEY_MAX)].to_owned())
    }

    /// Whether this destination wants an event of `event_type` whose
    /// verified body is `body`.
    pub fn wants(&self, event_type: Option<&str>, body: &Body) -> bool {
        self.filter
            .as_ref()
            .is_none_or(|filter| filter.matches(event_type, body))
    }
}

/// Which events a destination wants: an event type matching one of the
/// glob patterns (when any are given), and a verified body holding each
/// value at its JSON pointer (when any are given).
#[derive(Debug, Clone)]
pub struct Filter {
    /// As written, for the dashboard and `config check`.
    pub patterns: Vec<String>,
    types: Option<globset::GlobSet>,
    pub body: Vec<(String, serde_json::Value)>,
}

impl Filter {
    pub fn matches(&self, event_type: Option<&str>, body: &Body) -> bool {
        let typed = match &self.types {
            None => true,
            Some(set) => event_type.is_some_and(|t| set.is_match(t)),
        };
        typed
            && self.body.iter().all(|(pointer, want)| {
                body.value()
                    .and_then(|v| v.pointer(pointer))
                    .is_some_and(|found| found == want)
            })
    }
}

/// A verified body, parsed for the filters' JSON pointers only when one
/// asks (most destinations filter on the type alone, or not at all).
pub struct Body<'a> {
    bytes: &'a [u8],
    form: bool,
    parsed: std::cell::OnceCell<Option<serde_json::Value>>,
}

impl<'a> Body<'a> {
    /// `form`: an `application/x-www-form-urlencoded` body, seen as one
    /// object of its parameters (the first of repeated ones).
    pub fn new(bytes: &'a [u8], form: bool) -> Self {
        Self {
            bytes,
            form,
            parsed: std::cell::OnceCell::new(),
        }
    }

    pub fn value(&self) -> Option<&serde_json::Value> {
        self.parsed
            .get_or_init(|| {
                if self.form {
                    let mut object = serde_json::Map::new();
                    for (k, v) in crate::providers::form_pairs(self.bytes) {
                        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                        object
                            .entry(text(&k))
                            .or_insert(serde_json::Value::String(text(&v)));
                    }
                    Some(serde_json::Value::Object(object))
                } else {
                    serde_json::from_slice(self.bytes).ok()
                }
            })
            .as_ref()
    }
}

/// Whether a destination takes its events one at a time in receipt order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Ordering {
    #[default]
    None,
    /// Events sharing the value at `key` (a JSON pointer into the verified
    /// body) one at a time, in receipt order; without a key, all of them.
    PerKey { key: Option<String> },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDestination {
    name: String,
    url: String,
    /// `destination_secret` too, as a source spells it.
    #[serde(alias = "destination_secret")]
    secret: Option<String>,
    /// `attempt_timeout_secs` too, as a source spells it.
    #[serde(alias = "attempt_timeout_secs")]
    #[serde(default, deserialize_with = "units::secs")]
    timeout_secs: Option<u64>,
    max_attempts: Option<u32>,
    filter: Option<toml::Value>,
    rate_per_sec: Option<f64>,
    max_in_flight: Option<u32>,
    ordering: Option<String>,
    ordering_key: Option<String>,
    breaker_failures: Option<u32>,
    breaker_ratio: Option<f64>,
    #[serde(default, deserialize_with = "units::secs")]
    breaker_window_secs: Option<u64>,
    #[serde(default, deserialize_with = "units::secs")]
    breaker_cooldown_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilterTable {
    types: Option<Vec<String>>,
    #[serde(default)]
    body: std::collections::BTreeMap<String, toml::Value>,
}

/// What a source's table says about where its events go.
pub(super) struct SourceDestinations<'a> {
    /// `destination = "http://..."` (section 2), or `[[source.destination]]`:
    /// read by hand, so that a mistake in one table is named.
    pub destinations: Option<toml::Value>,
    pub destination_secret: Option<&'a str>,
    pub max_attempts: Option<u32>,
    pub attempt_timeout_secs: Option<u64>,
    pub mode: Mode,
}

pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
pub const DEFAULT_TIMEOUT_SECS: u64 = 10;

/// The source's destinations; `at` names a key below the source's table.
pub(super) fn build(
    raw: SourceDestinations<'_>,
    at: &dyn Fn(&str) -> String,
    invalid: Invalid,
    secret: SecretOf,
) -> Result<Vec<Destination>, super::ConfigError> {
    let at_least_one = |key: &str, value: Option<u64>, default: u64| match value {
        Some(0) => Err(invalid(key, "must be at least 1".into())),
        Some(v) => Ok(v),
        None => Ok(default),
    };
    let max_attempts = at_least_one(
        &at("max_attempts"),
        raw.max_attempts.map(u64::from),
        u64::from(DEFAULT_MAX_ATTEMPTS),
    )? as u32;
    let timeout_secs = at_least_one(
        &at("attempt_timeout_secs"),
        raw.attempt_timeout_secs,
        DEFAULT_TIMEOUT_SECS,
    )?;
    let signing = |key: &str, text: &str| -> Result<Secret, super::ConfigError> {
        let s = secret(key, text)?;
        // Signed with the Standard Webhooks scheme: a bad secret would mean unsigned forwards.
        crate::providers::standard::decode_secret(s.expose()).map_err(|p| invalid(key, p))?;
        Ok(s)
    };
    let source_secret = raw
        .destination_secret
        .map(|text| signing(&at("destination_secret"), text))
        .transpose()?;
    let tables = match raw.destinations {
        None => return Ok(Vec::new()),
        Some(toml::Value::String(url)) => {
            check_http_url(&url).map_err(|p| invalid(&at("destination"), p))?;
            return Ok(vec![Destination {
                secret: source_secret,
                timeout_secs,
                max_attempts,
                ..Destination::default_to(url)
            }]);
        }
        Some(toml::Value::Array(tables)) => tables,
        Some(_) => {
            return Err(invalid(
                &at("destination"),
                "is neither a URL nor [[source.destination]] tables".into(),
            ))
        }
    };
    if source_secret.is_some() {
        return Err(invalid(
            &at("destination_secret"),
            "give each [[source.destination]] its own `secret`".into(),
        ));
    }
    if raw.mode == Mode::Sync && tables.len() > 1 {
        return Err(invalid(
            &at("destination"),
            "a sync source answers its provider with one destination's reply: give it one".into(),
        ));
    }
    let mut out: Vec<Destination> = Vec::with_capacity(tables.len());
    for (j, table) in tables.into_iter().enumerate() {
        let key = |field: &str| at(&format!("destination[{j}].{field}"));
        let d: RawDestination = serde_path_to_error::deserialize(table).map_err(|e| {
            let field = match e.path().to_string() {
                path if path == "." => String::new(),
                path => format!(".{path}"),
            };
            invalid(
                &at(&format!("destination[{j}]{field}")),
                e.into_inner().message().to_owned(),
            )
        })?;
        if !super::valid_slug(&d.name) {
            return Err(invalid(
                &key("name"),
                format!(
                    "{:?}: use 1-64 lowercase letters, digits, '-' or '_'",
                    d.name
                ),
            ));
        }
        if out.iter().any(|o| o.name == d.name) {
            return Err(invalid(
                &key("name"),
                format!("{:?} names another destination of this source", d.name),
            ));
        }
        check_http_url(&d.url).map_err(|p| invalid(&key("url"), p))?;
        let secret = d
            .secret
            .as_deref()
            .map(|text| signing(&key("secret"), text))
            .transpose()?;
        let timeout_secs = at_least_one(&key("timeout_secs"), d.timeout_secs, timeout_secs)?;
        let max_attempts = at_least_one(
            &key("max_attempts"),
            d.max_attempts.map(u64::from),
            u64::from(max_attempts),
        )? as u32;
        let filter = d
            .filter
            .map(|f| filter(f, &key("filter"), invalid))
            .transpose()?;
        let rate_per_sec = match d.rate_per_sec {
            Some(r) if !(r.is_finite() && r > 0.0 && r <= 1_000_000.0) => {
                return Err(invalid(
                    &key("rate_per_sec"),
                    "must be a number of attempts per second above 0".into(),
                ))
            }
            r => r,
        };
        if d.max_in_flight == Some(0) {
            return Err(invalid(&key("max_in_flight"), "must be at least 1".into()));
        }
        let ordering = match d.ordering.as_deref() {
            None | Some("none") => {
                if d.ordering_key.is_some() {
                    return Err(invalid(
                        &key("ordering_key"),
                        "goes with ordering = \"per_key\"".into(),
                    ));
                }
                Ordering::None
            }
            Some("per_key") => {
                if let Some(pointer) = &d.ordering_key {
                    check_pointer(pointer).map_err(|p| invalid(&key("ordering_key"), p))?;
                }
                Ordering::PerKey {
                    key: d.ordering_key.clone(),
                }
            }
            Some(other) => {
                return Err(invalid(
                    &key("ordering"),
                    format!("{other:?} is not \"none\" or \"per_key\""),
                ))
            }
        };
        if let Some(r) = d.breaker_ratio {
            if !(r > 0.0 && r <= 1.0) {
                return Err(invalid(
                    &key("breaker_ratio"),
                    "must be a share of failed attempts above 0 and at most 1".into(),
                ));
            }
        }
        let breaker = Breaker {
            failures: d.breaker_failures.unwrap_or(DEFAULT_BREAKER.failures),
            ratio: d.breaker_ratio,
            window_secs: at_least_one(
                &key("breaker_window_secs"),
                d.breaker_window_secs,
                DEFAULT_BREAKER.window_secs,
            )?,
            cooldown_secs: at_least_one(
                &key("breaker_cooldown_secs"),
                d.breaker_cooldown_secs,
                DEFAULT_BREAKER.cooldown_secs,
            )?
            .min(MAX_COOLDOWN_SECS),
        };
        if raw.mode == Mode::Sync {
            for (field, given) in [
                ("filter", filter.is_some()),
                ("rate_per_sec", rate_per_sec.is_some()),
                ("max_in_flight", d.max_in_flight.is_some()),
                ("ordering", ordering != Ordering::None),
                ("breaker_failures", d.breaker_failures.is_some()),
                ("breaker_ratio", d.breaker_ratio.is_some()),
            ] {
                if given {
                    return Err(invalid(
                        &key(field),
                        "a sync source's provider waits for its destination: it cannot be filtered, limited, ordered or broken".into(),
                    ));
                }
            }
        }
        out.push(Destination {
            name: d.name,
            url: d.url,
            secret,
            timeout_secs,
            max_attempts,
            filter,
            rate_per_sec,
            max_in_flight: d.max_in_flight,
            ordering,
            breaker,
        });
    }
    Ok(out)
}

/// `filter = "invoice.*"`, `filter = ["invoice.*", "charge.*"]`, or
/// An event-type pattern as filters and `listen --type` read it: `*`
/// crosses dots and slashes (`invoice.*` takes `invoice.payment.failed`).
pub fn type_glob(pattern: &str) -> Result<globset::Glob, globset::Error> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
}

/// `filter = { types = [...], body = { "/data/object/livemode" = true } }`.
fn filter(raw: toml::Value, key: &str, invalid: Invalid) -> Result<Filter, super::ConfigError> {
    let types_only = |list: Vec<toml::Value>| {
        let mut t = toml::Table::new();
        t.insert("types".into(), toml::Value::Array(list));
        toml::Value::Table(t)
    };
    let table = match raw {
        toml::Value::String(p) => types_only(vec![toml::Value::String(p)]),
        toml::Value::Array(ps) => types_only(ps),
        other => other,
    };
    let RawFilterTable {
        types: patterns,
        body,
    } = RawFilterTable::deserialize(table).map_err(|e| invalid(key, e.message().to_owned()))?;
    let types = match &patterns {
        None => None,
        Some(list) if list.is_empty() => {
            return Err(invalid(
                key,
                "lists no event type: give at least one pattern".into(),
            ))
        }
        Some(list) => {
            let mut set = globset::GlobSetBuilder::new();
            for p in list {
                let glob = type_glob(p).map_err(|e| invalid(key, format!("{p:?}: {e}")))?;
                set.add(glob);
            }
            Some(set.build().map_err(|e| invalid(key, e.to_string()))?)
        }
    };
    let mut matches = Vec::with_capacity(body.len());
    for (pointer, value) in body {
        check_pointer(&pointer).map_err(|p| invalid(&format!("{key}.body"), p))?;
        let value = serde_json::to_value(&value)
            .map_err(|e| invalid(&format!("{key}.body"), e.to_string()))?;
        matches.push((pointer, value));
    }
    if types.is_none() && matches.is_empty() {
        return Err(invalid(
            key,
            "is empty: give `types`, `body` or both".into(),
        ));
    }
    Ok(Filter {
        patterns: patterns.unwrap_or_default(),
        types,
        body: matches,
    })
}

/// A JSON pointer (RFC 6901) such as `/data/object/id`.
fn check_pointer(text: &str) -> Result<(), String> {
    if !text.starts_with('/') {
        return Err(format!(
            "{text:?} is not a JSON pointer such as \"/data/object/id\""
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_keeps_where_it_goes_and_masks_its_credentials() {
        assert_eq!(
            shown_url("https://user:pass@app.example.com:8443/hook?token=abc#x"),
            "https://***@app.example.com:8443/hook?***"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:8080/hooks"),
            "http://127.0.0.1:8080/hooks"
        );
        assert_eq!(
            shown_url("https://app.example.com/h?"),
            "https://app.example.com/h?***"
        );
        assert_eq!(shown_url("https://[::1]:9/x"), "https://[::1]:9/x");
    }

    fn filter_of(text: &str) -> Filter {
        #[derive(Deserialize)]
        struct T {
            filter: toml::Value,
        }
        let t: T = toml::from_str(text).unwrap();
        let invalid = |k: &str, p: String| super::super::ConfigError::Invalid {
            path: "t".into(),
            key: k.into(),
            problem: p,
        };
        filter(t.filter, "filter", &invalid).unwrap()
    }

    #[test]
    fn globs_match_event_types_across_dots_and_slashes() {
        let f = filter_of(r#"filter = ["invoice.*", "orders/*", "issues.opened"]"#);
        let body = Body::new(b"{}", false);
        for (t, want) in [
            (Some("invoice.paid"), true),
            (Some("invoice.payment.failed"), true),
            (Some("orders/create"), true),
            (Some("issues.opened"), true),
            (Some("issues.closed"), false),
            (Some("charge.succeeded"), false),
            (None, false),
        ] {
            assert_eq!(f.matches(t, &body), want, "{t:?}");
        }
    }

    #[test]
    fn ordering_keys_are_the_pointers_value_cut_on_a_character() {
        let ordered = |key: Option<&str>| Destination {
            ordering: Ordering::PerKey {
                key: key.map(str::to_owned),
            },
            ..Destination::default_to("http://h/".into())
        };
        let long = format!(r#"{{"id":"{}","n":7}}"#, "é".repeat(200));
        let body = Body::new(long.as_bytes(), false);
        let cut = ordered(Some("/id")).ordering_key(&body).unwrap();
        assert_eq!(cut, "é".repeat(ORDERING_KEY_MAX / 2));
        assert_eq!(
            ordered(Some("/n")).ordering_key(&body).as_deref(),
            Some("7")
        );
        assert_eq!(
            ordered(Some("/none")).ordering_key(&body).as_deref(),
            Some("")
        );
        assert_eq!(ordered(None).ordering_key(&body).as_deref(), Some(""));
        let unordered = Destination::default_to("http://h/".into());
        assert_eq!(unordered.ordering_key(&body), None);
    }

    #[test]
    fn body_pointers_must_all_hold() {
        let f = filter_of(
            r#"filter = { types = ["invoice.*"], body = { "/data/object/livemode" = true, "/data/object/currency" = "eur" } }"#,
        );
        let live = br#"{"data":{"object":{"livemode":true,"currency":"eur"}}}"#;
        let test = br#"{"data":{"object":{"livemode":false,"currency":"eur"}}}"#;
        assert!(f.matches(Some("invoice.paid"), &Body::new(live, false)));
        assert!(!f.matches(Some("invoice.paid"), &Body::new(test, false)));
        assert!(!f.matches(Some("charge.paid"), &Body::new(live, false)));
        assert!(!f.matches(Some("invoice.paid"), &Body::new(b"not json", false)));
        let only_body =
            filter_of(r#"filter = { body = { "/notify_type" = "trade_status_sync" } }"#);
        assert!(only_body.matches(None, &Body::new(b"notify_type=trade_status_sync&a=1", true)));
        assert!(!only_body.matches(None, &Body::new(b"notify_type=other", true)));
    }
}
