//! The channels: a webhook (JSON signed with the Standard Webhooks scheme),
//! a Slack incoming webhook, email over SMTP. One message, three forms.

use std::collections::BTreeMap;
use std::time::Duration;

use lettre::AsyncTransport;
use serde::Serialize;
use sqlx::PgPool;

use crate::config::alerts::{AlertChannel, ChannelKind, SmtpSecurity};
use crate::config::Config;

/// A channel that does not answer within this is tried again later.
const TIMEOUT: Duration = Duration::from_secs(15);

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .user_agent(concat!("replaysafe-alerts/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("a client with defaults builds")
}

/// What every channel is told about an alert.
#[derive(Clone, Debug, Serialize)]
pub struct AlertBody {
    pub id: i64,
    pub rule: String,
    pub title: String,
    pub source: String,
    /// firing or resolved
    pub state: String,
    /// UTC, RFC 3339.
    pub started_at: String,
    pub resolved_at: Option<String>,
    pub summary: String,
    pub figures: BTreeMap<String, f64>,
    /// The dashboard page behind it.
    pub url: String,
}

#[derive(Clone, Debug)]
pub struct Message {
    /// The notification's id: a webhook's `webhook-id`, so a receiver
    /// drops a retried copy.
    pub id: String,
    /// firing, resolved, repeat or test
    pub kind: String,
    pub alert: AlertBody,
}

/// The message of notification `id` about `alert`, as it stands now.
pub async fn message_of(
    pool: &PgPool,
    config: &Config,
    id: i64,
    kind: &str,
    alert: i64,
) -> Result<Option<Message>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT id, rule, source, state, summary, figures, link,
                  to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "started_at!",
                  to_char(resolved_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS resolved_at
           FROM alerts WHERE id = $1"#,
        alert
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| {
        let condition = app::api::alerts::Condition {
            rule: r.rule.clone(),
            source: r.source.clone(),
            summary: r.summary.clone(),
            figures: serde_json::from_value(r.figures).unwrap_or_default(),
            link: r.link.clone(),
        };
        Message {
            id: format!("alert_notification_{id}"),
            kind: kind.to_owned(),
            alert: AlertBody {
                id: r.id,
                title: condition.title().to_owned(),
                rule: r.rule,
                source: r.source,
                state: r.state,
                started_at: r.started_at,
                resolved_at: r.resolved_at,
                summary: r.summary,
                figures: condition.figures,
                url: format!("{}{}", config.public_url, r.link),
            },
        }
    }))
}

impl Message {
    /// "FIRING: Duplicate storm on billing".
    pub fn headline(&self) -> String {
        let what = match self.kind.as_str() {
            "resolved" => "RESOLVED",
            "repeat" => "STILL FIRING",
            "test" => "TEST",
            _ => "FIRING",
        };
        format!("{what}: {} on {}", self.alert.title, self.alert.source)
    }

    fn text(&self) -> String {
        let mut text = format!(
            "{}\n\n{}.\n\nSince {}",
            self.headline(),
            self.alert.summary,
            self.alert.started_at
        );
        if let Some(at) = &self.alert.resolved_at {
            text.push_str(&format!(", resolved {at}"));
        }
        text.push_str(&format!(".\n{}\n", self.alert.url));
        text
    }
}

/// Sends one message to one channel; Err says why, for the retry.
pub async fn send(
    http: &reqwest::Client,
    channel: &AlertChannel,
    message: &Message,
) -> Result<(), String> {
    match &channel.kind {
        ChannelKind::Webhook { url, secret } => {
            let body = serde_json::to_vec(&serde_json::json!({
                "type": format!("alert.{}", message.kind),
                "data": message.alert,
            }))
            .expect("a message serialises");
            let timestamp = chrono::Utc::now().timestamp();
            let key = crate::providers::standard::decode_secret(secret.expose())?;
            let signature = crate::providers::standard::sign(&key, &message.id, timestamp, &body);
            let answer = http
                .post(url)
                .header("content-type", "application/json")
                .header("webhook-id", &message.id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signature)
                .body(body)
                .send()
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            success(answer).await
        }
        ChannelKind::Slack { url } => {
            let emoji = match message.kind.as_str() {
                "resolved" => ":white_check_mark:",
                "test" => ":information_source:",
                _ => ":rotating_light:",
            };
            let answer = http
                .post(url.expose())
                .json(&serde_json::json!({
                    "text": format!("{emoji} {}", message.headline()),
                    "blocks": [{
                        "type": "section",
                        "text": {"type": "mrkdwn", "text": format!(
                            "{emoji} *{}*\n{}.\n<{}|Open in replaysafe>",
                            message.headline(), message.alert.summary, message.alert.url
                        )},
                    }],
                }))
                .send()
                .await
                // The URL is the channel's secret: never in an error.
                .map_err(|e| format!("the Slack webhook: {}", e.without_url()))?;
            success(answer).await
        }
        ChannelKind::Email {
            host,
            port,
            security,
            credentials,
            from,
            to,
        } => {
            let mut email = lettre::Message::builder()
                .from(from.parse().map_err(|e| format!("from: {e}"))?)
                .subject(format!("[replaysafe] {}", message.headline()))
                .header(lettre::message::header::ContentType::TEXT_PLAIN);
            for address in to {
                email = email.to(address.parse().map_err(|e| format!("to: {e}"))?);
            }
            let email = email.body(message.text()).map_err(|e| e.to_string())?;
            type Smtp = lettre::AsyncSmtpTransport<lettre::Tokio1Executor>;
            let builder = match security {
                SmtpSecurity::None => Smtp::builder_dangerous(host.as_str()),
                SmtpSecurity::StartTls => Smtp::starttls_relay(host).map_err(|e| e.to_string())?,
                SmtpSecurity::Tls => Smtp::relay(host).map_err(|e| e.to_string())?,
            };
            let mut builder = builder.port(*port).timeout(Some(TIMEOUT));
            if let Some((user, password)) = credentials {
                builder =
                    builder.credentials(lettre::transport::smtp::authentication::Credentials::new(
                        user.clone(),
                        password.expose().to_owned(),
                    ));
            }
            builder
                .build()
                .send(email)
                .await
                .map(|_| ())
                .map_err(|e| format!("{host}:{port}: {e}"))
        }
    }
}

async fn success(answer: reqwest::Response) -> Result<(), String> {
    let status = answer.status();
    if status.is_success() {
        return Ok(());
    }
    Err(format!("answered {status}"))
}
