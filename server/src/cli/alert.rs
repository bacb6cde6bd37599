//! `replaysafe alert test --channel C`: a test message through a channel,
//! as alerts are sent, so a new channel is known to work before it matters.

use replaysafe_core::alerts::channels::{self, AlertBody, Message};
use replaysafe_core::config::Config;

#[derive(clap::Subcommand, Debug)]
pub enum AlertAction {
    /// Send a test message to a channel of `[[alerts.channel]]`
    Test {
        #[arg(long)]
        channel: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("no alert channel is named {0:?} (the config has: {1})")]
    NoChannel(String, String),
    #[error("the test message to {channel} was not sent: {why}")]
    NotSent { channel: String, why: String },
}

pub async fn run(config: &Config, action: AlertAction) -> Result<(), AlertError> {
    let AlertAction::Test { channel } = action;
    let Some(found) = config.alerts.channels.iter().find(|c| c.name == channel) else {
        let names: Vec<&str> = config
            .alerts
            .channels
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        return Err(AlertError::NoChannel(
            channel,
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            },
        ));
    };
    let now = chrono::Utc::now();
    let message = Message {
        id: format!("alert_test_{}", now.timestamp_millis()),
        kind: "test".into(),
        alert: AlertBody {
            id: 0,
            rule: "test".into(),
            title: "A test message".into(),
            source: "replaysafe".into(),
            state: replaysafe_types::states::AlertState::Firing,
            started_at: now.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            resolved_at: None,
            summary: format!(
                "a test of the alert channel {channel}, sent by `replaysafe alerts test`"
            ),
            figures: Default::default(),
            url: format!("{}/overview", config.public_url),
        },
    };
    channels::send(&channels::client(), found, &message)
        .await
        .map_err(|why| AlertError::NotSent {
            channel: channel.clone(),
            why,
        })?;
    println!("sent a test message to {channel}");
    Ok(())
}
