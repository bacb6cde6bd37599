//! One evaluation: the rules that hold now against the firing alerts.

use std::collections::BTreeMap;

use sqlx::PgPool;

use crate::config::Config;

/// What one evaluation changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transitions {
    /// Another process held the lock: it evaluated instead.
    pub skipped: bool,
    pub fired: Vec<(String, String)>,
    pub resolved: Vec<(String, String)>,
    pub repeated: Vec<(String, String)>,
}

/// Evaluates the rules once, if no other process is at it: a condition
/// with no firing alert fires one; a firing alert whose condition is gone
/// is resolved; one still firing past `repeat_after` is sent again. Each
/// transition queues its notifications in the same transaction.
pub async fn evaluate_once(pool: &PgPool, config: &Config) -> Result<Transitions, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let leader: bool = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock(hashtext('replaysafe.alerts')) AS "got!""#
    )
    .fetch_one(&mut *tx)
    .await?;
    if !leader {
        return Ok(Transitions {
            skipped: true,
            ..Default::default()
        });
    }
    let repeat_secs = config.alerts.repeat_after.map(|d| d.as_secs_f64());
    let resolve_after = config.alerts.resolve_after;
    let unevaluated_after = resolve_after.max(unevaluated_after(config.alerts.every));
    let firing: BTreeMap<(String, String), Firing> = sqlx::query!(
        r#"SELECT id, rule, source,
                  ($1::float8 IS NOT NULL AND last_sent_at < now() - make_interval(secs => $1)) AS "repeat_due!",
                  held_at <= now() - make_interval(secs => $2) AS "quiet!",
                  held_at <= now() - make_interval(secs => $3) AS "abandoned!"
           FROM alerts WHERE state = 'firing'"#,
        repeat_secs,
        resolve_after.as_secs_f64(),
        unevaluated_after.as_secs_f64()
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| {
        let firing = Firing {
            id: r.id,
            repeat_due: r.repeat_due,
            quiet: r.quiet,
            abandoned: r.abandoned,
        };
        ((r.rule, r.source), firing)
    })
    .collect();
    let keys = firing.keys().cloned().collect();
    let holding = crate::alerts::rules::evaluate(pool, &config.alert_rules, &keys).await?;
    let mut done = Transitions::default();
    for c in &holding {
        let figures = serde_json::to_value(&c.figures).expect("figures serialise");
        let key = (c.rule.clone(), c.source.clone());
        match firing.get(&key) {
            None => {
                let id = sqlx::query_scalar!(
                    "INSERT INTO alerts (rule, source, summary, figures, link)
                     VALUES ($1, $2, $3, $4, $5) RETURNING id",
                    c.rule,
                    c.source,
                    c.summary,
                    figures,
                    c.link
                )
                .fetch_one(&mut *tx)
                .await?;
                queue(&mut tx, config, id, (&c.rule, &c.source), "firing").await?;
                done.fired.push(key);
            }
            Some(&Firing { id, repeat_due, .. }) => {
                // The latest figures; sent again when the repeat is due.
                sqlx::query!(
                    "UPDATE alerts SET summary = $2, figures = $3, held_at = now(),
                         last_sent_at = CASE WHEN $4 THEN now() ELSE last_sent_at END
                     WHERE id = $1 AND state = 'firing'",
                    id,
                    c.summary,
                    figures,
                    repeat_due
                )
                .execute(&mut *tx)
                .await?;
                if repeat_due {
                    queue(&mut tx, config, id, (&c.rule, &c.source), "repeat").await?;
                    done.repeated.push(key);
                }
            }
        }
    }
    for ((rule, source), alert) in &firing {
        if holding
            .iter()
            .any(|c| &c.rule == rule && &c.source == source)
        {
            continue;
        }
        // Another process's config may evaluate what this one does not (a
        // deploy changing the sources): such an alert is left to it, and
        // resolved here only when nobody has seen it hold for long.
        let ends = if config.alert_rules.evaluates(rule, source) {
            alert.quiet
        } else {
            alert.abandoned
        };
        if !ends {
            continue;
        }
        let id = &alert.id;
        let resolved = sqlx::query!(
            "UPDATE alerts SET state = 'resolved', resolved_at = now()
             WHERE id = $1 AND state = 'firing'",
            id
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if resolved == 1 {
            queue(&mut tx, config, *id, (rule, source), "resolved").await?;
            done.resolved.push((rule.clone(), source.clone()));
        }
    }
    tx.commit().await?;
    for (rule, source) in &done.fired {
        tracing::warn!(rule, source, "alert firing");
    }
    for (rule, source) in &done.resolved {
        tracing::info!(rule, source, "alert resolved");
    }
    Ok(done)
}

/// A firing alert as this evaluation finds it.
struct Firing {
    id: i64,
    /// Its repeat is due.
    repeat_due: bool,
    /// Its condition has not held for `resolve_after`.
    quiet: bool,
    /// Nobody has seen it hold for `unevaluated_after`.
    abandoned: bool,
}

/// How long a firing alert that this process does not evaluate (its source
/// or rule is not in this config) may go unseen before it is resolved here:
/// long enough for every process to take its turn at evaluating.
fn unevaluated_after(every: std::time::Duration) -> std::time::Duration {
    (every * 10).max(std::time::Duration::from_secs(600))
}

/// A notification of `kind` for every channel that takes `rule`, unless
/// an admin silenced it.
async fn queue(
    tx: &mut sqlx::PgConnection,
    config: &Config,
    alert: i64,
    (rule, source): (&str, &str),
    kind: &str,
) -> Result<(), sqlx::Error> {
    // Silenced by an admin: kept and shown, not sent.
    if crate::alerts::rules::silenced(&mut *tx, rule, source).await? {
        return Ok(());
    }
    let channels: Vec<String> = config
        .alerts
        .channels
        .iter()
        .filter(|c| c.rules.as_ref().is_none_or(|r| r.iter().any(|r| r == rule)))
        .map(|c| c.name.clone())
        .collect();
    // What is sent is the alert as it is now: a late retry tells of the
    // transition it was queued for. A resolution goes only where the alert
    // was told (not where a silence held its firing back).
    sqlx::query!(
        r#"INSERT INTO alert_notifications (alert_id, channel, kind, payload)
           SELECT a.id, c.channel, $3,
                  jsonb_build_object(
                      'id', a.id, 'rule', a.rule, 'source', a.source, 'state', a.state,
                      'started_at', to_char(a.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                      'resolved_at', to_char(a.resolved_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                      'summary', a.summary, 'figures', a.figures, 'link', a.link)
           FROM alerts a, unnest($2::text[]) AS c(channel)
           WHERE a.id = $1
             AND ($3 <> 'resolved' OR EXISTS (SELECT 1 FROM alert_notifications n
                                              WHERE n.alert_id = a.id AND n.channel = c.channel))"#,
        alert,
        &channels,
        kind
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
