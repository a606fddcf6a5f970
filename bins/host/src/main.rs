//! `mcp-host`: config, tracing, supervisor, HTTP server, signals.

mod check;
mod config;
mod packs;
mod signals;
mod stats;
mod trim;

use std::time::Duration;

use clap::Parser;
use mcp_runtime::Server;

use crate::config::{Flags, HostConfig};
use crate::signals::{Signals, exit_with_parent, reload_on_sighup, stop_signal};

/// jemalloc for every Rust allocation (SQLite's C code keeps glibc's malloc). Measured side by
/// side with glibc and mimalloc (issue 23, `bench/results/peers-2026-12-04-allocators`, one
/// worker on one core, medians of 3): `tools/call` echo +11 % req/s on one session, +18 % on 64
/// sessions, +4 % for 2026-07-28 calls, for both jemalloc and mimalloc; jemalloc's RSS after
/// those runs was 18 / 37 MiB against mimalloc's 30 / 54 MiB (glibc 18 / 41). glibc spent
/// about 12 % of the CPU in malloc and free (the large task cell of each stream actor took its
/// slow path).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    if cfg.flags.check {
        return check::ledger(&cfg.runtime);
    }
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
    /// It refused to start (config, port, ledger, key or token file): exit status 2.
    Refused(String),
    /// Serving failed. Exit status 1.
    Failed(String),
}

async fn serve(cfg: HostConfig) -> Result<(), Failure> {
    use Failure::Refused;
    let signals = Signals::register().map_err(Refused)?;
    // The listeners first: a host started on a busy port (by mistake, beside a running one)
    // exits before it writes anything (no ledger, lock, key, token or journal file).
    let bind = |addr: std::net::SocketAddr, what: &str| {
        mcp_runtime::server::bind(&addr.to_string())
            .map_err(|e| Refused(format!("cannot bind {what}{}:{}: {e}", addr.ip(), addr.port())))
    };
    let listener = bind((cfg.bind, cfg.port).into(), "")?;
    let admin_listener = cfg
        .admin
        .as_ref()
        .map(|a| bind((a.bind, a.port).into(), "the admin API on "))
        .transpose()?;
    // Then the ledger, locked for this process before anything is written beside it (a second
    // host on it stops here, naming the first one's pid).
    let ledger =
        mcp_runtime::ledger::Ledger::open(&cfg.runtime).map_err(|e| Refused(e.to_string()))?;
    // Before the listening line: whoever waits for it finds the token file there.
    let admin_token = cfg
        .admin
        .as_ref()
        .map(|a| a.token_value(cfg.runtime.ledger.allow_insecure_key))
        .transpose()
        .map_err(|e| Refused(e.to_string()))?;
    let catalog = packs::for_host(&cfg.packs, &cfg.runtime.ledger, cfg.basket_idle_ttl_secs)
        .map_err(Refused)?;
    let user_timeout =
        (cfg.tcp_user_timeout_secs > 0).then(|| Duration::from_secs(cfg.tcp_user_timeout_secs));
    let mut builder = Server::builder(catalog)
        .config(cfg.runtime.clone())
        .ledger(ledger)
        .path(cfg.path.clone())
        .tcp_user_timeout(user_timeout);
    if let Some(w) = cfg.workers {
        builder = builder.workers(w);
    }
    if let (Some(l), Some(t)) = (admin_listener, &admin_token) {
        builder = builder.admin_listener(l, t);
    }
    let running = builder.serve_listener(listener).map_err(|e| Refused(e.to_string()))?;
    for addr in running.addrs() {
        // Tests and scripts wait for this line.
        println!("mcp-host listening on http://{addr}{}", cfg.path);
    }
    tracing::info!(packs = ?cfg.packs, "serving");
    if let Some(a) = &cfg.admin {
        for addr in running.admin_addrs() {
            // Tests and scripts wait for this line too.
            let token = a
                .token
                .as_ref()
                .map_or_else(|| a.token_file.display().to_string(), |_| "admin.token".into());
            println!("mcp-host admin on http://{addr}/admin/status (token: {token})");
        }
    }
    // A host that lost its lease on a shared ledger stops at once, as a crash does (whatever
    // it is doing, a drain included): what it holds may have been taken over.
    let lost = running.lease_lost();
    actix_web::rt::spawn(async move {
        lost.await;
        tracing::error!("exiting with status 3: this host lost its lease on the shared ledger");
        std::process::exit(mcp_runtime::ledger::LEASE_LOST_EXIT);
    });
    let Signals { mut term, mut int, hup } = signals;
    actix_web::rt::spawn(reload_on_sighup(running.control(), cfg.flags.clone(), hup));
    if cfg.trim_every_secs > 0 {
        trim::fix_thresholds();
        actix_web::rt::spawn(trim::run(
            running.control(),
            Duration::from_secs(cfg.trim_every_secs),
        ));
    }
    if let Some(ms) = cfg.stats_every_ms {
        stats::print_every(running.control(), Duration::from_millis(ms))
            .map_err(|e| Failure::Failed(format!("cannot start the stats thread: {e}")))?;
    }
    tokio::select! {
        () = stop_signal(&mut term, &mut int) => {}
        () = running.stop_requested() => {}
    }
    tracing::info!("stopping");
    // A second signal meanwhile exits at once; the ledger stays consistent (each batch is
    // one transaction).
    actix_web::rt::spawn(async move {
        stop_signal(&mut term, &mut int).await;
        tracing::warn!("second stop signal: exiting now");
        std::process::exit(130);
    });
    running
        .shutdown(Duration::from_secs(cfg.runtime.shutdown.grace_secs))
        .await
        .map_err(|e| Failure::Failed(e.to_string()))?;
    tracing::info!("stopped");
    Ok(())
}
