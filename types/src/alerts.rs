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
    #[serde(default)]
    pub missed_events: Option<MissedEventsRule>,
    #[serde(default)]
    pub incident_opened: Option<IncidentRule>,
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

/// At least `threshold` of something in the last `window_minutes`: events
/// dead-lettered, deliveries failing verification, events reconciliation
/// found missing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CountRule {
    pub window_minutes: u32,
    pub threshold: i64,
}

/// Events dead-lettered.
pub type DeadLettersRule = CountRule;
/// Deliveries that failed signature verification.
pub type SignatureRule = CountRule;
/// Events the provider sent that reconciliation found never reached
/// replaysafe (each counted once, when first found).
pub type MissedEventsRule = CountRule;

/// An incident of the source is open (neither acknowledged, resolved nor
/// ignored) with at least `min_events` affected events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IncidentRule {
    pub min_events: i64,
}

/// The oldest due event of a source that is not paused has waited longer
/// than `oldest_due_minutes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BacklogRule {
    pub oldest_due_minutes: u32,
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
    /// every attempt for 5 minutes; any event reconciliation found missing
    /// in the last hour (a scheduled run's period).
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
            missed_events: Some(MissedEventsRule {
                window_minutes: 60,
                threshold: 1,
            }),
            incident_opened: Some(IncidentRule { min_events: 3 }),
        }
    }
}

impl RuleSet {
    /// Whether `rule` (one of `RULES`) is on.
    pub fn has(&self, rule: &str) -> bool {
        match rule {
            "duplicate_storm" => self.duplicate_storm.is_some(),
            "dead_letters" => self.dead_letters.is_some(),
            "backlog" => self.backlog.is_some(),
            "signature_failures" => self.signature_failures.is_some(),
            "destination_failing" => self.destination_failing.is_some(),
            "missed_events" => self.missed_events.is_some(),
            "incident_opened" => self.incident_opened.is_some(),
            _ => false,
        }
    }
}

/// Every configured source's rules (the defaults with its overrides).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertRules {
    pub per_source: BTreeMap<String, RuleSet>,
}

impl AlertRules {
    /// Whether these rules evaluate `rule` for `source`.
    pub fn evaluates(&self, rule: &str, source: &str) -> bool {
        self.per_source.get(source).is_some_and(|set| set.has(rule))
    }
}

/// The rules' names, as alerts, the config and the channels call them.
pub const RULES: [&str; 7] = [
    "duplicate_storm",
    "dead_letters",
    "backlog",
    "signature_failures",
    "destination_failing",
    "missed_events",
    "incident_opened",
];

/// A rule that holds for a source now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// A rule's name for people: "Duplicate storm".
pub fn title(rule: &str) -> &'static str {
    match rule {
        "duplicate_storm" => "Duplicate storm",
        "dead_letters" => "Dead letters",
        "backlog" => "Backlog",
        "signature_failures" => "Signature failures",
        "destination_failing" => "Destination failing",
        "missed_events" => "Missed events",
        "incident_opened" => "Incident opened",
        _ => "Alert",
    }
}

impl Condition {
    pub fn title(&self) -> &'static str {
        title(&self.rule)
    }

    /// What its link shows.
    pub fn link_text(&self) -> &'static str {
        match self.rule.as_str() {
            "dead_letters" => "See dead letters",
            "signature_failures" => "See the rejected deliveries",
            "missed_events" => "See the reconciliation",
            "incident_opened" => "See the incident",
            _ => "See its deliveries",
        }
    }
}

/// An alert as the Alerts page and the API show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertRow {
    pub id: i64,
    pub rule: String,
    pub title: String,
    pub source: String,
    pub state: crate::states::AlertState,
    #[serde(with = "crate::time::wire")]
    pub started_at: chrono::DateTime<chrono::Utc>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub resolved_at: Option<chrono::DateTime<chrono::Utc>>,
    pub summary: String,
    pub figures: BTreeMap<String, f64>,
    pub link: String,
    /// Notifications of it are held back until then (UTC), by a silence.
    #[serde(default, with = "crate::time::wire_opt")]
    pub silenced_until: Option<chrono::DateTime<chrono::Utc>>,
}

/// A rule an admin silenced for a while: its alerts are still kept and
/// shown, but not sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SilenceRow {
    pub id: i64,
    pub rule: String,
    /// None: every source.
    pub source: Option<String>,
    #[serde(with = "crate::time::wire")]
    pub until: chrono::DateTime<chrono::Utc>,
    pub by: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertsPage {
    pub firing: Vec<AlertRow>,
    /// The most recent resolved ones, newest first.
    pub resolved: Vec<AlertRow>,
    pub silences: Vec<SilenceRow>,
}

/// Resolved alerts the page lists.
pub const RECENT_ALERTS: i64 = 50;
/// The longest silence: a week.
pub const MAX_SILENCE_MINUTES: i64 = 7 * 24 * 60;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_known_to_a_rule_set_by_name() {
        let all = RuleSet::default();
        let none = RuleSet {
            duplicate_storm: None,
            dead_letters: None,
            backlog: None,
            signature_failures: None,
            destination_failing: None,
            missed_events: None,
            incident_opened: None,
        };
        for rule in RULES {
            assert!(all.has(rule), "{rule}");
            assert!(!none.has(rule), "{rule}");
            assert_ne!(title(rule), "Alert", "{rule} has its own title");
        }
        assert!(!all.has("no_such_rule"));
    }
}
