//! The command line's one grammar (issue 39): the command table in
//! docs/api-and-cli.md names every command the parser has and nothing else,
//! and each row's exit codes happen as documented, run as a user runs them
//! (the real binary). What exists both on the database and over the API is
//! one command, local unless a server or token is named; the old spellings
//! still do what they did.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::CommandFactory;
use futures_util::stream::{self, StreamExt};
use replaysafe_core::db::MIGRATOR;
use serde_json::Value;
use sqlx::PgPool;

use crate::helpers::{database_url, gh_config, spawn_app, TestApp};

/// Every command a user can type, as its words (`["sources", "breaker", "open"]`).
fn leaf_commands(command: &clap::Command, above: &[String], out: &mut Vec<Vec<String>>) {
    let subcommands: Vec<&clap::Command> = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .collect();
    if subcommands.is_empty() {
        out.push(above.to_vec());
    }
    for sub in subcommands {
        let mut path = above.to_vec();
        path.push(sub.get_name().to_owned());
        leaf_commands(sub, &path, out);
    }
}

/// A row of the "Every command" table.
#[derive(Debug)]
struct Row {
    /// The usage as written, after `replaysafe`.
    usage: String,
    /// The command's words, up to its first argument or flag.
    words: Vec<String>,
    runs: String,
    codes: Vec<u8>,
}

fn documented() -> Vec<Row> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api-and-cli.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let table = text
        .split("## Every command")
        .nth(1)
        .expect("docs/api-and-cli.md has an 'Every command' section");
    table
        .lines()
        .skip_while(|l| !l.starts_with("| `replaysafe"))
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "four cells: {line}");
            let usage = cells[0]
                .trim_start_matches('`')
                .split('`')
                .next()
                .unwrap()
                .trim_start_matches("replaysafe ")
                .to_owned();
            let words = usage
                .split_whitespace()
                .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .filter(|w| !w.starts_with('-'))
                .map(str::to_owned)
                .collect();
            let codes = cells[3]
                .split_whitespace()
                .map(|c| {
                    c.parse()
                        .unwrap_or_else(|_| panic!("exit code {c:?}: {line}"))
                })
                .collect();
            Row {
                usage,
                words,
                runs: cells[1].to_owned(),
                codes,
            }
        })
        .collect()
}

#[test]
fn the_command_table_names_every_command_and_only_those() {
    let mut commands = Vec::new();
    leaf_commands(&replaysafe::cli::Cli::command(), &[], &mut commands);
    let rows = documented();
    for command in &commands {
        assert!(
            rows.iter().any(|r| &r.words == command),
            "`replaysafe {}` is missing from docs/api-and-cli.md's command table",
            command.join(" ")
        );
    }
    for row in &rows {
        assert!(
            commands.contains(&row.words),
            "the command table lists `replaysafe {}`, which does not exist",
            row.usage
        );
        assert!(
            row.codes.starts_with(&[0]) && row.codes.contains(&2),
            "every command can succeed and be misused: {row:?}"
        );
        if row.runs.starts_with("remote") || row.runs.starts_with("both") {
            assert!(
                row.codes.contains(&4) && row.codes.contains(&5),
                "a command over the API can be refused its token and find no server: {row:?}"
            );
        }
    }
}

/// What the placeholders of a usage stand for in one run.
struct Values {
    slug: String,
    event: String,
    delivery: String,
    other_id: String,
    name: String,
}

impl Values {
    /// Values that parse and name nothing that exists.
    fn missing() -> Self {
        Values {
            slug: "nope".into(),
            event: "999999".into(),
            delivery: "999999".into(),
            other_id: "999999".into(),
            name: "nobody".into(),
        }
    }
}

/// The row's usage with its optional parts left out and each placeholder
/// given its value.
fn arguments(usage: &str, values: &Values) -> Vec<String> {
    let mut args = Vec::new();
    let mut depth = 0;
    for word in usage.split_whitespace() {
        depth += word.matches('[').count();
        let inside = depth > 0;
        depth -= word.matches(']').count();
        if inside {
            continue;
        }
        let word = word.trim_end_matches("...");
        let value = match word {
            "SLUG" => &values.slug,
            "EVENT" => &values.event,
            "DELIVERY" => &values.delivery,
            "JOB" | "INCIDENT" | "SILENCE" => &values.other_id,
            "NAME" => &values.name,
            "N" => "1",
            "ROLE" => "viewer",
            "WHY" => "a reason",
            "KEY" => "k",
            "RULE" => "backlog",
            "URL" => "http://127.0.0.1:9/",
            "CMD" => "true",
            "CHANNEL" => "ops",
            "SHELL" => "bash",
            other => {
                assert!(
                    !other.chars().any(|c| c.is_ascii_uppercase()),
                    "a placeholder this test cannot fill: {other} in {usage}"
                );
                other
            }
        };
        args.push(value.to_owned());
    }
    args
}

/// The placeholders that name something that must exist.
fn names_something(usage: &str) -> bool {
    [
        "SLUG", "EVENT", "DELIVERY", "JOB", "INCIDENT", "SILENCE", "NAME",
    ]
    .iter()
    .any(|p| {
        usage
            .split_whitespace()
            .any(|w| w.trim_end_matches("...") == *p)
    })
}

/// Commands run to their end with a live server and an admin token, each
/// expected to exit 0; the rest either run until stopped (`serve`,
/// `listen`, `deliveries tail`, `jobs watch`), need a world of their own
/// (`seed`, `prove`, `reconcile`, `alerts test`, the incidents) or change
/// what the others read, and are run to 0 by their own tests.
const RUN_TO_THE_END: &[&str] = &[
    "whoami",
    "sources list",
    "sources show",
    "overview",
    "audit",
    "alerts list",
    "events list",
    "events show",
    "deliveries list",
    "deliveries show",
    "deliveries export",
    "jobs list",
    "incidents list",
    "tokens list",
    "users list",
    "config check",
    "completions",
    "migrate",
    "prune",
];

struct Run {
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    config: Option<PathBuf>,
    stdin: Option<&'static str>,
}

impl Run {
    fn new(args: Vec<String>) -> Self {
        Run {
            args,
            env: Vec::new(),
            config: None,
            stdin: None,
        }
    }

    fn env(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.env.push((name, value.into()));
        self
    }

    fn config(mut self, path: &Path) -> Self {
        self.config = Some(path.to_owned());
        self
    }

    fn stdin(mut self, text: &'static str) -> Self {
        self.stdin = Some(text);
        self
    }

    /// Exit code, stdout and stderr; a command that takes longer than 60 s
    /// is a failure of its own.
    async fn output(&self) -> (i32, String, String) {
        use tokio::io::AsyncWriteExt;
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"));
        command
            .args(&self.args)
            .env_remove("REPLAYSAFE_URL")
            .env_remove("REPLAYSAFE_TOKEN")
            .env_remove("REPLAYSAFE_CONFIG")
            .env_remove("DATABASE_URL")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        if let Some(config) = &self.config {
            command.env("REPLAYSAFE_CONFIG", config);
        }
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if let Some(text) = self.stdin {
            stdin.write_all(text.as_bytes()).await.unwrap();
        }
        drop(stdin);
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("replaysafe {:?} ran for a minute", self.args))
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// A config file naming `database` and the test app's source, so that a
/// local command leaves the sources table as the app has it.
fn config_file(dir: &Path, name: &str, database: &str, public_url: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "public_url = \"{public_url}\"\ndatabase_url = \"{database}\"\n\
             [[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\n\
             destination = \"http://127.0.0.1:9/hook\"\nmax_attempts = 1\n"
        ),
    )
    .unwrap();
    path
}

/// Where nothing listens (the discard port), for a server or a database
/// that does not answer.
const NOBODY_HOME: &str = "127.0.0.1:9";

#[sqlx::test(migrator = "MIGRATOR")]
async fn every_command_exits_with_its_documented_codes(pool: PgPool) {
    let app = spawn_app(pool.clone(), gh_config("http://127.0.0.1:9/hook", "")).await;
    let status = app
        .github_delivery("gh", "cli-1", r#"{"id":"cli-1"}"#, b"gh-secret")
        .await;
    assert!((200..300).contains(&status), "{status}");
    let (event, delivery): (i64, i64) =
        sqlx::query_as("SELECT event_id, id FROM deliveries ORDER BY id LIMIT 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    let token = admin_token(&app).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        "replaysafe.toml",
        &database_url(&pool).await,
        &app.url(""),
    );
    let away = format!("postgres://postgres@{NOBODY_HOME}/nothing");
    let no_database = config_file(dir.path(), "away.toml", &away, &app.url(""));
    let server = format!("http://{}", app.addr);
    let existing = Values {
        slug: "gh".into(),
        event: event.to_string(),
        delivery: delivery.to_string(),
        other_id: "1".into(),
        name: "admin-cli".into(),
    };

    let mut runs: Vec<(String, u8, Run)> = Vec::new();
    for row in documented() {
        let args = arguments(&row.usage, &existing);
        let mut misused = args.clone();
        misused.push("--no-such-flag".into());
        runs.push((row.usage.clone(), 2, Run::new(misused)));
        let remote = row.runs.starts_with("remote") || row.runs.starts_with("both");
        let with_token = |args: Vec<String>, token: &str| {
            Run::new(args)
                .env("REPLAYSAFE_URL", &server)
                .env("REPLAYSAFE_TOKEN", token)
                .config(&config)
        };
        if remote {
            runs.push((
                row.usage.clone(),
                4,
                with_token(args.clone(), "rs_made-up-token"),
            ));
            let unreachable = Run::new(args.clone())
                .env("REPLAYSAFE_URL", format!("http://{NOBODY_HOME}"))
                .env("REPLAYSAFE_TOKEN", "rs_any");
            runs.push((row.usage.clone(), 5, unreachable));
            if names_something(&row.usage) {
                // Several ids answer each; one that is not there is refused.
                let refused_each = row.words.last().is_some_and(|w| w == "redeliver")
                    && ["events", "deliveries"].contains(&row.words[0].as_str());
                let missing = arguments(&row.usage, &Values::missing());
                let code = if refused_each { 3 } else { 1 };
                runs.push((row.usage.clone(), code, with_token(missing, &token)));
            }
        }
        let opens_the_database = (row.runs.starts_with("local") || row.runs.starts_with("both"))
            && !row.runs.contains("no database")
            && !row.runs.contains("nothing read");
        if row.codes.contains(&5) && opens_the_database {
            let local = Run::new(args.clone()).config(&no_database);
            runs.push((
                row.usage.clone(),
                5,
                local.stdin("a-long-enough-password\n"),
            ));
        }
        if RUN_TO_THE_END.contains(&row.words.join(" ").as_str()) {
            runs.push((row.usage.clone(), 0, with_token(args.clone(), &token)));
        }
        for (_, code, _) in runs.iter().filter(|(usage, _, _)| *usage == row.usage) {
            assert!(
                row.codes.contains(code),
                "`replaysafe {}` is tested for exit {code}, which its row does not list",
                row.usage
            );
        }
    }
    let failures: Vec<String> = stream::iter(runs)
        .map(|(usage, expected, run)| async move {
            let (code, _, stderr) = run.output().await;
            (code != i32::from(expected)).then(|| {
                format!(
                    "`replaysafe {usage}` ({:?}): exit {code}, documented {expected}: {}",
                    run.args,
                    stderr.trim()
                )
            })
        })
        .buffer_unordered(8)
        .filter_map(|failure| async move { failure })
        .collect()
        .await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

async fn admin_token(app: &TestApp) -> String {
    replaysafe_core::accounts::tokens::create(
        &app.pool,
        "admin-cli",
        replaysafe_types::auth::Role::Admin,
        None,
        replaysafe_types::auth::Who::named("test"),
        None,
    )
    .await
    .unwrap()
    .0
}

/// Who the audit log names for the latest `action`.
async fn last_actor(pool: &PgPool, action: &str) -> String {
    sqlx::query_scalar("SELECT username FROM audit_log WHERE action = $1 ORDER BY id DESC LIMIT 1")
        .bind(action)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn commands_that_exist_both_ways_run_locally_unless_a_server_is_named(pool: PgPool) {
    let app = spawn_app(pool.clone(), gh_config("http://127.0.0.1:9/hook", "")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        "replaysafe.toml",
        &database_url(&pool).await,
        &app.url(""),
    );
    let server = format!("http://{}", app.addr);
    let token = admin_token(&app).await;
    let local = |line: &str| Run::new(words(line)).config(&config);
    let remote = |line: &str| {
        Run::new(words(line))
            .env("REPLAYSAFE_URL", &server)
            .env("REPLAYSAFE_TOKEN", &token)
    };

    // whoami: the token's name over the API, the command-line user locally.
    let (code, out, err) = remote("whoami --json").output().await;
    assert_eq!(code, 0, "{err}");
    let me = json_of(&out);
    assert_eq!(
        (me["username"].as_str(), me["role"].as_str()),
        (Some("admin-cli"), Some("admin"))
    );
    let (code, out, _) = local("whoami --json").env("USER", "carol").output().await;
    assert_eq!(code, 0);
    assert_eq!(json_of(&out)["username"], "cli:carol");

    // sources pause: locally by default (audit-logged as the CLI user), over
    // the API when a server is named, and --local wins over the environment.
    let (code, out, err) = local("sources pause gh --json")
        .env("USER", "carol")
        .output()
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(json_of(&out)[0]["paused_by_operator"], true);
    let who = last_actor(&pool, "source.pause").await;
    assert_eq!(who, "cli:carol");
    let (code, out, err) = remote("sources resume gh --json").output().await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(json_of(&out)[0]["paused"], false);
    let who = last_actor(&pool, "source.resume").await;
    assert_eq!(who, "admin-cli");
    let (code, _, err) = remote("sources pause gh --local")
        .config(&config)
        .env("USER", "dave")
        .output()
        .await;
    assert_eq!(code, 0, "{err}");
    let who = last_actor(&pool, "source.pause").await;
    assert_eq!(who, "cli:dave", "--local ran on the database");
    // A token alone names no server.
    let (code, out, _) = local("whoami --json")
        .env("REPLAYSAFE_TOKEN", &token)
        .output()
        .await;
    assert_eq!(code, 0);
    assert_eq!(json_of(&out)["via"], "database");
    // With no config file and no database there is nothing to look at.
    let nowhere = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
        .args(["sources", "list"])
        .current_dir(nowhere.path())
        .env_remove("DATABASE_URL")
        .env_remove("REPLAYSAFE_URL")
        .env_remove("REPLAYSAFE_CONFIG")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !nowhere.path().join("data").exists(),
        "no embedded cluster for a look"
    );
    let (code, out, _) = local("sources list --json").output().await;
    assert_eq!(code, 0);
    assert_eq!(json_of(&out)[0]["paused_by_operator"], true);
    let (code, _, err) = local("sources pause nope").output().await;
    assert_eq!((code, err.contains("nope")), (1, true), "{err}");
    let (code, _, _) = remote("sources pause nope").output().await;
    assert_eq!(code, 1);
    // show and breaker are the API's only.
    let (code, _, err) = local("sources show gh --local").output().await;
    assert_eq!(code, 2, "{err}");
    let (code, out, err) = remote("sources breaker open gh --json").output().await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(json_of(&out)[0]["destinations"][0]["breaker"], "open");
    let (code, out, err) = remote("sources breaker close gh").output().await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("BREAKERS OPEN"), "{out}");

    // tokens: create locally only; list and revoke both ways.
    let (code, out, err) = local("tokens create --name bot --role viewer --json")
        .output()
        .await;
    assert_eq!(code, 0, "{err}");
    let created = json_of(&out);
    assert!(created["token"].as_str().unwrap().starts_with("rs_"));
    let (code, _, err) = local("tokens create --name bot --role viewer")
        .output()
        .await;
    assert_eq!(code, 3, "a name taken is refused: {err}");
    let (code, _, err) = remote("tokens create --name x --role viewer --remote")
        .output()
        .await;
    assert_eq!(code, 2, "{err}");
    let (code, out, err) = remote("tokens list --json").output().await;
    assert_eq!(code, 0, "{err}");
    let listed = json_of(&out);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "bot"),
        "{listed}"
    );
    let (code, out, err) = remote("tokens revoke --name bot").output().await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("token bot"), "{out}");
    let (code, _, _) = remote("tokens revoke --name bot").output().await;
    assert_eq!(code, 1, "no live token of that name");
    // The name again, live: revoking it by name revokes that one.
    let (code, out, err) = local("tokens create --name bot --role viewer --json")
        .output()
        .await;
    assert_eq!(code, 0, "{err}");
    let second = json_of(&out)["row"]["id"].clone();
    let (code, out, err) = remote("tokens revoke --name bot --json").output().await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(json_of(&out)["id"], second);
    let (code, out, _) = local("tokens list --json").output().await;
    assert_eq!(code, 0);
    let bots: Vec<Value> = json_of(&out)
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "bot")
        .cloned()
        .collect();
    assert_eq!(bots.len(), 2);
    assert!(bots.iter().all(|t| t["state"] == "revoked"), "{bots:?}");

    // users: on the database; a taken name is refused, a short password misuse.
    let (code, _, err) = local("users add --username dora --role operator")
        .stdin("a-long-enough-password\n")
        .output()
        .await;
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = local("users add --username dora --role operator")
        .stdin("a-long-enough-password\n")
        .output()
        .await;
    assert_eq!(code, 3);
    let (code, _, _) = local("users add --username eve --role viewer")
        .stdin("short\n")
        .output()
        .await;
    assert_eq!(code, 2);
    let (code, out, _) = local("users list --json").output().await;
    assert_eq!(code, 0);
    let users = json_of(&out);
    assert_eq!(users[0]["username"], "dora");
    assert_eq!(users[0]["role"], "operator");

    // The old spellings do what they did: on the database, whatever the environment.
    let (code, out, err) = Run::new(words("source resume gh"))
        .config(&config)
        .env("REPLAYSAFE_URL", format!("http://{NOBODY_HOME}"))
        .output()
        .await;
    assert_eq!((code, out.trim()), (0, "source gh resumed"), "{err}");
    let (code, out, _) = Run::new(words("token list --json"))
        .config(&config)
        .env("REPLAYSAFE_URL", format!("http://{NOBODY_HOME}"))
        .env("REPLAYSAFE_TOKEN", &token)
        .output()
        .await;
    assert_eq!(code, 0);
    assert!(json_of(&out).as_array().unwrap().len() >= 2);
    let (code, out, _) = local("user list").output().await;
    assert_eq!(code, 0);
    assert!(out.contains("dora"), "{out}");

    // --json on the rest of the commands that print data.
    let (code, out, _) = local("config check --json").output().await;
    assert_eq!(code, 0);
    let _ = json_of(&out);
    let (code, out, err) = local("prune --json").output().await;
    assert_eq!(code, 0, "{err}");
    assert!(json_of(&out)["events"].is_number(), "{out}");
    let (code, out, err) = local("send --source gh --repeat 2 --json").output().await;
    assert_eq!(code, 0, "{err}");
    let sent = json_of(&out);
    assert_eq!(sent["sent"], 2);
    assert_eq!(sent["answers"].as_array().unwrap().len(), 2);
}

/// Reads `from` until `text` has been seen (or panics after 30 s).
async fn read_until(from: &mut (impl tokio::io::AsyncRead + Unpin), seen: &mut String, text: &str) {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 1024];
    tokio::time::timeout(Duration::from_secs(30), async {
        while !seen.contains(text) {
            let n = from.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the output ended before {text:?}: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {text:?} in {seen}"));
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_password_typed_at_a_terminal_is_not_echoed(pool: PgPool) {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        "replaysafe.toml",
        &database_url(&pool).await,
        "http://127.0.0.1:9",
    );
    // util-linux `script` runs it on a pseudo-terminal; each password is
    // typed only once its prompt is up, as a person would.
    let command = format!(
        "{} users add --username tty --role viewer",
        env!("CARGO_BIN_EXE_replaysafe")
    );
    let mut child = tokio::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("REPLAYSAFE_CONFIG", &config)
        .env_remove("DATABASE_URL")
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    // The prompt is written just before echo goes off: a person takes
    // longer than this to start typing.
    let typing_starts = Duration::from_millis(500);
    read_until(&mut stdout, &mut seen, "password for tty").await;
    tokio::time::sleep(typing_starts).await;
    stdin.write_all(b"typed-at-a-terminal\n").await.unwrap();
    read_until(&mut stdout, &mut seen, "the same again").await;
    tokio::time::sleep(typing_starts).await;
    stdin.write_all(b"typed-at-a-terminal\n").await.unwrap();
    read_until(&mut stdout, &mut seen, "user tty created").await;
    assert!(child.wait().await.unwrap().success(), "{seen}");
    assert!(!seen.contains("typed-at-a-terminal"), "echoed: {seen}");
    let hash: String = sqlx::query_scalar("SELECT password_hash FROM users WHERE username = 'tty'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(replaysafe_core::accounts::verify_password(
        &hash,
        "typed-at-a-terminal"
    ));
}

#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
        .args(["completions", "zsh"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // One byte read, then the pipe closed, as `| head -c 1` does: the rest
    // (more than a pipe holds) has nowhere to go.
    let mut first = [0u8; 1];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success() || status.signal() == Some(libc::SIGPIPE),
        "{status:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
