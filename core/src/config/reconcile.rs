//! `[source.reconcile]` (spec section 10): where a source's provider is
//! asked what it sent, with which credential, how often and how far back.
//! Only a provider that brings a reconciler takes one
//! (`providers::Reconciler`); the others are refused with its reason.

use std::time::Duration;

use serde::Deserialize;

use super::alerts::{Invalid, SecretOf};
use super::{units, ConfigError};
use crate::providers::{Provider, Reconciler};
use crate::secret::Secret;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconcile {
    api_base: Option<String>,
    #[serde(default, deserialize_with = "units::minutes")]
    every_minutes: Option<u32>,
    #[serde(default, deserialize_with = "units::hours")]
    lookback_hours: Option<u32>,
    // Stripe
    api_key: Option<String>,
    types: Option<Vec<String>>,
    api_version: Option<String>,
    // GitHub
    token: Option<String>,
    repository: Option<String>,
    organization: Option<String>,
    hook_id: Option<u64>,
}

/// A source's reconciliation, checked.
#[derive(Clone, Debug)]
pub struct Reconcile {
    /// The provider's API (https, or http to this machine: tests' stand-ins).
    pub api_base: url::Url,
    /// Stripe's `api_key`, GitHub's `token`.
    pub credential: Secret,
    /// None: only on demand.
    pub every: Option<Duration>,
    /// How far back a run looks unless told `since`.
    pub lookback: Duration,
    pub list: EventList,
}

/// What is listed, and how.
#[derive(Clone, Debug)]
pub enum EventList {
    Stripe {
        /// Glob patterns of the event types the endpoint subscribes to
        /// (empty: all).
        types: Vec<String>,
        matcher: Option<globset::GlobSet>,
        /// Sent as `Stripe-Version`.
        api_version: Option<String>,
    },
    GitHub {
        hook: GitHubHook,
        hook_id: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GitHubHook {
    Repository { owner: String, name: String },
    Organization(String),
}

impl EventList {
    /// Whether the endpoint takes events of this type.
    pub fn wants_type(&self, event_type: &str) -> bool {
        match self {
            EventList::Stripe {
                matcher: Some(m), ..
            } => m.is_match(event_type),
            _ => true,
        }
    }
}

/// Stripe lists 30 days of events; GitHub redelivers 3 days of deliveries.
const STRIPE_MAX_HOURS: u32 = 30 * 24;
const GITHUB_MAX_HOURS: u32 = 72;
const DEFAULT_EVERY_MINUTES: u32 = 60;
const DEFAULT_LOOKBACK_HOURS: u32 = 72;

pub(super) fn build(
    raw: RawReconcile,
    provider: &Provider,
    dedup_ttl_days: u32,
    at: &dyn Fn(&str) -> String,
    invalid: Invalid,
    secret: SecretOf,
) -> Result<Reconcile, ConfigError> {
    let key = |k: &str| at(&format!("reconcile.{k}"));
    let refuse = |k: &str, given: bool, why: &str| {
        if given {
            Err(invalid(&key(k), why.to_owned()))
        } else {
            Ok(())
        }
    };
    let (default_base, max_hours) = match provider.reconciler {
        Reconciler::StripeEvents => ("https://api.stripe.com", STRIPE_MAX_HOURS),
        Reconciler::GitHubDeliveries => ("https://api.github.com", GITHUB_MAX_HOURS),
        Reconciler::None(why) => {
            return Err(invalid(
                &at("reconcile"),
                format!("{} sources cannot be reconciled: {why}", provider.name),
            ))
        }
    };
    let api_base = raw.api_base.as_deref().unwrap_or(default_base);
    let api_base = url::Url::parse(api_base)
        .ok()
        .filter(|u| {
            // A loopback address itself: a name is only as local as its
            // resolution.
            let loopback = u.host().is_some_and(|h| match h {
                url::Host::Domain(_) => false,
                url::Host::Ipv4(ip) => ip.is_loopback(),
                url::Host::Ipv6(ip) => ip.is_loopback(),
            });
            (u.scheme() == "https" || (u.scheme() == "http" && loopback))
                && u.username().is_empty()
                && u.password().is_none()
                && u.query().is_none()
                && u.fragment().is_none()
        })
        .ok_or_else(|| {
            invalid(
                &key("api_base"),
                format!("{api_base:?}: an https URL with no credentials or query (http only to a loopback address)"),
            )
        })?;
    // A base path is kept when the API's paths are joined to it.
    let mut api_base = api_base;
    if !api_base.path().ends_with('/') {
        api_base.set_path(&format!("{}/", api_base.path()));
    }
    let every = match raw.every_minutes.unwrap_or(DEFAULT_EVERY_MINUTES) {
        0 => None,
        m => Some(Duration::from_secs(u64::from(m) * 60)),
    };
    let hours = raw
        .lookback_hours
        .unwrap_or(DEFAULT_LOOKBACK_HOURS.min(max_hours));
    // A run further back than the dedup TTL could find a key retention has
    // forgotten and claim it anew: forwarded twice.
    let ttl_hours = dedup_ttl_days.saturating_mul(24).saturating_sub(24);
    if hours == 0 || hours > max_hours || hours > ttl_hours {
        return Err(invalid(
            &key("lookback_hours"),
            format!(
                "{hours}: from 1 to {} ({} keeps {max_hours} hours; the dedup TTL of {dedup_ttl_days} days less a day bounds it too)",
                max_hours.min(ttl_hours),
                provider.name
            ),
        ));
    }
    let lookback = Duration::from_secs(u64::from(hours) * 3600);
    let list = match provider.reconciler {
        Reconciler::StripeEvents => {
            for (k, given) in [
                ("token", raw.token.is_some()),
                ("repository", raw.repository.is_some()),
                ("organization", raw.organization.is_some()),
                ("hook_id", raw.hook_id.is_some()),
            ] {
                refuse(
                    k,
                    given,
                    "a GitHub setting: Stripe takes api_key, types and api_version",
                )?;
            }
            let types = raw.types.unwrap_or_default();
            let matcher = if types.is_empty() {
                None
            } else {
                let mut set = globset::GlobSetBuilder::new();
                for (j, t) in types.iter().enumerate() {
                    let glob = globset::GlobBuilder::new(t)
                        .literal_separator(false)
                        .build()
                        .map_err(|e| invalid(&key(&format!("types[{j}]")), e.to_string()))?;
                    set.add(glob);
                }
                Some(
                    set.build()
                        .map_err(|e| invalid(&key("types"), e.to_string()))?,
                )
            };
            EventList::Stripe {
                types,
                matcher,
                api_version: raw.api_version,
            }
        }
        _ => {
            for (k, given) in [
                ("api_key", raw.api_key.is_some()),
                ("types", raw.types.is_some()),
                ("api_version", raw.api_version.is_some()),
            ] {
                refuse(
                    k,
                    given,
                    "a Stripe setting: GitHub takes token, repository or organization, and hook_id",
                )?;
            }
            let hook = match (raw.repository, raw.organization) {
                (Some(r), None) => match r.split_once('/') {
                    Some((owner, name)) if github_name(owner) && github_name(name) => {
                        GitHubHook::Repository {
                            owner: owner.to_owned(),
                            name: name.to_owned(),
                        }
                    }
                    _ => {
                        return Err(invalid(
                            &key("repository"),
                            format!("{r:?}: write it as \"owner/name\""),
                        ))
                    }
                },
                (None, Some(o)) if github_name(&o) => GitHubHook::Organization(o),
                _ => return Err(invalid(
                    &key("repository"),
                    "name the hook's repository (\"owner/name\") or its organization, one of them"
                        .into(),
                )),
            };
            let hook_id = raw
                .hook_id
                .ok_or_else(|| invalid(&key("hook_id"), "the webhook's id is required".into()))?;
            EventList::GitHub { hook, hook_id }
        }
    };
    let (credential_key, credential) = match &list {
        EventList::Stripe { .. } => ("api_key", raw.api_key),
        EventList::GitHub { .. } => ("token", raw.token),
    };
    let credential = credential
        .ok_or_else(|| invalid(&key(credential_key), "required to ask the provider".into()))?;
    let credential = secret(&key(credential_key), &credential)?;
    Ok(Reconcile {
        api_base,
        credential,
        every,
        lookback,
        list,
    })
}

/// An account or repository name as GitHub allows them (letters, digits,
/// `-`, `_`, `.`): joined into the API's paths as it is.
fn github_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
