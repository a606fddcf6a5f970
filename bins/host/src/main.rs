//! `mcp-host`: config, tracing, supervisor, HTTP server, signals.

mod config;
mod packs;
mod stop;
mod trim;

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpServer};
use clap::Parser;
use mcp_runtime::actor::Supervisor;
use mcp_runtime::tools::ServerInfo;

use crate::config::{Flags, HostConfig};

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MCP_HOST_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        // Colours only for a terminal: a log file or journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let cfg = match HostConfig::load(Flags::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-host: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if std::env::var_os("MCP_HOST_EXIT_WITH_PARENT").is_some() {
        exit_with_parent();
    }
    match actix_web::rt::System::new().block_on(serve(cfg)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(Failure::Refused(e)) => {
            eprintln!("mcp-host: {e}");
            std::process::ExitCode::from(2)
        }
        Err(Failure::Failed(e)) => {
            eprintln!("mcp-host: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Why the host ended with an error.
enum Failure {
    /// It refused to start (configuration, port, ledger, key or token file): nothing was
    /// served. Exit status 2, as for a configuration error.
    Refused(String),
    /// Serving failed. Exit status 1.
    Failed(String),
}

/// A listening socket on `bind:port`, made as actix-web's own `bind` makes it (address reuse,
/// backlog 1024), so it can be taken before anything else is done.
fn listen(bind: std::net::IpAddr, port: u16) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr = std::net::SocketAddr::new(bind, port);
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// For test tools that spawn the host: exit as soon as the spawning process is gone, even
/// if it was killed without a chance to stop us.
fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        while std::os::unix::process::parent_id() == parent {
            std::thread::sleep(Duration::from_millis(200));
        }
        std::process::exit(3);
    });
}

/// The signals the host handles, registered before it listens: a SIGTERM or SIGHUP that
/// arrives right after the listening line must not find the default action (which ends the
/// process) still in place.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> Result<Signals, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let on =
            |k: SignalKind, name: &str| signal(k).map_err(|e| format!("cannot handle {name}: {e}"));
        Ok(Signals {
            term: on(SignalKind::terminate(), "SIGTERM")?,
            int: on(SignalKind::interrupt(), "SIGINT")?,
            hup: on(SignalKind::hangup(), "SIGHUP")?,
        })
    }
}

/// SIGTERM or SIGINT.
async fn stop_signal(
    term: &mut tokio::signal::unix::Signal,
    int: &mut tokio::signal::unix::Signal,
) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Reload the reloadable settings on every SIGHUP: the config file and flags are read again
/// and a new generation starts with their `[rollout]`, replay window, `retry` hint and
/// `sessions.max_in_flight` (streams and sessions opened from then on follow it). A file that
/// does not load is reported and changes nothing.
async fn reload_on_sighup(
    sup: Arc<Supervisor>,
    flags: config::Flags,
    mut hup: tokio::signal::unix::Signal,
) {
    while hup.recv().await.is_some() {
        match HostConfig::load(flags.clone()) {
            Ok(c) => {
                let new = mcp_runtime::actor::GenSettings::from_config(
                    &c.runtime,
                    "".into(),
                    mcp_runtime::actor::GenOrigin::Reload,
                    0,
                );
                let g = sup.reload(mcp_runtime::actor::GenOrigin::Reload, |s| s.reload_from(&new));
                tracing::info!(
                    generation = g.0,
                    "reloaded (SIGHUP): rollout flags, replay window, retry hint and max_in_flight apply to what opens from now on; other settings need a restart"
                );
            }
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: the configuration does not load; nothing changed")
            }
        }
    }
}

/// The admin token: the configured one, else the token file's (created on first start with
/// mode 0600, like the ledger key, and refused like it when it is a symbolic link or others
/// may read it, unless `allow_insecure`).
fn admin_token(a: &config::AdminConfig, allow_insecure: bool) -> Result<String, String> {
    if let Some(t) = &a.token {
        return Ok(t.trim().to_owned());
    }
    let bytes = mcp_runtime::ledger::load_or_create_key(&a.token_file, allow_insecure)
        .map_err(|e| format!("admin token file {}: {e}", a.token_file.display()))?;
    Ok(mcp_runtime::ledger::codec::hex(&bytes))
}

/// The graceful stop: stop admitting (503 with `Retry-After`), let in-flight requests finish
/// within `shutdown.grace_secs`, then stop every session (each stream ends its connection
/// with a `retry` hint once its events are committed), and wait (bounded) until they have.
/// A second signal meanwhile exits at once; the ledger stays consistent (each batch is one
/// transaction).
async fn drain(
    sup: &Arc<Supervisor>,
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
) {
    sup.begin_drain();
    actix_web::rt::spawn(async move {
        stop_signal(&mut term, &mut int).await;
        tracing::warn!("second stop signal: exiting now");
        std::process::exit(130);
    });
    let grace = Duration::from_secs(sup.config().shutdown.grace_secs);
    let deadline = tokio::time::Instant::now() + grace;
    tracing::info!(
        in_flight = sup.in_flight(),
        grace_secs = grace.as_secs(),
        "draining: in-flight requests finish"
    );
    while sup.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    let left = sup.in_flight();
    if left > 0 {
        tracing::warn!(
            in_flight = left,
            "grace period over: the requests still running are cancelled (after the restart their clients get the \"server restarted\" error)"
        );
    }
    let stopped = sup.shutdown();
    // Sessions stop on their own arbiters and their streams end once their events are
    // committed; requests cancelled at the end of the grace period (tasks among them, which
    // record that they were interrupted) leave the in-flight count once they have: wait
    // (bounded) for all three.
    for _ in 0..500 {
        if sup.session_count() == 0 && sup.stats().streams_live() == 0 && sup.in_flight() == 0 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::info!(sessions = stopped, streams_left = sup.stats().streams_live(), "drained");
    sup.mark_stopped();
}

async fn serve(cfg: HostConfig) -> Result<(), Failure> {
    use Failure::Refused;
    let signals = Signals::register().map_err(Refused)?;
    // The listeners first: a host started on a busy port (by mistake, beside a running one)
    // exits before it writes anything (no ledger, lock, key, token or journal file).
    let listener = listen(cfg.bind, cfg.port)
        .map_err(|e| Refused(format!("cannot bind {}:{}: {e}", cfg.bind, cfg.port)))?;
    let admin_listener = cfg
        .admin
        .as_ref()
        .map(|a| {
            listen(a.bind, a.port).map_err(|e| {
                Refused(format!("cannot bind the admin API on {}:{}: {e}", a.bind, a.port))
            })
        })
        .transpose()?;
    // Then the ledger, locked for this process before anything is written beside it (a second
    // host on it stops here, naming the first one's pid).
    let ledger =
        mcp_runtime::ledger::Ledger::open(&cfg.runtime).map_err(|e| Refused(e.to_string()))?;
    // Before the listening line: whoever waits for it finds the token file there.
    let admin_token = cfg
        .admin
        .as_ref()
        .map(|a| admin_token(a, cfg.runtime.ledger.allow_insecure_key))
        .transpose()
        .map_err(Refused)?
        .map(|t| mcp_runtime::http::admin::AdminToken::new(&t));
    // The ledger and basket packs journal beside a SQLite ledger, so their duplicate counts
    // survive restarts.
    let beside = |ext: &str| {
        (cfg.runtime.ledger.backend == mcp_runtime::config::LedgerBackend::Sqlite)
            .then(|| std::path::PathBuf::from(format!("{}.{ext}", cfg.runtime.ledger.path)))
    };
    let (appends, orders) = (beside("appends"), beside("orders"));
    let catalog = packs::build(
        &cfg.packs,
        &packs::Journals { ledger: appends.as_deref(), orders: orders.as_deref() },
        cfg.basket_idle_ttl_secs,
    )
    .map_err(Refused)?
    .build(ServerInfo {
        name: "mcp-host".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        instructions: None,
    })
    .map_err(|e| Refused(e.to_string()))?;
    let closing = ledger.clone();
    let sup = Supervisor::with_ledger(cfg.runtime, catalog, ledger);
    let app_sup = Arc::clone(&sup);
    let path = cfg.path.clone();
    let stats = Arc::clone(sup.stats());
    let user_timeout =
        (cfg.tcp_user_timeout_secs > 0).then(|| Duration::from_secs(cfg.tcp_user_timeout_secs));
    let mut server = HttpServer::new(move || {
        App::new().configure(mcp_runtime::http::configure(&path, Arc::clone(&app_sup)))
    })
    .on_connect(move |conn, data| {
        if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
            // Small SSE frames must not wait for Nagle's algorithm.
            let _ = tcp.set_nodelay(true);
            // A reader that stopped reading cannot hold its connection (and its session)
            // forever: the kernel ends it once written data stays unacknowledged.
            let _ = socket2::SockRef::from(tcp).set_tcp_user_timeout(user_timeout);
        }
        // Dropped with the connection: counts it closed.
        data.insert(stats.connection());
    })
    // A client that closes its connection ends its request at once: for a 2026-07-28 request
    // that is its cancellation (its stream is dropped, its tool's token fires), instead of
    // the close being noticed only at the next write.
    .h1_allow_half_closed(false)
    .disable_signals()
    // Streams are ended by the drain, which has its own grace period; this only bounds
    // what is left after it.
    .shutdown_timeout(2);
    if let Some(w) = cfg.workers {
        server = server.workers(w);
    }
    let server = server
        .listen(listener)
        .map_err(|e| Refused(format!("cannot listen on {}:{}: {e}", cfg.bind, cfg.port)))?;
    for addr in server.addrs() {
        // Tests and scripts wait for this line.
        println!("mcp-host listening on http://{addr}{}", cfg.path);
    }
    tracing::info!(packs = ?cfg.packs, "serving");
    let admin_handle = match (&cfg.admin, admin_token, admin_listener) {
        (Some(a), Some(token), Some(listener)) => {
            let admin_sup = Arc::clone(&sup);
            let admin = HttpServer::new(move || {
                App::new().configure(mcp_runtime::http::admin::configure(
                    Arc::clone(&admin_sup),
                    token.clone(),
                ))
            })
            .workers(1)
            .disable_signals()
            .shutdown_timeout(1)
            .listen(listener)
            .map_err(|e| {
                Refused(format!("cannot listen on {}:{} (admin API): {e}", a.bind, a.port))
            })?;
            for addr in admin.addrs() {
                // Tests and scripts wait for this line too.
                println!(
                    "mcp-host admin on http://{addr}/admin/status (token: {})",
                    a.token.as_ref().map_or_else(
                        || a.token_file.display().to_string(),
                        |_| "admin.token".into()
                    )
                );
            }
            let admin = admin.run();
            let h = admin.handle();
            actix_web::rt::spawn(admin);
            Some(h)
        }
        _ => None,
    };
    let server = server.run();
    sup.start_serving();
    let (handle, stopping) = (server.handle(), Arc::clone(&sup));
    let Signals { mut term, mut int, hup } = signals;
    actix_web::rt::spawn(async move {
        tokio::select! {
            () = stop_signal(&mut term, &mut int) => {}
            () = stopping.stop_requested() => {}
        }
        tracing::info!("stopping");
        drain(&stopping, term, int).await;
        // Every stream has ended: the HTTP server's stop only closes idle connections now.
        handle.stop(true).await;
    });
    actix_web::rt::spawn(reload_on_sighup(Arc::clone(&sup), cfg.flags.clone(), hup));
    if cfg.trim_every_secs > 0 {
        trim::fix_thresholds();
        actix_web::rt::spawn(trim::run(Arc::clone(&sup), Duration::from_secs(cfg.trim_every_secs)));
    }
    if let Some(ms) = cfg.stats_every_ms {
        // Weak: the thread must not keep the supervisor (and through it the ledger's writer)
        // alive past the stop; it ends at its first tick after the supervisor is gone.
        let s = Arc::downgrade(&sup);
        // Its own thread: a reader that stops reading blocks this writer only, never the
        // arbiter that runs the stop signal and the trim timer.
        std::thread::Builder::new()
            .name("stats".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(ms));
                    let Some(sup) = s.upgrade() else { return };
                    let line = serde_json::to_string(&sup.stats_snapshot()).unwrap_or_default();
                    drop(sup);
                    // A reader that went away must not stop the server.
                    if writeln!(std::io::stdout(), "stats {line}").is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| Failure::Failed(format!("cannot start the stats thread: {e}")))?;
    }
    let result = server.await.map_err(|e| Failure::Failed(e.to_string()));
    if let Some(h) = admin_handle {
        h.stop(false).await;
    }
    // Every session stopped in the drain (or none was left); what their last handlers
    // recorded is queued: it is committed before the process ends, with the mark that this
    // run stopped cleanly when it did (sessions stay active in the ledger: the next start
    // revives them on first use, their copies complete).
    stop::finish(&sup, closing).await;
    tracing::info!("stopped");
    result
}
