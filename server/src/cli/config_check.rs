//! `replaysafe config check`: reads and validates the configuration as
//! `serve` would, and prints what is in force, secrets hidden; a mistake
//! exits 1 naming the key.
//!
//! What it prints uses the canonical key names (whatever alias the file
//! used) and values in each key's own unit, with a human form beside
//! sizes and durations (`max_body_bytes = 1048576 (1 MiB)`, whatever the
//! file wrote, "1MiB" say). `--json` prints one document of the same,
//! `Config::in_force`.

use replaysafe_core::config::alerts::ChannelKind;
use replaysafe_core::config::destination::{shown_url, Ordering};
use replaysafe_core::config::in_force::HIDDEN;
use replaysafe_core::config::units::{self, Unit};
use replaysafe_core::config::Config;
use replaysafe_core::secret::Secret;

/// What `serve` would run with, secrets hidden; `json` prints it as one JSON
/// document instead.
pub fn run(config: &Config, json: bool) {
    if let Some(why) = config.secrets_exposed() {
        eprintln!("warning: {why}");
    }
    if json {
        let document = serde_json::to_string_pretty(&config.in_force())
            .expect("a JSON value always serializes");
        println!("{document}");
        return;
    }
    print!("{}", text(config));
}

/// `key = 1048576 (1 MiB)`: a number in its key's unit, and in words.
fn amount(key: &str, n: u64, unit: Unit) -> String {
    format!("{key} = {n} ({})", unit.human(n))
}

/// `key (set, hidden)` or `key (none...)`: a secret is never shown.
fn secret(key: &str, s: Option<&Secret>, none: &str) -> String {
    match s {
        Some(_) => format!("{key} {HIDDEN}"),
        None => format!("{key} ({none})"),
    }
}

/// The text `config check` prints: top-level keys, then each source, then
/// the alerts.
fn text(config: &Config) -> String {
    let mut out = Vec::<String>::new();
    let mut line = |indent: usize, text: String| out.push(format!("{:indent$}{text}", ""));
    line(
        0,
        format!(
            "config: {}",
            config
                .path
                .as_ref()
                .map_or("(no file: the defaults)".to_owned(), |p| p
                    .display()
                    .to_string())
        ),
    );
    line(0, format!("listen = {:?}", config.listen.to_string()));
    line(0, format!("public_url = {:?}", config.public_url));
    line(
        0,
        secret(
            "database_url",
            config.database_url.as_ref(),
            "none: an embedded PostgreSQL under data_dir",
        ),
    );
    if config.read_database_url.is_some() {
        line(
            0,
            secret("read_database_url", config.read_database_url.as_ref(), "")
                + ": the pages' and the API's reads",
        );
    }
    line(
        0,
        format!("data_dir = {:?}", config.data_dir.display().to_string()),
    );
    line(
        0,
        amount("retention_days", config.retention_days.into(), units::DAYS),
    );
    line(
        0,
        amount("dedup_ttl_days", config.dedup_ttl_days.into(), units::DAYS),
    );
    line(
        0,
        amount(
            "audit_retention_days",
            config.audit_retention_days.into(),
            units::DAYS,
        ),
    );
    line(
        0,
        amount("max_body_bytes", config.max_body_bytes as u64, units::BYTES),
    );
    line(
        0,
        amount(
            "max_body_memory_bytes",
            config.max_body_memory_bytes as u64,
            units::BYTES,
        ),
    );
    line(
        0,
        amount(
            "rejected_body_bytes",
            config.rejections.body_bytes as u64,
            units::BYTES,
        ),
    );
    line(
        0,
        format!(
            "record_rejected_per_minute = {}",
            config.rejections.per_address_per_minute
        ),
    );
    line(0, format!("demo_destination = {}", config.demo_destination));
    line(
        0,
        amount(
            "session_idle_minutes",
            config.session_idle_minutes.into(),
            units::MINUTES,
        ),
    );
    line(
        0,
        match config.metrics_listen {
            Some(a) => format!("metrics_listen = {:?}", a.to_string()),
            None => "metrics_listen (none: /metrics beside the receiver)".to_owned(),
        },
    );
    line(
        0,
        secret(
            "metrics_token",
            config.metrics_token.as_ref(),
            "none: /metrics open to whoever reaches it",
        ),
    );
    let http = &config.http;
    for (key, d) in [
        ("header_timeout_secs", http.header_timeout),
        ("body_timeout_secs", http.body_timeout),
        ("idle_timeout_secs", http.idle_timeout),
    ] {
        line(0, amount(key, d.as_secs(), units::SECONDS));
    }
    line(0, format!("max_connections = {}", http.max_connections));
    line(
        0,
        format!(
            "max_connections_per_address = {}",
            http.max_connections_per_address
        ),
    );
    let proxies: Vec<String> = config
        .trusted_proxies
        .iter()
        .map(|n| format!("{:?}", n.to_string()))
        .collect();
    line(0, format!("trusted_proxies = [{}]", proxies.join(", ")));
    line(
        0,
        format!(
            "api_requests_per_second = {}",
            config.api_requests_per_second
        ),
    );
    line(
        0,
        format!(
            "log_format = {:?}",
            format!("{:?}", config.log_format).to_lowercase()
        ),
    );
    line(
        0,
        match &config.otlp_endpoint {
            Some(url) => format!("otlp_endpoint = {url:?} (OTLP/HTTP to {url}/v1/traces)"),
            None => "otlp_endpoint (none: traces not exported)".to_owned(),
        },
    );

    for s in &config.sources {
        line(0, String::new());
        line(0, format!("[source {}]", s.slug));
        match replaysafe_core::providers::declarative::presets::find(s.provider.name) {
            Some(preset) => line(
                2,
                format!(
                    "provider        {} ({}, a preset of the declarative verifier)",
                    s.provider.name, preset.title
                ),
            ),
            None => line(2, format!("provider        {}", s.provider.name)),
        }
        if let Some(verifier) = s.scheme.describe() {
            line(2, format!("verifier        {verifier}"));
        }
        line(2, format!("mode = {:?}", s.mode.as_str()));
        line(
            2,
            amount("tolerance_secs", s.tolerance_secs, units::SECONDS),
        );
        line(2, format!("paused = {}", s.paused));
        line(2, format!("replay_guard = {}", s.replay_guard));
        match &s.key {
            Some(k) => {
                line(2, format!("key = {:?}", k.template.as_str()));
                line(
                    2,
                    if k.digest_fallback {
                        "key_fallback = \"digest\" (a field missing: the body's SHA-256)".to_owned()
                    } else {
                        "key_fallback (none: a field missing is refused, 400)".to_owned()
                    },
                );
            }
            None => line(2, "key (none: the provider's event id)".to_owned()),
        }
        if s.destinations.is_empty() {
            line(2, "destination     (none: nothing is forwarded)".to_owned());
        }
        for d in &s.destinations {
            line(
                2,
                format!("destination     {} -> {}", d.name, shown_url(&d.url)),
            );
            line(
                4,
                secret("secret", d.secret.as_ref(), "none: forwarded unsigned"),
            );
            line(4, amount("timeout_secs", d.timeout_secs, units::SECONDS));
            line(4, format!("max_attempts = {}", d.max_attempts));
            if let Some(f) = &d.filter {
                let types = if f.patterns.is_empty() {
                    "any type".to_owned()
                } else {
                    format!("types {}", f.patterns.join(", "))
                };
                let body: Vec<String> = f.body.iter().map(|(p, v)| format!("{p} = {v}")).collect();
                line(
                    4,
                    if body.is_empty() {
                        format!("filter ({types})")
                    } else {
                        format!("filter ({types}; body {})", body.join(", "))
                    },
                );
            }
            if let Some(r) = d.rate_per_sec {
                line(
                    4,
                    format!("rate_per_sec = {r} (attempts per second, at most)"),
                );
            }
            if let Some(n) = d.max_in_flight {
                line(4, format!("max_in_flight = {n} (at once, at most)"));
            }
            if let Ordering::PerKey { key } = &d.ordering {
                match key {
                    Some(key) => {
                        line(
                            4,
                            "ordering = \"per_key\" (one at a time per key)".to_owned(),
                        );
                        line(4, format!("ordering_key = {key:?}"));
                    }
                    None => line(
                        4,
                        "ordering = \"per_key\" (one at a time: no ordering_key)".to_owned(),
                    ),
                }
            }
            let b = &d.breaker;
            line(4, format!("breaker_failures = {}", b.failures));
            if let Some(r) = b.ratio {
                line(4, format!("breaker_ratio = {r}"));
            }
            line(
                4,
                amount("breaker_window_secs", b.window_secs, units::SECONDS),
            );
            line(
                4,
                amount("breaker_cooldown_secs", b.cooldown_secs, units::SECONDS),
            );
        }
        if let Some(r) = &s.reconcile {
            use replaysafe_core::config::reconcile::{EventList, GitHubHook};
            let what = match &r.list {
                EventList::Stripe { types, .. } if types.is_empty() => "every event".to_owned(),
                EventList::Stripe { types, .. } => format!("events {}", types.join(", ")),
                EventList::GitHub {
                    hook: GitHubHook::Repository { owner, name },
                    hook_id,
                } => format!("hook {hook_id} of {owner}/{name}"),
                EventList::GitHub {
                    hook: GitHubHook::Organization(org),
                    hook_id,
                } => format!("hook {hook_id} of organization {org}"),
            };
            line(
                2,
                format!(
                    "reconcile       {what} from {} (credential set, hidden)",
                    r.api_base
                ),
            );
            line(
                4,
                match r.every {
                    Some(e) => amount("every_minutes", e.as_secs() / 60, units::MINUTES),
                    None => "every_minutes = 0 (on demand only)".to_owned(),
                },
            );
            line(
                4,
                amount("lookback_hours", r.lookback.as_secs() / 3600, units::HOURS),
            );
        }
        if let Some(rules) = config.alert_rules.per_source.get(&s.slug) {
            let on: Vec<&str> = replaysafe_types::alerts::RULES
                .iter()
                .copied()
                .filter(|r| rules.has(r))
                .collect();
            line(2, format!("alert rules     {}", on.join(", ")));
        }
    }
    let a = &config.alerts;
    line(0, String::new());
    line(0, "[alerts]".to_owned());
    line(
        2,
        amount("evaluate_every_secs", a.every.as_secs(), units::SECONDS),
    );
    line(
        2,
        match a.repeat_after {
            Some(d) => amount("repeat_after_minutes", d.as_secs() / 60, units::MINUTES),
            None => "repeat_after_minutes = 0 (never: sent once)".to_owned(),
        },
    );
    line(
        2,
        amount(
            "resolve_after_secs",
            a.resolve_after.as_secs(),
            units::SECONDS,
        ),
    );
    for c in &a.channels {
        let kind = match &c.kind {
            ChannelKind::Webhook { url, .. } => {
                format!("webhook to {}, signed (secret hidden)", shown_url(url))
            }
            ChannelKind::Slack { .. } => "slack (URL hidden)".to_owned(),
            ChannelKind::Email { host, port, to, .. } => {
                format!("email via {host}:{port} to {}", to.join(", "))
            }
        };
        line(2, format!("channel {}: {kind}", c.name));
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        let env = |name: &str| (name == "GH").then(|| "gh-secret-never-shown".to_owned());
        replaysafe_core::config::parse_and_validate(None, text, &env).unwrap()
    }

    #[test]
    fn the_text_shows_canonical_keys_and_values_with_their_human_form() {
        let c = config(
            "max_body_bytes = \"1MiB\"\nheader_timeout_secs = \"1m30s\"\nmetrics_token = \"env:GH\"\n\
             [[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"env:GH\"]\n\
             timeout_secs = \"20s\"\ndestination = \"http://u:p@127.0.0.1:9/x\"\n",
        );
        let shown = text(&c);
        for want in [
            "max_body_bytes = 1048576 (1 MiB)",
            "header_timeout_secs = 90 (1m 30s)",
            "metrics_token (set, hidden)",
            "[source gh]",
            "  provider        github",
            "    timeout_secs = 20 (20s)",
            "destination     default -> http://***@127.0.0.1:9/x",
            "retention_days = 30 (30d)",
        ] {
            assert!(shown.contains(want), "{want:?} not in\n{shown}");
        }
        assert!(!shown.contains("gh-secret-never-shown"), "{shown}");
    }
}
