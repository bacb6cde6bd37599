//! GitHub: the hook's recent deliveries (`GET .../hooks/{id}/deliveries`,
//! newest first, 100 a page, the `Link` header's cursor), grouped by `guid`
//! (a redelivery keeps its delivery's guid, the key replaysafe claims it
//! under). The list carries no payload, so nothing unsigned is entered: a
//! guid never claimed gets a redelivery request (`POST
//! .../deliveries/{id}/attempts`), GitHub sends it again, signed, through
//! the receiver, and the next run finds it received.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{Counts, Finding, FindingVerdict, MissingWhy, Run};
use crate::config::reconcile::{EventList, GitHubHook};
use replaysafe_types::states::State;

/// A key is asked for again at most this many times, each request waiting
/// twice as long as the one before after `FIRST_SPACING` (30 min, 1 h, ...
/// 64 h: across GitHub's three days of deliveries), so an outage of ours
/// does not use them up; then it is the on-call engineer's to see.
const MAX_REQUESTS_PER_KEY: i32 = 8;
const FIRST_SPACING: chrono::Duration = chrono::Duration::minutes(30);

/// The REST API version the requests are written for.
const API_VERSION: &str = "2022-11-28";

#[derive(Deserialize)]
struct Delivery {
    id: u64,
    guid: String,
    delivered_at: DateTime<Utc>,
    /// The receiver's answer; 0 when none came (connection failed, timed out).
    #[serde(default)]
    status_code: i64,
    #[serde(default)]
    event: String,
    #[serde(default)]
    action: Option<String>,
}

/// One guid's deliveries within the window.
struct Group {
    /// The newest delivery's id: the one a redelivery request names.
    latest_id: u64,
    event_type: String,
    /// Whether any of its deliveries was answered 2xx.
    answered_ok: bool,
}

pub(super) async fn compare(
    run: &Run<'_>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), String> {
    let EventList::GitHub { hook, hook_id } = &run.reconcile.list else {
        return Err("not a GitHub source".into());
    };
    let hook_path = match hook {
        GitHubHook::Repository { owner, name } => format!("repos/{owner}/{name}/hooks/{hook_id}/"),
        GitHubHook::Organization(org) => format!("orgs/{org}/hooks/{hook_id}/"),
    };
    let hook_url = run
        .reconcile
        .api_base
        .join(&hook_path)
        .map_err(|e| format!("api_base: {e}"))?;
    let list_url = hook_url
        .join("deliveries")
        .map_err(|e| format!("api_base: {e}"))?;
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Group> = HashMap::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        if let Some(stop) = run.over_budget(pages) {
            // What was listed so far is still compared.
            compare_groups(run, pages, &order, &groups, &hook_url).await?;
            return Err(stop);
        }
        let mut url = list_url.clone();
        // The next page's query as GitHub's Link gives it, on our own base:
        // the Link's host is never followed.
        url.set_query(Some(cursor.as_deref().unwrap_or("per_page=100")));
        let answer = run
            .send(authorized(run, run.client.get(url)))
            .await
            .map_err(|f| f.message)?;
        pages += 1;
        let page: Vec<Delivery> = serde_json::from_slice(&answer.body)
            .map_err(|e| format!("GitHub's answer is not a list of deliveries: {e}"))?;
        let mut past_window = page.is_empty();
        for d in page {
            if d.delivered_at < from {
                past_window = true;
                continue;
            }
            if d.delivered_at > to {
                continue;
            }
            let ok = (200..300).contains(&d.status_code);
            match groups.get_mut(&d.guid) {
                Some(g) => {
                    g.answered_ok |= ok;
                    g.latest_id = g.latest_id.max(d.id);
                }
                None => {
                    order.push(d.guid.clone());
                    let event_type = match d.action {
                        Some(a) if !a.is_empty() => format!("{}.{a}", d.event),
                        _ => d.event,
                    };
                    groups.insert(
                        d.guid,
                        Group {
                            latest_id: d.id,
                            event_type,
                            answered_ok: ok,
                        },
                    );
                }
            }
        }
        cursor = next_query(&answer.headers);
        if past_window || cursor.is_none() {
            return compare_groups(run, pages, &order, &groups, &hook_url).await;
        }
    }
}

/// GitHub's request headers, and the token (GitHub takes `Bearer`).
fn authorized(run: &Run<'_>, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request
        .header(reqwest::header::ACCEPT, "application/vnd.github+json")
        .header("X-GitHub-Api-Version", API_VERSION)
        .header(
            reqwest::header::USER_AGENT,
            format!("replaysafe/{}", crate::telemetry::VERSION),
        )
        .bearer_auth(run.reconcile.credential.expose())
}

/// The query of the `Link` header's `rel="next"` target (RFC 8288).
fn next_query(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get_all(reqwest::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|link| {
            let (target, params) = link.split_once(';')?;
            let next = params.split(';').any(|p| {
                p.trim()
                    .strip_prefix("rel=")
                    .is_some_and(|r| r.trim_matches('"').split_whitespace().any(|r| r == "next"))
            });
            if !next {
                return None;
            }
            let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
            url::Url::parse(target).ok()?.query().map(str::to_owned)
        })
}

/// Compares the listed guids with the claimed keys, 100 at a time, and asks
/// GitHub to send again what never arrived.
async fn compare_groups(
    run: &Run<'_>,
    pages: u32,
    order: &[String],
    groups: &HashMap<String, Group>,
    hook_url: &url::Url,
) -> Result<(), String> {
    let pool = &run.services.pool;
    let mut pages_left = pages;
    let mut chunks = order.chunks(100).peekable();
    if chunks.peek().is_none() {
        return run.add_pages(pages, Counts::default()).await;
    }
    for chunk in chunks {
        let keys: Vec<String> = chunk.to_vec();
        let known = run.claimed(&keys).await?;
        let asked: HashMap<String, (i32, Option<DateTime<Utc>>, bool)> = sqlx::query!(
            r#"SELECT idem_key, redelivery_requests,
                      last_requested_at AS "last_requested_at: DateTime<Utc>",
                      missing_why IS NOT DISTINCT FROM 'refused' AS "refused!"
               FROM reconcile_findings WHERE source = $1 AND idem_key = ANY($2)"#,
            run.source.slug,
            &keys
        )
        .fetch_all(pool)
        .await
        .map_err(|e| format!("could not read the earlier findings: {e}"))?
        .into_iter()
        .map(|r| {
            (
                r.idem_key,
                (r.redelivery_requests, r.last_requested_at, r.refused),
            )
        })
        .collect();
        let mut c = Counts {
            seen: keys.len() as i64,
            ..Default::default()
        };
        let mut found = Vec::new();
        let mut stopped = None;
        for guid in chunk {
            let group = &groups[guid];
            if let Some(state) = known.get(guid) {
                c.already_received += 1;
                if !group.answered_ok && *state == State::Completed {
                    c.provider_failed_we_completed += 1;
                }
                continue;
            }
            let (requests, last, refused) = asked.get(guid).copied().unwrap_or((0, None, false));
            let verdict = if run.dry_run {
                FindingVerdict::Missing(MissingWhy::DryRun)
            } else if refused {
                FindingVerdict::Missing(MissingWhy::Refused)
            } else if stopped.is_some() {
                FindingVerdict::Missing(MissingWhy::NotTried)
            } else if requests >= MAX_REQUESTS_PER_KEY {
                FindingVerdict::Missing(MissingWhy::GivenUp)
            } else if last.is_some_and(|at| {
                Utc::now() < at + FIRST_SPACING * (1 << (requests - 1).clamp(0, 16))
            }) {
                FindingVerdict::Missing(MissingWhy::Waiting)
            } else {
                match redeliver(run, hook_url, group.latest_id).await {
                    Ok(()) => {
                        // Recorded at once: a run that dies next never asks
                        // more often than the bound.
                        let asked = Finding {
                            key: guid.clone(),
                            event_type: Some(group.event_type.clone()),
                            verdict: FindingVerdict::RedeliveryRequested,
                        };
                        run.note_findings(std::slice::from_ref(&asked)).await?;
                        c.redelivery_requested += 1;
                        continue;
                    }
                    // This delivery cannot be sent again (gone, too old):
                    // missing, and the run goes on.
                    Err(f) if f.status.is_some_and(|s| matches!(s, 404 | 410 | 422)) => {
                        tracing::warn!(source = %run.source.slug, delivery = group.latest_id, error = %f.message, "GitHub refused a redelivery");
                        FindingVerdict::Missing(MissingWhy::Refused)
                    }
                    // The credential, a rate limit past its retries, GitHub
                    // down, the run's time: nothing more is asked this run.
                    Err(f) => {
                        stopped = Some(f.message);
                        FindingVerdict::Missing(MissingWhy::NotTried)
                    }
                }
            };
            c.still_missing += 1;
            found.push(Finding {
                key: guid.clone(),
                event_type: Some(group.event_type.clone()),
                verdict,
            });
        }
        run.note_findings(&found).await?;
        run.add_pages(std::mem::take(&mut pages_left), c).await?;
        if let Some(e) = stopped {
            return Err(format!("asking GitHub to redeliver: {e}"));
        }
    }
    Ok(())
}

/// Asks GitHub to send delivery `id` again (answered 202).
async fn redeliver(run: &Run<'_>, hook_url: &url::Url, id: u64) -> Result<(), super::Failed> {
    let url = hook_url
        .join(&format!("deliveries/{id}/attempts"))
        .map_err(|e| super::Failed::run(format!("api_base: {e}")))?;
    run.send(authorized(run, run.client.post(url)))
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_is_found_among_others() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::LINK,
            r#"<https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100&cursor=v1_9>; rel="next", <https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100>; rel="first""#
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_query(&headers).as_deref(),
            Some("per_page=100&cursor=v1_9")
        );
        headers.insert(
            reqwest::header::LINK,
            r#"<https://x/?per_page=100>; rel="prev""#.parse().unwrap(),
        );
        assert_eq!(next_query(&headers), None);
        headers.insert(reqwest::header::LINK, "garbage; rel=next".parse().unwrap());
        assert_eq!(next_query(&headers), None);
    }
}
