//! `mcp-host` configuration: a TOML file (optional) whose runtime sections are the runtime's
//! own config types (every default lives there), overlaid by command-line flags.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;
use mcp_runtime::config::{
    LedgerBackend, LedgerConfig, LimitsConfig, ModernConfig, QuotasConfig, RuntimeConfig,
    SecurityConfig, SessionsConfig, ShutdownConfig, SseConfig, TasksConfig,
};
use mcp_runtime::proto::rollout::RolloutFlags;
use serde::Deserialize;

/// Command-line flags. Each overrides the matching config-file field.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "mcp-host",
    version,
    about = "MCP Streamable HTTP host (legacy session era: 2025-03-26, 2025-06-18, 2025-11-25)"
)]
pub(crate) struct Flags {
    /// TOML config file (see docs/configuration.md).
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
    /// A proxy's address range (repeatable), e.g. 10.0.0.0/8: a request whose TCP peer is
    /// inside one is counted (quotas) and, without authentication, owned as the client
    /// address its Forwarded / X-Forwarded-For header names. Default none (headers ignored).
    #[arg(long = "trust-forwarded-for", value_name = "CIDR")]
    pub(crate) trust_forwarded_for: Vec<mcp_runtime::proto::forwarded::Cidr>,
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
    /// Deadline of server-to-client requests (sampling, elicitation, roots) in seconds.
    #[arg(long)]
    pub(crate) client_request_timeout_secs: Option<u64>,
    /// Tool packs to serve (comma-separated): conformance, echo, ledger (a write tool with
    /// idempotency keys, for fault-injection runs), soak (tools the soak run drives), basket
    /// (SEP-2567's state-handle example), faults (a tool that panics).
    #[arg(long, value_delimiter = ',')]
    pub(crate) packs: Option<Vec<String>>,
    /// How long a basket of the basket pack lives unused (s); its tool description says so.
    /// Default 1800.
    #[arg(long)]
    pub(crate) basket_idle_ttl_secs: Option<u64>,
    /// Where sessions, streams and receipts are recorded: sqlite (default: they survive
    /// restarts) or memory (lost with the process).
    #[arg(long, value_parser = ["sqlite", "memory"])]
    pub(crate) ledger: Option<String>,
    /// The SQLite ledger file. Default mcp-host.db in the working directory.
    #[arg(long)]
    pub(crate) ledger_path: Option<String>,
    /// Start even when the ledger key file (or a previous one, or the admin token file) may
    /// be read by others than its owner: a warning instead of a refusal.
    #[arg(long)]
    pub(crate) allow_insecure_key: bool,
    /// Print a `stats {json}` line on stdout this often (ms): sessions, streams, stream
    /// memory, refusals by cause. For load and soak runs; off by default.
    #[arg(long)]
    pub(crate) stats_every_ms: Option<u64>,
    /// Port of the admin API and /metrics. Default 8081; 0 picks a free port (printed on
    /// start).
    #[arg(long)]
    pub(crate) admin_port: Option<u16>,
    /// Serve no admin API and no /metrics.
    #[arg(long)]
    pub(crate) no_admin: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FileConfig {
    server: ServerSection,
    security: SecurityConfig,
    sse: SseConfig,
    sessions: SessionsConfig,
    limits: LimitsConfig,
    quotas: QuotasConfig,
    ledger: LedgerConfig,
    tools: ToolsSection,
    pub(crate) rollout: RolloutFlags,
    shutdown: ShutdownConfig,
    modern: ModernConfig,
    tasks: TasksConfig,
    admin: AdminSection,
}

/// `[admin]`: the admin API and `/metrics`, on a listener of their own.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct AdminSection {
    /// Serve it. Default true.
    enabled: bool,
    /// Address. Default 127.0.0.1; another than loopback needs `token`.
    bind: IpAddr,
    /// Port. Default 8081; 0 picks a free one.
    port: u16,
    /// Bearer token. Default: the token file.
    token: Option<String>,
    /// Where the generated token is kept (created with mode 0600 on first start). Default
    /// `mcp-host.admin-token` beside the ledger.
    token_file: Option<PathBuf>,
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            enabled: true,
            bind: IpAddr::from([127, 0, 0, 1]),
            port: 8081,
            token: None,
            token_file: None,
        }
    }
}

/// Where the admin API listens and how it authenticates.
#[derive(Debug, Clone)]
pub(crate) struct AdminConfig {
    pub(crate) bind: IpAddr,
    pub(crate) port: u16,
    /// The configured token; `None`: read or create `token_file`.
    pub(crate) token: Option<String>,
    pub(crate) token_file: PathBuf,
}

impl AdminConfig {
    /// The admin token: the configured one, else the token file's (created on first start with
    /// mode 0600, like the ledger key, and refused like it when it is a symbolic link or others
    /// may read it, unless `allow_insecure`).
    pub(crate) fn token_value(&self, allow_insecure: bool) -> Result<String, String> {
        if let Some(t) = &self.token {
            return Ok(t.trim().to_owned());
        }
        let bytes = mcp_runtime::ledger::load_or_create_key(&self.token_file, allow_insecure)
            .map_err(|e| format!("admin token file {}: {e}", self.token_file.display()))?;
        Ok(mcp_runtime::ledger::codec::hex(&bytes))
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ServerSection {
    bind: IpAddr,
    port: u16,
    path: String,
    workers: Option<usize>,
    /// Return freed memory to the OS this often when the footprint shrank (s); 0 = never.
    trim_every_secs: u64,
    /// A connection whose written data stays unacknowledged this long (a reader that stopped
    /// reading, a peer that vanished) is closed by the kernel (TCP_USER_TIMEOUT, s); 0 = the
    /// system's default (about 15 minutes of retransmissions, or forever for a zero window).
    tcp_user_timeout_secs: u64,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            bind: IpAddr::from([127, 0, 0, 1]),
            port: 8080,
            path: "/mcp".into(),
            workers: None,
            trim_every_secs: 10,
            tcp_user_timeout_secs: 60,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ToolsSection {
    packs: Vec<String>,
    /// How long a basket lives unused (s), 1 to 30 days.
    basket_idle_ttl_secs: u64,
}

impl Default for ToolsSection {
    fn default() -> Self {
        ToolsSection {
            packs: vec!["conformance".into(), "echo".into()],
            basket_idle_ttl_secs: 1800,
        }
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
    pub(crate) basket_idle_ttl_secs: u64,
    pub(crate) stats_every_ms: Option<u64>,
    pub(crate) trim_every_secs: u64,
    pub(crate) tcp_user_timeout_secs: u64,
    pub(crate) runtime: mcp_runtime::config::ValidConfig,
    /// `None`: `--no-admin` or `admin.enabled = false`.
    pub(crate) admin: Option<AdminConfig>,
    /// What it was loaded from (SIGHUP reads them again).
    pub(crate) flags: Flags,
}

impl HostConfig {
    /// Merge file and flags, then validate.
    pub(crate) fn load(flags: Flags) -> Result<HostConfig, String> {
        let file: FileConfig = match &flags.config {
            None => FileConfig::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
        };
        Self::merge(file, flags)
    }

    fn merge(f: FileConfig, flags: Flags) -> Result<HostConfig, String> {
        let given = flags.clone();
        let bind = flags.bind.unwrap_or(f.server.bind);
        let mut runtime = RuntimeConfig {
            security: f.security,
            sse: f.sse,
            sessions: f.sessions,
            limits: f.limits,
            quotas: f.quotas,
            ledger: f.ledger,
            rollout: f.rollout,
            shutdown: f.shutdown,
            modern: f.modern,
            tasks: f.tasks,
        };
        match flags.ledger.as_deref() {
            Some("memory") => runtime.ledger.backend = LedgerBackend::Memory,
            Some(_) => runtime.ledger.backend = LedgerBackend::Sqlite,
            None => {}
        }
        if let Some(p) = flags.ledger_path {
            runtime.ledger.path = p;
        }
        runtime.ledger.allow_insecure_key |= flags.allow_insecure_key;
        let (security, sse, sessions) =
            (&mut runtime.security, &mut runtime.sse, &mut runtime.sessions);
        security.localhost_hosts_only = bind.is_loopback();
        security.allowed_origins.extend(flags.allowed_origins);
        security.allowed_hosts.extend(flags.allowed_hosts);
        security.trust_forwarded_for.extend(flags.trust_forwarded_for);
        let set = |slot: &mut u64, v: Option<u64>| *slot = v.unwrap_or(*slot);
        let set_usize = |slot: &mut usize, v: Option<usize>| *slot = v.unwrap_or(*slot);
        set_usize(&mut sse.replay_max_events, flags.replay_max_events);
        set_usize(&mut sse.replay_max_bytes, flags.replay_max_bytes);
        set(&mut sse.retry_ms, flags.retry_ms);
        set(&mut sessions.idle_ttl_secs, flags.session_ttl_secs);
        set(&mut sessions.client_request_timeout_secs, flags.client_request_timeout_secs);
        let runtime = runtime.validate().map_err(|e| e.to_string())?;
        let path = flags.path.unwrap_or(f.server.path);
        if !path.starts_with('/') {
            return Err(format!("path must start with '/': {path:?}"));
        }
        if flags.stats_every_ms == Some(0) {
            return Err("--stats-every-ms must be greater than 0".into());
        }
        let packs = flags.packs.unwrap_or(f.tools.packs);
        if let Some(p) = packs.iter().find(|p| !crate::packs::KNOWN.contains(&p.as_str())) {
            return Err(format!(
                "unknown tool pack {p:?} (known: {})",
                crate::packs::KNOWN.join(", ")
            ));
        }
        let workers = flags.workers.or(f.server.workers);
        if workers.is_some_and(|w| !(1..=512).contains(&w)) {
            return Err(format!(
                "server.workers = {} is out of range (allowed: 1..=512)",
                workers.unwrap_or(0)
            ));
        }
        if f.server.tcp_user_timeout_secs > 3600 {
            return Err(format!(
                "server.tcp_user_timeout_secs = {} is out of range (allowed: 0..=3600)",
                f.server.tcp_user_timeout_secs
            ));
        }
        let a = f.admin;
        let admin = (a.enabled && !flags.no_admin).then(|| AdminConfig {
            bind: a.bind,
            port: flags.admin_port.unwrap_or(a.port),
            token: a.token.clone(),
            token_file: a.token_file.clone().unwrap_or_else(|| {
                let dir = std::path::Path::new(&runtime.ledger.path)
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_default();
                dir.join("mcp-host.admin-token")
            }),
        });
        if let Some(a) = &admin {
            if a.token.as_deref().is_some_and(|t| t.trim().len() < 16) {
                return Err("admin.token must be at least 16 characters".into());
            }
            if !a.bind.is_loopback() && a.token.is_none() {
                return Err(format!(
                    "admin.bind = {} is not a loopback address: set admin.token (at least 16 characters) to serve the admin API there",
                    a.bind
                ));
            }
            if a.port != 0 && a.port == flags.port.unwrap_or(f.server.port) && a.bind == bind {
                return Err(format!(
                    "the admin API and the MCP endpoint cannot share port {}",
                    a.port
                ));
            }
        }
        Ok(HostConfig {
            admin,
            flags: given,
            bind,
            port: flags.port.unwrap_or(f.server.port),
            path,
            workers,
            packs,
            basket_idle_ttl_secs: match flags
                .basket_idle_ttl_secs
                .unwrap_or(f.tools.basket_idle_ttl_secs)
            {
                s @ 1..=2_592_000 => s,
                s => {
                    return Err(format!(
                        "tools.basket_idle_ttl_secs must be 1 to 2592000 (30 days), not {s}"
                    ));
                }
            },
            stats_every_ms: flags.stats_every_ms,
            trim_every_secs: f.server.trim_every_secs,
            tcp_user_timeout_secs: f.server.tcp_user_timeout_secs,
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
        assert_eq!(
            (c.bind.to_string().as_str(), c.port, c.path.as_str()),
            ("127.0.0.1", 8080, "/mcp")
        );
        assert!(c.runtime.admit_policy().localhost_hosts_only);
        assert_eq!(c.packs, vec!["conformance", "echo"]);
    }

    #[test]
    fn flags_override_file() {
        let file: FileConfig =
            toml::from_str("[server]\nport = 9000\n[sse]\nreplay_max_events = 10\n").unwrap();
        let c = HostConfig::merge(
            file,
            flags(&["--port", "9001", "--allowed-origin", "https://A.example", "--retry-ms", "50"]),
        )
        .unwrap();
        assert_eq!(c.port, 9001);
        assert_eq!((c.runtime.sse.replay_max_events, c.runtime.sse.retry_ms), (10, 50));
        assert_eq!(c.runtime.admit_policy().allowed_origins, vec!["https://a.example"]);
    }

    #[test]
    fn every_runtime_section_is_read_from_the_file() {
        let text = "[sessions]\nmax_retained_bytes = 1024\nclient_request_timeout_secs = 7\n[limits]\nbatch_max_items = 3\n[quotas]\nsessions_per_principal = 5\n[security]\ncursor_secret_hex = \"00112233445566778899aabbccddeeff\"\n";
        let c = HostConfig::merge(toml::from_str(text).unwrap(), flags(&[])).unwrap();
        assert_eq!(
            (c.runtime.sessions.max_retained_bytes, c.runtime.sessions.client_request_timeout_secs),
            (1024, 7)
        );
        assert_eq!(
            (c.runtime.limits.batch_max_items, c.runtime.quotas.sessions_per_principal),
            (3, 5)
        );
        assert_eq!(c.runtime.cursor_secret().unwrap().len(), 16);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_errors() {
        assert!(toml::from_str::<FileConfig>("[server]\nprot = 1\n").is_err());
        assert!(toml::from_str::<FileConfig>("[limits]\nbatch_max = 1\n").is_err());
        for bad in [
            "[sse]\nreplay_max_events = 0\n",
            "[sse]\nretry_ms = 0\n",
            "[sessions]\nmax_retained_streams = 0\n",
            "[sessions]\nretention_after_delivery_ms = 0\n",
        ] {
            let file: FileConfig = toml::from_str(bad).unwrap();
            let field = bad.lines().nth(1).unwrap().split(' ').next().unwrap();
            let err = HostConfig::merge(file, flags(&[])).unwrap_err();
            assert!(err.contains(field), "{bad:?}: {err}");
        }
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&["--retry-ms", "0"]))
                .unwrap_err()
                .contains("sse.retry_ms")
        );
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&["--workers", "0"]))
                .unwrap_err()
                .contains("server.workers")
        );
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&["--packs", "echo,nope"]))
                .unwrap_err()
                .contains("\"nope\""),
            "before the ledger is opened"
        );
    }

    #[test]
    fn the_ledger_is_sqlite_in_the_working_directory_unless_told_otherwise() {
        let c = HostConfig::merge(FileConfig::default(), flags(&[])).unwrap();
        assert_eq!(
            (c.runtime.ledger.backend, c.runtime.ledger.path.as_str()),
            (LedgerBackend::Sqlite, "mcp-host.db")
        );
        assert_eq!(c.runtime.ledger.key_path(), std::path::PathBuf::from("mcp-host.db.key"));
        let file: FileConfig = toml::from_str(
            "[ledger]
path = \"/var/lib/mcp/l.db\"\ndurability = \"sync\"\n",
        )
        .unwrap();
        let c = HostConfig::merge(file, flags(&["--ledger-path", "/tmp/x.db"])).unwrap();
        assert_eq!(
            (c.runtime.ledger.path.as_str(), c.runtime.ledger.durability),
            ("/tmp/x.db", mcp_runtime::ledger::Durability::Sync)
        );
        let c = HostConfig::merge(FileConfig::default(), flags(&["--ledger", "memory"])).unwrap();
        assert_eq!(c.runtime.ledger.backend, LedgerBackend::Memory);
        assert!(
            !c.runtime.ledger.allow_insecure_key,
            "key files must be owner-only unless allowed"
        );
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&["--allow-insecure-key"]))
                .unwrap()
                .runtime
                .ledger
                .allow_insecure_key
        );
        assert!(
            HostConfig::merge(
                toml::from_str("[ledger]\nallow_insecure_key = true\n").unwrap(),
                flags(&[])
            )
            .unwrap()
            .runtime
            .ledger
            .allow_insecure_key
        );
    }

    #[test]
    fn non_loopback_bind_turns_off_localhost_host_check() {
        let c = HostConfig::merge(FileConfig::default(), flags(&["--bind", "0.0.0.0"])).unwrap();
        assert!(!c.runtime.admit_policy().localhost_hosts_only);
    }

    #[test]
    fn the_admin_api_refuses_a_non_loopback_bind_without_a_configured_token() {
        let file: FileConfig = toml::from_str("[admin]\nbind = \"0.0.0.0\"\n").unwrap();
        let err = HostConfig::merge(file, flags(&[])).unwrap_err();
        assert!(err.contains("admin.token"), "{err}");
        let file: FileConfig =
            toml::from_str("[admin]\nbind = \"0.0.0.0\"\ntoken = \"0123456789abcdef0123\"\n")
                .unwrap();
        assert!(HostConfig::merge(file, flags(&[])).is_ok());
        let short: FileConfig = toml::from_str("[admin]\ntoken = \"short\"\n").unwrap();
        assert!(
            HostConfig::merge(short, flags(&[])).unwrap_err().contains("16 characters"),
            "also on loopback"
        );
        let c = HostConfig::merge(FileConfig::default(), flags(&[])).unwrap();
        let a = c.admin.unwrap();
        assert_eq!(
            (a.bind.to_string().as_str(), a.port, a.token_file),
            ("127.0.0.1", 8081, PathBuf::from("mcp-host.admin-token"))
        );
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&["--no-admin"]))
                .unwrap()
                .admin
                .is_none()
        );
        assert_eq!(
            HostConfig::merge(FileConfig::default(), flags(&["--admin-port", "0"]))
                .unwrap()
                .admin
                .unwrap()
                .port,
            0
        );
        let file: FileConfig = toml::from_str("[ledger]\npath = \"/var/lib/mcp/l.db\"\n").unwrap();
        assert_eq!(
            HostConfig::merge(file, flags(&[])).unwrap().admin.unwrap().token_file,
            PathBuf::from("/var/lib/mcp/mcp-host.admin-token")
        );
    }

    #[test]
    fn rollout_and_shutdown_are_read_from_the_file_and_checked() {
        let file: FileConfig = toml::from_str("[rollout]\nresumable = \"shadow\"\nshare = 0.01\nwrite_tools = \"receipts\"\n[shutdown]\ngrace_secs = 7\n").unwrap();
        let c = HostConfig::merge(file, flags(&[])).unwrap();
        assert_eq!(c.runtime.rollout.resumable, mcp_runtime::proto::rollout::Resumable::Shadow);
        assert_eq!((c.runtime.rollout.share, c.runtime.shutdown.grace_secs), (0.01, 7));
        let file: FileConfig = toml::from_str("[rollout]\nshare = 2.0\n").unwrap();
        assert!(HostConfig::merge(file, flags(&[])).unwrap_err().contains("rollout.share"));
        assert!(toml::from_str::<FileConfig>("[rollout]\nresumable = \"maybe\"\n").is_err());
    }

    #[test]
    fn trusted_proxy_ranges_come_from_the_file_and_the_flag_and_a_malformed_one_is_refused() {
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&[]))
                .unwrap()
                .runtime
                .security
                .trust_forwarded_for
                .is_empty(),
            "off by default"
        );
        let file: FileConfig =
            toml::from_str("[security]\ntrust_forwarded_for = [\"10.0.0.0/8\"]\n").unwrap();
        let c = HostConfig::merge(
            file,
            flags(&[
                "--trust-forwarded-for",
                "2001:db8::/32",
                "--trust-forwarded-for",
                "127.0.0.1",
            ]),
        )
        .unwrap();
        let got: Vec<String> =
            c.runtime.security.trust_forwarded_for.iter().map(ToString::to_string).collect();
        assert_eq!(got, ["10.0.0.0/8", "2001:db8::/32", "127.0.0.1/32"]);
        let e = toml::from_str::<FileConfig>("[security]\ntrust_forwarded_for = [\"10.0.0/8\"]\n")
            .unwrap_err();
        assert!(e.to_string().contains("10.0.0/8"), "{e}");
        let e =
            Flags::try_parse_from(["mcp-host", "--trust-forwarded-for", "10.0.0.1/8"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("host bits"), "{e}");
    }

    #[test]
    fn bearer_tokens_enable_auth() {
        let file: FileConfig =
            toml::from_str("[security.bearer_tokens]\n\"t1\" = \"alice\"\n").unwrap();
        assert!(HostConfig::merge(file, flags(&[])).unwrap().runtime.admit_policy().auth.is_some());
    }
}
