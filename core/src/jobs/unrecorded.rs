//! Writes the counts of rejections not recorded one by one (over their
//! address's rate, `receiver::rejections`) every few seconds: one statement
//! for all of them, whatever the flood.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::receiver::rejections::Rejections;

pub const INTERVAL: Duration = Duration::from_secs(5);

/// Adds the counts taken since the last write; on failure they are kept for the next.
pub async fn flush(pool: &PgPool, rejections: &Rejections) -> Result<(), sqlx::Error> {
    let rows = rejections.take_unrecorded();
    if rows.is_empty() {
        return Ok(());
    }
    let minutes: Vec<i64> = rows.iter().map(|r| r.minute).collect();
    let sources: Vec<&str> = rows.iter().map(|r| r.source.as_str()).collect();
    let addresses: Vec<&str> = rows.iter().map(|r| r.remote_addr.as_str()).collect();
    let counts: Vec<i64> = rows.iter().map(|r| r.count).collect();
    let written = sqlx::query!(
        "INSERT INTO unrecorded_rejections (minute, source, remote_addr, count)
         SELECT to_timestamp(u.minute * 60), u.source, u.remote_addr, u.count
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[])
              AS u(minute, source, remote_addr, count)
         ON CONFLICT (minute, source, remote_addr)
         DO UPDATE SET count = unrecorded_rejections.count + excluded.count",
        &minutes,
        &sources as _,
        &addresses as _,
        &counts
    )
    .execute(pool)
    .await;
    if let Err(e) = written {
        rejections.restore(rows);
        return Err(e);
    }
    Ok(())
}

/// Flushes every `INTERVAL`, and once more at shutdown.
pub async fn run(pool: PgPool, rejections: Arc<Rejections>, shutdown: CancellationToken) {
    loop {
        let stopping = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(INTERVAL) => false,
        };
        if let Err(e) = flush(&pool, &rejections).await {
            tracing::warn!(error = %e, "writing the counts of unrecorded rejections failed; will retry");
        }
        if stopping {
            return;
        }
    }
}
