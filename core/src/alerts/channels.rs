//! The channels: a webhook (JSON signed with the Standard Webhooks scheme),
//! a Slack incoming webhook, email over SMTP. One message, three forms.

use std::collections::BTreeMap;
use std::time::Duration;

use lettre::AsyncTransport;
use serde::Serialize;

use crate::config::alerts::{AlertChannel, ChannelKind, SmtpSecurity};

/// A channel that does not answer within this is tried again later.
const TIMEOUT: Duration = Duration::from_secs(15);

pub fn client() -> reqwest::Client {
    crate::telemetry::outgoing_client()
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
    pub state: replaysafe_types::states::AlertState,
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
                // Without the URL: it may carry a token.
                .map_err(|e| format!("the webhook: {}", e.without_url()))?;
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
