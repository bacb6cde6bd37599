//! What is in force, as `replaysafe config check --json` prints it: one JSON
//! document with the canonical key names (whatever alias the file used),
//! each number in its key's unit (whatever units the file wrote it in), and
//! no secret: a secret that is set is `"(set, hidden)"`, one that is not is
//! `null`; destination and webhook URLs are shown without credentials.

use serde_json::{json, Value};

use super::alerts::{ChannelKind, SmtpSecurity};
use super::destination::{shown_url, Ordering};
use super::reconcile::{EventList, GitHubHook};
use super::{Config, Secret, SourceConfig};

/// What a secret shows as.
pub const HIDDEN: &str = "(set, hidden)";

fn hidden(secret: Option<&Secret>) -> Value {
    secret.map_or(Value::Null, |_| Value::from(HIDDEN))
}

impl Config {
    /// The configuration in force, secrets hidden (see the module's doc).
    /// Keys come in the order of `replaysafe.example.toml`; a key that is
    /// not set and has no default is `null`.
    pub fn in_force(&self) -> Value {
        let h = &self.http;
        json!({
            "config_file": self.path.as_ref().map(|p| p.display().to_string()),
            "listen": self.listen.to_string(),
            "public_url": self.public_url,
            "database_url": hidden(self.database_url.as_ref()),
            "read_database_url": hidden(self.read_database_url.as_ref()),
            "data_dir": self.data_dir.display().to_string(),
            "retention_days": self.retention_days,
            "dedup_ttl_days": self.dedup_ttl_days,
            "audit_retention_days": self.audit_retention_days,
            "max_body_bytes": self.max_body_bytes,
            "max_body_memory_bytes": self.max_body_memory_bytes,
            "rejected_body_bytes": self.rejections.body_bytes,
            "record_rejected_per_minute": self.rejections.per_address_per_minute,
            "demo_destination": self.demo_destination,
            "session_idle_minutes": self.session_idle_minutes,
            "metrics_token": hidden(self.metrics_token.as_ref()),
            "metrics_listen": self.metrics_listen.map(|a| a.to_string()),
            "header_timeout_secs": h.header_timeout.as_secs(),
            "body_timeout_secs": h.body_timeout.as_secs(),
            "idle_timeout_secs": h.idle_timeout.as_secs(),
            "max_connections": h.max_connections,
            "max_connections_per_address": h.max_connections_per_address,
            "trusted_proxies": self.trusted_proxies.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "api_requests_per_second": self.api_requests_per_second,
            "log_format": match self.log_format {
                crate::telemetry::LogFormat::Text => "text",
                crate::telemetry::LogFormat::Json => "json",
            },
            "otlp_endpoint": self.otlp_endpoint,
            "alerts": self.alerts_in_force(),
            "source": self.sources.iter().map(|s| self.source_in_force(s)).collect::<Vec<_>>(),
        })
    }

    fn alerts_in_force(&self) -> Value {
        let a = &self.alerts;
        let channels: Vec<Value> = a
            .channels
            .iter()
            .map(|c| {
                let mut channel = json!({ "name": c.name });
                let kind = match &c.kind {
                    ChannelKind::Webhook { url, .. } => json!({
                        "kind": "webhook",
                        "url": shown_url(url),
                        "secret": HIDDEN,
                    }),
                    // The URL is the secret.
                    ChannelKind::Slack { .. } => json!({ "kind": "slack", "url": HIDDEN }),
                    ChannelKind::Email {
                        host,
                        port,
                        security,
                        credentials,
                        from,
                        to,
                    } => json!({
                        "kind": "email",
                        "smtp_host": host,
                        "smtp_port": port,
                        "smtp_security": match security {
                            SmtpSecurity::StartTls => "starttls",
                            SmtpSecurity::Tls => "tls",
                            SmtpSecurity::None => "none",
                        },
                        "username": credentials.as_ref().map(|(u, _)| u),
                        "password": hidden(credentials.as_ref().map(|(_, p)| p)),
                        "from": from,
                        "to": to,
                    }),
                };
                merge(&mut channel, kind);
                merge(&mut channel, json!({ "rules": c.rules }));
                channel
            })
            .collect();
        json!({
            "evaluate_every_secs": a.every.as_secs(),
            // 0: a firing alert is sent once.
            "repeat_after_minutes": a.repeat_after.map_or(0, |d| d.as_secs() / 60),
            "resolve_after_secs": a.resolve_after.as_secs(),
            "channel": channels,
        })
    }

    fn source_in_force(&self, s: &SourceConfig) -> Value {
        let destinations: Vec<Value> = s
            .destinations
            .iter()
            .map(|d| {
                let (ordering, ordering_key) = match &d.ordering {
                    Ordering::None => ("none", None),
                    Ordering::PerKey { key } => ("per_key", key.as_deref()),
                };
                json!({
                    "name": d.name,
                    "url": shown_url(&d.url),
                    "secret": hidden(d.secret.as_ref()),
                    "timeout_secs": d.timeout_secs,
                    "max_attempts": d.max_attempts,
                    "filter": d.filter.as_ref().map(|f| json!({
                        "types": f.patterns,
                        "body": f.body.iter().cloned().collect::<serde_json::Map<_, _>>(),
                    })),
                    "rate_per_sec": d.rate_per_sec,
                    "max_in_flight": d.max_in_flight,
                    "ordering": ordering,
                    "ordering_key": ordering_key,
                    "breaker_failures": d.breaker.failures,
                    "breaker_ratio": d.breaker.ratio,
                    "breaker_window_secs": d.breaker.window_secs,
                    "breaker_cooldown_secs": d.breaker.cooldown_secs,
                })
            })
            .collect();
        let reconcile = s.reconcile.as_ref().map(|r| {
            let mut shown = json!({
                "api_base": r.api_base.as_str(),
                // 0: on demand only.
                "every_minutes": r.every.map_or(0, |d| d.as_secs() / 60),
                "lookback_hours": r.lookback.as_secs() / 3600,
            });
            let list = match &r.list {
                EventList::Stripe {
                    types, api_version, ..
                } => json!({
                    "api_key": HIDDEN,
                    "types": types,
                    "api_version": api_version,
                }),
                EventList::GitHub { hook, hook_id } => {
                    let (repository, organization) = match hook {
                        GitHubHook::Repository { owner, name } => {
                            (Some(format!("{owner}/{name}")), None)
                        }
                        GitHubHook::Organization(org) => (None, Some(org.clone())),
                    };
                    json!({
                        "token": HIDDEN,
                        "repository": repository,
                        "organization": organization,
                        "hook_id": hook_id,
                    })
                }
            };
            merge(&mut shown, list);
            shown
        });
        json!({
            "slug": s.slug,
            "provider": s.provider.name,
            "verifier": s.scheme.describe(),
            "mode": s.mode.as_str(),
            "tolerance_secs": s.tolerance_secs,
            "paused": s.paused,
            "replay_guard": s.replay_guard,
            "key": s.key.as_ref().map(|k| k.template.as_str()),
            "key_fallback": s.key.as_ref().filter(|k| k.digest_fallback).map(|_| "digest"),
            "destination": destinations,
            "reconcile": reconcile,
            "alerts": self.alert_rules.per_source.get(&s.slug),
        })
    }
}

/// `extra`'s keys appended to `into`'s (both objects), in order.
fn merge(into: &mut Value, extra: Value) {
    if let (Value::Object(into), Value::Object(extra)) = (into, extra) {
        into.extend(extra);
    }
}
