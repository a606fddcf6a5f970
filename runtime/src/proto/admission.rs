//! The one front door: [`admit`] turns an HTTP request head and body into a typed
//! [`Command`] or a typed [`Rejection`]. Pure: no session lookups, no clock. Checks, in order:
//! header encoding, `Origin`, `Host`, CORS preflight, authentication, HTTP method, `Accept`,
//! `Content-Type` — all from the head ([`admit_head`], run before a body is read) — then body
//! size, parsed-size bounds (before parsing), body shape, message limits, `MCP-Session-Id`
//! presence, and `MCP-Protocol-Version` support ([`admit_body`]). Session-dependent
//! rules (batches only on 2025-03-26 sessions, ownership, in-flight ids) are the session's.
//!
//! CORS: an allowed `Origin` gets [`cors_headers`] on every response (success or refusal) and
//! its preflight ([`Command::Preflight`]) is answered before authentication, since browsers
//! never send credentials on a preflight; a disallowed one is refused (403) like any request.

use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::error::Rejection;
use super::ids::{JsonRpcId, SessionId};
use super::jsonrpc::{Incoming, Message, ParseError, parse_body};
use super::limits::{self, Limit, LimitExceeded, MessageLimits};
use super::mcp::InitializeRequest;
use super::version::ProtocolVersion;

/// HTTP method, as far as the endpoint cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    /// POST: send one message (or a 2025-03-26 batch).
    Post,
    /// GET: open or resume a stream.
    Get,
    /// DELETE: end the session.
    Delete,
    /// OPTIONS: a CORS preflight, when it carries `Origin` and
    /// `Access-Control-Request-Method`.
    Options,
    /// Anything else.
    Other,
}

/// The request head fields admission reads. Values are raw header strings.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// Method.
    pub method: HttpMethod,
    /// `Accept`.
    pub accept: Option<&'a str>,
    /// `Content-Type`.
    pub content_type: Option<&'a str>,
    /// `MCP-Session-Id`.
    pub session_id: Option<&'a str>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a str>,
    /// `Origin`.
    pub origin: Option<&'a str>,
    /// `Host`.
    pub host: Option<&'a str>,
    /// `Last-Event-ID`.
    pub last_event_id: Option<&'a str>,
    /// `Authorization`.
    pub authorization: Option<&'a str>,
    /// `Access-Control-Request-Method` (preflights).
    pub cors_request_method: Option<&'a str>,
    /// `Mcp-Method` (2026-07-28).
    pub mcp_method: Option<&'a str>,
    /// `Mcp-Name` (2026-07-28).
    pub mcp_name: Option<&'a str>,
    /// The first header among those above whose value is not visible ASCII (the shell could
    /// not read it as text). Such a request is refused, never served as if it were absent.
    /// Except for the next two:
    pub invalid_header: Option<&'static str>,
    /// `MCP-Session-Id` or `Last-Event-ID` unreadable: refused on the legacy path only (a
    /// 2026-07-28 request ignores both).
    pub invalid_session_header: Option<&'static str>,
    /// `Mcp-Method` or `Mcp-Name` unreadable: a 2026-07-28 request's `-32020` (invalid
    /// characters), in the order of the modern checks; the legacy path ignores both.
    pub invalid_modern_header: Option<&'static str>,
}

impl<'a> RequestHead<'a> {
    /// A head with only the method set.
    #[must_use]
    pub fn new(method: HttpMethod) -> RequestHead<'a> {
        RequestHead {
            method,
            accept: None,
            content_type: None,
            session_id: None,
            protocol_version: None,
            origin: None,
            host: None,
            last_event_id: None,
            authorization: None,
            cors_request_method: None,
            mcp_method: None,
            mcp_name: None,
            invalid_header: None,
            invalid_session_header: None,
            invalid_modern_header: None,
        }
    }
}

/// How the response to a POSTed request is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    /// `text/event-stream`: resumable, carries related notifications and server requests.
    Sse,
    /// `application/json`: one object.
    Json,
}

/// Static bearer tokens mapped to principals. Tokens are kept only as SHA-256 digests, so a
/// lookup's timing does not depend on how much of a guessed token is right.
#[derive(Debug, Clone, Default)]
pub struct TokenMap(HashMap<[u8; 32], Arc<str>>);

impl TokenMap {
    /// Build from `(token, principal)` pairs.
    #[must_use]
    pub fn new<'t>(pairs: impl IntoIterator<Item = (&'t str, &'t str)>) -> TokenMap {
        TokenMap(
            pairs
                .into_iter()
                .map(|(t, p)| (Sha256::digest(t.as_bytes()).into(), Arc::from(p)))
                .collect(),
        )
    }

    /// The principal of a static token.
    #[must_use]
    pub fn principal(&self, token: &str) -> Option<Arc<str>> {
        let d: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.0.get(&d).cloned()
    }
}

/// What admission enforces; built once from config.
#[derive(Debug, Clone)]
pub struct AdmitPolicy {
    /// Accept `Origin`s on localhost, 127.0.0.1 and [::1] (any port, http or https).
    pub allow_localhost_origins: bool,
    /// Further allowed origins, lowercase `scheme://host[:port]`. `"*"` allows any.
    pub allowed_origins: Vec<String>,
    /// Require `Host` to be a localhost name (DNS-rebinding defence for loopback binds).
    pub localhost_hosts_only: bool,
    /// Further allowed hosts (lowercase, with or without port).
    pub allowed_hosts: Vec<String>,
    /// Largest accepted body.
    pub max_body_bytes: usize,
    /// Bearer tokens; `None` disables authentication.
    pub auth: Option<TokenMap>,
    /// Prefer SSE when the client accepts both.
    pub prefer_sse: bool,
    /// Parsed-size and length bounds of messages.
    pub limits: MessageLimits,
}

impl Default for AdmitPolicy {
    fn default() -> AdmitPolicy {
        AdmitPolicy {
            allow_localhost_origins: true,
            allowed_origins: Vec::new(),
            localhost_hosts_only: true,
            allowed_hosts: Vec::new(),
            max_body_bytes: 4 << 20,
            auth: None,
            prefer_sse: true,
            limits: MessageLimits::default(),
        }
    }
}

/// An admitted request.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// The authenticated caller, when authentication is configured.
    pub principal: Option<Arc<str>>,
    /// What to do.
    pub command: Command,
    /// Estimated bytes the parsed body takes ([`limits::Scanned::parsed_bytes`]; 0 without a
    /// body), charged to the request memory budget while the request holds it.
    pub parsed_bytes: usize,
}

/// The typed command of an admitted request.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Create a session.
    Initialize {
        /// Request id.
        id: JsonRpcId,
        /// What the client said (bounded by `limits.handshake_*`).
        init: InitializeRequest,
        /// Estimated bytes the session keeps of it, charged to the memory budgets.
        kept_bytes: usize,
        /// Reply format.
        reply: ReplyMode,
    },
    /// Messages for an existing session.
    Post {
        /// Session.
        session: SessionId,
        /// Parsed `MCP-Protocol-Version` (validated as supported), if sent.
        version: Option<ProtocolVersion>,
        /// The message(s).
        incoming: Incoming,
        /// Reply format for requests.
        reply: ReplyMode,
    },
    /// Open the standalone GET stream.
    OpenStream {
        /// Session.
        session: SessionId,
    },
    /// Resume a stream from `Last-Event-ID`.
    Resume {
        /// Session.
        session: SessionId,
        /// The raw cursor, verified later by the session's signer.
        cursor: String,
    },
    /// End the session.
    Delete {
        /// Session.
        session: SessionId,
    },
    /// Answer a CORS preflight from an allowed origin (204 with [`cors_preflight_headers`]).
    Preflight,
    /// A modern (2026-07-28) request, served statelessly: no session, no stream to resume.
    /// A stray `MCP-Session-Id` or `Last-Event-ID` was ignored.
    Modern {
        /// The request, its `_meta` and `Mcp-Method` / `Mcp-Name` checked.
        request: super::stateless::ModernRequest,
        /// Reply format (SSE when the client accepts it, so progress can precede the result).
        reply: ReplyMode,
    },
    /// A modern notification: accepted (202) and dropped — 2026-07-28 defines none that a
    /// client sends over HTTP.
    ModernNotification,
}

impl Command {
    /// The session the command names, if any.
    #[must_use]
    pub fn session(&self) -> Option<&SessionId> {
        match self {
            Command::Post { session, .. }
            | Command::OpenStream { session }
            | Command::Resume { session, .. }
            | Command::Delete { session } => Some(session),
            Command::Initialize { .. }
            | Command::Preflight
            | Command::Modern { .. }
            | Command::ModernNotification => None,
        }
    }
}

/// The scopes `command` needs when `grant` lacks some: `None` when it has them all, else every
/// scope its requests need, sorted (the `scope` of the 403, so a client can ask for them in
/// one step-up). A batch is refused whole when any request in it is short.
#[must_use]
pub fn missing_scopes(
    command: &Command,
    table: &super::oauth::ScopeTable,
    grant: &super::oauth::Grant,
) -> Option<Vec<Box<str>>> {
    use super::jsonrpc::Message;
    use super::oauth::named_in;
    let of_message = |m: &Message| match m {
        Message::Request { method, params, .. } => {
            table.needed(method, named_in(method, params.as_ref()))
        }
        _ => table.endpoint(),
    };
    // Each request's scope set, in order, handed to `each` (false: stop); walked a second
    // time only when one falls short, so a request with its scopes allocates nothing.
    let visit = |each: &mut dyn FnMut(&[Box<str>]) -> bool| match command {
        Command::Initialize { .. } => each(table.needed("initialize", None)),
        Command::Post { incoming: Incoming::Single(m), .. } => each(of_message(m)),
        Command::Post { incoming: Incoming::Batch(items), .. } => {
            items.iter().all(|m| each(of_message(m)))
        }
        Command::Modern { request, .. } => {
            each(table.needed(&request.method, named_in(&request.method, request.params.as_ref())))
        }
        _ => each(table.endpoint()),
    };
    if visit(&mut |n| grant.has_all(n)) {
        return None;
    }
    let mut all: Vec<Box<str>> = Vec::new();
    visit(&mut |n| {
        all.extend(n.iter().cloned());
        true
    });
    all.sort();
    all.dedup();
    Some(all)
}

/// Request headers MCP uses, allowed on cross-origin requests.
pub const CORS_ALLOW_HEADERS: &str = "Content-Type, Accept, Authorization, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name";
/// Methods of the endpoint, allowed on cross-origin requests.
pub const CORS_ALLOW_METHODS: &str = "GET, POST, DELETE";
/// Response headers a page may read: the session id, and what 401/429/503 say.
pub const CORS_EXPOSE_HEADERS: &str = "Mcp-Session-Id, WWW-Authenticate, Retry-After";

/// The `Origin` to echo in `Access-Control-Allow-Origin`, when the request has an allowed one.
#[must_use]
pub fn cors_origin<'a>(head: &RequestHead<'a>, p: &AdmitPolicy) -> Option<&'a str> {
    head.origin.filter(|o| origin_allowed(o, p))
}

/// CORS headers of every response to an allowed origin.
#[must_use]
pub fn cors_headers(origin: &str) -> [(&'static str, String); 3] {
    [
        ("Access-Control-Allow-Origin", origin.to_owned()),
        ("Access-Control-Expose-Headers", CORS_EXPOSE_HEADERS.into()),
        ("Vary", "Origin".into()),
    ]
}

pub use super::limits::CORS_MAX_PARAM_HEADERS;

/// Extra headers of a preflight answer (besides [`cors_headers`]). `requested` is the
/// preflight's `Access-Control-Request-Headers`: the `Mcp-Param-{Name}` headers it names are
/// allowed too (2026-07-28 mirrors annotated tool arguments in them, and a name pattern cannot
/// be listed), each if it is a valid header name, each once.
///
/// Runs before authentication, so its cost is linear in `requested` and its answer bounded:
/// one pass, stopped at the first name past [`CORS_MAX_PARAM_HEADERS`]; a name is compared
/// only with the (at most that many) names already allowed.
///
/// # Errors
/// [`Rejection::TooManyParamHeaders`] when `requested` names more than
/// [`CORS_MAX_PARAM_HEADERS`] well-formed `Mcp-Param-*` headers (repeats count).
pub fn cors_preflight_headers(
    requested: Option<&str>,
) -> Result<[(&'static str, String); 3], Rejection> {
    let (mut params, mut named): (Vec<&str>, usize) = (Vec::new(), 0);
    for h in requested.into_iter().flat_map(|r| r.split(',')).map(str::trim) {
        let is_param = h.len() > 10
            && h.get(..10).is_some_and(|p| p.eq_ignore_ascii_case("mcp-param-"))
            && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !is_param {
            continue;
        }
        named += 1;
        if named > CORS_MAX_PARAM_HEADERS {
            return Err(Rejection::TooManyParamHeaders);
        }
        // Unique by case-insensitive name; none of `CORS_ALLOW_HEADERS` starts with `Mcp-Param-`.
        if !params.iter().any(|a| a.eq_ignore_ascii_case(h)) {
            params.push(h);
        }
    }
    let mut allow = String::with_capacity(
        CORS_ALLOW_HEADERS.len() + params.iter().map(|p| p.len() + 2).sum::<usize>(),
    );
    allow.push_str(CORS_ALLOW_HEADERS);
    for p in params {
        allow.push_str(", ");
        allow.push_str(p);
    }
    Ok([
        ("Access-Control-Allow-Methods", CORS_ALLOW_METHODS.into()),
        ("Access-Control-Allow-Headers", allow),
        ("Access-Control-Max-Age", "600".into()),
    ])
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Accepts {
    json: bool,
    sse: bool,
}

fn parse_accept(accept: Option<&str>) -> Accepts {
    let Some(accept) = accept else { return Accepts { json: true, sse: true } };
    // What clients send, recognised whole (the general reading below splits and trims each
    // range: about 500 instructions a range, on every request).
    match accept {
        "application/json, text/event-stream" | "text/event-stream, application/json" => {
            return Accepts { json: true, sse: true };
        }
        "application/json" => return Accepts { json: true, sse: false },
        "text/event-stream" => return Accepts { json: false, sse: true },
        _ => {}
    }
    parse_accept_ranges(accept)
}

/// [`parse_accept`] of any value: each media range, without those of quality 0.
fn parse_accept_ranges(accept: &str) -> Accepts {
    let mut a = Accepts::default();
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let refused = parts.any(|p| {
            let p = p.trim();
            p.strip_prefix("q=")
                .or_else(|| p.strip_prefix("Q="))
                .is_some_and(|q| q.trim().parse::<f32>().ok() == Some(0.0))
        });
        if refused {
            continue;
        }
        // Compared without case and without a lowered copy: no allocation per request.
        let is = |m: &str| media.eq_ignore_ascii_case(m);
        if is("*/*") {
            a.json = true;
            a.sse = true;
        } else if is("application/json") || is("application/*") {
            a.json = true;
        } else if is("text/event-stream") || is("text/*") {
            a.sse = true;
        }
    }
    a
}

fn is_localhost_name(host: &str) -> bool {
    ["localhost", "127.0.0.1", "[::1]"].iter().any(|n| host.eq_ignore_ascii_case(n))
}

/// Split `host[:port]` (bracketed IPv6 allowed) into the host part.
fn host_part(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |i| &authority[..=i]);
    }
    authority.rsplit_once(':').map_or(authority, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) { h } else { authority }
    })
}

/// `s` without its leading `prefix`, compared without case.
fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

// The allowed origins and hosts are kept lowercase (config); a request's are compared
// without case rather than lowered into a copy: the admission path allocates nothing.
fn origin_allowed(origin: &str, p: &AdmitPolicy) -> bool {
    let origin = origin.trim();
    if p.allowed_origins.iter().any(|o| o == "*" || o.eq_ignore_ascii_case(origin)) {
        return true;
    }
    if !p.allow_localhost_origins {
        return false;
    }
    let Some(rest) = strip_prefix_ignore_case(origin, "http://")
        .or_else(|| strip_prefix_ignore_case(origin, "https://"))
    else {
        return false;
    };
    !rest.contains('/') && is_localhost_name(host_part(rest))
}

fn host_allowed(host: &str, p: &AdmitPolicy) -> bool {
    let listed = || {
        p.allowed_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host) || h.eq_ignore_ascii_case(host_part(host)))
    };
    if !p.localhost_hosts_only {
        return p.allowed_hosts.is_empty() || listed();
    }
    is_localhost_name(host_part(host)) || listed()
}

fn session_of(head: &RequestHead<'_>) -> Result<SessionId, Rejection> {
    let raw = head.session_id.ok_or(Rejection::MissingSession)?;
    // An id with characters we never mint cannot name a live session.
    SessionId::parse(raw.trim()).ok_or(Rejection::SessionNotFound)
}

fn version_of(head: &RequestHead<'_>) -> Result<Option<ProtocolVersion>, Rejection> {
    match head.protocol_version.map(str::trim) {
        None => Ok(None),
        Some(v) => ProtocolVersion::parse(v)
            .map(Some)
            .ok_or_else(|| Rejection::UnsupportedVersion(v.to_owned())),
    }
}

fn invalid(e: ParseError) -> Rejection {
    match e {
        ParseError::Json(_) => Rejection::Parse,
        ParseError::Invalid { reason, id } => {
            Rejection::InvalidMessage { reason: reason.into(), id }
        }
    }
}

/// What the head alone admits: a POST still needs its body ([`admit_body`]); every other
/// method is decided.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a POST's body must still be admitted"]
pub enum HeadAdmitted {
    /// A POST whose head passed every rule: read the body (at most `max_body_bytes`), then
    /// [`admit_body`].
    Post {
        /// The authenticated caller.
        principal: Option<Arc<str>>,
    },
    /// Decided from the head.
    Done(Admitted),
}

/// The rules that need only the request head, in the documented order. Run before a POST's
/// body is read, so a refused caller (bad origin, host, token, method, media type) never makes
/// the server buffer a body.
///
/// # Errors
/// The [`Rejection`] for the first rule the head breaks.
pub fn admit_head(head: &RequestHead<'_>, policy: &AdmitPolicy) -> Result<HeadAdmitted, Rejection> {
    if let Some(preflight) = admit_front(head, policy)? {
        return Ok(HeadAdmitted::Done(preflight));
    }
    let principal = match &policy.auth {
        None => None,
        Some(tokens) => Some(
            bearer_token(head).and_then(|t| tokens.principal(t)).ok_or(Rejection::Unauthorized)?,
        ),
    };
    admit_after_auth(head, principal)
}

/// The bearer token of `Authorization` (scheme case-insensitive), if any.
#[must_use]
pub fn bearer_token<'h>(head: &RequestHead<'h>) -> Option<&'h str> {
    let a = head.authorization?.trim_start();
    let (scheme, token) = a.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The head's rules before authentication: header values, `Origin`, `Host`, and a CORS
/// preflight (answered without credentials). `Some` is the preflight, decided.
///
/// # Errors
/// The [`Rejection`] for the first rule the head breaks.
pub fn admit_front(
    head: &RequestHead<'_>,
    policy: &AdmitPolicy,
) -> Result<Option<Admitted>, Rejection> {
    if let Some(name) = head.invalid_header {
        return Err(Rejection::InvalidHeader(name));
    }
    if let Some(origin) = head.origin
        && !origin_allowed(origin, policy)
    {
        return Err(Rejection::OriginNotAllowed);
    }
    if let Some(host) = head.host
        && !host_allowed(host, policy)
    {
        return Err(Rejection::HostNotAllowed);
    }
    if head.method == HttpMethod::Options {
        return match (head.origin, head.cors_request_method) {
            (Some(_), Some(_)) => {
                Ok(Some(Admitted { principal: None, command: Command::Preflight, parsed_bytes: 0 }))
            }
            _ => Err(Rejection::MethodNotAllowed),
        };
    }
    Ok(None)
}

/// The head's rules after authentication ([`admit_front`], then the caller's `principal`
/// found by the shell: a static token's, or an OAuth grant's).
///
/// # Errors
/// The [`Rejection`] for the first rule the head breaks.
pub fn admit_after_auth(
    head: &RequestHead<'_>,
    principal: Option<Arc<str>>,
) -> Result<HeadAdmitted, Rejection> {
    if matches!(head.method, HttpMethod::Get | HttpMethod::Delete)
        && head.session_id.is_none()
        && head.protocol_version.is_some_and(|v| super::stateless::is_modern(Some(v), None))
    {
        // 2026-07-28 has no sessions: no GET stream, no DELETE (SPEC.md §3.8).
        return Err(Rejection::Modern {
            error: super::stateless::ModernError::NoSessionMethods,
            id: None,
        });
    }
    // Refused here, in the legacy order, unless a 2026-07-28 POST may ignore it (decided with
    // its body).
    let modern_header =
        head.protocol_version.is_some_and(|v| super::stateless::is_modern(Some(v), None));
    if let Some(name) =
        head.invalid_session_header.filter(|_| head.method != HttpMethod::Post || !modern_header)
    {
        return Err(Rejection::InvalidHeader(name));
    }
    let command = match head.method {
        HttpMethod::Other | HttpMethod::Options => return Err(Rejection::MethodNotAllowed),
        HttpMethod::Delete => Command::Delete { session: session_of(head)? },
        HttpMethod::Get => {
            if !parse_accept(head.accept).sse {
                return Err(Rejection::NotAcceptable);
            }
            let session = session_of(head)?;
            version_of(head)?;
            match head.last_event_id.map(str::trim) {
                Some(c) if !c.is_empty() => Command::Resume { session, cursor: c.to_owned() },
                _ => Command::OpenStream { session },
            }
        }
        HttpMethod::Post => {
            if let Some(ct) = head.content_type {
                let media = ct.split(';').next().unwrap_or("").trim();
                if !media.eq_ignore_ascii_case("application/json") {
                    return Err(Rejection::UnsupportedMediaType);
                }
            }
            return Ok(HeadAdmitted::Post { principal });
        }
    };
    Ok(HeadAdmitted::Done(Admitted { principal, command, parsed_bytes: 0 }))
}

/// The rest of a POST, once its head passed [`admit_head`]: body size, parsed-size bounds
/// (before parsing; what they measured gives [`Admitted::parsed_bytes`]), body shape, message
/// limits, session and version.
///
/// # Errors
/// The [`Rejection`] for the first rule the body breaks.
pub fn admit_body(
    principal: Option<Arc<str>>,
    head: &RequestHead<'_>,
    body: &[u8],
    policy: &AdmitPolicy,
) -> Result<Admitted, Rejection> {
    if body.len() > policy.max_body_bytes {
        return Err(Rejection::PayloadTooLarge);
    }
    let scanned = limits::scan(body, &policy.limits).map_err(Rejection::LimitExceeded)?;
    Ok(Admitted {
        principal,
        command: admit_post(head, body, policy)?,
        parsed_bytes: scanned.parsed_bytes(),
    })
}

/// Classify one HTTP request: [`admit_head`], then for a POST [`admit_body`].
///
/// # Errors
/// The [`Rejection`] for the first rule the request breaks, in the order listed in the module
/// documentation.
pub fn admit(
    head: &RequestHead<'_>,
    body: &[u8],
    policy: &AdmitPolicy,
) -> Result<Admitted, Rejection> {
    match admit_head(head, policy)? {
        HeadAdmitted::Done(a) => Ok(a),
        HeadAdmitted::Post { principal } => admit_body(principal, head, body, policy),
    }
}

/// [`admit_body`] after the size and the scan.
fn admit_post(
    head: &RequestHead<'_>,
    body: &[u8],
    policy: &AdmitPolicy,
) -> Result<Command, Rejection> {
    let limits = &policy.limits;
    let incoming = parse_body(body).map_err(invalid)?;
    match &incoming {
        Incoming::Single(m) => limits::check_message(m, limits),
        Incoming::Batch(ms) if ms.len() > limits.batch_max_items => {
            Err(LimitExceeded { limit: Limit::BatchItems, max: limits.batch_max_items })
        }
        Incoming::Batch(ms) => ms.iter().try_for_each(|m| limits::check_message(m, limits)),
    }
    .map_err(|l| match &incoming {
        // A 2026-07-28 request's refusal echoes its id (unless the id is what is too long).
        Incoming::Single(Message::Request { id, meta, .. })
            if l.limit != Limit::IdLength
                && super::stateless::is_modern(head.protocol_version, meta.as_deref()) =>
        {
            Rejection::LimitExceeded(l).with_id(id)
        }
        _ => Rejection::LimitExceeded(l),
    })?;
    let incoming = match admit_modern(head, incoming) {
        Ok(modern) => return modern,
        Err(legacy) => legacy,
    };
    if let Some(name) = head.invalid_session_header {
        return Err(Rejection::InvalidHeader(name));
    }
    let accepts = parse_accept(head.accept);
    let has_request = incoming.carries_request();
    if has_request && !accepts.json && !accepts.sse {
        return Err(Rejection::NotAcceptable);
    }
    let reply = if accepts.sse && (policy.prefer_sse || !accepts.json) {
        ReplyMode::Sse
    } else {
        ReplyMode::Json
    };
    let incoming = match incoming {
        Incoming::Single(Message::Request { method, id, params, .. }) if method == "initialize" => {
            // The version header is never a reason to refuse `initialize` (negotiation
            // happens in the body).
            if head.session_id.is_some() {
                return Err(Rejection::AlreadyInitialized);
            }
            // Its values are moved into the handshake, not copied.
            let init = InitializeRequest::from_params(params);
            let kept_bytes =
                limits::check_handshake(&init.capabilities, &init.client_info, &limits.handshake)
                    .map_err(Rejection::LimitExceeded)?;
            return Ok(Command::Initialize { id, init, kept_bytes, reply });
        }
        other => other,
    };
    if let Incoming::Batch(ms) = &incoming
        && ms.iter().any(|m| matches!(m, Message::Request { method, .. } if method == "initialize"))
    {
        return Err(Rejection::InvalidMessage {
            reason: "initialize must not be part of a batch".into(),
            id: None,
        });
    }
    let session = session_of(head)?;
    let version = version_of(head)?;
    Ok(Command::Post { session, version, incoming, reply })
}

/// The modern path, when the body says so (see [`super::stateless::is_modern`]); the body back
/// when it is legacy.
fn admit_modern(
    head: &RequestHead<'_>,
    incoming: Incoming,
) -> Result<Result<Command, Rejection>, Incoming> {
    use super::stateless::{self, ModernError, ModernHead, ModernRequest};
    let modern_header = head.protocol_version.is_some_and(|v| stateless::is_modern(Some(v), None));
    let refuse = |why: &str| {
        Ok(Err(Rejection::Modern { error: ModernError::InvalidRequest(why.into()), id: None }))
    };
    match incoming {
        Incoming::Batch(_) if modern_header => {
            refuse("a body is exactly one message in 2026-07-28")
        }
        Incoming::Single(Message::Request { id, method, params, meta })
            if stateless::is_modern(head.protocol_version, meta.as_deref()) =>
        {
            let accepts = parse_accept(head.accept);
            if !accepts.json && !accepts.sse {
                return Ok(Err(Rejection::NotAcceptable.with_id(&id)));
            }
            let reply = if accepts.sse { ReplyMode::Sse } else { ReplyMode::Json };
            let mhead = ModernHead {
                protocol_version: head.protocol_version,
                method: head.mcp_method,
                name: head.mcp_name,
                unreadable: head.invalid_modern_header,
            };
            Ok(match stateless::check(&mhead, &method, params.as_ref(), meta) {
                Ok(meta) => Ok(Command::Modern {
                    request: ModernRequest { id, method, params, meta },
                    reply,
                }),
                Err(error) => Err(Rejection::Modern { error, id: Some(id) }),
            })
        }
        Incoming::Single(Message::Notification { meta, .. })
            if stateless::is_modern(head.protocol_version, meta.as_deref()) =>
        {
            Ok(Ok(Command::ModernNotification))
        }
        Incoming::Single(Message::Response { .. } | Message::ErrorResponse { .. })
            if modern_header =>
        {
            refuse(
                "clients send no responses in 2026-07-28 (there are no server-to-client requests)",
            )
        }
        legacy => Err(legacy),
    }
}

#[cfg(test)]
mod tests;
