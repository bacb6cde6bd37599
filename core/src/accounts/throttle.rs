//! The sign-in throttle's counts, in a table of its own
//! (`sign_in_attempts`): the audit log only ever gets rows appended.
//! Attempts are counted by the client address's bucket
//! (`config::address::bucket`); each is recorded before its password is
//! checked, so a parallel burst gets no more tries than a serial one.

use super::{Entry, Over, MAX_FAILURES_PER_ADDRESS, MAX_FAILURES_PER_USER, WINDOW_MINUTES};
use replaysafe_types::auth::Who;

pub(super) enum Attempt {
    Checking(i64),
    Refused(Over),
}

/// Under a lock per bucket, counts the failures (and attempts still being
/// checked) of this username from this bucket and of the bucket alone in
/// the window. Over a limit, counts the refusal into the bucket's refusal
/// row of the window and, at the window's first refusal, appends a
/// `rate_limited` audit row; says which limit. Else records the attempt.
pub(super) async fn begin(
    pool: &sqlx::PgPool,
    username: &str,
    address: &str,
    bucket: &str,
) -> Result<Attempt, sqlx::Error> {
    let username = username.to_lowercase();
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended('login:' || $1, 0))",
        bucket
    )
    .execute(&mut *tx)
    .await?;
    // The bucket's rows past the window count no more.
    sqlx::query!(
        "DELETE FROM sign_in_attempts
         WHERE bucket = $1 AND at <= now() - make_interval(mins => $2)",
        bucket,
        WINDOW_MINUTES
    )
    .execute(&mut *tx)
    .await?;
    let failures = sqlx::query!(
        r#"SELECT count(*) FILTER (WHERE username = $2 AND counts_for_user) AS "by_pair!",
                  count(*) AS "by_address!"
           FROM sign_in_attempts
           WHERE bucket = $1 AND state IN ('failed', 'checking')"#,
        bucket,
        username
    )
    .fetch_one(&mut *tx)
    .await?;
    let over = if failures.by_address >= MAX_FAILURES_PER_ADDRESS {
        Some(Over::Address)
    } else if failures.by_pair >= MAX_FAILURES_PER_USER {
        Some(Over::Pair)
    } else {
        None
    };
    if let Some(over) = over {
        // One row per bucket and window however long the flood.
        let counted = sqlx::query!(
            "UPDATE sign_in_attempts SET refused = refused + 1
             WHERE bucket = $1 AND state = 'refused'",
            bucket
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if counted == 0 {
            sqlx::query!(
                "INSERT INTO sign_in_attempts (bucket, username, state, refused)
                 VALUES ($1, $2, 'refused', 1)",
                bucket,
                username
            )
            .execute(&mut *tx)
            .await?;
            super::record(
                &mut *tx,
                Entry {
                    who: Who::named(&username),
                    action: "login",
                    target: Some(&format!("from:{bucket}")),
                    outcome: "rate_limited",
                    detail: Some(serde_json::json!({
                        "over": match over {
                            Over::Address => "address",
                            Over::Pair => "username",
                        },
                        "window_minutes": WINDOW_MINUTES,
                    })),
                    remote_addr: Some(address),
                },
            )
            .await?;
        }
        tx.commit().await?;
        return Ok(Attempt::Refused(over));
    }
    let id = sqlx::query_scalar!(
        "INSERT INTO sign_in_attempts (bucket, username, state)
         VALUES ($1, $2, 'checking') RETURNING id",
        bucket,
        username
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Attempt::Checking(id))
}

/// Ends an attempt: a failure stays counted for the window; a right
/// password, or one never checked (`forget`), counts toward nothing.
pub(super) async fn end(
    pool: &sqlx::PgPool,
    attempt_id: i64,
    failed: bool,
) -> Result<(), sqlx::Error> {
    if failed {
        sqlx::query!(
            "UPDATE sign_in_attempts SET state = 'failed' WHERE id = $1 AND state = 'checking'",
            attempt_id
        )
        .execute(pool)
        .await?;
    } else {
        sqlx::query!(
            "DELETE FROM sign_in_attempts WHERE id = $1 AND state = 'checking'",
            attempt_id
        )
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// Lifts sign-in lockouts (`replaysafe user unlock`): the username's
/// failures no longer count against it (from any address; they still count
/// against their addresses), the address's bucket starts afresh.
pub async fn unlock(
    pool: &sqlx::PgPool,
    username: Option<&str>,
    address: Option<&str>,
) -> Result<(), sqlx::Error> {
    if let Some(username) = username {
        sqlx::query!(
            "UPDATE sign_in_attempts SET counts_for_user = false
             WHERE username = $1 AND counts_for_user",
            username.to_lowercase()
        )
        .execute(pool)
        .await?;
    }
    if let Some(address) = address {
        let bucket = bucket_of(address);
        sqlx::query!("DELETE FROM sign_in_attempts WHERE bucket = $1", bucket)
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// Attempts past their window, of buckets not tried since (retention).
pub async fn prune(pool: &sqlx::PgPool) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM sign_in_attempts WHERE at <= now() - make_interval(mins => $1)",
        WINDOW_MINUTES
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// The bucket attempts from `address` are counted by; a name that is no
/// address stands for itself.
pub(super) fn bucket_of(address: &str) -> String {
    address
        .parse::<std::net::IpAddr>()
        .map(|a| crate::config::address::bucket(a).to_string())
        .unwrap_or_else(|_| address.to_owned())
}
