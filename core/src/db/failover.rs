//! libpq's multi-host URLs (`postgres://h1:p1,h2:p2/db?target_session_attrs=read-write`,
//! as pg_auto_failover hands them out), which sqlx refuses: the pool
//! connects to whichever host is the writable primary, and a monitor that
//! asks it every second points the pool at the new primary after a
//! failover; connections opened before the move are dropped as they come
//! back, and a new one that lands on a standby is refused. The receiver's
//! committers reconnect with the pool's options (`receiver::batch`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

use super::{DbError, ACQUIRE_TIMEOUT};

/// How often the monitor asks the primary whether it still is one.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// A host that takes longer to answer is taken for gone.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One URL per host when `url` names several (or asks for
/// `target_session_attrs`), else None: an ordinary URL, for sqlx as it is.
/// Each keeps the user, password, database and parameters.
pub fn split_hosts(url: &str) -> Result<Option<Vec<String>>, String> {
    let bad = || "not a postgres:// URL".to_owned();
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    if scheme != "postgres" && scheme != "postgresql" {
        return Err(bad());
    }
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts),
        None => (None, authority),
    };
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let mut asks_read_write = false;
    let mut kept = Vec::new();
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("target_session_attrs", "read-write" | "primary")) => asks_read_write = true,
            Some(("target_session_attrs", "any")) => {}
            // They would override every host of the list, or list hosts
            // another way: one way to name the hosts, in the authority.
            Some(("host" | "hostaddr" | "port", _)) => {
                return Err(
                    "name the hosts in the URL's authority (postgres://h1:p1,h2:p2/db), not in host=, hostaddr= or port="
                        .into(),
                )
            }
            Some(("target_session_attrs", other)) => {
                return Err(format!(
                    "target_session_attrs={other} is not supported (read-write or any)"
                ))
            }
            _ => kept.push(pair),
        }
    }
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.len() < 2 && !asks_read_write {
        return Ok(None);
    }
    let mut urls = Vec::new();
    for host in hosts {
        if host.is_empty() {
            return Err("an empty host in the host list".into());
        }
        // host, host:port, [v6], [v6]:port; libpq's default port otherwise.
        let has_port = match host.rfind(']') {
            Some(close) => host[close..].contains(':'),
            None => host.contains(':'),
        };
        let host = if has_port {
            host.to_owned()
        } else {
            format!("{host}:5432")
        };
        let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let query = if kept.is_empty() {
            String::new()
        } else {
            format!("?{}", kept.join("&"))
        };
        urls.push(format!("{scheme}://{user}{host}{path}{query}"));
    }
    Ok(Some(urls))
}

/// What the pool and its monitor share.
struct Shared {
    /// When the pool last moved, in ms after `epoch`.
    moved: AtomicU64,
    epoch: Instant,
    /// The highest timeline a primary was seen on: a host on a lower one
    /// is an old primary that came back writable (split brain), never
    /// written to.
    timeline: AtomicU32,
}

/// A pool over the writable one of `hosts`, followed across failovers.
/// Waits at most `PROBE_TIMEOUT` to find the primary before returning;
/// when none answers, the pool starts on the first host and the monitor
/// keeps looking.
pub async fn pool(hosts: Vec<PgConnectOptions>, max_connections: u32) -> Result<PgPool, DbError> {
    if hosts.is_empty() {
        return Err(DbError::BadUrl("no host".into()));
    }
    let shared = Arc::new(Shared {
        moved: AtomicU64::new(0),
        epoch: Instant::now(),
        timeline: AtomicU32::new(0),
    });
    let found = search(&hosts, &shared, None).await;
    let target = found.as_ref().map_or(0, |(i, _)| *i);
    let (on_connect, on_acquire) = (shared.clone(), shared.clone());
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // A standby, or an old primary on an older timeline, accepts
        // connections too: never write through one.
        .after_connect(move |conn, _| {
            let shared = on_connect.clone();
            Box::pin(async move {
                match standing(conn).await? {
                    Standing::Primary { timeline }
                        if timeline >= shared.timeline.load(Ordering::SeqCst) =>
                    {
                        Ok(())
                    }
                    // sqlx takes only its own error from this hook; Protocol is
                    // how it reports a server it cannot use (a transient kind,
                    // so the pool tries the next connection).
                    Standing::Primary { .. } => Err(sqlx::Error::Protocol(
                        "connected to an old primary on an older timeline".into(),
                    )),
                    Standing::ReadOnly => Err(sqlx::Error::Protocol(
                        "connected to a standby or a read-only server, not the writable primary"
                            .into(),
                    )),
                }
            })
        })
        // Opened before the move (or while it was being made): to the old
        // primary, which is gone, a standby, or fenced off now.
        .before_acquire(move |_, meta| {
            let since_move = on_acquire
                .epoch
                .elapsed()
                .saturating_sub(Duration::from_millis(
                    on_acquire.moved.load(Ordering::SeqCst),
                ));
            Box::pin(async move { Ok(meta.age < since_move) })
        })
        .connect_lazy_with(hosts[target].clone());
    if let Some((i, _)) = &found {
        tracing::info!(primary = %describe(&hosts[*i]), "database primary found");
    }
    tokio::spawn(monitor(
        pool.clone(),
        hosts,
        shared,
        target,
        found.map(|(_, c)| c),
    ));
    Ok(pool)
}

enum Standing {
    /// A standby, or read-only (`transaction_read_only`, as libpq's
    /// `target_session_attrs=read-write` asks): pg_auto_failover keeps a
    /// promoted standby read-only until the old primary is surely fenced.
    ReadOnly,
    /// Writable, on this timeline.
    Primary { timeline: u32 },
}

/// Whether the server behind `conn` takes writes, and on which timeline
/// (the first eight hex digits of its current WAL file).
async fn standing(conn: &mut PgConnection) -> Result<Standing, sqlx::Error> {
    let wal: Option<String> = sqlx::query_scalar(
        "SELECT CASE WHEN pg_is_in_recovery() OR current_setting('transaction_read_only')::boolean
                     THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END",
    )
    .fetch_one(conn)
    .await?;
    Ok(match wal {
        None => Standing::ReadOnly,
        Some(name) => Standing::Primary {
            timeline: name
                .get(..8)
                .and_then(|t| u32::from_str_radix(t, 16).ok())
                .unwrap_or(0),
        },
    })
}

/// A connection to `host` and its timeline, if it is a primary now.
async fn primary(host: &PgConnectOptions) -> Option<(u32, PgConnection)> {
    let probe = async {
        let mut conn = PgConnection::connect_with(host).await?;
        match standing(&mut conn).await? {
            Standing::Primary { timeline } => Ok::<_, sqlx::Error>(Some((timeline, conn))),
            Standing::ReadOnly => {
                let _ = conn.close().await;
                Ok(None)
            }
        }
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}

/// The primary among `hosts`, all asked at once: the one on the highest
/// timeline (never one below a timeline seen before), `prefer` on a tie.
async fn search(
    hosts: &[PgConnectOptions],
    shared: &Shared,
    prefer: Option<usize>,
) -> Option<(usize, PgConnection)> {
    let answers = futures_util::future::join_all(hosts.iter().map(primary)).await;
    let fence = shared.timeline.load(Ordering::SeqCst);
    let best = answers
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.as_ref().map(|(timeline, _)| (i, *timeline)))
        .filter(|(_, timeline)| *timeline >= fence)
        .max_by_key(|(i, timeline)| (*timeline, Some(*i) == prefer))?;
    shared.timeline.fetch_max(best.1, Ordering::SeqCst);
    let (_, conn) = answers.into_iter().nth(best.0).flatten()?;
    Some((best.0, conn))
}

fn describe(host: &PgConnectOptions) -> String {
    format!("{}:{}", host.get_host(), host.get_port())
}

/// Asks the primary every `CHECK_EVERY` whether it still is one; when it
/// is gone, a standby or fenced off, finds the host that is and moves the
/// pool there (`target`: where the pool points).
async fn monitor(
    pool: PgPool,
    hosts: Vec<PgConnectOptions>,
    shared: Arc<Shared>,
    mut target: usize,
    mut probe: Option<PgConnection>,
) {
    let mut said_none = false;
    while !pool.is_closed() {
        tokio::time::sleep(CHECK_EVERY).await;
        let still = match probe.as_mut() {
            Some(conn) => matches!(
                tokio::time::timeout(PROBE_TIMEOUT, standing(conn)).await,
                Ok(Ok(Standing::Primary { timeline }))
                    if timeline >= shared.timeline.load(Ordering::SeqCst)
            ),
            None => false,
        };
        if still {
            continue;
        }
        probe = None;
        match search(&hosts, &shared, Some(target)).await {
            Some((i, conn)) => {
                probe = Some(conn);
                said_none = false;
                if i != target {
                    target = i;
                    pool.set_connect_options(hosts[i].clone());
                    shared.moved.store(
                        shared.epoch.elapsed().as_millis() as u64 + 1,
                        Ordering::SeqCst,
                    );
                    tracing::warn!(primary = %describe(&hosts[i]), "the database primary moved; connections follow it");
                }
            }
            None if !said_none => {
                said_none = true;
                tracing::warn!(
                    hosts = hosts.len(),
                    "no writable primary among the database hosts; answering 503 until one is back"
                );
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_list_becomes_one_url_a_host() {
        assert_eq!(
            split_hosts(
                "postgres://u:p@h1:5433,h2:5434/db?target_session_attrs=read-write&sslmode=disable"
            )
            .unwrap(),
            Some(vec![
                "postgres://u:p@h1:5433/db?sslmode=disable".to_owned(),
                "postgres://u:p@h2:5434/db?sslmode=disable".to_owned(),
            ])
        );
        assert_eq!(
            split_hosts("postgresql://[::1]:5433,[::2]/db").unwrap(),
            Some(vec![
                "postgresql://[::1]:5433/db".to_owned(),
                "postgresql://[::2]:5432/db".to_owned(),
            ])
        );
        // One host asking for the primary is followed too.
        assert_eq!(
            split_hosts("postgres://h1/db?target_session_attrs=read-write").unwrap(),
            Some(vec!["postgres://h1:5432/db".to_owned()])
        );
    }

    #[test]
    fn an_ordinary_url_is_left_to_sqlx_and_mistakes_are_named() {
        assert_eq!(split_hosts("postgres://u:p@h:5432/db").unwrap(), None);
        assert_eq!(
            split_hosts("postgres://h/db?target_session_attrs=any").unwrap(),
            None
        );
        assert!(split_hosts("mysql://h1,h2/db").is_err());
        assert!(split_hosts("postgres://h1,,h2/db").is_err());
        assert!(
            split_hosts("postgres://h1,h2/db?target_session_attrs=standby")
                .unwrap_err()
                .contains("standby")
        );
        assert!(split_hosts("postgres://h1,h2/db?host=elsewhere").is_err());
        assert!(split_hosts("postgres:///db?host=h1,h2&port=1,2").is_err());
    }
}
