//! How the receiver tells this process's workers there is work: once per
//! burst, not once per claim. Every wake-up used to cost a lease statement,
//! so a claim rate of thousands a second became thousands of leases a
//! second, most finding nothing (a paused source) or one event
//! (bench/README, "Leases per claim"). Now a claim sets a flag and wakes a
//! worker only if the flag was down; the worker that takes the flag leases
//! what was committed so far (a batch's worth; a full batch raises the flag
//! again for the rest), and claims while it leases raise the flag again.
//! Claims that no worker here can forward (sync mode, no destination, a
//! paused source) wake nobody.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use tokio::sync::Notify;

use crate::config::{Config, Mode, SourceConfig};

#[derive(Default)]
pub struct Wake {
    notify: Notify,
    /// Work was signalled since a worker last took the signal.
    pending: AtomicBool,
    /// Sources paused now (the config's, then the database's as the
    /// workers read it): their claims wait for the resume.
    paused: RwLock<HashSet<String>>,
}

impl Wake {
    /// With the config's paused sources, until the database's are read.
    pub fn for_config(config: &Config) -> Self {
        let wake = Self::default();
        wake.set_paused_sources(
            config
                .sources
                .iter()
                .filter(|s| s.paused)
                .map(|s| s.slug.clone())
                .collect(),
        );
        wake
    }

    /// An ack-mode claim of `source` committed.
    pub fn claimed(&self, source: &SourceConfig) {
        if source.mode != Mode::Ack || !source.forwards() || self.is_paused(&source.slug) {
            return;
        }
        self.work();
    }

    /// Work was queued (a claim, a re-delivery, a force, a resume).
    pub fn work(&self) {
        if !self.pending.swap(true, Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }

    /// A lease that failed keeps the signal it took for the next one, which
    /// runs at the poll's pace: waking a worker for it would spin, a try and
    /// a warning hundreds of times a second while the database is away.
    pub fn keep(&self) {
        self.pending.store(true, Ordering::SeqCst);
    }

    /// Takes the signal before a lease: true when work was signalled since
    /// the last take, so the lease about to run covers it.
    pub fn take(&self) -> bool {
        self.pending.swap(false, Ordering::SeqCst)
    }

    pub async fn notified(&self) {
        self.notify.notified().await
    }

    pub fn is_paused(&self, slug: &str) -> bool {
        self.paused.read().expect("never poisoned").contains(slug)
    }

    pub fn set_paused(&self, slug: &str, paused: bool) {
        let mut set = self.paused.write().expect("never poisoned");
        if paused {
            set.insert(slug.to_owned());
        } else {
            set.remove(slug);
        }
    }

    pub fn set_paused_sources(&self, slugs: HashSet<String>) {
        *self.paused.write().expect("never poisoned") = slugs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_signals_is_one_wake_and_taken_once() {
        let wake = Wake::default();
        for _ in 0..100 {
            wake.work();
        }
        assert!(wake.take());
        assert!(!wake.take(), "a second lease would find nothing new");
        wake.work();
        assert!(wake.take(), "work after the take is signalled again");
    }

    #[test]
    fn claims_no_worker_here_can_forward_wake_nobody() {
        let config = crate::config::parse_and_validate(
            None,
            r#"
[[source]]
slug = "ack"
provider = "github"
secrets = ["s"]
destination = "http://127.0.0.1:9/x"
[[source]]
slug = "nowhere"
provider = "github"
secrets = ["s"]
[[source]]
slug = "held"
provider = "github"
secrets = ["s"]
destination = "http://127.0.0.1:9/x"
paused = true
"#,
            &|_| None,
        )
        .unwrap();
        let wake = Wake::for_config(&config);
        for source in &config.sources[1..] {
            wake.claimed(source);
            assert!(!wake.take(), "{} woke the workers", source.slug);
        }
        wake.claimed(&config.sources[0]);
        assert!(wake.take());
        wake.set_paused("held", false);
        wake.claimed(&config.sources[2]);
        assert!(wake.take(), "resumed, its claims wake again");
    }
}
