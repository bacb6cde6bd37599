use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use replaysafe_core::processing::retry::RetryPolicy;
use replaysafe_core::processing::worker::Workers;
use replaysafe_core::processing::Services;

use replaysafe::web::Application;
use replaysafe_core::config::{self, Config};
use replaysafe_core::events;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub struct TestApp {
    pub addr: SocketAddr,
    /// Where `/metrics` is, when the config sets `metrics_listen`.
    pub metrics_addr: Option<SocketAddr>,
    pub pool: PgPool,
    pub config: Arc<Config>,
    /// The services the app runs on, for workers and operations driven by hand.
    pub services: Services,
    pub client: reqwest::Client,
    shutdown: CancellationToken,
    /// An admin's session cookie, made on first use by `server_fn`.
    admin: tokio::sync::OnceCell<String>,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Workers to drive by hand (`run_once`), with retries due at once.
    pub fn workers(&self) -> Workers {
        let mut workers = Workers::new(&self.services);
        workers.policy = Arc::new(RetryPolicy {
            schedule: vec![Duration::ZERO],
            jitter: 0.0,
            min_retry_after: Duration::ZERO,
            max_retry_after: Duration::from_secs(3600),
        });
        workers
    }

    /// Leases due events as worker `worker` would, without forwarding them
    /// (a worker about to die).
    pub async fn lease_as(&self, worker: &str, limit: i64) -> Vec<events::Leased> {
        let mut conn = self.pool.acquire().await.unwrap();
        events::lease(&mut conn, worker, limit, &self.workers().runnable())
            .await
            .unwrap()
    }

    /// Records an attempt as worker `worker`; returns whether the event moved.
    pub async fn finish_as(
        &self,
        worker: &str,
        leased: &events::Leased,
        record: events::AttemptRecord,
        next: events::Next,
    ) -> bool {
        let done = events::Done {
            leased: leased.clone(),
            record,
            next,
            response: None,
        };
        events::finish(&self.pool, worker, &done).await.unwrap()
    }

    /// What `/metrics` serves now.
    pub async fn metrics(&self) -> String {
        let response = self.client.get(self.url("/metrics")).send().await.unwrap();
        response.text().await.unwrap()
    }

    /// Runs one worker until no event is due.
    pub async fn drain(&self) -> usize {
        let workers = self.workers();
        let mut processed = 0;
        loop {
            match workers.run_once("test-worker").await.unwrap() {
                0 => break,
                n => processed += n,
            }
        }
        processed
    }
}

/// What a test destination received.
#[derive(Clone, Debug)]
pub struct Captured {
    pub headers: axum::http::HeaderMap,
    pub body: Vec<u8>,
    /// When the request arrived.
    pub at: std::time::Instant,
}

/// Scripted answer of a test destination: status, extra headers, delay.
#[derive(Clone, Debug)]
pub struct Scripted {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub delay: Duration,
}

impl Scripted {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: vec![],
            delay: Duration::ZERO,
        }
    }
}

/// A destination application on a free port: records every request and
/// answers from its script, then 200 once the script runs out.
#[derive(Clone)]
pub struct Destination {
    pub url: String,
    pub received: Arc<Mutex<Vec<Captured>>>,
}

impl Destination {
    pub async fn start(script: Vec<Scripted>) -> Self {
        let received: Arc<Mutex<Vec<Captured>>> = Default::default();
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let (r, s) = (received.clone(), script);
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (r, s) = (r.clone(), s.clone());
                    async move {
                        r.lock().unwrap().push(Captured {
                            headers,
                            body: body.to_vec(),
                            at: std::time::Instant::now(),
                        });
                        let next = s
                            .lock()
                            .unwrap()
                            .pop_front()
                            .unwrap_or(Scripted::status(200));
                        tokio::time::sleep(next.delay).await;
                        let mut response = axum::response::Response::new(axum::body::Body::from(
                            "answer from the test destination",
                        ));
                        *response.status_mut() =
                            axum::http::StatusCode::from_u16(next.status).unwrap();
                        for (name, value) in next.headers {
                            response.headers_mut().insert(name, value.parse().unwrap());
                        }
                        response
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, received }
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    /// The `Idempotency-Key` of every request received, in arrival order.
    pub fn keys(&self) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.headers["idempotency-key"].to_str().unwrap().to_owned())
            .collect()
    }
}

/// Makes pg_stat_statements readable from this test's database (the test
/// PostgreSQL preloads it), for `lease_statements`.
pub async fn track_statements(pool: &PgPool) {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await
        .unwrap();
}

/// Lease statements run on this test's database so far (pg_stat_statements).
pub async fn lease_statements(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND query LIKE 'WITH runnable AS%'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

impl TestApp {
    /// Stops the server and what it runs (its bulk job runner); the
    /// services stay usable for work driven by hand.
    pub fn stop_serving(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Parses config text for a test; `listen` is forced to a free port.
pub fn test_config(text: &str, vars: &[(&str, &str)]) -> Config {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut config =
        config::parse_and_validate(Some(Path::new("/tmp/replaysafe-test.toml")), text, &env)
            .expect("test config is valid");
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.public_url = UNBOUND_PUBLIC_URL.into();
    config
}

/// One GitHub source `gh` (secret `gh-secret`) forwarding to `destination`
/// with a single attempt, so a refusal dead-letters at once; `top`: more
/// top-level settings.
pub fn gh_config(destination: &str, top: &str) -> Config {
    test_config(
        &format!(
            r#"{top}
[[source]]
slug = "gh"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
max_attempts = 1
"#
        ),
        &[],
    )
}

/// The public URL of a test config until the server is bound: then it is
/// the server's own address, unless the test set another.
const UNBOUND_PUBLIC_URL: &str = "http://127.0.0.1:0";

/// Starts the real server on the test's database, migrated and with the
/// config's sources synced, as `serve` does.
pub async fn spawn_app(pool: PgPool, config: Config) -> TestApp {
    replaysafe_core::db::prepare(
        pool.clone(),
        Arc::new(config.clone()),
        CancellationToken::new(),
    )
    .await;
    spawn_app_with(pool, config).await
}

/// Starts the server on a pool as it is (another process's view, or a dead database).
pub async fn spawn_app_with(pool: PgPool, config: Config) -> TestApp {
    spawn_app_on(pool, config, None).await
}

/// `spawn_app`, with the dashboard and the API on a pool of their own, as
/// `serve` runs them (the caller closes it: an open pool keeps its test's
/// database from being dropped).
pub async fn spawn_app_with_dashboard_pool(
    pool: PgPool,
    config: Config,
    dashboard: PgPool,
) -> TestApp {
    replaysafe_core::db::prepare(
        pool.clone(),
        Arc::new(config.clone()),
        CancellationToken::new(),
    )
    .await;
    spawn_app_on(pool, config, Some(dashboard)).await
}

async fn spawn_app_on(pool: PgPool, mut config: Config, dashboard: Option<PgPool>) -> TestApp {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .expect("binding a free port");
    config.listen = listener.local_addr().unwrap();
    if config.public_url == UNBOUND_PUBLIC_URL {
        config.public_url = format!("http://{}", config.listen);
    }
    let config = Arc::new(config);
    let shutdown = CancellationToken::new();
    let mut services = Services::new(pool.clone(), config.clone(), Default::default());
    if let Some(dashboard) = dashboard {
        services.dashboard_pool = dashboard;
    }
    let app = Application::on(listener, services.clone(), replaysafe::web::Role::Full)
        .expect("a bound listener");
    let addr = app.addr;
    let metrics_addr = app.metrics_addr;
    tokio::spawn(app.run(shutdown.clone()));
    TestApp {
        addr,
        metrics_addr,
        pool,
        config,
        services,
        // Redirects are what tests look at (sign-in), so none is followed;
        // a request that hangs fails its test instead of stalling the run.
        client: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        shutdown,
        admin: Default::default(),
    }
}

/// The URL of the test's own database, for another pool or another process.
pub async fn database_url(pool: &PgPool) -> String {
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    let base = std::env::var("DATABASE_URL").unwrap();
    let (server, _) = base.rsplit_once('/').unwrap();
    format!("{server}/{name}")
}

/// A real `replaysafe serve` process on a free port, killed when dropped;
/// what it logs goes to its test's log directory (see [`logs`]).
pub struct ServerProcess {
    pub base: String,
    pub child: tokio::process::Child,
    /// Dropped after `child` (killed): a failure shows the log in full.
    _log: logs::ProcessLog,
    _dir: tempfile::TempDir,
}

/// A loopback port free now, for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl ServerProcess {
    pub async fn start(config: &str, database_url: &str, args: &[&str]) -> Self {
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replaysafe.toml");
        std::fs::write(&path, format!("listen = \"127.0.0.1:{port}\"\n{config}")).unwrap();
        let log = logs::ProcessLog::new("replaysafe-serve");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .args(args)
            .env("DATABASE_URL", database_url)
            .env("RUST_LOG", "warn")
            // Plain text in the file (the logs' colours are on by default).
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(log.stdio())
            .stderr(log.stdio())
            .kill_on_drop(true)
            .spawn()
            .expect("starting replaysafe");
        let base = format!("http://127.0.0.1:{port}");
        for _ in 0..300 {
            if let Ok(r) = reqwest::get(format!("{base}/readyz")).await {
                if r.status() == 200 {
                    return Self {
                        base,
                        child,
                        _log: log,
                        _dir: dir,
                    };
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "replaysafe did not become ready at {base} (its log: {})",
            log.path().display()
        );
    }
}

/// Where the processes a test starts (servers, CLI runs whose output it
/// does not read, PostgreSQL clusters, pg_autoctl) write: a file per process
/// under `target/test-logs/<test>/`, emptied when the test starts again.
/// A green run prints none of it; when the test fails (a [`ProcessLog`] of
/// its is dropped while its thread panics) the path and the last lines of
/// each of its logs are printed with the test's own output.
pub mod logs {
    use std::collections::HashMap;
    use std::io::{Read, Seek, SeekFrom};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};

    /// Lines of each log shown when its test fails.
    const TAIL_LINES: usize = 200;
    /// How far from a log's end its last lines are looked for.
    const TAIL_BYTES: u64 = 1 << 20;

    /// `target/test-logs`, beside the binaries under test.
    pub fn root() -> PathBuf {
        let binary = Path::new(env!("CARGO_BIN_EXE_replaysafe"));
        binary
            .parent()
            .and_then(Path::parent)
            .expect("the binary is in target/<profile>/")
            .join("test-logs")
    }

    /// The running test's name as a file name (`outage::serve_survives`:
    /// `outage.serve_survives`). The default harness names each test's
    /// thread after the test; a test's runtime (current-thread, or the
    /// multi-thread one's `block_on`) runs its body on that thread.
    pub fn test_name() -> String {
        let thread = std::thread::current();
        let name = match thread.name() {
            Some(name) if name != "main" => name,
            _ => "unnamed-thread",
        };
        let mut safe: String = name
            .replace("::", ".")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        safe.truncate(200);
        safe
    }

    /// One test's logs.
    struct TestLogs {
        dir: PathBuf,
        files: Mutex<Vec<(String, PathBuf)>>,
        shown: AtomicBool,
    }

    fn this_test() -> Arc<TestLogs> {
        static TESTS: OnceLock<Mutex<HashMap<String, Arc<TestLogs>>>> = OnceLock::new();
        let name = test_name();
        let mut tests = TESTS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        tests
            .entry(name)
            .or_insert_with_key(|name| {
                let dir = root().join(name);
                // What an earlier run of this test left.
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir).expect("creating the test's log directory");
                // Clusters run as the postgres user write their logs here.
                for d in [root(), dir.clone()] {
                    let _ = std::fs::set_permissions(
                        d,
                        std::os::unix::fs::PermissionsExt::from_mode(0o755),
                    );
                }
                Arc::new(TestLogs {
                    dir,
                    files: Default::default(),
                    shown: AtomicBool::new(false),
                })
            })
            .clone()
    }

    impl TestLogs {
        /// Every log of the test, its last lines each, once.
        fn show(&self) {
            if self.shown.swap(true, Ordering::SeqCst) {
                return;
            }
            let files = self
                .files
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            eprintln!(
                "\n==== the test failed: the logs of the {} process(es) it started, in {}",
                files.len(),
                self.dir.display()
            );
            for (_, path) in files {
                match tail(&path, TAIL_LINES) {
                    Ok((size, lines)) => {
                        eprintln!(
                            "---- {} ({size} bytes; its last {} lines):",
                            path.display(),
                            lines.len()
                        );
                        for line in lines {
                            eprintln!("{line}");
                        }
                    }
                    Err(e) => eprintln!("---- {}: {e}", path.display()),
                }
            }
            eprintln!("==== end of the process logs");
        }
    }

    /// The file's size and its last `n` lines.
    fn tail(path: &Path, n: usize) -> std::io::Result<(u64, Vec<String>)> {
        let mut file = std::fs::File::open(path)?;
        let size = file.metadata()?.len();
        let start = size.saturating_sub(TAIL_BYTES);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes);
        let mut lines: Vec<&str> = text.lines().collect();
        if start > 0 && !lines.is_empty() {
            lines.remove(0); // cut by the start of the read
        }
        let skip = lines.len().saturating_sub(n);
        Ok((size, lines[skip..].iter().map(|l| l.to_string()).collect()))
    }

    /// One process's log, `<process>-<n>.log` in its test's directory;
    /// keep it as long as the process runs. Dropped while the thread
    /// panics, it shows every log of its test (once).
    pub struct ProcessLog {
        path: PathBuf,
        test: Arc<TestLogs>,
    }

    impl ProcessLog {
        /// A new, empty log for the running test.
        pub fn new(process: &str) -> Self {
            let test = this_test();
            let path = {
                let mut files = test.files.lock().unwrap_or_else(PoisonError::into_inner);
                let n = files.iter().filter(|(p, _)| p == process).count() + 1;
                let path = test.dir.join(format!("{process}-{n}.log"));
                files.push((process.to_owned(), path.clone()));
                path
            };
            std::fs::File::create(&path).expect("creating a process log");
            Self { path, test }
        }

        pub fn path(&self) -> &Path {
            &self.path
        }

        /// A handle that appends to the log, for a child's stdout or stderr.
        pub fn stdio(&self) -> std::process::Stdio {
            std::fs::OpenOptions::new()
                .append(true)
                .open(&self.path)
                .expect("opening a process log")
                .into()
        }
    }

    impl Drop for ProcessLog {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.test.show();
            }
        }
    }
}

/// A TCP proxy in front of PostgreSQL that a test can cut and restore, to
/// play a database outage without stopping the shared test server.
pub struct DbProxy {
    pub port: u16,
    up: Arc<std::sync::atomic::AtomicBool>,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    /// Connections refused while cut: how hard the clients knock.
    pub refused: Arc<std::sync::atomic::AtomicU64>,
}

impl DbProxy {
    /// In front of the server a database URL names.
    pub async fn in_front_of(database_url: &str) -> Self {
        let host = database_url
            .split_once('@')
            .unwrap()
            .1
            .split_once('/')
            .unwrap()
            .0;
        Self::start(host).await
    }

    pub async fn start(target: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Default::default();
        let refused: Arc<std::sync::atomic::AtomicU64> = Default::default();
        let (target, up2, links2, refused2) = (
            target.to_owned(),
            up.clone(),
            links.clone(),
            refused.clone(),
        );
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up2.load(std::sync::atomic::Ordering::SeqCst) {
                    refused2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    continue; // refused: dropped at once
                }
                let target = target.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                links2.lock().unwrap().push(link.abort_handle());
            }
        });
        Self {
            port,
            up,
            links,
            refused,
        }
    }

    /// The database "goes away": open connections die, new ones are refused.
    pub fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    pub fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The test database's URL through this proxy.
    pub fn url(&self, direct: &str) -> String {
        let (scheme_user, rest) = direct.split_once('@').unwrap();
        let (_, path) = rest.split_once('/').unwrap();
        format!("{scheme_user}@127.0.0.1:{}/{path}", self.port)
    }
}

/// Test accounts' password (at least `users::MIN_PASSWORD` characters).
pub const PASSWORD: &str = "correct horse battery staple";

impl TestApp {
    /// Creates `{role}-user` with `role` if missing and signs in; returns the
    /// session cookie (`replaysafe_session=...`).
    pub async fn session(&self, role: &str) -> String {
        let username = format!("{role}-user");
        let _ = replaysafe_core::db::users::add(
            &self.pool,
            &username,
            PASSWORD,
            replaysafe_types::auth::Role::parse(role).unwrap(),
            true,
        )
        .await;
        let (status, cookie) = self.login(&username, PASSWORD, None).await;
        assert_eq!(status, 200, "signing in as {username}");
        cookie.expect("a session cookie")
    }

    /// Posts the sign-in form as the page does; returns the status and the
    /// session cookie set, if any.
    pub async fn login(
        &self,
        username: &str,
        password: &str,
        cookie: Option<&str>,
    ) -> (u16, Option<String>) {
        let form = format!(
            "username={}&password={}",
            form_urlencoded::byte_serialize(username.as_bytes()).collect::<String>(),
            form_urlencoded::byte_serialize(password.as_bytes()).collect::<String>()
        );
        let mut request = self
            .client
            .post(self.url("/api/login"))
            .header("origin", format!("http://{}", self.addr))
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let response = request.body(form).send().await.unwrap();
        let cookie = session_cookie(response.headers());
        (response.status().as_u16(), cookie)
    }

    /// A page as a browser with `cookie` gets it (redirects not followed).
    pub async fn page(&self, cookie: Option<&str>, path: &str) -> reqwest::Response {
        let mut request = self.client.get(self.url(path));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send().await.unwrap()
    }

    /// Calls a server function over HTTP as the browser does (form-encoded
    /// arguments, same origin), signed in as an admin; returns the status and
    /// the JSON answer (the text as a JSON string when it is not JSON).
    pub async fn server_fn(&self, endpoint: &str, form: &str) -> (u16, serde_json::Value) {
        let cookie = self
            .admin
            .get_or_init(|| self.session("admin"))
            .await
            .clone();
        self.server_fn_as(Some(&cookie), endpoint, form).await
    }

    /// A server function call with this cookie (None: anonymous).
    pub async fn server_fn_as(
        &self,
        cookie: Option<&str>,
        endpoint: &str,
        form: &str,
    ) -> (u16, serde_json::Value) {
        let mut request = self
            .client
            .post(self.url(&format!("/api/{endpoint}")))
            .header("origin", format!("http://{}", self.addr))
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let response = request.body(form.to_owned()).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }
}

impl TestApp {
    /// A GitHub `push` delivery to `/hooks/{slug}`, signed with `secret` as
    /// GitHub signs it; returns the status the receiver answered.
    pub async fn github_delivery(&self, slug: &str, id: &str, body: &str, secret: &[u8]) -> u16 {
        github_request(
            &self.client,
            &self.url(&format!("/hooks/{slug}")),
            id,
            body,
            secret,
        )
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
    }
}

/// A push event posted to `url` as GitHub signs it, under delivery `id`.
pub fn github_request(
    client: &reqwest::Client,
    url: &str,
    id: &str,
    body: &str,
    secret: &[u8],
) -> reqwest::RequestBuilder {
    github_request_as(client, url, id, body, secret, "application/json")
}

/// A GitHub delivery with its body sent as `content_type`.
pub fn github_request_as(
    client: &reqwest::Client,
    url: &str,
    id: &str,
    body: &str,
    secret: &[u8],
    content_type: &str,
) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("content-type", content_type)
        .header("x-github-event", "push")
        .header("x-github-delivery", id)
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hmac_hex(secret, body.as_bytes())),
        )
        .body(body.to_owned())
}

impl TestApp {
    /// A Slack interactivity request to `/hooks/{slug}`, as Slack signs it
    /// (secret `slack-secret`).
    pub async fn slack_interaction(&self, slug: &str, body: &str) -> reqwest::Response {
        let ts = chrono::Utc::now().timestamp();
        self.client
            .post(self.url(&format!("/hooks/{slug}")))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-slack-request-timestamp", ts.to_string())
            .header(
                "x-slack-signature",
                format!(
                    "v0={}",
                    hmac_hex(b"slack-secret", format!("v0:{ts}:{body}").as_bytes())
                ),
            )
            .body(body.to_owned())
            .send()
            .await
            .unwrap()
    }
}

/// Hex HMAC-SHA256, as GitHub and Slack sign.
pub fn hmac_hex(key: &[u8], data: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(data);
    hex::encode(mac.finalize().into_bytes())
}

/// `replaysafe_session=...` from a response's Set-Cookie, if set.
pub fn session_cookie(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("replaysafe_session="))
        .map(|v| v.split(';').next().unwrap().to_owned())
}

/// An API token of `role`, made as `replaysafe token create` makes it.
pub async fn make_token(
    pool: &PgPool,
    name: &str,
    role: &str,
    expires_in_secs: Option<i64>,
) -> String {
    replaysafe_core::accounts::tokens::create(
        pool,
        name,
        replaysafe_types::auth::Role::parse(role).unwrap(),
        expires_in_secs,
        replaysafe_types::auth::Who::named("test"),
        None,
    )
    .await
    .unwrap()
    .0
}

/// A destination down (500) until the test brings it `up`; it records
/// each request's key and the status it answered.
#[derive(Clone)]
pub struct Outage {
    pub url: String,
    pub up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, u16)>>>,
}

impl Outage {
    pub async fn start() -> Self {
        let up: std::sync::Arc<std::sync::atomic::AtomicBool> = Default::default();
        let seen: std::sync::Arc<std::sync::Mutex<Vec<(String, u16)>>> = Default::default();
        let (is_up, state) = (up.clone(), seen.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap| {
                let (is_up, state) = (is_up.clone(), state.clone());
                async move {
                    let status = if is_up.load(std::sync::atomic::Ordering::SeqCst) {
                        200
                    } else {
                        500
                    };
                    let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                    state.lock().unwrap().push((key, status));
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, up, seen }
    }

    pub fn answered(&self) -> Vec<(String, u16)> {
        self.seen.lock().unwrap().clone()
    }
}

/// The state of the event holding `key`.
pub async fn state_of(pool: &PgPool, key: &str) -> String {
    sqlx::query_scalar("SELECT state FROM event_summaries WHERE idem_key = $1")
        .bind(key)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `replaysafe ARGS` run as a user runs it against `app`, with `token`.
pub async fn run_cli(app: &TestApp, token: &str, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_replaysafe"))
        .env("REPLAYSAFE_URL", format!("http://{}", app.addr))
        .env("REPLAYSAFE_TOKEN", token)
        .env_remove("REPLAYSAFE_CONFIG")
        .args(args)
        .output()
        .await
        .unwrap()
}

/// Reads a provider API stand-in with the provider's official SDK
/// (`tests/sdk/list.mjs`): its JSON answer. Async: the stand-in answers
/// from this test's runtime.
pub async fn sdk_list(args: &[&str]) -> serde_json::Value {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk");
    assert!(
        dir.join("node_modules/@octokit/rest").exists(),
        "the provider SDKs are not installed: run server/tests/sdk/setup.sh (scripts/test does)"
    );
    let out = tokio::process::Command::new("node")
        .arg(dir.join("list.mjs"))
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "list.mjs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `POST /api/v1/sources/{slug}/reconcile` as `token`: status and verdict.
pub async fn reconcile_over_api(
    app: &TestApp,
    token: &str,
    slug: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let r = app
        .client
        .post(app.url(&format!("/api/v1/sources/{slug}/reconcile")))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}
