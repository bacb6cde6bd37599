//! The API's handlers: each reads its parameters, calls the operation the
//! dashboard calls, and answers JSON. Times in parameters are UTC, RFC 3339
//! (`2026-11-30T14:05:00Z`, or with an offset) or as the dashboard's filters
//! take them (`2026-11-30T14:05`).

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use replaysafe_types::actions::{AuditPage, DeadFilter, DeadLetterResult, RedeliveryResult};
use replaysafe_types::alerts::{AlertsPage, SilenceRow};
use replaysafe_types::auth::{Caller, Role};
use replaysafe_types::deliveries::{DeliveryFilter, DeliveryPage};
use replaysafe_types::events::{
    DeadLetterPage, DeliveryDetail, EventDetail, EventFilter, EventPage,
};
use replaysafe_types::incidents::{Incident, IncidentDetail};
use replaysafe_types::jobs::{BulkJob, JobResults};
use replaysafe_types::overview::{BlockedKey, Overview, Window};
use replaysafe_types::reconcile::{ReconcileFinding, ReconcileRequest, ReconcileRun};
use replaysafe_types::stream::{CapturedDelivery, StreamedEvent};
use replaysafe_types::tokens::TokenRow;
use replaysafe_types::SourceSummary;

use replaysafe_core::jobs::queue as bulk_jobs;
use replaysafe_core::ops;

use super::{ApiCx, ApiError, ApiJson, ApiPath, ApiQuery, ApiResult, ApiState};
use axum::http::{header, StatusCode};
use axum::Json;
use replaysafe_types::states::Outcome;

pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(me))
        .routes(routes!(show_overview))
        .routes(routes!(list_sources))
        .routes(routes!(show_source))
        .routes(routes!(pause_source))
        .routes(routes!(resume_source))
        .routes(routes!(open_breaker))
        .routes(routes!(close_breaker))
        .routes(routes!(reveal_destination_url))
        .routes(routes!(reconcile_source, reconcile_runs))
        .routes(routes!(reconcile_findings))
        .routes(routes!(list_deliveries))
        .routes(routes!(show_delivery))
        .routes(routes!(export_delivery))
        .routes(routes!(redeliver_delivery))
        .routes(routes!(list_events))
        .routes(routes!(super::stream::stream_events))
        .routes(routes!(show_event))
        .routes(routes!(event_request))
        .routes(routes!(redeliver_event))
        .routes(routes!(force_event))
        .routes(routes!(dead_letter_event))
        .routes(routes!(list_dead_letters))
        .routes(routes!(list_blocked_keys))
        .routes(routes!(redeliver_dead_letters))
        .routes(routes!(list_incidents))
        .routes(routes!(show_incident))
        .routes(routes!(ack_incident))
        .routes(routes!(resolve_incident))
        .routes(routes!(ignore_incident))
        .routes(routes!(redeliver_incident))
        .routes(routes!(list_jobs))
        .routes(routes!(show_job, cancel_job))
        .routes(routes!(job_results))
        .routes(routes!(list_alerts))
        .routes(routes!(silence_alerts))
        .routes(routes!(end_silence))
        .routes(routes!(list_audit))
        .routes(routes!(list_tokens))
        .routes(routes!(revoke_token))
}

/// A time parameter as the operations take it: UTC, `YYYY-MM-DDTHH:MM:SS`.
fn utc(value: Option<String>) -> String {
    match value {
        None => String::new(),
        Some(v) => match chrono::DateTime::parse_from_rfc3339(v.trim()) {
            Ok(t) => t
                .with_timezone(&chrono::Utc)
                .format("%Y-%m-%dT%H:%M:%S")
                .to_string(),
            // The dashboard's form (checked by the operation).
            Err(_) => v,
        },
    }
}

/// Who this token is.
#[utoipa::path(get, path = "/me", tag = "tokens", responses((status = 200, body = Caller)))]
async fn me(ApiCx(cx): ApiCx) -> ApiResult<Caller> {
    Ok(Json(cx.require(Role::Viewer)?.clone()))
}

/// The dashboard's overview: every source's figures over a window, the
/// backlog and the alerts.
#[utoipa::path(get, path = "/overview", tag = "sources", params(WindowParams),
    responses((status = 200, body = Overview)))]
async fn show_overview(
    ApiCx(cx): ApiCx,
    ApiQuery(params): ApiQuery<WindowParams>,
) -> ApiResult<Overview> {
    let window = Window::parse(params.window.as_deref().unwrap_or("hour"));
    Ok(Json(ops::overview::overview(&cx, None, window).await?))
}

/// Every source (removed ones with history too), without secrets.
#[utoipa::path(get, path = "/sources", tag = "sources",
    responses((status = 200, body = Vec<SourceSummary>)))]
async fn list_sources(ApiCx(cx): ApiCx) -> ApiResult<Vec<SourceSummary>> {
    Ok(Json(replaysafe_core::ops::sources(&cx).await?))
}

async fn set_breaker(
    cx: &replaysafe_core::ops::Cx,
    slug: String,
    destination: String,
    open: bool,
) -> ApiResult<SourceSummary> {
    ops::actions::set_breaker(cx, slug.clone(), destination, open).await?;
    Ok(Json(replaysafe_core::ops::source(cx, &slug).await?))
}

/// Opens a destination's circuit breaker by hand: its dispatches wait, and
/// it stays open until an operator closes it (operator; audit-logged).
#[utoipa::path(post, path = "/sources/{slug}/destinations/{destination}/breaker/open", tag = "sources",
    params(("slug" = String, Path), ("destination" = String, Path)),
    responses((status = 200, body = SourceSummary), (status = 404, body = super::ErrorBody)))]
async fn open_breaker(
    ApiCx(cx): ApiCx,
    ApiPath((slug, destination)): ApiPath<(String, String)>,
) -> ApiResult<SourceSummary> {
    set_breaker(&cx, slug, destination, true).await
}

/// Closes a destination's circuit breaker: its failures start over and its
/// waiting dispatches go out (operator; audit-logged).
#[utoipa::path(post, path = "/sources/{slug}/destinations/{destination}/breaker/close", tag = "sources",
    params(("slug" = String, Path), ("destination" = String, Path)),
    responses((status = 200, body = SourceSummary), (status = 404, body = super::ErrorBody)))]
async fn close_breaker(
    ApiCx(cx): ApiCx,
    ApiPath((slug, destination)): ApiPath<(String, String)>,
) -> ApiResult<SourceSummary> {
    set_breaker(&cx, slug, destination, false).await
}

#[derive(Serialize, ToSchema)]
struct RevealedUrl {
    url: String,
}

/// A destination's whole URL, credentials included (admin; audit-logged):
/// everywhere else it is shown with its userinfo and query masked.
#[utoipa::path(get, path = "/sources/{slug}/destinations/{destination}/url", tag = "sources",
    params(("slug" = String, Path), ("destination" = String, Path)),
    responses((status = 200, body = RevealedUrl), (status = 403, body = super::ErrorBody),
              (status = 404, body = super::ErrorBody)))]
async fn reveal_destination_url(
    ApiCx(cx): ApiCx,
    ApiPath((slug, destination)): ApiPath<(String, String)>,
) -> ApiResult<RevealedUrl> {
    let url = ops::reveal_destination_url(&cx, &slug, &destination).await?;
    Ok(Json(RevealedUrl { url }))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct WindowParams {
    /// hour (default), day or week.
    window: Option<String>,
}

#[derive(Serialize, ToSchema)]
struct SourceDetail {
    source: SourceSummary,
    /// The source's figures over the window.
    figures: Overview,
}

/// A source with its figures over a window.
#[utoipa::path(get, path = "/sources/{slug}", tag = "sources",
    params(("slug" = String, Path), WindowParams),
    responses((status = 200, body = SourceDetail), (status = 404, body = super::ErrorBody)))]
async fn show_source(
    ApiCx(cx): ApiCx,
    ApiPath(slug): ApiPath<String>,
    ApiQuery(params): ApiQuery<WindowParams>,
) -> ApiResult<SourceDetail> {
    let source = replaysafe_core::ops::source(&cx, &slug).await?;
    let window = Window::parse(params.window.as_deref().unwrap_or("hour"));
    let figures = ops::overview::overview(&cx, Some(slug), window).await?;
    Ok(Json(SourceDetail { source, figures }))
}

async fn set_paused(
    cx: &replaysafe_core::ops::Cx,
    slug: String,
    paused: bool,
) -> ApiResult<SourceSummary> {
    ops::actions::set_paused(cx, slug.clone(), paused).await?;
    Ok(Json(replaysafe_core::ops::source(cx, &slug).await?))
}

/// Pauses a source: it keeps receiving, verifying and claiming, and
/// forwards nothing until resumed (operator; audit-logged).
#[utoipa::path(post, path = "/sources/{slug}/pause", tag = "sources",
    params(("slug" = String, Path)),
    responses((status = 200, body = SourceSummary), (status = 404, body = super::ErrorBody)))]
async fn pause_source(
    ApiCx(cx): ApiCx,
    ApiPath(slug): ApiPath<String>,
) -> ApiResult<SourceSummary> {
    set_paused(&cx, slug, true).await
}

/// Resumes a paused source (operator; audit-logged).
#[utoipa::path(post, path = "/sources/{slug}/resume", tag = "sources",
    params(("slug" = String, Path)),
    responses((status = 200, body = SourceSummary), (status = 404, body = super::ErrorBody)))]
async fn resume_source(
    ApiCx(cx): ApiCx,
    ApiPath(slug): ApiPath<String>,
) -> ApiResult<SourceSummary> {
    set_paused(&cx, slug, false).await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct DeliveriesParams {
    source: Option<String>,
    /// claimed, completed, in_progress, dead, rejected or unavailable.
    outcome: Option<String>,
    /// The HTTP status answered: a code (409) or a class (4xx).
    status: Option<String>,
    /// The idempotency key.
    key: Option<String>,
    /// Received at or after (UTC).
    since: Option<String>,
    /// Received before (UTC).
    until: Option<String>,
    /// The next page: deliveries older than this id (the page's `older`).
    before: Option<i64>,
    /// Only deliveries newer than this id (to follow new ones).
    after: Option<i64>,
}

/// Deliveries, newest first, 50 a page, with every dashboard filter.
#[utoipa::path(get, path = "/deliveries", tag = "deliveries", params(DeliveriesParams),
    responses((status = 200, body = DeliveryPage)))]
async fn list_deliveries(
    ApiCx(cx): ApiCx,
    ApiQuery(p): ApiQuery<DeliveriesParams>,
) -> ApiResult<DeliveryPage> {
    let filter = DeliveryFilter {
        source: p.source.unwrap_or_default(),
        outcome: p.outcome.unwrap_or_default(),
        status: p.status.unwrap_or_default(),
        key: p.key.unwrap_or_default(),
        from: utc(p.since),
        to: utc(p.until),
    };
    Ok(Json(
        ops::deliveries::deliveries(&cx, &filter, p.before, p.after).await?,
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RevealParams {
    /// Show the stored request's credentials unmasked (admin; audit-logged).
    #[serde(default)]
    reveal: bool,
}

/// One delivery: payload and headers as the dashboard shows them.
#[utoipa::path(get, path = "/deliveries/{id}", tag = "deliveries",
    params(("id" = i64, Path), RevealParams),
    responses((status = 200, body = DeliveryDetail), (status = 404, body = super::ErrorBody)))]
async fn show_delivery(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(p): ApiQuery<RevealParams>,
) -> ApiResult<DeliveryDetail> {
    Ok(Json(ops::events::delivery_detail(&cx, id, p.reveal).await?))
}

/// A stored delivery whole: every header as received and the exact body
/// (admin; audit-logged), as `replaysafe prove --from-file` reads it.
#[utoipa::path(get, path = "/deliveries/{id}/export", tag = "deliveries",
    params(("id" = i64, Path)),
    responses((status = 200, body = CapturedDelivery), (status = 404, body = super::ErrorBody)))]
async fn export_delivery(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<CapturedDelivery> {
    Ok(Json(ops::capture::export_delivery(&cx, id).await?))
}

#[derive(Deserialize, ToSchema, Default)]
struct RedeliverBody {
    /// Only for a delivery rejected for its timestamp: an admin's reason to
    /// re-deliver it anyway (the window stops captured replays).
    #[serde(default)]
    past_window_reason: String,
    /// Revive only the event's dispatch to this destination (a dead one);
    /// without it, every dead one.
    #[serde(default)]
    destination: String,
}

/// 200 when the dedup layer claimed it (a dead event queued again exactly
/// once); 409 with its answer when it refused.
fn answered(result: RedeliveryResult) -> ApiResult<RedeliveryResult> {
    if result.outcome == Outcome::Claimed {
        Ok(Json(result))
    } else {
        Err(ApiError::Refused(result))
    }
}

/// Re-delivers a stored delivery through the receiver and the dedup layer
/// (operator; audit-logged): a dead event is queued again exactly once; a
/// completed or in-progress one is refused (409, with the answer).
#[utoipa::path(post, path = "/deliveries/{id}/redeliver", tag = "deliveries",
    params(("id" = i64, Path)), request_body(content = RedeliverBody),
    responses((status = 200, body = RedeliveryResult),
              (status = 404, body = super::ErrorBody),
              (status = 409, description = "Refused by the dedup layer", body = super::ErrorBody)))]
async fn redeliver_delivery(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
    ApiJson(body): ApiJson<RedeliverBody>,
) -> ApiResult<RedeliveryResult> {
    answered(ops::actions::redeliver(&cx, id, body.past_window_reason, body.destination).await?)
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct EventsParams {
    source: Option<String>,
    /// dead, completed, in_progress (queued, processing or retrying), or a state.
    outcome: Option<String>,
    key: Option<String>,
    /// First received at or after (UTC).
    since: Option<String>,
    until: Option<String>,
    /// The next page: events older than this id (the page's `older`).
    before: Option<i64>,
}

/// Events, newest first, 50 a page.
#[utoipa::path(get, path = "/events", tag = "events", params(EventsParams),
    responses((status = 200, body = EventPage)))]
async fn list_events(
    ApiCx(cx): ApiCx,
    ApiQuery(p): ApiQuery<EventsParams>,
) -> ApiResult<EventPage> {
    let filter = EventFilter {
        source: p.source.unwrap_or_default(),
        outcome: p.outcome.unwrap_or_default(),
        key: p.key.unwrap_or_default(),
        since: utc(p.since),
        until: utc(p.until),
    };
    Ok(Json(ops::events::events(&cx, &filter, p.before).await?))
}

/// An event with its timeline of deliveries and attempts.
#[utoipa::path(get, path = "/events/{id}", tag = "events",
    params(("id" = i64, Path), RevealParams),
    responses((status = 200, body = EventDetail), (status = 404, body = super::ErrorBody)))]
async fn show_event(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(p): ApiQuery<RevealParams>,
) -> ApiResult<EventDetail> {
    Ok(Json(ops::events::event_detail(&cx, id, p.reveal).await?))
}

/// An event as its destinations receive it (body, content type, the
/// headers forwarded, `Idempotency-Key`), for `replaysafe prove`: masked
/// as the dashboard shows it unless the token is an admin's (then
/// audit-logged).
#[utoipa::path(get, path = "/events/{id}/request", tag = "events",
    params(("id" = i64, Path)),
    responses((status = 200, body = StreamedEvent), (status = 404, body = super::ErrorBody)))]
async fn event_request(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<StreamedEvent> {
    Ok(Json(ops::stream::forwarded_event(&cx, id).await?))
}

/// Re-delivers an event (its stored delivery) through the dedup layer, as
/// the dashboard's button does (operator; audit-logged).
#[utoipa::path(post, path = "/events/{id}/redeliver", tag = "events",
    params(("id" = i64, Path)), request_body(content = RedeliverBody),
    responses((status = 200, body = RedeliveryResult),
              (status = 404, body = super::ErrorBody),
              (status = 409, description = "Refused by the dedup layer, or no payload left", body = super::ErrorBody)))]
async fn redeliver_event(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
    ApiJson(body): ApiJson<RedeliverBody>,
) -> ApiResult<RedeliveryResult> {
    answered(
        ops::actions::redeliver_event(&cx, id, body.past_window_reason, body.destination).await?,
    )
}

#[derive(Deserialize, ToSchema)]
struct ForceBody {
    /// The event's idempotency key, typed out to confirm.
    key: String,
    /// Why: it goes into the audit log.
    reason: String,
    /// Only the event's completed dispatch to this destination; without
    /// it, every completed one.
    #[serde(default)]
    destination: String,
}

#[derive(Serialize, ToSchema)]
struct Forced {
    message: String,
}

/// Runs a completed event again (admin; audit-logged): forwarded with the
/// same Idempotency-Key and `x-replaysafe-forced: true`.
#[utoipa::path(post, path = "/events/{id}/force", tag = "events",
    params(("id" = i64, Path)), request_body(content = ForceBody),
    responses((status = 200, body = Forced),
              (status = 404, body = super::ErrorBody),
              (status = 409, description = "Not completed, or no payload left", body = super::ErrorBody)))]
async fn force_event(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
    ApiJson(body): ApiJson<ForceBody>,
) -> ApiResult<Forced> {
    let message = ops::actions::force(&cx, id, body.key, body.reason, body.destination).await?;
    Ok(Json(Forced { message }))
}

#[derive(Deserialize, ToSchema)]
struct DeadLetterBody {
    /// Why: kept as the dead-letter reason and in the audit log.
    reason: String,
    /// Only the event's waiting dispatch to this destination; without it,
    /// every waiting one.
    #[serde(default)]
    destination: String,
}

/// Gives up on a waiting (queued or retrying) event by hand (operator;
/// audit-logged): it goes dead with the reason, so an ordered
/// destination's key it held goes on. A dead event may be re-delivered.
#[utoipa::path(post, path = "/events/{id}/dead-letter", tag = "events",
    params(("id" = i64, Path)), request_body(content = DeadLetterBody),
    responses((status = 200, body = DeadLetterResult),
              (status = 400, description = "No reason given", body = super::ErrorBody),
              (status = 404, body = super::ErrorBody),
              (status = 409, description = "Not waiting, or an attempt is in flight", body = super::ErrorBody)))]
async fn dead_letter_event(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
    ApiJson(body): ApiJson<DeadLetterBody>,
) -> ApiResult<DeadLetterResult> {
    Ok(Json(
        ops::actions::dead_letter(&cx, id, body.reason, body.destination).await?,
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct DeadParams {
    source: Option<String>,
    /// Dead-lettered at or after (UTC).
    since: Option<String>,
    /// Dead-lettered before (UTC).
    until: Option<String>,
    /// Words the dead-letter reason contains.
    reason: Option<String>,
    /// Dead at this destination.
    destination: Option<String>,
    /// The next page: the page's `older` pair, as `before` and `before_id`.
    before: Option<i64>,
    before_id: Option<i64>,
}

/// Dead letters, most recently dead first, by source, destination, time
/// and reason.
#[utoipa::path(get, path = "/dead-letters", tag = "dead letters", params(DeadParams),
    responses((status = 200, body = DeadLetterPage)))]
async fn list_dead_letters(
    ApiCx(cx): ApiCx,
    ApiQuery(p): ApiQuery<DeadParams>,
) -> ApiResult<DeadLetterPage> {
    let filter = DeadFilter {
        source: p.source.unwrap_or_default(),
        from: utc(p.since),
        to: utc(p.until),
        reason: p.reason.unwrap_or_default(),
        destination: p.destination.unwrap_or_default(),
        incident: None,
    };
    Ok(Json(
        ops::events::dead_letters(&cx, &filter, p.before.zip(p.before_id)).await?,
    ))
}

/// Compares the source's events with its provider's own list of what it
/// sent over the window and recovers what never arrived through the same
/// claim (operator; audit-logged). A run the provider stopped early answers
/// 200 with its `error`; one already running for the source, 409.
#[utoipa::path(post, path = "/sources/{slug}/reconcile", tag = "sources",
    params(("slug" = String, Path)), request_body(content = ReconcileRequest),
    responses((status = 200, body = ReconcileRun),
              (status = 400, description = "since is not an RFC 3339 time within the lookback", body = super::ErrorBody),
              (status = 404, body = super::ErrorBody),
              (status = 409, description = "No [source.reconcile], or a run of the source is under way", body = super::ErrorBody)))]
async fn reconcile_source(
    ApiCx(cx): ApiCx,
    ApiPath(slug): ApiPath<String>,
    ApiJson(request): ApiJson<ReconcileRequest>,
) -> ApiResult<ReconcileRun> {
    Ok(Json(ops::reconcile::run(&cx, &slug, request).await?))
}

/// The keys the source's runs found its provider had and replaysafe had
/// not, newest first (100), each with the event it became once claimed.
#[utoipa::path(get, path = "/sources/{slug}/reconcile/findings", tag = "sources",
    params(("slug" = String, Path)),
    responses((status = 200, body = Vec<ReconcileFinding>), (status = 404, body = super::ErrorBody)))]
async fn reconcile_findings(
    ApiCx(cx): ApiCx,
    ApiPath(slug): ApiPath<String>,
) -> ApiResult<Vec<ReconcileFinding>> {
    Ok(Json(ops::reconcile::findings(&cx, &slug).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RunsParams {
    /// The next page: the last run's id.
    before: Option<i64>,
}

/// The source's past reconciliation runs, newest first (50 at a time).
#[utoipa::path(get, path = "/sources/{slug}/reconcile", tag = "sources",
    params(("slug" = String, Path), RunsParams),
    responses((status = 200, body = Vec<ReconcileRun>), (status = 404, body = super::ErrorBody)))]
async fn reconcile_runs(
    ApiCx(cx): ApiCx,
    ApiPath(slug): ApiPath<String>,
    ApiQuery(p): ApiQuery<RunsParams>,
) -> ApiResult<Vec<ReconcileRun>> {
    Ok(Json(ops::reconcile::runs(&cx, &slug, p.before).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct BlockedParams {
    /// Only this source's destinations.
    source: Option<String>,
}

/// The keys of ordered destinations held by an event that failed and waits
/// to be retried, oldest holder first (at most 500): the key's later events
/// wait behind it until it completes or is dead-lettered
/// (`POST /events/{id}/dead-letter`).
#[utoipa::path(get, path = "/blocked-keys", tag = "events", params(BlockedParams),
    responses((status = 200, body = Vec<BlockedKey>)))]
async fn list_blocked_keys(
    ApiCx(cx): ApiCx,
    ApiQuery(p): ApiQuery<BlockedParams>,
) -> ApiResult<Vec<BlockedKey>> {
    Ok(Json(
        ops::events::blocked_keys(&cx, p.source.as_deref()).await?,
    ))
}

#[derive(Deserialize, ToSchema)]
struct BulkBody {
    #[serde(default)]
    source: String,
    /// Dead-lettered at or after (UTC).
    #[serde(default)]
    since: Option<String>,
    /// Dead-lettered before (UTC).
    #[serde(default)]
    until: Option<String>,
    /// Words the dead-letter reason contains.
    #[serde(default)]
    reason: String,
    /// Only dispatches dead at this destination are revived.
    #[serde(default)]
    destination: String,
}

/// Starts a bulk re-delivery job over every dead event matching the
/// filter (operator; audit-logged): 202 with the job, which the server runs
/// a step at a time, each event through the same guard as a single
/// re-delivery. Follow it at `/jobs/{id}`; its outcomes at
/// `/jobs/{id}/results`. 400 when the filter matches more than 100,000
/// events, 409 when 4 jobs are unfinished already.
#[utoipa::path(post, path = "/dead-letters/redeliver", tag = "dead letters",
    request_body(content = BulkBody),
    responses((status = 202, body = BulkJob, headers(("Location" = String))),
              (status = 400, body = super::ErrorBody), (status = 409, body = super::ErrorBody)))]
async fn redeliver_dead_letters(
    ApiCx(cx): ApiCx,
    ApiJson(body): ApiJson<BulkBody>,
) -> Result<(StatusCode, [(header::HeaderName, String); 1], Json<BulkJob>), ApiError> {
    let filter = DeadFilter {
        source: body.source,
        from: utc(body.since),
        to: utc(body.until),
        reason: body.reason,
        destination: body.destination,
        incident: None,
    };
    let job = bulk_jobs::start(&cx, &filter).await?;
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/api/v1/jobs/{}", job.id))],
        Json(job),
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct IncidentParams {
    /// open, acknowledged, resolved or ignored.
    state: Option<String>,
    source: Option<String>,
}

/// Incidents, newest first by their last failure (at most 200): failing
/// attempts grouped by source, destination, failure kind and the answer's
/// first line (numbers, hex strings and UUIDs replaced). `count` is the
/// events affected.
#[utoipa::path(get, path = "/incidents", tag = "incidents", params(IncidentParams),
    responses((status = 200, body = Vec<Incident>), (status = 400, body = super::ErrorBody)))]
async fn list_incidents(
    ApiCx(cx): ApiCx,
    ApiQuery(p): ApiQuery<IncidentParams>,
) -> ApiResult<Vec<Incident>> {
    Ok(Json(
        ops::incidents::list(&cx, p.state.as_deref(), p.source.as_deref()).await?,
    ))
}

/// An incident, its newest affected events (100) and how many of them are
/// dead at its destination now.
#[utoipa::path(get, path = "/incidents/{id}", tag = "incidents", params(("id" = i64, Path)),
    responses((status = 200, body = IncidentDetail), (status = 404, body = super::ErrorBody)))]
async fn show_incident(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<IncidentDetail> {
    Ok(Json(ops::incidents::detail(&cx, id).await?))
}

/// Acknowledges an open incident (operator; audit-logged); 409 from any other state.
#[utoipa::path(post, path = "/incidents/{id}/ack", tag = "incidents", params(("id" = i64, Path)),
    responses((status = 200, body = Incident), (status = 404, body = super::ErrorBody),
              (status = 409, body = super::ErrorBody)))]
async fn ack_incident(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<Incident> {
    Ok(Json(
        ops::incidents::apply(&cx, id, replaysafe_core::incidents::Move::Acknowledge).await?,
    ))
}

/// Resolves an incident by hand (operator; audit-logged); 409 once resolved.
/// A later failure of its kind opens a new one.
#[utoipa::path(post, path = "/incidents/{id}/resolve", tag = "incidents", params(("id" = i64, Path)),
    responses((status = 200, body = Incident), (status = 404, body = super::ErrorBody),
              (status = 409, body = super::ErrorBody)))]
async fn resolve_incident(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<Incident> {
    Ok(Json(
        ops::incidents::apply(&cx, id, replaysafe_core::incidents::Move::Resolve).await?,
    ))
}

/// Ignores an incident (operator; audit-logged): it stays, counts on and
/// notifies nobody; 409 once resolved.
#[utoipa::path(post, path = "/incidents/{id}/ignore", tag = "incidents", params(("id" = i64, Path)),
    responses((status = 200, body = Incident), (status = 404, body = super::ErrorBody),
              (status = 409, body = super::ErrorBody)))]
async fn ignore_incident(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<Incident> {
    Ok(Json(
        ops::incidents::apply(&cx, id, replaysafe_core::incidents::Move::Ignore).await?,
    ))
}

/// Re-delivers the incident's events that are dead at its destination
/// (operator): a bulk job (`202`, `Location` the job) with the incident's
/// filter, each event through the same dedup guard as one re-delivery.
#[utoipa::path(post, path = "/incidents/{id}/redeliver", tag = "incidents", params(("id" = i64, Path)),
    responses((status = 202, body = BulkJob, headers(("Location" = String))),
              (status = 404, body = super::ErrorBody), (status = 409, body = super::ErrorBody)))]
async fn redeliver_incident(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
) -> Result<(StatusCode, [(header::HeaderName, String); 1], Json<BulkJob>), ApiError> {
    let job = bulk_jobs::start_for_incident(&cx, id).await?;
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/api/v1/jobs/{}", job.id))],
        Json(job),
    ))
}

/// The most recent bulk jobs, newest first.
#[utoipa::path(get, path = "/jobs", tag = "dead letters",
    responses((status = 200, body = Vec<BulkJob>)))]
async fn list_jobs(ApiCx(cx): ApiCx) -> ApiResult<Vec<BulkJob>> {
    Ok(Json(bulk_jobs::recent(&cx).await?))
}

/// A bulk job: its state and counts.
#[utoipa::path(get, path = "/jobs/{id}", tag = "dead letters", params(("id" = i64, Path)),
    responses((status = 200, body = BulkJob), (status = 404, body = super::ErrorBody)))]
async fn show_job(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<BulkJob> {
    Ok(Json(bulk_jobs::show(&cx, id).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ResultsParams {
    /// The next page: outcomes after this event id (the page's `next_after`).
    after: Option<i64>,
}

/// A bulk job's per-event outcomes so far, by event id, 200 a page.
#[utoipa::path(get, path = "/jobs/{id}/results", tag = "dead letters",
    params(("id" = i64, Path), ResultsParams),
    responses((status = 200, body = JobResults), (status = 404, body = super::ErrorBody)))]
async fn job_results(
    ApiCx(cx): ApiCx,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(p): ApiQuery<ResultsParams>,
) -> ApiResult<JobResults> {
    Ok(Json(
        bulk_jobs::results(&cx, id, p.after.unwrap_or(0)).await?,
    ))
}

/// Cancels a bulk job (operator; audit-logged): it stops before its next
/// step; what it re-delivered stays re-delivered. 409 once it has finished.
#[utoipa::path(delete, path = "/jobs/{id}", tag = "dead letters", params(("id" = i64, Path)),
    responses((status = 200, body = BulkJob), (status = 404, body = super::ErrorBody),
              (status = 409, body = super::ErrorBody)))]
async fn cancel_job(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<BulkJob> {
    Ok(Json(bulk_jobs::cancel(&cx, id).await?))
}

/// Firing and recently resolved alerts, and the silences in force.
#[utoipa::path(get, path = "/alerts", tag = "alerts",
    responses((status = 200, body = AlertsPage)))]
async fn list_alerts(ApiCx(cx): ApiCx) -> ApiResult<AlertsPage> {
    Ok(Json(ops::alerts::page(&cx).await?))
}

#[derive(Deserialize, ToSchema)]
struct SilenceBody {
    /// One of the rules: duplicate_storm, dead_letters, backlog,
    /// signature_failures, destination_failing, missed_events, incident_opened.
    rule: String,
    /// Absent: every source.
    #[serde(default)]
    source: String,
    /// 1 to 10080 (a week).
    minutes: i64,
    /// Goes into the audit log.
    reason: String,
}

/// Silences a rule for a while (admin; audit-logged): its alerts are still
/// kept and shown, not sent.
#[utoipa::path(post, path = "/alerts/silences", tag = "alerts", request_body(content = SilenceBody),
    responses((status = 200, body = SilenceRow), (status = 400, body = super::ErrorBody)))]
async fn silence_alerts(
    ApiCx(cx): ApiCx,
    ApiJson(body): ApiJson<SilenceBody>,
) -> ApiResult<SilenceRow> {
    Ok(Json(
        ops::alerts::silence(&cx, body.rule, body.source, body.minutes, body.reason).await?,
    ))
}

/// Ends a silence now (admin; audit-logged).
#[utoipa::path(delete, path = "/alerts/silences/{id}", tag = "alerts", params(("id" = i64, Path)),
    responses((status = 200, description = "Ended"), (status = 404, body = super::ErrorBody)))]
async fn end_silence(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<serde_json::Value> {
    ops::alerts::unsilence(&cx, id).await?;
    Ok(Json(serde_json::json!({"ended": id})))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct AuditParams {
    /// The next page: entries older than this id (the page's `older`).
    before: Option<i64>,
}

/// The audit log, newest first, 100 a page.
#[utoipa::path(get, path = "/audit", tag = "audit", params(AuditParams),
    responses((status = 200, body = AuditPage)))]
async fn list_audit(ApiCx(cx): ApiCx, ApiQuery(p): ApiQuery<AuditParams>) -> ApiResult<AuditPage> {
    Ok(Json(ops::actions::audit_log(&cx, p.before).await?))
}

/// Every API token (admin): names, roles, prefixes, never a token.
#[utoipa::path(get, path = "/tokens", tag = "tokens",
    responses((status = 200, body = Vec<TokenRow>)))]
async fn list_tokens(ApiCx(cx): ApiCx) -> ApiResult<Vec<TokenRow>> {
    Ok(Json(ops::tokens::tokens(&cx).await?))
}

/// Revokes a token (admin; audit-logged): refused from its next use on.
#[utoipa::path(delete, path = "/tokens/{id}", tag = "tokens", params(("id" = i64, Path)),
    responses((status = 200, body = TokenRow), (status = 404, body = super::ErrorBody)))]
async fn revoke_token(ApiCx(cx): ApiCx, ApiPath(id): ApiPath<i64>) -> ApiResult<TokenRow> {
    Ok(Json(ops::tokens::revoke(&cx, id).await?))
}
