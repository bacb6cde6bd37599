//! Destinations with limits (a rate, attempts in flight) or an order lease
//! through their gate row, every `PACE`, never at the claim.

use super::*;

impl Workers {
    /// The destinations whose attempts are limited or ordered: `pace`
    /// leases them, through their gates; the workers' leases leave them out.
    pub(super) fn gated(&self) -> Vec<(&crate::config::SourceConfig, &crate::config::Destination)> {
        self.config
            .sources
            .iter()
            .flat_map(|s| s.destinations.iter().map(move |d| (s, d)))
            .filter(|(_, d)| d.is_gated())
            .collect()
    }

    /// Leases, every `PACE`, for each gated destination, as many due
    /// dispatches as its gate lets start, and forwards each batch by itself.
    pub(super) async fn pace(self, process: String, shutdown: CancellationToken) {
        if self.gated().is_empty() {
            return;
        }
        let mut running = JoinSet::new();
        let mut tick = tokio::time::interval(PACE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !shutdown.is_cancelled() {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            while running.try_join_next().is_some() {}
            let mut batches = Vec::new();
            if let Err(e) = self.lease_paced(&process, &mut batches).await {
                tracing::warn!(error = %e, "leasing a limited destination failed; retrying");
            }
            for (holder, leased) in batches {
                let workers = self.clone();
                running.spawn(async move {
                    if let Err(e) = workers.forward_batch(&holder, leased).await {
                        tracing::warn!(error = %e, "paced forwarding failed; retrying");
                    }
                });
            }
        }
        while running.join_next().await.is_some() {}
    }

    /// One round of `pace`, its forwards awaited (tests drive the gated
    /// destinations with it): how many dispatches it leased.
    pub async fn pace_once(&self, process: &str) -> Result<usize, WorkError> {
        let mut batches = Vec::new();
        let leased = self.lease_paced(process, &mut batches).await;
        let count = batches.iter().map(|(_, b)| b.len()).sum();
        let forwarded = futures_util::future::join_all(
            batches
                .into_iter()
                .map(|(holder, leased)| async move { self.forward_batch(&holder, leased).await }),
        )
        .await;
        leased?;
        forwarded.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(count)
    }

    /// For each gated destination that may run now (its source not paused,
    /// its breaker closed, it not resting), leases as many due dispatches as
    /// its gate lets start, each batch under its own holder, into `batches`.
    /// A failed lease leaves the other destinations' batches in; the first
    /// failure is returned.
    pub(super) async fn lease_paced(
        &self,
        process: &str,
        batches: &mut Vec<(String, Vec<Leased>)>,
    ) -> Result<(), sqlx::Error> {
        let mut failed = None;
        for (s, d) in self.gated() {
            if self.wake.is_paused(&s.slug)
                || !self.breakers.is_closed(&s.slug, &d.name)
                || self.rests.resting(&rests::key(&s.slug, &d.name))
            {
                continue;
            }
            let timeout = Duration::from_secs(d.timeout_secs);
            let gate = events::Gate {
                source: s.slug.clone(),
                destination: d.name.clone(),
                rate: d.rate_per_sec,
                burst: d
                    .rate_per_sec
                    .map_or(0.0, |r| (r * PACE.as_secs_f64()).max(1.0)),
                max_in_flight: d.max_in_flight.map(i64::from),
            };
            let one = Runnable::new(
                [(s.slug.as_str(), d.name.as_str(), timeout)],
                self.lease_margin,
            )
            .with_request_grace(self.request_grace)
            .with_takeover_grace(self.takeover_grace());
            // Each batch its own holder: a late record of one never
            // matches a lease another batch took over.
            let holder = format!("{process}:paced:{:08x}", rand::random::<u32>());
            let leased = events::lease_gated(&self.pool, &holder, LEASE_BATCH, &gate, &one).await;
            self.note(leased.as_ref().err().map(crate::db::is_transient));
            match leased {
                Ok(leased) if !leased.is_empty() => {
                    self.rests
                        .probing(std::iter::once(rests::key(&s.slug, &d.name).as_str()));
                    batches.push((holder, leased));
                }
                Ok(_) => {}
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }
}
