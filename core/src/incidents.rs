//! Incidents (issue 40): failing attempts grouped by source, destination,
//! failure kind and fingerprint, the way on-call people think of them
//! ("billing answered 400 invalid currency to 41 events since 02:10").
//! The one module that opens an incident, counts into it and moves it
//! between states, each move guarded in SQL by the states it leaves:
//! open -> acknowledged -> resolved, open|acknowledged -> ignored,
//! ignored -> resolved; open|acknowledged -> resolved by itself after
//! `QUIET` without a failure of its kind while its destination answered
//! 2xx. Grouping runs in the rollup job over finished attempts
//! (`jobs::rollup`), never on the claim's or the recorder's path.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use replaysafe_types::incidents::{AffectedEvent, Incident, IncidentDetail, AFFECTED_SHOWN};
use replaysafe_types::states::IncidentState;
use replaysafe_types::time::Time;
use sqlx::{PgConnection, PgPool};

/// How long an incident must go without a failure of its kind, its
/// destination answering 2xx meanwhile, before it resolves by itself.
pub const QUIET: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// A fingerprint's length at most, in characters.
const FINGERPRINT_CHARS: usize = 200;

static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
        .expect("a valid pattern")
});
/// Runs of 8 or more letters and digits with a digit in them: ids and
/// hashes (`req_9f8e7d6c5b4a`'s tail, Stripe's `ch_3MtwBwLkdIwHu7ix28a3tqPa`),
/// not words.
static ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[0-9A-Za-z]{8,}").expect("a valid pattern"));
static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\d+(?:\.\d+)?").expect("a valid pattern"));

/// Whether an attempt is the destination's failure: it answered other
/// than 2xx, or could not be reached or timed out. replaysafe's own
/// (a worker that lost its lease, nothing to forward) are not.
pub fn destination_failed(status: Option<i16>, error: Option<&str>) -> bool {
    match status {
        Some(status) => !(200..300).contains(&status),
        None => {
            error.is_some_and(|e| e.starts_with("connection failed") || e.starts_with("timed out"))
        }
    }
}

/// A failure's kind: `HTTP 400`, or the transport error's kind (`timed
/// out`, `connection failed`, ...: what precedes its details).
pub fn kind_of(status: Option<i16>, error: Option<&str>) -> String {
    match status {
        Some(status) => format!("HTTP {status}"),
        None => {
            let error = error.unwrap_or("no answer");
            let end = error
                .find(':')
                .or_else(|| error.find(" after "))
                .unwrap_or(error.len());
            error[..end].trim().to_owned()
        }
    }
}

/// What makes two failures of one kind the same incident: the first
/// non-empty line of the answer (or of the transport error's details),
/// with UUIDs, ids (8 or more letters and digits, a digit among them) and
/// numbers replaced, cut to 200 characters.
pub fn fingerprint_of(status: Option<i16>, response: Option<&str>, error: Option<&str>) -> String {
    let text = match status {
        Some(_) => response.unwrap_or(""),
        None => error
            .and_then(|e| e.split_once(':').map(|(_, details)| details))
            .unwrap_or(""),
    };
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line = UUID.replace_all(line, "<uuid>");
    let line = ID.replace_all(&line, |c: &regex::Captures| {
        if c[0].bytes().any(|b| b.is_ascii_digit()) {
            "<id>".to_owned()
        } else {
            c[0].to_owned()
        }
    });
    let line = NUMBER.replace_all(&line, "<n>");
    line.chars().take(FINGERPRINT_CHARS).collect()
}

/// Failing attempts of one group within a fold.
struct Group {
    failures: i64,
    events: BTreeSet<i64>,
    first: Time,
    last: Time,
    sample: (i64, Option<i16>, Option<String>),
}

/// Folds the finished attempts `after < id <= upto` in: each failing one
/// counts into its group's live incident (opened if there is none), each
/// 2xx notes its destination's latest success. Run under the rollup's
/// progress row lock for `incidents`, so each attempt counts once.
pub async fn fold(tx: &mut PgConnection, after: i64, upto: i64) -> Result<u64, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT a.event_id, e.source, a.destination, a.status, a.response_excerpt, a.error,
                  a.finished_at AS "finished_at!: Time"
           FROM attempts a JOIN events e ON e.id = a.event_id
           WHERE a.id > $1 AND a.id <= $2 AND a.finished_at IS NOT NULL
           ORDER BY a.id"#,
        after,
        upto
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut groups: BTreeMap<(String, String, String, String), Group> = BTreeMap::new();
    let mut succeeded: BTreeMap<(String, String), Time> = BTreeMap::new();
    for r in &rows {
        if r.status.is_some_and(|s| (200..300).contains(&s)) {
            let at = succeeded
                .entry((r.source.clone(), r.destination.clone()))
                .or_insert(r.finished_at);
            *at = (*at).max(r.finished_at);
            continue;
        }
        if !destination_failed(r.status, r.error.as_deref()) {
            continue;
        }
        let key = (
            r.source.clone(),
            r.destination.clone(),
            kind_of(r.status, r.error.as_deref()),
            fingerprint_of(r.status, r.response_excerpt.as_deref(), r.error.as_deref()),
        );
        let group = groups.entry(key).or_insert_with(|| Group {
            failures: 0,
            events: BTreeSet::new(),
            first: r.finished_at,
            last: r.finished_at,
            sample: (
                r.event_id,
                r.status,
                r.response_excerpt.clone().or_else(|| r.error.clone()),
            ),
        });
        group.failures += 1;
        group.events.insert(r.event_id);
        group.first = group.first.min(r.finished_at);
        group.last = group.last.max(r.finished_at);
    }
    for ((source, destination, kind, fingerprint), g) in &groups {
        let id = sqlx::query_scalar!(
            "INSERT INTO incidents AS i (source, destination, kind, fingerprint, failures,
                                         first_seen_at, last_seen_at, sample_event_id,
                                         sample_status, sample_response)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (source, destination, kind, fingerprint) WHERE state <> 'resolved'
             DO UPDATE SET failures = i.failures + EXCLUDED.failures,
                           last_seen_at = greatest(i.last_seen_at, EXCLUDED.last_seen_at)
             RETURNING id",
            source,
            destination,
            kind,
            fingerprint,
            g.failures,
            // Chrono's times (sqlx's macros name time's for timestamptz).
            g.first as _,
            g.last as _,
            g.sample.0,
            g.sample.1,
            g.sample.2
        )
        .fetch_one(&mut *tx)
        .await?;
        let events: Vec<i64> = g.events.iter().copied().collect();
        sqlx::query!(
            "WITH added AS (
                 INSERT INTO incident_events (incident_id, event_id)
                 SELECT $1, unnest($2::bigint[])
                 ON CONFLICT DO NOTHING RETURNING 1)
             UPDATE incidents SET affected_events = affected_events + (SELECT count(*) FROM added)
             WHERE id = $1",
            id,
            &events
        )
        .execute(&mut *tx)
        .await?;
    }
    if !succeeded.is_empty() {
        let (keys, times): (Vec<_>, Vec<Time>) = succeeded.into_iter().unzip();
        let (sources, destinations): (Vec<String>, Vec<String>) = keys.into_iter().unzip();
        sqlx::query!(
            "UPDATE incidents i SET last_success_at = greatest(i.last_success_at, s.at)
             FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS s(source, destination, at)
             WHERE i.source = s.source AND i.destination = s.destination
               AND i.state IN ('open', 'acknowledged')",
            &sources,
            &destinations,
            &times as _
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(rows.len() as u64)
}

/// Resolves the live incidents that went `quiet` without a failure of
/// their kind while their destination answered 2xx after the last one, and
/// none of their events waits for another attempt there (a retry hours
/// away would otherwise reopen it as a new one); returns their ids. Ignored
/// ones stay ignored. Under the fold's progress row lock, so it judges what
/// the fold has taken in, and never crosses it on an incident's row.
pub async fn resolve_quiet(
    pool: &PgPool,
    quiet: chrono::TimeDelta,
) -> Result<Vec<i64>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT last_id FROM rollup_progress WHERE name = 'incidents' FOR UPDATE")
        .fetch_one(&mut *tx)
        .await?;
    let resolved = sqlx::query_scalar!(
        "UPDATE incidents i SET state = 'resolved', state_changed_at = now(), state_changed_by = NULL
         WHERE i.state IN ('open', 'acknowledged')
           AND i.last_seen_at < now() - make_interval(secs => $1::float8)
           AND i.last_success_at > i.last_seen_at
           AND NOT EXISTS (
               SELECT 1 FROM incident_events ie
               JOIN dispatches p ON p.event_id = ie.event_id AND p.destination = i.destination
               WHERE ie.incident_id = i.id AND p.state IN ('queued', 'processing', 'retrying'))
         RETURNING i.id",
        quiet.as_seconds_f64()
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(resolved)
}

/// Deletes incidents resolved more than `retention_days` ago (their
/// events go with them), at most `batch`; how many went.
pub async fn prune(pool: &PgPool, retention_days: u32, batch: i64) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "DELETE FROM incidents WHERE id IN (
             SELECT id FROM incidents
             WHERE state = 'resolved' AND state_changed_at < now() - make_interval(days => $1)
             ORDER BY id LIMIT $2)",
        retention_days as i32,
        batch
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// A move an operator makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    Acknowledge,
    Resolve,
    Ignore,
}

impl Move {
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "ack" | "acknowledge" => Some(Move::Acknowledge),
            "resolve" => Some(Move::Resolve),
            "ignore" => Some(Move::Ignore),
            _ => None,
        }
    }

    /// The state it moves to, and the states it may leave.
    fn states(self) -> (IncidentState, &'static [IncidentState]) {
        use IncidentState::*;
        match self {
            Move::Acknowledge => (Acknowledged, &[Open]),
            Move::Resolve => (Resolved, &[Open, Acknowledged, Ignored]),
            Move::Ignore => (Ignored, &[Open, Acknowledged]),
        }
    }

    /// Its audit action.
    pub fn action(self) -> &'static str {
        match self {
            Move::Acknowledge => "incident.ack",
            Move::Resolve => "incident.resolve",
            Move::Ignore => "incident.ignore",
        }
    }
}

/// Why a move was refused.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("no incident has id {0}")]
    Unknown(i64),
    #[error("incident {id} is {state}: it cannot be {verb} from there")]
    From {
        id: i64,
        state: IncidentState,
        verb: &'static str,
    },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Moves an incident, guarded by the states the move leaves: of two
/// operators at once, the second finds it moved (`MoveError::From`).
pub async fn apply(pool: &PgPool, id: i64, how: Move, by: &str) -> Result<Incident, MoveError> {
    let (to, from) = how.states();
    let from: Vec<String> = from.iter().map(|s| s.as_str().to_owned()).collect();
    let moved = sqlx::query_scalar!(
        "UPDATE incidents SET state = $2, state_changed_at = now(), state_changed_by = $3
         WHERE id = $1 AND state = ANY($4)
         RETURNING id",
        id,
        to.as_str(),
        by,
        &from
    )
    .fetch_optional(pool)
    .await?;
    let now = get(pool, id).await?.ok_or(MoveError::Unknown(id))?;
    if moved.is_none() {
        let verb = match how {
            Move::Acknowledge => "acknowledged",
            Move::Resolve => "resolved",
            Move::Ignore => "ignored",
        };
        return Err(MoveError::From {
            id,
            state: now.state,
            verb,
        });
    }
    Ok(now)
}

/// Incidents newest first (by their last failure), at most `limit`;
/// `state` and `source` narrow them.
pub async fn list(
    pool: &PgPool,
    state: Option<IncidentState>,
    source: Option<&str>,
    limit: i64,
) -> Result<Vec<Incident>, sqlx::Error> {
    rows(pool, None, state, source, limit).await
}

pub async fn get(pool: &PgPool, id: i64) -> Result<Option<Incident>, sqlx::Error> {
    Ok(rows(pool, Some(id), None, None, 1).await?.pop())
}

async fn rows(
    pool: &PgPool,
    id: Option<i64>,
    state: Option<IncidentState>,
    source: Option<&str>,
    limit: i64,
) -> Result<Vec<Incident>, sqlx::Error> {
    sqlx::query_as!(
        Incident,
        r#"SELECT id, source, destination, kind, fingerprint,
                  state AS "state: IncidentState", failures, affected_events AS count,
                  first_seen_at AS "first_seen_at: Time", last_seen_at AS "last_seen_at: Time",
                  state_changed_at AS "state_changed_at: Time", state_changed_by,
                  sample_status, sample_response, sample_event_id
           FROM incidents
           WHERE ($1::bigint IS NULL OR id = $1)
             AND ($2::text IS NULL OR state = $2) AND ($3::text IS NULL OR source = $3)
           ORDER BY last_seen_at DESC, id DESC
           LIMIT $4"#,
        id,
        state.map(IncidentState::as_str),
        source,
        limit
    )
    .fetch_all(pool)
    .await
}

/// An incident with its newest affected events and how many of them are
/// dead at its destination now.
pub async fn detail(pool: &PgPool, id: i64) -> Result<Option<IncidentDetail>, sqlx::Error> {
    let Some(incident) = get(pool, id).await? else {
        return Ok(None);
    };
    let affected = sqlx::query_as!(
        AffectedEvent,
        r#"SELECT ie.event_id, e.idem_key, coalesce(p.state, 'unknown') AS "state!"
           FROM incident_events ie
           JOIN events e ON e.id = ie.event_id
           LEFT JOIN dispatches p ON p.event_id = ie.event_id AND p.destination = $2
           WHERE ie.incident_id = $1
           ORDER BY ie.event_id DESC
           LIMIT $3"#,
        id,
        incident.destination,
        AFFECTED_SHOWN
    )
    .fetch_all(pool)
    .await?;
    let dead_now = dead_now(pool, id, &incident.destination).await?;
    Ok(Some(IncidentDetail {
        incident,
        affected,
        dead_now,
    }))
}

async fn dead_now(pool: &PgPool, id: i64, destination: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM (
               SELECT 1 FROM incident_events ie
               JOIN dispatches p ON p.event_id = ie.event_id AND p.destination = $2
               WHERE ie.incident_id = $1 AND p.state = 'dead'
               LIMIT $3) d"#,
        id,
        destination,
        replaysafe_types::jobs::JOB_MAX_EVENTS + 1
    )
    .fetch_one(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_message_with_other_ids_is_one_fingerprint_and_another_message_another() {
        let fp = |body: &str| fingerprint_of(Some(400), Some(body), None);
        let a = fp("invalid currency 'xyz' for order 1234\nat line 2");
        let b = fp("invalid currency 'xyz' for order 98765");
        assert_eq!(a, b);
        assert_eq!(a, "invalid currency 'xyz' for order <n>");
        assert_ne!(a, fp("amount must be positive"));
        assert_eq!(
            fp(
                r#"{"error":"no customer 3f2a9c1e-0b1d-4c6e-9f00-1a2b3c4d5e6f","request":"req_9f8e7d6c5b4a"}"#
            ),
            r#"{"error":"no customer <uuid>","request":"req_<id>"}"#
        );
        // Words without a digit stay words; Stripe's ids are ids.
        assert_eq!(fp("deadbeefcafe accepted"), "deadbeefcafe accepted");
        assert_eq!(
            fp("No such charge: 'ch_3MtwBwLkdIwHu7ix28a3tqPa'"),
            fp("No such charge: 'ch_1Aa2Bb3Cc4Dd5Ee6Ff7Gg8Hh'")
        );
        assert_eq!(fp("order 1234567890 failed"), "order <id> failed");
        assert_eq!(fp("\n\n   \n  first line  \nsecond"), "first line");
        assert_eq!(fp(&"x".repeat(500)).chars().count(), 200);
    }

    #[test]
    fn only_the_destinations_failures_count() {
        assert!(destination_failed(Some(400), None));
        assert!(destination_failed(
            Some(503),
            Some("response body cut short: reset")
        ));
        assert!(!destination_failed(Some(204), None));
        assert!(destination_failed(None, Some("timed out after 10 s")));
        assert!(destination_failed(None, Some("connection failed: refused")));
        assert!(!destination_failed(
            None,
            Some("worker lost its lease; taken over")
        ));
        assert!(!destination_failed(
            None,
            Some("nothing to forward: the payload is gone")
        ));
    }

    #[test]
    fn a_transport_error_is_its_kind_and_its_details() {
        assert_eq!(kind_of(Some(503), None), "HTTP 503");
        assert_eq!(kind_of(None, Some("timed out after 10 s")), "timed out");
        assert_eq!(
            kind_of(
                None,
                Some("connection failed: Connection refused (os error 111)")
            ),
            "connection failed"
        );
        assert_eq!(
            fingerprint_of(
                None,
                None,
                Some("connection failed: Connection refused (os error 111)")
            ),
            "Connection refused (os error <n>)"
        );
        assert_eq!(fingerprint_of(None, None, Some("timed out after 10 s")), "");
        assert_eq!(kind_of(None, None), "no answer");
    }

    #[test]
    fn moves_leave_only_the_states_they_name() {
        use IncidentState::*;
        assert_eq!(Move::Acknowledge.states(), (Acknowledged, &[Open][..]));
        assert!(!Move::Ignore.states().1.contains(&Resolved));
        assert!(!Move::Acknowledge.states().1.contains(&Ignored));
        assert_eq!(Move::parse("ack"), Some(Move::Acknowledge));
        assert_eq!(Move::parse("reopen"), None);
    }
}
