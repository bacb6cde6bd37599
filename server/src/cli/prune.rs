//! `replaysafe prune`: applies retention once, as `serve` does every ten
//! minutes, and prints what went (and how long it took).

use std::time::Instant;

use super::{open_migrated, CliError};
use replaysafe_core::config::Config;
use replaysafe_core::db::DbError;

#[derive(clap::Args, Debug)]
pub struct PruneArgs {
    /// One JSON document of what went instead of a sentence
    #[arg(long)]
    pub json: bool,
}

pub async fn run(config: Config, args: PruneArgs) -> Result<(), CliError> {
    let (_database, pool) = open_migrated(&config).await?;
    let started = Instant::now();
    let pruned = replaysafe_core::jobs::retention::prune(
        &pool,
        config.retention_days,
        config.dedup_ttl_days,
        config.audit_retention_days,
    )
    .await
    .map_err(DbError::from)?;
    let took = started.elapsed();
    pool.close().await;
    if args.json {
        super::output::json(&serde_json::json!({
            "seconds": took.as_secs_f64(),
            "partitions_dropped": pruned.partitions.dropped,
            "partitions_kept": pruned.partitions.kept.iter()
                .map(|(partition, waiting)| serde_json::json!({"partition": partition, "events_waiting": waiting}))
                .collect::<Vec<_>>(),
            "partitions_made": pruned.partitions_made,
            "deliveries": pruned.deliveries,
            "attempts": pruned.attempts,
            "events": pruned.events,
            "audit": pruned.audit,
            "bulk_jobs": pruned.bulk_jobs,
        }));
        return Ok(());
    }
    let dropped = &pruned.partitions.dropped;
    println!(
        "pruned in {:.3} s: {} partitions dropped{}, {} deliveries and {} attempts deleted row by row, {} events, {} audit entries, {} bulk jobs; {} partitions made ahead",
        took.as_secs_f64(),
        dropped.len(),
        if dropped.is_empty() {
            String::new()
        } else {
            format!(" ({})", dropped.join(", "))
        },
        pruned.deliveries,
        pruned.attempts,
        pruned.events,
        pruned.audit,
        pruned.bulk_jobs,
        pruned.partitions_made,
    );
    for (partition, events) in &pruned.partitions.kept {
        println!("kept {partition} past retention: {events} events waiting to be forwarded need its payloads");
    }
    Ok(())
}
