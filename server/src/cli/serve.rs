//! `replaysafe serve` (the default command): receive, verify, claim and
//! forward webhooks, and serve the dashboard, until SIGINT or SIGTERM.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::CliError;
use crate::web::{Application, Role};
use replaysafe_core::config::Config;
use replaysafe_core::db;
use replaysafe_core::processing::worker::Workers;
use replaysafe_core::processing::Services;

/// The receiver's, the workers' and the background jobs' connections.
const CONNECTIONS: u32 = 32;
/// The dashboard's and the API's own (`Services::dashboard_pool`).
const DASHBOARD_CONNECTIONS: u32 = 8;

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Workers forwarding events in this process; 0 runs a receiver only
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Run workers only: no receiver and no dashboard, just /healthz and /readyz
    #[arg(long)]
    pub worker_only: bool,
    /// Serve the dashboard's bundle from this directory's pkg/ (as built by
    /// scripts/run or cargo-leptos) instead of the one a release carries
    #[arg(long, value_name = "DIR", env = "LEPTOS_SITE_ROOT")]
    pub site_root: Option<std::path::PathBuf>,
}

impl Default for ServeArgs {
    fn default() -> Self {
        Self {
            workers: 8,
            worker_only: false,
            site_root: None,
        }
    }
}

pub async fn run(config: Config, args: ServeArgs) -> Result<(), CliError> {
    if let Some(root) = &args.site_root {
        crate::web::site::set_root(root.clone());
    }
    if config.path.is_none() {
        tracing::info!(
            "no config file (--config, $REPLAYSAFE_CONFIG, ./replaysafe.toml, {}): running with the defaults{}",
            super::SYSTEM_CONFIG_PATH,
            match &config.database_url {
                Some(_) => ", on $DATABASE_URL".to_owned(),
                None => format!(", an embedded PostgreSQL under {}", config.data_dir.display()),
            }
        );
    }
    if let Some(why) = config.secrets_exposed() {
        tracing::warn!("{why}");
    }
    if !crate::web::metrics::open_to_all(&config) {
        tracing::warn!(
            listen = %config.listen,
            "/metrics answers this machine's clients only: set metrics_token (a bearer \
             token) or metrics_listen (an address of its own) to scrape it from elsewhere"
        );
    }
    for s in &config.sources {
        for d in s.destinations.iter().filter(|d| d.secret.is_none()) {
            tracing::warn!(
                source = %s.slug,
                destination = %d.name,
                "no signing secret: forwards carry no webhook-signature, so the application cannot tell them from forgeries"
            );
        }
    }
    if !config.public_url_given && config.listen.ip().is_unspecified() {
        tracing::warn!(
            listen = %config.listen,
            "public_url is not set: the dashboard accepts sign-ins and changes only from {}; set public_url to the address browsers use",
            config.public_url
        );
    }
    match crate::web::listener::raise_open_file_limit() {
        Ok((before, now)) => {
            tracing::info!(before, now, "open-file limit (soft) set to its hard limit");
            // The database pool, destinations and files need some too.
            if now < config.http.max_connections as u64 + 256 {
                tracing::warn!(
                    open_files = now,
                    max_connections = config.http.max_connections,
                    "the open-file limit is below max_connections: accepts fail with EMFILE before the cap; raise LimitNOFILE or lower max_connections"
                );
            }
        }
        Err(e) => tracing::warn!("could not raise the open-file limit: {e}"),
    }
    let config = Arc::new(config);
    let database = db::locate(&config).await?;
    let pool = db::pool(&database.url, CONNECTIONS).await?;
    let shutdown = CancellationToken::new();
    let wake = Arc::new(replaysafe_core::processing::wake::Wake::for_config(&config));
    let role = if args.worker_only {
        Role::WorkerOnly
    } else {
        Role::Full
    };
    let mut services = Services::new(pool.clone(), config.clone(), wake);
    services.dashboard_pool = db::pool(&database.url, DASHBOARD_CONNECTIONS).await?;
    if let Some(url) = &config.read_database_url {
        services.reads = replaysafe_core::db::replica::Reads::with_replica(
            pool.clone(),
            db::replica::pool(url)?,
        );
    }

    let app = Application::bind(services.clone(), role)
        .await
        .map_err(|source| CliError::Listen {
            addr: config.listen,
            source,
        })?;
    tracing::info!(
        "replaysafe is listening on http://{} (public URL {})",
        app.addr,
        config.public_url
    );
    if let Some(at) = app.metrics_addr {
        tracing::info!("metrics are served on http://{at}/metrics");
    }
    let server = tokio::spawn(app.run(shutdown.clone()));
    let replica = tokio::spawn(db::replica::watch(services.reads.clone(), shutdown.clone()));
    let pruner = tokio::spawn(replaysafe_core::jobs::retention::run(
        pool.clone(),
        config.retention_days,
        config.dedup_ttl_days,
        config.audit_retention_days,
        shutdown.clone(),
    ));
    // Workers start once the schema is in place.
    let processing = tokio::spawn({
        let (pool, config, shutdown) = (pool.clone(), config.clone(), shutdown.clone());
        async move {
            db::prepare(pool.clone(), config.clone(), shutdown.clone()).await;
            if shutdown.is_cancelled() {
                return;
            }
            let rollup = tokio::spawn(replaysafe_core::jobs::rollup::run(
                pool.clone(),
                shutdown.clone(),
            ));
            let alerts = tokio::spawn(replaysafe_core::alerts::run(
                pool.clone(),
                config.clone(),
                shutdown.clone(),
            ));
            let sessions = tokio::spawn(replaysafe_core::jobs::sessions::run(
                pool.clone(),
                shutdown.clone(),
            ));
            let unrecorded = tokio::spawn(replaysafe_core::jobs::unrecorded::run(
                pool,
                services.rejections.clone(),
                shutdown.clone(),
            ));
            let reconciling = tokio::spawn(replaysafe_core::reconcile::run_on_schedule(
                services.clone(),
                shutdown.clone(),
            ));
            let mut workers = Workers::new(&services).spawn(args.workers, shutdown);
            tracing::info!(
                workers = args.workers,
                worker_only = args.worker_only,
                "processing started"
            );
            while workers.join_next().await.is_some() {}
            let _ = rollup.await;
            let _ = alerts.await;
            let _ = sessions.await;
            let _ = unrecorded.await;
            let _ = reconciling.await;
        }
    });
    tokio::select! {
        _ = shutdown_signal() => tracing::info!("shutting down"),
        _ = shutdown.cancelled() => {}
    }
    shutdown.cancel();
    let served = server.await;
    let _ = processing.await;
    let _ = pruner.await;
    let _ = replica.await;
    pool.close().await;
    // Dropping the database stops an embedded PostgreSQL.
    drop(database);
    match served {
        Ok(result) => result.map_err(CliError::Serve),
        Err(join) => Err(CliError::Serve(std::io::Error::other(join))),
    }
}

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
