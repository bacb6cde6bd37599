//! Failover under pg_auto_failover (issue 19), as users run it: a monitor
//! and two data nodes (Debian's `postgresql-15-auto-failover`, installed by
//! `./scripts/test`), every commit on both nodes before it is answered,
//! two replaysafe processes given the URL `pg_autoctl show uri` hands out,
//! and a steady stream of signed deliveries with retries. The primary's
//! whole node (its pg_autoctl and PostgreSQL) is killed with SIGKILL; the
//! monitor promotes the standby by itself, with its default timeouts (about
//! a minute, longer than the source's leases). Every delivery answered 2xx
//! is in the new primary and forwarded exactly once; no 2xx comes while no
//! primary is writable; service returns without restarting replaysafe.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::failover::{
    as_postgres, check_promise, cluster_root, pg_bin, postgres_dir, Check, Stream,
};
use crate::helpers::{free_port, logs::ProcessLog, Destination, Scripted, ServerProcess};

const PG_AUTOCTL: &str = "/usr/bin/pg_autoctl";

/// One `pg_autoctl ... --run`: the monitor or a data node, in its own
/// process group (pg_autoctl runs PostgreSQL as its child); what it says
/// goes to the test's log directory.
struct Node {
    pgdata: PathBuf,
    port: u16,
    run: Child,
    log: ProcessLog,
}

impl Node {
    /// `pg_autoctl create <what> ... --run` as the postgres user, with its
    /// own configuration directories (pg_autoctl keeps its state there).
    fn start(root: &Path, name: &str, what: &str, extra: &[String]) -> Self {
        let dir = postgres_dir(root, name);
        let port = free_port();
        let pgdata = dir.join("pgdata");
        let log = ProcessLog::new(&format!("pg_autoctl-{name}"));
        let mut command = as_postgres(Path::new("/usr/bin/env"));
        command
            .arg(format!("XDG_CONFIG_HOME={}", dir.join("config").display()))
            .arg(format!("XDG_DATA_HOME={}", dir.join("data").display()))
            .arg(format!("PATH={}:/usr/bin:/bin", pg_bin().display()))
            .arg(PG_AUTOCTL)
            .args(["create", what, "--pgdata"])
            .arg(&pgdata)
            .args(["--pgport", &port.to_string()])
            .args(["--hostname", "127.0.0.1", "--listen", "127.0.0.1"])
            .args(["--auth", "trust", "--no-ssl"])
            .args(extra)
            .arg("--run")
            .stdin(Stdio::null())
            .stdout(log.stdio())
            .stderr(log.stdio());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let run = command.spawn().expect("starting pg_autoctl");
        Self {
            pgdata,
            port,
            run,
            log,
        }
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    fn postmaster(&self) -> Option<i32> {
        std::fs::read_to_string(self.pgdata.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// `signal` to the node's process group and its postmaster.
    fn signal(&self, signal: i32) {
        let group = self.run.id() as i32;
        // SAFETY: kill has no memory preconditions.
        unsafe {
            libc::kill(-group, signal);
            if let Some(pid) = self.postmaster() {
                libc::kill(pid, signal);
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.run.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.signal(libc::SIGKILL);
        let _ = self.run.wait();
    }
}

/// The monitor's view: (port, reported state, goal state) per data node.
async fn formation(monitor: &sqlx::PgPool) -> Vec<(i32, String, String)> {
    sqlx::query_as(
        "SELECT nodeport, reportedstate::text, goalstate::text FROM pgautofailover.node
         ORDER BY nodeport",
    )
    .fetch_all(monitor)
    .await
    .unwrap_or_default()
}

/// Waits until the monitor reports `want` (state per node, in any order),
/// each node at its goal; returns the ports in the order of `want`.
async fn wait_for(monitor: &sqlx::PgPool, want: &[&str], within: Duration) -> Vec<u16> {
    let deadline = Instant::now() + within;
    loop {
        let nodes = formation(monitor).await;
        let settled =
            nodes.len() == want.len() && nodes.iter().all(|(_, reported, goal)| reported == goal);
        if settled {
            let ports: Option<Vec<u16>> = want
                .iter()
                .map(|w| {
                    nodes
                        .iter()
                        .find(|(_, r, _)| r == w)
                        .map(|(p, _, _)| *p as u16)
                })
                .collect();
            if let Some(ports) = ports {
                return ports;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the formation did not reach {want:?}: {nodes:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether `url` takes writes now (neither a standby nor read-only, as
/// pg_auto_failover keeps a promoted standby until the old primary is
/// surely fenced): None when it does not answer.
async fn writable(url: &str) -> Option<bool> {
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let connect = sqlx::ConnectOptions::connect(&options);
    let mut conn = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .ok()?
        .ok()?;
    sqlx::query_scalar(
        "SELECT NOT (pg_is_in_recovery() OR current_setting('transaction_read_only')::boolean)",
    )
    .fetch_one(&mut conn)
    .await
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_auto_failover_promotes_the_standby_and_nothing_acknowledged_is_lost_or_forwarded_twice()
{
    assert!(
        Path::new(PG_AUTOCTL).exists(),
        "{PG_AUTOCTL} is missing: ./scripts/test installs postgresql-15-auto-failover"
    );
    let root = cluster_root("replaysafe-autofailover");
    let monitor = Node::start(root.path(), "monitor", "monitor", &[]);
    let started = Instant::now();
    let monitor_pool = loop {
        if let Ok(pool) = sqlx::PgPool::connect(&monitor.url("pg_auto_failover")).await {
            if sqlx::query("SELECT 1 FROM pgautofailover.node LIMIT 1")
                .execute(&pool)
                .await
                .is_ok()
            {
                break pool;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the monitor did not start (see {})",
            monitor.log.path().display()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let join = [
        "--monitor".to_owned(),
        format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
            monitor.port
        ),
    ];
    // The first node becomes the primary before the second joins it.
    let first = Node::start(root.path(), "node1", "postgres", &join);
    wait_for(&monitor_pool, &["single"], Duration::from_secs(90)).await;
    let second = Node::start(root.path(), "node2", "postgres", &join);
    let ports = wait_for(
        &monitor_pool,
        &["primary", "secondary"],
        Duration::from_secs(120),
    )
    .await;
    let (primary, standby) = if ports[0] == first.port {
        (&first, &second)
    } else {
        (&second, &first)
    };
    assert_eq!(ports, [primary.port, standby.port]);
    // A commit waits for the standby: nothing is answered that one node holds.
    let on_primary = sqlx::PgPool::connect(&primary.url("postgres"))
        .await
        .unwrap();
    let sync_names: String = sqlx::query_scalar("SHOW synchronous_standby_names")
        .fetch_one(&on_primary)
        .await
        .unwrap();
    assert!(
        sync_names.starts_with("ANY 1 ("),
        "one synchronous standby: {sync_names:?}"
    );
    on_primary.close().await;

    // The URL pg_auto_failover hands out, with the user to connect as.
    let shown = Command::new("runuser")
        .args(["-u", "postgres", "--", "/usr/bin/env"])
        .arg(format!(
            "XDG_CONFIG_HOME={}",
            root.path().join("monitor/config").display()
        ))
        .arg(format!(
            "XDG_DATA_HOME={}",
            root.path().join("monitor/data").display()
        ))
        .args([
            PG_AUTOCTL,
            "show",
            "uri",
            "--formation",
            "default",
            "--pgdata",
        ])
        .arg(&monitor.pgdata)
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let uri = String::from_utf8(shown.stdout).unwrap().trim().to_owned();
    assert!(
        uri.contains(&format!("127.0.0.1:{}", primary.port))
            && uri.contains(&format!("127.0.0.1:{}", standby.port))
            && uri.contains("target_session_attrs=read-write"),
        "{uri}"
    );
    let url = uri.replacen("postgres://", "postgres://postgres@", 1);

    // Attempts in flight at the kill (the destination answers in 300 ms),
    // under leases (1 s timeout plus the margin) that expire long before
    // the monitor promotes the standby.
    let destination = Destination::start(vec![
        Scripted {
            status: 200,
            headers: vec![],
            delay: Duration::from_millis(300),
        };
        100_000
    ])
    .await;
    let config = format!(
        "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"{}\"\nattempt_timeout_secs = 1\n",
        destination.url
    );
    let a = ServerProcess::start(&config, &url, &[]).await;
    let b = ServerProcess::start(&config, &url, &[]).await;
    let stream = Stream::start(&[a.base.clone(), b.base.clone()]);
    // Deliveries flow before the kill: waited for, not timed (the suite's
    // load slows the two processes' start and the synchronous standby).
    let flowing = Instant::now();
    let before_kill = loop {
        let keys = stream.answers.lock().unwrap().keys();
        if keys > 10 {
            break keys;
        }
        assert!(
            flowing.elapsed() < Duration::from_secs(60),
            "deliveries flow before the kill: {keys} in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // Killed while an attempt is surely in flight (one received in the last
    // 100 ms, answered 300 ms after it arrived): on a loaded machine the
    // first forwards may come later than the first acknowledgements.
    let waiting = Instant::now();
    while !destination
        .received
        .lock()
        .unwrap()
        .iter()
        .any(|c| c.at.elapsed() < Duration::from_millis(100))
    {
        assert!(
            waiting.elapsed() < Duration::from_secs(30),
            "no forward reached the destination within 30 s: {} received",
            destination.received.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    primary.signal(libc::SIGKILL);
    let killed = Instant::now();
    let standby_url = standby.url("postgres");
    // Until when the standby surely took no write: the start of the last
    // check that found it so (it took writes only after).
    let mut standby_until = killed;
    loop {
        let checking = Instant::now();
        match writable(&standby_url).await {
            Some(true) => break,
            Some(false) => standby_until = checking,
            None => {}
        }
        assert!(
            killed.elapsed() < Duration::from_secs(180),
            "the monitor promoted no standby within 3 minutes: {:?}",
            formation(&monitor_pool).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back = loop {
        if let Some(at) = stream
            .answers
            .lock()
            .unwrap()
            .first_2xx_after(standby_until)
        {
            break at;
        }
        assert!(
            standby_until.elapsed() < Duration::from_secs(30),
            "service did not return within 30 s of the promotion"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answers = stream.stop().await;
    let acknowledged = check_promise(
        &answers,
        Check {
            killed,
            writable_again: standby_until,
            new_primary: &standby_url,
            destination: &destination,
            answer_after: Duration::from_millis(300),
            // Past the lease (1 s timeout plus the 25 s margin) of every
            // attempt recorded after the outage: a wrongful takeover shows.
            settle: Duration::from_secs(30),
        },
    )
    .await;
    println!(
        "pg_auto_failover: {acknowledged} keys acknowledged ({before_kill} before the kill), {} forwarded; the standby writable {:?} after the kill, 2xx again {:?} after the kill",
        destination.keys().len(),
        standby_until - killed,
        back - killed,
    );
    drop((a, b));
    monitor_pool.close().await;
}
