//! Configuration: one TOML file (spec section 2), read and validated once at
//! start. Errors name the key and what is wrong; secrets redact themselves.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::providers::{Provider, Scheme};
pub use crate::secret::Secret;

pub mod address;
pub mod alerts;
pub mod destination;
pub mod in_force;
pub mod reconcile;
mod secrets;
mod sources;
pub mod units;
#[cfg(test)]
mod units_tests;

pub use destination::Destination;

pub const DEFAULT_CONFIG_PATH: &str = "./replaysafe.toml";
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
pub const DEFAULT_MAX_BODY_MEMORY_BYTES: usize = 256 * 1024 * 1024;
/// Keys younger than a week must never be forgotten: providers retry for days.
pub const MIN_DEDUP_TTL_DAYS: u32 = 7;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config file {path}: `{key}`: {problem}")]
    Invalid {
        path: PathBuf,
        key: String,
        problem: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Ack,
    Sync,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ack => "ack",
            Mode::Sync => "sync",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this came from, or None when no file exists and defaults apply.
    pub path: Option<PathBuf>,
    /// The keys whose secret is written in the file itself (not `env:` or
    /// `file:`), for `secrets_exposed`.
    pub inline_secrets: Vec<String>,
    pub listen: SocketAddr,
    pub database_url: Option<Secret>,
    /// A standby for the dashboard's and the API's reads (actions always
    /// go to the primary).
    pub read_database_url: Option<Secret>,
    pub data_dir: PathBuf,
    pub public_url: String,
    pub retention_days: u32,
    pub dedup_ttl_days: u32,
    /// Operators' actions in the audit log (failed sign-ins go with the deliveries).
    pub audit_retention_days: u32,
    pub max_body_bytes: usize,
    /// Bodies being read at once on `/hooks` may hold this much memory;
    /// beyond it a delivery is answered 503 unread (each reserves its
    /// declared length, else `max_body_bytes`).
    pub max_body_memory_bytes: usize,
    /// What a rejected delivery keeps: strangers' requests are refused and
    /// need not fill the disk.
    pub rejections: RejectionRecording,
    pub demo_destination: bool,
    /// A dashboard session ends after this long without a request.
    pub session_idle_minutes: u32,
    /// When set, `/metrics` answers only `Authorization: Bearer <token>`.
    pub metrics_token: Option<Secret>,
    /// When set, `/metrics` is served on this address alone (say, a port
    /// only the monitoring network reaches), not beside the receiver.
    pub metrics_listen: Option<SocketAddr>,
    /// `public_url` was written in the file (else it is `http://{listen}`).
    pub public_url_given: bool,
    /// How long and how many connections a client may hold.
    pub http: HttpLimits,
    /// Peers whose `X-Forwarded-For` names the client, and whose own
    /// address is exempt from the per-address connection cap.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// `/api/v1` requests one token may make per second and process (twice
    /// that in a burst); beyond, 429 with `Retry-After`.
    pub api_requests_per_second: u32,
    pub sources: Vec<SourceConfig>,
    pub log_format: crate::telemetry::LogFormat,
    /// Where `serve` exports its spans over OTLP/HTTP (a base URL; traces go
    /// to its `/v1/traces`), if anywhere.
    pub otlp_endpoint: Option<String>,
    /// Each source's alert rules (`[alerts.rules]`, `[source.alerts]`).
    pub alert_rules: replaysafe_types::alerts::AlertRules,
    /// How often rules are evaluated, and where alerts go.
    pub alerts: alerts::AlertsConfig,
}

pub const DEFAULT_API_REQUESTS_PER_SECOND: u32 = 20;

/// How much of the rejected requests is recorded.
#[derive(Debug, Clone, Copy)]
pub struct RejectionRecording {
    /// The body excerpt kept (the whole body's length and SHA-256 are kept too).
    pub body_bytes: usize,
    /// Recorded from one address (IPv6: one /64) per minute and process;
    /// beyond it they are counted per minute in `unrecorded_rejections`.
    pub per_address_per_minute: u32,
}

pub const DEFAULT_REJECTIONS: RejectionRecording = RejectionRecording {
    body_bytes: 8 * 1024,
    per_address_per_minute: 60,
};

/// What a client gets before the server gives up on it: the receiver faces
/// strangers, and a connection that trickles must not hold a slot for long.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// To send a request's headers; on HTTP/1 also the longest a kept-alive
    /// connection may wait idle for its next request.
    pub header_timeout: Duration,
    /// To send a request's whole body, from its headers on (then 408).
    pub body_timeout: Duration,
    /// A connection with no request in flight is closed after this (HTTP/2
    /// included, whose pings keep an idle connection alive otherwise).
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Open connections from one address (IPv6: one /64), trusted proxies aside.
    pub max_connections_per_address: usize,
}

pub const DEFAULT_HTTP_LIMITS: HttpLimits = HttpLimits {
    header_timeout: Duration::from_secs(15),
    body_timeout: Duration::from_secs(30),
    idle_timeout: Duration::from_secs(60),
    max_connections: 10_000,
    max_connections_per_address: 256,
};

/// A working shift: an on-call engineer is not signed out mid-incident.
pub const DEFAULT_SESSION_IDLE_MINUTES: u32 = 480;

#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub slug: String,
    /// Its provider's entry in the registry.
    pub provider: &'static Provider,
    /// Its provider's rules, built from its settings at start.
    pub scheme: Arc<dyn Scheme>,
    pub mode: Mode,
    /// Where its events go; none: they are claimed and kept, not forwarded.
    pub destinations: Vec<Destination>,
    pub tolerance_secs: u64,
    pub paused: bool,
    /// Providers whose signature covers neither the key nor a timestamp
    /// (GitHub, Shopify, Twilio): dedupe also on a digest of the signed
    /// content, so a captured request re-posted under a fresh id is a
    /// duplicate. Off only where the provider may send one content twice
    /// as two events.
    pub replay_guard: bool,
    /// Compared with its provider's own list of what it sent (issue 34).
    pub reconcile: Option<Arc<reconcile::Reconcile>>,
    /// `key`: its events' idempotency key composed of the request's fields,
    /// instead of the provider's own.
    pub key: Option<Arc<crate::providers::template::KeyRule>>,
}

impl SourceConfig {
    /// Whether its events are forwarded anywhere.
    pub fn forwards(&self) -> bool {
        !self.destinations.is_empty()
    }

    /// The destination its events go to until dispatches give each event one
    /// per destination.
    pub fn destination(&self) -> Option<&Destination> {
        self.destinations.first()
    }

    /// The longest one of its attempts may run: a lease outlasts it.
    pub fn attempt_timeout(&self) -> Duration {
        Duration::from_secs(
            self.destinations
                .iter()
                .map(|d| d.timeout_secs)
                .max()
                .unwrap_or(destination::DEFAULT_TIMEOUT_SECS),
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    database_url: Option<String>,
    read_database_url: Option<String>,
    data_dir: Option<PathBuf>,
    public_url: Option<String>,
    #[serde(default, deserialize_with = "units::days")]
    retention_days: Option<u32>,
    #[serde(default, deserialize_with = "units::days")]
    dedup_ttl_days: Option<u32>,
    #[serde(default, deserialize_with = "units::days")]
    audit_retention_days: Option<u32>,
    #[serde(default, deserialize_with = "units::bytes")]
    max_body_bytes: Option<usize>,
    #[serde(default, deserialize_with = "units::bytes")]
    max_body_memory_bytes: Option<usize>,
    #[serde(default, deserialize_with = "units::bytes")]
    rejected_body_bytes: Option<usize>,
    record_rejected_per_minute: Option<u32>,
    demo_destination: Option<bool>,
    #[serde(default, deserialize_with = "units::minutes")]
    session_idle_minutes: Option<u32>,
    metrics_token: Option<String>,
    metrics_listen: Option<String>,
    #[serde(default, deserialize_with = "units::secs")]
    header_timeout_secs: Option<u64>,
    #[serde(default, deserialize_with = "units::secs")]
    body_timeout_secs: Option<u64>,
    #[serde(default, deserialize_with = "units::secs")]
    idle_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
    max_connections_per_address: Option<usize>,
    trusted_proxies: Option<Vec<String>>,
    api_requests_per_second: Option<u32>,
    log_format: Option<crate::telemetry::LogFormat>,
    otlp_endpoint: Option<String>,
    alerts: Option<alerts::RawAlerts>,
    #[serde(default)]
    source: Vec<RawSource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    slug: String,
    provider: String,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    mode: Mode,
    destination: Option<toml::Value>,
    destination_secret: Option<String>,
    #[serde(default, deserialize_with = "units::secs")]
    tolerance_secs: Option<u64>,
    max_attempts: Option<u32>,
    /// `timeout_secs` too, as a `[[source.destination]]` spells it.
    #[serde(alias = "timeout_secs")]
    #[serde(default, deserialize_with = "units::secs")]
    attempt_timeout_secs: Option<u64>,
    #[serde(default)]
    paused: bool,
    replay_guard: Option<bool>,
    public_key: Option<String>,
    #[serde(default)]
    platform_keys: BTreeMap<String, String>,
    api_v3_key: Option<String>,
    public_url: Option<String>,
    /// This source's alert rules over `[alerts.rules]`.
    alerts: Option<alerts::RawRules>,
    reconcile: Option<reconcile::RawReconcile>,
    key: Option<String>,
    key_fallback: Option<String>,
    signature: Option<crate::providers::declarative::spec::RawSignature>,
}

/// Where the config comes from: `--config`, else `$REPLAYSAFE_CONFIG` (clap
/// folds both into `explicit`), else `./replaysafe.toml` if it exists.
pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
    let env = |name: &str| std::env::var(name).ok();
    match explicit {
        Some(path) => load_file(path, &env),
        None if Path::new(DEFAULT_CONFIG_PATH).exists() => {
            load_file(Path::new(DEFAULT_CONFIG_PATH), &env)
        }
        None => parse_and_validate(None, "", &env),
    }
}

fn load_file(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_and_validate(Some(path), &text, env)
}

/// Parses and validates config text; `env` reads environment variables (a
/// parameter so tests need not touch the process environment).
pub fn parse_and_validate(
    path: Option<&Path>,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let shown_path = path
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("(defaults)"));
    let raw: RawConfig = deserialize(&shown_path, text)?;
    let invalid = |key: &str, problem: String| ConfigError::Invalid {
        path: shown_path.clone(),
        key: key.to_owned(),
        problem,
    };
    let inline_secrets = std::cell::RefCell::new(Vec::new());
    let secret = |key: &str, value: &str| {
        if !value.starts_with("env:") && !value.starts_with("file:") {
            inline_secrets.borrow_mut().push(key.to_owned());
        }
        secrets::resolve(path, env, &invalid, key, value)
    };

    let listen_text = raw.listen.unwrap_or_else(|| "127.0.0.1:3000".into());
    let listen: SocketAddr = listen_text.parse().map_err(|_| {
        invalid(
            "listen",
            format!("{listen_text:?} is not an address such as \"127.0.0.1:3000\""),
        )
    })?;

    // $DATABASE_URL (and $READ_DATABASE_URL) win over the file.
    let postgres_url = |key: &str, variable: &str, file: Option<&str>| {
        let url = match env(variable).filter(|v| !v.is_empty()) {
            Some(url) => Some(Secret::new(url)),
            // Written inline, a URL is a secret only with a password in it.
            None => file
                .map(|v| {
                    let with_password = url::Url::parse(v).is_ok_and(|u| u.password().is_some());
                    if with_password {
                        secret(key, v)
                    } else {
                        secrets::resolve(path, env, &invalid, key, v)
                    }
                })
                .transpose()?,
        };
        if let Some(url) = &url {
            let u = url.expose();
            if !(u.starts_with("postgres://") || u.starts_with("postgresql://")) {
                return Err(invalid(
                    key,
                    "must start with postgres:// or postgresql://".into(),
                ));
            }
        }
        Ok(url)
    };
    let database_url = postgres_url("database_url", "DATABASE_URL", raw.database_url.as_deref())?;
    let read_database_url = postgres_url(
        "read_database_url",
        "READ_DATABASE_URL",
        raw.read_database_url.as_deref(),
    )?;
    if read_database_url.is_some() && database_url.is_none() {
        return Err(invalid(
            "read_database_url",
            "needs database_url: the embedded PostgreSQL has no standby".into(),
        ));
    }

    // Relative paths are relative to the config file, so `--config` works from anywhere.
    let base = path
        .and_then(Path::parent)
        .map(Path::to_owned)
        .unwrap_or_default();
    let data_dir = base.join(raw.data_dir.unwrap_or_else(|| PathBuf::from("./data")));

    let public_url_given = raw.public_url.is_some();
    let public_url = raw
        .public_url
        .unwrap_or_else(|| format!("http://{listen}"))
        .trim_end_matches('/')
        .to_owned();
    check_http_url(&public_url).map_err(|p| invalid("public_url", p))?;

    let retention_days = raw.retention_days.unwrap_or(30);
    if retention_days == 0 {
        return Err(invalid("retention_days", "must be at least 1".into()));
    }
    let dedup_ttl_days = raw.dedup_ttl_days.unwrap_or(30);
    if dedup_ttl_days < MIN_DEDUP_TTL_DAYS {
        return Err(invalid(
            "dedup_ttl_days",
            format!("{dedup_ttl_days} is below the minimum of {MIN_DEDUP_TTL_DAYS}: providers retry for days"),
        ));
    }
    let audit_retention_days = raw.audit_retention_days.unwrap_or(365);
    if audit_retention_days < retention_days {
        return Err(invalid(
            "audit_retention_days",
            format!("{audit_retention_days} is below retention_days ({retention_days}): the audit log outlives the deliveries it tells of"),
        ));
    }
    let max_body_bytes = raw.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
    if max_body_bytes == 0 {
        return Err(invalid("max_body_bytes", "must be at least 1".into()));
    }
    let max_body_memory_bytes = raw
        .max_body_memory_bytes
        .unwrap_or(DEFAULT_MAX_BODY_MEMORY_BYTES.max(max_body_bytes));
    if max_body_memory_bytes < max_body_bytes {
        return Err(invalid(
            "max_body_memory_bytes",
            format!("{max_body_memory_bytes} is below max_body_bytes ({max_body_bytes}): no body that size could be read"),
        ));
    }

    let rejections = RejectionRecording {
        body_bytes: raw
            .rejected_body_bytes
            .unwrap_or(DEFAULT_REJECTIONS.body_bytes),
        per_address_per_minute: raw
            .record_rejected_per_minute
            .unwrap_or(DEFAULT_REJECTIONS.per_address_per_minute),
    };

    let metrics_listen = raw
        .metrics_listen
        .as_deref()
        .map(|text| {
            text.parse::<SocketAddr>().map_err(|_| {
                invalid(
                    "metrics_listen",
                    format!("{text:?} is not an address such as \"127.0.0.1:9464\""),
                )
            })
        })
        .transpose()?;
    let metrics_token = raw
        .metrics_token
        .as_deref()
        .map(|v| secret("metrics_token", v))
        .transpose()?;

    let at_least_one = |key: &str, value: Option<u64>, default: Duration| match value {
        Some(0) => Err(invalid(key, "must be at least 1".into())),
        Some(secs) => Ok(Duration::from_secs(secs)),
        None => Ok(default),
    };
    let d = DEFAULT_HTTP_LIMITS;
    let http = HttpLimits {
        header_timeout: at_least_one(
            "header_timeout_secs",
            raw.header_timeout_secs,
            d.header_timeout,
        )?,
        body_timeout: at_least_one("body_timeout_secs", raw.body_timeout_secs, d.body_timeout)?,
        idle_timeout: at_least_one("idle_timeout_secs", raw.idle_timeout_secs, d.idle_timeout)?,
        max_connections: raw.max_connections.unwrap_or(d.max_connections),
        max_connections_per_address: raw
            .max_connections_per_address
            .unwrap_or(d.max_connections_per_address),
    };
    let api_requests_per_second = raw
        .api_requests_per_second
        .unwrap_or(DEFAULT_API_REQUESTS_PER_SECOND);
    if api_requests_per_second == 0 {
        return Err(invalid(
            "api_requests_per_second",
            "must be at least 1".into(),
        ));
    }
    for (key, value) in [
        ("max_connections", http.max_connections),
        (
            "max_connections_per_address",
            http.max_connections_per_address,
        ),
    ] {
        if value == 0 {
            return Err(invalid(key, "must be at least 1".into()));
        }
    }
    let trusted_proxies = match raw.trusted_proxies {
        None => DEFAULT_TRUSTED_PROXIES
            .iter()
            .map(|p| p.parse().expect("valid default"))
            .collect(),
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, text)| {
                parse_network(text).ok_or_else(|| {
                    invalid(
                        &format!("trusted_proxies[{i}]"),
                        format!("{text:?} is not an address or network such as \"10.0.0.0/8\""),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };

    let (sources, source_rules) = sources::build(raw.source, dedup_ttl_days, &invalid, &secret)?;

    let (alert_rules, alerts) = alerts::build(raw.alerts, &source_rules, &invalid, &secret)?;
    if let Some(url) = &raw.otlp_endpoint {
        otlp_endpoint(url).map_err(|e| invalid("otlp_endpoint", e))?;
    }

    Ok(Config {
        path: path.map(Path::to_owned),
        inline_secrets: inline_secrets.take(),
        listen,
        database_url,
        read_database_url,
        data_dir,
        public_url,
        retention_days,
        dedup_ttl_days,
        audit_retention_days,
        max_body_bytes,
        max_body_memory_bytes,
        rejections,
        demo_destination: raw.demo_destination.unwrap_or(false),
        session_idle_minutes: raw
            .session_idle_minutes
            .unwrap_or(DEFAULT_SESSION_IDLE_MINUTES)
            .max(1),
        metrics_token,
        metrics_listen,
        public_url_given,
        http,
        trusted_proxies,
        api_requests_per_second,
        sources,
        log_format: raw.log_format.unwrap_or_default(),
        otlp_endpoint: raw.otlp_endpoint,
        alert_rules,
        alerts,
    })
}

/// The file's tables as written. A value serde refuses (a wrong type, a
/// size or duration that does not convert, an unknown key in a table) is
/// an `Invalid` naming its key as the other checks do
/// (`source[0].destination[1].timeout_secs`), with its line; TOML that does
/// not parse is a `Parse` error showing where.
fn deserialize(shown_path: &Path, text: &str) -> Result<RawConfig, ConfigError> {
    let parse = |e: toml::de::Error| ConfigError::Parse {
        path: shown_path.to_owned(),
        message: e.to_string(),
    };
    let document = toml::Deserializer::parse(text).map_err(parse)?;
    serde_path_to_error::deserialize(document).map_err(|e| {
        let key = e.path().to_string();
        let e = e.into_inner();
        match e.span() {
            Some(span) if key != "." => ConfigError::Invalid {
                path: shown_path.to_owned(),
                problem: format!(
                    "{} (line {})",
                    e.message(),
                    text[..span.start.min(text.len())].matches('\n').count() + 1
                ),
                key,
            },
            _ => parse(e),
        }
    })
}

/// The log format and trace endpoint the config file asks for, read before
/// anything is logged (the file is checked fully later; a mistake there is
/// reported then, in text). Only `serve` exports traces: a CLI command's
/// spans are nobody's service.
pub fn telemetry_settings(explicit: Option<&Path>, serves: bool) -> crate::telemetry::Settings {
    let path = explicit.unwrap_or(Path::new(DEFAULT_CONFIG_PATH));
    let table = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| toml::from_str::<toml::Table>(&text).ok())
        .unwrap_or_default();
    let text = |key: &str| table.get(key).and_then(|v| v.as_str());
    crate::telemetry::Settings {
        log_format: match text("log_format") {
            Some("json") => crate::telemetry::LogFormat::Json,
            _ => crate::telemetry::LogFormat::Text,
        },
        otlp_endpoint: text("otlp_endpoint")
            .filter(|_| serves)
            .and_then(|url| otlp_endpoint(url).ok()),
    }
}

/// Where a source's provider posts: `base` (the public URL, or another
/// address of this server) and `/hooks/{slug}`.
pub fn receive_url(base: &str, slug: &str) -> String {
    format!("{}/hooks/{slug}", base.trim_end_matches('/'))
}

impl Config {
    /// The configured source named `slug`.
    pub fn source(&self, slug: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.slug == slug)
    }

    /// The origins the dashboard's state-changing requests may come from:
    /// `public_url`'s, and when it was not written and the server listens on
    /// loopback, the loopback names a browser may use for it.
    pub fn dashboard_origins(&self) -> Vec<String> {
        let mut origins = vec![self.public_url.clone()];
        if !self.public_url_given && self.listen.ip().is_loopback() {
            let port = self.listen.port();
            for host in ["127.0.0.1", "localhost", "[::1]"] {
                origins.push(format!("http://{host}:{port}"));
            }
        }
        origins
    }
}

/// A reverse proxy on the same host is the common case; nobody else can
/// connect from loopback.
pub const DEFAULT_TRUSTED_PROXIES: [&str; 2] = ["127.0.0.1/32", "::1/128"];

/// `10.0.0.0/8`, or a single address standing for its own /32 or /128.
fn parse_network(text: &str) -> Option<ipnet::IpNet> {
    text.parse().ok().or_else(|| {
        text.parse::<std::net::IpAddr>()
            .ok()
            .map(ipnet::IpNet::from)
    })
}

impl Config {
    /// Why the config file gives its secrets away, if it does: it holds
    /// some inline and other users may read it: anyone, or a group other
    /// than this process's own (the packaged 0640 root:replaysafe is read by
    /// the service's group alone).
    pub fn secrets_exposed(&self) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let path = self.path.as_ref()?;
        let meta = std::fs::metadata(path).ok()?;
        let mode = meta.mode() & 0o777;
        // SAFETY: getegid has no preconditions and cannot fail.
        let own_group = meta.gid() == unsafe { libc::getegid() };
        let others_read = mode & 0o004 != 0 || (mode & 0o040 != 0 && !own_group);
        (!self.inline_secrets.is_empty() && others_read).then(|| {
            format!(
                "{} is readable by other users (mode {mode:03o}) and holds secrets in \
                 itself ({}): write them as env:NAME or file:PATH, or chmod 600 it",
                path.display(),
                self.inline_secrets.join(", ")
            )
        })
    }

    /// The peer is a proxy whose `X-Forwarded-For` is believed.
    pub fn is_trusted_proxy(&self, peer: std::net::IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.trusted_proxies.iter().any(|net| net.contains(&peer))
    }
}

fn valid_slug(slug: &str) -> bool {
    (1..=64).contains(&slug.len())
        && slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// An OTLP/HTTP base URL. Credentials go in OTEL_EXPORTER_OTLP_HEADERS:
/// in the URL they would be printed by `config check` and in errors, and
/// the exporter would not send them.
fn otlp_endpoint(text: &str) -> Result<url::Url, String> {
    check_http_url(text)?;
    let url = url::Url::parse(text).map_err(|e| e.to_string())?;
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() {
        return Err(
            "must not carry credentials or a query: give a collector's token in OTEL_EXPORTER_OTLP_HEADERS"
                .into(),
        );
    }
    Ok(url)
}

/// Written exactly as `http://` or `https://` and a host: the text is used
/// as written (the cookie's Secure flag, Twilio's signed URL), so a URL the
/// parser would first trim or lowercase is refused too.
fn check_http_url(text: &str) -> Result<(), String> {
    let written = text.starts_with("http://") || text.starts_with("https://");
    match url::Url::parse(text) {
        Ok(url) if written && url.host().is_some() => Ok(()),
        _ => Err(format!("{text:?} is not an http:// or https:// URL")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers;

    /// Config text as a file at /etc/rs/replaysafe.toml, with these
    /// environment variables (the units tests use it too).
    pub(super) fn parse(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        parse_and_validate(Some(Path::new("/etc/rs/replaysafe.toml")), text, &env)
    }

    const STRIPE: &str = r#"
        [[source]]
        slug = "stripe"
        provider = "stripe"
        secrets = ["env:STRIPE_SECRET", "whsec_old"]
        destination = "http://127.0.0.1:4000/stripe"
    "#;

    #[test]
    fn defaults_apply_and_env_secrets_resolve() {
        let c = parse(STRIPE, &[("STRIPE_SECRET", "whsec_new")]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:3000");
        assert_eq!(c.data_dir, PathBuf::from("/etc/rs/./data"));
        assert_eq!(c.retention_days, 30);
        assert_eq!(c.max_body_bytes, 1024 * 1024);
        let s = &c.sources[0];
        assert_eq!(s.mode, Mode::Ack);
        assert_eq!(s.destinations[0].max_attempts, 8);
        assert_eq!(s.destinations[0].name, "default");
        // Both secrets verify, the one from the environment first.
        let body = br#"{"id":"evt_1"}"#;
        for (secret, matched) in [
            ("whsec_new", "secret 1 of 2"),
            ("whsec_old", "secret 2 of 2"),
        ] {
            let mac = providers::hmac_sha256(secret.as_bytes(), &[b"1700000000.", body]);
            let signature = hex::encode(hmac::Mac::finalize(mac).into_bytes());
            let request = providers::Inbound {
                headers: vec![(
                    "stripe-signature".into(),
                    format!("t=1700000000,v1={signature}"),
                )],
                body: body.to_vec(),
                ..Default::default()
            };
            let verdict = s.scheme.verify(&request, None).unwrap();
            assert!(verdict.ends_with(matched), "{verdict}");
        }
    }

    #[test]
    fn missing_env_secret_names_the_key_and_variable() {
        let e = parse(STRIPE, &[]).unwrap_err().to_string();
        assert!(e.contains("source[0].secrets[0]"), "{e}");
        assert!(e.contains("STRIPE_SECRET"), "{e}");
    }

    #[test]
    fn database_url_from_environment_wins() {
        let text = "database_url = \"postgres://file/db\"";
        let c = parse(text, &[("DATABASE_URL", "postgres://env/db")]).unwrap();
        assert_eq!(c.database_url.unwrap().expose(), "postgres://env/db");
        let c = parse(text, &[]).unwrap();
        assert_eq!(c.database_url.unwrap().expose(), "postgres://file/db");
    }

    #[test]
    fn a_read_replica_needs_a_database_and_its_variable_wins() {
        let text = "database_url = \"postgres://primary/db\"\nread_database_url = \"postgres://standby/db\"";
        let c = parse(text, &[]).unwrap();
        assert_eq!(
            c.read_database_url.unwrap().expose(),
            "postgres://standby/db"
        );
        let c = parse(text, &[("READ_DATABASE_URL", "postgres://other/db")]).unwrap();
        assert_eq!(c.read_database_url.unwrap().expose(), "postgres://other/db");
        assert!(parse("database_url = \"postgres://p/db\"", &[])
            .unwrap()
            .read_database_url
            .is_none());
        for (text, why) in [
            (
                "read_database_url = \"postgres://standby/db\"",
                "needs database_url",
            ),
            (
                "database_url = \"postgres://p/db\"\nread_database_url = \"mysql://s/db\"",
                "postgres://",
            ),
        ] {
            let e = parse(text, &[]).unwrap_err().to_string();
            assert!(e.contains("read_database_url") && e.contains(why), "{e}");
        }
    }

    #[test]
    fn secrets_never_print() {
        let c = parse(STRIPE, &[("STRIPE_SECRET", "whsec_topsecret")]).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(shown.contains("[redacted]"));
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = parse("listne = \"127.0.0.1:1\"", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("listne"), "{e}");
    }

    /// The names of a `struct NAME { ... }`'s fields in Rust source.
    fn fields(source: &str, name: &str) -> Vec<String> {
        let start = source
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("struct {name}"));
        let body = &source[start..];
        let body = &body[..body.find("\n}").unwrap()];
        body.lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && !l.starts_with('#') && l.contains(':'))
            .map(|l| l.split(':').next().unwrap().trim().to_owned())
            // A field's name, not a line of a multi-line attribute.
            .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .collect()
    }

    #[test]
    fn an_otlp_endpoint_is_a_plain_url_and_credentials_are_refused_unrepeated() {
        let ok = parse(
            "otlp_endpoint = \"http://127.0.0.1:4318\"\n[[source]]\nslug = \"a\"\nprovider = \"github\"\nsecrets = [\"s\"]\n",
            &[],
        )
        .unwrap();
        assert_eq!(ok.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        for bad in [
            "https://user:collector-password@otel.example",
            "https://token-as-user@otel.example",
            "https://otel.example/?api_key=collector-password",
            "ftp://otel.example",
        ] {
            let text = format!(
                "otlp_endpoint = \"{bad}\"\n[[source]]\nslug = \"a\"\nprovider = \"github\"\nsecrets = [\"s\"]\n"
            );
            let e = parse(&text, &[]).unwrap_err().to_string();
            assert!(e.contains("otlp_endpoint"), "{e}");
            if !bad.starts_with("ftp") {
                assert!(e.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{e}");
                assert!(
                    !e.contains("collector-password") && !e.contains("token-as-user"),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn the_demo_config_parses_with_its_five_sources() {
        let demo = include_str!("../../../demo/replaysafe.toml");
        let config = parse(demo, &[]).unwrap_or_else(|e| panic!("{e}"));
        let slugs: Vec<&str> = config.sources.iter().map(|s| s.slug.as_str()).collect();
        assert_eq!(slugs, ["demo", "stripe", "github", "slack", "shop"]);
        // The fan-out source reaches both of the demo's applications.
        let shop: Vec<&str> = config.sources[4]
            .destinations
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(shop, ["billing", "crm"]);
        // scripts/run signs traffic for each.
        for s in &config.sources {
            let signed = s.scheme.sign_sample("evt_demo", 1_800_000_000);
            assert!(signed.is_ok(), "{}: {:?}", s.slug, signed.err());
        }
    }

    #[test]
    fn a_config_file_others_can_read_must_not_hold_secrets_itself() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replaysafe.toml");
        let read = |text: &str, mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let env = |name: &str| (name == "GH_SECRET").then(|| "from-env".to_owned());
            parse_and_validate(Some(&path), text, &env)
                .unwrap()
                .secrets_exposed()
        };
        let inline = "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"inline\"]\n";
        let why = read(inline, 0o644).expect("exposed");
        assert!(
            why.contains("mode 644") && why.contains("source[0].secrets[0]"),
            "{why}"
        );
        assert!(
            !why.contains("inline\""),
            "the secret itself is never said: {why}"
        );
        assert_eq!(
            read(inline, 0o640),
            None,
            "this process's own group (the service's) may read it"
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&path, None, Some(1)).unwrap();
            let why = read(inline, 0o640).expect("another group's members are others");
            assert!(why.contains("mode 640"), "{why}");
        }
        assert_eq!(read(inline, 0o600), None);
        let from_env = inline.replace("\"inline\"", "\"env:GH_SECRET\"");
        assert_eq!(read(&from_env, 0o644), None);
    }

    #[test]
    fn the_example_config_parses_and_shows_every_key() {
        let example = include_str!("../../../replaysafe.example.toml");
        // Every secret in it is an env: one (a copied example gives none away).
        let whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let vars = [
            ("ALERT_WEBHOOK_SECRET", whsec),
            (
                "SLACK_WEBHOOK_URL",
                "https://hooks.slack.com/services/T000/B000/XXXX",
            ),
            ("SMTP_PASSWORD", "smtp-password"),
            ("STRIPE_WEBHOOK_SECRET", "whsec_example_stripe_secret"),
            ("STRIPE_DESTINATION_SECRET", whsec),
            ("GITHUB_WEBHOOK_SECRET", "github-secret"),
            ("SHOPIFY_WEBHOOK_SECRET", "shopify-secret"),
            ("LINEAR_WEBHOOK_SECRET", "linear-secret"),
            ("ACME_WEBHOOK_SECRET", "acme-secret"),
            ("SLACK_SIGNING_SECRET", "slack-secret"),
            ("STANDARD_WEBHOOK_SECRET", whsec),
            ("TWILIO_AUTH_TOKEN", "twilio-token"),
        ];
        let config = parse(example, &vars).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            config.inline_secrets,
            Vec::<String>::new(),
            "inline secrets"
        );
        assert_eq!(config.sources.len(), 9);
        assert_eq!(config.alerts.channels.len(), 3);
        assert_eq!(
            config.alert_rules.per_source["stripe"]
                .dead_letters
                .as_ref()
                .unwrap()
                .threshold,
            5
        );
        let shown = |key: &str| {
            example.lines().any(|l| {
                let l = l.trim_start_matches('#').trim_start();
                l.starts_with(&format!("{key} ="))
                    || l.starts_with(&format!("[{key}]"))
                    || l.contains(&format!(".{key}]"))
                    || l.starts_with(&format!("[[{key}]]"))
            })
        };
        let mut missing = Vec::new();
        let mut checked = 0;
        for (file, structs) in [
            (include_str!("mod.rs"), &["RawConfig", "RawSource"][..]),
            (include_str!("destination.rs"), &["RawDestination"][..]),
            (include_str!("reconcile.rs"), &["RawReconcile"][..]),
            (
                include_str!("../providers/declarative/spec.rs"),
                &["RawSignature"][..],
            ),
            (
                include_str!("alerts.rs"),
                &[
                    "RawAlerts",
                    "RawRules",
                    "RawStorm",
                    "RawWindowed",
                    "RawBacklog",
                    "RawFailing",
                    "RawChannel",
                ][..],
            ),
        ] {
            for s in structs {
                for key in fields(file, s) {
                    // `channel` and `source` are array tables, named as such.
                    let key = match key.as_str() {
                        "channel" => "alerts.channel".to_owned(),
                        _ => key,
                    };
                    checked += 1;
                    if !shown(&key) {
                        missing.push(format!("{s}.{key}"));
                    }
                }
            }
        }
        assert!(checked > 60, "only {checked} keys found in the Raw structs");
        assert!(
            missing.is_empty(),
            "replaysafe.example.toml lacks {missing:?}"
        );
    }

    /// The example says it gives each key "with its default or an example":
    /// each key it gives a default for, written alone, must change nothing
    /// (it once gave max_body_memory_bytes as 64 MiB; the default is 256).
    #[test]
    fn the_example_gives_the_codes_defaults() {
        let example: toml::Table = include_str!("../../../replaysafe.example.toml")
            .parse()
            .unwrap();
        // Examples, not defaults: addresses and names a deployment chooses.
        const EXAMPLES: &[&str] = &[
            "public_url",
            "slug",
            "provider",
            "secrets",
            "destination",
            "destination_secret",
        ];
        let same = |base: &str, key: &str, value: &toml::Value| {
            let alone = format!(
                "{:?}",
                parse(base, &[]).unwrap_or_else(|e| panic!("{base}: {e}"))
            );
            let with = format!("{base}\n{key} = {value}\n");
            let given = format!(
                "{:?}",
                parse(&with, &[]).unwrap_or_else(|e| panic!("{with}: {e}"))
            );
            (alone == given).then_some(()).ok_or_else(|| {
                format!(
                    "{key} = {value} (in {:?})",
                    base.lines().next().unwrap_or("the top level")
                )
            })
        };
        let scalars = |table: &toml::Table| -> Vec<(String, toml::Value)> {
            table
                .iter()
                .filter(|(k, v)| !v.is_table() && !v.is_array() || k.as_str() == "trusted_proxies")
                .filter(|(k, _)| !EXAMPLES.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let mut wrong = Vec::new();
        let mut checked = 0;
        for (key, value) in scalars(&example) {
            checked += 1;
            wrong.extend(same("", &key, &value).err());
        }
        let alerts = example["alerts"].as_table().unwrap();
        for (key, value) in scalars(alerts) {
            checked += 1;
            wrong.extend(same("[alerts]", &key, &value).err());
        }
        for (rule, keys) in alerts["rules"].as_table().unwrap() {
            let base = format!("[alerts.rules.{rule}]");
            for (key, value) in scalars(keys.as_table().unwrap()) {
                checked += 1;
                wrong.extend(same(&base, &key, &value).err());
            }
        }
        let stripe = example["source"].as_array().unwrap()[0].as_table().unwrap();
        let base = "[[source]]\nslug = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\ndestination = \"http://127.0.0.1:9/x\"";
        for (key, value) in scalars(stripe) {
            checked += 1;
            wrong.extend(same(base, &key, &value).err());
        }
        assert!(checked > 40, "only {checked} keys checked");
        assert!(
            wrong.is_empty(),
            "the example's defaults are not the code's: {wrong:#?}"
        );
    }

    #[test]
    fn alert_rules_take_the_defaults_then_alerts_rules_then_the_sources_own() {
        let config = parse(
            r#"
            [alerts]
            repeat_after_minutes = 0
            [alerts.rules.dead_letters]
            threshold = 5
            [alerts.rules.backlog]
            enabled = false
            [[source]]
            slug = "a"
            provider = "github"
            secrets = ["x"]
            [source.alerts.dead_letters]
            window_minutes = 30
            [source.alerts.backlog]
            oldest_due_minutes = 15
            [[source]]
            slug = "b"
            provider = "github"
            secrets = ["x"]
            [source.alerts.duplicate_storm]
            enabled = false
            "#,
            &[],
        )
        .unwrap();
        let (a, b) = (
            &config.alert_rules.per_source["a"],
            &config.alert_rules.per_source["b"],
        );
        let dead = a.dead_letters.as_ref().unwrap();
        assert_eq!((dead.window_minutes, dead.threshold), (30, 5));
        assert_eq!(
            a.backlog.as_ref().unwrap().oldest_due_minutes,
            15,
            "a section turns a rule on"
        );
        assert!(b.backlog.is_none(), "off in [alerts.rules]");
        assert!(b.duplicate_storm.is_none());
        assert_eq!(b.dead_letters.as_ref().unwrap().window_minutes, 10);
        assert_eq!(
            a.signature_failures,
            replaysafe_types::alerts::RuleSet::default().signature_failures
        );
        assert_eq!(config.alerts.repeat_after, None);
        assert_eq!(config.alerts.every, std::time::Duration::from_secs(30));
        assert!(config.alerts.channels.is_empty());
    }

    #[test]
    fn invalid_values_name_their_key() {
        let cases = [
            ("[alerts.rules.dead_letters]\nthreshold = 0", "alerts.rules.dead_letters.threshold"),
            ("[alerts.rules.duplicate_storm]\nratio = nan", "alerts.rules.duplicate_storm.ratio"),
            ("[alerts.rules.duplicate_storm]\nratio = inf", "alerts.rules.duplicate_storm.ratio"),
            ("[alerts.rules.backlog]\noldest_due_minutes = 4000000000", "alerts.rules.backlog.oldest_due_minutes"),
            ("[alerts]\nrepeat_after_minutes = 99999999999", "alerts.repeat_after_minutes"),
            ("[[alerts.channel]]\nname = \"s\"\nkind = \"slack\"\nurl = \"http://hooks.example.com/T0/B0/x\"", "alerts.channel[0].url"),
            (
                "[[alerts.channel]]\nname = \"m\"\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nsmtp_security = \"none\"\nusername = \"u\"\npassword = \"p\"\nfrom = \"a@b.c\"\nto = [\"a@b.c\"]",
                "alerts.channel[0].smtp_security",
            ),
            ("[alerts.rules.duplicate_storm]\nmin_rate = 2.0", "alerts.rules.duplicate_storm.min_rate"),
            ("[[alerts.channel]]\nname = \"x\"\nkind = \"pager\"", "alerts.channel[0].kind"),
            ("[[alerts.channel]]\nname = \"x\"\nkind = \"webhook\"\nurl = \"http://h/\"", "alerts.channel[0].secret"),
            (
                "[[alerts.channel]]\nname = \"m\"\nkind = \"email\"\nsmtp_host = \"h\"\nfrom = \"not an address\"\nto = [\"a@b.c\"]",
                "alerts.channel[0].from",
            ),
            (
                "[[alerts.channel]]\nname = \"s\"\nkind = \"slack\"\nurl = \"http://h/\"\nrules = [\"everything\"]",
                "alerts.channel[0].rules",
            ),
            ("dedup_ttl_days = 3", "dedup_ttl_days"),
            ("listen = \"nowhere\"", "listen"),
            ("database_url = \"mysql://x\"", "database_url"),
            (
                "[[source]]\nslug = \"Bad Slug\"\nprovider = \"github\"\nsecrets = [\"x\"]",
                "source[0].slug",
            ),
            (
                "[[source]]\nslug = \"gh\"\nprovider = \"github\"",
                "source[0].secrets",
            ),
            (
                "[[source]]\nslug = \"d\"\nprovider = \"discord\"\npublic_key = \"ab\"",
                "source[0].mode",
            ),
            (
                "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"x\"]\ndestination = \"ftp://x\"",
                "source[0].destination",
            ),
            (
                "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"x\"]\ndestination = \" https://x\"",
                "source[0].destination",
            ),
            ("public_url = \"HTTPS://x\"", "public_url"),
            ("header_timeout_secs = 0", "header_timeout_secs"),
            ("max_connections_per_address = 0", "max_connections_per_address"),
            ("trusted_proxies = [\"10.0.0.0/33\"]", "trusted_proxies[0]"),
            (
                "[[source]]\nslug = \"a\"\nprovider = \"github\"\nsecrets = [\"x\"]\n[[source]]\nslug = \"a\"\nprovider = \"github\"\nsecrets = [\"x\"]",
                "source[1].slug",
            ),
            (
                "[[source]]\nslug = \"s\"\nprovider = \"standard\"\nsecrets = [\"whsec_%%%\"]",
                "source[0].secrets[0]",
            ),
            (
                "[[source]]\nslug = \"g\"\nprovider = \"github\"\nsecrets = [\"x\"]\ndestination_secret = \"whsec_%%%\"",
                "source[0].destination_secret",
            ),
            (
                "[[source]]\nslug = \"t\"\nprovider = \"twilio\"\nsecrets = [\"token\"]",
                "source[0].public_url",
            ),
            (
                "[[source]]\nslug = \"a\"\nprovider = \"alipay\"\npublic_key = \"not a key\"",
                "source[0].public_key",
            ),
            (
                "[[source]]\nslug = \"w\"\nprovider = \"wechatpay\"\napi_v3_key = \"0123456789abcdef0123456789abcdef\"",
                "source[0].platform_keys",
            ),
        ];
        for (text, key) in cases {
            let e = parse(text, &[]).unwrap_err().to_string();
            assert!(e.contains(&format!("`{key}`")), "{text:?} gave {e}");
        }
    }

    #[test]
    fn an_unwritten_public_url_on_loopback_accepts_its_loopback_names() {
        let c = parse("listen = \"127.0.0.1:4000\"", &[]).unwrap();
        assert_eq!(
            c.dashboard_origins(),
            [
                "http://127.0.0.1:4000",
                "http://127.0.0.1:4000",
                "http://localhost:4000",
                "http://[::1]:4000"
            ]
        );
        let c = parse("public_url = \"https://hooks.example.com\"", &[]).unwrap();
        assert_eq!(c.dashboard_origins(), ["https://hooks.example.com"]);
    }

    #[test]
    fn trusted_proxies_take_networks_and_bare_addresses() {
        let c = parse("", &[]).unwrap();
        assert!(c.is_trusted_proxy("127.0.0.1".parse().unwrap()));
        assert!(c.is_trusted_proxy("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!c.is_trusted_proxy("127.0.0.2".parse().unwrap()));
        let c = parse(r#"trusted_proxies = ["10.1.0.0/16", "2001:db8::7"]"#, &[]).unwrap();
        assert!(c.is_trusted_proxy("10.1.200.3".parse().unwrap()));
        assert!(c.is_trusted_proxy("2001:db8::7".parse().unwrap()));
        assert!(!c.is_trusted_proxy("2001:db8::8".parse().unwrap()));
        assert!(
            !c.is_trusted_proxy("127.0.0.1".parse().unwrap()),
            "the list replaces the default"
        );
        assert_eq!(c.http.header_timeout, DEFAULT_HTTP_LIMITS.header_timeout);
    }

    #[test]
    fn unknown_provider_is_refused() {
        let e = parse(
            "[[source]]\nslug = \"x\"\nprovider = \"paypal\"\nsecrets = [\"s\"]",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("paypal"), "{e}");
    }
}
