//! Alert rules (issue 17): what is wrong right now, per source, judged from
//! the same figures the dashboard shows. One evaluation serves the
//! overview's banner and the server's alert evaluator, which gives each
//! condition a lifecycle (firing, resolved) and sends it to the channels.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The rules of one source; None: that rule is off for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleSet {
    pub duplicate_storm: Option<StormRule>,
    pub dead_letters: Option<DeadLettersRule>,
    pub backlog: Option<BacklogRule>,
    pub signature_failures: Option<SignatureRule>,
    pub destination_failing: Option<FailingRule>,
}

/// The duplicate rate of the last `window_minutes` above `ratio` times its
/// trailing `baseline_hours` baseline, with at least `min_deliveries`
/// verified deliveries and a rate of at least `min_rate` (so 2 of 3 is no
/// storm).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StormRule {
    pub ratio: f64,
    pub window_minutes: u32,
    pub baseline_hours: u32,
    pub min_deliveries: i64,
    pub min_rate: f64,
}

/// At least `threshold` events dead-lettered in the last `window_minutes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeadLettersRule {
    pub window_minutes: u32,
    pub threshold: i64,
}

/// The oldest due event of a source that is not paused has waited longer
/// than `oldest_due_minutes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BacklogRule {
    pub oldest_due_minutes: u32,
}

/// At least `threshold` deliveries failed signature verification in the
/// last `window_minutes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignatureRule {
    pub window_minutes: u32,
    pub threshold: i64,
}

/// Every forward attempt of the last `minutes` failed, and there were at
/// least `min_attempts`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailingRule {
    pub minutes: u32,
    pub min_attempts: i64,
}

impl Default for RuleSet {
    /// The seeds' rules: a storm is twice the day's duplicate rate over 10
    /// minutes; any dead letter in 10 minutes; a due event waiting 5
    /// minutes; 10 bad signatures in 10 minutes; a destination failing
    /// every attempt for 5 minutes.
    fn default() -> Self {
        Self {
            duplicate_storm: Some(StormRule {
                ratio: 2.0,
                window_minutes: 10,
                baseline_hours: 24,
                min_deliveries: 20,
                min_rate: 0.05,
            }),
            dead_letters: Some(DeadLettersRule {
                window_minutes: 10,
                threshold: 1,
            }),
            backlog: Some(BacklogRule {
                oldest_due_minutes: 5,
            }),
            signature_failures: Some(SignatureRule {
                window_minutes: 10,
                threshold: 10,
            }),
            destination_failing: Some(FailingRule {
                minutes: 5,
                min_attempts: 3,
            }),
        }
    }
}

/// Every configured source's rules (the defaults with its overrides).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertRules {
    pub per_source: BTreeMap<String, RuleSet>,
}

/// The rules' names, as alerts, the config and the channels call them.
pub const RULES: [&str; 5] = [
    "duplicate_storm",
    "dead_letters",
    "backlog",
    "signature_failures",
    "destination_failing",
];

/// A rule that holds for a source now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Condition {
    /// One of `RULES`.
    pub rule: String,
    pub source: String,
    /// What holds, with its figures, in a sentence.
    pub summary: String,
    /// The figures that made it hold, by name.
    pub figures: BTreeMap<String, f64>,
    /// The dashboard page behind it (a path).
    pub link: String,
}

impl Condition {
    /// The rule's name for people: "Duplicate storm".
    pub fn title(&self) -> &'static str {
        match self.rule.as_str() {
            "duplicate_storm" => "Duplicate storm",
            "dead_letters" => "Dead letters",
            "backlog" => "Backlog",
            "signature_failures" => "Signature failures",
            "destination_failing" => "Destination failing",
            _ => "Alert",
        }
    }
}

impl Condition {
    /// What its link shows.
    pub fn link_text(&self) -> &'static str {
        match self.rule.as_str() {
            "dead_letters" => "See dead letters",
            "signature_failures" => "See the rejected deliveries",
            _ => "See its deliveries",
        }
    }
}

#[cfg(feature = "ssr")]
pub mod ssr {
    use sqlx::PgPool;

    use super::*;

    fn percent(rate: f64) -> String {
        format!("{:.1}%", rate * 100.0)
    }

    fn condition(
        rule: &str,
        source: &str,
        summary: String,
        figures: &[(&str, f64)],
        link: String,
    ) -> Condition {
        Condition {
            rule: rule.to_owned(),
            source: source.to_owned(),
            summary,
            figures: figures.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            link,
        }
    }

    /// The largest window a rule takes over every source (one query per
    /// rule reads that; each source's own window is applied per minute).
    fn widest(rules: &AlertRules, window: impl Fn(&RuleSet) -> Option<u32>) -> Option<u32> {
        rules.per_source.values().filter_map(window).max()
    }

    /// Every rule that holds now, per source, storms first.
    pub async fn evaluate(
        pool: &PgPool,
        rules: &AlertRules,
    ) -> Result<Vec<Condition>, sqlx::Error> {
        let mut found = Vec::new();
        if let Some(widest_hours) = widest(rules, |r| {
            r.duplicate_storm
                .as_ref()
                .map(|s| s.baseline_hours * 60 + s.window_minutes)
        }) {
            // Per minute, so each source's own windows apply.
            let rows = sqlx::query!(
                r#"SELECT source, (extract(epoch FROM now() - minute) / 60)::float8 AS "age_minutes!",
                          (claimed + completed + in_progress + dead)::bigint AS "verified!",
                          (completed + in_progress + dead)::bigint AS "duplicates!"
                   FROM minute_stats
                   WHERE minute >= now() - make_interval(mins => $1)"#,
                widest_hours as i32
            )
            .fetch_all(pool)
            .await?;
            for (slug, set) in &rules.per_source {
                let Some(rule) = &set.duplicate_storm else {
                    continue;
                };
                let (mut recent, mut recent_dup, mut base, mut base_dup) = (0i64, 0i64, 0i64, 0i64);
                for r in rows.iter().filter(|r| &r.source == slug) {
                    if r.age_minutes < rule.window_minutes as f64 {
                        recent += r.verified;
                        recent_dup += r.duplicates;
                    } else if r.age_minutes
                        < (rule.baseline_hours * 60 + rule.window_minutes) as f64
                    {
                        base += r.verified;
                        base_dup += r.duplicates;
                    }
                }
                let rate = |dup: i64, all: i64| {
                    if all > 0 {
                        dup as f64 / all as f64
                    } else {
                        0.0
                    }
                };
                let (recent_rate, baseline_rate) = (rate(recent_dup, recent), rate(base_dup, base));
                if recent >= rule.min_deliveries
                    && recent_rate >= rule.min_rate
                    && recent_rate > rule.ratio * baseline_rate
                {
                    found.push(condition(
                        "duplicate_storm",
                        slug,
                        format!(
                            "{} of the last {} minutes' {} verified deliveries were duplicates, against a {}-hour baseline of {}",
                            percent(recent_rate),
                            rule.window_minutes,
                            recent,
                            rule.baseline_hours,
                            percent(baseline_rate)
                        ),
                        &[
                            ("recent_rate", recent_rate),
                            ("baseline_rate", baseline_rate),
                            ("recent_verified", recent as f64),
                        ],
                        format!("/deliveries?source={slug}"),
                    ));
                }
            }
        }
        if let Some(minutes) = widest(rules, |r| r.dead_letters.as_ref().map(|d| d.window_minutes))
        {
            let rows = sqlx::query!(
                r#"SELECT source, (extract(epoch FROM now() - state_changed_at) / 60)::float8 AS "age_minutes!"
                   FROM events
                   WHERE state = 'dead' AND state_changed_at > now() - make_interval(mins => $1)
                   ORDER BY state_changed_at DESC LIMIT $2"#,
                minutes as i32,
                super::super::overview::COUNT_CAP
            )
            .fetch_all(pool)
            .await?;
            for (slug, set) in &rules.per_source {
                let Some(rule) = &set.dead_letters else {
                    continue;
                };
                let count = rows
                    .iter()
                    .filter(|r| &r.source == slug && r.age_minutes < rule.window_minutes as f64)
                    .count() as i64;
                if count >= rule.threshold {
                    found.push(condition(
                        "dead_letters",
                        slug,
                        format!(
                            "{count} events dead-lettered in the last {} minutes",
                            rule.window_minutes
                        ),
                        &[("dead_letters", count as f64)],
                        format!("/dead?source={slug}"),
                    ));
                }
            }
        }
        if rules.per_source.values().any(|r| r.backlog.is_some()) {
            let rows = sqlx::query!(
                r#"SELECT e.source, count(*) AS "waiting!",
                          (extract(epoch FROM now() - min(e.next_attempt_at)) / 60)::float8 AS "oldest_due_minutes!"
                   FROM events e JOIN sources s ON s.slug = e.source
                   WHERE e.state IN ('queued', 'retrying') AND e.next_attempt_at <= now()
                     AND NOT coalesce(s.paused_override, s.config_paused)
                   GROUP BY e.source"#
            )
            .fetch_all(pool)
            .await?;
            for r in rows {
                let Some(rule) = rules
                    .per_source
                    .get(&r.source)
                    .and_then(|s| s.backlog.as_ref())
                else {
                    continue;
                };
                if r.oldest_due_minutes > rule.oldest_due_minutes as f64 {
                    found.push(condition(
                        "backlog",
                        &r.source,
                        format!(
                            "the oldest due event has waited {:.0} minutes; {} are due",
                            r.oldest_due_minutes, r.waiting
                        ),
                        &[
                            ("oldest_due_minutes", r.oldest_due_minutes),
                            ("due", r.waiting as f64),
                        ],
                        format!("/deliveries?source={}", r.source),
                    ));
                }
            }
        }
        let signature_window = widest(rules, |r| {
            r.signature_failures.as_ref().map(|s| s.window_minutes)
        });
        let failing_window = widest(rules, |r| r.destination_failing.as_ref().map(|f| f.minutes));
        if let Some(minutes) = signature_window.max(failing_window) {
            let rows = sqlx::query!(
                r#"SELECT source, (extract(epoch FROM now() - minute) / 60)::float8 AS "age_minutes!",
                          bad_signature::bigint AS "bad_signature!", attempts::bigint AS "attempts!",
                          attempts_failed::bigint AS "attempts_failed!"
                   FROM minute_stats
                   WHERE minute >= now() - make_interval(mins => $1)"#,
                minutes as i32
            )
            .fetch_all(pool)
            .await?;
            for (slug, set) in &rules.per_source {
                let within = |m: u32| {
                    rows.iter()
                        .filter(move |r| &r.source == slug && r.age_minutes < m as f64)
                };
                if let Some(rule) = &set.signature_failures {
                    let bad: i64 = within(rule.window_minutes).map(|r| r.bad_signature).sum();
                    if bad >= rule.threshold {
                        found.push(condition(
                            "signature_failures",
                            slug,
                            format!(
                                "{bad} deliveries failed signature verification in the last {} minutes",
                                rule.window_minutes
                            ),
                            &[("bad_signature", bad as f64)],
                            format!("/deliveries?source={slug}&outcome=rejected"),
                        ));
                    }
                }
                if let Some(rule) = &set.destination_failing {
                    let attempts: i64 = within(rule.minutes).map(|r| r.attempts).sum();
                    let failed: i64 = within(rule.minutes).map(|r| r.attempts_failed).sum();
                    if attempts >= rule.min_attempts && failed == attempts {
                        found.push(condition(
                            "destination_failing",
                            slug,
                            format!(
                                "all {attempts} forward attempts of the last {} minutes failed",
                                rule.minutes
                            ),
                            &[("attempts", attempts as f64), ("failed", failed as f64)],
                            format!("/deliveries?source={slug}"),
                        ));
                    }
                }
            }
        }
        Ok(found)
    }
}
