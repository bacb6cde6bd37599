//! A secret as the config names it: itself, `env:NAME` (an environment
//! variable) or `file:PATH` (relative to the config file: systemd's
//! LoadCredential=, a mounted secret).

use std::path::{Path, PathBuf};

use super::alerts::Invalid;
use super::{ConfigError, Secret};

/// The secret `value` at `key` stands for; refused empty or unset.
pub(super) fn resolve(
    path: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    invalid: Invalid,
    key: &str,
    value: &str,
) -> Result<Secret, ConfigError> {
    // One trailing newline dropped.
    if let Some(file) = value.strip_prefix("file:") {
        let at = path
            .and_then(Path::parent)
            .map(|dir| dir.join(file))
            .unwrap_or_else(|| PathBuf::from(file));
        let text = std::fs::read_to_string(&at)
            .map_err(|e| invalid(key, format!("cannot read {}: {e}", at.display())))?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.is_empty() {
            return Err(invalid(key, format!("{} is empty", at.display())));
        }
        return Ok(Secret::new(text));
    }
    match value.strip_prefix("env:") {
        Some(name) => env(name)
            .filter(|v| !v.is_empty())
            .map(Secret::new)
            .ok_or_else(|| {
                invalid(
                    key,
                    format!("environment variable {name} is not set or empty"),
                )
            }),
        None if value.is_empty() => Err(invalid(key, "must not be empty".into())),
        None => Ok(Secret::new(value)),
    }
}
