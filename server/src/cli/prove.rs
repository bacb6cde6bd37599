//! `replaysafe prove` (issue 38, spec section 10): shows whether a handler
//! is idempotent. It sends one stored event to the handler N times with
//! the same `Idempotency-Key` and `webhook-id`, some at once and some in
//! sequence, as a provider's retries and replaysafe's re-deliveries would,
//! and counts the handler's side effects with the user's own check before
//! and after: idempotent when they moved by exactly one and every answer
//! was a 2xx (or a 409 while the first was in progress).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use clap::Args;
use rand::Rng;
use serde::Serialize;

use replaysafe_core::processing::forward;
use replaysafe_types::stream::{CapturedDelivery, StreamedEvent, CAPTURED_FORMAT};

use super::remote::{self, RemoteError};
use super::CliError;

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["event", "from_file"])))]
pub struct ProveArgs {
    /// The stored event to send: over the API when --url or REPLAYSAFE_URL
    /// is set (an admin token gets the body whole, others masked), else
    /// from the configured database
    #[arg(long, value_name = "ID")]
    pub event: Option<i64>,
    /// A captured request, as `replaysafe deliveries export` writes it (no
    /// running replaysafe needed, e.g. in CI)
    #[arg(long, value_name = "FILE")]
    pub from_file: Option<PathBuf>,
    /// The handler to prove
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// How many times to send the event
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub times: u32,
    /// How many of them at once (the rest one after another)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub concurrency: u32,
    /// Mix bursts and single sends in a random order, with random pauses
    #[arg(long)]
    pub shuffle: bool,
    /// A shell command whose output's last integer counts the handler's
    /// side effects, run before and after (`psql -tAc "select count(*) from orders"`)
    #[arg(long, value_name = "CMD", conflicts_with = "check_url")]
    pub check: Option<String>,
    /// A URL whose answer's last integer counts them (GET), before and after
    #[arg(long, value_name = "URL")]
    pub check_url: Option<String>,
    /// Sign with this Standard Webhooks secret (`whsec_...`) instead of a new one
    #[arg(long, env = "REPLAYSAFE_PROVE_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    #[command(flatten)]
    pub target: remote::Target,
    #[command(flatten)]
    pub place: super::place::Place,
}

/// What is sent, every time.
struct Request {
    /// For people: "event 4217 (stripe evt_1)".
    label: String,
    event_id: Option<i64>,
    idempotency_key: String,
    message_id: String,
    content_type: Option<String>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn of_event(event: StreamedEvent) -> Result<Self, CliError> {
        let body = decoded(event.body_base64.as_deref()).ok_or_else(|| {
            CliError::Prove(format!(
                "event {}'s payload was removed by retention: nothing to send",
                event.event_id
            ))
        })?;
        if event.masked {
            eprintln!(
                "note: the body is masked as the dashboard shows it (not an admin token): \
                 the handler gets [masked] where credentials were"
            );
        }
        Ok(Self {
            label: format!("event {} ({} {})", event.event_id, event.source, event.key),
            event_id: Some(event.event_id),
            message_id: forward::message_id(event.event_id),
            idempotency_key: event.idempotency_key,
            content_type: event.content_type,
            headers: event.headers,
            body,
        })
    }

    fn of_file(path: &PathBuf) -> Result<Self, CliError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Prove(format!("{}: {e}", path.display())))?;
        let captured: CapturedDelivery = serde_json::from_str(&text).map_err(|e| {
            CliError::Prove(format!(
                "{}: not a delivery as `replaysafe deliveries export` writes it: {e}",
                path.display()
            ))
        })?;
        if captured.format != CAPTURED_FORMAT {
            return Err(CliError::Prove(format!(
                "{}: format {:?}, expected {CAPTURED_FORMAT:?}",
                path.display(),
                captured.format
            )));
        }
        if captured.truncated {
            return Err(CliError::Prove(format!(
                "{}: only the body's first bytes were kept (it was over the body limit)",
                path.display()
            )));
        }
        let body = decoded(captured.body_base64.as_deref()).ok_or_else(|| {
            CliError::Prove(format!(
                "{}: the payload was removed by retention",
                path.display()
            ))
        })?;
        let idempotency_key = captured.idempotency_key.ok_or_else(|| {
            CliError::Prove(format!(
                "{}: delivery {} was rejected, never claimed: it has no key",
                path.display(),
                captured.delivery_id
            ))
        })?;
        Ok(Self {
            label: format!(
                "delivery {} ({} {})",
                captured.delivery_id,
                captured.source,
                captured.key.as_deref().unwrap_or("-")
            ),
            event_id: captured.event_id,
            message_id: match captured.event_id {
                Some(id) => forward::message_id(id),
                None => format!("msg_d{}", captured.delivery_id),
            },
            idempotency_key,
            content_type: captured.content_type,
            headers: captured.forwarded_headers,
            body,
        })
    }
}

fn decoded(base64: Option<&str>) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(base64?)
        .ok()
}

/// One send and its answer.
#[derive(Serialize, Clone)]
struct Sent {
    n: u32,
    /// "at once" (in a burst) or "in sequence".
    phase: &'static str,
    status: Option<u16>,
    error: Option<String>,
    latency_ms: u64,
}

impl Sent {
    fn accepted(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }

    fn fine(&self) -> bool {
        self.accepted() || self.status == Some(409)
    }
}

#[derive(Serialize)]
struct Report {
    /// None: no check was given, only the answers were judged.
    idempotent: Option<bool>,
    verdict: String,
    handler: String,
    event_id: Option<i64>,
    idempotency_key: String,
    check_before: Option<i64>,
    check_after: Option<i64>,
    moved: Option<i64>,
    slowest_ms: u64,
    sends: Vec<Sent>,
}

pub async fn command(config: Option<PathBuf>, args: ProveArgs) -> Result<(), CliError> {
    let to = url::Url::parse(&args.to)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| {
            RemoteError::BadArgument(format!("--to {:?}: expected an http(s) URL", args.to))
        })?;
    let request = match (&args.from_file, args.event) {
        (Some(path), _) => Request::of_file(path)?,
        (None, Some(id)) if args.place.resolve(&args.target) == super::place::Runs::Remote => {
            let remote = remote::Remote::new(&args.target)?;
            Request::of_event(remote.get(&format!("events/{id}/request"), &[]).await?)?
        }
        (None, Some(id)) => {
            let config = replaysafe_core::config::load(config.as_deref())?;
            let (_database, pool) = super::open_existing(&config).await?;
            let event = replaysafe_core::ops::stream::read_event(&pool, &config, id, false)
                .await
                .map_err(replaysafe_core::db::DbError::from)?;
            pool.close().await;
            Request::of_event(
                event.ok_or_else(|| CliError::Prove(format!("no event {id} in the database")))?,
            )?
        }
        (None, None) => unreachable!("clap requires one of them"),
    };
    let secret = match &args.secret {
        Some(secret) => {
            replaysafe_core::providers::standard::decode_secret(secret).map_err(|e| {
                RemoteError::BadArgument(format!("--secret: not a Standard Webhooks secret: {e}"))
            })?;
            secret.clone()
        }
        None => super::remote::new_secret(),
    };
    let json = args.target.json;
    let check = Check::of(&args);
    if !json {
        eprintln!(
            "Proving {to} with {}, Idempotency-Key {}, signed with {secret}",
            request.label, request.idempotency_key
        );
    }
    let before = check.count().await?;
    let sends = send_all(&to, &secret, Arc::new(request), &args).await;
    let after = check.count().await?;
    let report = judge(&to, sends, before, after)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialises")
        );
    } else {
        print_report(&report);
    }
    match report.idempotent {
        Some(false) => Err(CliError::NotIdempotent(report.verdict)),
        _ => Ok(()),
    }
}

/// The sends, with what identifies the event.
struct Sends {
    key: String,
    event_id: Option<i64>,
    sent: Vec<Sent>,
}

/// A burst of several at once, or one alone.
fn plan(times: u32, concurrency: u32, shuffle: bool) -> Vec<u32> {
    let burst = concurrency.min(times);
    if !shuffle {
        let mut steps = vec![burst];
        steps.extend(std::iter::repeat_n(1, (times - burst) as usize));
        return steps.into_iter().filter(|s| *s > 0).collect();
    }
    let mut rng = rand::thread_rng();
    let mut left = times;
    let mut steps = Vec::new();
    while left > 0 {
        let size = if burst > 1 && rng.gen_bool(0.5) {
            rng.gen_range(2..=burst.min(left).max(2)).min(left)
        } else {
            1
        };
        steps.push(size);
        left -= size;
    }
    steps
}

async fn send_all(to: &url::Url, secret: &str, request: Arc<Request>, args: &ProveArgs) -> Sends {
    let client = replaysafe_core::telemetry::outgoing_client()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(args.concurrency as usize)
        .build()
        .expect("a client with no settings that can fail");
    let mut sent = Vec::new();
    let mut n = 0;
    for (i, size) in plan(args.times, args.concurrency, args.shuffle)
        .into_iter()
        .enumerate()
    {
        if args.shuffle && i > 0 {
            let pause = rand::thread_rng().gen_range(0..100);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        let phase = if size > 1 { "at once" } else { "in sequence" };
        // Every one of a burst leaves together.
        let gate = Arc::new(tokio::sync::Barrier::new(size as usize));
        let mut burst = tokio::task::JoinSet::new();
        for _ in 0..size {
            n += 1;
            let (client, to, secret, request, gate) = (
                client.clone(),
                to.clone(),
                secret.to_owned(),
                request.clone(),
                gate.clone(),
            );
            burst.spawn(async move {
                gate.wait().await;
                send_one(&client, &to, &secret, &request, n, phase).await
            });
        }
        let mut answers = burst.join_all().await;
        answers.sort_by_key(|s| s.n);
        sent.extend(answers);
    }
    Sends {
        key: request.idempotency_key.clone(),
        event_id: request.event_id,
        sent,
    }
}

async fn send_one(
    client: &reqwest::Client,
    to: &url::Url,
    secret: &str,
    request: &Request,
    n: u32,
    phase: &'static str,
) -> Sent {
    let builder = forward::request(
        client,
        to.clone(),
        &forward::Outgoing {
            message_id: &request.message_id,
            idempotency_key: &request.idempotency_key,
            content_type: request.content_type.as_deref(),
            headers: &request.headers,
            body: &request.body,
            secret: Some(secret),
            user_agent: concat!("replaysafe-prove/", env!("CARGO_PKG_VERSION")),
        },
    );
    let started = Instant::now();
    let answer = builder.send().await;
    let latency_ms = started.elapsed().as_millis() as u64;
    match answer {
        Ok(response) => Sent {
            n,
            phase,
            status: Some(response.status().as_u16()),
            error: None,
            latency_ms,
        },
        Err(e) => Sent {
            n,
            phase,
            status: None,
            error: Some(remote::root_cause(&e)),
            latency_ms,
        },
    }
}

/// The user's count of side effects.
enum Check {
    None,
    Command(String),
    Url(String),
}

impl Check {
    fn of(args: &ProveArgs) -> Self {
        match (&args.check, &args.check_url) {
            (Some(command), _) => Check::Command(command.clone()),
            (None, Some(url)) => Check::Url(url.clone()),
            (None, None) => Check::None,
        }
    }

    async fn count(&self) -> Result<Option<i64>, CliError> {
        let (what, output) = match self {
            Check::None => return Ok(None),
            Check::Command(command) => {
                let out = tokio::process::Command::new("sh")
                    .args(["-c", command])
                    .stdin(std::process::Stdio::null())
                    .output()
                    .await
                    .map_err(|e| CliError::Prove(format!("--check {command:?}: {e}")))?;
                if !out.status.success() {
                    return Err(CliError::Prove(format!(
                        "--check {command:?} failed ({}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
                (
                    format!("--check {command:?}"),
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                )
            }
            Check::Url(url) => {
                let response = reqwest::Client::new()
                    .get(url)
                    .timeout(Duration::from_secs(30))
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .map_err(|e| CliError::Prove(format!("--check-url {url}: {e}")))?;
                let text = response
                    .text()
                    .await
                    .map_err(|e| CliError::Prove(format!("--check-url {url}: {e}")))?;
                (format!("--check-url {url}"), text)
            }
        };
        last_integer(&output).map(Some).ok_or_else(|| {
            CliError::Prove(format!(
                "{what} printed no integer to count with: {:?}",
                output.trim()
            ))
        })
    }
}

/// The last integer in a text (`count\n-----\n 42\n(1 row)` gives 1: so
/// `psql -tA`, which prints the value alone).
fn last_integer(text: &str) -> Option<i64> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter_map(|word| word.parse::<i64>().ok())
        .next_back()
}

fn judge(
    to: &url::Url,
    sends: Sends,
    before: Option<i64>,
    after: Option<i64>,
) -> Result<Report, CliError> {
    let sent = sends.sent;
    let slowest_ms = sent.iter().map(|s| s.latency_ms).max().unwrap_or(0);
    let describe = |s: &Sent| match (s.status, &s.error) {
        (Some(status), _) => format!("#{} ({}) answered {status}", s.n, s.phase),
        (None, Some(e)) => format!("#{} ({}) got no answer: {e}", s.n, s.phase),
        (None, None) => format!("#{} ({})", s.n, s.phase),
    };
    if !sent.iter().any(Sent::accepted) {
        let answers: Vec<String> = sent.iter().map(describe).collect();
        return Err(CliError::Prove(format!(
            "the handler accepted the event not once, so nothing is proven: {}",
            answers.join("; ")
        )));
    }
    let moved = before.zip(after).map(|(b, a)| a - b);
    let failed: Vec<String> = sent.iter().filter(|s| !s.fine()).map(describe).collect();
    let (idempotent, verdict) = match moved {
        Some(moved) if moved > 1 => (
            Some(false),
            format!(
                "not idempotent: the check moved by {moved} for one event sent {} times \
                 with one Idempotency-Key (expected 1)",
                sent.len()
            ),
        ),
        _ if !failed.is_empty() => (
            Some(false),
            format!(
                "not idempotent: a repeat of an accepted event was refused ({}); a provider \
                 would retry it, and may give up",
                failed.join("; ")
            ),
        ),
        Some(1) => (
            Some(true),
            "idempotent: one side effect for the event, and every answer a 2xx (or a 409 \
             while it was in progress)"
                .to_owned(),
        ),
        Some(moved) => {
            return Err(CliError::Prove(format!(
                "the check moved by {moved}, so nothing is proven: the handler had this \
                 event already (prove a new one, or reset its store), or the check counts \
                 something else"
            )))
        }
        None => (
            None,
            "the answers are consistent (2xx, or 409 while in progress); side effects were \
             not counted: give --check or --check-url to prove it"
                .to_owned(),
        ),
    };
    Ok(Report {
        idempotent,
        verdict,
        handler: to.to_string(),
        event_id: sends.event_id,
        idempotency_key: sends.key,
        check_before: before,
        check_after: after,
        moved,
        slowest_ms,
        sends: sent,
    })
}

fn print_report(report: &Report) {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for s in &report.sends {
        let answer = s
            .status
            .map_or_else(|| "no answer".to_owned(), |s| s.to_string());
        *counts.entry(answer).or_default() += 1;
    }
    let answers: Vec<String> = counts.iter().map(|(a, n)| format!("{a} x{n}")).collect();
    let at_once = report.sends.iter().filter(|s| s.phase == "at once").count();
    println!(
        "sent {} times ({at_once} at once, {} in sequence)",
        report.sends.len(),
        report.sends.len() - at_once
    );
    println!("answers: {}", answers.join(", "));
    if let Some(slowest) = report.sends.iter().max_by_key(|s| s.latency_ms) {
        println!(
            "slowest answer: {} ms (#{}, {})",
            slowest.latency_ms, slowest.n, slowest.phase
        );
    }
    if let (Some(before), Some(after), Some(moved)) =
        (report.check_before, report.check_after, report.moved)
    {
        println!("check: {before} before, {after} after: moved by {moved}");
    }
    for s in report.sends.iter().filter(|s| !s.fine()) {
        match (&s.status, &s.error) {
            (Some(status), _) => println!("  #{} ({}): {status}", s.n, s.phase),
            (None, error) => println!(
                "  #{} ({}): {}",
                s.n,
                s.phase,
                error.as_deref().unwrap_or("no answer")
            ),
        }
    }
    println!("verdict: {}", report.verdict);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_integer_counts() {
        assert_eq!(last_integer("42\n"), Some(42));
        assert_eq!(last_integer(" count \n-------\n     7\n(1 row)\n"), Some(1));
        assert_eq!(last_integer("orders: 12, refunds: -3"), Some(-3));
        assert_eq!(last_integer("none"), None);
        assert_eq!(last_integer("a-b"), None);
    }

    #[test]
    fn plans_send_exactly_the_times_asked() {
        assert_eq!(plan(10, 5, false), vec![5, 1, 1, 1, 1, 1]);
        assert_eq!(plan(3, 5, false), vec![3]);
        assert_eq!(plan(4, 1, false), vec![1, 1, 1, 1]);
        for _ in 0..200 {
            let steps = plan(10, 4, true);
            assert_eq!(steps.iter().sum::<u32>(), 10);
            assert!(steps.iter().all(|s| (1..=4).contains(s)), "{steps:?}");
        }
    }
}
