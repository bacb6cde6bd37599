//! Alert rules (issue 17): what is wrong right now, per source, judged from
//! the same figures the dashboard shows. One evaluation serves the
//! overview's banner and the server's alert evaluator, which gives each
//! condition a lifecycle (firing, resolved) and sends it to the channels.

use sqlx::PgPool;

use replaysafe_types::alerts::*;
use replaysafe_types::overview::Backlog;

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
    let cap = replaysafe_types::overview::COUNT_CAP;
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
    // Dead letters and missed events: counts of events in each source's own
    // windows (0: the rule is off for it), in one statement.
    let windows: Vec<(&String, i32, i32)> = rules
        .per_source
        .iter()
        .filter(|(_, r)| r.dead_letters.is_some() || r.missed_events.is_some())
        .map(|(s, r)| {
            (
                s,
                r.dead_letters
                    .as_ref()
                    .map_or(0, |x| x.window_minutes as i32),
                r.missed_events
                    .as_ref()
                    .map_or(0, |x| x.window_minutes as i32),
            )
        })
        .collect();
    if !windows.is_empty() {
        let rows = sqlx::query!(
            // Dead: events (`events::backlog`), one dead at two destinations
            // once. Missed: a key counts once, when a run first found it.
            r#"SELECT r.source AS "source!",
                      (SELECT count(DISTINCT d.event_id) FROM
                           (SELECT e.event_id FROM dispatches e
                            WHERE r.dw > 0 AND e.state = 'dead' AND e.source = r.source
                              AND e.state_changed_at > now() - make_interval(mins => r.dw)
                            LIMIT $4) d) AS "dead!",
                      (SELECT count(*) FROM
                           (SELECT 1 FROM reconcile_findings f
                            WHERE r.mw > 0 AND f.source = r.source
                              AND f.found_at > now() - make_interval(mins => r.mw)
                            LIMIT $4) f) AS "missed!"
               FROM unnest($1::text[], $2::int[], $3::int[]) AS r(source, dw, mw)"#,
            &windows
                .iter()
                .map(|(s, _, _)| (*s).clone())
                .collect::<Vec<_>>(),
            &windows.iter().map(|(_, w, _)| *w).collect::<Vec<_>>(),
            &windows.iter().map(|(_, _, w)| *w).collect::<Vec<_>>(),
            cap
        )
        .fetch_all(pool)
        .await?;
        for r in rows {
            let Some(set) = rules.per_source.get(&r.source) else {
                continue;
            };
            let slug = &r.source;
            if let Some(rule) = set.dead_letters.as_ref().filter(|x| r.dead >= x.threshold) {
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
            if let Some(rule) = set
                .missed_events
                .as_ref()
                .filter(|x| r.missed >= x.threshold)
            {
                found.push(condition(
                    "missed_events",
                    slug,
                    format!(
                        "reconciliation found {} the provider sent that never reached replaysafe in the last {} minutes",
                        counted(r.missed, "event", "events"),
                        rule.window_minutes
                    ),
                    &[("missed_events", r.missed as f64)],
                    format!("/reconciliation?source={slug}"),
                ));
            }
        }
    }
    // Incidents: the largest open one (neither acknowledged, resolved nor
    // ignored) of each source with enough events, and how many are open.
    let incident_rules: Vec<(String, i64)> = rules
        .per_source
        .iter()
        .filter_map(|(s, r)| {
            r.incident_opened
                .as_ref()
                .map(|i| (s.clone(), i.min_events))
        })
        .collect();
    if !incident_rules.is_empty() {
        let (sources, minimums): (Vec<String>, Vec<i64>) = incident_rules.into_iter().unzip();
        let rows = sqlx::query!(
            r#"SELECT DISTINCT ON (i.source)
                      i.source AS "source!", i.id AS "id!", i.destination AS "destination!",
                      i.kind AS "kind!",
                      i.affected_events AS "events!",
                      i.first_seen_at AS "first_seen_at!: replaysafe_types::time::Time",
                      count(*) OVER (PARTITION BY i.source) AS "open!"
               FROM incidents i
               JOIN unnest($1::text[], $2::bigint[]) AS r(source, min_events) ON r.source = i.source
               WHERE i.state = 'open' AND i.affected_events >= r.min_events
               ORDER BY i.source, i.affected_events DESC, i.id"#,
            &sources,
            &minimums
        )
        .fetch_all(pool)
        .await?;
        for r in rows {
            // The kind, never the answer's text: alerts leave for chat and
            // mail, and an answer may echo the payload.
            let what = &r.kind;
            let more = match r.open - 1 {
                0 => String::new(),
                n => format!(" (and {} more open)", counted(n, "incident", "incidents")),
            };
            found.push(condition(
                "incident_opened",
                &r.source,
                format!(
                    "{} answered {what} to {} since {} UTC{more}",
                    r.destination,
                    counted(r.events, "event", "events"),
                    r.first_seen_at.format("%H:%M")
                ),
                &[
                    ("open_incidents", r.open as f64),
                    ("events", r.events as f64),
                ],
                if r.open == 1 {
                    format!("/incidents/{}", r.id)
                } else {
                    "/incidents?state=open".to_owned()
                },
            ));
        }
    }
    if rules.per_source.values().any(|r| r.backlog.is_some()) {
        // Due as the overview and the metrics count it (`events::backlog`).
        let mut rows: std::collections::BTreeMap<String, Backlog> = Default::default();
        for row in crate::events::backlog::by_destination(pool).await? {
            rows.entry(row.source.clone()).or_default().add(&row);
        }
        for (source, b) in rows {
            let Some(rule) = rules
                .per_source
                .get(&source)
                .and_then(|s| s.backlog.as_ref())
            else {
                continue;
            };
            let Some(oldest_due_minutes) = b.oldest_due_secs.map(|s| s / 60.0) else {
                continue;
            };
            if oldest_due_minutes > rule.oldest_due_minutes as f64 {
                found.push(condition(
                    "backlog",
                    &source,
                    format!(
                        "the oldest due event has waited {oldest_due_minutes:.0} minutes; {} are due",
                        b.due
                    ),
                    &[
                        ("oldest_due_minutes", oldest_due_minutes),
                        ("due", b.due as f64),
                    ],
                    format!("/deliveries?source={source}"),
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
