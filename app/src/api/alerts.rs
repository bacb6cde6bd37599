//! Alert rules (issue 17): what is wrong right now, per source, judged from
//! the same figures the dashboard shows. One evaluation serves the
//! overview's banner and the server's alert evaluator, which gives each
//! condition a lifecycle (firing, resolved) and sends it to the channels.

use std::collections::BTreeMap;

use leptos::prelude::*;
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

impl RuleSet {
    /// Whether `rule` (one of `RULES`) is on.
    pub fn has(&self, rule: &str) -> bool {
        match rule {
            "duplicate_storm" => self.duplicate_storm.is_some(),
            "dead_letters" => self.dead_letters.is_some(),
            "backlog" => self.backlog.is_some(),
            "signature_failures" => self.signature_failures.is_some(),
            "destination_failing" => self.destination_failing.is_some(),
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

/// A rule's name for people: "Duplicate storm".
pub fn title(rule: &str) -> &'static str {
    match rule {
        "duplicate_storm" => "Duplicate storm",
        "dead_letters" => "Dead letters",
        "backlog" => "Backlog",
        "signature_failures" => "Signature failures",
        "destination_failing" => "Destination failing",
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
            _ => "See its deliveries",
        }
    }
}

/// An alert as the Alerts page and the API show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct AlertRow {
    pub id: i64,
    pub rule: String,
    pub title: String,
    pub source: String,
    /// firing or resolved
    pub state: String,
    /// UTC, `YYYY-MM-DD HH:MM:SS`.
    pub started_at: String,
    pub resolved_at: Option<String>,
    pub summary: String,
    pub figures: BTreeMap<String, f64>,
    pub link: String,
    /// Notifications of it are held back until then (UTC), by a silence.
    pub silenced_until: Option<String>,
}

/// A rule an admin silenced for a while: its alerts are still kept and
/// shown, but not sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct SilenceRow {
    pub id: i64,
    pub rule: String,
    /// None: every source.
    pub source: Option<String>,
    pub until: String,
    pub by: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
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

#[server(endpoint = "alerts")]
pub async fn list_alerts() -> Result<AlertsPage, ServerFnError> {
    Ok(ssr::page(&crate::api::ssr::cx().await?).await?)
}

/// Silences a rule (for one source, or all) for `minutes` (admin; audit-logged).
#[server(endpoint = "alert-silence")]
pub async fn silence_rule(
    rule: String,
    #[server(default)] source: String,
    minutes: i64,
    reason: String,
) -> Result<SilenceRow, ServerFnError> {
    Ok(ssr::silence(&crate::api::ssr::cx().await?, rule, source, minutes, reason).await?)
}

/// Ends a silence now (admin; audit-logged).
#[server(endpoint = "alert-unsilence")]
pub async fn end_silence(id: i64) -> Result<(), ServerFnError> {
    Ok(ssr::unsilence(&crate::api::ssr::cx().await?, id).await?)
}

#[cfg(feature = "ssr")]
pub mod ssr {
    use sqlx::PgPool;

    use super::*;

    use crate::api::ssr::Cx;
    use crate::auth::Role;
    use crate::error::AppError;

    struct Row {
        id: i64,
        rule: String,
        source: String,
        state: String,
        started_at: String,
        resolved_at: Option<String>,
        summary: String,
        figures: serde_json::Value,
        link: String,
        silenced_until: Option<String>,
    }

    impl Row {
        fn into_alert(self) -> AlertRow {
            let condition = Condition {
                rule: self.rule,
                source: self.source,
                summary: self.summary,
                figures: serde_json::from_value(self.figures).unwrap_or_default(),
                link: self.link,
            };
            AlertRow {
                id: self.id,
                title: condition.title().to_owned(),
                rule: condition.rule,
                source: condition.source,
                state: self.state,
                started_at: self.started_at,
                resolved_at: self.resolved_at,
                summary: condition.summary,
                figures: condition.figures,
                link: condition.link,
                silenced_until: self.silenced_until,
            }
        }
    }

    /// The silence that holds back notifications of `rule` for `source`
    /// now, if any (its end, UTC).
    pub async fn silenced(
        executor: impl sqlx::PgExecutor<'_>,
        rule: &str,
        source: &str,
    ) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar!(
            r#"SELECT EXISTS (SELECT 1 FROM alert_silences
                              WHERE rule = $1 AND (source IS NULL OR source = $2)
                                AND until > now()) AS "silenced!""#,
            rule,
            source
        )
        .fetch_one(executor)
        .await
    }

    /// Firing alerts, the recent resolved ones, and the silences in force (viewer).
    pub async fn page(cx: &Cx) -> Result<AlertsPage, AppError> {
        cx.require(Role::Viewer)?;
        let rows = sqlx::query_as!(
            Row,
            r#"SELECT a.id AS "id!", a.rule AS "rule!", a.source AS "source!", a.state AS "state!",
                      to_char(a.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS "started_at!",
                      to_char(a.resolved_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS resolved_at,
                      a.summary AS "summary!", a.figures AS "figures!", a.link AS "link!",
                      (SELECT to_char(max(s.until) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                       FROM alert_silences s
                       WHERE s.rule = a.rule AND (s.source IS NULL OR s.source = a.source)
                         AND s.until > now()) AS silenced_until
               FROM ((SELECT * FROM alerts WHERE state = 'firing')
                     UNION ALL
                     (SELECT * FROM alerts WHERE state = 'resolved'
                      ORDER BY resolved_at DESC LIMIT $1)) a
               ORDER BY a.state, coalesce(a.resolved_at, a.started_at) DESC"#,
            RECENT_ALERTS
        )
        .fetch_all(&cx.pool)
        .await
        .map_err(AppError::database)?;
        let (firing, resolved): (Vec<AlertRow>, Vec<AlertRow>) = rows
            .into_iter()
            .map(Row::into_alert)
            .partition(|a| a.state == "firing");
        let silences = sqlx::query_as!(
            SilenceRow,
            r#"SELECT id, rule, source,
                      to_char(until AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS "until!",
                      created_by AS by, reason
               FROM alert_silences WHERE until > now() ORDER BY until"#
        )
        .fetch_all(&cx.pool)
        .await
        .map_err(AppError::database)?;
        Ok(AlertsPage {
            firing,
            resolved,
            silences,
        })
    }

    /// Holds back notifications of `rule` (for `source`, or every source
    /// when empty) for `minutes` (admin; audit-logged, with a reason).
    pub async fn silence(
        cx: &Cx,
        rule: String,
        source: String,
        minutes: i64,
        reason: String,
    ) -> Result<SilenceRow, AppError> {
        let admin = cx.require(Role::Admin)?;
        if !RULES.contains(&rule.as_str()) {
            return Err(AppError::BadRequest(format!(
                "{rule:?} is not one of {}",
                RULES.join(", ")
            )));
        }
        if !(1..=MAX_SILENCE_MINUTES).contains(&minutes) {
            return Err(AppError::BadRequest(format!(
                "silence for 1 to {MAX_SILENCE_MINUTES} minutes"
            )));
        }
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(AppError::BadRequest(
                "give a reason: it goes into the audit log".into(),
            ));
        }
        let source = Some(source.trim().to_owned()).filter(|s| !s.is_empty());
        let row = sqlx::query_as!(
            SilenceRow,
            r#"INSERT INTO alert_silences (rule, source, until, created_by, reason)
               VALUES ($1, $2, now() + make_interval(mins => $3), $4, $5)
               RETURNING id, rule, source,
                         to_char(until AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS "until!",
                         created_by AS by, reason"#,
            rule,
            source,
            minutes as i32,
            admin.username,
            reason
        )
        .fetch_one(&cx.pool)
        .await
        .map_err(AppError::database)?;
        cx.audit(
            admin,
            "alert.silence",
            Some(&format!(
                "{rule} on {}",
                source.as_deref().unwrap_or("every source")
            )),
            &format!("until {} UTC", row.until),
            serde_json::json!({ "reason": reason, "minutes": minutes }),
        )
        .await?;
        Ok(row)
    }

    /// Ends a silence now (admin; audit-logged).
    pub async fn unsilence(cx: &Cx, id: i64) -> Result<(), AppError> {
        let admin = cx.require(Role::Admin)?;
        let ended = sqlx::query!(
            "UPDATE alert_silences SET until = now() WHERE id = $1 AND until > now()
             RETURNING rule, source",
            id
        )
        .fetch_optional(&cx.pool)
        .await
        .map_err(AppError::database)?
        .ok_or_else(|| AppError::NotFound("no silence in force has that id".into()))?;
        cx.audit(
            admin,
            "alert.unsilence",
            Some(&format!(
                "{} on {}",
                ended.rule,
                ended.source.as_deref().unwrap_or("every source")
            )),
            "ended",
            serde_json::json!({}),
        )
        .await
    }

    fn percent(rate: f64) -> String {
        format!("{:.1}%", rate * 100.0)
    }

    /// "1 event", "3 events".
    fn counted(n: i64, one: &str, many: &str) -> String {
        format!("{n} {}", if n == 1 { one } else { many })
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

    /// Every rule that holds now, per source. `firing`: the alerts firing
    /// now, so a destination that failed stays failing until an attempt
    /// succeeds (its retries grow apart, and fewer attempts are no cure).
    /// Each rule is one statement over every source, with each source's
    /// own thresholds; counts stop at `COUNT_CAP`.
    pub async fn evaluate(
        pool: &PgPool,
        rules: &AlertRules,
        firing: &std::collections::BTreeSet<(String, String)>,
    ) -> Result<Vec<Condition>, sqlx::Error> {
        let cap = crate::api::overview::COUNT_CAP;
        let mut found = Vec::new();
        // A window of N minutes takes the minutes that overlap it: a
        // minute's row counts while any of it is within the window.
        let storms: Vec<(&String, &StormRule)> = rules
            .per_source
            .iter()
            .filter_map(|(s, r)| r.duplicate_storm.as_ref().map(|d| (s, d)))
            .collect();
        if !storms.is_empty() {
            let rows = sqlx::query!(
                r#"WITH r AS (SELECT * FROM unnest($1::text[], $2::int[], $3::int[]) AS r(source, w, b))
                   SELECT r.source AS "source!",
                          coalesce(sum(m.claimed + m.completed + m.in_progress + m.dead)
                              FILTER (WHERE m.minute > now() - make_interval(mins => r.w + 1)), 0)::bigint AS "recent!",
                          coalesce(sum(m.completed + m.in_progress + m.dead)
                              FILTER (WHERE m.minute > now() - make_interval(mins => r.w + 1)), 0)::bigint AS "recent_dup!",
                          coalesce(sum(m.claimed + m.completed + m.in_progress + m.dead)
                              FILTER (WHERE m.minute <= now() - make_interval(mins => r.w + 1)), 0)::bigint AS "base!",
                          coalesce(sum(m.completed + m.in_progress + m.dead)
                              FILTER (WHERE m.minute <= now() - make_interval(mins => r.w + 1)), 0)::bigint AS "base_dup!"
                   FROM r JOIN minute_stats m ON m.source = r.source
                        AND m.minute > now() - make_interval(mins => r.w + 1, hours => r.b)
                   GROUP BY r.source"#,
                &storms.iter().map(|(s, _)| (*s).clone()).collect::<Vec<_>>(),
                &storms.iter().map(|(_, r)| r.window_minutes as i32).collect::<Vec<_>>(),
                &storms.iter().map(|(_, r)| r.baseline_hours as i32).collect::<Vec<_>>()
            )
            .fetch_all(pool)
            .await?;
            for r in rows {
                let Some((slug, rule)) = storms.iter().find(|(s, _)| **s == r.source) else {
                    continue;
                };
                let rate = |dup: i64, all: i64| {
                    if all > 0 {
                        dup as f64 / all as f64
                    } else {
                        0.0
                    }
                };
                let (recent_rate, baseline_rate) =
                    (rate(r.recent_dup, r.recent), rate(r.base_dup, r.base));
                if r.recent >= rule.min_deliveries
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
                            r.recent,
                            rule.baseline_hours,
                            percent(baseline_rate)
                        ),
                        &[
                            ("recent_rate", recent_rate),
                            ("baseline_rate", baseline_rate),
                            ("recent_verified", r.recent as f64),
                        ],
                        format!("/deliveries?source={slug}"),
                    ));
                }
            }
        }
        let dead: Vec<(&String, &DeadLettersRule)> = rules
            .per_source
            .iter()
            .filter_map(|(s, r)| r.dead_letters.as_ref().map(|d| (s, d)))
            .collect();
        if !dead.is_empty() {
            let rows = sqlx::query!(
                r#"SELECT r.source AS "source!", count(d.*) AS "dead!"
                   FROM unnest($1::text[], $2::int[]) AS r(source, w)
                   JOIN LATERAL (SELECT 1 FROM dispatches e
                                 WHERE e.state = 'dead' AND e.source = r.source
                                   AND e.state_changed_at > now() - make_interval(mins => r.w)
                                 LIMIT $3) d ON true
                   GROUP BY r.source"#,
                &dead.iter().map(|(s, _)| (*s).clone()).collect::<Vec<_>>(),
                &dead
                    .iter()
                    .map(|(_, r)| r.window_minutes as i32)
                    .collect::<Vec<_>>(),
                cap
            )
            .fetch_all(pool)
            .await?;
            for r in rows {
                let Some((slug, rule)) = dead.iter().find(|(s, _)| **s == r.source) else {
                    continue;
                };
                if r.dead >= rule.threshold {
                    found.push(condition(
                        "dead_letters",
                        slug,
                        format!(
                            "{} dead-lettered in the last {} minutes",
                            counted(r.dead, "event", "events"),
                            rule.window_minutes
                        ),
                        &[("dead_letters", r.dead as f64)],
                        format!("/dead?source={slug}"),
                    ));
                }
            }
        }
        if rules.per_source.values().any(|r| r.backlog.is_some()) {
            // The most overdue first, capped, as the overview counts them.
            let rows = sqlx::query!(
                r#"SELECT w.source AS "source!", count(*) AS "due!",
                          (extract(epoch FROM now() - min(w.next_attempt_at)) / 60)::float8 AS "oldest_due_minutes!"
                   FROM (SELECT e.source, e.next_attempt_at FROM dispatches e
                         WHERE e.state IN ('queued', 'retrying') AND e.next_attempt_at <= now()
                         ORDER BY e.next_attempt_at LIMIT $1) w
                   JOIN sources s ON s.slug = w.source
                   WHERE NOT coalesce(s.paused_override, s.config_paused)
                   GROUP BY w.source"#,
                cap
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
                            r.oldest_due_minutes, r.due
                        ),
                        &[
                            ("oldest_due_minutes", r.oldest_due_minutes),
                            ("due", r.due as f64),
                        ],
                        format!("/deliveries?source={}", r.source),
                    ));
                }
            }
        }
        let windows: Vec<(&String, i32, i32)> = rules
            .per_source
            .iter()
            .filter(|(_, r)| r.signature_failures.is_some() || r.destination_failing.is_some())
            .map(|(s, r)| {
                (
                    s,
                    r.signature_failures
                        .as_ref()
                        .map_or(0, |x| x.window_minutes as i32),
                    r.destination_failing
                        .as_ref()
                        .map_or(0, |x| x.minutes as i32),
                )
            })
            .collect();
        if !windows.is_empty() {
            let rows = sqlx::query!(
                r#"SELECT r.source AS "source!",
                          coalesce(sum(m.bad_signature) FILTER (WHERE m.minute > now() - make_interval(mins => r.sw + 1)), 0)::bigint AS "bad!",
                          coalesce(sum(m.attempts) FILTER (WHERE m.minute > now() - make_interval(mins => r.fw + 1)), 0)::bigint AS "attempts!",
                          coalesce(sum(m.attempts_failed) FILTER (WHERE m.minute > now() - make_interval(mins => r.fw + 1)), 0)::bigint AS "failed!"
                   FROM unnest($1::text[], $2::int[], $3::int[]) AS r(source, sw, fw)
                   JOIN minute_stats m ON m.source = r.source
                        AND m.minute > now() - make_interval(mins => greatest(r.sw, r.fw) + 1)
                   GROUP BY r.source"#,
                &windows.iter().map(|(s, _, _)| (*s).clone()).collect::<Vec<_>>(),
                &windows.iter().map(|(_, w, _)| *w).collect::<Vec<_>>(),
                &windows.iter().map(|(_, _, w)| *w).collect::<Vec<_>>()
            )
            .fetch_all(pool)
            .await?;
            // A destination whose breaker is open makes no attempts to fail:
            // its source's destination keeps failing while it stays open.
            let broken: Vec<(String, Vec<String>)> = sqlx::query!(
                r#"SELECT source, array_agg(destination ORDER BY destination) AS "destinations!"
                   FROM destination_gates WHERE breaker <> 'closed' GROUP BY source"#
            )
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| (r.source, r.destinations))
            .collect();
            for (slug, set) in &rules.per_source {
                let (bad, attempts, failed) = rows
                    .iter()
                    .find(|r| &r.source == slug)
                    .map_or((0, 0, 0), |r| (r.bad, r.attempts, r.failed));
                if let Some(rule) = &set.signature_failures {
                    if bad >= rule.threshold {
                        found.push(condition(
                            "signature_failures",
                            slug,
                            format!(
                                "{} failed signature verification in the last {} minutes",
                                counted(bad, "delivery", "deliveries"),
                                rule.window_minutes
                            ),
                            &[("bad_signature", bad as f64)],
                            format!("/deliveries?source={slug}&outcome=rejected"),
                        ));
                    }
                }
                if let Some(rule) = &set.destination_failing {
                    if let Some((_, open)) = broken.iter().find(|(s, _)| s == slug) {
                        found.push(condition(
                            "destination_failing",
                            slug,
                            format!(
                                "the circuit breaker of {} is open: its events wait",
                                open.join(", ")
                            ),
                            &[("breakers_open", open.len() as f64)],
                            format!("/sources#{slug}"),
                        ));
                        continue;
                    }
                    let was = firing.contains(&("destination_failing".to_owned(), slug.clone()));
                    // Starts on enough failures, none succeeding; ends on a success.
                    let holds = failed == attempts
                        && if was {
                            true
                        } else {
                            attempts >= rule.min_attempts
                        };
                    if holds {
                        found.push(condition(
                            "destination_failing",
                            slug,
                            format!(
                                "every forward attempt of the last {} minutes failed ({failed})",
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

    /// The alerts firing now, as the overview's banner shows them.
    pub async fn firing(pool: &PgPool) -> Result<Vec<Condition>, sqlx::Error> {
        Ok(sqlx::query!(
            "SELECT rule, source, summary, figures, link FROM alerts
             WHERE state = 'firing' ORDER BY rule <> 'duplicate_storm', started_at"
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|r| Condition {
            rule: r.rule,
            source: r.source,
            summary: r.summary,
            figures: serde_json::from_value(r.figures).unwrap_or_default(),
            link: r.link,
        })
        .collect())
    }
}

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
        };
        for rule in RULES {
            assert!(all.has(rule), "{rule}");
            assert!(!none.has(rule), "{rule}");
            assert_ne!(title(rule), "Alert", "{rule} has its own title");
        }
        assert!(!all.has("no_such_rule"));
    }
}
