//! Runtime configuration: one typed tree with defaults, deserialized once and validated once
//! at start. `mcp-host`'s TOML sections (`[security]`, `[sse]`, `[sessions]`, `[limits]`,
//! `[quotas]`) are exactly these types, so every default lives here and nowhere else.
//!
//! Every field doc states its unit, default and trade-off; README's configuration table
//! repeats them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::proto::admission::{AdmitPolicy, TokenMap};

/// A setting that is a secret (a key, a password): read as the string it is, never shown by
/// `Debug` (a config printed for a bug report keeps it out).
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl std::ops::Deref for Secret {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.to_owned())
    }
}
use crate::proto::limits::{HandshakeLimits, MessageLimits};

/// Default replay window: events per stream.
pub const DEFAULT_REPLAY_MAX_EVENTS: usize = 1024;
/// Default replay window: bytes per stream.
pub const DEFAULT_REPLAY_MAX_BYTES: usize = 1 << 20;
/// Default SSE `retry` hint (ms).
pub const DEFAULT_RETRY_MS: u64 = 1_000;
/// Default idle session lifetime (s): 30 minutes.
pub const DEFAULT_SESSION_IDLE_TTL_SECS: u64 = 30 * 60;
/// Default deadline of a server-to-client request (s): 5 minutes, since a person may be
/// answering an elicitation.
pub const DEFAULT_CLIENT_REQUEST_TIMEOUT_SECS: u64 = 300;
/// Default server-wide budget for replay windows and retained streams: 1 GiB.
pub const DEFAULT_STREAM_MEMORY_BYTES: usize = 1 << 30;
/// Default server-wide budget for the parsed requests held in flight: 1 GiB.
pub const DEFAULT_REQUEST_MEMORY_BYTES: usize = 1 << 30;

/// `[security]`: who may talk to the endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// Extra allowed `Origin`s, `scheme://host[:port]` (case-insensitive); `"*"` allows any.
    /// Default none. Allowed origins also get CORS answers.
    pub allowed_origins: Vec<String>,
    /// Allow `http(s)://localhost|127.0.0.1|[::1]` on any port. Default true.
    pub allow_localhost_origins: bool,
    /// Extra allowed `Host`s. Default none.
    pub allowed_hosts: Vec<String>,
    /// Largest POST body (bytes). Default 4 MiB. The parsed size is bounded separately
    /// (`[limits]`).
    pub max_body_bytes: usize,
    /// A POST body must arrive in full within this long after its head (ms); else 408. The
    /// head's rules (origin, host, token) are checked before any body byte is buffered.
    /// Default 30 s.
    pub body_read_timeout_ms: u64,
    /// `token = "principal"`; non-empty turns bearer authentication on. Default none.
    pub bearer_tokens: BTreeMap<String, String>,
    /// Secret that keys cursor tags and session-id HMACs, hex (at least 32 digits). Default:
    /// the ledger's key file (`ledger.key_file`), so cursors and sessions survive restarts.
    pub cursor_secret_hex: Option<Secret>,
    /// TCP peers (address ranges, `"10.0.0.0/8"`) trusted to name the client in `Forwarded`
    /// / `X-Forwarded-For`: a request from inside one is counted (quotas) and owned (handles,
    /// tasks, receipts, without authentication) as the client address those headers name
    /// (the right-most one not itself trusted; see [`crate::proto::forwarded`]). Default
    /// none: the headers are ignored and every client behind one proxy is one caller.
    pub trust_forwarded_for: Vec<crate::proto::forwarded::Cidr>,
    /// Require a localhost `Host` (DNS-rebinding defence). Not read from the file: the host
    /// sets it from its bind address (on for loopback binds).
    #[serde(skip)]
    pub localhost_hosts_only: bool,
}

impl Default for SecurityConfig {
    fn default() -> SecurityConfig {
        SecurityConfig {
            allowed_origins: Vec::new(),
            allow_localhost_origins: true,
            allowed_hosts: Vec::new(),
            max_body_bytes: 4 << 20,
            body_read_timeout_ms: 30_000,
            bearer_tokens: BTreeMap::new(),
            cursor_secret_hex: None,
            trust_forwarded_for: Vec::new(),
            localhost_hosts_only: true,
        }
    }
}

/// `[auth]`: OAuth 2.1 authorization (the MCP authorization specification) and which scopes
/// each request needs. Static tokens (`security.bearer_tokens`) work beside it; a static
/// token's principal is trusted with every scope.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// `[auth.oauth]`: this server as an OAuth resource server.
    pub oauth: OAuthConfig,
    /// Scopes every request needs (an OAuth token's). Default none.
    pub required_scopes: Vec<String>,
    /// `[auth.scopes]`: scopes a method needs (`"tools/call"`), or a method naming one tool,
    /// prompt or resource (`"tools/call:checkout"`, `"prompts/get:summary"`,
    /// `"resources/read:file:///a"`), on top of `required_scopes`; the named entry wins over
    /// the method's. Default none.
    pub scopes: BTreeMap<String, Vec<String>>,
    /// `tools/list`, `prompts/list` and `resources/list` show an OAuth caller only what its
    /// token's scopes let it call, get or read. Default false (every caller sees the whole
    /// catalog; what it lacks the scope for is refused with 403 when called).
    pub filter_lists: bool,
    /// `[auth.scope_implies]`: a broader scope and the narrower ones it implies
    /// (`"baskets:admin" = ["baskets:write", "baskets:read"]`, followed transitively): a token
    /// with the broader one has them all. Default none.
    pub scope_implies: BTreeMap<String, Vec<String>>,
}

/// `[auth.oauth]`: the resource server. On when `issuers` or `introspection` names an
/// authorization server; then `resource` is required.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// Authorization servers whose JWT access tokens (RFC 9068) are accepted, by issuer URL
    /// (`https://`, or `http://` on loopback). Their metadata (RFC 8414, else OpenID) gives
    /// the JWKS. Default none.
    pub issuers: Vec<String>,
    /// Authorization servers whose opaque tokens are introspected (RFC 7662) with a client
    /// credential. Default none.
    pub introspection: Vec<IntrospectionConfig>,
    /// This endpoint's canonical URI, as clients reach it (`https://mcp.example.com/mcp`): the
    /// audience a token must name, and the base of the Protected Resource Metadata URL.
    /// Never taken from a request's `Host`. Required with OAuth.
    pub resource: Option<String>,
    /// `scopes_supported` of the Protected Resource Metadata (`offline_access` is never
    /// advertised). Default none.
    pub scopes_supported: Vec<String>,
    /// `resource_documentation` of the metadata. Default none.
    pub resource_documentation: Option<String>,
    /// Clock slack for `exp` and `nbf` (s). Default 30; 0 to 600.
    pub leeway_secs: u64,
    /// An unknown `kid` fetches the issuer's JWKS again at most this often (s). Default 60;
    /// 1 to 86 400.
    pub jwks_refresh_min_secs: u64,
    /// Keys are fetched again this long after the last fetch, even without an unknown `kid`
    /// (a key the issuer dropped stops verifying) (s). Default 3600; 60 to 604 800.
    pub jwks_max_age_secs: u64,
    /// Validated tokens kept (by SHA-256 digest, until they expire), so a token seen again
    /// costs a hash look-up. Default 10 000; 1 to 10 000 000.
    pub token_cache_entries: usize,
    /// An introspected token is asked about again after this long (s), or at its `exp` if
    /// sooner: a revoked token is refused at most this late. Default 60; 1 to 86 400.
    pub introspection_cache_secs: u64,
    /// Deadline of one fetch from an authorization server (metadata, JWKS, introspection)
    /// (ms). Default 5000; 100 to 60 000.
    pub fetch_timeout_ms: u64,
    /// Introspections in flight at once; a token arriving past them waits its fetch deadline,
    /// then gets 503. Default 32; 1 to 4096.
    pub introspection_concurrency: usize,
    /// Take JWTs whatever their `typ`. Default false: RFC 9068 §4, only `at+jwt` (an ID token
    /// or another JWT of the issuer is no access token); turn on for an authorization server
    /// that types its access tokens `JWT`, where `aud` alone keeps other JWTs out.
    pub accept_any_jwt_typ: bool,
    /// Refused tokens one client address may send, sustained, per second; past
    /// `failures_burst` of them its requests get 429 before any token is checked (no
    /// signature check, no introspection). Default 2; 1 to 1 000 000.
    pub failures_per_sec: u32,
    /// Refused tokens one client address may send at once (bucket size). Default 20; 1 to
    /// 1 000 000.
    pub failures_burst: u32,
}

impl Default for OAuthConfig {
    fn default() -> OAuthConfig {
        OAuthConfig {
            issuers: Vec::new(),
            introspection: Vec::new(),
            resource: None,
            scopes_supported: Vec::new(),
            resource_documentation: None,
            leeway_secs: 30,
            jwks_refresh_min_secs: 60,
            jwks_max_age_secs: 3600,
            token_cache_entries: 10_000,
            introspection_cache_secs: 60,
            fetch_timeout_ms: 5000,
            introspection_concurrency: 32,
            accept_any_jwt_typ: false,
            failures_per_sec: 2,
            failures_burst: 20,
        }
    }
}

impl OAuthConfig {
    /// Whether OAuth is on: an authorization server is configured.
    #[must_use]
    pub fn enabled(&self) -> bool {
        !self.issuers.is_empty() || !self.introspection.is_empty()
    }

    /// Every authorization server, in order, once (the metadata's `authorization_servers`).
    #[must_use]
    pub fn authorization_servers(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for i in self.issuers.iter().chain(self.introspection.iter().map(|i| &i.issuer)) {
            if !all.contains(i) {
                all.push(i.clone());
            }
        }
        all
    }
}

/// `[[auth.oauth.introspection]]`: one authorization server whose opaque tokens are
/// introspected.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionConfig {
    /// Its issuer URL (its metadata names the introspection endpoint).
    pub issuer: String,
    /// This server's client id there.
    pub client_id: String,
    /// Its secret (sent with HTTP Basic authentication).
    pub client_secret: Secret,
}

/// `[sse]`: streams, their replay windows and their connections.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SseConfig {
    /// Replay window per stream, in events. Default 1024. Larger = longer disconnects
    /// survive, more memory per stream.
    pub replay_max_events: usize,
    /// Replay window per stream, in bytes of encoded frames. Default 1 MiB. The newest event
    /// is always kept even when larger.
    pub replay_max_bytes: usize,
    /// SSE `retry` hint sent with priming events and before server-initiated closes (ms).
    /// Default 1000; 1 ms to 1 h.
    pub retry_ms: u64,
    /// SEP-1699 priming events on sessions negotiated at >= 2025-11-25. Default true; turn
    /// off only for intermediaries that reject empty events.
    pub prime_streams: bool,
    /// A comment line on an SSE connection idle this long (ms). Default 15 s; 100 ms to 1 h.
    pub keepalive_ms: u64,
    /// Frames queued for one connection before it counts as a slow reader and is detached (it
    /// can resume). Default 256.
    pub write_queue_frames: usize,
}

impl Default for SseConfig {
    fn default() -> SseConfig {
        SseConfig {
            replay_max_events: DEFAULT_REPLAY_MAX_EVENTS,
            replay_max_bytes: DEFAULT_REPLAY_MAX_BYTES,
            retry_ms: DEFAULT_RETRY_MS,
            prime_streams: true,
            keepalive_ms: 15_000,
            write_queue_frames: 256,
        }
    }
}

/// `[sessions]`: lifetime and bounds of one session.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// A session with no request in flight and no attached connection for this long expires
    /// (s). Default 1800; 1 s to 7 days.
    pub idle_ttl_secs: u64,
    /// Most live sessions; more are refused with 503. Default 20 000 (an awake idle session
    /// costs about 5 KiB, about 1 KiB once it hibernates: 20 to 100 MiB in all).
    pub max_sessions: usize,
    /// Most requests in flight per session; more are refused with 503. Default 256.
    pub max_in_flight: usize,
    /// Most closed streams a session keeps for late resumes (oldest evicted first; a resume
    /// of an evicted stream gets 410). Default 64.
    pub max_retained_streams: usize,
    /// Most bytes of closed streams a session keeps for late resumes (oldest evicted first;
    /// the newest closed stream is always kept). Default 4 MiB.
    pub max_retained_bytes: usize,
    /// Resumable time of a closed stream whose final response was fully handed to its
    /// connection (ms). Default 10 s.
    pub retention_after_delivery_ms: u64,
    /// Resumable time of a closed stream whose final response never reached a connection
    /// (ms). Default 5 min.
    pub retention_undelivered_ms: u64,
    /// Deadline of a server-to-client request (sampling, elicitation, roots) (s). When it
    /// passes, the tool gets a `-32008` error and the client a `notifications/cancelled`.
    /// Default 300 (the TypeScript SDK's is 60 s); 1 s to 1 day.
    pub client_request_timeout_secs: u64,
    /// Requests' messages waiting for one session actor, over all its connections; more are
    /// answered 503. Default 1024.
    pub mailbox: usize,
    /// Generation (config epoch) tagged into session ids and cursors. Default 1.
    pub generation: u32,
    /// A session with no attached connection and no request in flight for this long is
    /// parked (s): its actor stops and its state lives only in the ledger until its next
    /// request revives it, so abandoned sessions do not fill `max_sessions`. Default 300; 1 s
    /// to 7 days (at or past `idle_ttl_secs` it never parks).
    pub park_after_secs: u64,
    /// A session with no request in flight, no connection, no stream (kept or open) and no
    /// question to its client for this long hibernates (ms): its actor stops and the session
    /// table keeps it as data (no task, mailbox or timer: about 1 KiB against 5) until its next
    /// request wakes it, with no ledger read. It stays live: counted, and expiring or parking
    /// at its own deadlines. Not on a shared ledger (another host may change the session
    /// meanwhile). Default 1000; 0: never.
    pub hibernate_after_ms: u64,
}

impl Default for SessionsConfig {
    fn default() -> SessionsConfig {
        SessionsConfig {
            idle_ttl_secs: DEFAULT_SESSION_IDLE_TTL_SECS,
            max_sessions: 20_000,
            max_in_flight: 256,
            max_retained_streams: 64,
            max_retained_bytes: 4 << 20,
            retention_after_delivery_ms: 10_000,
            retention_undelivered_ms: 300_000,
            client_request_timeout_secs: DEFAULT_CLIENT_REQUEST_TIMEOUT_SECS,
            mailbox: 1024,
            generation: 1,
            park_after_secs: 300,
            hibernate_after_ms: 1_000,
        }
    }
}

/// `[limits]`: bounds on what one message may make the server hold.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Deepest nesting of a POST body (arrays and objects). Default 64; at most 128.
    pub json_max_depth: usize,
    /// Most JSON values (scalars, arrays, objects, object members) in one POST body.
    /// Default 262 144 (a parsed body then stays within tens of MiB).
    pub json_max_values: usize,
    /// Most JSON values in `initialize`'s `capabilities`, and in its `clientInfo` (a session
    /// keeps both for its whole life). Default 1024.
    pub handshake_max_values: usize,
    /// Deepest nesting of `capabilities`, and of `clientInfo`. Default 16.
    pub handshake_max_depth: usize,
    /// Most bytes of strings (keys and values) in `capabilities`, and in `clientInfo`.
    /// Default 64 KiB.
    pub handshake_max_string_bytes: usize,
    /// Longest string request id (bytes). Default 256.
    pub id_max_bytes: usize,
    /// Longest method name (bytes). Default 256.
    pub method_max_bytes: usize,
    /// Longest tool or prompt name in `tools/call` / `prompts/get` (bytes). Default 256.
    pub name_max_bytes: usize,
    /// Longest resource URI in `resources/*` (bytes). Default 8 KiB.
    pub uri_max_bytes: usize,
    /// Most messages in a 2025-03-26 batch. Default 64.
    pub batch_max_items: usize,
    /// Server-wide budget for the replay windows and retained streams of all sessions
    /// (bytes). When full, requests that would open a stream (SSE POST, GET, initialize) get
    /// 503 with `Retry-After`, and a stream that grows trims its own window to its newest
    /// event. Default 1 GiB.
    pub stream_memory_bytes: usize,
    /// Server-wide budget for the parsed requests in flight (bytes): each request that starts
    /// work (but `subscriptions/listen`, which keeps only its filter) is charged, from
    /// admission until it ends, the size its body parses into as the
    /// pre-parse scan estimates it (body bytes + 64 per value + 640 per non-empty object,
    /// `proto::limits::Scanned::parsed_bytes`), since a request holds its arguments while it
    /// runs. A request that would take the budget past its capacity gets 503 with
    /// `Retry-After: 1` before it is handed on. Default 1 GiB (no benchmark or gate comes
    /// near it); at least 1 MiB.
    pub request_memory_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> LimitsConfig {
        let m = MessageLimits::default();
        LimitsConfig {
            json_max_depth: m.json_max_depth,
            json_max_values: m.json_max_values,
            handshake_max_values: m.handshake.max_values,
            handshake_max_depth: m.handshake.max_depth,
            handshake_max_string_bytes: m.handshake.max_string_bytes,
            id_max_bytes: m.id_max_bytes,
            method_max_bytes: m.method_max_bytes,
            name_max_bytes: m.name_max_bytes,
            uri_max_bytes: m.uri_max_bytes,
            batch_max_items: m.batch_max_items,
            stream_memory_bytes: DEFAULT_STREAM_MEMORY_BYTES,
            request_memory_bytes: DEFAULT_REQUEST_MEMORY_BYTES,
        }
    }
}

/// `[quotas]`: per-principal (per remote address when authentication is off) bounds, so one
/// caller cannot lock the others out. Defaults never throttle honest heavy use.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotasConfig {
    /// Most live sessions of one principal; more are refused with 429. Default 10 000: half
    /// the default `max_sessions`, so one caller can never take the whole table.
    pub sessions_per_principal: usize,
    /// Sessions one principal may create per second, sustained; faster is refused with 429
    /// and `Retry-After`. Default 20 000.
    pub session_rate_per_sec: u32,
    /// Sessions one principal may create at once (bucket size). Default 20 000.
    pub session_burst: u32,
    /// One principal's share of `limits.stream_memory_bytes` (its sessions' replay windows,
    /// retained streams and kept handshakes), bytes; over it, its requests that would open a
    /// stream or a session get 429 and its growing streams trim their windows. Default: half
    /// of `limits.stream_memory_bytes`.
    pub stream_memory_per_principal: Option<usize>,
    /// Without authentication an IPv6 caller is its address's first this many bits (one host
    /// usually holds a /64). Default 64; 1 to 128. IPv4 addresses count whole.
    pub ipv6_prefix_len: u8,
}

impl Default for QuotasConfig {
    fn default() -> QuotasConfig {
        QuotasConfig {
            sessions_per_principal: 10_000,
            session_rate_per_sec: 20_000,
            session_burst: 20_000,
            stream_memory_per_principal: None,
            ipv6_prefix_len: 64,
        }
    }
}

/// Everything the runtime needs to know.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// `[security]`.
    pub security: SecurityConfig,
    /// `[sse]`.
    pub sse: SseConfig,
    /// `[sessions]`.
    pub sessions: SessionsConfig,
    /// `[limits]`.
    pub limits: LimitsConfig,
    /// `[quotas]`.
    pub quotas: QuotasConfig,
    /// `[ledger]`.
    pub ledger: LedgerConfig,
    /// `[rollout]`: which new streams are resumable (reloadable).
    pub rollout: crate::proto::rollout::RolloutFlags,
    /// `[shutdown]`: draining.
    pub shutdown: ShutdownConfig,
    /// `[modern]`: the stateless 2026-07-28 era.
    pub modern: ModernConfig,
    /// `[tasks]`: the tasks extension (2026-07-28).
    pub tasks: TasksConfig,
    /// `[auth]`: OAuth 2.1 and scopes.
    pub auth: AuthConfig,
}

/// `[tasks]`: how tasks (the 2026-07-28 tasks extension) are kept.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TasksConfig {
    /// How long a task and its result are kept after its creation (s), the `ttlMs` clients
    /// are told: a result not fetched by then is gone. Default 3600; 10 s to 7 days.
    pub ttl_secs: u64,
    /// How often clients are told to poll a task (ms, `pollIntervalMs`). Default 1000; 50 to
    /// 60000.
    pub poll_interval_ms: u64,
    /// Tasks one caller may have running at once in a process; beyond, an optional tool runs
    /// as an ordinary call and a tool that needs a task is refused with 429. Default 32; 1 to
    /// 65536.
    pub max_per_caller: usize,
    /// Tasks of one caller kept at once (running or ended, until their TTL): the bound on
    /// what one caller can make the ledger hold; beyond, as `max_per_caller`. Default 1024;
    /// 1 to 1048576.
    pub max_kept_per_caller: usize,
    /// Largest result a task keeps (bytes of its JSON); a larger one is replaced by a tool
    /// error saying so. Default 1048576; 1 KiB to 64 MiB.
    pub max_result_bytes: usize,
    /// Bytes of kept tasks (their records, results included) one caller may keep; beyond, as
    /// `max_kept_per_caller`. Default 1 GiB; 64 KiB to 1 TiB.
    pub bytes_per_caller: u64,
    /// Bytes of kept tasks every caller together may keep; beyond, an optional tool runs as an
    /// ordinary call and a tool that needs a task is refused with 503. Default 4 GiB; 64 KiB
    /// to 1 TiB.
    pub bytes_total: u64,
}

impl Default for TasksConfig {
    fn default() -> TasksConfig {
        TasksConfig {
            ttl_secs: 3600,
            poll_interval_ms: 1000,
            max_per_caller: 32,
            max_kept_per_caller: 1024,
            max_result_bytes: 1 << 20,
            bytes_per_caller: 1 << 30,
            bytes_total: 4 << 30,
        }
    }
}

/// `[modern]`: how modern (2026-07-28) requests are served.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModernConfig {
    /// Modern requests running at once, server-wide; one more is refused with 503 and
    /// `Retry-After: 1`. `server/discover` and the lists are answered without a place (they
    /// never wait). Default 1024; 1 to 65536.
    pub max_in_flight: usize,
    /// Modern requests (`tasks/*` included) one caller (principal, or remote address without
    /// authentication) may have running at once; one more is refused with 429 and
    /// `Retry-After: 1`, so one caller's slow calls cannot take every place. Default: half of
    /// `max_in_flight` (at least 1); 1 to `max_in_flight`.
    pub max_in_flight_per_caller: Option<usize>,
    /// `ttlMs` of `server/discover` and of the list results (ms): how long a client may reuse
    /// them. The catalog is fixed for the life of the process, so the cost of a long TTL is a
    /// client that sees a redeploy's new tools that much later. Default 300000 (5 minutes);
    /// 0 to 1 day.
    pub list_ttl_ms: u64,
    /// `ttlMs` of `resources/read` results (ms). Default 0 (a resource may change at any
    /// time); 0 to 1 day.
    pub read_ttl_ms: u64,
    /// How long a `requestState` issued with an `input_required` result stays valid (s): the
    /// time a person has to answer an elicitation. Default 600; 1 to 1 day.
    pub request_state_ttl_secs: u64,
    /// `subscriptions/listen` streams open at once, server-wide; one more is refused with 503
    /// and `Retry-After: 1`. Each costs a task, a small queue and a connection, for as long as
    /// its client keeps it open. Default 4096; 1 to 1048576.
    pub listen_max: usize,
    /// `subscriptions/listen` streams one caller (principal, or remote address without
    /// authentication) may hold open; one more is refused with 429. A client needs one, or a
    /// few; the bound keeps one caller from taking every place. Default 16; 1 to 65536.
    pub listen_per_caller: u32,
    /// URIs one listen request may name in `resourceSubscriptions` (more is `-32602`).
    /// Default 256; 1 to 65536.
    pub listen_max_uris: usize,
}

impl Default for ModernConfig {
    fn default() -> ModernConfig {
        ModernConfig {
            max_in_flight: 1024,
            max_in_flight_per_caller: None,
            list_ttl_ms: 300_000,
            read_ttl_ms: 0,
            request_state_ttl_secs: 600,
            listen_max: 4096,
            listen_per_caller: 16,
            listen_max_uris: 256,
        }
    }
}

/// `[shutdown]`: how the host drains (SIGTERM, SIGINT, `POST /admin/drain`) and how a
/// rollback drains the old generation's requests.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownConfig {
    /// In-flight requests get this long to finish once a drain starts (s); then the ones still
    /// running are cancelled (after a restart their clients get the "server restarted" error
    /// on resume). Also bounds a rollback's drain of the old generation's requests. Default
    /// 30; 0 to 1 hour.
    pub grace_secs: u64,
    /// `Retry-After` of the 503 a new request gets while draining (s). Default 5; 1 to 3600.
    pub retry_after_secs: u64,
}

impl Default for ShutdownConfig {
    fn default() -> ShutdownConfig {
        ShutdownConfig { grace_secs: 30, retry_after_secs: 5 }
    }
}

/// Where the ledger lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerBackend {
    /// One SQLite file (WAL): survives restarts.
    Sqlite,
    /// Process memory: lost with the process (tests, throwaway runs).
    Memory,
    /// A Redis server (`ledger.redis_url`; the `redis` feature).
    Redis,
}

/// Default of `ledger.checkpoint_pages` (64 MiB of log).
pub const DEFAULT_CHECKPOINT_PAGES: u32 = 16_384;
/// Default of `ledger.checkpoint_every_ms`.
pub const DEFAULT_CHECKPOINT_EVERY_MS: u64 = 1_000;

/// `ledger.redis_bus_retry_ms`'s default: a subscription to the other hosts' bus waits this
/// long (ms) after a cut before it subscribes again.
pub const DEFAULT_BUS_RETRY_MS: u64 = 200;

/// `[ledger]`: the durable record of sessions, streams and idempotency receipts.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// `"sqlite"` (survives restarts), `"memory"` or `"redis"`. Default `"sqlite"`.
    pub backend: LedgerBackend,
    /// The SQLite file. Default `mcp-host.db` in the working directory. With another backend,
    /// the key file's default name is still made from it.
    pub path: String,
    /// The Redis server of the `redis` backend: `redis://[user:password@]host:port/db`, or
    /// `rediss://…` over TLS (the system's trusted roots unless `redis_tls_ca_file`). Default
    /// `redis://127.0.0.1:6379/0`.
    pub redis_url: String,
    /// The Redis password, given apart from `redis_url` (which then has none), so it is
    /// never in a URL that messages or the process list might show: the
    /// `MCP_HOST_REDIS_PASSWORD` variable sets it. Never serialized. Default none.
    #[serde(skip_serializing)]
    pub redis_password: Option<Secret>,
    /// PEM file of the certificate authority a `rediss://` server's certificate must be
    /// signed by (instead of the system's trusted roots). Default none.
    pub redis_tls_ca_file: Option<String>,
    /// PEM files of this host's client certificate and its key, for a `rediss://` server that
    /// asks for one (`tls-auth-clients yes`): both or neither. Default none.
    pub redis_tls_cert_file: Option<String>,
    /// See `redis_tls_cert_file`.
    pub redis_tls_key_file: Option<String>,
    /// Prefix of every key the ledger writes in Redis (one per deployment sharing a server).
    /// Default `mcp:`.
    pub redis_prefix: String,
    /// How long a connect, read or write of the Redis backend may take (ms); a longer one is
    /// a failed commit (the writer retries, and fails closed meanwhile). Default 5000; 100 to
    /// 60 000.
    pub redis_timeout_ms: u64,
    /// Several hosts serve this Redis ledger at once, behind any balancer: any of them serves
    /// any session (each holds a lease of its own, `redis_lease_ms`). Off: one host at a time
    /// (a second one exits 2). Default off.
    pub redis_shared: bool,
    /// How long a host's lease on the Redis ledger lasts (ms); it is renewed every third of
    /// it. A host paused or cut off from Redis for longer is fenced: its writes are refused
    /// (and, when shared, the other hosts take its work over). Default 5000; 300 to 60 000.
    pub redis_lease_ms: u64,
    /// How long a subscription to the other hosts' bus (a shared Redis ledger) waits after a
    /// cut before it subscribes again (ms): each time it does, what was published meanwhile
    /// is looked up, so a server that accepts and cuts at once must not make that a loop.
    /// Default 200; 50 to 60 000.
    pub redis_bus_retry_ms: u64,
    /// `"batched"` (events reach the wire at once and are committed within a few ms; a crash
    /// loses at most the uncommitted batch) or `"sync"` (an event reaches the wire only after
    /// its commit with fsync). Default `"batched"`.
    pub durability: crate::ledger::Durability,
    /// File holding the secret that keys session-id HMACs and cursor tags (hex, created with
    /// mode 0600 on first start when missing). Default: the ledger's path plus `.key`. Ignored
    /// when `security.cursor_secret_hex` is set, and with the memory backend (a fresh secret
    /// per process).
    pub key_file: Option<String>,
    /// Key files of secrets this ledger was written with before a rotation (hex, first line):
    /// sessions recorded under one are found and moved to the current key on first use, and
    /// cursors minted with one are still accepted. Keep them listed for the idle TTL plus the
    /// undelivered retention after the rotation. Default none.
    pub previous_key_files: Vec<String>,
    /// Start even when a key file (`key_file`, `previous_key_files`, the host's admin token
    /// file) may be read by others than its owner: a warning instead of a refusal. Default
    /// false; a secret others can read lets them forge cursors and find session records.
    pub allow_insecure_key: bool,
    /// New session ids carry the millisecond they were made (`<generation>.<ms>.<random>`),
    /// and their ledger names lead with it: a new session's records go to the end of the
    /// ledger's indexes instead of a random page each (SQLite writes whole pages). Off: ids
    /// of random bits only, as builds before this setting made, which find no session whose
    /// id carries its time: keep it off while hosts may still be rolled back to such a build,
    /// or (a shared ledger) while one still serves. Either way every host of this build finds
    /// sessions of both kinds. Default: on for SQLite, off otherwise (Redis gains nothing).
    pub ordered_session_ids: Option<bool>,
    /// Most operations committed in one transaction. Default 4096.
    pub batch_max_ops: usize,
    /// How long a batch waits for more operations once its first arrived (µs), so that
    /// requests in quick succession share a commit. Default 200; 0 to 100 000. In `sync`
    /// mode it adds to the time an event waits before it goes out.
    pub commit_linger_us: u64,
    /// SQLite: pages (4 KiB each) in the write-ahead log that start a checkpoint (its copy
    /// into the main file, on a thread of its own). Default 16384 (64 MiB); 64 to 2^20. Past
    /// four times this the writer checkpoints the log itself, waiting for readers.
    pub checkpoint_pages: u64,
    /// SQLite: the longest after a commit before a checkpoint, which syncs the log (ms). In
    /// `batched` mode commits reach the disk then: a power loss loses those since, more while
    /// checkpoints fail. Default 1000; 10 to 600 000.
    pub checkpoint_every_ms: u64,
    /// Bytes waiting for the writer past which `batched` event appends are refused (the
    /// event still goes out; the durable copy gets a hole that a resume after a restart
    /// reports as lost events), and, in either mode, new durable work is refused with 503.
    /// Default 64 MiB.
    pub queue_max_bytes: usize,
    /// Expired records are removed this often (s). Default 60.
    pub sweep_every_secs: u64,
    /// How long an idempotency receipt (and the result it replays) is kept after its call
    /// started (s). Default 86 400 (a day).
    pub receipt_retention_secs: u64,
    /// Most sessions the ledger records (live and parked); past it the least recently used
    /// ones that are not live are evicted (their ids answer 404), checked after every sweep.
    /// Counted on a ledger of its own as the sessions its LRU index holds (out of memory)
    /// plus those in this host's memory (on a shared one, the index alone). Default
    /// 1,000,000.
    pub max_sessions: usize,
    /// Largest result a receipt keeps (bytes of JSON); of a larger one it keeps the size and
    /// SHA-256, and a replay answers `-32011` (ran once, result not kept). Default 1 MiB.
    pub receipt_max_bytes: usize,
    /// Idempotency receipts one caller may keep (until their retention ends); past it, its
    /// keyed write-tool calls are refused with 429 before the tool runs. Default 1,000,000;
    /// 1 to 2^32.
    pub receipts_per_caller: u64,
    /// Bytes of receipts (records with the results they replay) one caller may keep; past
    /// it, as `receipts_per_caller`. Default 1 GiB; 64 KiB to 1 TiB.
    pub receipt_bytes_per_caller: u64,
    /// Bytes of receipts every caller together may keep: what receipts can make the ledger
    /// hold; past it, keyed write-tool calls are refused with 503. Default 4 GiB; 64 KiB to
    /// 1 TiB.
    pub receipt_bytes_total: u64,
    /// Bytes of state handles (their records) one caller may keep, over every kind; past it,
    /// a create or a growing update is a tool error that says so. Default 256 MiB; 64 KiB to
    /// 1 TiB.
    pub handle_bytes_per_caller: u64,
    /// Bytes of state handles every caller together may keep; past it, as
    /// `handle_bytes_per_caller`. Default 4 GiB; 64 KiB to 1 TiB.
    pub handle_bytes_total: u64,
    /// How long a request waits for a commit it needs (a new session's record, a receipt
    /// before its tool runs, a handle's or a task's change) before it is answered without it
    /// (ms): 503 naming the ledger, or a tool error saying the change is not confirmed. Only a
    /// ledger that cannot commit makes a request wait this long. Default 10 000; 100 to 600 000.
    pub commit_wait_ms: u64,
}

impl Default for LedgerConfig {
    fn default() -> LedgerConfig {
        LedgerConfig {
            backend: LedgerBackend::Sqlite,
            path: "mcp-host.db".into(),
            redis_url: "redis://127.0.0.1:6379/0".into(),
            redis_password: None,
            redis_tls_ca_file: None,
            redis_tls_cert_file: None,
            redis_tls_key_file: None,
            redis_prefix: "mcp:".into(),
            redis_timeout_ms: 5_000,
            redis_shared: false,
            redis_lease_ms: 5_000,
            redis_bus_retry_ms: DEFAULT_BUS_RETRY_MS,
            durability: crate::ledger::Durability::Batched,
            key_file: None,
            previous_key_files: Vec::new(),
            allow_insecure_key: false,
            ordered_session_ids: None,
            batch_max_ops: 4096,
            commit_linger_us: 200,
            checkpoint_pages: u64::from(DEFAULT_CHECKPOINT_PAGES),
            checkpoint_every_ms: DEFAULT_CHECKPOINT_EVERY_MS,
            queue_max_bytes: 64 << 20,
            sweep_every_secs: 60,
            receipt_retention_secs: 86_400,
            max_sessions: 1_000_000,
            receipt_max_bytes: 1 << 20,
            commit_wait_ms: 10_000,
            receipts_per_caller: 1_000_000,
            receipt_bytes_per_caller: 1 << 30,
            receipt_bytes_total: 4 << 30,
            handle_bytes_per_caller: 256 << 20,
            handle_bytes_total: 4 << 30,
        }
    }
}

impl LedgerConfig {
    /// Whether new session ids carry their time (`ordered_session_ids`, or its default).
    #[must_use]
    pub fn ordered_session_ids(&self) -> bool {
        self.ordered_session_ids.unwrap_or(self.backend == LedgerBackend::Sqlite)
    }

    /// The key file: `key_file`, else the ledger's path plus `.key`.
    #[must_use]
    pub fn key_path(&self) -> std::path::PathBuf {
        self.key_file.clone().map_or_else(|| format!("{}.key", self.path).into(), Into::into)
    }
}

/// A configuration value out of range, or unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A number outside its documented range.
    #[error("{field} = {value} is out of range (allowed: {min}..={max})")]
    OutOfRange {
        /// `section.field`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// `security.cursor_secret_hex` is not hex or too short.
    #[error("security.cursor_secret_hex must be at least 32 hexadecimal digits")]
    CursorSecret,
    /// `[rollout]` is unusable.
    #[error("{0}")]
    Rollout(String),
    /// `ledger.redis_shared` with settings it cannot work with.
    #[error("ledger.redis_shared = true {0}")]
    Shared(&'static str),
    /// The Redis backend's connection settings contradict each other.
    #[error("{0}")]
    Redis(&'static str),
    /// `[auth]` is unusable.
    #[error("{0}")]
    Auth(String),
}

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

fn check(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange { field, value, min, max })
    }
}

pub(crate) fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// A [`RuntimeConfig`] whose every range was checked: made only by
/// [`RuntimeConfig::validate`] (or [`ValidConfig::default`], the defaults, which are valid).
/// Read it through `Deref`.
#[derive(Debug, Clone, Default)]
pub struct ValidConfig(RuntimeConfig);

impl ValidConfig {
    /// The checked configuration, to change and validate again.
    #[must_use]
    pub fn into_inner(self) -> RuntimeConfig {
        self.0
    }
}

impl std::ops::Deref for ValidConfig {
    type Target = RuntimeConfig;
    fn deref(&self) -> &RuntimeConfig {
        &self.0
    }
}

impl RuntimeConfig {
    /// Check every range.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first field out of range.
    pub fn validate(self) -> Result<ValidConfig, ConfigError> {
        let (se, ss, l, q) = (&self.sse, &self.sessions, &self.limits, &self.quotas);
        let max = u64::MAX;
        let rows: [(&'static str, u64, u64, u64); 76] = [
            ("security.max_body_bytes", self.security.max_body_bytes as u64, 1, 1 << 30),
            ("security.body_read_timeout_ms", self.security.body_read_timeout_ms, 100, 600_000),
            ("sse.replay_max_events", se.replay_max_events as u64, 1, 1 << 20),
            ("sse.replay_max_bytes", se.replay_max_bytes as u64, 1, 1 << 30),
            ("sse.retry_ms", se.retry_ms, 1, HOUR_MS),
            ("sse.keepalive_ms", se.keepalive_ms, 100, HOUR_MS),
            ("sse.write_queue_frames", se.write_queue_frames as u64, 1, 1 << 20),
            ("sessions.idle_ttl_secs", ss.idle_ttl_secs, 1, 7 * 24 * 3600),
            ("sessions.max_sessions", ss.max_sessions as u64, 1, 10_000_000),
            ("sessions.max_in_flight", ss.max_in_flight as u64, 1, 1 << 16),
            ("sessions.max_retained_streams", ss.max_retained_streams as u64, 1, 1 << 16),
            ("sessions.max_retained_bytes", ss.max_retained_bytes as u64, 1, 1 << 34),
            ("sessions.retention_after_delivery_ms", ss.retention_after_delivery_ms, 1, DAY_MS),
            ("sessions.retention_undelivered_ms", ss.retention_undelivered_ms, 1, DAY_MS),
            ("sessions.client_request_timeout_secs", ss.client_request_timeout_secs, 1, 24 * 3600),
            ("sessions.mailbox", ss.mailbox as u64, 16, 1 << 20),
            ("sessions.park_after_secs", ss.park_after_secs, 1, 7 * 24 * 3600),
            ("sessions.hibernate_after_ms", ss.hibernate_after_ms, 0, DAY_MS),
            ("limits.json_max_depth", l.json_max_depth as u64, 2, 128),
            ("limits.json_max_values", l.json_max_values as u64, 16, max),
            ("limits.handshake_max_values", l.handshake_max_values as u64, 8, max),
            ("limits.handshake_max_depth", l.handshake_max_depth as u64, 2, 128),
            ("limits.handshake_max_string_bytes", l.handshake_max_string_bytes as u64, 64, max),
            ("limits.id_max_bytes", l.id_max_bytes as u64, 8, max),
            ("limits.method_max_bytes", l.method_max_bytes as u64, 32, max),
            ("limits.name_max_bytes", l.name_max_bytes as u64, 8, max),
            ("limits.uri_max_bytes", l.uri_max_bytes as u64, 64, max),
            ("limits.batch_max_items", l.batch_max_items as u64, 1, 1 << 16),
            ("limits.stream_memory_bytes", l.stream_memory_bytes as u64, 1 << 16, max),
            ("limits.request_memory_bytes", l.request_memory_bytes as u64, 1 << 20, max),
            (
                "quotas.sessions_per_principal",
                q.sessions_per_principal as u64,
                1,
                ss.max_sessions as u64,
            ),
            (
                "quotas.stream_memory_per_principal",
                self.stream_memory_share() as u64,
                1 << 15,
                l.stream_memory_bytes as u64,
            ),
            ("ledger.batch_max_ops", self.ledger.batch_max_ops as u64, 1, 1 << 20),
            ("ledger.commit_linger_us", self.ledger.commit_linger_us, 0, 100_000),
            ("ledger.checkpoint_pages", self.ledger.checkpoint_pages, 64, 1 << 20),
            ("ledger.checkpoint_every_ms", self.ledger.checkpoint_every_ms, 10, 600_000),
            ("ledger.queue_max_bytes", self.ledger.queue_max_bytes as u64, 1 << 16, max),
            ("ledger.sweep_every_secs", self.ledger.sweep_every_secs, 1, 24 * 3600),
            ("ledger.max_sessions", self.ledger.max_sessions as u64, 1, 1 << 32),
            (
                "ledger.receipt_retention_secs",
                self.ledger.receipt_retention_secs,
                1,
                30 * 24 * 3600,
            ),
            ("ledger.receipt_max_bytes", self.ledger.receipt_max_bytes as u64, 1024, 1 << 30),
            ("ledger.commit_wait_ms", self.ledger.commit_wait_ms, 100, 600_000),
            ("ledger.redis_timeout_ms", self.ledger.redis_timeout_ms, 100, 60_000),
            ("ledger.redis_lease_ms", self.ledger.redis_lease_ms, 300, 60_000),
            ("ledger.redis_bus_retry_ms", self.ledger.redis_bus_retry_ms, 50, 60_000),
            ("ledger.receipts_per_caller", self.ledger.receipts_per_caller, 1, 1 << 32),
            (
                "ledger.receipt_bytes_per_caller",
                self.ledger.receipt_bytes_per_caller,
                64 << 10,
                1 << 40,
            ),
            ("ledger.receipt_bytes_total", self.ledger.receipt_bytes_total, 64 << 10, 1 << 40),
            (
                "ledger.handle_bytes_per_caller",
                self.ledger.handle_bytes_per_caller,
                64 << 10,
                1 << 40,
            ),
            ("ledger.handle_bytes_total", self.ledger.handle_bytes_total, 64 << 10, 1 << 40),
            ("tasks.bytes_per_caller", self.tasks.bytes_per_caller, 64 << 10, 1 << 40),
            ("tasks.bytes_total", self.tasks.bytes_total, 64 << 10, 1 << 40),
            ("shutdown.grace_secs", self.shutdown.grace_secs, 0, 3600),
            ("shutdown.retry_after_secs", self.shutdown.retry_after_secs, 1, 3600),
            ("modern.max_in_flight", self.modern.max_in_flight as u64, 1, 1 << 16),
            (
                "modern.max_in_flight_per_caller",
                self.modern_share() as u64,
                1,
                self.modern.max_in_flight as u64,
            ),
            ("modern.list_ttl_ms", self.modern.list_ttl_ms, 0, DAY_MS),
            ("modern.read_ttl_ms", self.modern.read_ttl_ms, 0, DAY_MS),
            ("modern.request_state_ttl_secs", self.modern.request_state_ttl_secs, 1, 24 * 3600),
            ("modern.listen_max", self.modern.listen_max as u64, 1, 1 << 20),
            ("modern.listen_per_caller", u64::from(self.modern.listen_per_caller), 1, 1 << 16),
            ("modern.listen_max_uris", self.modern.listen_max_uris as u64, 1, 1 << 16),
            ("tasks.ttl_secs", self.tasks.ttl_secs, 10, 7 * 24 * 3600),
            ("tasks.poll_interval_ms", self.tasks.poll_interval_ms, 50, 60_000),
            ("tasks.max_per_caller", self.tasks.max_per_caller as u64, 1, 1 << 16),
            ("tasks.max_kept_per_caller", self.tasks.max_kept_per_caller as u64, 1, 1 << 20),
            ("tasks.max_result_bytes", self.tasks.max_result_bytes as u64, 1024, 64 << 20),
            ("auth.oauth.leeway_secs", self.auth.oauth.leeway_secs, 0, 600),
            ("auth.oauth.jwks_refresh_min_secs", self.auth.oauth.jwks_refresh_min_secs, 1, 86_400),
            ("auth.oauth.jwks_max_age_secs", self.auth.oauth.jwks_max_age_secs, 60, 604_800),
            (
                "auth.oauth.token_cache_entries",
                self.auth.oauth.token_cache_entries as u64,
                1,
                10_000_000,
            ),
            (
                "auth.oauth.introspection_cache_secs",
                self.auth.oauth.introspection_cache_secs,
                1,
                86_400,
            ),
            ("auth.oauth.fetch_timeout_ms", self.auth.oauth.fetch_timeout_ms, 100, 60_000),
            (
                "auth.oauth.failures_per_sec",
                u64::from(self.auth.oauth.failures_per_sec),
                1,
                1_000_000,
            ),
            ("auth.oauth.failures_burst", u64::from(self.auth.oauth.failures_burst), 1, 1_000_000),
            (
                "auth.oauth.introspection_concurrency",
                self.auth.oauth.introspection_concurrency as u64,
                1,
                4096,
            ),
        ];
        for (field, value, min, max) in rows {
            check(field, value, min, max)?;
        }
        check(
            "quotas.session_rate_per_sec",
            u64::from(q.session_rate_per_sec),
            1,
            u64::from(u32::MAX),
        )?;
        check("quotas.session_burst", u64::from(q.session_burst), 1, u64::from(u32::MAX))?;
        check("quotas.ipv6_prefix_len", u64::from(q.ipv6_prefix_len), 1, 128)?;
        if self
            .security
            .cursor_secret_hex
            .as_deref()
            .is_some_and(|s| decode_hex(s).is_none_or(|b| b.len() < 16))
        {
            return Err(ConfigError::CursorSecret);
        }
        self.rollout.validate().map_err(|e| ConfigError::Rollout(e.to_string()))?;
        self.validate_auth().map_err(ConfigError::Auth)?;
        let l = &self.ledger;
        let redis = l.backend == LedgerBackend::Redis;
        if redis && l.redis_tls_cert_file.is_some() != l.redis_tls_key_file.is_some() {
            return Err(ConfigError::Redis(
                "ledger.redis_tls_cert_file and ledger.redis_tls_key_file go together (a client certificate and its key)",
            ));
        }
        let tls_files = l.redis_tls_ca_file.is_some() || l.redis_tls_cert_file.is_some();
        if redis && tls_files && !l.redis_url.starts_with("rediss://") {
            return Err(ConfigError::Redis(
                "ledger.redis_tls_* files are given for a redis:// URL: use rediss:// (TLS)",
            ));
        }
        if self.ledger.redis_shared {
            if self.ledger.backend != LedgerBackend::Redis {
                return Err(ConfigError::Shared("needs ledger.backend = \"redis\""));
            }
            // A host lets go of a session it served (parks it) long before the session's
            // idle TTL: the TTL is the ledger's, counted from the last use on any host.
            if self.sessions.park_after_secs >= self.sessions.idle_ttl_secs {
                return Err(ConfigError::Shared(
                    "needs sessions.park_after_secs below sessions.idle_ttl_secs (a host parks a session it served; the ledger ends it, idle on every host)",
                ));
            }
        }
        Ok(ValidConfig(self))
    }

    /// `[auth]`'s rules beyond ranges: URLs an authorization server or a resource may have,
    /// scope tokens, a resource when OAuth is on, scopes only with OAuth.
    fn validate_auth(&self) -> Result<(), String> {
        use crate::proto::oauth::{scope_token_ok, url_allowed};
        let a = &self.auth;
        let o = &a.oauth;
        let url = |field: &str, u: &str| {
            if url_allowed(u) {
                Ok(())
            } else {
                Err(format!(
                    "{field} = {u:?}: an https:// URL (http:// only on 127.0.0.1, localhost or [::1]), without query, fragment, quote or space"
                ))
            }
        };
        for i in &o.issuers {
            url("auth.oauth.issuers", i)?;
        }
        for i in &o.introspection {
            url("auth.oauth.introspection.issuer", &i.issuer)?;
            if i.client_id.is_empty() {
                return Err("auth.oauth.introspection.client_id is empty".into());
            }
        }
        if let Some(d) = &o.resource_documentation {
            url("auth.oauth.resource_documentation", d)?;
        }
        let scopes = o
            .scopes_supported
            .iter()
            .chain(&a.required_scopes)
            .chain(a.scopes.values().flatten())
            .chain(a.scope_implies.keys())
            .chain(a.scope_implies.values().flatten());
        for s in scopes {
            if !scope_token_ok(s) {
                return Err(format!(
                    "scope {s:?} is not a scope token (visible ASCII, no space, quote or backslash)"
                ));
            }
        }
        if o.enabled() && !cfg!(feature = "oauth") {
            return Err("[auth.oauth] needs mcp-runtime's cargo feature `oauth`".into());
        }
        if !o.enabled() {
            if o.resource.is_some()
                || !a.required_scopes.is_empty()
                || !a.scopes.is_empty()
                || a.filter_lists
                || !a.scope_implies.is_empty()
            {
                return Err("auth.oauth.resource, auth.required_scopes, [auth.scopes], [auth.scope_implies] and auth.filter_lists need an authorization server (auth.oauth.issuers or [[auth.oauth.introspection]])".into());
            }
            return Ok(());
        }
        let resource = o.resource.as_deref().ok_or(
            "auth.oauth.resource is required with OAuth: this endpoint's public URI, e.g. https://mcp.example.com/mcp",
        )?;
        url("auth.oauth.resource", resource)?;
        if let Some(p) = self.security.bearer_tokens.values().find(|p| p.contains('|')) {
            return Err(format!(
                "security.bearer_tokens principal {p:?} contains '|', which OAuth principals (issuer|subject) use"
            ));
        }
        Ok(())
    }

    /// The cursor secret, when configured (validated: at least 16 bytes).
    #[must_use]
    pub fn cursor_secret(&self) -> Option<Vec<u8>> {
        self.security.cursor_secret_hex.as_deref().and_then(decode_hex)
    }

    /// The front door's policy, built once (bearer tokens are kept only as digests).
    #[must_use]
    pub fn admit_policy(&self) -> AdmitPolicy {
        let s = &self.security;
        let l = &self.limits;
        AdmitPolicy {
            allow_localhost_origins: s.allow_localhost_origins,
            allowed_origins: s
                .allowed_origins
                .iter()
                .map(|o| o.trim().to_ascii_lowercase())
                .collect(),
            localhost_hosts_only: s.localhost_hosts_only,
            allowed_hosts: s.allowed_hosts.iter().map(|h| h.trim().to_ascii_lowercase()).collect(),
            max_body_bytes: s.max_body_bytes,
            auth: (!s.bearer_tokens.is_empty()).then(|| {
                TokenMap::new(s.bearer_tokens.iter().map(|(t, p)| (t.as_str(), p.as_str())))
            }),
            prefer_sse: true,
            limits: MessageLimits {
                json_max_depth: l.json_max_depth,
                json_max_values: l.json_max_values,
                handshake: HandshakeLimits {
                    max_values: l.handshake_max_values,
                    max_depth: l.handshake_max_depth,
                    max_string_bytes: l.handshake_max_string_bytes,
                },
                id_max_bytes: l.id_max_bytes,
                method_max_bytes: l.method_max_bytes,
                name_max_bytes: l.name_max_bytes,
                uri_max_bytes: l.uri_max_bytes,
                batch_max_items: l.batch_max_items,
            },
        }
    }

    /// One caller's share of the stream memory budget (bytes).
    #[must_use]
    pub fn stream_memory_share(&self) -> usize {
        self.quotas.stream_memory_per_principal.unwrap_or(self.limits.stream_memory_bytes / 2)
    }

    /// One caller's share of `modern.max_in_flight`.
    #[must_use]
    pub fn modern_share(&self) -> usize {
        self.modern.max_in_flight_per_caller.unwrap_or((self.modern.max_in_flight / 2).max(1))
    }

    /// Idle session lifetime in ms.
    #[must_use]
    pub fn idle_ttl_ms(&self) -> u64 {
        self.sessions.idle_ttl_secs.saturating_mul(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut RuntimeConfig)) -> Result<ValidConfig, ConfigError> {
        let mut c = RuntimeConfig::default();
        f(&mut c);
        c.validate()
    }

    #[test]
    fn ordered_session_ids_default_on_for_sqlite_only_and_follow_the_setting() {
        let mut l = LedgerConfig::default();
        assert!(l.ordered_session_ids(), "SQLite: on");
        for backend in [LedgerBackend::Redis, LedgerBackend::Memory] {
            l.backend = backend;
            assert!(!l.ordered_session_ids(), "{backend:?}: off");
        }
        l.ordered_session_ids = Some(true);
        assert!(l.ordered_session_ids());
        l.backend = LedgerBackend::Sqlite;
        l.ordered_session_ids = Some(false);
        assert!(!l.ordered_session_ids());
    }

    #[test]
    fn defaults_validate_and_no_caller_may_take_the_whole_table() {
        let d = RuntimeConfig::default().validate().unwrap();
        assert!(d.quotas.sessions_per_principal <= d.sessions.max_sessions / 2);
        assert!(d.stream_memory_share() <= d.limits.stream_memory_bytes / 2);
        assert_eq!(d.modern_share(), d.modern.max_in_flight / 2);
        assert_eq!(
            with(|c| c.modern.max_in_flight = 1).unwrap().modern_share(),
            1,
            "a share is at least one place"
        );
    }

    #[test]
    fn zero_and_out_of_range_values_are_refused_naming_the_field() {
        type Edit = Box<dyn FnOnce(&mut RuntimeConfig)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("sse.replay_max_events", Box::new(|c| c.sse.replay_max_events = 0)),
            ("sse.retry_ms", Box::new(|c| c.sse.retry_ms = 0)),
            ("sse.retry_ms", Box::new(|c| c.sse.retry_ms = HOUR_MS + 1)),
            ("sse.keepalive_ms", Box::new(|c| c.sse.keepalive_ms = 0)),
            ("sessions.max_retained_streams", Box::new(|c| c.sessions.max_retained_streams = 0)),
            (
                "sessions.retention_after_delivery_ms",
                Box::new(|c| c.sessions.retention_after_delivery_ms = 0),
            ),
            (
                "sessions.retention_undelivered_ms",
                Box::new(|c| c.sessions.retention_undelivered_ms = 0),
            ),
            ("sessions.idle_ttl_secs", Box::new(|c| c.sessions.idle_ttl_secs = 0)),
            (
                "sessions.client_request_timeout_secs",
                Box::new(|c| c.sessions.client_request_timeout_secs = 0),
            ),
            ("limits.json_max_depth", Box::new(|c| c.limits.json_max_depth = 500)),
            (
                "quotas.sessions_per_principal",
                Box::new(|c| c.quotas.sessions_per_principal = 20_001),
            ),
            ("quotas.session_rate_per_sec", Box::new(|c| c.quotas.session_rate_per_sec = 0)),
            (
                "modern.max_in_flight_per_caller",
                Box::new(|c| c.modern.max_in_flight_per_caller = Some(0)),
            ),
            (
                "modern.max_in_flight_per_caller",
                Box::new(|c| c.modern.max_in_flight_per_caller = Some(1025)),
            ),
            ("limits.request_memory_bytes", Box::new(|c| c.limits.request_memory_bytes = 1000)),
        ];
        for (field, f) in cases {
            match with(f) {
                Err(ConfigError::OutOfRange { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{field}: expected a range error, got {other:?}"),
            }
        }
    }

    #[test]
    fn cursor_secret_must_be_long_hex() {
        assert_eq!(
            with(|c| c.security.cursor_secret_hex = Some("abcd".into())).unwrap_err(),
            ConfigError::CursorSecret
        );
        assert_eq!(
            with(|c| c.security.cursor_secret_hex = Some("zz".repeat(16).into())).unwrap_err(),
            ConfigError::CursorSecret
        );
        let ok = with(|c| c.security.cursor_secret_hex = Some("0f".repeat(16).into())).unwrap();
        assert_eq!(ok.cursor_secret().unwrap(), vec![0x0f; 16]);
    }

    #[test]
    fn a_shared_ledger_needs_redis_and_hosts_that_park_sessions_before_their_ttl() {
        let shared = |c: &mut RuntimeConfig| {
            c.ledger.redis_shared = true;
            c.ledger.backend = LedgerBackend::Redis;
        };
        assert!(with(shared).is_ok());
        let e = with(|c| {
            shared(c);
            c.ledger.backend = LedgerBackend::Sqlite;
        })
        .unwrap_err();
        assert!(e.to_string().contains("ledger.backend"), "{e}");
        let e = with(|c| {
            shared(c);
            c.sessions.park_after_secs = c.sessions.idle_ttl_secs;
        })
        .unwrap_err();
        assert!(e.to_string().contains("sessions.park_after_secs"), "{e}");
    }

    #[test]
    fn redis_tls_files_need_a_rediss_url_and_a_client_certificate_its_key() {
        let tls = |c: &mut RuntimeConfig| {
            c.ledger.backend = LedgerBackend::Redis;
            c.ledger.redis_url = "rediss://127.0.0.1:6380/0".into();
            c.ledger.redis_tls_ca_file = Some("ca.pem".into());
        };
        assert!(with(tls).is_ok());
        let e = with(|c| {
            tls(c);
            c.ledger.redis_tls_cert_file = Some("client.pem".into());
        })
        .unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
        let e = with(|c| {
            tls(c);
            c.ledger.redis_url = "redis://127.0.0.1:6379/0".into();
        })
        .unwrap_err();
        assert!(e.to_string().contains("rediss://"), "{e}");
        // Not the Redis backend: the files are not used, and not refused.
        assert!(
            with(|c| {
                tls(c);
                c.ledger.backend = LedgerBackend::Sqlite;
                c.ledger.redis_url = "redis://127.0.0.1:6379/0".into();
                c.ledger.redis_tls_cert_file = Some("client.pem".into());
            })
            .is_ok()
        );
        // A secret is never shown by Debug.
        let shown =
            format!("{:?}", with(|c| c.ledger.redis_password = Some("s3cret".into())).unwrap());
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    #[cfg(not(feature = "oauth"))]
    fn oauth_is_refused_by_a_build_without_its_feature() {
        let e = with(|c| {
            c.auth.oauth.issuers = vec!["https://as.example".into()];
            c.auth.oauth.resource = Some("https://mcp.example/mcp".into());
        });
        assert!(matches!(e, Err(ConfigError::Auth(m)) if m.contains("feature `oauth`")));
    }

    #[test]
    #[cfg(feature = "oauth")]
    fn oauth_needs_a_resource_safe_urls_and_scope_tokens_and_scopes_need_oauth() {
        let oauth = |c: &mut RuntimeConfig| {
            c.auth.oauth.issuers = vec!["https://as.example".into()];
            c.auth.oauth.resource = Some("https://mcp.example/mcp".into());
        };
        let refused = |f: &dyn Fn(&mut RuntimeConfig)| match with(|c| f(c)) {
            Err(ConfigError::Auth(e)) => e,
            other => panic!("not refused: {other:?}"),
        };
        let ok = with(oauth).unwrap();
        assert!(ok.auth.oauth.enabled());
        assert!(
            with(|c| {
                oauth(c);
                c.auth.oauth.issuers = vec!["http://127.0.0.1:9000".into()];
            })
            .is_ok(),
            "http on loopback"
        );
        assert!(
            refused(&|c| {
                oauth(c);
                c.auth.oauth.resource = None;
            })
            .contains("auth.oauth.resource is required")
        );
        assert!(
            refused(&|c| {
                oauth(c);
                c.auth.oauth.issuers = vec!["http://as.example".into()];
            })
            .contains("https://")
        );
        assert!(
            refused(&|c| {
                oauth(c);
                c.auth.required_scopes = vec!["a b".into()];
            })
            .contains("scope token")
        );
        assert!(
            refused(&|c| {
                oauth(c);
                c.security.bearer_tokens.insert("t".into(), "a|b".into());
            })
            .contains("'|'")
        );
        assert!(refused(&|c| c.auth.filter_lists = true).contains("need an authorization server"));
        assert!(
            refused(&|c| {
                c.auth.scopes.insert("tools/call".into(), vec!["x".into()]);
            })
            .contains("need an authorization server")
        );
    }

    #[test]
    fn the_configuration_page_documents_every_setting_with_its_default() {
        let readme = include_str!("../../docs/configuration.md");
        let tree = serde_json::to_value(RuntimeConfig::default()).unwrap();
        // Fields of a nested section (`auth.oauth`) are listed as fields of the section.
        let mut fields = Vec::new();
        let mut todo: Vec<(String, serde_json::Value)> =
            tree.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        while let Some((path, v)) = todo.pop() {
            for (field, default) in v.as_object().unwrap() {
                match default {
                    serde_json::Value::Object(m) if !m.is_empty() && path == "auth" => {
                        todo.push((format!("{path}.{field}"), default.clone()));
                    }
                    _ => fields.push((format!("{path}.{field}"), default.clone())),
                }
            }
        }
        {
            for (name, default) in &fields {
                let name = format!("`{name}`");
                let row = readme
                    .lines()
                    .find(|l| l.starts_with('|') && l.contains(&format!("| {name} |")))
                    .unwrap_or_else(|| panic!("docs/configuration.md lacks {name}"));
                let shown = match default {
                    serde_json::Value::Null => continue,
                    serde_json::Value::Object(m) if m.is_empty() => "`{}`".to_owned(),
                    serde_json::Value::Array(a) if a.is_empty() => "`[]`".to_owned(),
                    v => format!("`{v}`"),
                };
                assert!(
                    row.contains(&shown),
                    "docs/configuration.md row of {name} does not give its default {shown}: {row}"
                );
            }
        }
    }

    #[test]
    fn sections_deserialize_with_defaults_and_refuse_unknown_fields() {
        let c: RuntimeConfig =
            serde_json::from_value(serde_json::json!({"sse": {"retry_ms": 5}})).unwrap();
        assert_eq!((c.sse.retry_ms, c.sse.replay_max_events), (5, DEFAULT_REPLAY_MAX_EVENTS));
        assert!(
            serde_json::from_value::<RuntimeConfig>(serde_json::json!({"sse": {"retry": 5}}))
                .is_err()
        );
    }
}
