//! `mcp-host`: config, tracing, supervisor, HTTP server, signals.

mod config;
mod packs;
mod trim;

use std::io::Write as _;
use std::time::Duration;

use clap::Parser;
use mcp_runtime::Server;
use mcp_runtime::server::Control;
use mcp_runtime::tools::ServerInfo;
use tokio::signal::unix::Signal;

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
    term: Signal,
    int: Signal,
    hup: Signal,
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
async fn stop_signal(term: &mut Signal, int: &mut Signal) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Reload the reloadable settings on every SIGHUP: the config file and flags are read again
/// and a new generation starts with their `[rollout]`, replay window, `retry` hint and
/// `sessions.max_in_flight` (streams and sessions opened from then on follow it). A file that
/// does not load is reported and changes nothing.
async fn reload_on_sighup(server: Control, flags: config::Flags, mut hup: Signal) {
    while hup.recv().await.is_some() {
        match HostConfig::load(flags.clone()) {
            Ok(c) => {
                let Some(g) = server.reload(&c.runtime) else { return };
                tracing::info!(
                    generation = g,
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
        .map(|a| admin_token(a, cfg.runtime.ledger.allow_insecure_key))
        .transpose()
        .map_err(Refused)?;
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
    .build(ServerInfo::new("mcp-host", env!("CARGO_PKG_VERSION")))
    .map_err(|e| Refused(e.to_string()))?;
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
        // Its own thread: a reader that stops reading blocks this writer only, never the
        // arbiter that runs the stop signal and the trim timer. It ends at its first tick
        // after the server is gone.
        let server = running.control();
        std::thread::Builder::new()
            .name("stats".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(ms));
                    let Some(s) = server.stats() else { return };
                    let line = serde_json::to_string(&s).unwrap_or_default();
                    // A reader that went away must not stop the server.
                    if writeln!(std::io::stdout(), "stats {line}").is_err() {
                        return;
                    }
                }
            })
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
