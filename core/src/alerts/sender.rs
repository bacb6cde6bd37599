//! Sends the queued notifications: one leased at a time by one process,
//! in order per alert and channel, retried with backoff, given up after
//! `MAX_ATTEMPTS` (the reason kept).

use std::time::Duration;

use sqlx::PgPool;

use super::channels::{self, AlertBody, Message};
use crate::config::Config;

/// How often due notifications are looked for.
pub const POLL: Duration = Duration::from_secs(1);
/// A leased notification is its process's to send for this long; a send
/// gives up well before (`SEND_TIMEOUT`), so a lease never runs out under it.
const LEASE_SECS: f64 = 180.0;
const SEND_TIMEOUT: Duration = Duration::from_secs(60);
pub const MAX_ATTEMPTS: i32 = 8;
/// Notifications one call sends at most.
const BATCH: usize = 50;

/// Waits after a failed try: 5 s, 20 s, 80 s, ... up to an hour.
fn backoff(attempts: i32) -> f64 {
    (5.0 * 4f64.powi(attempts.saturating_sub(1).min(6))).min(3600.0)
}

#[derive(serde::Deserialize)]
struct Snapshot {
    id: i64,
    rule: String,
    source: String,
    state: replaysafe_types::states::AlertState,
    started_at: String,
    resolved_at: Option<String>,
    summary: String,
    #[serde(default)]
    figures: std::collections::BTreeMap<String, f64>,
    link: String,
}

/// Sends the notifications due now for this process's channels; returns
/// how many were sent.
pub async fn send_due(
    pool: &PgPool,
    config: &Config,
    http: &reqwest::Client,
) -> Result<usize, sqlx::Error> {
    let mine: Vec<String> = config
        .alerts
        .channels
        .iter()
        .map(|c| c.name.clone())
        .collect();
    if mine.is_empty() {
        return Ok(0);
    }
    let mut sent = 0;
    for _ in 0..BATCH {
        // The oldest due one whose alert has nothing older unsent on its
        // channel (a resolution never overtakes its firing).
        let Some(n) = sqlx::query!(
            r#"UPDATE alert_notifications n SET leased_until = now() + make_interval(secs => $1),
                   attempts = attempts + 1
               FROM (SELECT x.id FROM alert_notifications x
                     WHERE x.sent_at IS NULL AND x.failed_at IS NULL AND x.next_attempt_at <= now()
                       AND (x.leased_until IS NULL OR x.leased_until < now())
                       AND x.channel = ANY($2)
                       AND NOT EXISTS (SELECT 1 FROM alert_notifications p
                                       WHERE p.alert_id = x.alert_id AND p.channel = x.channel
                                         AND p.id < x.id AND p.sent_at IS NULL AND p.failed_at IS NULL)
                     ORDER BY x.id LIMIT 1
                     FOR UPDATE SKIP LOCKED) due
               WHERE n.id = due.id
               RETURNING n.id, n.channel, n.kind, n.payload, n.attempts"#,
            LEASE_SECS,
            &mine
        )
        .fetch_optional(pool)
        .await?
        else {
            break;
        };
        let channel = config
            .alerts
            .channels
            .iter()
            .find(|c| c.name == n.channel)
            .expect("leased only among this process's channels");
        let outcome = match serde_json::from_value::<Snapshot>(n.payload) {
            Err(e) => Err(format!("an unreadable notification: {e}")),
            Ok(a) => {
                let title = replaysafe_types::alerts::title(&a.rule).to_owned();
                let message = Message {
                    id: format!("alert_notification_{}", n.id),
                    kind: n.kind.clone(),
                    alert: AlertBody {
                        id: a.id,
                        rule: a.rule,
                        title,
                        source: a.source,
                        state: a.state,
                        started_at: a.started_at,
                        resolved_at: a.resolved_at,
                        summary: a.summary,
                        figures: a.figures,
                        url: format!("{}{}", config.public_url, a.link),
                    },
                };
                match tokio::time::timeout(SEND_TIMEOUT, channels::send(http, channel, &message))
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(_) => Err(format!("no answer within {} s", SEND_TIMEOUT.as_secs())),
                }
            }
        };
        // `attempts` is the lease's token: a lease that ran out and was
        // taken again is the other process's to record.
        match outcome {
            Ok(()) => {
                sqlx::query!(
                    "UPDATE alert_notifications SET sent_at = now(), leased_until = NULL, last_error = NULL
                     WHERE id = $1 AND attempts = $2",
                    n.id,
                    n.attempts
                )
                .execute(pool)
                .await?;
                sent += 1;
            }
            Err(why) => {
                tracing::warn!(
                    channel = n.channel,
                    attempt = n.attempts,
                    "alert notification not sent: {why}"
                );
                sqlx::query!(
                    "UPDATE alert_notifications SET leased_until = NULL, last_error = $3,
                         next_attempt_at = now() + make_interval(secs => $4),
                         failed_at = CASE WHEN attempts >= $5 THEN now() END
                     WHERE id = $1 AND attempts = $2",
                    n.id,
                    n.attempts,
                    why,
                    backoff(n.attempts),
                    MAX_ATTEMPTS
                )
                .execute(pool)
                .await?;
            }
        }
    }
    Ok(sent)
}
