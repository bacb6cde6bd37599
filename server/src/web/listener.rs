//! The listening socket. `axum::serve` runs hyper without a timer, so a client
//! may take forever over its headers and keep an idle connection for good;
//! this loop serves each connection through hyper-util with the timer set and
//! the limits of `HttpLimits`, under a cap on open connections in all and per
//! address.

use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::Service;

use replaysafe_core::accounts::ClientAddr;

use super::shares::AddressShares;
use replaysafe_core::config::{address, Config};

/// A connection told to close (idle, or shutting down) gets this long to
/// finish what it is writing before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long shutdown waits for open connections before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// HTTP/2: streams one connection may run at once, and its header block.
const H2_MAX_STREAMS: u32 = 32;
const H2_MAX_HEADER_LIST: u32 = 64 * 1024;

/// Serves `router` on `listener` until `shutdown` is cancelled, then lets
/// open requests finish for up to `SHUTDOWN_GRACE`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: Arc<Config>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let limits = &config.http;
    let builder = Arc::new(builder(&config));
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let per_address = AddressShares::new(limits.max_connections_per_address);
    let mut at_cap_logged: Option<Instant> = None;
    loop {
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => permit.expect("never closed"),
            _ = shutdown.cancelled() => break,
        };
        if open.available_permits() == 0
            && at_cap_logged.is_none_or(|at| at.elapsed() > Duration::from_secs(60))
        {
            // New connections wait in the listen backlog until one closes.
            tracing::warn!(
                max_connections = limits.max_connections,
                "every connection slot is taken; new connections wait for one to close"
            );
            at_cap_logged = Some(Instant::now());
        }
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let slot = if config.is_trusted_proxy(peer.ip()) {
            None
        } else {
            match per_address.take(peer.ip(), 1) {
                Some(slot) => Some(slot),
                None => {
                    metrics::counter!("replaysafe_connections_refused_total", "reason" => "per_address")
                        .increment(1);
                    continue;
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let service = {
            let (router, activity, config) = (router.clone(), activity.clone(), config.clone());
            hyper::service::service_fn(move |mut request: Request<Incoming>| {
                let in_flight = activity.begin();
                let client = client_of(&config, peer, &request);
                request.extensions_mut().insert(ConnectInfo(peer));
                request.extensions_mut().insert(ClientAddr(client));
                let mut router = router.clone();
                async move {
                    let response = router.call(request.map(Body::new)).await;
                    drop(in_flight);
                    response
                }
            })
        };
        let (builder, shutdown, limits) = (builder.clone(), shutdown.clone(), limits.clone());
        tokio::spawn(async move {
            let _held = (permit, slot, OpenGauge::new());
            let mut connection = pin!(builder.serve_connection(TokioIo::new(stream), service));
            let mut closing_since: Option<Instant> = None;
            let mut check = tokio::time::interval(check_every(&limits));
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(%peer, "connection ended: {e}");
                        }
                        break;
                    }
                    _ = shutdown.cancelled(), if closing_since.is_none() => {
                        connection.as_mut().graceful_shutdown();
                        closing_since = Some(Instant::now());
                    }
                    _ = check.tick() => match closing_since {
                        // A request still running (sync mode waits on its
                        // destination) is let finish, up to SHUTDOWN_GRACE.
                        Some(since)
                            if (since.elapsed() >= CLOSE_GRACE && !activity.busy())
                                || since.elapsed() >= SHUTDOWN_GRACE =>
                        {
                            metrics::counter!("replaysafe_connections_closed_total", "reason" => "unresponsive")
                                .increment(1);
                            break;
                        }
                        Some(_) => {}
                        None if activity.idle_beyond(&limits) => {
                            metrics::counter!("replaysafe_connections_closed_total", "reason" => "idle")
                                .increment(1);
                            connection.as_mut().graceful_shutdown();
                            closing_since = Some(Instant::now());
                        }
                        None => {}
                    }
                }
            }
        });
    }
    drop(listener);
    // Every connection holds a permit: all of them back means all closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_GRACE, open.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            open = limits.max_connections - open.available_permits(),
            "connections still open after {} s of shutdown are dropped",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    Ok(())
}

/// The client a request comes from: its peer, or what a trusted proxy says.
fn client_of(config: &Config, peer: SocketAddr, request: &Request<Incoming>) -> IpAddr {
    // Lossy: a client's own bytes in the header must not hide the proxy's
    // entry after them (nginx writes both on one line). Read only behind a
    // trusted proxy.
    let forwarded = request
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .map(|value| String::from_utf8_lossy(value.as_bytes()));
    address::client(peer.ip(), forwarded, |hop| config.is_trusted_proxy(hop))
}

fn builder(config: &Config) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.http.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(H2_MAX_HEADER_LIST)
        // A peer that stops answering pings is gone; idle ones are closed
        // by the idle check.
        .keep_alive_interval(config.http.idle_timeout / 2)
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// Often enough that a timeout is kept within a few seconds of its length.
fn check_every(limits: &replaysafe_core::config::HttpLimits) -> Duration {
    (limits.header_timeout.min(limits.idle_timeout) / 4)
        .clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// Too many open files and aborted handshakes are the client's or the
/// moment's trouble: wait a little and go on accepting.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused
    ) {
        return;
    }
    tracing::error!("accepting a connection failed: {e}");
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Requests in flight on one connection, and when the last one ended.
struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    last_ended: Mutex<Option<Instant>>,
}

impl Activity {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ended: Mutex::new(None),
        }
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }

    /// A connection that never sent a whole request gets the header timeout
    /// from its opening; after a request, the idle timeout from its end.
    fn idle_beyond(&self, limits: &replaysafe_core::config::HttpLimits) -> bool {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return false;
        }
        match *self.last_ended.lock().expect("never poisoned") {
            None => self.opened.elapsed() > limits.header_timeout,
            Some(at) => at.elapsed() > limits.idle_timeout,
        }
    }
}

struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last_ended.lock().expect("never poisoned") = Some(Instant::now());
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `replaysafe_connections_open`, up while the connection lives.
struct OpenGauge;

impl OpenGauge {
    fn new() -> Self {
        metrics::gauge!("replaysafe_connections_open").increment(1.0);
        Self
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        metrics::gauge!("replaysafe_connections_open").decrement(1.0);
    }
}

/// Raises the soft open-file limit to the hard one: every connection is a
/// file, and the default soft limit (often 1024) would cap them far below
/// `max_connections`. Returns (soft before, now).
pub fn raise_open_file_limit() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok((before, limit.rlim_cur))
}
