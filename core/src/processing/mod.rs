//! Processing (spec section 5): a delivery received end to end (`intake`),
//! workers that lease due events, forward them to their destination and
//! retry, complete or dead-letter them, and sync mode's inline forwarding.

pub mod breakers;
pub mod forward;
pub mod handoff;
pub mod intake;
pub mod recorder;
pub mod rests;
pub mod retry;
pub mod sync;
pub mod wake;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;

use crate::config::Config;
use crate::receiver::batch::ClaimBatcher;
use crate::receiver::rejections::Rejections;
use handoff::Inbox;
use rests::Rests;
use retry::RetryPolicy;
use wake::Wake;

/// Transactions committing claims at once; each carries a batch. Two let a
/// batch stuck on a row lock leave the other committing; more only split the
/// same deliveries into smaller batches, one disk sync each.
pub const CLAIM_COMMITTERS: usize = 2;

/// The handles the receiver, the workers, sync mode and the dashboard's
/// operations share: built once in `serve` and handed down.
#[derive(Clone)]
pub struct Services {
    pub pool: PgPool,
    pub config: Arc<Config>,
    /// Wakes this process's workers when work is queued, once per burst.
    pub wake: Arc<Wake>,
    /// Calls destinations: sync mode inside the request, workers after.
    pub client: reqwest::Client,
    pub policy: Arc<RetryPolicy>,
    /// Group commit for ack-mode claims.
    pub claims: ClaimBatcher,
    /// How much of strangers' rejected requests is recorded, and the counts of the rest.
    pub rejections: Arc<Rejections>,
    /// New events handed from their claim to this process's workers.
    pub inbox: Arc<Inbox>,
    /// Sources whose destination takes no connection, resting.
    pub rests: Arc<Rests>,
    /// The destinations' circuit breakers, as this process knows them.
    pub breakers: Arc<breakers::Breakers>,
    /// Records the workers' finished attempts, all together.
    pub recorder: recorder::Recorder,
    /// Where the dashboard's and the API's reads go (`db::replica`).
    pub reads: crate::db::replica::Reads,
    /// The dashboard's and the API's own pool (`for_dashboard`): a flood
    /// of their requests waits for its connections, never for the ones the
    /// receiver claims with or the workers record with. The same pool as
    /// `pool` unless the server sets one (`serve` does).
    pub dashboard_pool: PgPool,
    /// Made-up tokens and session cookies, counted per address.
    pub bad_credentials: Arc<crate::accounts::BadCredentials>,
}

impl Services {
    /// Starts the claim committers on the current runtime.
    pub fn new(pool: PgPool, config: Arc<Config>, wake: Arc<Wake>) -> Self {
        Self::with_policy(pool, config, wake, RetryPolicy::default())
    }

    pub fn with_policy(
        pool: PgPool,
        config: Arc<Config>,
        wake: Arc<Wake>,
        policy: RetryPolicy,
    ) -> Self {
        let rests = Arc::new(Rests::default());
        let breakers = Arc::new(breakers::Breakers::default());
        let inbox = Arc::new(Inbox::new(
            config.clone(),
            wake.clone(),
            rests.clone(),
            breakers.clone(),
        ));
        Self {
            breakers,
            claims: ClaimBatcher::with_handoff(pool.clone(), CLAIM_COMMITTERS, inbox.clone()),
            inbox,
            rests,
            recorder: recorder::Recorder::start(pool.clone()),
            rejections: Arc::new(Rejections::new(config.rejections)),
            reads: crate::db::replica::Reads::primary_only(pool.clone()),
            dashboard_pool: pool.clone(),
            bad_credentials: Default::default(),
            pool,
            config,
            wake,
            client: http_client(),
            policy: Arc::new(policy),
        }
    }
}

impl Services {
    /// These services as the dashboard and the API use them: their
    /// database work (sessions, tokens, pages, actions) goes through
    /// `dashboard_pool`, reads to the replica as before.
    pub fn for_dashboard(&self) -> Self {
        let mut services = self.clone();
        services.pool = self.dashboard_pool.clone();
        services.reads = self.reads.on_primary(self.dashboard_pool.clone());
        services
    }
}

/// The client every forward goes through (a destination answers, it does
/// not send replaysafe elsewhere: `outgoing_client` follows no redirect).
pub fn http_client() -> reqwest::Client {
    crate::telemetry::outgoing_client()
        .pool_max_idle_per_host(64)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("building the HTTP client")
}
