//! Reconciliation on demand (spec section 10): an operator runs one for a
//! source (`POST /api/v1/sources/{slug}/reconcile`, `replaysafe reconcile`),
//! audit-logged; anyone signed in reads the past runs.

use replaysafe_types::auth::Role;
use replaysafe_types::reconcile::{
    NotReconciled, ReconcileFinding, ReconcilePage, ReconcileRequest, ReconcileRun, ReconcileSource,
};

use crate::error::OpError;
use crate::ops::Cx;
use crate::reconcile::{self, Limits, NotRun};

/// Past runs shown at once.
pub const RUNS_SHOWN: i64 = 50;
/// Findings shown at once.
pub const FINDINGS_SHOWN: i64 = 100;
/// Runs the page shows per source.
const PAGE_RUNS: i64 = 10;

/// Runs one reconciliation of `slug` now and answers its verdict (a run
/// the provider stopped early answers too, with its `error`).
pub async fn run(cx: &Cx, slug: &str, request: ReconcileRequest) -> Result<ReconcileRun, OpError> {
    let caller = cx.require(Role::Operator)?;
    let source = cx
        .services
        .config
        .source(slug)
        .ok_or_else(|| OpError::NotFound(format!("no source {slug:?}")))?;
    let since = match request.since.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(
            chrono::DateTime::parse_from_rfc3339(text)
                .map_err(|e| {
                    OpError::BadRequest(format!("since: {text:?} is not an RFC 3339 time ({e})"))
                })?
                .to_utc(),
        ),
    };
    let who = caller.who();
    let started_by = match who.token_id {
        Some(_) => format!("token {}", caller.username),
        None => caller.username.clone(),
    };
    // Its own task: a client that hangs up does not stop a run midway.
    let (services, source) = (cx.services.clone(), source.clone());
    let dry_run = request.dry_run;
    let verdict = tokio::spawn(async move {
        reconcile::run(
            &services,
            &source,
            since,
            dry_run,
            &started_by,
            Limits::default(),
            None,
        )
        .await
    })
    .await
    .map_err(|e| OpError::Internal(format!("the reconciliation run failed: {e}")))?
    .map_err(|e| match e {
        NotRun::NotConfigured => OpError::Conflict(format!(
            "{slug} has no [source.reconcile]: add one to the config to compare with its provider"
        )),
        NotRun::Busy => OpError::Conflict(format!(
            "a reconciliation of {slug} is running: wait for its verdict (GET /api/v1/sources/{slug}/reconcile)"
        )),
        NotRun::BadSince(why) => OpError::BadRequest(why),
        NotRun::NotDue => OpError::Internal("an operator's run is never the schedule's".into()),
        NotRun::Database(e) => OpError::database(e),
    })?;
    let outcome = match &verdict.error {
        None => format!(
            "seen {}, already received {}, recovered {}, redelivery requested {}, still missing {}",
            verdict.seen,
            verdict.already_received,
            verdict.recovered,
            verdict.redelivery_requested,
            verdict.still_missing
        ),
        Some(e) => format!("stopped: {e}"),
    };
    cx.audit(
        caller,
        if verdict.dry_run {
            "reconcile.dry_run"
        } else {
            "reconcile"
        },
        Some(&format!("source {slug}")),
        &outcome,
        serde_json::to_value(&verdict).unwrap_or_default(),
    )
    .await?;
    Ok(verdict)
}

/// A source's past runs, newest first; `before`: the next page's cursor.
pub async fn runs(cx: &Cx, slug: &str, before: Option<i64>) -> Result<Vec<ReconcileRun>, OpError> {
    cx.require(Role::Viewer)?;
    if cx.services.config.source(slug).is_none() {
        return Err(OpError::NotFound(format!("no source {slug:?}")));
    }
    Ok(reconcile::runs(&cx.services.reads.pool(), slug, before, RUNS_SHOWN).await?)
}

/// A source's latest findings: the keys its runs found missing, newest
/// first, with the events they became.
pub async fn findings(cx: &Cx, slug: &str) -> Result<Vec<ReconcileFinding>, OpError> {
    cx.require(Role::Viewer)?;
    if cx.services.config.source(slug).is_none() {
        return Err(OpError::NotFound(format!("no source {slug:?}")));
    }
    Ok(reconcile::findings(&cx.services.reads.pool(), slug, FINDINGS_SHOWN).await?)
}

/// The Reconciliation page: each reconciled source's latest runs and
/// findings, and the sources that are not, with why.
pub async fn page(cx: &Cx) -> Result<ReconcilePage, OpError> {
    cx.require(Role::Viewer)?;
    let pool = cx.services.reads.pool();
    let mut page = ReconcilePage {
        sources: Vec::new(),
        not_reconciled: Vec::new(),
    };
    for source in &cx.services.config.sources {
        let provider = source.provider.name.to_owned();
        let Some(r) = &source.reconcile else {
            let why = match source.provider.reconciler {
                crate::providers::Reconciler::None(why) => why.to_owned(),
                _ => "no [source.reconcile] in the config: add one to compare with the provider's list".to_owned(),
            };
            page.not_reconciled.push(NotReconciled {
                source: source.slug.clone(),
                provider,
                why,
            });
            continue;
        };
        page.sources.push(ReconcileSource {
            source: source.slug.clone(),
            provider,
            every_minutes: r.every.map(|e| e.as_secs() / 60),
            lookback_hours: r.lookback.as_secs() / 3600,
            missed_total: reconcile::missed_total(&pool, &source.slug).await?,
            runs: reconcile::runs(&pool, &source.slug, None, PAGE_RUNS).await?,
            findings: reconcile::findings(&pool, &source.slug, FINDINGS_SHOWN).await?,
        });
    }
    Ok(page)
}
