//! The database's health as the workers see it: when their statements
//! last succeeded and the stretch of failures since, which sets how long a
//! takeover waits for a holder that could not record (`takeover_grace`).

use super::*;

/// When these workers' statements last succeeded, and the stretch of
/// failures (the database away) since: it began when the last statement
/// before it succeeded (the database may have gone any time after), or
/// before this process when none ever did, and lasts while failures come
/// less than a lease margin apart.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Health {
    last_ok: Option<Instant>,
    trouble: Option<Trouble>,
}

#[derive(Clone, Copy, Debug)]
struct Trouble {
    /// None: before this process started.
    began: Option<Instant>,
    last: Instant,
}

/// The longest a takeover waits on the database's trouble: a holder still
/// failing to record after this has had its chances (the database came
/// and went meanwhile).
const MAX_TAKEOVER_GRACE: Duration = Duration::from_secs(3600);

impl Workers {
    /// A statement's outcome: only the database being away is trouble (a
    /// statement refused for its content is not).
    pub(super) fn note(&self, failure: Option<bool>) {
        let now = Instant::now();
        let mut health = self.health.lock().expect("health lock");
        match failure {
            None => health.last_ok = Some(now),
            Some(false) => {}
            Some(true) => {
                health.trouble = Some(match health.trouble {
                    Some(t) if now - t.last < self.lease_margin => Trouble { last: now, ..t },
                    _ => Trouble {
                        began: health.last_ok,
                        last: now,
                    },
                });
            }
        }
    }

    /// Until a margin after the database's last trouble, only leases that
    /// expired before the trouble began are taken over. A holder that could
    /// not record its attempt while the database was away (however long: a
    /// failover takes pg_auto_failover about a minute) keeps trying and
    /// records it once the database is back, instead of the event being
    /// forwarded again by a worker that took it over.
    pub(super) fn takeover_grace(&self) -> Duration {
        let health = *self.health.lock().expect("health lock");
        match health.trouble {
            Some(t) if t.last.elapsed() < self.lease_margin => t
                .began
                .map_or(MAX_TAKEOVER_GRACE, |began| began.elapsed())
                .min(MAX_TAKEOVER_GRACE),
            _ => Duration::ZERO,
        }
    }
}
