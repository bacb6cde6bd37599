//! The web edge: the router (dashboard pages and server functions behind
//! the gate, `/hooks/{slug}`, probes and metrics), and the bound server.
//! The only module that knows axum; everything below it is handed plain values.

pub mod api;
pub mod body;
pub mod demo;
pub mod gate;
pub mod health;
pub mod hooks;
pub mod listener;
pub mod metrics;
pub mod shares;
pub mod site;
mod trace;

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use axum::extract::FromRef;
use axum::routing::{get, post};
use axum::Router;
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, AxumRouteListing, LeptosRoutes};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_sessions_sqlx_store::PostgresStore;

use replaysafe_core::processing::Services;

/// The name cargo-leptos gives the wasm, JS and CSS bundle (`output-name`).
pub const SITE_OUTPUT_NAME: &str = "replaysafe";

/// What every handler is given: the shared services and the UI's options.
#[derive(Clone)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub services: Services,
    /// When `/metrics` last read its database gauges.
    pub gauges_read: replaysafe_core::ops::overview::GaugesRead,
    /// The memory the receiver's bodies being read may take.
    pub body_budget: body::BodyBudget,
    /// Cancelled once the server is shutting down (long-lived responses end).
    pub ending: CancellationToken,
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

/// The dashboard's options: where its bundle is (`site::Site`).
fn leptos_options(addr: SocketAddr) -> LeptosOptions {
    let site = site::Site::chosen();
    let root = site.root();
    let pkg = root.join("pkg");
    if site != site::Site::Embedded && !pkg.join(format!("{SITE_OUTPUT_NAME}.js")).exists() {
        tracing::warn!(
            "UI bundle not found in {}: pages render but do not hydrate; build it with ./scripts/run (build_site in scripts/lib.sh), or use a release built by scripts/release, which carries it",
            pkg.display()
        );
    }
    LeptosOptions::builder()
        .output_name(SITE_OUTPUT_NAME)
        .site_root(root.to_string_lossy().into_owned())
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .build()
}

/// The dashboard's routes, listed once per process: listing them runs the
/// app with every resource's loading suppressed by a process-wide flag
/// (leptos_server's `SuppressResourceLoad`), and a page whose resource first
/// polls meanwhile would wait forever (leptos issue 4773).
static DASHBOARD_ROUTES: LazyLock<Vec<AxumRouteListing>> =
    LazyLock::new(|| generate_route_list(app::App));

/// A worker-only process serves no dashboard.
fn router(state: AppState, role: Role) -> Router {
    if role == Role::WorkerOnly {
        let mut router = Router::new()
            .route("/healthz", get(health::healthz))
            .route("/readyz", get(health::readyz));
        if state.services.config.metrics_listen.is_none() {
            router = router.route("/metrics", get(metrics::handler));
        }
        let config = state.services.config.clone();
        return trace::traced(secured(router.with_state(state), &config), config);
    }
    // The dashboard and the API on a pool of their own: strangers' floods
    // of them never hold the connections the receiver claims with.
    let dashboard_state = AppState {
        services: state.services.for_dashboard(),
        ..state.clone()
    };
    let routes = DASHBOARD_ROUTES.clone();
    let services = dashboard_state.services.clone();
    // Checked at start: public_url is an http(s) URL.
    let public_url = replaysafe_core::accounts::PublicUrl(
        url::Url::parse(&state.services.config.public_url).expect("config checked public_url"),
    );
    let sign_in = replaysafe_core::accounts::SignInLimits::default();
    let api = api::router(&dashboard_state);
    let options = state.leptos_options.clone();
    let config = state.services.config.clone();
    // The dashboard: pages and server functions, behind sessions and the gate.
    let dashboard = Router::new()
        .leptos_routes_with_context(
            &dashboard_state,
            routes,
            move || {
                provide_context(services.clone());
                provide_context(public_url.clone());
                provide_context(sign_in.clone());
            },
            move || app::shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(
            app::shell,
        ))
        .layer(axum::middleware::from_fn_with_state(
            dashboard_state.clone(),
            body::bounded,
        ))
        .layer(axum::middleware::from_fn_with_state(
            dashboard_state.clone(),
            gate::gate,
        ))
        .layer(gate::session_layer(
            &config,
            PostgresStore::new(dashboard_state.services.pool.clone()),
        ))
        .with_state(dashboard_state);
    // Providers and probes: no sessions, no cookies.
    let mut router = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/hooks/{slug}", post(hooks::hook));
    if config.metrics_listen.is_none() {
        router = router.route("/metrics", get(metrics::handler));
    }
    if site::Site::chosen() == site::Site::Embedded {
        router = router.route("/pkg/{file}", get(site::file));
    }
    let state_for_demo = state.clone();
    let router = router
        .with_state(state)
        .merge(dashboard)
        .nest("/api/v1", api);
    let router = if config.demo_destination {
        router.merge(demo::router().layer(axum::middleware::from_fn_with_state(
            state_for_demo,
            body::bounded,
        )))
    } else {
        router
    };
    trace::traced(secured(router, &config), config)
}

/// `router` with `security_headers` on every answer.
fn secured(router: Router, config: &replaysafe_core::config::Config) -> Router {
    let https = config.public_url.starts_with("https://");
    router.layer(axum::middleware::from_fn(move |request, next| {
        security_headers(https, request, next)
    }))
}

/// On every response: no content sniffing, no referrer beyond this site,
/// no framing; a page sets its own Content Security Policy (with the nonce
/// of its inline scripts), anything else gets one that allows nothing.
/// Nothing but the UI bundle is stored by a browser or a proxy (a page or
/// an API answer shows payloads and who did what), and behind an https
/// `public_url` the browser is told to use nothing else (HSTS).
async fn security_headers(
    https: bool,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    let bundle = request.uri().path().starts_with("/pkg/");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if !bundle {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if https {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(
            "default-src 'none'; frame-ancestors 'none'",
        ));
    response
}

/// `/metrics` alone, for `metrics_listen`.
fn metrics_router(state: AppState) -> Router {
    let config = state.services.config.clone();
    let router = Router::new()
        .route("/metrics", get(metrics::handler))
        .with_state(state);
    secured(router, &config)
}

/// A bound, not yet running server; tests bind port 0 and read `addr`.
pub struct Application {
    pub addr: SocketAddr,
    /// Where `/metrics` is served when `metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
    listener: TcpListener,
    router: Router,
    metrics: Option<(TcpListener, Router)>,
    config: Arc<replaysafe_core::config::Config>,
    /// A dashboard's: it runs the bulk re-delivery jobs too.
    bulk_jobs: Option<Services>,
    /// `AppState::ending`, cancelled with the shutdown.
    ending: CancellationToken,
}

impl Application {
    pub async fn bind(services: Services, role: Role) -> std::io::Result<Self> {
        let listener = TcpListener::bind(services.config.listen).await?;
        Self::on(listener, services, role)
    }

    /// On a listener bound already (tests bind port 0 first, to know the
    /// public URL the origin check compares with).
    pub fn on(listener: TcpListener, services: Services, role: Role) -> std::io::Result<Self> {
        replaysafe_core::telemetry::metrics::install();
        let addr = listener.local_addr()?;
        let config = services.config.clone();
        let state = AppState {
            leptos_options: leptos_options(addr),
            body_budget: body::BodyBudget::new(config.max_body_memory_bytes, config.max_body_bytes),
            services,
            gauges_read: Default::default(),
            ending: CancellationToken::new(),
        };
        let ending = state.ending.clone();
        let bulk_jobs = (role == Role::Full).then(|| state.services.clone());
        let metrics = match config.metrics_listen {
            Some(at) => {
                let bound = std::net::TcpListener::bind(at)?;
                bound.set_nonblocking(true)?;
                Some((TcpListener::from_std(bound)?, metrics_router(state.clone())))
            }
            None => None,
        };
        Ok(Self {
            addr,
            metrics_addr: metrics.as_ref().map(|(l, _)| l.local_addr()).transpose()?,
            listener,
            router: router(state, role),
            metrics,
            config,
            bulk_jobs,
            ending,
        })
    }

    /// Serves until `shutdown` is cancelled, then lets in-flight requests finish.
    pub async fn run(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let ending = self.ending.clone();
        let end_streams = shutdown.clone();
        tokio::spawn(async move {
            end_streams.cancelled().await;
            ending.cancel();
        });
        let metrics = async {
            match self.metrics {
                Some((l, router)) => {
                    listener::serve(l, router, self.config.clone(), shutdown.clone()).await
                }
                None => Ok(()),
            }
        };
        let main = listener::serve(
            self.listener,
            self.router,
            self.config.clone(),
            shutdown.clone(),
        );
        let bulk_jobs = async {
            if let Some(services) = self.bulk_jobs {
                replaysafe_core::jobs::bulk::run(services, shutdown.clone()).await;
            }
            Ok(())
        };
        tokio::try_join!(main, metrics, bulk_jobs).map(|_| ())
    }
}
