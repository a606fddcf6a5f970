//! `mcp-host`: config, tracing, supervisor, HTTP server, signals.

mod config;
mod packs;

use std::sync::Arc;

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
    match actix_web::rt::System::new().block_on(serve(cfg)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-host: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(cfg: HostConfig) -> Result<(), String> {
    let catalog = packs::build(&cfg.packs)?
        .build(ServerInfo { name: "mcp-host".into(), version: env!("CARGO_PKG_VERSION").into(), instructions: None })?;
    let sup = Supervisor::new(cfg.runtime, catalog);
    let app_sup = Arc::clone(&sup);
    let path = cfg.path.clone();
    let mut server = HttpServer::new(move || App::new().configure(mcp_runtime::http::configure(&path, Arc::clone(&app_sup))))
        .on_connect(|conn, _| {
            // Small SSE frames must not wait for Nagle's algorithm.
            if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
                let _ = tcp.set_nodelay(true);
            }
        })
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
    let result = server.run().await.map_err(|e| e.to_string());
    let stopped = sup.shutdown();
    tracing::info!(sessions = stopped, "stopped");
    result
}
