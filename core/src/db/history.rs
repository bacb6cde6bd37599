//! The partitioned history (migration 18): `deliveries` by receipt time and
//! `attempts` by start time, one partition per UTC day. Partitions are made
//! ahead here, and retention retires a day by detaching and dropping its
//! partition: the same cost at ten million rows as at ten thousand.
//!
//! A delivery partition that holds the payload of an event still waiting to
//! be forwarded is kept whole (never dropped under it) until that event is
//! settled: losing the payload would lose the event. Copying the payload
//! forward was the other way; it would give the event a receipt that never
//! happened.

use sqlx::{Connection, PgPool};

/// Partitions are made this many days ahead: claims never wait for one, and
/// a replaysafe stopped for less than this finds them all there.
pub const DAYS_AHEAD: i32 = 14;

/// Makes the partitions from today to `DAYS_AHEAD` days ahead that are
/// missing; returns how many it made.
pub async fn ensure(pool: &PgPool) -> Result<i32, sqlx::Error> {
    ensure_from(pool, 0).await
}

/// `ensure`, and from `days_back` days ago too (rows moved into the past, as
/// `replaysafe seed` does, need their days' partitions). Also notes the id
/// ranges of the delivery partitions whose day is over (migration 31), which
/// bound reads by delivery id.
pub async fn ensure_from(pool: &PgPool, days_back: i32) -> Result<i32, sqlx::Error> {
    let made = sqlx::query_scalar!(
        r#"SELECT history_partitions_ensure($1, $2) AS "made!""#,
        DAYS_AHEAD,
        days_back
    )
    .fetch_one(pool)
    .await?;
    sqlx::query_scalar!(r#"SELECT history_id_ranges_note() AS "noted!""#)
        .fetch_one(pool)
        .await?;
    Ok(made)
}

/// Receipt times: `None` is no bound on that side.
pub type Since = Option<chrono::DateTime<chrono::Utc>>;

/// A read by delivery id, bounded to the partitions the id can be in:
/// `read(lo, hi)` reads with `received_at >= coalesce($lo, '-infinity') AND
/// received_at < coalesce($hi, 'infinity')`, which PostgreSQL prunes by
/// before it opens a partition. The bounds come from the noted id ranges
/// (`delivery_received_bounds`, migration 31); only when nothing is found
/// within them is it read again unbounded: a claim that ran across
/// midnight, or an id that does not exist. Two statements, not one with the
/// bounds as a subquery: a subquery's values are not known when the
/// statement is planned, and planning every partition cost more than the
/// probes it saved.
pub async fn by_delivery_id<T, F, Fut>(
    pool: &PgPool,
    id: i64,
    read: F,
) -> Result<Option<T>, sqlx::Error>
where
    F: Fn(Since, Since) -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, sqlx::Error>>,
{
    let bounds = sqlx::query!(
        r#"SELECT lo AS "lo: chrono::DateTime<chrono::Utc>", hi AS "hi: chrono::DateTime<chrono::Utc>"
           FROM delivery_received_bounds($1)"#,
        id
    )
        .fetch_one(pool)
        .await?;
    if let Some(found) = read(bounds.lo, bounds.hi).await? {
        return Ok(Some(found));
    }
    if bounds.lo.is_none() && bounds.hi.is_none() {
        return Ok(None);
    }
    read(None, None).await
}

/// What retiring the expired partitions did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retired {
    /// Partitions dropped, by name.
    pub dropped: Vec<String>,
    /// Expired delivery partitions kept, with how many waiting events need
    /// a payload in each.
    pub kept: Vec<(String, i64)>,
}

/// Drops every partition whose whole range is older than `retention_days`
/// (and a day at least), except delivery partitions holding a payload an
/// event still waiting to be forwarded needs. One process at a time (an
/// advisory lock on `hashtext('replaysafe history retirement')`; another
/// process running it meanwhile skips it, and a force waits for it). Each partition is detached
/// `CONCURRENTLY`, which never blocks claims, then dropped.
pub async fn retire_expired(pool: &PgPool, retention_days: u32) -> Result<Retired, sqlx::Error> {
    let mut retired = Retired::default();
    // Its own connection: the advisory lock is the session's, and a
    // concurrent detach cannot run inside a transaction.
    let mut conn = pool.acquire().await?;
    let locked: bool = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_lock(hashtext('replaysafe history retirement')) AS "locked!""#
    )
    .fetch_one(&mut *conn)
    .await?;
    if !locked {
        return Ok(retired);
    }
    let result = retire_locked(&mut conn, retention_days, &mut retired).await;
    let unlocked = sqlx::query_scalar!(
        r#"SELECT pg_advisory_unlock(hashtext('replaysafe history retirement')) AS "unlocked!""#
    )
    .fetch_one(&mut *conn)
    .await;
    if !matches!(unlocked, Ok(true)) {
        // A connection that may still hold the lock is not given back.
        let _ = conn.detach().close().await;
    }
    result.map(|()| retired)
}

async fn retire_locked(
    conn: &mut sqlx::PgConnection,
    retention_days: u32,
    retired: &mut Retired,
) -> Result<(), sqlx::Error> {
    // Partitions and leftovers of a retirement cut short (detached but not
    // dropped, or detach pending), oldest first. A range ends at midnight
    // UTC of `ends`; the legacy partition's ends on the first daily day.
    let expired = sqlx::query!(
        r#"WITH tables AS (
               SELECT h.parent, c.oid, quote_ident(c.relname) AS ident, c.relispartition,
                      coalesce(i.inhdetachpending, false) AS detach_pending,
                      CASE WHEN c.relname = h.parent || '_legacy' THEN h.first_day
                           ELSE to_date(substring(c.relname FROM '_p([0-9]{8})$'), 'YYYYMMDD') + 1
                      END AS ends
               FROM history_partitions h
               JOIN pg_class c ON c.relkind = 'r'
                              AND c.relnamespace = current_schema()::regnamespace
                              AND (c.relname = h.parent || '_legacy'
                                   OR c.relname ~ ('^' || h.parent || '_p[0-9]{8}$'))
               LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
           )
           SELECT parent AS "parent!", ident AS "ident!", relispartition AS "attached!",
                  detach_pending AS "detach_pending!",
                  CASE WHEN ident = quote_ident(parent || '_legacy') THEN 'MINVALUE'
                       ELSE quote_literal((ends - 1)::timestamp AT TIME ZONE 'UTC') END AS "from!",
                  quote_literal(ends::timestamp AT TIME ZONE 'UTC') AS "to!"
           FROM tables
           -- Never the last day's: attempts are written with when they began.
           WHERE (ends::timestamp AT TIME ZONE 'UTC') <= now() - make_interval(days => greatest($1, 1))
           ORDER BY ends"#,
        retention_days as i32
    )
    .fetch_all(&mut *conn)
    .await?;
    for partition in expired {
        let (parent, ident) = (partition.parent.as_str(), partition.ident.as_str());
        let mut attached = partition.attached;
        if partition.detach_pending {
            // A detach cut short: its rows are out of every query's sight
            // already, and a table takes one pending detach at a time.
            run(
                conn,
                &format!("ALTER TABLE {parent} DETACH PARTITION {ident} FINALIZE"),
            )
            .await?;
            attached = false;
        }
        if parent == "deliveries" {
            // Its payloads are read by id (events.first_delivery_id). The
            // waiting events are found through the queue's partial indexes
            // (one state list each: a list spanning both would scan every
            // event, 0.5 s at 8 million), and each is looked up in the
            // partition by id (a join could scan the whole day): the cost
            // follows the waiting events, not the history.
            let held = format!(
                "SELECT count(*) FROM (
                     SELECT event_id FROM dispatches WHERE state IN ('queued', 'retrying')
                     UNION ALL
                     SELECT event_id FROM dispatches WHERE state = 'processing'
                 ) p JOIN events e ON e.id = p.event_id, LATERAL (SELECT 1 FROM {ident} d WHERE d.id = e.first_delivery_id LIMIT 1) d"
            );
            let held: i64 = sqlx::query_scalar(&held).fetch_one(&mut *conn).await?;
            if held > 0 {
                if !attached {
                    let bounds = format!("FROM ({}) TO ({})", partition.from, partition.to);
                    run(
                        conn,
                        &format!(
                            "ALTER TABLE {parent} ATTACH PARTITION {ident} FOR VALUES {bounds}"
                        ),
                    )
                    .await?;
                }
                retired.kept.push((ident.to_owned(), held));
                continue;
            }
        }
        if attached {
            run(
                conn,
                &format!("ALTER TABLE {parent} DETACH PARTITION {ident} CONCURRENTLY"),
            )
            .await?;
        }
        run(conn, &format!("DROP TABLE {ident}")).await?;
        retired.dropped.push(ident.to_owned());
    }
    Ok(())
}

/// Runs DDL that names no parameter as it is: by the simple protocol,
/// which a concurrent detach needs (it refuses a transaction block).
async fn run(conn: &mut sqlx::PgConnection, statement: &str) -> Result<(), sqlx::Error> {
    sqlx::Executor::execute(conn, statement).await.map(drop)
}
