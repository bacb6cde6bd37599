//! libpq's multi-host URLs (`postgres://h1:p1,h2:p2/db?target_session_attrs=read-write`,
//! as pg_auto_failover hands them out), which sqlx refuses: the pool
//! connects to whichever host is the writable primary, and a monitor that
//! asks it every second points the pool at the new primary after a
//! failover; connections opened before the move are dropped as they come
//! back, and a new one that lands on a standby is refused. The receiver's
//! committers reconnect with the pool's options (`receiver::batch`).

use std::sync::atomic::{AtomicU64, Ordering};
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

/// A pool over the writable one of `hosts`, followed across failovers.
pub fn pool(hosts: Vec<PgConnectOptions>, max_connections: u32) -> Result<PgPool, DbError> {
    let first = hosts
        .first()
        .cloned()
        .ok_or_else(|| DbError::BadUrl("no host".into()))?;
    let epoch = Instant::now();
    // When the pool last moved, in ms after `epoch`.
    let moved = Arc::new(AtomicU64::new(0));
    let moved_at = moved.clone();
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // A standby accepts connections too: never write through one.
        .after_connect(|conn, _| {
            Box::pin(async move {
                if in_recovery(conn).await? {
                    return Err(sqlx::Error::Protocol(
                        "connected to a standby, not the writable primary".into(),
                    ));
                }
                Ok(())
            })
        })
        // Opened before the move: to the old primary, which is gone or a
        // standby now.
        .before_acquire(move |_, meta| {
            let since_move = epoch
                .elapsed()
                .saturating_sub(Duration::from_millis(moved_at.load(Ordering::SeqCst)));
            Box::pin(async move { Ok(meta.age < since_move) })
        })
        .connect_lazy_with(first);
    tokio::spawn(monitor(pool.clone(), hosts, moved, epoch));
    Ok(pool)
}

async fn in_recovery(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(conn)
        .await
}

/// A connection to `host` if it is the writable primary now.
async fn primary(host: &PgConnectOptions) -> Option<PgConnection> {
    let probe = async {
        let mut conn = PgConnection::connect_with(host).await?;
        let standby = in_recovery(&mut conn).await?;
        Ok::<_, sqlx::Error>((!standby).then_some(conn))
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}

fn describe(host: &PgConnectOptions) -> String {
    format!("{}:{}", host.get_host(), host.get_port())
}

/// Asks the primary every `CHECK_EVERY` whether it still is one; when it
/// is gone or a standby, finds the host that is and moves the pool there.
async fn monitor(
    pool: PgPool,
    hosts: Vec<PgConnectOptions>,
    moved: Arc<AtomicU64>,
    epoch: Instant,
) {
    let mut current: Option<(usize, PgConnection)> = None;
    let mut said_none = false;
    while !pool.is_closed() {
        let still = match current.as_mut() {
            Some((_, conn)) => matches!(
                tokio::time::timeout(PROBE_TIMEOUT, in_recovery(conn)).await,
                Ok(Ok(false))
            ),
            None => false,
        };
        if !still {
            let was = current.take().map(|(i, _)| i);
            for (i, host) in hosts.iter().enumerate() {
                if let Some(conn) = primary(host).await {
                    current = Some((i, conn));
                    break;
                }
            }
            match (&current, was) {
                (Some((i, _)), was) if was != Some(*i) => {
                    pool.set_connect_options(hosts[*i].clone());
                    moved.store(epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
                    said_none = false;
                    tracing::warn!(primary = %describe(&hosts[*i]), "database primary found; connections follow it");
                }
                (Some(_), _) => said_none = false,
                (None, _) if !said_none => {
                    said_none = true;
                    tracing::warn!(
                        hosts = hosts.len(),
                        "no writable primary among the database hosts; answering 503 until one is back"
                    );
                }
                (None, _) => {}
            }
        }
        tokio::time::sleep(CHECK_EVERY).await;
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
    }
}
