//! `replaysafe send`: signs sample events with a source's own scheme and posts
//! them to its receiver, repeating each to imitate a provider's retries.

use std::collections::BTreeMap;

use base64::Engine;
use futures_util::stream::{self, StreamExt};
use hmac::Mac;

use crate::config::{Config, Provider, SourceConfig};
use crate::receiver::providers::{hmac_sha256, standard};

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
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no source {0:?} in the config")]
    UnknownSource(String),
    #[error("source {0:?} has no secret to sign with")]
    NoSecret(String),
    #[error("cannot sign for {0}: {1}")]
    Sign(&'static str, String),
    #[error("{failed} of {total} requests could not be sent")]
    Failed { failed: usize, total: usize },
}

/// One signed request, ready to post.
pub struct Signed {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Signs a sample event for `source` as its provider would.
pub fn sign_sample(source: &SourceConfig, event_id: &str, now: i64) -> Result<Signed, SendError> {
    let secret = source
        .secrets
        .first()
        .ok_or_else(|| SendError::NoSecret(source.slug.clone()))?
        .expose();
    let b64 = base64::engine::general_purpose::STANDARD;
    let json = |body: serde_json::Value| body.to_string().into_bytes();
    let content_type = ("content-type".to_owned(), "application/json".to_owned());
    let signed = match source.provider {
        Provider::Standard => {
            let body = json(serde_json::json!({
                "type": "invoice.paid",
                "data": {"invoice": event_id, "amount_cents": 4200, "currency": "eur"}
            }));
            let key =
                standard::decode_secret(secret).map_err(|e| SendError::Sign("standard", e))?;
            let ts = now.to_string();
            let mac = hmac_sha256(
                &key,
                &[event_id.as_bytes(), b".", ts.as_bytes(), b".", &body],
            );
            Signed {
                headers: vec![
                    content_type,
                    ("webhook-id".into(), event_id.into()),
                    ("webhook-timestamp".into(), ts),
                    (
                        "webhook-signature".into(),
                        format!("v1,{}", b64.encode(mac.finalize().into_bytes())),
                    ),
                ],
                body,
            }
        }
        Provider::Stripe => {
            let body = json(serde_json::json!({
                "id": event_id, "object": "event", "type": "invoice.paid",
                "data": {"object": {"object": "invoice", "amount_paid": 4200}}
            }));
            let ts = now.to_string();
            let mac = hmac_sha256(secret.as_bytes(), &[ts.as_bytes(), b".", &body]);
            Signed {
                headers: vec![
                    content_type,
                    (
                        "stripe-signature".into(),
                        format!("t={ts},v1={}", hex::encode(mac.finalize().into_bytes())),
                    ),
                ],
                body,
            }
        }
        Provider::Github => {
            // Each event's own content, as GitHub's are: the replay guard
            // takes equal signed bodies under new ids for one event's replays.
            let body =
                json(serde_json::json!({"action": "opened", "number": 1, "sample": event_id}));
            let mac = hmac_sha256(secret.as_bytes(), &[&body]);
            Signed {
                headers: vec![
                    content_type,
                    ("x-github-event".into(), "pull_request".into()),
                    ("x-github-delivery".into(), event_id.into()),
                    (
                        "x-hub-signature-256".into(),
                        format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
                    ),
                ],
                body,
            }
        }
        Provider::Shopify => {
            let body = json(
                serde_json::json!({"id": 820982911946154508_u64, "total_price": "42.00", "sample": event_id}),
            );
            let mac = hmac_sha256(secret.as_bytes(), &[&body]);
            Signed {
                headers: vec![
                    content_type,
                    ("x-shopify-topic".into(), "orders/create".into()),
                    ("x-shopify-webhook-id".into(), event_id.into()),
                    (
                        "x-shopify-hmac-sha256".into(),
                        b64.encode(mac.finalize().into_bytes()),
                    ),
                ],
                body,
            }
        }
        Provider::Slack => {
            let body = json(serde_json::json!({
                "type": "event_callback", "event_id": event_id,
                "event": {"type": "app_mention", "text": "hello"}
            }));
            let ts = now.to_string();
            let mac = hmac_sha256(secret.as_bytes(), &[b"v0:", ts.as_bytes(), b":", &body]);
            Signed {
                headers: vec![
                    content_type,
                    ("x-slack-request-timestamp".into(), ts),
                    (
                        "x-slack-signature".into(),
                        format!("v0={}", hex::encode(mac.finalize().into_bytes())),
                    ),
                ],
                body,
            }
        }
        Provider::Twilio => {
            let url = crate::receiver::providers::twilio::request_url(
                source.public_url.as_deref().unwrap_or_default(),
                None,
            );
            let mut params = [
                (
                    "AccountSid",
                    "AC00000000000000000000000000000000".to_owned(),
                ),
                ("Body", "hello from replaysafe send".to_owned()),
                ("From", "+14155550100".to_owned()),
                ("MessageSid", format!("SM{event_id}")),
                ("To", "+14155550199".to_owned()),
            ];
            params.sort();
            let signed_text: String = params.iter().map(|(k, v)| format!("{k}{v}")).collect();
            let mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes())
                .expect("HMAC takes keys of any length")
                .chain_update(url.as_bytes())
                .chain_update(signed_text.as_bytes());
            let body = params
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
                    )
                })
                .collect::<Vec<_>>()
                .join("&");
            Signed {
                headers: vec![
                    (
                        "content-type".into(),
                        "application/x-www-form-urlencoded".into(),
                    ),
                    ("i-twilio-idempotency-token".into(), event_id.into()),
                    (
                        "x-twilio-signature".into(),
                        b64.encode(mac.finalize().into_bytes()),
                    ),
                ],
                body: body.into_bytes(),
            }
        }
        // These sign with the provider's private key; replaysafe holds only the public one.
        other @ (Provider::Alipay | Provider::Wechatpay | Provider::Discord) => {
            return Err(SendError::Sign(
                other.as_str(),
                "the provider signs with its private key, which replaysafe does not hold".into(),
            ))
        }
    };
    Ok(signed)
}

pub async fn run(config: &Config, args: SendArgs) -> Result<(), SendError> {
    let source = config
        .sources
        .iter()
        .find(|s| s.slug == args.source)
        .ok_or_else(|| SendError::UnknownSource(args.source.clone()))?;
    let base = args.url.as_deref().unwrap_or(&config.public_url);
    let url = format!("{}/hooks/{}", base.trim_end_matches('/'), source.slug);
    let client = reqwest::Client::new();
    let run_id: u32 = rand::random();
    let jobs: Vec<(String, u32)> = (1..=args.events)
        .flat_map(|e| (1..=args.repeat).map(move |r| (format!("evt_{run_id:08x}_{e}"), r)))
        .collect();
    let total = jobs.len();
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
                match &answer {
                    Ok((status, outcome)) => println!("{event_id} copy {copy}: {status} {outcome}"),
                    Err(e) => println!("{event_id} copy {copy}: failed: {e}"),
                }
                Ok::<_, SendError>(answer)
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed = 0;
    for result in results {
        match result? {
            Ok((status, outcome)) => *tally.entry(format!("{status} {outcome}")).or_default() += 1,
            Err(_) => failed += 1,
        }
    }
    let summary: Vec<String> = tally.iter().map(|(k, n)| format!("{n} x {k}")).collect();
    println!("sent {total} to {url}: {}", summary.join(", "));
    if failed > 0 {
        return Err(SendError::Failed { failed, total });
    }
    Ok(())
}
