//! Sizes and durations with units at every key that takes one, the
//! aliases at both levels of a source, and `config check --json`'s shape.

use super::tests::parse as parse_with;
use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    parse_with(text, &[])
}

/// The error `text` gives, which must name `key` (as `key`).
fn refused(text: &str, key: &str) -> String {
    let e = match parse(text) {
        Ok(_) => panic!("{text:?} was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(&format!("`{key}`")), "{text:?} gave {e}");
    e
}

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Every size and duration key, with `{name}` standing for each value.
fn every_unit_key(values: &dyn Fn(&str) -> String) -> String {
    let v = |key: &str| format!("{key} = {}", values(key));
    format!(
        r#"
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
[alerts]
{}
{}
{}
[alerts.rules.duplicate_storm]
{}
{}
[alerts.rules.dead_letters]
{}
[alerts.rules.backlog]
{}
[alerts.rules.destination_failing]
{}
[[source]]
slug = "s"
provider = "stripe"
secrets = ["whsec_x"]
{}
{}
[source.reconcile]
api_key = "rk_test"
{}
{}
[source.alerts.missed_events]
{}
[[source.destination]]
name = "a"
url = "http://127.0.0.1:9/a"
{}
{}
{}
"#,
        v("retention_days"),
        v("dedup_ttl_days"),
        v("audit_retention_days"),
        v("max_body_bytes"),
        v("max_body_memory_bytes"),
        v("rejected_body_bytes"),
        v("session_idle_minutes"),
        v("header_timeout_secs"),
        v("body_timeout_secs"),
        v("idle_timeout_secs"),
        v("evaluate_every_secs"),
        v("repeat_after_minutes"),
        v("resolve_after_secs"),
        v("window_minutes"),
        v("baseline_hours"),
        v("window_minutes"),
        v("oldest_due_minutes"),
        v("minutes"),
        v("tolerance_secs"),
        v("attempt_timeout_secs"),
        v("every_minutes"),
        v("lookback_hours"),
        v("window_minutes"),
        v("timeout_secs"),
        v("breaker_window_secs"),
        v("breaker_cooldown_secs"),
    )
}

#[test]
fn every_size_and_duration_key_takes_units_and_plain_integers_still_work() {
    let plain: &[(&str, &str)] = &[
        ("retention_days", "14"),
        ("dedup_ttl_days", "30"),
        ("audit_retention_days", "400"),
        ("max_body_bytes", "2097152"),
        ("max_body_memory_bytes", "536870912"),
        ("rejected_body_bytes", "4096"),
        ("session_idle_minutes", "90"),
        ("header_timeout_secs", "20"),
        ("body_timeout_secs", "120"),
        ("idle_timeout_secs", "90"),
        ("evaluate_every_secs", "45"),
        ("repeat_after_minutes", "120"),
        ("resolve_after_secs", "600"),
        ("window_minutes", "15"),
        ("baseline_hours", "48"),
        ("oldest_due_minutes", "30"),
        ("minutes", "10"),
        ("tolerance_secs", "600"),
        ("attempt_timeout_secs", "25"),
        ("every_minutes", "30"),
        ("lookback_hours", "24"),
        ("timeout_secs", "5"),
        ("breaker_window_secs", "120"),
        ("breaker_cooldown_secs", "60"),
    ];
    let with_units: &[(&str, &str)] = &[
        ("retention_days", "\"2w\""),
        ("dedup_ttl_days", "\"30d\""),
        ("audit_retention_days", "\"400d\""),
        ("max_body_bytes", "\"2MiB\""),
        ("max_body_memory_bytes", "\"0.5 GiB\""),
        ("rejected_body_bytes", "\"4KiB\""),
        ("session_idle_minutes", "\"1h30m\""),
        ("header_timeout_secs", "\"20s\""),
        ("body_timeout_secs", "\"2m\""),
        ("idle_timeout_secs", "\"1m 30s\""),
        ("evaluate_every_secs", "\"45000ms\""),
        ("repeat_after_minutes", "\"2h\""),
        ("resolve_after_secs", "\"10m\""),
        ("window_minutes", "\"15m\""),
        ("baseline_hours", "\"2d\""),
        ("oldest_due_minutes", "\"0.5h\""),
        ("minutes", "\"600s\""),
        ("tolerance_secs", "\"10m\""),
        ("attempt_timeout_secs", "\"25s\""),
        ("every_minutes", "\"30m\""),
        ("lookback_hours", "\"1d\""),
        ("timeout_secs", "\"5000ms\""),
        ("breaker_window_secs", "\"2m\""),
        ("breaker_cooldown_secs", "\"1m\""),
    ];
    let pick = |table: &'static [(&'static str, &'static str)]| {
        move |key: &str| {
            table
                .iter()
                .find(|(k, _)| *k == key)
                .unwrap_or_else(|| panic!("{key}"))
                .1
                .to_owned()
        }
    };
    let plain_text = every_unit_key(&pick(plain));
    let a = parse(&plain_text).unwrap_or_else(|e| panic!("{e}"));
    let b = parse(&every_unit_key(&pick(with_units))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    // And the plain integers mean what they always meant.
    assert_eq!(a.retention_days, 14);
    assert_eq!(a.max_body_bytes, 2 << 20);
    assert_eq!(a.session_idle_minutes, 90);
    assert_eq!(a.http.body_timeout, Duration::from_secs(120));
    assert_eq!(a.alerts.repeat_after, Some(Duration::from_secs(7200)));
    let s = &a.sources[0];
    assert_eq!(s.tolerance_secs, 600);
    let d = &s.destinations[0];
    assert_eq!((d.timeout_secs, d.breaker.window_secs), (5, 120));
    let r = s.reconcile.as_ref().unwrap();
    assert_eq!(r.every, Some(Duration::from_secs(1800)));
    assert_eq!(r.lookback, Duration::from_secs(24 * 3600));
    let rules = &a.alert_rules.per_source["s"];
    assert_eq!(rules.duplicate_storm.as_ref().unwrap().baseline_hours, 48);
    assert_eq!(rules.missed_events.as_ref().unwrap().window_minutes, 15);
    assert_eq!(rules.destination_failing.as_ref().unwrap().minutes, 10);
    // Every key of the list was written once: nothing is left out.
    assert_eq!(plain_text.matches(" = ").count(), plain.len() + 6 + 2);
}

#[test]
fn a_value_that_is_not_a_whole_number_of_its_unit_names_its_key() {
    let gh = "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"x\"]\n";
    for (text, key, why) in [
        ("retention_days = \"36h\"", "retention_days", "is 1.5 days"),
        ("header_timeout_secs = \"1500ms\"", "header_timeout_secs", "is 1.5 seconds"),
        ("session_idle_minutes = \"90s\"", "session_idle_minutes", "is 1.5 minutes"),
        ("max_body_bytes = \"0.5B\"", "max_body_bytes", "whole number of bytes"),
        ("max_body_bytes = \"1M\"", "max_body_bytes", "1MiB (1024s) or 1MB (1000s)"),
        ("max_body_bytes = -1", "max_body_bytes", "-1 is negative"),
        ("max_body_bytes = \"-1KiB\"", "max_body_bytes", "is negative"),
        ("max_body_bytes = 1.5", "max_body_bytes", "a whole number of bytes, or a size"),
        ("retention_days = 4294967296", "retention_days", "too large (at most 4294967295 days)"),
        ("retention_days = \"5000000000d\"", "retention_days", "too large"),
        ("idle_timeout_secs = \"soon\"", "idle_timeout_secs", "not a duration"),
        ("[alerts]\nresolve_after_secs = \"1.5s\"", "alerts.resolve_after_secs", "is 1.5 seconds"),
        (
            "[alerts.rules.duplicate_storm]\nbaseline_hours = \"90m\"",
            "alerts.rules.duplicate_storm.baseline_hours",
            "is 1.5 hours",
        ),
        (
            &format!("{gh}tolerance_secs = \"1500ms\""),
            "source[0].tolerance_secs",
            "is 1.5 seconds",
        ),
        (
            &format!("{gh}timeout_secs = \"1500ms\""),
            "source[0].timeout_secs",
            "is 1.5 seconds",
        ),
        (
            &format!("{gh}[source.reconcile]\ntoken = \"t\"\nhook_id = 1\nrepository = \"a/b\"\nlookback_hours = \"30m\""),
            "source[0].reconcile.lookback_hours",
            "is 0.5 hours",
        ),
        (
            &format!("{gh}[source.alerts.backlog]\noldest_due_minutes = \"30s\""),
            "source[0].alerts.backlog.oldest_due_minutes",
            "is 0.5 minutes",
        ),
        (
            &format!("{gh}[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\ntimeout_secs = \"1500ms\""),
            "source[0].destination[0].timeout_secs",
            "is 1.5 seconds",
        ),
        (
            &format!("{gh}[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\nbreaker_cooldown_secs = -5"),
            "source[0].destination[0].breaker_cooldown_secs",
            "negative",
        ),
    ] {
        let e = refused(text, key);
        assert!(e.contains(why), "{text:?} gave {e}");
    }
    // The line is given where the file has one.
    let e = refused(
        "listen = \"127.0.0.1:1\"\n\nretention_days = \"36h\"",
        "retention_days",
    );
    assert!(e.contains("(line 3)"), "{e}");
}

#[test]
fn checks_after_the_conversion_still_name_the_canonical_key() {
    refused("dedup_ttl_days = \"3d\"", "dedup_ttl_days");
    refused("header_timeout_secs = \"0s\"", "header_timeout_secs");
    refused(
        "[alerts.rules.backlog]\noldest_due_minutes = \"30d\"",
        "alerts.rules.backlog.oldest_due_minutes",
    );
    // Other serde refusals name their key too now.
    refused("max_connections = \"many\"", "max_connections");
    refused("[alerts]\nevaluate_every = 5", "alerts.evaluate_every");
    refused("listne = \"x\"", "listne");
    let syntax = parse("listen = ").unwrap_err().to_string();
    assert!(syntax.contains("line 1"), "{syntax}");
}

const SOURCE: &str = "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"x\"]\n";

#[test]
fn a_destinations_timeout_and_secret_take_the_sources_spelling_and_the_source_the_destinations() {
    // The source's `attempt_timeout_secs` as a destination spells it.
    let legacy = |extra: &str| {
        let c = parse(&format!("{SOURCE}destination = \"http://h/\"\n{extra}"))
            .unwrap_or_else(|e| panic!("{extra}: {e}"));
        c.sources[0].destinations[0].timeout_secs
    };
    assert_eq!(legacy("attempt_timeout_secs = 25"), 25);
    assert_eq!(legacy("timeout_secs = 25"), 25);
    assert_eq!(legacy("timeout_secs = \"25s\""), 25);
    // ... and it is the default of every table's own.
    let tables = parse(&format!(
        "{SOURCE}timeout_secs = 25\n[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\n"
    ))
    .unwrap();
    assert_eq!(tables.sources[0].destinations[0].timeout_secs, 25);
    // A destination takes the source's spellings of its own keys.
    let table = |keys: &str| {
        let c = parse(&format!(
            "{SOURCE}[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\n{keys}"
        ))
        .unwrap_or_else(|e| panic!("{keys}: {e}"));
        c.sources[0].destinations[0].clone()
    };
    let canonical = table(&format!("timeout_secs = 7\nsecret = \"{WHSEC}\""));
    let aliased = table(&format!(
        "attempt_timeout_secs = 7\ndestination_secret = \"{WHSEC}\""
    ));
    assert_eq!(format!("{canonical:?}"), format!("{aliased:?}"));
    assert_eq!(aliased.timeout_secs, 7);
    assert!(aliased.secret.is_some());
    // Both spellings at once: refused, named.
    refused(
        &format!("{SOURCE}destination = \"http://h/\"\ntimeout_secs = 1\nattempt_timeout_secs = 2"),
        "source[0]",
    );
    refused(
        &format!("{SOURCE}[[source.destination]]\nname = \"a\"\nurl = \"http://h/\"\nsecret = \"{WHSEC}\"\ndestination_secret = \"{WHSEC}\""),
        "source[0].destination[0]",
    );
    // `secret` and `url` are not the source's: it has `secrets` and
    // `public_url`, which mean other things.
    refused(&format!("{SOURCE}secret = \"{WHSEC}\""), "source[0].secret");
    refused(&format!("{SOURCE}url = \"http://h/\""), "source[0].url");
}

#[test]
fn the_in_force_document_has_canonical_keys_and_units_and_no_secret() {
    let text = format!(
        r#"
database_url = "postgres://u:db-password@db/x"
metrics_token = "metrics-token-secret"
max_body_bytes = "2MiB"
retention_days = "2w"
header_timeout_secs = "1m"
[alerts]
repeat_after_minutes = "2h"
[[alerts.channel]]
name = "hook"
kind = "webhook"
url = "https://alert-user:alert-pass@ops.example.com/x?k=alert-query"
secret = "{WHSEC}"
[[alerts.channel]]
name = "chat"
kind = "slack"
url = "https://hooks.slack.com/services/slack-secret-path"
[[alerts.channel]]
name = "mail"
kind = "email"
smtp_host = "smtp.example.com"
username = "u"
password = "smtp-password-secret"
from = "a@example.com"
to = ["b@example.com"]
[[source]]
slug = "stripe"
provider = "stripe"
secrets = ["whsec_stripe-signing-secret"]
timeout_secs = "30s"
[source.reconcile]
api_key = "rk_reconcile-secret"
every_minutes = "1h"
[[source.destination]]
name = "billing"
url = "https://hook-user:hook-pass@app.example.com/h?token=hook-query"
destination_secret = "{WHSEC}"
filter = {{ types = ["invoice.*"], body = {{ "/livemode" = true }} }}
ordering = "per_key"
ordering_key = "/id"
[[source]]
slug = "gh"
provider = "github"
secrets = ["env:GH_SECRET"]
destination = "http://127.0.0.1:9/gh"
destination_secret = "{WHSEC}"
"#
    );
    let c = parse_with(&text, &[("GH_SECRET", "gh-env-secret")]).unwrap_or_else(|e| panic!("{e}"));
    let doc = c.in_force();
    let shown = serde_json::to_string_pretty(&doc).unwrap();
    for secret in [
        "db-password",
        "metrics-token-secret",
        "alert-pass",
        "alert-query",
        &WHSEC[6..],
        "slack-secret-path",
        "smtp-password-secret",
        "stripe-signing-secret",
        "rk_reconcile-secret",
        "hook-pass",
        "hook-query",
        "gh-env-secret",
    ] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    // Numbers in the key's unit, under the canonical names.
    assert_eq!(doc["max_body_bytes"], 2 << 20);
    assert_eq!(doc["retention_days"], 14);
    assert_eq!(doc["header_timeout_secs"], 60);
    assert_eq!(doc["database_url"], in_force::HIDDEN);
    assert_eq!(doc["metrics_token"], in_force::HIDDEN);
    assert_eq!(doc["read_database_url"], serde_json::Value::Null);
    assert_eq!(doc["alerts"]["repeat_after_minutes"], 120);
    assert_eq!(
        doc["alerts"]["channel"][0]["url"],
        "https://***@ops.example.com/x?***"
    );
    assert_eq!(doc["alerts"]["channel"][1]["url"], in_force::HIDDEN);
    assert_eq!(doc["alerts"]["channel"][2]["password"], in_force::HIDDEN);
    let stripe = &doc["source"][0];
    assert_eq!(stripe["slug"], "stripe");
    assert_eq!(stripe["reconcile"]["every_minutes"], 60);
    assert_eq!(stripe["reconcile"]["api_key"], in_force::HIDDEN);
    let billing = &stripe["destination"][0];
    // Written `destination_secret` (an alias), shown as `secret`.
    assert_eq!(billing["secret"], in_force::HIDDEN);
    assert!(billing.get("destination_secret").is_none());
    assert_eq!(
        billing["timeout_secs"], 30,
        "the source's, written timeout_secs"
    );
    assert_eq!(billing["url"], "https://***@app.example.com/h?***");
    assert_eq!(billing["filter"]["types"][0], "invoice.*");
    assert_eq!(billing["ordering_key"], "/id");
    assert_eq!(doc["source"][1]["destination"][0]["name"], "default");
    assert_eq!(stripe["alerts"]["dead_letters"]["window_minutes"], 10);
    // The top level's keys, in order: a script may rely on each.
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "config_file",
            "listen",
            "public_url",
            "database_url",
            "read_database_url",
            "data_dir",
            "retention_days",
            "dedup_ttl_days",
            "audit_retention_days",
            "max_body_bytes",
            "max_body_memory_bytes",
            "rejected_body_bytes",
            "record_rejected_per_minute",
            "demo_destination",
            "session_idle_minutes",
            "metrics_token",
            "metrics_listen",
            "header_timeout_secs",
            "body_timeout_secs",
            "idle_timeout_secs",
            "max_connections",
            "max_connections_per_address",
            "trusted_proxies",
            "api_requests_per_second",
            "log_format",
            "otlp_endpoint",
            "alerts",
            "source",
        ]
    );
    // Each of them is a key the file takes (bar the file's own name).
    let example = include_str!("../../../replaysafe.example.toml");
    for key in &keys[1..] {
        assert!(
            example.contains(&format!("{key} =")) || example.contains(&format!("[{key}")),
            "{key} is not a config key"
        );
    }
}
