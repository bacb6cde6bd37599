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
/// database (`database_url`), its stderr piped.
struct JsonServe {
    port: u16,
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl JsonServe {
    fn start(database_url: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let path = config_file(
            dir.path(),
            &format!("listen = \"127.0.0.1:{port}\"\nlog_format = \"json\"\ndatabase_url = \"{database_url}\""),
        );
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
            .args(["serve", "--config"])
            .arg(&path)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self {
            port,
            child,
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

/// `deploy/prometheus/`: the rules pass `promtool check rules` and their
/// unit tests (`promtool test rules`), and every series they name is one a
/// live replaysafe serves on `/metrics`.
#[sqlx::test(migrator = "replaysafe::db::MIGRATOR")]
async fn the_prometheus_rules_pass_promtool_and_name_only_series_replaysafe_serves(
    pool: sqlx::PgPool,
) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/prometheus");
    for args in [
        &["check", "rules", "replaysafe.rules.yml"][..],
        &["test", "rules", "replaysafe.rules.test.yml"][..],
    ] {
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
    app.drain().await;
    let text = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let served: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .collect();
    let rules = std::fs::read_to_string(format!("{dir}/replaysafe.rules.yml")).unwrap();
    let named: std::collections::BTreeSet<&str> = rules
        .match_indices("replaysafe_")
        .map(|(at, _)| {
            let rest = &rules[at..];
            &rest[..rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())]
        })
        .collect();
    assert!(named.len() >= 5, "{named:?}");
    for name in named {
        assert!(served.contains(name), "{name} is not on /metrics:\n{text}");
    }
}
