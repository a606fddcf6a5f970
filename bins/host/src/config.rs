//! `mcp-host` configuration: a TOML file (optional) overlaid by command-line flags, turned
//! into the runtime's typed [`RuntimeConfig`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;
use mcp_runtime::config::RuntimeConfig;
use mcp_runtime::proto::admission::TokenMap;
use serde::Deserialize;

/// Command-line flags. Each overrides the matching config-file field.
#[derive(Debug, Parser)]
#[command(name = "mcp-host", version, about = "MCP Streamable HTTP host (legacy session era: 2025-03-26, 2025-06-18, 2025-11-25)")]
pub(crate) struct Flags {
    /// TOML config file (see README, "Configuration").
    #[arg(long, short = 'c')]
    pub(crate) config: Option<PathBuf>,
    /// Address to bind. Default 127.0.0.1.
    #[arg(long)]
    pub(crate) bind: Option<IpAddr>,
    /// Port. Default 8080; 0 picks a free port (printed on start).
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// Endpoint path. Default /mcp.
    #[arg(long)]
    pub(crate) path: Option<String>,
    /// HTTP worker threads. Default: one per core.
    #[arg(long)]
    pub(crate) workers: Option<usize>,
    /// Extra allowed Origin (repeatable), e.g. https://app.example.com, or * for any.
    #[arg(long = "allowed-origin")]
    pub(crate) allowed_origins: Vec<String>,
    /// Extra allowed Host (repeatable), e.g. mcp.example.com.
    #[arg(long = "allowed-host")]
    pub(crate) allowed_hosts: Vec<String>,
    /// Replay window per stream, in events.
    #[arg(long)]
    pub(crate) replay_max_events: Option<usize>,
    /// Replay window per stream, in bytes.
    #[arg(long)]
    pub(crate) replay_max_bytes: Option<usize>,
    /// SSE retry hint in milliseconds.
    #[arg(long)]
    pub(crate) retry_ms: Option<u64>,
    /// Idle session lifetime in seconds.
    #[arg(long)]
    pub(crate) session_ttl_secs: Option<u64>,
    /// Tool packs to serve (comma-separated): conformance, echo, ledger (a write tool with
    /// idempotency keys, for fault-injection runs).
    #[arg(long, value_delimiter = ',')]
    pub(crate) packs: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FileConfig {
    server: ServerSection,
    security: SecuritySection,
    sse: SseSection,
    sessions: SessionsSection,
    tools: ToolsSection,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ServerSection {
    bind: IpAddr,
    port: u16,
    path: String,
    workers: Option<usize>,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection { bind: IpAddr::from([127, 0, 0, 1]), port: 8080, path: "/mcp".into(), workers: None }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct SecuritySection {
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
    allow_localhost_origins: bool,
    max_body_bytes: usize,
    /// token -> principal; empty disables authentication.
    bearer_tokens: BTreeMap<String, String>,
}

impl Default for SecuritySection {
    fn default() -> Self {
        SecuritySection { allowed_origins: Vec::new(), allowed_hosts: Vec::new(), allow_localhost_origins: true, max_body_bytes: 4 << 20, bearer_tokens: BTreeMap::new() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct SseSection {
    replay_max_events: usize,
    replay_max_bytes: usize,
    retry_ms: u64,
    prime_streams: bool,
    keepalive_ms: u64,
    write_queue_frames: usize,
}

impl Default for SseSection {
    fn default() -> Self {
        let d = RuntimeConfig::default();
        SseSection {
            replay_max_events: d.replay_max_events,
            replay_max_bytes: d.replay_max_bytes,
            retry_ms: d.retry_ms.unwrap_or(1000),
            prime_streams: d.prime_streams,
            keepalive_ms: d.keepalive_ms,
            write_queue_frames: d.write_queue_frames,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct SessionsSection {
    idle_ttl_secs: u64,
    max_sessions: usize,
    max_in_flight: usize,
    max_retained_streams: usize,
    retention_after_delivery_ms: u64,
    retention_undelivered_ms: u64,
}

impl Default for SessionsSection {
    fn default() -> Self {
        let d = RuntimeConfig::default();
        SessionsSection {
            idle_ttl_secs: d.session_idle_ttl_ms / 1000,
            max_sessions: d.max_sessions,
            max_in_flight: d.max_in_flight_per_session,
            max_retained_streams: d.max_retained_streams_per_session,
            retention_after_delivery_ms: d.retention_after_delivery_ms,
            retention_undelivered_ms: d.retention_undelivered_ms,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ToolsSection {
    packs: Vec<String>,
}

impl Default for ToolsSection {
    fn default() -> Self {
        ToolsSection { packs: vec!["conformance".into(), "echo".into()] }
    }
}

/// The resolved host configuration.
#[derive(Debug)]
pub(crate) struct HostConfig {
    pub(crate) bind: IpAddr,
    pub(crate) port: u16,
    pub(crate) path: String,
    pub(crate) workers: Option<usize>,
    pub(crate) packs: Vec<String>,
    pub(crate) runtime: RuntimeConfig,
}

impl HostConfig {
    /// Merge file and flags, then validate.
    pub(crate) fn load(flags: Flags) -> Result<HostConfig, String> {
        let file: FileConfig = match &flags.config {
            None => FileConfig::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
        };
        Self::merge(file, flags)
    }

    fn merge(f: FileConfig, flags: Flags) -> Result<HostConfig, String> {
        let bind = flags.bind.unwrap_or(f.server.bind);
        let mut admit = mcp_runtime::proto::admission::AdmitPolicy {
            allow_localhost_origins: f.security.allow_localhost_origins,
            allowed_origins: f.security.allowed_origins.iter().chain(&flags.allowed_origins).map(|o| o.to_ascii_lowercase()).collect(),
            localhost_hosts_only: bind.is_loopback(),
            allowed_hosts: f.security.allowed_hosts.iter().chain(&flags.allowed_hosts).map(|h| h.to_ascii_lowercase()).collect(),
            max_body_bytes: f.security.max_body_bytes,
            auth: None,
            prefer_sse: true,
        };
        if !f.security.bearer_tokens.is_empty() {
            admit.auth = Some(TokenMap::new(f.security.bearer_tokens.iter().map(|(t, p)| (t.as_str(), p.as_str()))));
        }
        let runtime = RuntimeConfig {
            admit,
            replay_max_events: flags.replay_max_events.unwrap_or(f.sse.replay_max_events),
            replay_max_bytes: flags.replay_max_bytes.unwrap_or(f.sse.replay_max_bytes),
            retry_ms: Some(flags.retry_ms.unwrap_or(f.sse.retry_ms)),
            prime_streams: f.sse.prime_streams,
            session_idle_ttl_ms: flags.session_ttl_secs.unwrap_or(f.sessions.idle_ttl_secs).saturating_mul(1000),
            max_sessions: f.sessions.max_sessions,
            max_in_flight_per_session: f.sessions.max_in_flight,
            max_retained_streams_per_session: f.sessions.max_retained_streams,
            retention_after_delivery_ms: f.sessions.retention_after_delivery_ms,
            retention_undelivered_ms: f.sessions.retention_undelivered_ms,
            keepalive_ms: f.sse.keepalive_ms,
            write_queue_frames: f.sse.write_queue_frames,
            ..RuntimeConfig::default()
        }
        .validate()
        .map_err(|e| e.to_string())?;
        let path = flags.path.unwrap_or(f.server.path);
        if !path.starts_with('/') {
            return Err(format!("path must start with '/': {path:?}"));
        }
        Ok(HostConfig {
            bind,
            port: flags.port.unwrap_or(f.server.port),
            path,
            workers: flags.workers.or(f.server.workers),
            packs: flags.packs.unwrap_or(f.tools.packs),
            runtime,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        Flags::parse_from(std::iter::once("mcp-host").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_bind_loopback_8080_with_host_checks() {
        let c = HostConfig::merge(FileConfig::default(), flags(&[])).unwrap();
        assert_eq!((c.bind.to_string().as_str(), c.port, c.path.as_str()), ("127.0.0.1", 8080, "/mcp"));
        assert!(c.runtime.admit.localhost_hosts_only);
        assert_eq!(c.packs, vec!["conformance", "echo"]);
    }

    #[test]
    fn flags_override_file() {
        let file: FileConfig = toml::from_str("[server]\nport = 9000\n[sse]\nreplay_max_events = 10\n").unwrap();
        let c = HostConfig::merge(file, flags(&["--port", "9001", "--allowed-origin", "https://A.example"])).unwrap();
        assert_eq!(c.port, 9001);
        assert_eq!(c.runtime.replay_max_events, 10);
        assert_eq!(c.runtime.admit.allowed_origins, vec!["https://a.example"]);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_errors() {
        assert!(toml::from_str::<FileConfig>("[server]\nprot = 1\n").is_err());
        let file: FileConfig = toml::from_str("[sse]\nreplay_max_events = 0\n").unwrap();
        assert!(HostConfig::merge(file, flags(&[])).unwrap_err().contains("replay_max_events"));
    }

    #[test]
    fn non_loopback_bind_turns_off_localhost_host_check() {
        let c = HostConfig::merge(FileConfig::default(), flags(&["--bind", "0.0.0.0"])).unwrap();
        assert!(!c.runtime.admit.localhost_hosts_only);
    }

    #[test]
    fn bearer_tokens_enable_auth() {
        let file: FileConfig = toml::from_str("[security.bearer_tokens]\n\"t1\" = \"alice\"\n").unwrap();
        assert!(HostConfig::merge(file, flags(&[])).unwrap().runtime.admit.auth.is_some());
    }
}
