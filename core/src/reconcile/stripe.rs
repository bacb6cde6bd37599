//! Stripe: `GET /v1/events` over the window, newest first, 100 a page
//! (`starting_after` the page's last id). An event's id is the key a
//! delivery of it is claimed under, so the comparison is exact: an id never
//! claimed is entered through the claim with the event as Stripe listed it
//! (byte for byte), and forwarded once like any other.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Counts, Finding, FindingVerdict, MissingWhy, Run};
use crate::config::reconcile::EventList;
use crate::receiver::claim::{Outcome, Recovered};
use crate::receiver::{accept_recovered, Inbound, NotRecovered};
use replaysafe_types::states::State;

/// Stripe takes at most this many exact `types[]`; more (or any pattern)
/// are matched here instead.
const MAX_TYPES_ASKED: usize = 20;

#[derive(Deserialize)]
struct Page<'a> {
    #[serde(borrow)]
    data: Vec<&'a RawValue>,
    has_more: bool,
}

#[derive(Deserialize)]
struct Listed {
    id: String,
    #[serde(rename = "type", default)]
    event_type: String,
    /// Endpoints that have not yet answered it 2xx (the account's, all of them).
    #[serde(default)]
    pending_webhooks: i64,
}

pub(super) async fn compare(
    run: &Run<'_>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), String> {
    let EventList::Stripe {
        types, api_version, ..
    } = &run.reconcile.list
    else {
        return Err("not a Stripe source".into());
    };
    let url = run
        .reconcile
        .api_base
        .join("v1/events")
        .map_err(|e| format!("api_base: {e}"))?;
    let exact =
        types.len() <= MAX_TYPES_ASKED && types.iter().all(|t| !t.contains(['*', '?', '[', '{']));
    let mut starting_after: Option<String> = None;
    let mut pages = 0;
    loop {
        if let Some(stop) = run.over_budget(pages) {
            return Err(stop);
        }
        let mut query: Vec<(String, String)> = vec![
            ("limit".into(), "100".into()),
            ("created[gte]".into(), from.timestamp().to_string()),
            ("created[lte]".into(), to.timestamp().to_string()),
        ];
        if exact {
            query.extend(types.iter().map(|t| ("types[]".to_owned(), t.clone())));
        }
        if let Some(after) = &starting_after {
            query.push(("starting_after".into(), after.clone()));
        }
        let mut request = run
            .client
            .get(url.clone())
            .query(&query)
            .bearer_auth(run.reconcile.credential.expose());
        if let Some(version) = api_version {
            request = request.header("Stripe-Version", version);
        }
        let body = run.send(request).await.map_err(|f| f.message)?.body;
        let page: Page = serde_json::from_slice(&body)
            .map_err(|e| format!("Stripe's answer is not a list of events: {e}"))?;
        pages += 1;
        let mut listed = Vec::with_capacity(page.data.len());
        for raw in &page.data {
            let event: Listed = serde_json::from_str(raw.get())
                .map_err(|e| format!("Stripe listed an event without an id: {e}"))?;
            listed.push((event, *raw));
        }
        let from_request = format!(
            "GET {url}?created[gte]={}&created[lte]={}{}",
            from.timestamp(),
            to.timestamp(),
            starting_after
                .as_ref()
                .map(|a| format!("&starting_after={a}"))
                .unwrap_or_default()
        );
        starting_after = listed.last().map(|(e, _)| e.id.clone());
        let wanted: Vec<(Listed, &RawValue)> = listed
            .into_iter()
            .filter(|(e, _)| run.reconcile.list.wants_type(&e.event_type))
            .collect();
        let counts = claim_missing(run, &wanted, &from_request).await?;
        run.add_pages(1, counts).await?;
        if !page.has_more || starting_after.is_none() {
            return Ok(());
        }
    }
}

/// Compares a page's events with the claimed keys and recovers the rest.
async fn claim_missing(
    run: &Run<'_>,
    page: &[(Listed, &RawValue)],
    from_request: &str,
) -> Result<Counts, String> {
    let pool = &run.services.pool;
    let ids: Vec<String> = page.iter().map(|(e, _)| e.id.clone()).collect();
    let known = run.claimed(&ids).await?;
    let mut c = Counts {
        seen: page.len() as i64,
        ..Default::default()
    };
    let mut found = Vec::new();
    let mut finding = |event: &Listed, verdict| {
        found.push(Finding {
            key: event.id.clone(),
            event_type: Some(event.event_type.clone()),
            verdict,
        })
    };
    for (event, raw) in page {
        if let Some(state) = known.get(&event.id) {
            c.already_received += 1;
            if event.pending_webhooks > 0 && *state == State::Completed {
                c.provider_failed_we_completed += 1;
            }
            continue;
        }
        if run.dry_run {
            c.still_missing += 1;
            finding(event, FindingVerdict::Missing(MissingWhy::DryRun));
            continue;
        }
        let inbound = Inbound {
            query: None,
            headers: vec![("content-type".into(), "application/json".into())],
            body: raw.get().as_bytes().to_vec(),
            remote_addr: None,
        };
        let recovered = Recovered {
            run_id: run.id,
            from: from_request.to_owned(),
        };
        match accept_recovered(pool, run.source, &inbound, recovered).await {
            Ok(claimed) if claimed.outcome == Outcome::Claimed => {
                c.recovered += 1;
                finding(event, FindingVerdict::Recovered);
            }
            // A delivery claimed it meanwhile: one dedup decision, its.
            Ok(_) => c.already_received += 1,
            Err(NotRecovered::Key(why)) => {
                tracing::warn!(source = %run.source.slug, event = %event.id, %why, "a listed event could not be keyed");
                c.still_missing += 1;
                finding(event, FindingVerdict::Missing(MissingWhy::Unkeyed));
            }
            Err(NotRecovered::Database(e)) => {
                return Err(format!("could not claim a recovered event: {e}"))
            }
        }
    }
    if found.iter().any(|f| f.verdict == FindingVerdict::Recovered) {
        run.services.wake.work();
    }
    run.note_findings(&found).await?;
    Ok(c)
}
