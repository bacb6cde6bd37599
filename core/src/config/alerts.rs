//! `[alerts]`: the alert rules' thresholds (defaults, then `[alerts.rules.*]`,
//! then a source's `[source.alerts.*]`), how often they are evaluated, and
//! the channels alerts are sent to.

use std::time::Duration;

use replaysafe_types::alerts::{
    AlertRules, BacklogRule, CountRule, FailingRule, IncidentRule, RuleSet, StormRule,
};
use serde::Deserialize;

use super::units;
use crate::secret::Secret;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    #[serde(default, deserialize_with = "units::secs")]
    evaluate_every_secs: Option<u64>,
    #[serde(default, deserialize_with = "units::minutes")]
    repeat_after_minutes: Option<u64>,
    #[serde(default, deserialize_with = "units::secs")]
    resolve_after_secs: Option<u64>,
    #[serde(default)]
    rules: RawRules,
    #[serde(default)]
    channel: Vec<RawChannel>,
}

/// Overrides of each rule; `enabled = false` turns one off.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRules {
    duplicate_storm: Option<RawStorm>,
    dead_letters: Option<RawWindowed>,
    backlog: Option<RawBacklog>,
    signature_failures: Option<RawWindowed>,
    destination_failing: Option<RawFailing>,
    missed_events: Option<RawWindowed>,
    incident_opened: Option<RawIncident>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStorm {
    enabled: Option<bool>,
    ratio: Option<f64>,
    #[serde(default, deserialize_with = "units::minutes")]
    window_minutes: Option<u32>,
    #[serde(default, deserialize_with = "units::hours")]
    baseline_hours: Option<u32>,
    min_deliveries: Option<i64>,
    min_rate: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindowed {
    enabled: Option<bool>,
    #[serde(default, deserialize_with = "units::minutes")]
    window_minutes: Option<u32>,
    threshold: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBacklog {
    enabled: Option<bool>,
    #[serde(default, deserialize_with = "units::minutes")]
    oldest_due_minutes: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFailing {
    enabled: Option<bool>,
    #[serde(default, deserialize_with = "units::minutes")]
    minutes: Option<u32>,
    min_attempts: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIncident {
    enabled: Option<bool>,
    min_events: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChannel {
    name: String,
    kind: String,
    url: Option<String>,
    secret: Option<String>,
    smtp_host: Option<String>,
    smtp_port: Option<u16>,
    /// "starttls" (default), "tls", or "none" for a local relay.
    smtp_security: Option<String>,
    username: Option<String>,
    password: Option<String>,
    from: Option<String>,
    #[serde(default)]
    to: Vec<String>,
    /// The rules whose alerts go here; absent: all.
    rules: Option<Vec<String>>,
}

/// Where alerts go.
#[derive(Debug, Clone)]
pub struct AlertChannel {
    pub name: String,
    pub kind: ChannelKind,
    /// The rules whose alerts it gets; None: all.
    pub rules: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub enum ChannelKind {
    /// JSON, signed with the Standard Webhooks scheme under `secret`.
    Webhook { url: String, secret: Secret },
    /// A Slack incoming webhook (its URL is its secret).
    Slack { url: Secret },
    Email {
        host: String,
        port: u16,
        security: SmtpSecurity,
        credentials: Option<(String, Secret)>,
        from: String,
        to: Vec<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    None,
    StartTls,
    Tls,
}

#[derive(Debug, Clone)]
pub struct AlertsConfig {
    pub every: Duration,
    /// A firing alert is sent again this often; None: once.
    pub repeat_after: Option<Duration>,
    /// A firing alert resolves once its condition has not held for this
    /// long: a figure hovering at its threshold neither fires nor resolves
    /// at every evaluation.
    pub resolve_after: Duration,
    pub channels: Vec<AlertChannel>,
}

/// As Alertmanager's and most on-call tools' default: five quiet minutes.
pub const DEFAULT_RESOLVE_AFTER: Duration = Duration::from_secs(300);

pub(super) type Invalid<'a> = &'a dyn Fn(&str, String) -> super::ConfigError;
pub(super) type SecretOf<'a> = &'a dyn Fn(&str, &str) -> Result<Secret, super::ConfigError>;

fn positive<T: PartialOrd + Default + Copy>(
    invalid: Invalid,
    key: &str,
    value: Option<T>,
    default: T,
) -> Result<T, super::ConfigError> {
    match value {
        // Not greater than 0, NaN included: it is no number of anything.
        Some(v) if v.partial_cmp(&T::default()) != Some(std::cmp::Ordering::Greater) => {
            Err(invalid(key, "must be above 0".into()))
        }
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// The longest window or wait a rule takes: a week (and a 30-day baseline).
const MAX_MINUTES: u32 = 7 * 24 * 60;
const MAX_BASELINE_HOURS: u32 = 30 * 24;

/// A window in minutes: above 0, at most `max`.
fn minutes(
    invalid: Invalid,
    key: &str,
    value: Option<u32>,
    default: u32,
    max: u32,
) -> Result<u32, super::ConfigError> {
    let v = positive(invalid, key, value, default)?;
    if v > max {
        return Err(invalid(key, format!("must be at most {max}")));
    }
    Ok(v)
}

trait Section {
    fn enabled(&self) -> Option<bool>;
}

macro_rules! section {
    ($($t:ty),*) => {$(impl Section for $t {
        fn enabled(&self) -> Option<bool> {
            self.enabled
        }
    })*};
}
section!(RawStorm, RawWindowed, RawBacklog, RawFailing, RawIncident);

/// A rule's section over what it had: absent, it keeps that; present, it
/// turns the rule on with its values (over what it had, else the
/// defaults), unless `enabled = false`.
fn overlay<R: Section, T: Clone>(
    raw: &Option<R>,
    had: &Option<T>,
    default: &Option<T>,
    build: impl FnOnce(&R, T) -> Result<T, super::ConfigError>,
) -> Result<Option<T>, super::ConfigError> {
    match raw {
        None => Ok(had.clone()),
        Some(r) if r.enabled() == Some(false) => Ok(None),
        Some(r) => {
            let base = had.clone().or_else(|| default.clone());
            build(r, base.expect("every rule has a default")).map(Some)
        }
    }
}

/// A count rule's section (`window_minutes`, `threshold`) over `had`, under
/// config key `at`.
fn count_rule(
    raw: &RawWindowed,
    had: CountRule,
    at: &str,
    invalid: Invalid,
) -> Result<CountRule, super::ConfigError> {
    let k = |f: &str| format!("{at}.{f}");
    Ok(CountRule {
        window_minutes: minutes(
            invalid,
            &k("window_minutes"),
            raw.window_minutes,
            had.window_minutes,
            MAX_MINUTES,
        )?,
        threshold: positive(invalid, &k("threshold"), raw.threshold, had.threshold)?,
    })
}

/// `base` with `raw`'s overrides, under config key `at` (say
/// `alerts.rules` or `source[2].alerts`).
pub(super) fn rules(
    base: &RuleSet,
    raw: &RawRules,
    at: &str,
    invalid: Invalid,
) -> Result<RuleSet, super::ConfigError> {
    let d = RuleSet::default();
    let key = |rule: &str, field: &str| format!("{at}.{rule}.{field}");
    let at_rule = |rule: &str| format!("{at}.{rule}");
    Ok(RuleSet {
        duplicate_storm: overlay(
            &raw.duplicate_storm,
            &base.duplicate_storm,
            &d.duplicate_storm,
            |r, b| {
                let k = |f: &str| key("duplicate_storm", f);
                let min_rate = r.min_rate.unwrap_or(b.min_rate);
                if !(0.0..=1.0).contains(&min_rate) {
                    return Err(invalid(&k("min_rate"), "must be between 0 and 1".into()));
                }
                let ratio = positive(invalid, &k("ratio"), r.ratio, b.ratio)?;
                if !ratio.is_finite() {
                    return Err(invalid(&k("ratio"), "must be a finite number".into()));
                }
                Ok(StormRule {
                    ratio,
                    window_minutes: minutes(
                        invalid,
                        &k("window_minutes"),
                        r.window_minutes,
                        b.window_minutes,
                        MAX_MINUTES,
                    )?,
                    baseline_hours: minutes(
                        invalid,
                        &k("baseline_hours"),
                        r.baseline_hours,
                        b.baseline_hours,
                        MAX_BASELINE_HOURS,
                    )?,
                    min_deliveries: positive(
                        invalid,
                        &k("min_deliveries"),
                        r.min_deliveries,
                        b.min_deliveries,
                    )?,
                    min_rate,
                })
            },
        )?,
        dead_letters: overlay(
            &raw.dead_letters,
            &base.dead_letters,
            &d.dead_letters,
            |r, b| count_rule(r, b, &at_rule("dead_letters"), invalid),
        )?,
        backlog: overlay(&raw.backlog, &base.backlog, &d.backlog, |r, b| {
            Ok(BacklogRule {
                oldest_due_minutes: minutes(
                    invalid,
                    &key("backlog", "oldest_due_minutes"),
                    r.oldest_due_minutes,
                    b.oldest_due_minutes,
                    MAX_MINUTES,
                )?,
            })
        })?,
        signature_failures: overlay(
            &raw.signature_failures,
            &base.signature_failures,
            &d.signature_failures,
            |r, b| count_rule(r, b, &at_rule("signature_failures"), invalid),
        )?,
        destination_failing: overlay(
            &raw.destination_failing,
            &base.destination_failing,
            &d.destination_failing,
            |r, b| {
                let k = |f: &str| key("destination_failing", f);
                Ok(FailingRule {
                    minutes: minutes(invalid, &k("minutes"), r.minutes, b.minutes, MAX_MINUTES)?,
                    min_attempts: positive(
                        invalid,
                        &k("min_attempts"),
                        r.min_attempts,
                        b.min_attempts,
                    )?,
                })
            },
        )?,
        missed_events: overlay(
            &raw.missed_events,
            &base.missed_events,
            &d.missed_events,
            |r, b| count_rule(r, b, &at_rule("missed_events"), invalid),
        )?,
        incident_opened: overlay(
            &raw.incident_opened,
            &base.incident_opened,
            &d.incident_opened,
            |r, b| {
                Ok(IncidentRule {
                    min_events: positive(
                        invalid,
                        &key("incident_opened", "min_events"),
                        r.min_events,
                        b.min_events,
                    )?,
                })
            },
        )?,
    })
}

/// The global rules (defaults with `[alerts.rules]`), each source's with
/// its own overrides, and the channels.
pub(super) fn build(
    raw: Option<RawAlerts>,
    sources: &[(String, Option<RawRules>)],
    invalid: Invalid,
    secret: SecretOf,
) -> Result<(AlertRules, AlertsConfig), super::ConfigError> {
    let raw = raw.unwrap_or_default();
    let global = rules(&RuleSet::default(), &raw.rules, "alerts.rules", invalid)?;
    let mut per_source = std::collections::BTreeMap::new();
    for (i, (slug, own)) in sources.iter().enumerate() {
        let set = match own {
            Some(own) => rules(&global, own, &format!("source[{i}].alerts"), invalid)?,
            None => global.clone(),
        };
        per_source.insert(slug.clone(), set);
    }
    let every = positive(
        invalid,
        "alerts.evaluate_every_secs",
        raw.evaluate_every_secs,
        30,
    )?;
    if every > 3600 {
        return Err(invalid(
            "alerts.evaluate_every_secs",
            "must be at most 3600".into(),
        ));
    }
    let every = Duration::from_secs(every);
    let repeat_after = match raw.repeat_after_minutes {
        Some(0) => None,
        Some(m) if m > MAX_MINUTES as u64 => {
            return Err(invalid(
                "alerts.repeat_after_minutes",
                format!("must be at most {MAX_MINUTES} (0: never)"),
            ))
        }
        Some(m) => Some(Duration::from_secs(m * 60)),
        None => Some(Duration::from_secs(60 * 60)),
    };
    let resolve_after = match raw.resolve_after_secs {
        Some(s) if s > MAX_MINUTES as u64 * 60 => {
            return Err(invalid(
                "alerts.resolve_after_secs",
                format!("must be at most {}", MAX_MINUTES as u64 * 60),
            ))
        }
        Some(s) => Duration::from_secs(s),
        None => DEFAULT_RESOLVE_AFTER,
    };
    let mut channels: Vec<AlertChannel> = Vec::new();
    for (i, c) in raw.channel.into_iter().enumerate() {
        let at = |field: &str| format!("alerts.channel[{i}].{field}");
        if !replaysafe_types::auth::valid_name(&c.name) || channels.iter().any(|o| o.name == c.name)
        {
            return Err(invalid(
                &at("name"),
                format!(
                    "{:?}: a unique name of letters, digits, '.', '_', '-' or '@'",
                    c.name
                ),
            ));
        }
        if let Some(rules) = &c.rules {
            if let Some(bad) = rules
                .iter()
                .find(|r| !replaysafe_types::alerts::RULES.contains(&r.as_str()))
            {
                return Err(invalid(
                    &at("rules"),
                    format!(
                        "{bad:?} is not one of {}",
                        replaysafe_types::alerts::RULES.join(", ")
                    ),
                ));
            }
        }
        let required = |value: Option<String>, field: &str| {
            value
                .filter(|v| !v.is_empty())
                .ok_or_else(|| invalid(&at(field), format!("a {} channel needs one", c.kind)))
        };
        let kind = match c.kind.as_str() {
            "webhook" => {
                let url = required(c.url, "url")?;
                super::check_http_url(&url).map_err(|p| invalid(&at("url"), p))?;
                let secret = secret(&at("secret"), &required(c.secret, "secret")?)?;
                crate::providers::standard::decode_secret(secret.expose())
                    .map_err(|p| invalid(&at("secret"), p))?;
                ChannelKind::Webhook { url, secret }
            }
            "slack" => {
                let url = secret(&at("url"), &required(c.url, "url")?)?;
                // The URL is the secret: the error never repeats it.
                let parsed = url::Url::parse(url.expose()).ok();
                let fine = parsed.as_ref().is_some_and(|u| {
                    u.scheme() == "https" || (u.scheme() == "http" && is_loopback(u.host_str()))
                });
                if !fine {
                    return Err(invalid(
                        &at("url"),
                        "is not an https:// URL (a Slack incoming webhook's; http only to this machine)".into(),
                    ));
                }
                ChannelKind::Slack { url }
            }
            "email" => {
                let host = required(c.smtp_host, "smtp_host")?;
                let security = match c.smtp_security.as_deref().unwrap_or("starttls") {
                    "starttls" => SmtpSecurity::StartTls,
                    "tls" => SmtpSecurity::Tls,
                    "none" => SmtpSecurity::None,
                    other => {
                        return Err(invalid(
                            &at("smtp_security"),
                            format!("{other:?} is not one of starttls, tls, none"),
                        ))
                    }
                };
                let port = c.smtp_port.unwrap_or(match security {
                    SmtpSecurity::Tls => 465,
                    SmtpSecurity::StartTls => 587,
                    SmtpSecurity::None => 25,
                });
                let credentials = match (c.username, c.password) {
                    (Some(u), Some(p)) => Some((u, secret(&at("password"), &p)?)),
                    (None, None) => None,
                    _ => {
                        return Err(invalid(
                            &at("username"),
                            "give both username and password, or neither".into(),
                        ))
                    }
                };
                // A password goes in the clear only to this machine's relay.
                if credentials.is_some()
                    && security == SmtpSecurity::None
                    && !is_loopback(Some(&host))
                {
                    return Err(invalid(
                        &at("smtp_security"),
                        "\"none\" would send the password in the clear: use starttls or tls, or a relay on this machine".into(),
                    ));
                }
                let from = required(c.from, "from")?;
                if c.to.is_empty() {
                    return Err(invalid(
                        &at("to"),
                        "an email channel needs at least one address".into(),
                    ));
                }
                for (j, address) in std::iter::once(&from).chain(&c.to).enumerate() {
                    if address.parse::<lettre::Address>().is_err() {
                        let field = if j == 0 {
                            "from".to_owned()
                        } else {
                            format!("to[{}]", j - 1)
                        };
                        return Err(invalid(
                            &at(&field),
                            format!("{address:?} is not an email address"),
                        ));
                    }
                }
                ChannelKind::Email {
                    host,
                    port,
                    security,
                    credentials,
                    from,
                    to: c.to,
                }
            }
            other => {
                return Err(invalid(
                    &at("kind"),
                    format!("{other:?} is not one of webhook, slack, email"),
                ))
            }
        };
        channels.push(AlertChannel {
            name: c.name,
            kind,
            rules: c.rules,
        });
    }
    Ok((
        AlertRules { per_source },
        AlertsConfig {
            every,
            repeat_after,
            resolve_after,
            channels,
        },
    ))
}

fn is_loopback(host: Option<&str>) -> bool {
    match host {
        Some("localhost") => true,
        Some(h) => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}
