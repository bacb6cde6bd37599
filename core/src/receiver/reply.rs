//! The answers the receiver gives a provider: outcome JSON, a sync source's
//! stored answer, and each provider's quirks through its scheme.

use super::claim::{Claimed, Outcome};
use crate::config::{Mode, SourceConfig};
use crate::providers::{Answer, Inbound, Rejection};

/// What the HTTP layer sends back to the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
    pub outcome: Outcome,
    /// The delivery recorded for this request (None when nothing was stored).
    pub delivery_id: Option<i64>,
}

impl Reply {
    /// An answer the destination or the provider's scheme gave, for a delivery.
    pub fn from_answer(answer: Answer, outcome: Outcome, delivery_id: i64) -> Self {
        let mut headers = vec![("x-replaysafe-outcome", outcome.as_str().to_owned())];
        headers.extend(answer.headers);
        Self {
            status: answer.status,
            content_type: answer.content_type,
            body: answer.body,
            headers,
            outcome,
            delivery_id: Some(delivery_id),
        }
    }
}

/// The answer for a verified delivery, in the form its provider expects.
pub fn verified(source: &SourceConfig, req: &Inbound, claimed: &Claimed) -> Reply {
    let outcome = claimed.outcome;
    // Sync mode: a later duplicate gets the destination's stored answer, byte for byte.
    if let (Mode::Sync, Some(stored)) = (source.mode, &claimed.stored_response) {
        if matches!(outcome, Outcome::Completed | Outcome::Dead) {
            return Reply::from_answer(stored.answer(), outcome, claimed.delivery_id);
        }
    }
    let mut answer = json_answer(
        super::claim::status(outcome, source.mode),
        serde_json::json!({ "outcome": outcome, "event_id": claimed.event_id }),
    );
    source
        .scheme
        .shape_answer(&mut answer, req, outcome == Outcome::Claimed);
    Reply::from_answer(answer, outcome, claimed.delivery_id)
}

pub fn rejected(rejection: &Rejection) -> Reply {
    outcome_only(
        json_answer(
            rejection.status,
            serde_json::json!({ "outcome": Outcome::Rejected, "error": rejection.reason }),
        ),
        Outcome::Rejected,
    )
}

pub fn unavailable() -> Reply {
    let mut answer = json_answer(
        503,
        serde_json::json!({ "outcome": Outcome::Unavailable, "error": "storage unavailable; retry later" }),
    );
    answer.headers.push(("retry-after", "5".into()));
    outcome_only(answer, Outcome::Unavailable)
}

/// Load shed: too many claims wait, or too much body is being read. Nothing
/// was stored; the provider retries.
pub fn shed() -> Reply {
    let mut answer = json_answer(
        503,
        serde_json::json!({ "outcome": Outcome::Unavailable, "error": "too busy to take this delivery now; retry later" }),
    );
    answer.headers.push(("retry-after", "5".into()));
    outcome_only(answer, Outcome::Unavailable)
}

fn outcome_only(answer: Answer, outcome: Outcome) -> Reply {
    Reply {
        delivery_id: None,
        ..Reply::from_answer(answer, outcome, 0)
    }
}

fn json_answer(status: u16, body: serde_json::Value) -> Answer {
    Answer {
        status,
        content_type: "application/json".into(),
        body: body.to_string().into_bytes(),
        headers: Vec::new(),
    }
}
