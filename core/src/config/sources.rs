//! The `[[source]]` tables: each slug, provider, secrets and destinations
//! checked once, and its provider's scheme built.

use std::sync::Arc;

use super::alerts::{Invalid, RawRules, SecretOf};
use super::{
    check_http_url, destination, reconcile, valid_slug, ConfigError, Mode, RawSource, SourceConfig,
};
use crate::providers::template::KeyRule;
use crate::providers::{self, declarative, Settings};

/// The sources, and each one's own alert rules (for `alerts::build`).
#[allow(clippy::type_complexity)]
pub(super) fn build(
    raw: Vec<RawSource>,
    dedup_ttl_days: u32,
    invalid: Invalid,
    secret: SecretOf,
) -> Result<(Vec<SourceConfig>, Vec<(String, Option<RawRules>)>), ConfigError> {
    let mut sources: Vec<SourceConfig> = Vec::with_capacity(raw.len());
    let mut source_rules = Vec::with_capacity(raw.len());
    for (i, mut s) in raw.into_iter().enumerate() {
        source_rules.push((s.slug.clone(), s.alerts.take()));
        let at = |field: &str| format!("source[{i}].{field}");
        if !valid_slug(&s.slug) {
            return Err(invalid(
                &at("slug"),
                format!(
                    "{:?}: use 1-64 lowercase letters, digits, '-' or '_'",
                    s.slug
                ),
            ));
        }
        if sources.iter().any(|o| o.slug == s.slug) {
            return Err(invalid(
                &at("slug"),
                format!("{:?} is used by another source", s.slug),
            ));
        }
        let provider = providers::find(&s.provider).ok_or_else(|| {
            let known = providers::names();
            invalid(
                &at("provider"),
                format!("{:?} is not one of {}", s.provider, known.join(", ")),
            )
        })?;
        let secrets = s
            .secrets
            .iter()
            .enumerate()
            .map(|(j, v)| secret(&at(&format!("secrets[{j}]")), v))
            .collect::<Result<Vec<_>, _>>()?;
        let api_v3_key = s
            .api_v3_key
            .as_deref()
            .map(|v| secret(&at("api_v3_key"), v))
            .transpose()?;
        if let Some(u) = &s.public_url {
            check_http_url(u).map_err(|p| invalid(&at("public_url"), p))?;
        }
        let preset = declarative::presets::find(provider.name);
        let signature = match (s.signature.take(), provider.name, preset) {
            (Some(raw), "hmac", _) => Some(declarative::spec::parse(raw).map_err(|e| {
                invalid(&at(&format!("signature.{}", e.field)), e.problem)
            })?),
            (Some(_), name, _) => {
                return Err(invalid(
                    &at("signature"),
                    format!("provider {name} verifies its own way: [source.signature] is for provider = \"hmac\""),
                ))
            }
            (None, _, Some(preset)) => Some(preset.spec.clone()),
            (None, _, None) => None,
        };
        let settings = Settings {
            signature,
            secrets,
            public_key: s.public_key,
            platform_keys: s.platform_keys,
            api_v3_key,
            public_url: s.public_url,
            sync: s.mode == Mode::Sync,
        };
        let scheme = (provider.build)(&settings).map_err(|e| invalid(&at(&e.field), e.problem))?;
        let destinations = destination::build(
            destination::SourceDestinations {
                destinations: s.destination.take(),
                destination_secret: s.destination_secret.as_deref(),
                max_attempts: s.max_attempts,
                attempt_timeout_secs: s.attempt_timeout_secs,
                mode: s.mode,
            },
            &at,
            invalid,
            secret,
        )?;
        let reconcile = s
            .reconcile
            .take()
            .map(|r| reconcile::build(r, provider, dedup_ttl_days, &at, invalid, secret))
            .transpose()?
            .map(Arc::new);
        if s.key.is_none() && s.key_fallback.is_some() {
            return Err(invalid(
                &at("key_fallback"),
                "a fallback of the key template: give key too".into(),
            ));
        }
        let key = s
            .key
            .as_deref()
            .map(|k| KeyRule::parse(k, s.key_fallback.as_deref()))
            .transpose()
            .map_err(|(field, problem)| invalid(&at(field), problem))?
            .or_else(|| preset.map(|p| p.key.clone()))
            .map(Arc::new);
        if provider.name == "hmac"
            && key.is_none()
            && settings
                .signature
                .as_ref()
                .is_some_and(|sig| sig.id_header.is_none())
        {
            return Err(invalid(
                &at("key"),
                "a provider = \"hmac\" source needs key (a template) or signature.id_header".into(),
            ));
        }
        sources.push(SourceConfig {
            slug: s.slug,
            provider,
            scheme: Arc::from(scheme),
            mode: s.mode,
            destinations,
            tolerance_secs: s
                .tolerance_secs
                .or(preset.and_then(|p| p.tolerance_secs))
                .unwrap_or(300),
            paused: s.paused,
            replay_guard: s.replay_guard.unwrap_or(true),
            reconcile,
            key,
        });
    }

    Ok((sources, source_rules))
}
