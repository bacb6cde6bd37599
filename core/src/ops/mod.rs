//! The operations the dashboard, `/api/v1` and the CLI share: a server
//! function, an API handler and a command call the same function here for
//! the same operation, handing it a `Cx`. Each checks the caller's role
//! first (`Cx::require`).

pub mod actions;
pub mod alerts;
pub mod capture;
pub mod deliveries;
pub mod events;
pub mod incidents;
pub mod mask;
pub mod overview;
pub mod reconcile;
pub mod redeliver;
pub mod stream;
pub mod tokens;
pub mod users;

pub use sqlx::PgPool;

use replaysafe_types::auth::{Caller, Role};
use replaysafe_types::time::Time;
use replaysafe_types::{DestinationSummary, SourceSummary};

pub use crate::error::OpError;
use crate::processing::Services;

/// What every operation is handed, whoever asks (a server function of
/// the dashboard, the API, the CLI through the API): the server's
/// services (the primary pool for actions and reads that must see them,
/// `reads` for the pages' and the API's read-only queries, the workers'
/// handles), the caller and where the call came from. Each operation
/// starts with `require`, so the role is checked in one place.
#[derive(Clone)]
pub struct Cx {
    pub services: Services,
    /// None: no one signed in.
    pub caller: Option<Caller>,
    pub remote_addr: Option<String>,
}

impl Cx {
    /// The caller if they hold `role`; else 401 or 403.
    pub fn require(&self, role: Role) -> Result<&Caller, OpError> {
        crate::accounts::authorize(self.caller.as_ref(), role)
    }

    /// Appends to the audit log as `caller`, from this call's address.
    pub async fn audit(
        &self,
        caller: &Caller,
        action: &str,
        target: Option<&str>,
        outcome: &str,
        detail: serde_json::Value,
    ) -> Result<(), OpError> {
        Ok(crate::accounts::record(
            &self.services.pool,
            crate::accounts::Entry {
                who: caller.who(),
                action,
                target,
                outcome,
                detail: Some(detail),
                remote_addr: self.remote_addr.as_deref(),
            },
        )
        .await?)
    }
}

/// Every configured source (and removed ones with history), no secrets.
pub async fn sources(cx: &Cx) -> Result<Vec<SourceSummary>, OpError> {
    cx.require(Role::Viewer)?;
    source_rows(
        &cx.services.reads.pool(),
        &cx.services.config.public_url,
        None,
    )
    .await
}

/// A destination's whole URL, credentials and all, as this process's
/// config names it (admin; audit-logged): everyone else sees
/// `config::destination::shown_url`.
pub async fn reveal_destination_url(
    cx: &Cx,
    slug: &str,
    destination: &str,
) -> Result<String, OpError> {
    let caller = cx.require(Role::Admin)?;
    let url = cx
        .services
        .config
        .source(slug)
        .and_then(|s| s.destinations.iter().find(|d| d.name == destination))
        .map(|d| d.url.clone())
        .ok_or_else(|| OpError::NotFound(format!("no destination {slug}/{destination}")))?;
    cx.audit(
        caller,
        "destination.reveal",
        Some(&format!("destination {slug}/{destination}")),
        "succeeded",
        serde_json::json!({}),
    )
    .await?;
    Ok(url)
}

/// One source, or 404.
pub async fn source(cx: &Cx, slug: &str) -> Result<SourceSummary, OpError> {
    cx.require(Role::Viewer)?;
    source_rows(
        &cx.services.pool,
        &cx.services.config.public_url,
        Some(slug),
    )
    .await?
    .pop()
    .ok_or_else(|| OpError::NotFound(format!("no source {slug:?}")))
}

/// Sources as `sources` lists them (all, or the one named), read from the
/// database by the command line run beside it: whoever holds the database
/// holds every role, so there is no caller to check.
pub async fn sources_on_database(
    pool: &PgPool,
    public_url: &str,
    slug: Option<&str>,
) -> Result<Vec<SourceSummary>, OpError> {
    source_rows(pool, public_url, slug).await
}

async fn source_rows(
    pool: &PgPool,
    public_url: &str,
    slug: Option<&str>,
) -> Result<Vec<SourceSummary>, OpError> {
    let rows = sqlx::query!(
        r#"SELECT slug, provider, mode, destination,
                  paused AS "paused!",
                  paused_override IS NOT NULL AS "paused_by_operator!",
                  in_config, attempt_timeout_secs,
                  paused_changed_at AS "paused_changed_at: Time",
                  destinations,
                  (SELECT coalesce(jsonb_object_agg(g.destination,
                                       jsonb_build_array(g.breaker, g.opened_by_hand)), '{}')
                   FROM destination_gates g WHERE g.source = sources.slug) AS "breakers!"
           FROM sources WHERE ($1::text IS NULL OR slug = $1)
           ORDER BY in_config DESC, slug"#,
        slug
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| SourceSummary {
            receive_url: crate::config::receive_url(public_url, &r.slug),
            setup: crate::providers::find(&r.provider)
                .map(|p| p.setup.to_owned())
                .unwrap_or_default(),
            slug: r.slug,
            provider: r.provider,
            mode: r.mode,
            destination: r.destination,
            paused: r.paused,
            paused_by_operator: r.paused_by_operator,
            in_config: r.in_config,
            attempt_timeout_secs: r.attempt_timeout_secs,
            paused_changed_at: r.paused_changed_at,
            destinations: {
                let mut listed: Vec<DestinationSummary> =
                    serde_json::from_value(r.destinations).unwrap_or_default();
                for d in &mut listed {
                    if let Some((state, by_hand)) = r.breakers.get(&d.name).and_then(|b| {
                        serde_json::from_value::<(replaysafe_types::states::Breaker, bool)>(
                            b.clone(),
                        )
                        .ok()
                    }) {
                        d.breaker = state;
                        d.breaker_by_hand = by_hand;
                    }
                }
                listed
            },
        })
        .collect())
}

/// Cuts rows fetched with one row beyond `size` (`LIMIT size + 1`) to a
/// page, and gives the next page's cursor: `cursor` of the last row kept,
/// when there is a next page.
pub fn page<T, C>(mut rows: Vec<T>, size: i64, cursor: impl Fn(&T) -> C) -> (Vec<T>, Option<C>) {
    let size = usize::try_from(size).unwrap_or(0);
    if rows.len() > size {
        rows.truncate(size);
        let next = rows.last().map(cursor);
        (rows, next)
    } else {
        (rows, None)
    }
}

/// A filter's time: RFC 3339 with its offset (the pages send the wall time
/// a person typed, read in the zone they typed it in), or a wall time
/// without one (`2026-11-30T14:05`, seconds optional) read as UTC; RFC 3339
/// out.
pub fn utc_time(field: &str, value: &str) -> Result<String, String> {
    replaysafe_types::time::Zone::UTC
        .read(field, value)
        .map(|t| replaysafe_types::time::rfc3339(&t))
}
