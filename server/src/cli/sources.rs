//! `replaysafe sources ...`: `list`, `pause` and `resume` on the database
//! (local) or over the API (remote), `show` and `breaker` over the API only.

use replaysafe_core::config::Config;
use replaysafe_core::db::audit::{cli_actor, Who};

use super::place::{Place, Runs};
use super::remote::{self, RemoteError, SourcesAction, Target};
use super::{open_existing, CliError};

pub async fn run(
    config: impl FnOnce() -> Result<Config, CliError>,
    target: Target,
    place: Place,
    action: SourcesAction,
) -> Result<(), CliError> {
    let both_ways = matches!(
        action,
        SourcesAction::List | SourcesAction::Pause { .. } | SourcesAction::Resume { .. }
    );
    let runs = if both_ways {
        place.resolve(&target)
    } else if place.local {
        return Err(RemoteError::BadArgument(
            "this runs over the API only (the running servers hold it): drop --local and set REPLAYSAFE_URL"
                .into(),
        )
        .into());
    } else {
        Runs::Remote
    };
    if runs == Runs::Remote {
        return Ok(remote::run(target, remote::Command::Sources(action)).await?);
    }
    let config = config()?;
    let (_database, pool) = open_existing(&config).await?;
    let result = local(&pool, &config, action, target.json).await;
    pool.close().await;
    result
}

async fn local(
    pool: &sqlx::PgPool,
    config: &Config,
    action: SourcesAction,
    as_json: bool,
) -> Result<(), CliError> {
    let slug = match action {
        SourcesAction::Pause { slug } => Some((slug, true)),
        SourcesAction::Resume { slug } => Some((slug, false)),
        _ => None,
    };
    let shown = match &slug {
        Some((slug, paused)) => {
            set_paused(pool, slug, *paused).await?;
            Some(slug.as_str())
        }
        None => None,
    };
    let rows = replaysafe_core::ops::sources_on_database(pool, &config.public_url, shown).await?;
    remote::print_sources(rows, as_json);
    Ok(())
}

/// An operator's pause or resume, stored in the database where it wins over
/// the config file, audit-logged as this command-line user.
pub async fn set_paused(pool: &sqlx::PgPool, slug: &str, paused: bool) -> Result<(), CliError> {
    let actor = cli_actor();
    replaysafe_core::db::sources::set_paused(pool, slug, paused, Who::named(&actor)).await?;
    Ok(())
}
