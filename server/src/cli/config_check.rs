//! `replaysafe config check`: reads and validates the configuration as
//! `serve` would, and prints what is in force, secrets hidden; a mistake
//! exits 1 naming the key.

use replaysafe_core::config::alerts::ChannelKind;
use replaysafe_core::config::Config;

/// What `serve` would run with, secrets hidden.
pub fn print(config: &Config) {
    if let Some(why) = config.secrets_exposed() {
        eprintln!("warning: {why}");
    }
    let shown = |s: &Option<replaysafe_core::secret::Secret>| {
        if s.is_some() {
            "(set, hidden)"
        } else {
            "(none)"
        }
    };
    println!(
        "config       {}",
        config
            .path
            .as_ref()
            .map_or("(no file: the defaults)".to_owned(), |p| p
                .display()
                .to_string())
    );
    println!("listen       {}", config.listen);
    println!("public_url   {}", config.public_url);
    println!(
        "database     {}",
        match &config.database_url {
            Some(_) => "database_url (set, hidden)".to_owned(),
            None => format!("embedded PostgreSQL under {}", config.data_dir.display()),
        }
    );
    if config.read_database_url.is_some() {
        println!("reads        read_database_url (set, hidden): the pages' and the API's reads");
    }
    println!(
        "retention    deliveries {} days, keys {} days, audit log {} days",
        config.retention_days, config.dedup_ttl_days, config.audit_retention_days
    );
    println!(
        "limits       bodies {} bytes (memory {}), {} connections ({} per address), API {} requests/s a token",
        config.max_body_bytes,
        config.max_body_memory_bytes,
        config.http.max_connections,
        config.http.max_connections_per_address,
        config.api_requests_per_second
    );
    println!(
        "metrics      {}, token {}",
        config
            .metrics_listen
            .map_or("beside the receiver".to_owned(), |a| format!("on {a}")),
        shown(&config.metrics_token)
    );
    println!("log_format   {:?}", config.log_format);
    println!(
        "traces       {}",
        config
            .otlp_endpoint
            .as_deref()
            .map_or("not exported".to_owned(), |url| format!(
                "OTLP/HTTP to {url}"
            ))
    );
    for s in &config.sources {
        println!();
        println!("[source {}]", s.slug);
        match replaysafe_core::providers::declarative::presets::find(s.provider.name) {
            Some(preset) => println!(
                "  provider        {} ({}, a preset of the declarative verifier)",
                s.provider.name, preset.title
            ),
            None => println!("  provider        {}", s.provider.name),
        }
        if let Some(verifier) = s.scheme.describe() {
            println!("  verifier        {verifier}");
        }
        println!(
            "  tolerance       {} s for a signed timestamp",
            s.tolerance_secs
        );
        println!("  mode            {}", s.mode.as_str());
        if s.destinations.is_empty() {
            println!("  destination     (none: nothing is forwarded)");
        }
        for d in &s.destinations {
            println!(
                "  destination     {} -> {}",
                d.name,
                replaysafe_core::config::destination::shown_url(&d.url)
            );
            println!("    signing       {}", shown(&d.secret));
            println!(
                "    attempts      {} of {} s each",
                d.max_attempts, d.timeout_secs
            );
            if let Some(f) = &d.filter {
                let body: Vec<String> = f.body.iter().map(|(p, v)| format!("{p} = {v}")).collect();
                println!(
                    "    filter        types {}{}",
                    if f.patterns.is_empty() {
                        "any".to_owned()
                    } else {
                        f.patterns.join(", ")
                    },
                    if body.is_empty() {
                        String::new()
                    } else {
                        format!("; body {}", body.join(", "))
                    }
                );
            }
            if let Some(r) = d.rate_per_sec {
                println!("    rate          at most {r} attempts per second");
            }
            if let Some(n) = d.max_in_flight {
                println!("    in flight     at most {n} at once");
            }
            if let replaysafe_core::config::destination::Ordering::PerKey { key } = &d.ordering {
                println!(
                    "    ordering      one at a time per {}",
                    key.as_deref().unwrap_or("source (no ordering_key)")
                );
            }
        }
        if s.paused {
            println!("  paused");
        }
        match &s.key {
            Some(k) => println!(
                "  key           {}{}",
                k.template.as_str(),
                if k.digest_fallback {
                    " (a field missing: the body's SHA-256)"
                } else {
                    " (a field missing: refused, 400)"
                }
            ),
            None => println!("  key           the provider's event id"),
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
            let every = r.every.map_or("on demand only".to_owned(), |e| {
                format!("every {} min", e.as_secs() / 60)
            });
            println!(
                "  reconcile     {what} from {}, {every}, {} h back (credential set, hidden)",
                r.api_base,
                r.lookback.as_secs() / 3600
            );
        }
        if let Some(rules) = config.alert_rules.per_source.get(&s.slug) {
            let on: Vec<&str> = replaysafe_types::alerts::RULES
                .iter()
                .copied()
                .filter(|r| rules.has(r))
                .collect();
            println!("  alert rules     {}", on.join(", "));
        }
    }
    println!();
    println!(
        "[alerts] every {} s, resolved after {} s quiet, repeated {}",
        config.alerts.every.as_secs(),
        config.alerts.resolve_after.as_secs(),
        config
            .alerts
            .repeat_after
            .map_or("never".to_owned(), |d| format!(
                "every {} minutes",
                d.as_secs() / 60
            ))
    );
    for c in &config.alerts.channels {
        let kind = match &c.kind {
            ChannelKind::Webhook { url, .. } => format!("webhook to {url}, signed (secret hidden)"),
            ChannelKind::Slack { .. } => "slack (URL hidden)".to_owned(),
            ChannelKind::Email { host, port, to, .. } => {
                format!("email via {host}:{port} to {}", to.join(", "))
            }
        };
        println!("  channel {}: {kind}", c.name);
    }
}
