//! The metrics `GET /metrics` serves in Prometheus text format (spec
//! section 8), recorded and rendered by metrics-exporter-prometheus. Counters and histograms are this process's
//! (sum them across processes); the backlog and dead-letter gauges are read
//! from the database at scrape time, so every process reports the same.

use std::sync::OnceLock;
use std::time::Instant;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets in seconds: from sub-millisecond answers to slow destinations.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// End to end includes the retries' backoff: up to hours, and a day.
const END_TO_END_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0, 14400.0, 86400.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder once (tests start many apps in one process).
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .expect("bucket list is not empty")
            .set_buckets_for_metric(
                Matcher::Full("replaysafe_end_to_end_seconds".into()),
                END_TO_END_BUCKETS,
            )
            .expect("bucket list is not empty")
            .set_buckets_for_metric(
                Matcher::Full("replaysafe_claim_batch_size".into()),
                &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
            )
            .expect("bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics may be empty");
        }
        describe();
        // At zero from the start, so a dashboard's rate() of them is 0, not
        // "no data", until the first shed.
        for reason in SHED_REASONS {
            metrics::counter!("replaysafe_shed_total", "reason" => *reason).absolute(0);
        }
        metrics::gauge!("replaysafe_build_info", "version" => super::VERSION, "commit" => super::COMMIT)
            .set(1.0);
        handle
    })
}

fn describe() {
    metrics::describe_gauge!(
        "replaysafe_build_info",
        "Always 1; its labels say which version and commit runs"
    );
    metrics::describe_gauge!(
        "replaysafe_read_replica_lag_seconds",
        "How far behind the primary the read replica (read_database_url) is; NaN while it does not answer"
    );
    metrics::describe_counter!(
        "replaysafe_deliveries_total",
        "Deliveries received, by source and outcome (spec section 4)"
    );
    metrics::describe_counter!(
        "replaysafe_duplicates_total",
        "Verified deliveries of a key already claimed (completed, in progress or dead)"
    );
    metrics::describe_counter!(
        "replaysafe_signature_failures_total",
        "Deliveries rejected because their signature did not verify (401)"
    );
    metrics::describe_histogram!(
        "replaysafe_ack_seconds",
        metrics::Unit::Seconds,
        "Time from receipt to the answer given to the provider"
    );
    metrics::describe_histogram!(
        "replaysafe_claim_batch_size",
        "Deliveries claimed together in one shared commit"
    );
    metrics::describe_histogram!(
        "replaysafe_claim_commit_seconds",
        metrics::Unit::Seconds,
        "One shared claim commit, from sending its statement to its durable commit"
    );
    metrics::describe_counter!(
        "replaysafe_attempts_total",
        "Forwarding attempts, by source and where they left the event"
    );
    metrics::describe_histogram!(
        "replaysafe_attempt_seconds",
        metrics::Unit::Seconds,
        "Destination response time per attempt"
    );
    metrics::describe_histogram!(
        "replaysafe_end_to_end_seconds",
        metrics::Unit::Seconds,
        "Time from an event's receipt (or an operator's re-delivery or force) to its destination's accepting answer, retries included"
    );
    metrics::describe_counter!(
        "replaysafe_shed_total",
        "Requests answered 503 unread or unclaimed because the server was saturated, by reason"
    );
    metrics::describe_gauge!(
        "replaysafe_backlog_events",
        "Dispatches not yet completed or dead, due, waiting or in flight (each capped at 100000 per destination)"
    );
    metrics::describe_gauge!(
        "replaysafe_backlog",
        "Dispatches not yet completed or dead, by destination and state: due (may be attempted now), waiting (backing off, source paused or breaker not closed), in_flight"
    );
    metrics::describe_gauge!(
        "replaysafe_oldest_due_seconds",
        "How long the longest-waiting due dispatch has waited (source not paused, breaker closed)"
    );
    metrics::describe_gauge!(
        "replaysafe_dead_letters",
        "Dead-lettered events: an event once however many of its dispatches are dead (capped at 100000)"
    );
    metrics::describe_counter!(
        "replaysafe_reconcile_missed_total",
        "Events a provider sent that never reached replaysafe, as reconciliation found them (each once, whatever became of it: recovered, redelivered or still missing)"
    );
    metrics::describe_gauge!(
        "replaysafe_reconcile_last_run_timestamp_seconds",
        "When the source's last reconciliation run finished (Unix seconds), whatever its verdict"
    );
    metrics::describe_gauge!(
        "replaysafe_dead_letter_dispatches",
        "Dead dispatches by destination (capped at 100000)"
    );
}

/// Counts one answered delivery: its outcome, whether it repeated an event
/// already held, and whether its signature (or signed time) failed.
pub fn delivery(
    source: &str,
    outcome: &'static str,
    duplicate: bool,
    signature_failed: bool,
    started: Instant,
) {
    let source = source.to_owned();
    metrics::counter!("replaysafe_deliveries_total", "source" => source.clone(), "outcome" => outcome)
        .increment(1);
    if duplicate {
        metrics::counter!("replaysafe_duplicates_total", "source" => source.clone()).increment(1);
    } else if signature_failed {
        metrics::counter!("replaysafe_signature_failures_total", "source" => source.clone())
            .increment(1);
    }
    metrics::histogram!("replaysafe_ack_seconds", "source" => source)
        .record(started.elapsed().as_secs_f64());
}

/// Why a request was shed: the claim queue was full, a delivery waited for
/// its claim longer than it may, or too many bodies were being read.
pub const SHED_REASONS: &[&str] = &["queue_full", "waited_too_long", "body_memory"];

/// Counts one request shed (answered 503 with Retry-After); `reason` is one
/// of `SHED_REASONS`.
pub fn shed(reason: &'static str) {
    debug_assert!(SHED_REASONS.contains(&reason), "{reason}");
    metrics::counter!("replaysafe_shed_total", "reason" => reason).increment(1);
}

/// Counts one finished attempt; `result` is completed, retrying or dead.
/// A completed one also records the event's end-to-end time, from
/// `received` (seconds since the Unix epoch; `Leased::received`).
pub fn attempt(source: &str, result: &'static str, latency_ms: i32, received: f64) {
    metrics::counter!("replaysafe_attempts_total", "source" => source.to_owned(), "result" => result)
        .increment(1);
    metrics::histogram!("replaysafe_attempt_seconds", "source" => source.to_owned())
        .record(latency_ms.max(0) as f64 / 1000.0);
    if result == "completed" {
        metrics::histogram!("replaysafe_end_to_end_seconds", "source" => source.to_owned())
            .record((unix_now() - received).max(0.0));
    }
}

/// Seconds since the Unix epoch, as `Leased::received` counts them.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
