//! The `sources` rows: the config's settings, synced at start, and the
//! runtime state operators change (pause and resume), which wins over the
//! config file.

use sqlx::PgPool;

use super::audit::{self, Entry, Who};
use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("no source {0:?} is configured")]
    Unknown(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Pauses or resumes a source; `who` is recorded in the audit log.
/// A paused source still receives, verifies and claims, and forwards nothing.
pub async fn set_paused(
    pool: &PgPool,
    slug: &str,
    paused: bool,
    who: Who<'_>,
) -> Result<(), SourceError> {
    let mut tx = pool.begin().await?;
    let updated = sqlx::query!(
        "UPDATE sources SET paused_override = $2, paused_changed_at = now(), paused_changed_by = $3
         WHERE slug = $1 AND in_config",
        slug,
        paused,
        who.user_id
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if updated == 0 {
        return Err(SourceError::Unknown(slug.to_owned()));
    }
    let action = if paused {
        "source.pause"
    } else {
        "source.resume"
    };
    audit::record(
        &mut *tx,
        Entry {
            who,
            action,
            target: Some(slug),
            outcome: "succeeded",
            detail: None,
            remote_addr: None,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Makes the `sources` table match the config: settings follow the file,
/// runtime state (an operator's pause) is kept, removed sources stay for their
/// history but are marked as no longer configured.
/// The sources paused now, by the config or by an operator over it.
pub async fn paused(pool: &PgPool) -> Result<std::collections::HashSet<String>, sqlx::Error> {
    Ok(
        sqlx::query_scalar!(r#"SELECT slug AS "slug!" FROM sources WHERE paused"#)
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect(),
    )
}

pub async fn sync(pool: &PgPool, config: &Config) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    for s in &config.sources {
        sqlx::query!(
            "INSERT INTO sources (slug, provider, mode, destination, attempt_timeout_secs,
                                  config_paused, in_config, synced_at, destinations)
             VALUES ($1, $2, $3, $4, $5, $6, true, now(), $7)
             ON CONFLICT (slug) DO UPDATE SET
                provider = excluded.provider, mode = excluded.mode,
                destination = excluded.destination, destinations = excluded.destinations,
                attempt_timeout_secs = excluded.attempt_timeout_secs,
                config_paused = excluded.config_paused,
                in_config = true, synced_at = now()",
            &s.slug,
            s.provider.name,
            s.mode.as_str(),
            s.destination()
                .map(|d| crate::config::destination::shown_url(&d.url)),
            i32::try_from(s.attempt_timeout().as_secs()).unwrap_or(i32::MAX),
            s.paused,
            serde_json::to_value(s.destinations.iter().map(summary).collect::<Vec<_>>())
                .unwrap_or_default()
        )
        .execute(&mut *tx)
        .await?;
    }
    let slugs: Vec<String> = config.sources.iter().map(|s| s.slug.clone()).collect();
    sqlx::query!(
        "UPDATE sources SET in_config = false WHERE in_config AND slug <> ALL($1)",
        &slugs
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// A destination as the Sources page shows it: never its secret.
fn summary(d: &crate::config::Destination) -> replaysafe_types::DestinationSummary {
    let filter = d.filter.as_ref().map(|f| {
        let mut words = Vec::new();
        if !f.patterns.is_empty() {
            words.push(format!("event types {}", f.patterns.join(", ")));
        }
        for (pointer, value) in &f.body {
            words.push(format!("{pointer} = {value}"));
        }
        format!("takes {}", words.join("; "))
    });
    let mut limits = Vec::new();
    if let Some(rate) = d.rate_per_sec {
        limits.push(format!("at most {rate} attempts per second"));
    }
    if let Some(n) = d.max_in_flight {
        limits.push(format!("at most {n} at once"));
    }
    if let crate::config::destination::Ordering::PerKey { key } = &d.ordering {
        limits.push(match key {
            Some(pointer) => format!("one at a time per {pointer}, in receipt order"),
            None => "one at a time, in receipt order".to_owned(),
        });
    }
    replaysafe_types::DestinationSummary {
        name: d.name.clone(),
        url: crate::config::destination::shown_url(&d.url),
        filter,
        limits: (!limits.is_empty()).then(|| limits.join(", ")),
        breaker: Default::default(),
        breaker_by_hand: false,
    }
}
