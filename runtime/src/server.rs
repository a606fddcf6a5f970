//! The `Server` facade: a catalog served over Streamable HTTP in three steps (build the
//! catalog, [`Server::builder`], [`ServerBuilder::serve`]), and a graceful stop that resolves
//! once everything has drained ([`Running::shutdown`]).
//!
//! What it takes care of: the listening sockets (bound before the ledger is opened, so a
//! server started by mistake on a busy port writes nothing), the ledger the configuration
//! names (SQLite by default), TCP_NODELAY and a TCP user timeout on every connection, the
//! connection figures, the optional admin API on a port of its own, the drain (new requests
//! get `503` with `Retry-After`, requests in flight finish within the grace period, streams
//! end with a `retry` hint) and the ledger's clean-stop mark. Call it inside an actix-web
//! runtime (`#[actix_web::main]`). To mount the endpoint in an `App` of your own, use
//! [`ServerBuilder::mount`].
//!
//! The waits of a stop have deadlines and are woken by what they wait for (the last
//! session, stream or request ending), not by polling.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::{Arc, Weak};
use std::time::Duration;

use actix_web::{App, HttpServer, dev::ServerHandle, web};

use crate::actor::{GenOrigin, GenSettings, Supervisor};
use crate::config::ValidConfig;
use crate::http::admin::AdminToken;
use crate::ledger::{Ledger, OpenError};
use crate::tools::Catalog;

/// How long a stop waits, after the grace period, for sessions, streams and requests to end.
const SETTLE: Duration = Duration::from_secs(5);
/// How long a stop waits for the ledger's writer: once for what is queued, once for the mark.
const COMMIT_DEADLINE: Duration = Duration::from_secs(10);

/// Why a server did not start. Nothing was served; a refusal before the ledger opened wrote
/// nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A listening socket could not be made.
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        /// The MCP endpoint or the admin API.
        what: &'static str,
        /// The address asked for.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The ledger did not open (locked by another process, foreign, unreadable).
    #[error(transparent)]
    Ledger(#[from] OpenError),
}

/// The entry point: see [`Server::builder`].
#[derive(Debug)]
pub struct Server;

impl Server {
    /// A server of `catalog`, with the default configuration (a SQLite ledger at
    /// `mcp-host.db` in the working directory) until [`ServerBuilder::config`] says otherwise.
    #[must_use]
    pub fn builder(catalog: Catalog) -> ServerBuilder {
        ServerBuilder {
            catalog,
            config: ValidConfig::default(),
            ledger: None,
            admin: None,
            path: "/mcp".into(),
            workers: None,
            tcp_user_timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// Where a listener comes from.
#[derive(Debug)]
enum Listen {
    Addr(String),
    Socket(TcpListener),
}

impl Listen {
    fn bind(self, what: &'static str) -> Result<TcpListener, ServeError> {
        match self {
            Listen::Socket(l) => Ok(l),
            Listen::Addr(a) => {
                bind(&a).map_err(|source| ServeError::Bind { what, addr: a, source })
            }
        }
    }
}

/// A server being set up: every setting has a default.
#[derive(Debug)]
pub struct ServerBuilder {
    catalog: Catalog,
    config: ValidConfig,
    ledger: Option<Ledger>,
    admin: Option<(Listen, AdminToken)>,
    path: String,
    workers: Option<usize>,
    tcp_user_timeout: Option<Duration>,
}

impl ServerBuilder {
    /// The configuration (validated: [`crate::config::RuntimeConfig::validate`]).
    #[must_use]
    pub fn config(mut self, config: ValidConfig) -> Self {
        self.config = config;
        self
    }

    /// Serve on this ledger instead of opening the one the configuration names (when it is
    /// opened after the listeners are bound).
    #[must_use]
    pub fn ledger(mut self, ledger: Ledger) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Serve the admin API (status, flags, rollback, drain, metrics, `/readyz`) on `addr`
    /// (`host:port`), for callers with the bearer `token`.
    #[must_use]
    pub fn admin(mut self, addr: impl Into<String>, token: &str) -> Self {
        self.admin = Some((Listen::Addr(addr.into()), AdminToken::new(token)));
        self
    }

    /// Serve the admin API on a socket bound already (see [`bind`]).
    #[must_use]
    pub fn admin_listener(mut self, listener: TcpListener, token: &str) -> Self {
        self.admin = Some((Listen::Socket(listener), AdminToken::new(token)));
        self
    }

    /// The endpoint's path (default `/mcp`).
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// HTTP worker threads (default: one per CPU).
    #[must_use]
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// How long written data may stay unacknowledged before the kernel ends a connection
    /// (default 60 s; `None`: the system's default): a reader that stopped reading cannot
    /// hold its connection, and its session, forever.
    #[must_use]
    pub fn tcp_user_timeout(mut self, t: Option<Duration>) -> Self {
        self.tcp_user_timeout = t;
        self
    }

    /// Bind `addr` (`host:port`; port 0 picks a free one), open the ledger, and serve until
    /// [`Running::shutdown`].
    ///
    /// # Errors
    /// [`ServeError`]: nothing is served.
    pub fn serve(self, addr: impl Into<String>) -> Result<Running, ServeError> {
        self.start(Listen::Addr(addr.into()))
    }

    /// As [`ServerBuilder::serve`], on a socket bound already (see [`bind`]).
    ///
    /// # Errors
    /// [`ServeError`]: nothing is served.
    pub fn serve_listener(self, listener: TcpListener) -> Result<Running, ServeError> {
        self.start(Listen::Socket(listener))
    }

    fn start(self, main: Listen) -> Result<Running, ServeError> {
        // The listeners first: a server started on a busy port exits before it writes
        // anything.
        let listener = main.bind("the MCP endpoint")?;
        let admin = match self.admin {
            Some((l, token)) => Some((l.bind("the admin API")?, token)),
            None => None,
        };
        let ledger = match self.ledger {
            Some(l) => l,
            None => Ledger::open(&self.config)?,
        };
        let sup = Supervisor::with_ledger(self.config.into_inner(), self.catalog, ledger.clone());
        let app_sup = Arc::clone(&sup);
        let path = self.path;
        let stats = Arc::clone(sup.stats());
        let user_timeout = self.tcp_user_timeout;
        let mut server = HttpServer::new(move || {
            App::new().configure(crate::http::configure(&path, Arc::clone(&app_sup)))
        })
        .on_connect(move |conn, data| {
            if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
                // Small SSE frames must not wait for Nagle's algorithm.
                let _ = tcp.set_nodelay(true);
                let _ = socket2::SockRef::from(tcp).set_tcp_user_timeout(user_timeout);
            }
            // Dropped with the connection: counts it closed.
            data.insert(stats.connection());
        })
        // A client that closes its connection ends its request at once: for a 2026-07-28
        // request that is its cancellation (its stream is dropped, its tool's token fires).
        .h1_allow_half_closed(false)
        .disable_signals()
        // Streams are ended by the drain, which has its own grace period; this only bounds
        // what is left after it.
        .shutdown_timeout(2);
        if let Some(w) = self.workers {
            server = server.workers(w);
        }
        let server = server.listen(listener).map_err(|e| listen_err("the MCP endpoint", e))?;
        let addrs = server.addrs();
        let (admin, admin_addrs) = match admin {
            Some((listener, token)) => {
                let admin_sup = Arc::clone(&sup);
                let admin = HttpServer::new(move || {
                    App::new().configure(crate::http::admin::configure(
                        Arc::clone(&admin_sup),
                        token.clone(),
                    ))
                })
                .workers(1)
                .disable_signals()
                .shutdown_timeout(1)
                .listen(listener)
                .map_err(|e| listen_err("the admin API", e))?;
                let addrs = admin.addrs();
                let admin = admin.run();
                let handle = admin.handle();
                actix_web::rt::spawn(admin);
                (Some(handle), addrs)
            }
            None => (None, Vec::new()),
        };
        let server = server.run();
        let http = server.handle();
        let served = actix_web::rt::spawn(server);
        sup.start_serving();
        Ok(Running { sup, ledger, http, admin, served, addrs, admin_addrs })
    }

    /// For an actix-web `App` of your own: open the ledger and admit requests; mount the
    /// endpoint with [`Mounted::configure`] in each worker's `App`, and call
    /// [`Mounted::shutdown`] before stopping your server.
    ///
    /// # Errors
    /// [`ServeError::Ledger`].
    pub fn mount(self) -> Result<Mounted, ServeError> {
        let ledger = match self.ledger {
            Some(l) => l,
            None => Ledger::open(&self.config)?,
        };
        let sup = Supervisor::with_ledger(self.config.into_inner(), self.catalog, ledger.clone());
        sup.start_serving();
        Ok(Mounted { sup, ledger, path: self.path })
    }
}

fn listen_err(what: &'static str, source: std::io::Error) -> ServeError {
    ServeError::Bind { what, addr: "the socket given".into(), source }
}

/// A listening socket on `addr` (`host:port`), made as actix-web makes its own (address
/// reuse, backlog 1024): for callers that must hold the port before anything else is done.
///
/// # Errors
/// The system's, or an address that does not resolve.
pub fn bind(addr: &str) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr = addr.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the address resolves to nothing")
    })?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// A server serving: its addresses, its controls, and its graceful stop.
#[derive(Debug)]
pub struct Running {
    sup: Arc<Supervisor>,
    ledger: Ledger,
    http: ServerHandle,
    admin: Option<ServerHandle>,
    served: actix_web::rt::task::JoinHandle<std::io::Result<()>>,
    addrs: Vec<SocketAddr>,
    admin_addrs: Vec<SocketAddr>,
}

impl Running {
    /// Where the MCP endpoint listens.
    #[must_use]
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Where the admin API listens (empty without one).
    #[must_use]
    pub fn admin_addrs(&self) -> &[SocketAddr] {
        &self.admin_addrs
    }

    /// Controls that do not keep the server alive (reload, figures).
    #[must_use]
    pub fn control(&self) -> Control {
        Control(Arc::downgrade(&self.sup))
    }

    /// Resolves when the admin API asks the server to stop (`POST /admin/drain`); run
    /// [`Running::shutdown`] then.
    pub async fn stop_requested(&self) {
        self.sup.stop_requested().await;
    }

    /// Resolves once this host lost its lease on a shared ledger: stop the process at once,
    /// without a drain ([`crate::ledger::Ledger::lease_lost`]).
    pub fn lease_lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.ledger.lease_lost()
    }

    /// The graceful stop: new requests get `503` with `Retry-After`, requests in flight
    /// finish within `grace` (those still running then are cancelled: a legacy client gets
    /// "server restarted" after the restart, a 2026-07-28 one "drained"), every stream ends
    /// with a `retry` hint once its events are committed, the HTTP servers stop, and the
    /// ledger commits what is queued and, if nothing was left running, the mark that this
    /// run stopped cleanly (the next start then restores open streams whole). Every wait has
    /// a deadline.
    ///
    /// # Errors
    /// The HTTP server's, if it had failed.
    pub async fn shutdown(self, grace: Duration) -> std::io::Result<Stopped> {
        let Running { sup, ledger, http, admin, served, .. } = self;
        let drained = drain(&sup, grace).await;
        // Every stream has ended: the HTTP server's stop only closes idle connections now.
        http.stop(true).await;
        let result = served.await.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        if let Some(h) = admin {
            h.stop(false).await;
        }
        let marked = finish(&sup, ledger).await;
        result.map(|()| Stopped { drained, marked })
    }
}

/// What a graceful stop achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// Every request in flight finished within the grace period.
    pub drained: bool,
    /// The clean-stop mark, or why it was not written (the next start then treats the run
    /// as a crash, which is safe).
    pub marked: Marked,
}

/// The endpoint mounted in an `App` of the caller's (see [`ServerBuilder::mount`]).
#[derive(Debug, Clone)]
pub struct Mounted {
    sup: Arc<Supervisor>,
    ledger: Ledger,
    path: String,
}

impl Mounted {
    /// Resolves once this host lost its lease on a shared ledger: stop the process at once,
    /// without a drain ([`crate::ledger::Ledger::lease_lost`]).
    pub fn lease_lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.ledger.lease_lost()
    }

    /// The endpoint (and `/readyz`, `/livez`) for one worker's `App`:
    /// `HttpServer::new(move || App::new().configure(m.configure()))`.
    pub fn configure(&self) -> impl FnOnce(&mut web::ServiceConfig) + use<> {
        crate::http::configure(&self.path, Arc::clone(&self.sup))
    }

    /// Controls that do not keep the endpoint alive (reload, figures).
    #[must_use]
    pub fn control(&self) -> Control {
        Control(Arc::downgrade(&self.sup))
    }

    /// The graceful stop of [`Running::shutdown`], except that stopping the HTTP server
    /// is the caller's (after this resolves).
    pub async fn shutdown(self, grace: Duration) -> Stopped {
        let drained = drain(&self.sup, grace).await;
        let marked = finish(&self.sup, self.ledger).await;
        Stopped { drained, marked }
    }
}

/// A weak handle on a server: what an operator's process does beside serving.
#[derive(Debug, Clone)]
pub struct Control(Weak<Supervisor>);

impl Control {
    /// Start a new generation with the reloadable settings of `config` (rollout flags,
    /// replay window, `retry` hint, `sessions.max_in_flight`): streams and sessions opened
    /// from then on follow it. Returns its number, or `None` once the server is gone.
    #[must_use]
    pub fn reload(&self, config: &ValidConfig) -> Option<u32> {
        let sup = self.0.upgrade()?;
        let new = GenSettings::from_config(config, "".into(), GenOrigin::Reload, 0);
        Some(sup.reload(GenOrigin::Reload, |s| s.reload_from(&new)).0)
    }

    /// The figures of the stats line and `GET /admin/status`, or `None` once the server is
    /// gone.
    #[must_use]
    pub fn stats(&self) -> Option<crate::stats::StatsSnapshot> {
        Some(self.0.upgrade()?.stats_snapshot())
    }

    /// Have the ledger give back the memory it caches and can read again (SQLite's page
    /// caches), without waiting for a connection in use; for a host returning free memory
    /// to the operating system once a burst is over.
    pub fn release_ledger_memory(&self) {
        if let Some(sup) = self.0.upgrade() {
            sup.ledger_writer().store().release_memory();
        }
    }
}

/// Stop admitting, let requests in flight finish within `grace`, then stop every session
/// and wait (at most [`SETTLE`]) for sessions, streams and requests to end. Returns whether
/// every request finished within `grace`.
async fn drain(sup: &Arc<Supervisor>, grace: Duration) -> bool {
    sup.begin_drain();
    tracing::info!(
        in_flight = sup.in_flight(),
        grace_secs = grace.as_secs_f64(),
        "draining: in-flight requests finish"
    );
    let deadline = tokio::time::Instant::now() + grace;
    let drained = sup.wait_until(deadline, |s| s.in_flight() <= 0).await;
    if !drained {
        tracing::warn!(
            in_flight = sup.in_flight(),
            "grace period over: the requests still running are cancelled (after the restart their clients get the \"server restarted\" error)"
        );
    }
    let stopped = sup.shutdown();
    // Sessions stop on their own arbiters and their streams end once their events are
    // committed; requests cancelled at the end of the grace period (tasks among them, which
    // record that they were interrupted) leave the in-flight count once they have.
    sup.wait_until(tokio::time::Instant::now() + SETTLE, Supervisor::is_idle).await;
    tracing::info!(sessions = stopped, streams_left = sup.stats().streams_live(), "drained");
    sup.mark_stopped();
    drained
}

/// What is still running when a stop's wait ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Leftovers {
    sessions: usize,
    streams: i64,
    in_flight: i64,
}

impl Leftovers {
    fn of(sup: &Supervisor) -> Leftovers {
        Leftovers {
            sessions: sup.session_count(),
            streams: sup.stats().streams_live(),
            in_flight: sup.in_flight(),
        }
    }

    /// Why this run cannot be marked clean: anything left may still hand records to the
    /// writer after the mark.
    fn unclean(self) -> Option<String> {
        let Leftovers { sessions, streams, in_flight } = self;
        (sessions > 0 || streams > 0 || in_flight > 0).then(|| {
            format!(
                "{sessions} sessions, {streams} streams and {in_flight} requests were still running"
            )
        })
    }
}

/// Whether the clean-stop mark was written, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marked {
    /// Written: the next start restores this run's open streams whole.
    Clean,
    /// Not written, for this reason.
    Not(String),
}

/// Stop every session (again: a session revived during the drain), wait (at most
/// [`SETTLE`]) for sessions, streams and requests to end, then mark the run clean if it is.
async fn finish(sup: &Supervisor, ledger: Ledger) -> Marked {
    sup.shutdown();
    sup.wait_until(tokio::time::Instant::now() + SETTLE, Supervisor::is_idle).await;
    let marked = mark_if_clean(Leftovers::of(sup), ledger).await;
    match &marked {
        Marked::Clean => tracing::info!("marked this run as stopped cleanly"),
        Marked::Not(why) => tracing::warn!(
            "this run is not marked as stopped cleanly ({why}): the next start treats it as a crash"
        ),
    }
    marked
}

/// Write the clean-stop mark when nothing is `left` and the writer commits everything queued
/// and then the mark, each within [`COMMIT_DEADLINE`].
async fn mark_if_clean(left: Leftovers, ledger: Ledger) -> Marked {
    if let Some(why) = left.unclean() {
        return Marked::Not(why);
    }
    let stuck = |what: &str| {
        Marked::Not(format!(
            "the ledger did not commit {what} within {} s",
            COMMIT_DEADLINE.as_secs()
        ))
    };
    // A barrier resolves only once everything queued before it is committed: a writer that
    // cannot commit misses the deadline.
    if tokio::time::timeout(COMMIT_DEADLINE, ledger.writer.barrier()).await.is_err() {
        return stuck("what was queued");
    }
    if tokio::time::timeout(COMMIT_DEADLINE, ledger.stopped_cleanly()).await.is_err() {
        return stuck("the mark");
    }
    Marked::Clean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_shows_the_library_example_as_it_is_built() {
        let readme = include_str!("../../README.md");
        let example = include_str!("../examples/one_tool.rs");
        assert!(
            readme.contains(&format!("```rust\n{example}```")),
            "README's library example differs from runtime/examples/one_tool.rs"
        );
        assert!(example.lines().count() <= 25, "the example stays within 25 lines");
    }

    const NONE: Leftovers = Leftovers { sessions: 0, streams: 0, in_flight: 0 };

    #[test]
    fn a_run_with_a_session_a_stream_or_a_request_left_is_not_clean() {
        assert_eq!(NONE.unclean(), None);
        for left in [
            Leftovers { sessions: 1, ..NONE },
            Leftovers { streams: 1, ..NONE },
            Leftovers { in_flight: 1, ..NONE },
        ] {
            assert!(left.unclean().is_some(), "{left:?}");
        }
    }

    /// The clean marks in the ledger at `path` (read with SQLite, as the next start would).
    fn marks(path: &std::path::Path) -> Vec<String> {
        let db =
            rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut st =
            db.prepare("SELECT key FROM kv WHERE key LIKE 'm/clean/%' ORDER BY key").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn the_clean_stop_mark_is_written_only_when_nothing_is_left() {
        let dir = mcp_devtools::TempDir::new("clean-mark");
        let mut cfg = crate::config::RuntimeConfig::default();
        cfg.ledger.path = dir.path().join("l.db").display().to_string();
        cfg.security.cursor_secret_hex = Some("ab".repeat(16).into());
        let path = dir.path().join("l.db");
        let run = |left: Leftovers| {
            let ledger = Ledger::open(&cfg).unwrap();
            let marked = actix_web::rt::System::new().block_on(mark_if_clean(left, ledger.clone()));
            // The last handle: its drop commits what is queued and closes the file.
            drop(ledger);
            marked
        };
        let first = run(Leftovers { sessions: 1, ..NONE });
        assert!(matches!(&first, Marked::Not(why) if why.contains("1 sessions")), "{first:?}");
        assert!(marks(&path).is_empty(), "a session was left: no mark");
        assert_eq!(run(NONE), Marked::Clean);
        assert_eq!(marks(&path), ["m/clean/2"]);
    }
}
