//! Circuit breakers whose cool-down is over: this process takes a probe
//! (one attempt) for each of its destinations, and settles the breaker by
//! its answer.

use super::*;

impl Workers {
    /// Breakers whose cool-down is over: this process takes the probe of
    /// each (of its destinations) it wins, one attempt; with none due, the
    /// breaker closes.
    /// The probes' forwards go into `running`.
    pub async fn probe_breakers(&self, running: &mut JoinSet<()>) {
        // Only this process's destinations, of sources not paused: a probe
        // it takes, it can send.
        let mine: Vec<(&str, &str)> = self
            .config
            .sources
            .iter()
            .filter(|s| !self.wake.is_paused(&s.slug))
            .flat_map(|s| {
                s.destinations
                    .iter()
                    .map(move |d| (s.slug.as_str(), d.name.as_str()))
            })
            .collect();
        let longest = self
            .config
            .sources
            .iter()
            .map(|s| s.attempt_timeout())
            .max()
            .unwrap_or_default();
        let stale = ((longest + self.lease_margin) * 2).as_secs_f64();
        let probes = match events::breaker::take_probes(&self.pool, &mine, stale).await {
            Ok(probes) => probes,
            Err(e) => {
                tracing::warn!(error = %e, "taking circuit breaker probes failed; will retry");
                return;
            }
        };
        self.breakers.apply(&probes);
        for probe in probes {
            let Some(d) = self
                .config
                .sources
                .iter()
                .find(|s| s.slug == probe.source)
                .and_then(|s| s.destinations.iter().find(|d| d.name == probe.destination))
            else {
                continue;
            };
            let one = Runnable::new(
                [(
                    probe.source.as_str(),
                    d.name.as_str(),
                    Duration::from_secs(d.timeout_secs),
                )],
                self.lease_margin,
            )
            .with_request_grace(self.request_grace)
            .with_takeover_grace(self.takeover_grace());
            // Its own holder: a late record of another probe never matches its lease.
            let holder = format!(
                "{}:{}:probe:{:08x}",
                hostname(),
                std::process::id(),
                rand::random::<u32>()
            );
            match events::lease_probe(&self.pool, &holder, &one).await {
                Ok(leased) if !leased.is_empty() => {
                    let workers = self.clone();
                    running.spawn(async move {
                        if let Err(e) = workers.forward_batch(&holder, leased).await {
                            tracing::warn!(error = %e, "circuit breaker probe: database error");
                        }
                    });
                }
                Ok(_) => {
                    match events::breaker::close_unprobed(
                        &self.pool,
                        &probe.source,
                        &probe.destination,
                    )
                    .await
                    {
                        Ok(true) => self.breakers.apply(&[events::breaker::Transition {
                            from: replaysafe_types::states::Breaker::HalfOpen,
                            to: replaysafe_types::states::Breaker::Closed,
                            ..probe
                        }]),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "closing an unprobed circuit breaker failed")
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "leasing a circuit breaker's probe failed"),
            }
        }
    }
}
