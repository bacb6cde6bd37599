//! Destinations' circuit breakers, shared by every process on the
//! destination's gate row (`destination_gates`). Every transition is one
//! statement here, guarded by the state it leaves:
//!
//! ```text
//!   closed ──failures in a row, or a failure ratio──▶ open
//!   open ──cool-down over: one process takes the probe──▶ half_open
//!   half_open ──the probe succeeded (or there was nothing to send)──▶ closed
//!   half_open ──the probe failed──▶ open (the cool-down doubles)
//!   any ──an operator──▶ open (until an operator) / closed
//! ```
//!
//! While a breaker is not closed its destination's dispatches are not
//! leased: they wait, counting no attempt, and are never dead-lettered by
//! the breaker.

use replaysafe_types::states::Breaker;
use sqlx::PgPool;

/// What one batch of finished attempts says about one destination.
#[derive(Clone, Debug)]
pub struct Outcomes<'a> {
    pub source: &'a str,
    pub destination: &'a str,
    pub failures: i32,
    pub successes: i32,
    /// Failures after the batch's last success (all of them when none).
    pub trailing_failures: i32,
    pub rule: &'a crate::config::destination::Breaker,
}

/// A breaker that moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub source: String,
    pub destination: String,
    pub from: Breaker,
    pub to: Breaker,
}

/// One destination's breaker as every process sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationBreaker {
    pub source: String,
    pub destination: String,
    pub state: Breaker,
    pub by_hand: bool,
}

/// The destinations' gate rows exist (a breaker starts closed).
pub async fn ensure(pool: &PgPool, pairs: &[(&str, &str)]) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO destination_gates (source, destination)
         SELECT * FROM unnest($1::text[], $2::text[])
         ON CONFLICT (source, destination) DO NOTHING",
        &pairs.iter().map(|p| p.0).collect::<Vec<_>>() as _,
        &pairs.iter().map(|p| p.1).collect::<Vec<_>>() as _,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Counts finished attempts against their destinations' breakers, and
/// opens or closes those their rules say. Returns the transitions.
pub async fn note(pool: &PgPool, seen: &[Outcomes<'_>]) -> Result<Vec<Transition>, sqlx::Error> {
    if seen.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query!(
        r#"WITH input AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::int[],
                                  $6::int[], $7::float8[], $8::float8[], $9::float8[])
                 AS i(source, destination, failures, successes, trailing_failures, threshold, ratio,
                      window_secs, cooldown_secs)
         ),
         next AS (
             SELECT g.source, g.destination, g.breaker AS was, i.cooldown_secs AS base,
                    f.failures, w.expired, c.attempts, c.failed,
                    CASE
                        WHEN g.opened_by_hand THEN g.breaker
                        WHEN g.breaker = 'half_open' AND i.failures > 0 THEN 'open'
                        WHEN g.breaker = 'half_open' AND i.successes > 0 THEN 'closed'
                        WHEN g.breaker = 'closed'
                             AND ((i.threshold > 0 AND f.failures >= i.threshold)
                                  OR (i.ratio IS NOT NULL AND c.attempts >= $10
                                      AND c.failed >= i.ratio * c.attempts)) THEN 'open'
                        ELSE g.breaker
                    END AS breaker
             FROM destination_gates g JOIN input i USING (source, destination)
             CROSS JOIN LATERAL (SELECT CASE WHEN i.successes > 0 THEN i.trailing_failures
                                             ELSE g.failures + i.failures END AS failures) f
             CROSS JOIN LATERAL (SELECT g.window_started_at
                                        < now() - make_interval(secs => i.window_secs) AS expired) w
             CROSS JOIN LATERAL (
                 SELECT CASE WHEN w.expired THEN 0 ELSE g.window_attempts END
                            + i.failures + i.successes AS attempts,
                        CASE WHEN w.expired THEN 0 ELSE g.window_failures END + i.failures AS failed
             ) c
             -- Locked in one order: concurrent notes never deadlock.
             ORDER BY g.source, g.destination
             FOR UPDATE OF g
         )
         UPDATE destination_gates g SET
             failures = n.failures,
             -- A breaker that moves starts its window over: the failures
             -- that opened it do not reopen it once it healed.
             window_started_at = CASE WHEN n.expired OR n.breaker <> n.was THEN now()
                                      ELSE g.window_started_at END,
             window_attempts = CASE WHEN n.breaker <> n.was THEN 0 ELSE n.attempts END,
             window_failures = CASE WHEN n.breaker <> n.was THEN 0 ELSE n.failed END,
             breaker = n.breaker,
             breaker_changed_at = CASE WHEN n.breaker <> n.was THEN now()
                                       ELSE g.breaker_changed_at END,
             -- A failed probe doubles the cool-down; a fresh opening starts it over.
             cooldown_secs = CASE WHEN n.breaker = 'open' AND n.was = 'half_open'
                                      THEN least($11::float8, g.cooldown_secs * 2)
                                  WHEN n.breaker = 'open' AND n.was = 'closed' THEN n.base
                                  ELSE g.cooldown_secs END,
             retry_at = CASE WHEN n.breaker = 'open' AND n.was = 'half_open'
                                 THEN now() + make_interval(secs => least($11::float8, g.cooldown_secs * 2))
                             WHEN n.breaker = 'open' AND n.was = 'closed'
                                 THEN now() + make_interval(secs => n.base)
                             WHEN n.breaker = 'closed' THEN NULL
                             ELSE g.retry_at END
         FROM next n
         WHERE g.source = n.source AND g.destination = n.destination
         RETURNING g.source, g.destination, n.was AS "was!: Breaker", g.breaker AS "breaker: Breaker""#,
        &seen.iter().map(|s| s.source).collect::<Vec<_>>() as _,
        &seen.iter().map(|s| s.destination).collect::<Vec<_>>() as _,
        &seen.iter().map(|s| s.failures).collect::<Vec<_>>(),
        &seen.iter().map(|s| s.successes).collect::<Vec<_>>(),
        &seen.iter().map(|s| s.trailing_failures).collect::<Vec<_>>(),
        &seen.iter().map(|s| s.rule.failures as i32).collect::<Vec<_>>(),
        &seen.iter().map(|s| s.rule.ratio).collect::<Vec<_>>() as _,
        &seen
            .iter()
            .map(|s| s.rule.window_secs as f64)
            .collect::<Vec<_>>(),
        &seen
            .iter()
            .map(|s| s.rule.cooldown_secs as f64)
            .collect::<Vec<_>>(),
        crate::config::destination::RATIO_MIN_ATTEMPTS,
        crate::config::destination::MAX_COOLDOWN_SECS as f64,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|r| r.was != r.breaker)
        .map(|r| Transition {
            source: r.source,
            destination: r.destination,
            from: r.was,
            to: r.breaker,
        })
        .collect())
}

/// Open breakers of `destinations` whose cool-down is over go half-open,
/// each for this process to probe with one attempt; so does one half-open
/// too long (its prober went away). Returns them.
pub async fn take_probes(
    pool: &PgPool,
    destinations: &[(&str, &str)],
    stale_after_secs: f64,
) -> Result<Vec<Transition>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"UPDATE destination_gates SET breaker = 'half_open', breaker_changed_at = now()
           WHERE NOT opened_by_hand
             AND (source, destination) IN (SELECT * FROM unnest($2::text[], $3::text[]))
             AND ((breaker = 'open' AND retry_at <= now())
                  OR (breaker = 'half_open'
                      AND breaker_changed_at < now() - make_interval(secs => $1)))
           RETURNING source, destination"#,
        stale_after_secs,
        &destinations.iter().map(|p| p.0).collect::<Vec<_>>() as _,
        &destinations.iter().map(|p| p.1).collect::<Vec<_>>() as _,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Transition {
            source: r.source,
            destination: r.destination,
            from: Breaker::Open,
            to: Breaker::HalfOpen,
        })
        .collect())
}

/// A probe that found nothing to send: nothing says the destination is
/// still broken, so it closes (its failures in a row stay counted).
pub async fn close_unprobed(
    pool: &PgPool,
    source: &str,
    destination: &str,
) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE destination_gates SET breaker = 'closed', breaker_changed_at = now(), retry_at = NULL
         WHERE source = $1 AND destination = $2 AND breaker = 'half_open' AND NOT opened_by_hand",
        source,
        destination
    )
    .execute(pool)
    .await?
    .rows_affected()
        == 1)
}

/// An operator opens a breaker (it stays open until an operator closes
/// it) or closes one (its failures start over). Returns the state it left,
/// None when the destination has no gate row.
pub async fn set_by_hand(
    pool: &PgPool,
    source: &str,
    destination: &str,
    open: bool,
) -> Result<Option<Breaker>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"WITH before AS (
             SELECT breaker FROM destination_gates WHERE source = $1 AND destination = $2
             FOR UPDATE
         )
         UPDATE destination_gates g SET
             breaker = CASE WHEN $3 THEN 'open' ELSE 'closed' END,
             opened_by_hand = $3, breaker_changed_at = now(), retry_at = NULL,
             failures = CASE WHEN $3 THEN g.failures ELSE 0 END,
             window_attempts = 0, window_failures = 0, window_started_at = now()
         FROM before
         WHERE g.source = $1 AND g.destination = $2
         RETURNING before.breaker AS "was!: Breaker""#,
        source,
        destination,
        open
    )
    .fetch_optional(pool)
    .await
}

/// Every breaker that is not closed.
pub async fn not_closed(pool: &PgPool) -> Result<Vec<DestinationBreaker>, sqlx::Error> {
    sqlx::query_as!(
        DestinationBreaker,
        r#"SELECT source, destination, breaker AS "state: Breaker", opened_by_hand AS by_hand
           FROM destination_gates WHERE breaker <> 'closed'"#
    )
    .fetch_all(pool)
    .await
}
