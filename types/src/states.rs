//! States that travel as words on the wire and in the database, typed
//! everywhere between: each is a `text` column to sqlx (feature `sqlx`),
//! its snake_case word to serde, and `as_str`/`parse` to everything else.

use serde::{Deserialize, Serialize};

/// An enum of words: `Variant = "word"`, the word being the variant's
/// snake_case name (a test checks serde and sqlx agree with `as_str`).
macro_rules! words {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $word:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
        #[cfg_attr(feature = "sqlx", sqlx(type_name = "text", rename_all = "snake_case"))]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $word, )+
                }
            }

            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|s| s.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

words! {
    /// A destination's circuit breaker (`destination_gates.breaker`).
    #[derive(Default)]
    pub enum Breaker {
        /// Attempts go.
        #[default]
        Closed = "closed",
        /// Attempts wait, counting none, until the cool-down or an operator.
        Open = "open",
        /// One probe is out.
        HalfOpen = "half_open",
    }
}

words! {
    /// A dispatch's state (`dispatches.state`), and so an event's: dead while
    /// any of its dispatches is, completed once each is completed or filtered
    /// (`event_state()` in SQL). Spec section 5.
    pub enum State {
        Queued = "queued",
        Processing = "processing",
        Retrying = "retrying",
        Completed = "completed",
        Dead = "dead",
        /// The destination's filter does not take the event (dispatches only).
        Filtered = "filtered",
    }
}

impl State {
    /// Queued or retrying: waiting for an attempt.
    pub fn is_waiting(self) -> bool {
        matches!(self, State::Queued | State::Retrying)
    }
}

words! {
    /// What the dedup layer did with a delivery (`deliveries.outcome`, the
    /// `X-Replaysafe-Outcome` header; spec section 4).
    pub enum Outcome {
        /// The first of its key: stored, to be forwarded.
        Claimed = "claimed",
        /// A copy of an event already completed.
        Completed = "completed",
        /// A copy of an event still being worked on.
        InProgress = "in_progress",
        /// A copy of a dead-lettered event.
        Dead = "dead",
        /// Refused: a bad signature, a stale timestamp, no key, too large.
        Rejected = "rejected",
        /// Nothing could be stored (the database away): answered 503, never
        /// recorded.
        Unavailable = "unavailable",
        /// An operator's re-delivery refused before it reached the dedup layer
        /// (a bulk job's event no longer dead): a re-delivery's result only,
        /// never a delivery's.
        Refused = "refused",
    }
}

impl Outcome {
    /// A duplicate's outcome follows from the state of the event holding its key.
    pub fn of_event_state(state: State) -> Self {
        match state {
            State::Completed | State::Filtered => Outcome::Completed,
            State::Dead => Outcome::Dead,
            State::Queued | State::Processing | State::Retrying => Outcome::InProgress,
        }
    }

    /// A copy of an event replaysafe already holds.
    pub fn is_duplicate(self) -> bool {
        matches!(
            self,
            Outcome::Completed | Outcome::InProgress | Outcome::Dead
        )
    }
}

words! {
    /// A bulk re-delivery job's state (`bulk_jobs.state`).
    pub enum JobState {
        Queued = "queued",
        Running = "running",
        Done = "done",
        Cancelled = "cancelled",
        Failed = "failed",
    }
}

impl JobState {
    /// Done, cancelled or failed: nothing moves it again.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Cancelled | JobState::Failed
        )
    }
}

words! {
    /// An alert's state (`alerts.state`).
    pub enum AlertState {
        Firing = "firing",
        Resolved = "resolved",
    }
}

words! {
    /// An API token's state, from its revocation and expiry.
    pub enum TokenState {
        Live = "live",
        Expired = "expired",
        Revoked = "revoked",
    }
}

words! {
    /// An incident's state (`incidents.state`): failures of one kind at one
    /// destination, open until someone acknowledges, resolves or ignores
    /// it, or it resolves by itself.
    pub enum IncidentState {
        /// Failing, and nobody has said they are on it.
        Open = "open",
        /// Someone is on it.
        Acknowledged = "acknowledged",
        /// Over: by hand, or by itself after 10 minutes without a failure
        /// of its kind while its destination answered 2xx.
        Resolved = "resolved",
        /// Known and accepted: it counts on and notifies nobody.
        Ignored = "ignored",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_read_back<T>(all: &[T], as_str: fn(T) -> &'static str, parse: fn(&str) -> Option<T>)
    where
        T: Copy + PartialEq + std::fmt::Debug + Serialize,
    {
        for &s in all {
            assert_eq!(parse(as_str(s)), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), as_str(s), "serde's word");
        }
        assert_eq!(parse("no such word"), None);
    }

    #[test]
    fn every_state_reads_back_its_word() {
        words_read_back(Breaker::ALL, Breaker::as_str, Breaker::parse);
        words_read_back(State::ALL, State::as_str, State::parse);
        words_read_back(Outcome::ALL, Outcome::as_str, Outcome::parse);
        words_read_back(JobState::ALL, JobState::as_str, JobState::parse);
        words_read_back(AlertState::ALL, AlertState::as_str, AlertState::parse);
        words_read_back(TokenState::ALL, TokenState::as_str, TokenState::parse);
        words_read_back(
            IncidentState::ALL,
            IncidentState::as_str,
            IncidentState::parse,
        );
    }
}
