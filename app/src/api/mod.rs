//! Server functions and the data they return. Database access happens only on
//! the server (`ssr`); the browser sees these types and nothing else.

pub mod actions;
pub mod alerts;
pub mod deliveries;
pub mod events;
pub mod jobs;
pub mod mask;
pub mod overview;
pub mod tokens;

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// Upper bounds (milliseconds) of the latency histograms kept per minute; a
/// last bucket holds everything slower. The server's rollup uses the same.
pub const LATENCY_BOUNDS_MS: &[f64] = &[
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    30_000.0,
    60_000.0,
    300_000.0,
    1_800_000.0,
    3_600_000.0,
];

/// The `q` quantile (0..1) of a histogram over `LATENCY_BOUNDS_MS`, linearly
/// interpolated inside its bucket; None when the histogram is empty.
pub fn quantile_ms(histogram: &[i64], q: f64) -> Option<f64> {
    let total: i64 = histogram.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut seen = 0i64;
    for (i, &count) in histogram.iter().enumerate() {
        if count > 0 && (seen + count) as f64 >= rank {
            let lower = if i == 0 {
                0.0
            } else {
                LATENCY_BOUNDS_MS[i - 1]
            };
            // The open last bucket reports its lower bound: "at least this".
            let Some(&upper) = LATENCY_BOUNDS_MS.get(i) else {
                return Some(lower);
            };
            let within = ((rank - seen as f64) / count as f64).clamp(0.0, 1.0);
            return Some(lower + (upper - lower) * within);
        }
        seen += count;
    }
    LATENCY_BOUNDS_MS.last().copied()
}

/// A configured source as the Sources page shows it. Secrets never leave the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct SourceSummary {
    pub slug: String,
    pub provider: String,
    pub mode: String,
    pub destination: Option<String>,
    pub paused: bool,
    /// Paused or resumed by an operator, overriding the config file.
    pub paused_by_operator: bool,
    /// False for a source removed from the config whose history remains.
    pub in_config: bool,
    /// A worker's lease on one attempt is this plus a margin.
    pub attempt_timeout_secs: i32,
    pub paused_changed_at: Option<String>,
    /// Its destinations, in the config's order.
    pub destinations: Vec<DestinationSummary>,
}

/// One destination of a source as the config names it (no secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct DestinationSummary {
    pub name: String,
    pub url: String,
    /// Which events it takes, in words; None: every one.
    pub filter: Option<String>,
    /// Its rate and concurrency limits, in words; None: none.
    pub limits: Option<String>,
    /// Its circuit breaker: `closed`, `open` or `half_open` (a probe is out).
    #[serde(default = "closed")]
    pub breaker: String,
    /// Opened by an operator: it stays open until one closes it.
    #[serde(default)]
    pub breaker_by_hand: bool,
}

fn closed() -> String {
    "closed".into()
}

#[server(endpoint = "sources")]
pub async fn list_sources() -> Result<Vec<SourceSummary>, ServerFnError> {
    Ok(ssr::sources(&ssr::cx().await?).await?)
}

#[cfg(feature = "ssr")]
pub mod ssr {
    pub use crate::error::AppError;
    use leptos::prelude::*;
    pub use sqlx::PgPool;

    use std::sync::Arc;

    use super::{DestinationSummary, SourceSummary};
    use crate::api::actions::ssr::Operations;
    use crate::auth::{Caller, Role};

    /// The pool the server provides as context to every render and server function.
    pub fn pool() -> Result<PgPool, ServerFnError> {
        use_context::<PgPool>()
            .ok_or_else(|| AppError::Misconfigured("server misconfigured: no pool".into()).into())
    }

    /// Where the dashboard's and the API's read-only queries go: the read
    /// replica (`read_database_url`) while it answers, else the primary.
    /// Actions always go to the primary (`Cx::pool`). The server's watcher
    /// (`db::replica`) says whether the replica answers and how far behind
    /// it is.
    #[derive(Clone)]
    pub struct Reads {
        primary: PgPool,
        replica: Option<Arc<Replica>>,
    }

    struct Replica {
        pool: PgPool,
        answers: std::sync::atomic::AtomicBool,
        /// Milliseconds behind the primary, as last measured.
        lag_ms: std::sync::atomic::AtomicU64,
    }

    /// A lag the pages show: reads this far behind may miss what just happened.
    pub const LAG_SHOWN: std::time::Duration = std::time::Duration::from_secs(5);

    /// A replica further behind than this is not read from: the primary is.
    pub const LAG_MAX: std::time::Duration = std::time::Duration::from_secs(30);

    impl Reads {
        pub fn primary_only(primary: PgPool) -> Self {
            Self {
                primary,
                replica: None,
            }
        }

        /// Reads from `replica` once the watcher finds it answering.
        pub fn with_replica(primary: PgPool, replica: PgPool) -> Self {
            Self {
                primary,
                replica: Some(Arc::new(Replica {
                    pool: replica,
                    answers: Default::default(),
                    lag_ms: Default::default(),
                })),
            }
        }

        /// The replica, while it answers and is less than `LAG_MAX` behind.
        fn usable(&self) -> Option<&Replica> {
            use std::sync::atomic::Ordering::Relaxed;
            self.replica.as_deref().filter(|r| {
                r.answers.load(Relaxed) && r.lag_ms.load(Relaxed) < LAG_MAX.as_millis() as u64
            })
        }

        /// The pool for a read-only query now.
        pub fn pool(&self) -> PgPool {
            self.usable()
                .map_or_else(|| self.primary.clone(), |r| r.pool.clone())
        }

        /// The replica's pool, for the watcher.
        pub fn replica(&self) -> Option<&PgPool> {
            self.replica.as_ref().map(|r| &r.pool)
        }

        /// What the watcher found: None when the replica did not answer.
        pub fn set_lag(&self, lag: Option<std::time::Duration>) {
            use std::sync::atomic::Ordering::Relaxed;
            if let Some(r) = &self.replica {
                r.answers.store(lag.is_some(), Relaxed);
                if let Some(lag) = lag {
                    r.lag_ms.store(lag.as_millis() as u64, Relaxed);
                }
            }
        }

        /// How far behind the primary the reads are: None when they come
        /// from the primary.
        pub fn lag(&self) -> Option<std::time::Duration> {
            self.usable().map(|r| {
                std::time::Duration::from_millis(
                    r.lag_ms.load(std::sync::atomic::Ordering::Relaxed),
                )
            })
        }

        /// The lag a page shows, in seconds: only past `LAG_SHOWN`.
        pub fn shown_lag_secs(&self) -> Option<f64> {
            self.lag()
                .filter(|lag| *lag >= LAG_SHOWN)
                .map(|lag| lag.as_secs_f64())
        }
    }

    /// What every operation is handed, whoever asks (a server function of
    /// the dashboard, the API, the CLI through the API): the database, the
    /// server's operations, the caller and where the call came from. Each
    /// operation starts with `require`, so the role is checked in one place.
    #[derive(Clone)]
    pub struct Cx {
        /// The primary: actions, and reads that must see them.
        pub pool: PgPool,
        /// For the pages' and the API's read-only queries.
        pub reads: Reads,
        pub operations: Arc<dyn Operations>,
        /// None: no one signed in.
        pub caller: Option<Caller>,
        pub remote_addr: Option<String>,
    }

    impl Cx {
        /// The caller if they hold `role`; else 401 or 403.
        pub fn require(&self, role: Role) -> Result<&Caller, AppError> {
            crate::auth::ssr::authorize(self.caller.as_ref(), role)
        }

        /// Appends to the audit log as `caller`, from this call's address.
        pub async fn audit(
            &self,
            caller: &Caller,
            action: &str,
            target: Option<&str>,
            outcome: &str,
            detail: serde_json::Value,
        ) -> Result<(), AppError> {
            crate::auth::ssr::record(
                &self.pool,
                crate::auth::ssr::Entry {
                    who: caller.who(),
                    action,
                    target,
                    outcome,
                    detail: Some(detail),
                    remote_addr: self.remote_addr.as_deref(),
                },
            )
            .await
            .map_err(AppError::database)
        }
    }

    /// A server function's `Cx`: from the context the server provides and
    /// the request's session.
    pub async fn cx() -> Result<Cx, ServerFnError> {
        Ok(Cx {
            pool: pool()?,
            reads: use_context::<Reads>().ok_or_else(|| {
                AppError::Misconfigured("server misconfigured: no read pool".into())
            })?,
            operations: crate::api::actions::ssr::operations()?,
            caller: crate::auth::ssr::session_user().await?,
            remote_addr: crate::auth::ssr::remote_addr().await,
        })
    }

    /// Every configured source (and removed ones with history), no secrets.
    pub async fn sources(cx: &Cx) -> Result<Vec<SourceSummary>, AppError> {
        cx.require(Role::Viewer)?;
        source_rows(&cx.reads.pool(), None).await
    }

    /// One source, or 404.
    pub async fn source(cx: &Cx, slug: &str) -> Result<SourceSummary, AppError> {
        cx.require(Role::Viewer)?;
        source_rows(&cx.pool, Some(slug))
            .await?
            .pop()
            .ok_or_else(|| AppError::NotFound(format!("no source {slug:?}")))
    }

    async fn source_rows(
        pool: &PgPool,
        slug: Option<&str>,
    ) -> Result<Vec<SourceSummary>, AppError> {
        let rows = sqlx::query!(
            r#"SELECT slug, provider, mode, destination,
                      coalesce(paused_override, config_paused) AS "paused!",
                      paused_override IS NOT NULL AS "paused_by_operator!",
                      in_config, attempt_timeout_secs,
                      to_char(paused_changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS paused_changed_at,
                      destinations,
                      (SELECT coalesce(jsonb_object_agg(g.destination,
                                           jsonb_build_array(g.breaker, g.opened_by_hand)), '{}')
                       FROM destination_gates g WHERE g.source = sources.slug) AS "breakers!"
               FROM sources WHERE ($1::text IS NULL OR slug = $1)
               ORDER BY in_config DESC, slug"#,
            slug
        )
        .fetch_all(pool)
        .await
        .map_err(AppError::database)?;
        Ok(rows
            .into_iter()
            .map(|r| SourceSummary {
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
                        if let Some((state, by_hand)) = r
                            .breakers
                            .get(&d.name)
                            .and_then(|b| serde_json::from_value::<(String, bool)>(b.clone()).ok())
                        {
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
    pub fn page<T, C>(
        mut rows: Vec<T>,
        size: i64,
        cursor: impl Fn(&T) -> C,
    ) -> (Vec<T>, Option<C>) {
        let size = usize::try_from(size).unwrap_or(0);
        if rows.len() > size {
            rows.truncate(size);
            let next = rows.last().map(cursor);
            (rows, next)
        } else {
            (rows, None)
        }
    }

    /// A filter's time as a `datetime-local` input gives it
    /// (`2026-11-30T14:05`, seconds optional), read as UTC; RFC 3339 out.
    pub fn utc_time(field: &str, value: &str) -> Result<String, String> {
        let value = value.trim().replacen(' ', "T", 1);
        ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
            .iter()
            .find_map(|format| chrono::NaiveDateTime::parse_from_str(&value, format).ok())
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .ok_or_else(|| {
                format!("{field}: expected a UTC time like 2026-11-30T14:05, got {value:?}")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        let mut h = vec![0i64; LATENCY_BOUNDS_MS.len() + 1];
        assert_eq!(quantile_ms(&h, 0.5), None);
        h[3] = 10; // ten answers between 2 and 5 ms
        assert_eq!(quantile_ms(&h, 0.5), Some(3.5));
        assert_eq!(quantile_ms(&h, 1.0), Some(5.0));
        h[LATENCY_BOUNDS_MS.len()] = 10; // ten slower than the last bound
        assert_eq!(quantile_ms(&h, 0.99), Some(3_600_000.0));
        assert_eq!(quantile_ms(&h, 0.25), Some(3.5));
    }
}
