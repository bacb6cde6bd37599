//! Reconciliation (issue 34) against a local stand-in for GitHub's webhook
//! deliveries API, written from its documented shape: `GET
//! .../hooks/{id}/deliveries` newest first with a `Link` cursor (naming
//! api.github.com, as GitHub's does), and `POST .../deliveries/{id}/attempts`
//! answered 202, after which the stand-in sends the delivery again, signed,
//! to the receiver, as GitHub would. The list has no payloads: a guid never
//! claimed is asked for again, never entered from the list.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use replaysafe_core::db::MIGRATOR;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::helpers::{
    github_request, make_token, reconcile_over_api, run_cli, sdk_list, spawn_app, test_config,
    Destination, TestApp,
};

const SIGNING: &str = "gh-reconcile-secret";
const TOKEN: &str = "ghp_standin_token_never_shown";

#[derive(Clone)]
struct Stored {
    id: u64,
    guid: String,
    delivered_at: chrono::DateTime<chrono::Utc>,
    redelivery: bool,
    status_code: u16,
    payload: String,
}

#[derive(Default)]
struct Inner {
    deliveries: Vec<Stored>,
    next_id: u64,
    /// Where deliveries go: the receiver's `/hooks/gh`.
    receiver: String,
    /// Whether a delivery reaches the receiver (false: an outage).
    reachable: bool,
    /// Answers 403 with `x-ratelimit-remaining: 0` to this many lists first.
    rate_limited: u32,
    /// The token may list but not redeliver (403 on attempts).
    read_only: bool,
    redeliveries_asked: u32,
    list_requests: u32,
    /// The host the `Link` header names (default the stand-in's own, as
    /// GitHub names the host asked; set to check it is never followed).
    link_base: Option<String>,
    /// Each authorized request's Accept and X-GitHub-Api-Version.
    asked_as: Vec<(String, String)>,
    /// How long ago a delivery sent now is dated.
    age: chrono::Duration,
    /// Redelivery requests answered with this status instead of 202.
    redeliver_status: Option<u16>,
}

/// GitHub's hook deliveries, as its REST API answers them.
#[derive(Clone)]
struct GitHubStandIn {
    url: String,
    inner: Arc<Mutex<Inner>>,
    client: reqwest::Client,
}

impl GitHubStandIn {
    async fn start() -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            next_id: 1000,
            reachable: true,
            age: chrono::Duration::minutes(30),
            ..Default::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stand_in = Self {
            url: format!("http://{}", listener.local_addr().unwrap()),
            inner,
            client: reqwest::Client::new(),
        };
        let app = axum::Router::new()
            .route(
                "/repos/{owner}/{repo}/hooks/{hook}/deliveries",
                axum::routing::get(list_repo),
            )
            .route(
                "/orgs/{org}/hooks/{hook}/deliveries",
                axum::routing::get(list_org),
            )
            .route(
                "/repos/{owner}/{repo}/hooks/{hook}/deliveries/{id}/attempts",
                axum::routing::post(redeliver_repo),
            )
            .route(
                "/orgs/{org}/hooks/{hook}/deliveries/{id}/attempts",
                axum::routing::post(redeliver_org),
            )
            .with_state(stand_in.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        stand_in
    }

    fn aim_at(&self, app: &TestApp) {
        self.inner.lock().unwrap().receiver = app.url("/hooks/gh");
    }

    fn set_reachable(&self, reachable: bool) {
        self.inner.lock().unwrap().reachable = reachable;
    }

    /// GitHub sends a delivery of `guid` (a push event): to the receiver if
    /// reachable, else it records the failure (status 0) as GitHub does.
    /// `recorded`: the status GitHub notes when it differs from the
    /// receiver's answer (a timeout on GitHub's side after our 200).
    async fn send(&self, guid: &str, redelivery: bool, recorded: Option<u16>) -> u16 {
        let (receiver, reachable, payload) = {
            let inner = self.inner.lock().unwrap();
            let payload = inner
                .deliveries
                .iter()
                .find(|d| d.guid == guid)
                .map(|d| d.payload.clone())
                .unwrap_or_else(|| json!({"ref": "refs/heads/main", "after": guid}).to_string());
            (inner.receiver.clone(), inner.reachable, payload)
        };
        let status = if reachable {
            github_request(&self.client, &receiver, guid, &payload, SIGNING.as_bytes())
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        } else {
            0
        };
        let mut inner = self.inner.lock().unwrap();
        inner.next_id += 1;
        let id = inner.next_id;
        let delivered_at = chrono::Utc::now() - inner.age;
        inner.deliveries.push(Stored {
            id,
            guid: guid.to_owned(),
            delivered_at,
            redelivery,
            status_code: recorded.unwrap_or(status),
            payload,
        });
        status
    }

    fn redeliveries_asked(&self) -> u32 {
        self.inner.lock().unwrap().redeliveries_asked
    }
}

/// GitHub's checks on every request: a token (`Bearer` or `token`), a
/// User-Agent (GitHub refuses requests without one).
fn refused(s: &GitHubStandIn, headers: &HeaderMap) -> Option<Response> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    if header("user-agent").is_empty() {
        return Some(
            (
                StatusCode::FORBIDDEN,
                axum::Json(json!({"message": "Request forbidden by administrative rules. Please make sure your request has a User-Agent header"})),
            )
                .into_response(),
        );
    }
    let auth = header("authorization");
    if auth != format!("Bearer {TOKEN}") && auth != format!("token {TOKEN}") {
        return Some(
            (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"message": "Bad credentials",
                    "documentation_url": "https://docs.github.com/rest", "status": "401"})),
            )
                .into_response(),
        );
    }
    let mut inner = s.inner.lock().unwrap();
    inner.asked_as.push((
        header("accept").to_owned(),
        header("x-github-api-version").to_owned(),
    ));
    if inner.rate_limited > 0 {
        inner.rate_limited -= 1;
        let reset = (chrono::Utc::now().timestamp() + 1).to_string();
        return Some(
            (
                StatusCode::FORBIDDEN,
                [
                    ("x-ratelimit-limit", "5000".to_owned()),
                    ("x-ratelimit-remaining", "0".to_owned()),
                    ("x-ratelimit-reset", reset),
                ],
                axum::Json(json!({"message": "API rate limit exceeded for user ID 1."})),
            )
                .into_response(),
        );
    }
    None
}

async fn list_repo(
    State(s): State<GitHubStandIn>,
    Path((owner, repo, hook)): Path<(String, String, u64)>,
    headers: HeaderMap,
    query: RawQuery,
) -> Response {
    assert_eq!((owner.as_str(), repo.as_str(), hook), ("acme", "shop", 42));
    list(
        &s,
        &headers,
        query.0,
        &format!("repos/{owner}/{repo}/hooks/{hook}"),
    )
}

async fn list_org(
    State(s): State<GitHubStandIn>,
    Path((org, hook)): Path<(String, u64)>,
    headers: HeaderMap,
    query: RawQuery,
) -> Response {
    assert_eq!((org.as_str(), hook), ("acme", 7));
    list(&s, &headers, query.0, &format!("orgs/{org}/hooks/{hook}"))
}

fn list(s: &GitHubStandIn, headers: &HeaderMap, query: Option<String>, path: &str) -> Response {
    if let Some(r) = refused(s, headers) {
        return r;
    }
    let mut inner = s.inner.lock().unwrap();
    inner.list_requests += 1;
    let params: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let one = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let per_page: usize = one("per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
        .min(100);
    // The cursor: deliveries older than the id it names.
    let before: u64 = one("cursor")
        .and_then(|c| c.strip_prefix("v1_").and_then(|i| i.parse().ok()))
        .unwrap_or(u64::MAX);
    let mut listed: Vec<&Stored> = inner.deliveries.iter().filter(|d| d.id < before).collect();
    listed.sort_by_key(|d| std::cmp::Reverse(d.id));
    let more = listed.len() > per_page;
    listed.truncate(per_page);
    let body: Vec<Value> = listed
        .iter()
        .map(|d| {
            json!({"id": d.id, "guid": d.guid, "delivered_at": d.delivered_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                "redelivery": d.redelivery, "duration": 0.27,
                "status": if d.status_code == 0 { "failed to connect to host".to_owned() } else { "OK".to_owned() },
                "status_code": d.status_code, "event": "push", "action": null,
                "installation_id": null, "repository_id": 1296269, "throttled_at": null})
        })
        .collect();
    let mut response = axum::Json(body).into_response();
    if more {
        let last = listed.last().unwrap().id;
        let base = inner.link_base.clone().unwrap_or_else(|| s.url.clone());
        let link = format!(
            "<{base}/{path}/deliveries?per_page={per_page}&cursor=v1_{last}>; rel=\"next\""
        );
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

async fn redeliver_repo(
    State(s): State<GitHubStandIn>,
    Path((_owner, _repo, _hook, id)): Path<(String, String, u64, u64)>,
    headers: HeaderMap,
) -> Response {
    redeliver(s, headers, id)
}

async fn redeliver_org(
    State(s): State<GitHubStandIn>,
    Path((_org, _hook, id)): Path<(String, u64, u64)>,
    headers: HeaderMap,
) -> Response {
    redeliver(s, headers, id)
}

fn redeliver(s: GitHubStandIn, headers: HeaderMap, id: u64) -> Response {
    if let Some(r) = refused(&s, &headers) {
        return r;
    }
    let guid = {
        let mut inner = s.inner.lock().unwrap();
        if inner.read_only {
            return (
                StatusCode::FORBIDDEN,
                axum::Json(json!({"message": "Resource not accessible by personal access token"})),
            )
                .into_response();
        }
        if let Some(status) = inner.redeliver_status {
            let status = StatusCode::from_u16(status).unwrap();
            return (
                status,
                [("retry-after", "0")],
                axum::Json(json!({"message": "Validation Failed"})),
            )
                .into_response();
        }
        let Some(d) = inner.deliveries.iter().find(|d| d.id == id) else {
            return (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"message": "Not Found"})),
            )
                .into_response();
        };
        let guid = d.guid.clone();
        inner.redeliveries_asked += 1;
        guid
    };
    // Sent after the answer, as GitHub queues it.
    let again = s.clone();
    tokio::spawn(async move {
        again.send(&guid, true, None).await;
    });
    (StatusCode::ACCEPTED, axum::Json(json!({}))).into_response()
}

fn config(
    stand_in: &GitHubStandIn,
    destination: &str,
    token: &str,
    hook: &str,
) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "gh"
provider = "github"
secrets = ["{SIGNING}"]
destination = "{destination}"

[source.reconcile]
api_base = "{}"
token = "{token}"
{hook}
every_minutes = 0
"#,
            stand_in.url
        ),
        &[],
    )
}

const REPO_HOOK: &str = "repository = \"acme/shop\"\nhook_id = 42";

async fn reconcile(app: &TestApp, token: &str, body: Value) -> (u16, Value) {
    reconcile_over_api(app, token, "gh", body).await
}

/// The stand-in, a destination and an app reconciling the repository hook,
/// the stand-in delivering to it.
async fn start(pool: &PgPool) -> (GitHubStandIn, Destination, TestApp) {
    let stand_in = GitHubStandIn::start().await;
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(
        pool.clone(),
        config(&stand_in, &destination.url, TOKEN, REPO_HOOK),
    )
    .await;
    stand_in.aim_at(&app);
    (stand_in, destination, app)
}

fn counts(v: &Value) -> [i64; 6] {
    [
        "seen",
        "already_received",
        "redelivery_requested",
        "still_missing",
        "provider_failed_we_completed",
        "recovered",
    ]
    .map(|k| v[k].as_i64().unwrap_or(-1))
}

/// Waits until GitHub has sent the redeliveries it was asked for and the
/// receiver's work is done.
async fn settle(app: &TestApp, stand_in: &GitHubStandIn, redeliveries: usize) {
    for _ in 0..200 {
        let sent = stand_in
            .inner
            .lock()
            .unwrap()
            .deliveries
            .iter()
            .filter(|d| d.redelivery)
            .count();
        if sent >= redeliveries {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.drain().await;
}

/// Thirty pushes, ten lost to a receiver outage: a run asks GitHub to send
/// the ten again, they arrive signed through the receiver and are forwarded
/// once each; the next run finds nothing missing; one GitHub counts failed
/// though we completed it is reported as such; a dry run asks for nothing.
#[sqlx::test(migrator = "MIGRATOR")]
async fn deliveries_lost_to_an_outage_are_redelivered_and_forwarded_once(pool: PgPool) {
    let (stand_in, destination, app) = start(&pool).await;
    let operator = make_token(&pool, "ops", "operator", None).await;
    for i in 0..30 {
        let guid = format!("d0c0ffee-0000-4000-8000-{i:012}");
        stand_in.set_reachable(i % 3 != 2);
        // The first: our 200 came after GitHub's timeout.
        let recorded = (i == 0).then_some(0);
        stand_in.send(&guid, false, recorded).await;
    }
    stand_in.set_reachable(true);
    app.drain().await;
    assert_eq!(destination.count(), 20);

    let (status, verdict) = reconcile(&app, &operator, json!({})).await;
    assert_eq!(status, 200, "{verdict}");
    assert_eq!(counts(&verdict), [30, 20, 10, 0, 1, 0], "{verdict}");
    assert_eq!(verdict["error"], Value::Null);
    settle(&app, &stand_in, 10).await;
    let mut keys = destination.keys();
    keys.sort();
    let mut expected: Vec<String> = (0..30)
        .map(|i| format!("gh:d0c0ffee-0000-4000-8000-{i:012}"))
        .collect();
    expected.sort();
    assert_eq!(keys, expected, "each push forwarded exactly once");
    // Nothing entered unsigned: every event came through the receiver.
    let recovered: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE reconcile_run_id IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(recovered, 0);

    // The next run confirms they arrived.
    let (_, again) = reconcile(&app, &operator, json!({})).await;
    assert_eq!(counts(&again), [30, 30, 0, 0, 1, 0], "{again}");
    assert_eq!(stand_in.redeliveries_asked(), 10);
    // Asked as GitHub documents it, every time.
    let asked_as = stand_in.inner.lock().unwrap().asked_as.clone();
    assert!(!asked_as.is_empty());
    assert!(
        asked_as
            .iter()
            .all(|(a, v)| a == "application/vnd.github+json" && v == "2022-11-28"),
        "{asked_as:?}"
    );

    // Two more lost; a dry run reports them and asks for nothing.
    stand_in.set_reachable(false);
    stand_in
        .send("d0c0ffee-0000-4000-8000-new000000001", false, None)
        .await;
    stand_in
        .send("d0c0ffee-0000-4000-8000-new000000002", false, None)
        .await;
    stand_in.set_reachable(true);
    let (_, dry) = reconcile(&app, &operator, json!({"dry_run": true})).await;
    assert_eq!(counts(&dry), [32, 30, 0, 2, 1, 0], "{dry}");
    assert_eq!(stand_in.redeliveries_asked(), 10);

    // The CLI, as an operator runs it.
    let out = run_cli(&app, &operator, &["reconcile", "--source", "gh", "--json"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counts(&cli), [32, 30, 2, 0, 1, 0], "{cli}");
    settle(&app, &stand_in, 12).await;
    assert_eq!(destination.count(), 32);
    assert_eq!(destination.keys().len(), 32);

    // Twelve keys found missing, each counted once however many runs saw it.
    let missed: i64 = sqlx::query_scalar("SELECT missed FROM reconcile_totals WHERE source = 'gh'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(missed, 12);
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("replaysafe_reconcile_missed_total{source=\"gh\"} 12"),
        "{metrics}"
    );
    assert!(
        metrics.contains("replaysafe_reconcile_last_run_timestamp_seconds{source=\"gh\"}"),
        "{metrics}"
    );
    // The alert rule: any event the provider had that we did not.
    let holding = replaysafe_core::alerts::rules::evaluate(
        &pool,
        &app.config.alert_rules,
        &Default::default(),
    )
    .await
    .unwrap();
    let missed = holding
        .iter()
        .find(|c| c.rule == "missed_events" && c.source == "gh")
        .expect("missed_events holds");
    assert_eq!(missed.figures["missed_events"], 12.0);
    assert_eq!(missed.link, "/reconciliation?source=gh");
}

/// A delivery GitHub cannot get through is asked for again with growing
/// spacing (a run soon after a request waits), at most eight times, then
/// reported given up; its deliveries span the list's pages, walked with
/// GitHub's cursor on our own base (the Link names api.github.com); one
/// older than the lookback is not compared.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_delivery_that_never_arrives_is_asked_for_with_spacing_then_given_up(pool: PgPool) {
    let (stand_in, _destination, app) = start(&pool).await;
    // The Link names another host: the cursor is read, the host never asked.
    stand_in.inner.lock().unwrap().link_base = Some("https://api.github.com".into());
    let operator = make_token(&pool, "ops", "operator", None).await;
    stand_in.set_reachable(false);
    stand_in.inner.lock().unwrap().age = chrono::Duration::hours(80);
    stand_in.send("older-than-the-lookback", false, None).await;
    stand_in.inner.lock().unwrap().age = chrono::Duration::minutes(30);
    stand_in.send("never-arrives", false, None).await;
    stand_in.set_reachable(true);
    for i in 0..249 {
        stand_in.send(&format!("page-{i:04}"), false, None).await;
    }
    app.drain().await;
    stand_in.set_reachable(false);
    let finding = || async {
        sqlx::query_as::<_, (String, Option<String>, i32)>(
            "SELECT verdict, missing_why, redelivery_requests FROM reconcile_findings
             WHERE idem_key = 'never-arrives'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let (status, first) = reconcile(&app, &operator, json!({})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["pages"], 3, "{first}");
    assert_eq!(counts(&first), [250, 249, 1, 0, 0, 0], "{first}");
    // At once again: the request may still be answered, so none is sent,
    // and the finding keeps what the first run did.
    let (_, soon) = reconcile(&app, &operator, json!({})).await;
    assert_eq!(counts(&soon), [250, 249, 0, 1, 0, 0], "{soon}");
    assert_eq!(stand_in.redeliveries_asked(), 1);
    assert_eq!(finding().await, ("redelivery_requested".into(), None, 1));
    // Time passes between runs: each spacing (30 min, doubling) is over.
    for asked in 2..=8 {
        sqlx::query(
            "UPDATE reconcile_findings SET last_requested_at = now() - interval '100 days'",
        )
        .execute(&pool)
        .await
        .unwrap();
        let (_, verdict) = reconcile(&app, &operator, json!({})).await;
        assert_eq!(
            counts(&verdict),
            [250, 249, 1, 0, 0, 0],
            "request {asked}: {verdict}"
        );
    }
    sqlx::query("UPDATE reconcile_findings SET last_requested_at = now() - interval '100 days'")
        .execute(&pool)
        .await
        .unwrap();
    let (_, last) = reconcile(&app, &operator, json!({})).await;
    assert_eq!(counts(&last), [250, 249, 0, 1, 0, 0], "{last}");
    assert_eq!(stand_in.redeliveries_asked(), 8);
    assert_eq!(
        finding().await,
        ("missing".into(), Some("given_up".into()), 8)
    );
    let missed: i64 = sqlx::query_scalar("SELECT missed FROM reconcile_totals WHERE source = 'gh'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(missed, 1, "one key, counted once over ten runs");
}

/// Bad credentials, a token that may not redeliver, and GitHub's rate limit
/// (403, x-ratelimit-remaining 0): clear verdicts, waited out, never shown.
#[sqlx::test(migrator = "MIGRATOR")]
async fn github_refusals_and_rate_limits_end_in_clear_verdicts(pool: PgPool) {
    let stand_in = GitHubStandIn::start().await;
    let destination = Destination::start(vec![]).await;
    let org_hook = "organization = \"acme\"\nhook_id = 7";
    let bad = spawn_app(
        pool.clone(),
        config(&stand_in, &destination.url, "ghp_wrong", org_hook),
    )
    .await;
    let operator = make_token(&pool, "ops", "operator", None).await;
    let (status, verdict) = reconcile(&bad, &operator, json!({})).await;
    assert_eq!(status, 200, "{verdict}");
    let error = verdict["error"].as_str().unwrap();
    assert!(
        error.contains("401") && error.contains("Bad credentials"),
        "{error}"
    );
    assert!(!verdict.to_string().contains("ghp_wrong"));
    drop(bad);

    let app = spawn_app(
        pool.clone(),
        config(&stand_in, &destination.url, TOKEN, org_hook),
    )
    .await;
    stand_in.aim_at(&app);
    stand_in.send("ok-1", false, None).await;
    stand_in.inner.lock().unwrap().rate_limited = 2;
    let (_, verdict) = reconcile(&app, &operator, json!({})).await;
    assert_eq!(verdict["error"], Value::Null, "{verdict}");
    assert_eq!(counts(&verdict), [1, 1, 0, 0, 0, 0], "{verdict}");

    // A token that may read but not redeliver: the run says so.
    stand_in.set_reachable(false);
    stand_in.send("lost-1", false, None).await;
    stand_in.inner.lock().unwrap().read_only = true;
    let (_, verdict) = reconcile(&app, &operator, json!({})).await;
    let error = verdict["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("redeliver") && error.contains("403"),
        "{verdict}"
    );
    assert_eq!(counts(&verdict), [2, 1, 0, 1, 0, 0], "{verdict}");

    // GitHub cannot send this one again (422): missing, the run goes on.
    {
        let mut inner = stand_in.inner.lock().unwrap();
        inner.read_only = false;
        inner.redeliver_status = Some(422);
    }
    let (_, verdict) = reconcile(&app, &operator, json!({})).await;
    assert_eq!(verdict["error"], Value::Null, "{verdict}");
    assert_eq!(counts(&verdict), [2, 1, 0, 1, 0, 0], "{verdict}");
    let why: Option<String> =
        sqlx::query_scalar("SELECT missing_why FROM reconcile_findings WHERE idem_key = 'lost-1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(why.as_deref(), Some("refused"));
    // A rate limit on redeliveries past its retries stops the run's asking.
    stand_in.send("lost-2", false, None).await;
    stand_in.inner.lock().unwrap().redeliver_status = Some(429);
    let (_, verdict) = reconcile(&app, &operator, json!({})).await;
    let error = verdict["error"].as_str().unwrap_or_default();
    assert!(error.contains("429"), "{verdict}");
    assert_eq!(counts(&verdict), [3, 1, 0, 2, 0, 0], "{verdict}");
}

/// The stand-in answers as GitHub does: Octokit pages through its
/// deliveries by the Link header (`octokit.paginate`), reads each, and its
/// redelivery request gets 202.
#[tokio::test]
async fn octokit_reads_the_stand_in() {
    let stand_in = GitHubStandIn::start().await;
    stand_in.set_reachable(false);
    for i in 0..150 {
        stand_in.send(&format!("sdk-{i:03}"), false, None).await;
    }
    let listed = sdk_list(&["github", &stand_in.url, TOKEN, "acme", "shop", "42"]).await;
    let deliveries = listed["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 150, "{listed}");
    assert_eq!(deliveries[0]["guid"], "sdk-149", "newest first");
    assert_eq!(deliveries[149]["guid"], "sdk-000");
    assert!(deliveries
        .iter()
        .all(|d| d["status_code"] == 0 && d["delivered_at"].is_string()));
    assert_eq!(listed["redelivered"], 202);
    assert_eq!(stand_in.inner.lock().unwrap().list_requests, 2);
    assert_eq!(stand_in.redeliveries_asked(), 1);
}
