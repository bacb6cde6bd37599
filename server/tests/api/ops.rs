//! Running it for real (issue 17, spec section 9): `config check`,
//! `completions`, `--version` with the commit, `file:` secrets, JSON logs
//! that carry no secret, a request id per request, `replaysafe_build_info`,
//! the systemd unit and the Prometheus rules.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

fn replaysafe() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"));
    command
        .env_remove("REPLAYSAFE_CONFIG")
        .env_remove("DATABASE_URL");
    command
}

const SECRET: &str = "gh-secret-that-must-never-show";

fn config_file(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("gh.secret"), format!("{SECRET}\n")).unwrap();
    let path = dir.join("replaysafe.toml");
    std::fs::write(
        &path,
        format!(
            "{extra}\n[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"file:gh.secret\"]\ndestination = \"http://127.0.0.1:9/hook\"\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn config_check_prints_what_is_in_force_without_secrets_and_names_a_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_file(
        dir.path(),
        "metrics_token = \"a-metrics-token-never-shown\"",
    );
    let out = replaysafe()
        .args(["config", "check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("[source gh]"), "{stdout}");
    assert!(stdout.contains("provider        github"), "{stdout}");
    assert!(stdout.contains("token (set, hidden)"), "{stdout}");
    assert!(
        !stdout.contains(SECRET) && !stdout.contains("a-metrics-token"),
        "{stdout}"
    );

    std::fs::write(&path, "dedup_ttl_days = 3\n").unwrap();
    let bad = replaysafe()
        .args(["config", "check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`dedup_ttl_days`"));
    // A `file:` secret that is not there names its key too.
    std::fs::write(
        &path,
        "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"file:/nonexistent/x\"]\n",
    )
    .unwrap();
    let missing = replaysafe()
        .args(["config", "check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("`source[0].secrets[0]`"));
}

#[test]
fn completions_and_version() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef replaysafe"),
        ("fish", "complete -c replaysafe"),
    ] {
        let out = replaysafe().args(["completions", shell]).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{shell}: {text}");
        assert!(text.contains("redeliver"), "{shell} completes subcommands");
    }
    let out = replaysafe().arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.starts_with(&format!("replaysafe {} (", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
}

/// A real `serve` with JSON logs on a free port and an unreachable
/// database (`database_url`), its stderr piped (its stdout to the test's log).
struct JsonServe {
    port: u16,
    child: tokio::process::Child,
    _log: crate::helpers::logs::ProcessLog,
    _dir: tempfile::TempDir,
}

impl JsonServe {
    fn start(database_url: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = crate::helpers::free_port();
        let path = config_file(
            dir.path(),
            // This machine is a trusted proxy by default: its ids are kept.
            &format!("listen = \"127.0.0.1:{port}\"\nlog_format = \"json\"\ndatabase_url = \"{database_url}\""),
        );
        let log = crate::helpers::logs::ProcessLog::new("replaysafe-serve");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
            .args(["serve", "--config"])
            .arg(&path)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.stdio())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self {
            port,
            child,
            _log: log,
            _dir: dir,
        }
    }

    /// Every line it logs within `wait`, then it is stopped.
    async fn lines_within(mut self, wait: Duration) -> Vec<String> {
        let mut lines = BufReader::new(self.child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let _ = tokio::time::timeout(wait, async {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.push(line);
            }
        })
        .await;
        self.child.kill().await.unwrap();
        seen
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line_and_carry_no_secret() {
    let seen = JsonServe::start("postgres://u:db-password-never-shown@127.0.0.1:9/x")
        .lines_within(Duration::from_secs(5))
        .await;
    assert!(!seen.is_empty(), "serve logged nothing");
    for line in &seen {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for field in ["timestamp", "level", "target"] {
            assert!(v.get(field).is_some(), "{field} in {line}");
        }
        assert!(
            !line.contains(SECRET) && !line.contains("db-password-never-shown"),
            "{line}"
        );
    }
    assert!(seen.iter().any(|l| l.contains("listening")), "{seen:?}");
}

/// `deploy/replaysafe.service` as systemd reads it: `systemd-analyze
/// verify` passes, and `security` rates its exposure low.
#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = include_str!("../../../deploy/replaysafe.service").replace(
        "/usr/local/bin/replaysafe",
        env!("CARGO_BIN_EXE_replaysafe"),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replaysafe.service");
    std::fs::write(&path, unit).unwrap();
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd; scripts/test installs it)");
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let security = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for replaysafe.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(exposure <= 2.0, "exposure {exposure}: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_has_an_id_echoed_back_and_named_in_its_log_lines() {
    let serve = JsonServe::start("postgres://u:p@127.0.0.1:9/x");
    let port = serve.port;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut answered = None;
    for _ in 0..100 {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
            answered = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let generated = answered.expect("serve answers /healthz").headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(generated.len(), 36, "a UUID: {generated}");
    let given = client
        .get(format!("{base}/readyz?token=never-logged"))
        .header("x-request-id", "req-from-the-proxy-1")
        .send()
        .await
        .unwrap();
    assert_eq!(given.headers()["x-request-id"], "req-from-the-proxy-1");
    // Not of a shape that reads safely in a log: a new one instead.
    let odd = client
        .get(format!("{base}/healthz"))
        .header("x-request-id", "req 1\"><script>")
        .send()
        .await
        .unwrap();
    assert_eq!(odd.headers()["x-request-id"].len(), 36, "a UUID");
    let seen = serve.lines_within(Duration::from_secs(3)).await;
    assert!(seen.iter().all(|l| !l.contains("never-logged")), "{seen:?}");
    // readyz logs that the database is unreachable, inside the request's span.
    let traced = seen
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["span"]["request_id"] == "req-from-the-proxy-1");
    let traced = traced.unwrap_or_else(|| panic!("no line in the request's span: {seen:?}"));
    assert_eq!(traced["span"]["path"], "/readyz");
}

fn promtool(dir: &str, args: &[&str]) {
    let out = std::process::Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (Debian's prometheus; scripts/test installs it)");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `replaysafe_*` series a text of PromQL names.
fn series_named(text: &str) -> std::collections::BTreeSet<&str> {
    text.match_indices("replaysafe_")
        .map(|(at, _)| {
            let rest = &text[at..];
            &rest[..rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())]
        })
        .collect()
}

/// The kit in `deploy/`: the Prometheus rules pass `promtool check rules`
/// and their unit tests (`promtool test rules`); every query of the Grafana
/// dashboard is valid PromQL (checked by promtool as a recording rule, its
/// Grafana variables filled in); and every series either names is one a
/// live replaysafe serves on `/metrics`.
#[sqlx::test(migrator = "replaysafe_core::db::MIGRATOR")]
async fn the_prometheus_rules_and_grafana_dashboard_pass_promtool_and_name_only_series_replaysafe_serves(
    pool: sqlx::PgPool,
) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/prometheus");
    promtool(dir, &["check", "rules", "replaysafe.rules.yml"]);
    promtool(dir, &["test", "rules", "replaysafe.rules.test.yml"]);

    let dashboard_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/replaysafe.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dashboard_path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            queries.push(
                expr.replace("$__rate_interval", "5m")
                    .replace("$source", ".*"),
            );
        }
    }
    for want in [
        "replaysafe_deliveries_total",
        "replaysafe_duplicates_total",
        "replaysafe_ack_seconds_bucket",
        "replaysafe_end_to_end_seconds_bucket",
        "replaysafe_backlog_events",
        "replaysafe_dead_letters",
        "replaysafe_attempts_total",
        "replaysafe_shed_total",
    ] {
        assert!(
            queries.iter().any(|q| q.contains(want)),
            "the dashboard charts no {want}"
        );
    }
    let checked = tempfile::tempdir().unwrap();
    let rules: Vec<serde_json::Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": q}))
        .collect();
    // JSON is YAML: promtool reads it as a rules file.
    std::fs::write(
        checked.path().join("dashboard.rules.yml"),
        serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}).to_string(),
    )
    .unwrap();
    promtool(
        checked.path().to_str().unwrap(),
        &["check", "rules", "dashboard.rules.yml"],
    );

    // A dead letter, a completion, a duplicate and a forged signature: every
    // kind of series the rules and the dashboard chart.
    let destination =
        crate::helpers::Destination::start(vec![crate::helpers::Scripted::status(400)]).await;
    let app =
        crate::helpers::spawn_app(pool, crate::helpers::gh_config(&destination.url, "")).await;
    let body = r#"{"id":"prom-1"}"#;
    app.github_delivery("gh", "prom-1", body, b"gh-secret")
        .await;
    app.github_delivery("gh", "prom-1", body, b"gh-secret")
        .await;
    app.github_delivery("gh", "prom-2", body, b"forged").await;
    // Its own content: a copy of prom-1's signed body would be a replay.
    app.github_delivery("gh", "prom-3", r#"{"id":"prom-3"}"#, b"gh-secret")
        .await;
    app.drain().await;
    let text = app.metrics().await;
    let served: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .collect();
    let rules = std::fs::read_to_string(format!("{dir}/replaysafe.rules.yml")).unwrap();
    let mut named = series_named(&rules);
    assert!(named.len() >= 5, "{named:?}");
    for query in &queries {
        named.extend(series_named(query));
    }
    for name in named {
        assert!(served.contains(name), "{name} is not on /metrics:\n{text}");
    }
    // And the label values they select: outcome="claimed" or result="dead"
    // must be what replaysafe writes, not only the series' names.
    for query in queries.iter().map(String::as_str).chain([rules.as_str()]) {
        for (label, values) in label_matchers(query) {
            assert!(
                values
                    .iter()
                    .any(|v| text.contains(&format!("{label}=\"{v}\""))),
                "no series on /metrics has {label} in {values:?}:\n{text}"
            );
        }
    }
}

/// The `label="value"` and `label=~"a|b"` matchers of a PromQL text (`$`
/// variables and `.*` left out), each with the values it accepts.
fn label_matchers(query: &str) -> Vec<(&str, Vec<&str>)> {
    let mut found = Vec::new();
    for (at, _) in query
        .match_indices("=\"")
        .chain(query.match_indices("=~\""))
    {
        let op_len = if query[at..].starts_with("=~") { 3 } else { 2 };
        let before = &query[..at];
        if before.ends_with('!') {
            continue;
        }
        let label_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let label = &before[label_start..];
        let rest = &query[at + op_len..];
        let Some(end) = rest.find('"') else { continue };
        let value = &rest[..end];
        if label.is_empty() || value.contains('$') || value.contains(".*") || value.contains('{') {
            continue;
        }
        found.push((label, value.split('|').collect()));
    }
    found
}

/// An OTLP/HTTP collector on a free port: keeps every body posted to
/// `/v1/traces` with its content type.
struct Collector {
    endpoint: String,
    bodies: Posted,
}

/// What a collector was sent: each body with its content type.
type Posted = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

impl Collector {
    async fn start() -> Self {
        let bodies: Posted = Default::default();
        let kept = bodies.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let kept = kept.clone();
                    async move {
                        let kind = headers
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        kept.lock().unwrap().push((kind, body.to_vec()));
                        axum::http::StatusCode::OK
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { endpoint, bodies }
    }
}

fn text_attribute<'a>(
    attributes: &'a [opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<&'a str> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
    })
}

/// `otlp_endpoint`: a real `serve` exports its spans over OTLP/HTTP to a
/// collector started here; the request's span arrives with its request id,
/// method and path under the service `replaysafe`, the attempt's span with
/// its source; and no secret, signature, query or body is in any of it, nor
/// in any line it logs at `RUST_LOG=debug`.
#[sqlx::test(migrator = "replaysafe_core::db::MIGRATOR")]
async fn spans_are_exported_over_otlp_and_carry_no_secret(pool: sqlx::PgPool) {
    use prost::Message as _;

    let collector = Collector::start().await;
    let destination = crate::helpers::Destination::start(vec![]).await;
    let destination_secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let config = format!(
        r#"otlp_endpoint = "{}"
[[source]]
slug = "gh"
provider = "github"
secrets = ["{SECRET}"]
destination = "{}"
destination_secret = "{destination_secret}"
"#,
        collector.endpoint, destination.url
    );
    let url = crate::helpers::database_url(&pool).await;
    // Its logs too, at their most talkative.
    let dir = tempfile::tempdir().unwrap();
    let port = crate::helpers::free_port();
    let path = dir.path().join("replaysafe.toml");
    std::fs::write(&path, format!("listen = \"127.0.0.1:{port}\"\n{config}")).unwrap();
    let stdout_log = crate::helpers::logs::ProcessLog::new("replaysafe-serve");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("DATABASE_URL", &url)
        .env("RUST_LOG", "debug")
        // No export on the timer: what arrives was flushed at exit.
        .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
        .stdin(Stdio::null())
        .stdout(stdout_log.stdio())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let logged = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push(line);
        }
        seen
    });
    let base = format!("http://127.0.0.1:{port}");
    let mut ready = false;
    for _ in 0..300 {
        if let Ok(r) = reqwest::get(format!("{base}/readyz")).await {
            if r.status() == 200 {
                ready = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "serve did not become ready");

    let body = r#"{"marker":"a-body-that-must-never-be-exported"}"#;
    let signature = format!(
        "sha256={}",
        crate::helpers::hmac_hex(SECRET.as_bytes(), body.as_bytes())
    );
    let answer = crate::helpers::github_request(
        &reqwest::Client::new(),
        &format!("{base}/hooks/gh?token=a-query-that-must-never-be-exported"),
        "otlp-1",
        body,
        SECRET.as_bytes(),
    )
    .header("x-request-id", "otlp-request-1")
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    for _ in 0..100 {
        if destination.count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(destination.count(), 1, "the event was not forwarded");

    // Spans are batched; stopping the process exports what is left.
    let pid = child.id().unwrap() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("serve stopped within 30 s of SIGTERM")
        .unwrap();
    assert!(exit.success(), "{exit:?}");

    let secrets: [&[u8]; 6] = [
        SECRET.as_bytes(),
        signature.as_bytes(),
        &signature.as_bytes()["sha256=".len()..],
        b"a-body-that-must-never-be-exported",
        b"a-query-that-must-never-be-exported",
        destination_secret.as_bytes(),
    ];
    let logged = logged.await.unwrap();
    assert!(
        logged.iter().any(|l| l.contains("/hooks/gh")),
        "the request was logged: {logged:?}"
    );
    for line in &logged {
        for secret in secrets {
            assert!(
                !line.as_bytes().windows(secret.len()).any(|w| w == secret),
                "a log line holds {:?}: {line}",
                String::from_utf8_lossy(secret)
            );
        }
    }
    let bodies = collector.bodies.lock().unwrap().clone();
    assert!(!bodies.is_empty(), "nothing was exported");
    let mut spans = Vec::new();
    for (kind, raw) in &bodies {
        assert_eq!(kind, "application/x-protobuf");
        for secret in secrets.iter().chain([&url.as_bytes()]) {
            assert!(
                !raw.windows(secret.len()).any(|w| w == *secret),
                "an export holds {:?}",
                String::from_utf8_lossy(secret)
            );
        }
        let request =
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(
                &raw[..],
            )
            .expect("an OTLP protobuf body");
        for resource in request.resource_spans {
            let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
            assert_eq!(
                text_attribute(&attributes, "service.name"),
                Some("replaysafe")
            );
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    let request = spans
        .iter()
        .find(|s| text_attribute(&s.attributes, "request_id") == Some("otlp-request-1"))
        .unwrap_or_else(|| {
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            panic!("no span carries the request id; spans: {names:?}")
        });
    assert_eq!(request.name, "request");
    assert_eq!(text_attribute(&request.attributes, "method"), Some("POST"));
    assert_eq!(
        text_attribute(&request.attributes, "path"),
        Some("/hooks/gh")
    );
    assert!(request.end_time_unix_nano >= request.start_time_unix_nano);
    let attempt = spans
        .iter()
        .find(|s| s.name == "attempt")
        .expect("a span for the forwarding attempt");
    assert_eq!(text_attribute(&attempt.attributes, "source"), Some("gh"));
}
