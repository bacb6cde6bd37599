//! The Alerts page and `/api/v1/alerts`: what fires, what fired lately,
//! and silences (operator), audit-logged.

use replaysafe_types::alerts::*;
use replaysafe_types::auth::Role;
use replaysafe_types::states::AlertState;
use replaysafe_types::time::Time;

use crate::error::OpError;
use crate::ops::Cx;

struct Row {
    id: i64,
    rule: String,
    source: String,
    state: AlertState,
    started_at: Time,
    resolved_at: Option<Time>,
    summary: String,
    figures: serde_json::Value,
    link: String,
    silenced_until: Option<Time>,
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

/// Firing alerts, the recent resolved ones, and the silences in force (viewer).
pub async fn page(cx: &Cx) -> Result<AlertsPage, OpError> {
    cx.require(Role::Viewer)?;
    let rows = sqlx::query_as!(
        Row,
        r#"SELECT a.id AS "id!", a.rule AS "rule!", a.source AS "source!", a.state AS "state!: AlertState",
                  a.started_at AS "started_at!: Time",
                  a.resolved_at AS "resolved_at: Time",
                  a.summary AS "summary!", a.figures AS "figures!", a.link AS "link!",
                  (SELECT max(s.until)
                   FROM alert_silences s
                   WHERE s.rule = a.rule AND (s.source IS NULL OR s.source = a.source)
                     AND s.until > now()) AS "silenced_until: Time"
           FROM ((SELECT * FROM alerts WHERE state = 'firing')
                 UNION ALL
                 (SELECT * FROM alerts WHERE state = 'resolved'
                  ORDER BY resolved_at DESC LIMIT $1)) a
           ORDER BY a.state, coalesce(a.resolved_at, a.started_at) DESC"#,
        RECENT_ALERTS
    )
    .fetch_all(&cx.services.pool)
    .await?;
    let (firing, resolved): (Vec<AlertRow>, Vec<AlertRow>) = rows
        .into_iter()
        .map(Row::into_alert)
        .partition(|a| a.state == AlertState::Firing);
    let silences = sqlx::query_as!(
        SilenceRow,
        r#"SELECT id, rule, source,
                  until AS "until!: Time",
                  created_by AS by, reason
           FROM alert_silences WHERE until > now() ORDER BY until"#
    )
    .fetch_all(&cx.services.pool)
    .await?;
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
) -> Result<SilenceRow, OpError> {
    let admin = cx.require(Role::Admin)?;
    if !RULES.contains(&rule.as_str()) {
        return Err(OpError::BadRequest(format!(
            "{rule:?} is not one of {}",
            RULES.join(", ")
        )));
    }
    if !(1..=MAX_SILENCE_MINUTES).contains(&minutes) {
        return Err(OpError::BadRequest(format!(
            "silence for 1 to {MAX_SILENCE_MINUTES} minutes"
        )));
    }
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(OpError::BadRequest(
            "give a reason: it goes into the audit log".into(),
        ));
    }
    let source = Some(source.trim().to_owned()).filter(|s| !s.is_empty());
    let row = sqlx::query_as!(
        SilenceRow,
        r#"INSERT INTO alert_silences (rule, source, until, created_by, reason)
           VALUES ($1, $2, now() + make_interval(mins => $3), $4, $5)
           RETURNING id, rule, source,
                     until AS "until!: Time",
                     created_by AS by, reason"#,
        rule,
        source,
        minutes as i32,
        admin.username,
        reason
    )
    .fetch_one(&cx.services.pool)
    .await?;
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
pub async fn unsilence(cx: &Cx, id: i64) -> Result<(), OpError> {
    let admin = cx.require(Role::Admin)?;
    let ended = sqlx::query!(
        "UPDATE alert_silences SET until = now() WHERE id = $1 AND until > now()
         RETURNING rule, source",
        id
    )
    .fetch_optional(&cx.services.pool)
    .await?
    .ok_or_else(|| OpError::NotFound("no silence in force has that id".into()))?;
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
