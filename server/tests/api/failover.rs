//! Failover (issue 19): a multi-host `database_url` follows the writable
//! primary. A real primary with a synchronous standby (every commit on both
//! before any 2xx), a real `serve` given both hosts (the standby first),
//! signed deliveries streaming in; the primary's postmaster is killed with
//! SIGKILL and the standby promoted. Every delivery answered 2xx is in the
//! new primary and forwarded exactly once; while no primary is writable the
//! receiver answers 503 with Retry-After, never 2xx; service returns
//! without restarting replaysafe.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::helpers::{free_port, github_request, logs::ProcessLog, Destination, ServerProcess};

/// initdb, pg_ctl and pg_basebackup, as scripts/lib.sh finds them.
pub fn pg_bin() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join("pg_ctl").exists())
        .collect();
    dirs.sort();
    dirs.pop()
        .expect("PostgreSQL server binaries under /usr/lib/postgresql")
}

/// A PostgreSQL cluster of this test's, run as the postgres user when the
/// test runs as root (PostgreSQL refuses root); its server log is in the
/// test's log directory.
pub struct Cluster {
    data: PathBuf,
    port: u16,
    log: ProcessLog,
}

pub fn as_postgres(program: &Path) -> Command {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

pub fn run(mut command: Command) {
    let out = command.output().expect("running a PostgreSQL tool");
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Cluster {
    fn start(&self, extra: &str) {
        let mut start = as_postgres(&pg_bin().join("pg_ctl"));
        start
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.log.path())
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off {extra}",
                self.port
            ))
            .arg("start");
        run(start);
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// SIGKILL to the postmaster: its backends notice and die with it.
    fn kill(&self) {
        let pid: i32 = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SAFETY: kill has no memory preconditions.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    }

    pub fn stop(&self) {
        let mut stop = as_postgres(&pg_bin().join("pg_ctl"));
        stop.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "stop"]);
        let _ = stop.output();
    }
}

/// A log for a cluster named `name`, which the postgres user may write.
fn cluster_log(name: &str) -> ProcessLog {
    let log = ProcessLog::new(&format!("postgres-{name}"));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        run({
            let mut c = Command::new("chown");
            c.arg("postgres:").arg(log.path());
            c
        });
    }
    log
}

/// A scratch directory for clusters, which the postgres user may enter.
pub fn cluster_root(prefix: &str) -> tempfile::TempDir {
    let root = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    root
}

/// A directory the postgres user may write in.
pub fn postgres_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    // PostgreSQL refuses a data directory others may read.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    if unsafe { libc::geteuid() } == 0 {
        run({
            let mut c = Command::new("chown");
            c.arg("postgres:").arg(&dir);
            c
        });
    }
    dir
}

/// The primary and its standby, streaming from it; `synchronous`: a
/// commit waits for the standby (synchronous_standby_names = '*').
pub fn primary_and_standby(root: &Path, synchronous: bool) -> (Cluster, Cluster) {
    let primary = Cluster {
        data: postgres_dir(root, "primary"),
        port: free_port(),
        log: cluster_log("primary"),
    };
    let mut init = as_postgres(&pg_bin().join("initdb"));
    init.arg("-D").arg(&primary.data).args([
        "-U",
        "postgres",
        "-A",
        "trust",
        "-E",
        "UTF8",
        "--locale=C",
        "--no-instructions",
    ]);
    run(init);
    primary.start(if synchronous {
        "-c synchronous_standby_names='*' -c wal_level=replica"
    } else {
        "-c wal_level=replica"
    });
    let standby = Cluster {
        data: postgres_dir(root, "standby"),
        port: free_port(),
        log: cluster_log("standby"),
    };
    let mut backup = as_postgres(&pg_bin().join("pg_basebackup"));
    backup
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &primary.port.to_string(),
            "-U",
            "postgres",
            "-D",
        ])
        .arg(&standby.data)
        .args(["-R", "-X", "stream"]);
    run(backup);
    standby.start("");
    (primary, standby)
}

async fn in_recovery(url: &str) -> bool {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    standby
}

/// What the stream of deliveries was answered.
#[derive(Default)]
pub struct Answers {
    by_key: BTreeMap<String, Vec<u16>>,
    /// Every answer's status, with when it came.
    log: Vec<(Instant, u16)>,
    /// 503s that came without Retry-After.
    bare_503: usize,
}

impl Answers {
    /// The first 2xx answered after `at`.
    pub fn first_2xx_after(&self, at: Instant) -> Option<Instant> {
        self.log
            .iter()
            .find(|(t, s)| *t > at && *s == 200)
            .map(|(t, _)| *t)
    }

    /// How many keys were posted.
    pub fn keys(&self) -> usize {
        self.by_key.len()
    }
}

/// A steady stream of signed GitHub deliveries in four lanes, each lane to
/// one of `bases` in turn; every fourth delivery repeats the one before (a
/// provider's retry).
pub struct Stream {
    pub answers: Arc<Mutex<Answers>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    senders: Vec<tokio::task::JoinHandle<()>>,
}

impl Stream {
    pub fn start(bases: &[String]) -> Self {
        let answers: Arc<Mutex<Answers>> = Default::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let senders = (0..4)
            .map(|lane| {
                let (client, base, answers, stop) = (
                    client.clone(),
                    bases[lane % bases.len()].clone(),
                    answers.clone(),
                    stop.clone(),
                );
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        n += 1;
                        let key = format!("k-{lane}-{}", if n % 4 == 0 { n - 1 } else { n });
                        let body = format!(r#"{{"key":"{key}"}}"#);
                        let Ok(answer) = github_request(
                            &client,
                            &format!("{base}/hooks/gh"),
                            &key,
                            &body,
                            b"gh-secret",
                        )
                        .send()
                        .await
                        else {
                            continue;
                        };
                        let status = answer.status().as_u16();
                        {
                            let mut a = answers.lock().unwrap();
                            if status == 503 && !answer.headers().contains_key("retry-after") {
                                a.bare_503 += 1;
                            }
                            a.log.push((Instant::now(), status));
                            a.by_key.entry(key).or_default().push(status);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Self {
            answers,
            stop,
            senders,
        }
    }

    pub async fn stop(self) -> Answers {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self.senders {
            s.await.unwrap();
        }
        std::mem::take(&mut *self.answers.lock().unwrap())
    }
}

/// How the promise is checked after a failover.
pub struct Check<'a> {
    pub killed: Instant,
    /// Until when no primary surely took writes.
    pub writable_again: Instant,
    pub new_primary: &'a str,
    pub destination: &'a Destination,
    /// The destination's delay: forwards that arrived less than this
    /// before the kill were answered after it, so their attempts are
    /// recorded on the new primary (at least one must be).
    pub answer_after: Duration,
    /// How long after everything arrived to look again for a second
    /// forward: past every lease, when a wrongful takeover would show.
    pub settle: Duration,
}

/// The promise after a failover: only 200 or 503 (always with Retry-After)
/// was answered; nothing between a second after the kill and
/// `writable_again` was acknowledged (no primary could have stored it);
/// every acknowledged key is in `new_primary` and is forwarded, none twice,
/// and no lease was taken over from a holder that forwarded its event. Returns how many keys were
/// acknowledged.
pub async fn check_promise(answers: &Answers, check: Check<'_>) -> usize {
    let Check {
        killed,
        writable_again,
        new_primary,
        destination,
        answer_after,
        settle,
    } = check;
    let statuses: BTreeSet<u16> = answers.by_key.values().flatten().copied().collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "only 200 or 503: {statuses:?}"
    );
    assert!(statuses.contains(&503), "the outage was answered 503");
    // Answers already on their way at the kill are left a second to land.
    let outage = answers
        .log
        .iter()
        .filter(|(t, _)| *t > killed + Duration::from_secs(1) && *t < writable_again)
        .map(|(_, s)| *s);
    assert!(
        outage.clone().count() > 0,
        "deliveries were tried during the outage"
    );
    assert!(
        outage.into_iter().all(|s| s == 503),
        "no 2xx while no primary is writable"
    );
    assert_eq!(answers.bare_503, 0, "every 503 carries Retry-After");
    let acknowledged: Vec<String> = answers
        .by_key
        .iter()
        .filter(|(_, s)| s.contains(&200))
        .map(|(k, _)| k.clone())
        .collect();

    let new_primary = sqlx::PgPool::connect(new_primary).await.unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE idem_key = ANY($1)")
        .bind(&acknowledged)
        .fetch_one(&new_primary)
        .await
        .unwrap();
    assert_eq!(
        stored as usize,
        acknowledged.len(),
        "an acknowledged delivery was lost"
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let forwarded: BTreeSet<String> = destination.keys().into_iter().collect();
        let missing = acknowledged
            .iter()
            .filter(|k| !forwarded.contains(&format!("gh:{k}")))
            .count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} acknowledged events never forwarded"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if !answer_after.is_zero() {
        let in_flight = destination
            .received
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.at < killed && c.at + answer_after > killed + Duration::from_millis(50))
            .count();
        assert!(in_flight > 0, "no attempt was in flight at the kill");
    }
    tokio::time::sleep(settle).await;
    let keys = destination.keys();
    let distinct: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len(), "an event was forwarded twice");
    // A lease whose statement committed as the primary died, its answer
    // lost (a claim handing events over, a worker's lease), has no holder:
    // it is rightly taken over once it expires, and its taker forwards it
    // first. A live holder's lease taken over would have been forwarded
    // before its takeover.
    let taken_over: Vec<(String, f64)> = sqlx::query_as(
        "SELECT e.idem_key, extract(epoch FROM a.finished_at)::float8 FROM attempts a
         JOIN events e ON e.id = a.event_id WHERE a.error LIKE '%taken over'",
    )
    .fetch_all(&new_primary)
    .await
    .unwrap();
    let (now, wall) = (Instant::now(), std::time::SystemTime::now());
    let wall = wall
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let received = destination.received.lock().unwrap().clone();
    for (key, taken_at) in &taken_over {
        let taken_at = now - Duration::from_secs_f64((wall - taken_at).max(0.0));
        let key = format!("gh:{key}");
        let forwarded_before = received
            .iter()
            .filter(|c| c.headers["idempotency-key"] == key.as_str())
            .any(|c| c.at + Duration::from_secs(1) < taken_at);
        assert!(
            !forwarded_before,
            "a lease was taken over from a live holder: {key} had been forwarded before"
        );
    }
    if !taken_over.is_empty() {
        println!(
            "{} leases without a holder (their statement's answer lost at the kill) were taken over",
            taken_over.len()
        );
    }
    // Forwarded, each is recorded a moment later.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let unsettled: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM event_summaries WHERE idem_key = ANY($1) AND state <> 'completed'",
        )
        .bind(&acknowledged)
        .fetch_one(&new_primary)
        .await
        .unwrap();
        if unsettled == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{unsettled} acknowledged events did not end completed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    new_primary.close().await;
    acknowledged.len()
}

/// How a failover test goes.
#[derive(Default)]
struct Scenario {
    /// How long no primary is writable.
    outage: Duration,
    /// More of the source's config.
    source_extra: &'static str,
    /// The destination answers each forward after this.
    answer_after: Duration,
    /// The killed primary is started again, writable on its old timeline,
    /// and every connection to the new one is cut, so the hosts are
    /// searched again with both writable (split brain); it comes first in
    /// the URL.
    old_primary_returns: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_loses_no_acknowledged_delivery_and_forwards_each_once() {
    failover(Scenario {
        outage: Duration::from_secs(3),
        ..Default::default()
    })
    .await;
}

/// An old primary back writable on its old timeline, listed first, while
/// the new primary's connections are cut: nothing is written to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_primary_back_writable_is_never_written_to() {
    failover(Scenario {
        outage: Duration::from_secs(3),
        old_primary_returns: true,
        ..Default::default()
    })
    .await;
}

/// The primary gone longer than a lease (attempt timeout 1 s plus the 25 s
/// margin), with attempts in flight at the kill (the destination answers in
/// 300 ms): their holders record them once the new primary is up, and no
/// other worker takes them over and forwards them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_gone_longer_than_a_lease_forwards_nothing_twice() {
    failover(Scenario {
        outage: Duration::from_secs(30),
        source_extra: "attempt_timeout_secs = 1\n",
        answer_after: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
}

/// Kills the primary mid-stream, promotes the standby `outage` later, and
/// checks the promise.
async fn failover(scenario: Scenario) {
    let Scenario {
        outage,
        source_extra,
        answer_after,
        old_primary_returns,
    } = scenario;
    let root = cluster_root("replaysafe-failover");
    let (primary, standby) = primary_and_standby(root.path(), true);
    struct Stop<'a>(&'a Cluster, &'a Cluster);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.stop();
            self.1.stop();
        }
    }
    let _stop = Stop(&primary, &standby);
    assert!(in_recovery(&standby.url()).await, "the standby is one");
    // Synchronous: a commit is on both before the primary answers it.
    // (A standby catching up is listed as async until it streams.)
    let replication = sqlx::PgPool::connect(&primary.url()).await.unwrap();
    let mut states: Vec<String> = Vec::new();
    for _ in 0..300 {
        states = sqlx::query_scalar("SELECT state || ' ' || sync_state FROM pg_stat_replication")
            .fetch_all(&replication)
            .await
            .unwrap();
        if states == ["streaming sync"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(states, ["streaming sync"], "one synchronous standby");
    replication.close().await;

    let destination = Destination::start(vec![
        crate::helpers::Scripted {
            status: 200,
            headers: vec![],
            delay: answer_after,
        };
        100_000
    ])
    .await;
    let config = format!(
        "[[source]]\nslug = \"gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\ndestination = \"{}\"\n{source_extra}",
        destination.url
    );
    // The standby first: the primary is found, not assumed.
    // The standby first: the primary is found, not assumed. With the old
    // primary coming back, it first: the timeline, not the order, decides.
    let (first, second) = if old_primary_returns {
        (primary.port, standby.port)
    } else {
        (standby.port, primary.port)
    };
    let url = format!(
        "postgres://postgres@127.0.0.1:{first},127.0.0.1:{second}/postgres?target_session_attrs=read-write"
    );
    let server = ServerProcess::start(&config, &url, &[]).await;

    let stream = Stream::start(std::slice::from_ref(&server.base));

    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_kill = stream.answers.lock().unwrap().keys();
    assert!(
        before_kill > 10,
        "deliveries flow before the kill: {before_kill}"
    );
    primary.kill();
    let killed = Instant::now();
    // No primary for a while: answers are 503, never 2xx.
    tokio::time::sleep(outage).await;
    // The outage ends when the promotion begins.
    let promoted = Instant::now();
    let data = standby.data.clone();
    tokio::task::spawn_blocking(move || {
        run({
            let mut c = as_postgres(&pg_bin().join("pg_ctl"));
            c.arg("-D").arg(&data).args(["-w", "promote"]);
            c
        })
    })
    .await
    .unwrap();
    let back = loop {
        if let Some(at) = stream.answers.lock().unwrap().first_2xx_after(promoted) {
            break at;
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(30),
            "service did not return within 30 s of the promotion"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut stale_events = None;
    if old_primary_returns {
        primary.start("");
        let old = sqlx::PgPool::connect(&primary.url()).await.unwrap();
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
            .fetch_one(&old)
            .await
            .unwrap();
        stale_events = Some((old, count));
        let new = sqlx::PgPool::connect(&standby.url()).await.unwrap();
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        .execute(&new)
        .await
        .unwrap();
        new.close().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answers = stream.stop().await;
    let long = outage > Duration::from_secs(25);
    let acknowledged = check_promise(
        &answers,
        Check {
            killed,
            writable_again: promoted,
            new_primary: &standby.url(),
            destination: &destination,
            answer_after,
            // Past the lease (1 s timeout plus the 25 s margin) of any
            // attempt recorded late: a wrongful takeover would show.
            settle: if long {
                Duration::from_secs(30)
            } else {
                Duration::ZERO
            },
        },
    )
    .await;
    if let Some((old, before)) = stale_events {
        let after: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
            .fetch_one(&old)
            .await
            .unwrap();
        assert_eq!(
            after, before,
            "the old primary, back writable, was written to"
        );
        old.close().await;
    }
    println!(
        "failover: {} keys acknowledged ({before_kill} before the kill), {} forwarded; 2xx again {:?} after the kill, {:?} after the promotion",
        acknowledged,
        destination.keys().len(),
        back - killed,
        back - promoted,
    );
}
