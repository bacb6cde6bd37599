//! Builds the HTTP application and runs it until shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use axum::routing::{get, post};
use axum::Router;
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, LeptosRoutes};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tower_sessions_sqlx_store::PostgresStore;

use crate::config::Config;
use crate::db;
use crate::processing::retry::RetryPolicy;
use crate::receiver::batch::ClaimBatcher;

/// Transactions committing claims at once; each carries a batch. Two let a
/// batch stuck on a row lock leave the other committing; more only split the
/// same deliveries into smaller batches, one disk sync each.
pub const CLAIM_COMMITTERS: usize = 2;

/// The name cargo-leptos gives the wasm, JS and CSS bundle (`output-name`).
pub const SITE_OUTPUT_NAME: &str = "replaysafe";

#[derive(Clone)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub pool: PgPool,
    pub config: Arc<Config>,
    /// Wakes this process's workers when the receiver queues an event.
    pub wake: Arc<Notify>,
    /// Sync mode calls destinations inside the request.
    pub client: reqwest::Client,
    pub policy: Arc<RetryPolicy>,
    /// Group commit for ack-mode claims.
    pub claims: ClaimBatcher,
}

/// What a `serve` process answers besides health: everything, or nothing
/// (a worker-only process scales forwarding apart from receiving).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Full,
    WorkerOnly,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// Where cargo-leptos put the site: `$LEPTOS_SITE_ROOT`, else `target/site`.
fn leptos_options(addr: SocketAddr) -> LeptosOptions {
    let site_root = std::env::var("LEPTOS_SITE_ROOT").unwrap_or_else(|_| "target/site".into());
    let pkg = std::path::Path::new(&site_root).join("pkg");
    if !pkg.join(format!("{SITE_OUTPUT_NAME}.js")).exists() {
        tracing::warn!(
            "UI bundle not found in {}: pages render but do not hydrate; build it with `cargo leptos build`",
            pkg.display()
        );
    }
    LeptosOptions::builder()
        .output_name(SITE_OUTPUT_NAME)
        .site_root(site_root)
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .build()
}

pub fn router(state: AppState, role: Role) -> Router {
    if role == Role::WorkerOnly {
        return Router::new()
            .route("/healthz", get(crate::health::healthz))
            .route("/readyz", get(crate::health::readyz))
            .with_state(state);
    }
    let routes = generate_route_list(app::App);
    let pool = state.pool.clone();
    let operations: Arc<dyn app::api::actions::ssr::Operations> =
        Arc::new(crate::operations::ServerOperations {
            pool: state.pool.clone(),
            config: state.config.clone(),
            wake: state.wake.clone(),
            claims: state.claims.clone(),
            client: state.client.clone(),
            policy: state.policy.clone(),
        });
    let options = state.leptos_options.clone();
    let demo_destination = state.config.demo_destination;
    // The dashboard: pages and server functions, behind sessions and the gate.
    let dashboard = Router::new()
        .leptos_routes_with_context(
            &state,
            routes,
            move || {
                provide_context(pool.clone());
                provide_context(operations.clone());
            },
            move || app::shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(
            app::shell,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::gate::gate,
        ))
        .layer(crate::gate::session_layer(
            &state.config,
            PostgresStore::new(state.pool.clone()),
        ));
    // Providers and probes: no sessions, no cookies.
    let router = Router::new()
        .route("/healthz", get(crate::health::healthz))
        .route("/readyz", get(crate::health::readyz))
        .route("/metrics", get(crate::metrics_export::handler))
        .route("/hooks/{slug}", post(crate::receiver::http::hook))
        .merge(dashboard)
        .with_state(state);
    if demo_destination {
        router.merge(crate::demo::router())
    } else {
        router
    }
}

/// A bound, not yet running server; tests bind port 0 and read `addr`.
pub struct Application {
    pub addr: SocketAddr,
    listener: TcpListener,
    router: Router,
}

impl Application {
    pub async fn bind(
        config: Arc<Config>,
        pool: PgPool,
        wake: Arc<Notify>,
        role: Role,
    ) -> std::io::Result<Self> {
        crate::metrics_export::install();
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let state = AppState {
            claims: ClaimBatcher::start(pool.clone(), CLAIM_COMMITTERS),
            leptos_options: leptos_options(addr),
            pool,
            config,
            wake,
            client: crate::processing::worker::http_client(),
            policy: Arc::new(RetryPolicy::default()),
        };
        Ok(Self {
            addr,
            listener,
            router: router(state, role),
        })
    }

    /// Serves until `shutdown` is cancelled, then lets in-flight requests finish.
    pub async fn run(self, shutdown: CancellationToken) -> std::io::Result<()> {
        axum::serve(
            self.listener,
            self.router
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
    }
}

/// Applies migrations and syncs the configured sources, retrying while the
/// database is away; `/readyz` reports 503 until this has succeeded.
pub async fn prepare_database(pool: PgPool, config: Arc<Config>, shutdown: CancellationToken) {
    let mut delay = Duration::from_millis(250);
    loop {
        let result = async {
            db::migrate(&pool).await?;
            // The session store's own table (tower_sessions.session).
            PostgresStore::new(pool.clone()).migrate().await?;
            db::sync_sources(&pool, &config).await?;
            Ok::<_, db::DbError>(())
        }
        .await;
        match result {
            Ok(()) => {
                tracing::info!("database migrated; sources synced");
                return;
            }
            Err(e) => tracing::warn!(error = %e, retry_in = ?delay, "database not ready"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
