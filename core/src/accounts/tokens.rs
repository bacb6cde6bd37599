//! API tokens (issue 16): what scripts, bots and the CLI call `/api/v1` with.
//! A token holds a role like a person and is checked in the same place; what
//! it does is audit-logged under its name. Created on the command line
//! (`replaysafe token create`, printed once), listed and revoked there or on
//! the Tokens page by an admin. Only a SHA-256 of a token is stored.

use rand::distributions::{Alphanumeric, DistString};
use replaysafe_types::time::Time;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::accounts::{record, Entry};
use crate::error::OpError;
use replaysafe_types::auth::{Caller, Role, Via, Who};
use replaysafe_types::tokens::TokenRow;

/// Every token starts with this, so a leaked one is recognisable (secret
/// scanners, logs) and a stray string is refused without a lookup.
pub const PREFIX: &str = "rs_";
/// Random base62 characters after the prefix: about 238 bits.
const RANDOM_CHARS: usize = 40;
/// Characters of a token lists show.
const SHOWN: usize = PREFIX.len() + 8;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("a token name is 1 to 64 letters, digits, '.', '_', '-' or '@'")]
    BadName,
    #[error("a live token is already named {0:?}: revoke it first, or pick another name")]
    Exists(String),
    #[error("no live token is named {0:?}")]
    Unknown(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

fn digest(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Tokens as lists show them: all, or the one with `id`.
async fn rows(
    executor: impl sqlx::PgExecutor<'_>,
    id: Option<i64>,
) -> Result<Vec<TokenRow>, sqlx::Error> {
    sqlx::query_as!(
        TokenRow,
        r#"SELECT id, name, role, prefix,
                  created_at AS "created_at!: Time",
                  created_by,
                  last_used_at AS "last_used_at: Time",
                  expires_at AS "expires_at: Time",
                  revoked_at AS "revoked_at: Time",
                  CASE WHEN revoked_at IS NOT NULL THEN 'revoked'
                       WHEN expires_at <= now() THEN 'expired' ELSE 'live' END AS "state!: replaysafe_types::states::TokenState"
           FROM api_tokens WHERE ($1::bigint IS NULL OR id = $1)
           ORDER BY revoked_at IS NOT NULL, created_at DESC, id DESC"#,
        id
    )
    .fetch_all(executor)
    .await
}

async fn row(executor: impl sqlx::PgExecutor<'_>, id: i64) -> Result<TokenRow, sqlx::Error> {
    rows(executor, Some(id))
        .await?
        .pop()
        .ok_or(sqlx::Error::RowNotFound)
}

/// Creates a token; returns it (the only time it is shown) with its row.
/// `expires_in_secs`: None never expires.
pub async fn create(
    pool: &PgPool,
    name: &str,
    role: Role,
    expires_in_secs: Option<i64>,
    by: Who<'_>,
    from: Option<&str>,
) -> Result<(String, TokenRow), TokenError> {
    if !replaysafe_types::auth::valid_name(name) {
        return Err(TokenError::BadName);
    }
    let token = format!(
        "{PREFIX}{}",
        Alphanumeric.sample_string(&mut rand::rngs::OsRng, RANDOM_CHARS)
    );
    let mut tx = pool.begin().await?;
    // An expired token no longer holds its name.
    sqlx::query!(
        "UPDATE api_tokens SET revoked_at = now()
         WHERE name = $1 AND revoked_at IS NULL AND expires_at <= now()",
        name
    )
    .execute(&mut *tx)
    .await?;
    let inserted = sqlx::query_scalar!(
        "INSERT INTO api_tokens (name, role, prefix, hash, created_by, expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6::bigint))
         ON CONFLICT (name) WHERE revoked_at IS NULL DO NOTHING
         RETURNING id",
        name,
        role.as_str(),
        &token[..SHOWN],
        digest(&token),
        by.name,
        expires_in_secs
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(id) = inserted else {
        return Err(TokenError::Exists(name.to_owned()));
    };
    let created = row(&mut *tx, id).await?;
    record(
        &mut *tx,
        Entry {
            who: by,
            action: "token.create",
            target: Some(&format!("token {name}")),
            outcome: "succeeded",
            detail: Some(serde_json::json!({
                "role": role.as_str(), "prefix": created.prefix, "expires_at": created.expires_at,
            })),
            remote_addr: from,
        },
    )
    .await?;
    tx.commit().await?;
    Ok((token, created))
}

/// Every token, live ones first, newest first.
pub async fn list(pool: &PgPool) -> Result<Vec<TokenRow>, sqlx::Error> {
    rows(pool, None).await
}

/// Revokes the live token named `name` or with id `id`; refused at once
/// on its next use. Audit-logged as `by`.
pub async fn revoke_where(
    pool: &PgPool,
    target: Target<'_>,
    by: Who<'_>,
    remote_addr: Option<&str>,
) -> Result<TokenRow, TokenError> {
    let (id, name) = match target {
        Target::Id(id) => (Some(id), None),
        Target::Name(name) => (None, Some(name)),
    };
    let mut tx = pool.begin().await?;
    let revoked = sqlx::query_scalar!(
        "UPDATE api_tokens SET revoked_at = now()
         WHERE revoked_at IS NULL AND (id = $1 OR name = $2)
         RETURNING id",
        id,
        name
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(revoked) = revoked else {
        return Err(TokenError::Unknown(match target {
            Target::Id(id) => format!("#{id}"),
            Target::Name(name) => name.to_owned(),
        }));
    };
    let revoked = row(&mut *tx, revoked).await?;
    record(
        &mut *tx,
        Entry {
            who: by,
            action: "token.revoke",
            target: Some(&format!("token {}", revoked.name)),
            outcome: "succeeded",
            detail: Some(serde_json::json!({ "prefix": revoked.prefix })),
            remote_addr,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(revoked)
}

#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    Id(i64),
    Name(&'a str),
}

/// A token's role now, or None once it is revoked, expired or gone: for a
/// request that outlives its first check (`GET /api/v1/events/stream`).
pub async fn live_role(pool: &PgPool, id: i64) -> Result<Option<Role>, sqlx::Error> {
    let role = sqlx::query_scalar!(
        "SELECT role FROM api_tokens
         WHERE id = $1 AND revoked_at IS NULL AND coalesce(expires_at > now(), true)",
        id
    )
    .fetch_optional(pool)
    .await?;
    Ok(role.as_deref().and_then(Role::parse))
}

/// The caller a presented token stands for: 401 unless it is a live
/// token. Its last use is recorded at most once a minute, so a busy
/// script does not write a row per request.
pub async fn caller(pool: &PgPool, presented: &str) -> Result<Caller, OpError> {
    let well_formed = presented.len() == PREFIX.len() + RANDOM_CHARS
        && presented.starts_with(PREFIX)
        && presented[PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric());
    if !well_formed {
        return Err(OpError::Unauthorized(
            "that is not a replaysafe API token".into(),
        ));
    }
    let found = sqlx::query!(
        r#"WITH found AS (
               SELECT id, name, role, revoked_at IS NOT NULL AS revoked,
                      coalesce(expires_at <= now(), false) AS expired
               FROM api_tokens WHERE hash = $1),
           touched AS (
               UPDATE api_tokens t SET last_used_at = now()
               FROM found f
               WHERE t.id = f.id AND NOT f.revoked AND NOT f.expired
                 AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute')
               RETURNING t.id)
           SELECT id AS "id!", name AS "name!", role AS "role!",
                  revoked AS "revoked!", expired AS "expired!",
                  (SELECT count(*) FROM touched) AS "touched!"
           FROM found"#,
        digest(presented)
    )
    .fetch_optional(pool)
    .await?;
    let Some(found) = found else {
        return Err(OpError::Unauthorized("unknown token".into()));
    };
    if found.revoked {
        return Err(OpError::Unauthorized("this token was revoked".into()));
    }
    if found.expired {
        return Err(OpError::Unauthorized("this token has expired".into()));
    }
    let role = Role::parse(&found.role)
        .ok_or_else(|| OpError::Misconfigured("a token with an unknown role".into()))?;
    Ok(Caller {
        id: found.id,
        username: found.name,
        role,
        via: Via::Token,
    })
}
