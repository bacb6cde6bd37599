//! `replaysafe send`: signs sample events with a source's own scheme and posts
//! them to its receiver, repeating each to imitate a provider's retries.

use std::collections::BTreeMap;

use futures_util::stream::{self, StreamExt};

use replaysafe_core::config::{Config, SourceConfig};
use replaysafe_core::providers::Signed;

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// The source's slug
    #[arg(long)]
    pub source: String,
    /// Distinct sample events to send
    #[arg(long, default_value_t = 1)]
    pub events: u32,
    /// Times each event is sent (a provider's retries); every copy is signed anew
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Requests in flight at once
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Receiver base URL [default: the config's public_url]
    #[arg(long)]
    pub url: Option<String>,
    /// One JSON document at the end (every answer and the tally) instead of
    /// a line per request
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no source {0:?} in the config")]
    UnknownSource(String),
    #[error("cannot sign for {0}: {1}")]
    Sign(&'static str, String),
    #[error("{failed} of {total} requests could not be sent")]
    Failed { failed: usize, total: usize },
}

/// Signs a sample event for `source` as its provider would.
pub fn sign_sample(source: &SourceConfig, event_id: &str, now: i64) -> Result<Signed, SendError> {
    source
        .scheme
        .sign_sample(event_id, now)
        .map_err(|e| SendError::Sign(source.provider.name, e))
}

pub async fn run(config: &Config, args: SendArgs) -> Result<(), SendError> {
    let source = config
        .sources
        .iter()
        .find(|s| s.slug == args.source)
        .ok_or_else(|| SendError::UnknownSource(args.source.clone()))?;
    let base = args.url.as_deref().unwrap_or(&config.public_url);
    let url = replaysafe_core::config::receive_url(base, &source.slug);
    let client = reqwest::Client::new();
    let run_id: u32 = rand::random();
    let jobs: Vec<(String, u32)> = (1..=args.events)
        .flat_map(|e| (1..=args.repeat).map(move |r| (format!("evt_{run_id:08x}_{e}"), r)))
        .collect();
    let total = jobs.len();
    let as_json = args.json;
    let results = stream::iter(jobs)
        .map(|(event_id, copy)| {
            let client = &client;
            let url = &url;
            async move {
                let signed = sign_sample(source, &event_id, chrono::Utc::now().timestamp())?;
                let mut request = client.post(url).body(signed.body);
                for (name, value) in signed.headers {
                    request = request.header(name, value);
                }
                let answer = match request.send().await {
                    Ok(response) => {
                        let outcome = response
                            .headers()
                            .get("x-replaysafe-outcome")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("-")
                            .to_owned();
                        Ok((response.status().as_u16(), outcome))
                    }
                    Err(e) => Err(e.to_string()),
                };
                if !as_json {
                    match &answer {
                        Ok((status, outcome)) => {
                            println!("{event_id} copy {copy}: {status} {outcome}")
                        }
                        Err(e) => println!("{event_id} copy {copy}: failed: {e}"),
                    }
                }
                Ok::<_, SendError>((event_id, copy, answer))
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed = 0;
    let mut answers = Vec::with_capacity(total);
    for result in results {
        let (event_id, copy, answer) = result?;
        match &answer {
            Ok((status, outcome)) => {
                *tally.entry(format!("{status} {outcome}")).or_default() += 1;
                answers.push(serde_json::json!({
                    "event_id": event_id, "copy": copy, "status": status, "outcome": outcome,
                }));
            }
            Err(e) => {
                failed += 1;
                answers.push(serde_json::json!({"event_id": event_id, "copy": copy, "error": e}));
            }
        }
    }
    if as_json {
        super::output::json(&serde_json::json!({
            "url": url, "sent": total, "failed": failed, "tally": tally, "answers": answers,
        }));
    } else {
        let summary: Vec<String> = tally.iter().map(|(k, n)| format!("{n} x {k}")).collect();
        println!("sent {total} to {url}: {}", summary.join(", "));
    }
    if failed > 0 {
        return Err(SendError::Failed { failed, total });
    }
    Ok(())
}
