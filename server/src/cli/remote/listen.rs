//! `replaysafe listen` (issue 38, spec section 10): the events a running
//! replaysafe claims, sent on to a handler on this machine as replaysafe
//! forwards them (same body, same `Idempotency-Key`, a Standard Webhooks
//! signature under a secret of this run), one line each. It follows
//! `GET /api/v1/events/stream` and comes back after a cut with the last
//! event's id, so nothing is lost or sent twice. What the handler answers
//! is printed and goes nowhere else.

use std::time::{Duration, Instant};

use base64::Engine as _;
use clap::Args;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde::Serialize;

use replaysafe_core::processing::forward;
use replaysafe_types::stream::{StreamStart, StreamedEvent};
use replaysafe_types::time;

use super::client::Remote;
use super::RemoteError;

#[derive(Args, Debug)]
pub struct ListenArgs {
    /// A source to follow (repeat for more; default: every source)
    #[arg(long = "source", value_name = "SLUG")]
    pub sources: Vec<String>,
    /// The local handler to send each event to
    #[arg(long, value_name = "URL")]
    pub forward_to: String,
    /// Only events whose type matches this glob (`invoice.*`)
    #[arg(long = "type", value_name = "GLOB")]
    pub event_type: Option<String>,
    /// Sign with this Standard Webhooks secret (`whsec_...`) instead of a
    /// new one each run, so the handler's configuration can keep it
    #[arg(long, env = "REPLAYSAFE_LISTEN_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
}

/// Longer than the server's quiet-stream comment (15 s): a connection
/// silent for this long is taken for cut.
const QUIET: Duration = Duration::from_secs(45);
/// How long the local handler may take.
const HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

/// One line of `--json`: what was sent and what the handler answered.
#[derive(Serialize)]
struct Sent<'a> {
    event_id: i64,
    source: &'a str,
    key: &'a str,
    event_type: Option<&'a str>,
    received_at: String,
    /// The handler's status, or null when it gave none (see `error`).
    status: Option<u16>,
    latency_ms: u64,
    error: Option<String>,
}

pub async fn run(remote: &Remote, args: ListenArgs, json: bool) -> Result<(), RemoteError> {
    let target = url::Url::parse(&args.forward_to)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| {
            RemoteError::BadArgument(format!(
                "--forward-to {:?}: expected an http(s) URL",
                args.forward_to
            ))
        })?;
    let secret = match args.secret {
        Some(secret) => {
            replaysafe_core::providers::standard::decode_secret(&secret).map_err(|e| {
                RemoteError::BadArgument(format!("--secret: not a Standard Webhooks secret: {e}"))
            })?;
            secret
        }
        None => super::new_secret(),
    };
    let query = [
        ("source", args.sources.join(",")),
        ("type", args.event_type.clone().unwrap_or_default()),
    ];
    let local = replaysafe_core::telemetry::outgoing_client()
        .timeout(HANDLER_TIMEOUT)
        .build()
        .map_err(|e| RemoteError::BadArgument(e.to_string()))?;
    let mut cursor: Option<String> = None;
    let mut started = false;
    let mut wait = Duration::from_secs(1);
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let opened = tokio::select! {
            opened = remote.stream("events/stream", &query, cursor.as_deref(), QUIET) => opened,
            _ = &mut stop => return Ok(()),
        };
        let response = match opened {
            Ok(response) => response,
            // Never reached: say so. Once following, wait for it to come back.
            Err(e @ RemoteError::Unreachable { .. }) if started => {
                eprintln!("{e}; trying again in {} s", wait.as_secs());
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = &mut stop => return Ok(()),
                }
                wait = (wait * 2).min(Duration::from_secs(10));
                continue;
            }
            Err(e) => return Err(e),
        };
        // The body as a stream of chunks (reqwest's own needs a feature that
        // brings a second wasm-streams into the tree).
        let chunks = futures_util::stream::unfold(response, |mut response| async move {
            let chunk = response.chunk().await.transpose()?;
            Some((chunk, response))
        });
        let mut messages = Box::pin(chunks.eventsource());
        let cut = loop {
            let message = tokio::select! {
                message = messages.next() => message,
                _ = &mut stop => return Ok(()),
            };
            let message = match message {
                Some(Ok(message)) => message,
                Some(Err(e)) => break e.to_string(),
                None => break "the server closed the stream".to_owned(),
            };
            wait = Duration::from_secs(1);
            match message.event.as_str() {
                "start" => {
                    let start: StreamStart = decode(&message.data)?;
                    if !started {
                        announce(&start, &target, &secret, json);
                        started = true;
                    }
                }
                "end" => {
                    let reason = serde_json::from_str::<serde_json::Value>(&message.data)
                        .ok()
                        .and_then(|v| v["reason"].as_str().map(str::to_owned))
                        .unwrap_or_else(|| "the server ended the stream".into());
                    if reason.contains("revoked") {
                        return Err(RemoteError::Refused {
                            status: 401,
                            code: "unauthorized".into(),
                            detail: reason,
                            body: Box::default(),
                            retry_after: None,
                        });
                    }
                    break reason;
                }
                "position" => {}
                _ => {
                    let event: StreamedEvent = decode(&message.data)?;
                    let (answer, took) = send(&local, &target, &secret, &event).await;
                    print_sent(&event, &answer, took, json);
                }
            }
            if !message.id.is_empty() {
                cursor = Some(message.id);
            }
        };
        eprintln!("connection lost ({cut}); reconnecting");
    }
}

fn decode<T: serde::de::DeserializeOwned>(data: &str) -> Result<T, RemoteError> {
    serde_json::from_str(data).map_err(|e| RemoteError::Decode(format!("{e}: {data}")))
}

fn announce(start: &StreamStart, target: &url::Url, secret: &str, json: bool) {
    let sources = if start.sources.is_empty() {
        "every source".to_owned()
    } else {
        start.sources.join(", ")
    };
    let bodies = if start.masked {
        "masked as the dashboard shows them (an admin token gets them whole)"
    } else {
        "whole (an admin token)"
    };
    // On stderr: `--json` keeps stdout to one object a line.
    eprintln!("Following new events of {sources} -> {target}");
    if let Some(glob) = &start.event_type {
        eprintln!("Only events of type {glob}");
    }
    eprintln!("Signing with {secret} (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature)");
    eprintln!("Bodies: {bodies}. Ctrl-C to stop.");
    if !json {
        println!(
            "{:<23}  {:<8}  {:<10}  {:<24}  {:<24}  answer",
            "received", "event", "source", "key", "type"
        );
    }
}

/// Sends one event to the local handler as replaysafe's workers send it.
async fn send(
    local: &reqwest::Client,
    target: &url::Url,
    secret: &str,
    event: &StreamedEvent,
) -> (Result<u16, String>, Duration) {
    let Some(body) = event.body_base64.as_deref().map(|b| {
        base64::engine::general_purpose::STANDARD
            .decode(b)
            .unwrap_or_default()
    }) else {
        return (
            Err("not sent: the payload was pruned".into()),
            Duration::ZERO,
        );
    };
    let message_id = forward::message_id(event.event_id);
    let request = forward::request(
        local,
        target.clone(),
        &forward::Outgoing {
            message_id: &message_id,
            idempotency_key: &event.idempotency_key,
            content_type: event.content_type.as_deref(),
            headers: &event.headers,
            body: &body,
            secret: Some(secret),
            user_agent: concat!("replaysafe-listen/", env!("CARGO_PKG_VERSION")),
        },
    );
    let started = Instant::now();
    let answer = match request.send().await {
        Ok(response) => Ok(response.status().as_u16()),
        Err(e) if e.is_timeout() => Err(format!("timed out after {} s", HANDLER_TIMEOUT.as_secs())),
        Err(e) => Err(format!("not sent: {}", super::root_cause(&e))),
    };
    (answer, started.elapsed())
}

fn print_sent(line: &StreamedEvent, answer: &Result<u16, String>, took: Duration, json: bool) {
    let latency_ms = took.as_millis() as u64;
    if json {
        let sent = Sent {
            event_id: line.event_id,
            source: &line.source,
            key: &line.key,
            event_type: line.event_type.as_deref(),
            received_at: time::rfc3339(&line.received_at),
            status: answer.as_ref().ok().copied(),
            latency_ms,
            error: answer.as_ref().err().cloned(),
        };
        println!("{}", serde_json::to_string(&sent).expect("serialises"));
        return;
    }
    let answered = match answer {
        Ok(status) => format!("{status} in {latency_ms} ms"),
        Err(error) => error.clone(),
    };
    println!(
        "{:<23}  {:<8}  {:<10}  {:<24}  {:<24}  {answered}",
        time::shown_ms(&line.received_at),
        line.event_id,
        line.source,
        line.key,
        line.event_type.as_deref().unwrap_or("-"),
    );
}
