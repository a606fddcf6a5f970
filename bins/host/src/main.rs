//! `mcp-host`: config, tracing, supervisor, HTTP server, signals.

mod config;
mod packs;
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
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("MCP_HOST_LOG").unwrap_or_else(|_| "info".into()))
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
        Err(e) => {
            eprintln!("mcp-host: {e}");
            std::process::ExitCode::FAILURE
        }
    }
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

/// SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn serve(cfg: HostConfig) -> Result<(), String> {
    // The ledger pack journals beside a SQLite ledger, so its duplicate count survives restarts.
    let journal = (cfg.runtime.ledger.backend == mcp_runtime::config::LedgerBackend::Sqlite).then(|| std::path::PathBuf::from(format!("{}.appends", cfg.runtime.ledger.path)));
    let catalog = packs::build(&cfg.packs, journal.as_deref())?
        .build(ServerInfo { name: "mcp-host".into(), version: env!("CARGO_PKG_VERSION").into(), instructions: None })
        .map_err(|e| e.to_string())?;
    let ledger = mcp_runtime::ledger::Ledger::open(&cfg.runtime).map_err(|e| e.to_string())?;
    let closing = ledger.clone();
    let sup = Supervisor::with_ledger(cfg.runtime, catalog, ledger);
    let app_sup = Arc::clone(&sup);
    let path = cfg.path.clone();
    let stats = Arc::clone(sup.stats());
    let user_timeout = (cfg.tcp_user_timeout_secs > 0).then(|| Duration::from_secs(cfg.tcp_user_timeout_secs));
    let mut server = HttpServer::new(move || App::new().configure(mcp_runtime::http::configure(&path, Arc::clone(&app_sup))))
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
        .disable_signals()
        .shutdown_timeout(5);
    if let Some(w) = cfg.workers {
        server = server.workers(w);
    }
    let server = server.bind((cfg.bind, cfg.port)).map_err(|e| format!("cannot bind {}:{}: {e}", cfg.bind, cfg.port))?;
    for addr in server.addrs() {
        // Tests and scripts wait for this line.
        println!("mcp-host listening on http://{addr}{}", cfg.path);
    }
    tracing::info!(packs = ?cfg.packs, "serving");
    let server = server.run();
    let (handle, stopping) = (server.handle(), Arc::clone(&sup));
    actix_web::rt::spawn(async move {
        stop_signal().await;
        // Refuse new sessions before the HTTP server's graceful stop lets open connections
        // send more requests.
        stopping.begin_drain();
        tracing::info!("stopping");
        handle.stop(true).await;
    });
    if cfg.trim_every_secs > 0 {
        trim::fix_thresholds();
        actix_web::rt::spawn(trim::run(Arc::clone(&sup), Duration::from_secs(cfg.trim_every_secs)));
    }
    if let Some(ms) = cfg.stats_every_ms {
        let s = Arc::clone(&sup);
        // Its own thread: a reader that stops reading blocks this writer only, never the
        // arbiter that runs the stop signal and the trim timer.
        std::thread::Builder::new()
            .name("stats".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(ms));
                    let line = serde_json::to_string(&s.stats_snapshot()).unwrap_or_default();
                    // A reader that went away must not stop the server.
                    if writeln!(std::io::stdout(), "stats {line}").is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| format!("cannot start the stats thread: {e}"))?;
    }
    let result = server.await.map_err(|e| e.to_string());
    let stopped = sup.shutdown();
    // The sessions stop on their own arbiters: wait (bounded) until they have, so what their
    // last handlers recorded is queued; then it is committed before the process ends, with
    // the mark that this run stopped cleanly (sessions stay active in the ledger: the next
    // start revives them on first use, their copies complete).
    for _ in 0..250 {
        if sup.session_count() == 0 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = closing.stopped_cleanly().await;
    tracing::info!(sessions = stopped, "stopped");
    result
}
