//! `mcp-host` configuration: a TOML file (optional) whose runtime sections are the runtime's
//! own config types (every default lives there), overlaid, in this order, by
//! `MCP_HOST_SECTION__FIELD` environment variables, `--set section.field=value` flags and the
//! dedicated command-line flags. Every field is reachable from the file, and so from an
//! override. Every refusal is a [`ConfigError`] (exit status 2).

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;
use mcp_runtime::config::{
    AuthConfig, LedgerBackend, LedgerConfig, LimitsConfig, ModernConfig, QuotasConfig,
    RuntimeConfig, SecurityConfig, SessionsConfig, ShutdownConfig, SseConfig, TasksConfig,
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
    /// Set one config-file field (repeatable), e.g. `ledger.receipts_per_caller=1000` or
    /// `security.allowed_origins=["https://a.example"]`: the value is read as a TOML value,
    /// and one that is not TOML as a string. Over the file and MCP_HOST_SECTION__FIELD
    /// variables; under the dedicated flags.
    #[arg(long = "set", value_name = "SECTION.FIELD=VALUE")]
    pub(crate) set: Vec<String>,
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
    /// An OAuth authorization server whose JWT access tokens are accepted (repeatable), by
    /// issuer URL; turns OAuth on (auth.oauth.issuers). Needs --oauth-resource.
    #[arg(long = "oauth-issuer", value_name = "URL")]
    pub(crate) oauth_issuers: Vec<String>,
    /// This endpoint's public URI, e.g. https://mcp.example.com/mcp: the audience tokens must
    /// name and the base of the Protected Resource Metadata URL (auth.oauth.resource).
    #[arg(long = "oauth-resource", value_name = "URL")]
    pub(crate) oauth_resource: Option<String>,
    /// Scopes the Protected Resource Metadata advertises, comma-separated
    /// (auth.oauth.scopes_supported).
    #[arg(long = "oauth-scopes-supported", value_delimiter = ',', value_name = "A,B")]
    pub(crate) oauth_scopes_supported: Option<Vec<String>>,
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
    /// restarts), memory (lost with the process), or a Redis server that several hosts may
    /// share: redis://[user:password@]host:port/db (ledger.backend and ledger.redis_url).
    #[arg(long, value_parser = parse_ledger, value_name = "sqlite|memory|redis://…")]
    pub(crate) ledger: Option<LedgerArg>,
    /// The SQLite ledger file. Default mcp-host.db in the working directory.
    #[arg(long)]
    pub(crate) ledger_path: Option<String>,
    /// Start even when the ledger key file (or a previous one, or the admin token file) may
    /// be read by others than its owner: a warning instead of a refusal.
    #[arg(long)]
    pub(crate) allow_insecure_key: bool,
    /// Print a `stats {json}` line on stdout this often (ms): sessions, streams, stream
    /// memory, refusals by cause. For load and soak runs; off by default
    /// (`server.stats_every_ms`).
    #[arg(long)]
    pub(crate) stats_every_ms: Option<u64>,
    /// Port of the admin API and /metrics. Default 8081; 0 picks a free port (printed on
    /// start).
    #[arg(long)]
    pub(crate) admin_port: Option<u16>,
    /// Serve no admin API and no /metrics.
    #[arg(long)]
    pub(crate) no_admin: bool,
    /// Check the ledger and exit: it answers, and this configuration's key (or a previous one)
    /// is the one it records (exit 0), or why not (exit 2). Writes nothing to a Redis ledger
    /// and creates no file; an existing SQLite file is opened as a host would (its lock taken
    /// for the moment).
    #[arg(long)]
    pub(crate) check: bool,
}

/// `--ledger`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LedgerArg {
    Sqlite,
    Memory,
    /// The server's URL.
    Redis(String),
}

fn parse_ledger(s: &str) -> Result<LedgerArg, String> {
    match s {
        "sqlite" => Ok(LedgerArg::Sqlite),
        "memory" => Ok(LedgerArg::Memory),
        url if url.starts_with("redis://") || url.starts_with("rediss://") => {
            Ok(LedgerArg::Redis(url.to_owned()))
        }
        other => Err(format!(
            "{other:?} is none of sqlite, memory, redis://host:port/db, rediss://host:port/db"
        )),
    }
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
    auth: AuthConfig,
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
    pub(crate) fn token_value(&self, allow_insecure: bool) -> Result<String, ConfigError> {
        if let Some(t) = &self.token {
            return Ok(t.trim().to_owned());
        }
        let bytes = mcp_runtime::ledger::load_or_create_key(&self.token_file, allow_insecure)
            .map_err(|e| ConfigError::TokenFile {
                path: self.token_file.clone(),
                message: e.to_string(),
            })?;
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
    /// Return freed memory to the OS while the footprint shrinks, at most this often, and
    /// three times once requests stop (within a second of a burst's end; after a quiet spell
    /// without one, such a series at most this often) (s; default 10); 0 = never.
    trim_every_secs: u64,
    /// A connection whose written data stays unacknowledged this long (a reader that stopped
    /// reading, a peer that vanished) is closed by the kernel (TCP_USER_TIMEOUT, s); 0 = the
    /// system's default (about 15 minutes of retransmissions, or forever for a zero window).
    tcp_user_timeout_secs: u64,
    /// Print a `stats {json}` line on stdout this often (ms); none by default.
    stats_every_ms: Option<u64>,
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
            stats_every_ms: None,
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
    /// Read the file, overlay the environment's `MCP_HOST_*__*` variables and the `--set`
    /// flags, merge the dedicated flags, then validate.
    pub(crate) fn load(flags: Flags) -> Result<HostConfig, ConfigError> {
        Self::load_from(flags, std::env::vars_os())
    }

    /// [`HostConfig::load`] with the environment given.
    fn load_from(
        flags: Flags,
        vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Result<HostConfig, ConfigError> {
        let file = read_file(flags.config.as_deref())?;
        let mut overrides = env_overrides(vars)?;
        for arg in &flags.set {
            overrides.push(Override::from_set(arg)?);
        }
        Self::merge(overlay(file, &overrides)?, flags)
    }

    fn merge(f: FileConfig, flags: Flags) -> Result<HostConfig, ConfigError> {
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
            auth: f.auth,
        };
        match flags.ledger {
            Some(LedgerArg::Memory) => runtime.ledger.backend = LedgerBackend::Memory,
            Some(LedgerArg::Sqlite) => runtime.ledger.backend = LedgerBackend::Sqlite,
            Some(LedgerArg::Redis(url)) => {
                runtime.ledger.backend = LedgerBackend::Redis;
                runtime.ledger.redis_url = url;
            }
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
        let oauth = &mut runtime.auth.oauth;
        oauth.issuers.extend(flags.oauth_issuers);
        if let Some(r) = flags.oauth_resource {
            oauth.resource = Some(r);
        }
        if let Some(s) = flags.oauth_scopes_supported {
            oauth.scopes_supported = s;
        }
        let set = |slot: &mut u64, v: Option<u64>| *slot = v.unwrap_or(*slot);
        let set_usize = |slot: &mut usize, v: Option<usize>| *slot = v.unwrap_or(*slot);
        set_usize(&mut sse.replay_max_events, flags.replay_max_events);
        set_usize(&mut sse.replay_max_bytes, flags.replay_max_bytes);
        set(&mut sse.retry_ms, flags.retry_ms);
        set(&mut sessions.idle_ttl_secs, flags.session_ttl_secs);
        set(&mut sessions.client_request_timeout_secs, flags.client_request_timeout_secs);
        let runtime = runtime.validate()?;
        let path = flags.path.unwrap_or(f.server.path);
        if !path.starts_with('/') {
            return Err(ConfigError::Path(path));
        }
        let stats_every_ms = flags.stats_every_ms.or(f.server.stats_every_ms);
        if stats_every_ms == Some(0) {
            return Err(ConfigError::OutOfRange {
                field: "server.stats_every_ms",
                value: "0".into(),
                allowed: "1 or more",
            });
        }
        let packs = flags.packs.unwrap_or(f.tools.packs);
        if let Some(p) = packs.iter().find(|p| !crate::packs::KNOWN.contains(&p.as_str())) {
            return Err(ConfigError::UnknownPack(p.clone()));
        }
        let workers = flags.workers.or(f.server.workers);
        if let Some(w) = workers.filter(|w| !(1..=512).contains(w)) {
            return Err(ConfigError::OutOfRange {
                field: "server.workers",
                value: w.to_string(),
                allowed: "1..=512",
            });
        }
        if f.server.tcp_user_timeout_secs > 3600 {
            return Err(ConfigError::OutOfRange {
                field: "server.tcp_user_timeout_secs",
                value: f.server.tcp_user_timeout_secs.to_string(),
                allowed: "0..=3600",
            });
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
                return Err(ConfigError::AdminTokenShort);
            }
            if !a.bind.is_loopback() && a.token.is_none() {
                return Err(ConfigError::AdminBindNeedsToken(a.bind));
            }
            if a.port != 0 && a.port == flags.port.unwrap_or(f.server.port) && a.bind == bind {
                return Err(ConfigError::AdminPortShared(a.port));
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
                    return Err(ConfigError::OutOfRange {
                        field: "tools.basket_idle_ttl_secs",
                        value: s.to_string(),
                        allowed: "1..=2592000 (30 days)",
                    });
                }
            },
            stats_every_ms,
            trim_every_secs: f.server.trim_every_secs,
            tcp_user_timeout_secs: f.server.tcp_user_timeout_secs,
            runtime,
        })
    }
}

/// Why the host's configuration was refused (the host exits with status 2 and this message).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not TOML, or names an unknown field, or gives one a value of the
    /// wrong type (with its line and column).
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong, where.
        message: String,
    },
    /// A `--set` or an `MCP_HOST_SECTION__FIELD` variable is malformed, names an unknown
    /// field, or gives it a value of the wrong type.
    #[error("{origin}: {message}")]
    Override {
        /// The flag or the variable, as given.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A runtime setting out of its range (the runtime's own checks).
    #[error(transparent)]
    Runtime(#[from] mcp_runtime::config::ConfigError),
    /// A host setting out of its range.
    #[error("{field} = {value} is out of range (allowed: {allowed})")]
    OutOfRange {
        /// `section.field`.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// `server.path` does not start with `/`.
    #[error("server.path must start with '/': {0:?}")]
    Path(String),
    /// An unknown tool pack (checked before the ledger is opened).
    #[error("unknown tool pack {0:?} (known: {known})", known = crate::packs::KNOWN.join(", "))]
    UnknownPack(String),
    /// `admin.token` is too short to be a secret.
    #[error("admin.token must be at least 16 characters")]
    AdminTokenShort,
    /// The admin API on a non-loopback address without a configured token.
    #[error(
        "admin.bind = {0} is not a loopback address: set admin.token (at least 16 characters) to serve the admin API there"
    )]
    AdminBindNeedsToken(IpAddr),
    /// The admin API on the MCP endpoint's port.
    #[error("the admin API and the MCP endpoint cannot share port {0}")]
    AdminPortShared(u16),
    /// The admin token file could not be read or created, or is not private.
    #[error("admin token file {}: {message}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// The prefix of the environment variables that set config fields: `MCP_HOST_` then the
/// field's path in capitals with `__` between its parts (`MCP_HOST_LEDGER__RECEIPTS_PER_CALLER`).
/// A variable with the prefix but no `__` is not a config field (`MCP_HOST_LOG`).
const ENV_PREFIX: &str = "MCP_HOST_";

/// Environment variables named for what they hold rather than for their field: each sets
/// its field as the string it is (a password or a key of digits stays a string).
const ENV_ALIASES: [(&str, [&str; 2]); 2] = [
    ("MCP_HOST_REDIS_PASSWORD", ["ledger", "redis_password"]),
    ("MCP_HOST_LEDGER_KEY", ["security", "cursor_secret_hex"]),
];

/// One field set over the file: by a `--set` flag or an environment variable.
#[derive(Debug, Clone, PartialEq)]
struct Override {
    /// The flag or variable as given, for errors.
    origin: String,
    /// The field's path: section, field (and a key inside a table field).
    path: Vec<String>,
    value: toml::Value,
}

impl Override {
    /// `section.field=value`.
    fn from_set(arg: &str) -> Result<Override, ConfigError> {
        let origin = format!("--set {arg}");
        let Some((path, value)) = arg.split_once('=') else {
            return Err(ConfigError::Override {
                origin,
                message: "expected SECTION.FIELD=VALUE".into(),
            });
        };
        let path: Vec<String> = path.trim().split('.').map(str::to_owned).collect();
        Override::new(origin, path, value)
    }

    /// `MCP_HOST_SECTION__FIELD=value`: `None` for a variable without the prefix or `__`.
    fn from_env(name: &str, value: &str) -> Option<Result<Override, ConfigError>> {
        let rest = name.strip_prefix(ENV_PREFIX).filter(|r| r.contains("__"))?;
        let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        Some(Override::new(name.to_owned(), path, value))
    }

    fn new(origin: String, path: Vec<String>, value: &str) -> Result<Override, ConfigError> {
        if path.len() < 2 || path.iter().any(String::is_empty) {
            return Err(ConfigError::Override {
                origin,
                message: "name a field inside a section, e.g. ledger.receipts_per_caller".into(),
            });
        }
        Ok(Override { origin, path, value: toml_value(value) })
    }
}

/// `text` read as a TOML value (`5`, `true`, `"x"`, `["a", "b"]`, `{ k = "v" }`); text that
/// is not one is the string it is (`0.0.0.0`, `sqlite`, `/var/lib/mcp/l.db`).
fn toml_value(text: &str) -> toml::Value {
    let text = text.trim();
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_owned()))
}

/// The config-field variables among `vars` (the process's environment), sorted by name so the
/// outcome never depends on the environment's order.
fn env_overrides(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<Vec<Override>, ConfigError> {
    let mut found: Vec<Override> = Vec::new();
    for (name, value) in vars {
        let Some(name) = name.to_str() else { continue };
        if let Some((_, path)) = ENV_ALIASES.iter().find(|(alias, _)| *alias == name) {
            let value = value.to_str().ok_or_else(|| ConfigError::Override {
                origin: name.to_owned(),
                message: "the value is not UTF-8".into(),
            })?;
            // Set but empty (`MCP_HOST_REDIS_PASSWORD=` in a unit file): as if unset.
            if value.is_empty() {
                continue;
            }
            found.push(Override {
                origin: name.to_owned(),
                path: path.iter().map(|p| (*p).to_owned()).collect(),
                value: toml::Value::String(value.to_owned()),
            });
            continue;
        }
        if !name.strip_prefix(ENV_PREFIX).is_some_and(|r| r.contains("__")) {
            // Not a field (`MCP_HOST_LOG`, another program's variable): whatever its value.
            continue;
        }
        let value = value.to_str().ok_or_else(|| ConfigError::Override {
            origin: name.to_owned(),
            message: "the value is not UTF-8".into(),
        })?;
        if let Some(o) = Override::from_env(name, value).transpose()? {
            found.push(o);
        }
    }
    found.sort_by(|a, b| a.origin.cmp(&b.origin));
    // A field set by two variables (a named one and its `SECTION__FIELD` form): which one
    // counts would be a guess.
    for (i, a) in found.iter().enumerate() {
        if let Some(b) = found[i + 1..].iter().find(|b| b.path == a.path) {
            return Err(ConfigError::Override {
                origin: b.origin.clone(),
                message: format!("{} sets {} too: give one of them", a.origin, a.path.join(".")),
            });
        }
    }
    Ok(found)
}

/// The config file as a table (empty without one). A file that would not make a
/// [`FileConfig`] is refused here, with the line and column of what is wrong.
fn read_file(path: Option<&std::path::Path>) -> Result<toml::Table, ConfigError> {
    let Some(path) = path else { return Ok(toml::Table::new()) };
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    let refused = |e: toml::de::Error| ConfigError::File {
        path: path.to_path_buf(),
        message: e.to_string().trim_end().to_owned(),
    };
    toml::from_str::<FileConfig>(&text).map_err(refused)?;
    toml::from_str::<toml::Table>(&text).map_err(refused)
}

/// The file's table with `overrides` set over it, in order, as a [`FileConfig`]. Each
/// override must make a config on its own (so its error names it).
fn overlay(mut table: toml::Table, overrides: &[Override]) -> Result<FileConfig, ConfigError> {
    for o in overrides {
        let refused = |message: String| ConfigError::Override { origin: o.origin.clone(), message };
        let mut alone = toml::Table::new();
        set_path(&mut alone, &o.path, o.value.clone()).map_err(refused)?;
        toml::Value::Table(alone).try_into::<FileConfig>().map_err(|e| refused(one_line(&e)))?;
        set_path(&mut table, &o.path, o.value.clone()).map_err(refused)?;
    }
    toml::Value::Table(table).try_into::<FileConfig>().map_err(|e| ConfigError::Override {
        origin: "the overrides together".into(),
        message: one_line(&e),
    })
}

/// A deserialization error on one line (`… in \`server.port\``).
fn one_line(e: &toml::de::Error) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Set `value` at `path` in `table`, making the tables on the way.
fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = path.split_last().ok_or("an empty path")?;
    let mut t = table;
    for (i, p) in parents.iter().enumerate() {
        let entry = t.entry(p.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = entry
            .as_table_mut()
            .ok_or_else(|| format!("{} is not a table", path[..=i].join(".")))?;
    }
    t.insert(last.clone(), value);
    Ok(())
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
            let err = HostConfig::merge(file, flags(&[])).unwrap_err().to_string();
            assert!(err.contains(field), "{bad:?}: {err}");
        }
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&["--retry-ms", "0"]))
                .unwrap_err()
                .to_string()
                .contains("sse.retry_ms")
        );
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&["--workers", "0"]))
                .unwrap_err()
                .to_string()
                .contains("server.workers")
        );
        assert!(
            HostConfig::merge(FileConfig::default(), flags(&["--packs", "echo,nope"]))
                .unwrap_err()
                .to_string()
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
        let err = HostConfig::merge(file, flags(&[])).unwrap_err().to_string();
        assert!(err.contains("admin.token"), "{err}");
        let file: FileConfig =
            toml::from_str("[admin]\nbind = \"0.0.0.0\"\ntoken = \"0123456789abcdef0123\"\n")
                .unwrap();
        assert!(HostConfig::merge(file, flags(&[])).is_ok());
        let short: FileConfig = toml::from_str("[admin]\ntoken = \"short\"\n").unwrap();
        assert!(
            HostConfig::merge(short, flags(&[])).unwrap_err().to_string().contains("16 characters"),
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
        assert!(
            HostConfig::merge(file, flags(&[])).unwrap_err().to_string().contains("rollout.share")
        );
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

    /// `load` (what SIGHUP runs too) with `file` as the config file, `env` as the environment
    /// and `args` as the command line.
    fn with_overrides(
        file: &str,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Result<HostConfig, ConfigError> {
        let dir = mcp_devtools::TempDir::new("host-config");
        let path = dir.path().join("mcp-host.toml");
        std::fs::write(&path, file).unwrap();
        let path = path.to_str().unwrap().to_owned();
        let flags = flags(&[&["--config", path.as_str()], args].concat());
        let vars = env.iter().map(|(k, v)| ((*k).into(), (*v).into()));
        HostConfig::load_from(flags, vars)
    }

    #[test]
    fn the_redis_password_and_ledger_key_variables_set_their_fields_as_strings_and_clash_with_their_long_forms()
     {
        let key = "1234567890".repeat(4);
        let env = [("MCP_HOST_REDIS_PASSWORD", "12345"), ("MCP_HOST_LEDGER_KEY", key.as_str())];
        let c = with_overrides("", &env, &[]).unwrap();
        assert_eq!(c.runtime.ledger.redis_password.as_deref(), Some("12345"));
        assert_eq!(c.runtime.security.cursor_secret_hex.as_deref(), Some(key.as_str()));
        let twice = [
            ("MCP_HOST_LEDGER_KEY", key.as_str()),
            ("MCP_HOST_SECURITY__CURSOR_SECRET_HEX", key.as_str()),
        ];
        let e = with_overrides("", &twice, &[]).unwrap_err().to_string();
        assert!(e.contains("MCP_HOST_LEDGER_KEY") && e.contains("give one"), "{e}");
        let empty = with_overrides("", &[("MCP_HOST_REDIS_PASSWORD", "")], &[]).unwrap();
        assert_eq!(empty.runtime.ledger.redis_password, None, "empty is unset");
    }

    #[test]
    fn overrides_apply_in_order_file_then_environment_then_set_then_flags() {
        let file = "[ledger]\nreceipts_per_caller = 10\n[server]\nport = 9000\n";
        let env =
            [("MCP_HOST_LEDGER__RECEIPTS_PER_CALLER", "20"), ("MCP_HOST_SERVER__PORT", "9001")];
        let c = with_overrides(file, &[], &[]).unwrap();
        assert_eq!((c.runtime.ledger.receipts_per_caller, c.port), (10, 9000));
        let c = with_overrides(file, &env, &[]).unwrap();
        assert_eq!((c.runtime.ledger.receipts_per_caller, c.port), (20, 9001));
        let set = ["--set", "ledger.receipts_per_caller=30", "--set", "server.port=9002"];
        let c = with_overrides(file, &env, &set).unwrap();
        assert_eq!((c.runtime.ledger.receipts_per_caller, c.port), (30, 9002));
        let c = with_overrides(file, &env, &[&set[..], &["--port", "9003"]].concat()).unwrap();
        assert_eq!(c.port, 9003, "a dedicated flag is the last word");
        // Two --set of one field: the later wins.
        let c =
            with_overrides("", &[], &["--set", "server.port=1", "--set", "server.port=2"]).unwrap();
        assert_eq!(c.port, 2);
    }

    #[test]
    fn an_override_value_is_read_as_toml_and_anything_else_as_a_string() {
        let c = with_overrides(
            "",
            &[("MCP_HOST_ADMIN__TOKEN", "0123456789abcdef0123"), ("MCP_HOST_LOG", "debug")],
            &[
                "--set",
                "security.allowed_origins=[\"https://a.example\", \"https://b.example\"]",
                "--set",
                "security.bearer_tokens.Tok1=alice",
                "--set",
                "ledger.durability=sync",
                "--set",
                "admin.bind=0.0.0.0",
                "--set",
                "rollout.share=0.25",
                "--set",
                "tools.packs=[\"echo\"]",
            ],
        )
        .unwrap();
        assert_eq!(
            c.runtime.admit_policy().allowed_origins,
            vec!["https://a.example", "https://b.example"]
        );
        assert!(c.runtime.admit_policy().auth.is_some(), "a key inside a table field");
        assert_eq!(c.runtime.ledger.durability, mcp_runtime::ledger::Durability::Sync);
        let admin = c.admin.unwrap();
        assert_eq!(admin.bind.to_string(), "0.0.0.0");
        assert_eq!(
            admin.token.as_deref(),
            Some("0123456789abcdef0123"),
            "a secret from the environment"
        );
        assert_eq!((c.runtime.rollout.share, c.packs), (0.25, vec!["echo".to_owned()]));
        // A quoted number is a string where a string is wanted.
        let c = with_overrides("", &[], &["--set", "ledger.path=\"123\""]).unwrap();
        assert_eq!(c.runtime.ledger.path, "123");
    }

    #[test]
    fn an_override_of_an_unknown_field_or_of_the_wrong_type_or_range_names_where_it_came_from() {
        let refused = |env: &[(&str, &str)], args: &[&str]| {
            with_overrides("", env, args).map(|_| ()).unwrap_err().to_string()
        };
        let e = refused(&[], &["--set", "ledger.receipts_per_callr=5"]);
        assert!(
            e.starts_with("--set ledger.receipts_per_callr=5: ")
                && e.contains("receipts_per_callr"),
            "{e}"
        );
        let e = refused(&[("MCP_HOST_SERVER__PORT", "eighty")], &[]);
        assert!(e.starts_with("MCP_HOST_SERVER__PORT: "), "{e}");
        let e = refused(&[("MCP_HOST_NOPE__X", "1")], &[]);
        assert!(e.starts_with("MCP_HOST_NOPE__X: ") && e.contains("nope"), "{e}");
        for bad in ["server.port", "port=1", "=1", "server..port=1"] {
            let e = refused(&[], &["--set", bad]);
            assert!(e.starts_with(&format!("--set {bad}: ")), "{e}");
        }
        let e = refused(&[], &["--set", "server.port.x=1"]);
        assert!(e.contains("server.port") || e.contains("invalid type"), "{e}");
        // Ranges are the same checks as the file's.
        let e = refused(&[], &["--set", "sse.retry_ms=0"]);
        assert!(e.contains("sse.retry_ms"), "{e}");
        let e = refused(&[], &["--set", "server.stats_every_ms=0"]);
        assert!(e.contains("server.stats_every_ms"), "{e}");
    }

    /// Each dedicated flag, and the `--set` of the file field it stands for.
    const FLAG_FIELDS: &[(&[&str], &[&str])] = &[
        (&["--bind", "0.0.0.0"], &["server.bind=0.0.0.0"]),
        (&["--port", "9000"], &["server.port=9000"]),
        (&["--path", "/x"], &["server.path=/x"]),
        (&["--workers", "3"], &["server.workers=3"]),
        (
            &["--allowed-origin", "https://a.example"],
            &["security.allowed_origins=[\"https://a.example\"]"],
        ),
        (&["--allowed-host", "h.example"], &["security.allowed_hosts=[\"h.example\"]"]),
        (
            &["--trust-forwarded-for", "10.0.0.0/8"],
            &["security.trust_forwarded_for=[\"10.0.0.0/8\"]"],
        ),
        (&["--replay-max-events", "10"], &["sse.replay_max_events=10"]),
        (&["--replay-max-bytes", "100000"], &["sse.replay_max_bytes=100000"]),
        (&["--retry-ms", "50"], &["sse.retry_ms=50"]),
        (&["--session-ttl-secs", "60"], &["sessions.idle_ttl_secs=60"]),
        (&["--client-request-timeout-secs", "7"], &["sessions.client_request_timeout_secs=7"]),
        (&["--packs", "echo"], &["tools.packs=[\"echo\"]"]),
        (&["--basket-idle-ttl-secs", "60"], &["tools.basket_idle_ttl_secs=60"]),
        (&["--ledger", "memory"], &["ledger.backend=memory"]),
        (
            &["--ledger", "redis://10.0.0.9:6380/2"],
            &["ledger.backend=redis", "ledger.redis_url=redis://10.0.0.9:6380/2"],
        ),
        (&["--ledger-path", "/tmp/x.db"], &["ledger.path=/tmp/x.db"]),
        (&["--allow-insecure-key"], &["ledger.allow_insecure_key=true"]),
        (&["--stats-every-ms", "20"], &["server.stats_every_ms=20"]),
        (&["--admin-port", "9"], &["admin.port=9"]),
        (&["--no-admin"], &["admin.enabled=false"]),
        (
            &["--oauth-issuer", "https://as.example", "--oauth-resource", "https://m.example/mcp"],
            &[
                "auth.oauth.issuers=[\"https://as.example\"]",
                "auth.oauth.resource=https://m.example/mcp",
            ],
        ),
        (
            &["--oauth-resource", "https://m.example/mcp", "--oauth-issuer", "http://127.0.0.1:9"],
            &[
                "auth.oauth.resource=https://m.example/mcp",
                "auth.oauth.issuers=[\"http://127.0.0.1:9\"]",
            ],
        ),
        (
            &[
                "--oauth-scopes-supported",
                "a,b",
                "--oauth-issuer",
                "https://as.example",
                "--oauth-resource",
                "https://m.example/mcp",
            ],
            &[
                "auth.oauth.scopes_supported=[\"a\", \"b\"]",
                "auth.oauth.issuers=[\"https://as.example\"]",
                "auth.oauth.resource=https://m.example/mcp",
            ],
        ),
    ];

    #[test]
    fn every_flag_sets_a_file_field_that_an_override_reaches_as_well() {
        use clap::CommandFactory as _;
        let covered: Vec<String> = FLAG_FIELDS
            .iter()
            .map(|(args, _)| args[0].trim_start_matches("--").to_owned())
            .collect();
        for arg in Flags::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if ["config", "set", "help", "version", "check"].contains(&long) {
                continue;
            }
            assert!(covered.iter().any(|c| c == long), "--{long} has no file field in FLAG_FIELDS");
        }
        let plain = |mut c: HostConfig| {
            c.flags = flags(&[]);
            format!("{c:?}")
        };
        for (args, sets) in FLAG_FIELDS {
            let by_flag = plain(with_overrides("", &[], args).unwrap());
            let set_args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
            let by_set = plain(with_overrides("", &[], &set_args).unwrap());
            assert_eq!(by_flag, by_set, "{args:?} and --set {sets:?}");
            assert_ne!(
                by_flag,
                plain(with_overrides("", &[], &[]).unwrap()),
                "{args:?} changes something"
            );
        }
    }

    #[test]
    fn a_file_error_keeps_its_line_and_the_environment_is_read_in_name_order() {
        let dir = std::env::temp_dir().join(format!("mcp-host-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "[server]\nport = 1\nprot = 2\n").unwrap();
        let e = read_file(Some(&path)).unwrap_err().to_string();
        assert!(e.contains("bad.toml") && e.contains("line 3") && e.contains("prot"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        let vars = [
            ("MCP_HOST_SSE__RETRY_MS", "7"),
            ("MCP_HOST_EXIT_WITH_PARENT", "1"),
            ("OTHER__X", "1"),
            ("MCP_HOST_SERVER__PORT", "1"),
        ];
        let found = env_overrides(vars.iter().map(|(k, v)| ((*k).into(), (*v).into()))).unwrap();
        let names: Vec<&str> = found.iter().map(|o| o.origin.as_str()).collect();
        assert_eq!(names, ["MCP_HOST_SERVER__PORT", "MCP_HOST_SSE__RETRY_MS"]);
        assert_eq!(found[1].path, ["sse", "retry_ms"]);
        // A value that is not UTF-8 is refused only in a field's variable.
        use std::os::unix::ffi::OsStringExt as _;
        let bad = || std::ffi::OsString::from_vec(vec![0xff, 0xfe]);
        assert!(env_overrides([("MCP_HOST_LOG".into(), bad())].into_iter()).unwrap().is_empty());
        let e = env_overrides([("MCP_HOST_SSE__RETRY_MS".into(), bad())].into_iter()).unwrap_err();
        assert!(e.to_string().starts_with("MCP_HOST_SSE__RETRY_MS: "), "{e}");
    }
}
