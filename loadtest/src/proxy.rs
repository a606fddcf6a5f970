//! The fault-injecting proxy: real TCP between client, proxy and server, with HTTP/1.1
//! framing understood (heads parsed with `httparse`, chunked bodies decoded and re-encoded),
//! so faults land on requests, responses and single SSE events.
//!
//! Each fault is a named [`Scenario`] with a rate; a request gets at most one request-side
//! fault, and an SSE response any combination of the response-side ones. The proxy also
//! checks what it can see on the wire — that rewritten requests were refused, that no request
//! reuses a session after its 404, how often each session reconnects — and counts it all
//! (see [`Counts`]); `mcp-load gate` turns the counts into gates.
//!
//! Limits: request bodies must carry `Content-Length` (chunked requests get 501 from the
//! proxy); SSE events are split at `\n\n` (what mcp-host and the official SDKs emit).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::http1::{Conn, IoResult, ResponseHead, chunk, eof, parse_response_head};

/// A named fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Scenario {
    /// An SSE response is cut at a random point after its first event with an id.
    Cut,
    /// The priming event (id, empty data) of an SSE response is dropped.
    LostPriming,
    /// An event captured from another session's stream is injected into a response stream.
    CrossedIds,
    /// An event the client already accepted is sent again: on the same stream, and first on a
    /// resume from its id.
    ReplayAfterAck,
    /// A resume's `Last-Event-ID` is replaced by a forged or another session's id.
    ForeignCursor,
    /// The session is deleted while a tool call's response is in flight; the response is cut.
    ExpiryRace,
    /// A DELETE reaches the server but its answer is lost (the connection closes).
    LostDelete,
    /// A request of a session carries another principal's (valid) bearer token.
    OldToken,
    /// The `MCP-Protocol-Version` header is stripped from a request of a session.
    MissingVersion,
    /// The `Origin` header is rewritten to a foreign origin.
    OriginRewrite,
    /// A reconnect episode (one session resuming from one cursor) is answered 429/503 (with
    /// `Retry-After: 1`) once or twice in a row.
    Storm,
    /// Not a proxy fault: the gate SIGKILLs the host it spawned at random moments of the
    /// phase and starts it again on the same ledger and port (`gate --spawn-host` only).
    Crash,
    /// Not a proxy fault: the gate stops the host it spawned with SIGTERM (a graceful drain)
    /// at random moments and starts it again on the same ledger and port.
    Sigterm,
    /// Not a proxy fault: the gate flips the spawned host's rollout flags through its admin
    /// API (off, shadow, on at half and full share, rollback) while streams are cut.
    Rollout,
    /// Not a proxy fault: the phase's clients speak 2026-07-28 (stateless requests, no
    /// session, no event ids). The faults that reach such a request apply to it: `cut` (after
    /// its first event: the client re-issues it under a new id), `storm` (its POST refused
    /// 429/503 with `Retry-After: 1`), `origin-rewrite` (403), `old-token` (a read-only call
    /// served as the other principal: each request is authenticated on its own; see
    /// [`FaultPlan::token_rewrite_modern_tools`]), `crash`, `sigterm`.
    Modern,
    /// Not a proxy fault: the phase's clients (both eras, alternating) keep baskets of the
    /// `basket` pack over many calls (SEP-2567 state handles) and run short tasks, with cut
    /// streams and, with `crash` selected, kills of the host.
    Handles,
    /// Not a proxy fault (`--nodes` 2 or more): the gate SIGKILLs one node at random moments,
    /// in turn, and starts it again a second later while the others serve (the proxy skips
    /// a node that refuses connections).
    NodeLoss,
    /// Not a proxy fault (`--nodes` 2 or more): the gate SIGSTOPs one node, in turn, past its
    /// lease on the shared ledger, then SIGCONTs it: it finds its lease gone and exits
    /// (status 3), and is started again.
    Partition,
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 18] = [
        Scenario::Cut,
        Scenario::LostPriming,
        Scenario::CrossedIds,
        Scenario::ReplayAfterAck,
        Scenario::ForeignCursor,
        Scenario::ExpiryRace,
        Scenario::LostDelete,
        Scenario::OldToken,
        Scenario::MissingVersion,
        Scenario::OriginRewrite,
        Scenario::Storm,
        Scenario::Crash,
        Scenario::Sigterm,
        Scenario::Rollout,
        Scenario::Modern,
        Scenario::Handles,
        Scenario::NodeLoss,
        Scenario::Partition,
    ];

    /// The gate runs it on a host it spawned (it restarts the host or drives its admin API).
    pub(crate) fn needs_spawned_host(self) -> bool {
        matches!(
            self,
            Scenario::Crash
                | Scenario::Sigterm
                | Scenario::Rollout
                | Scenario::NodeLoss
                | Scenario::Partition
        )
    }

    /// It needs several nodes on a shared ledger (`gate --nodes 2` or more).
    pub(crate) fn needs_nodes(self) -> bool {
        matches!(self, Scenario::NodeLoss | Scenario::Partition)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Cut => "cut",
            Scenario::LostPriming => "lost-priming",
            Scenario::CrossedIds => "crossed-ids",
            Scenario::ReplayAfterAck => "replay-after-ack",
            Scenario::ForeignCursor => "foreign-cursor",
            Scenario::ExpiryRace => "expiry-race",
            Scenario::LostDelete => "lost-delete",
            Scenario::OldToken => "old-token",
            Scenario::MissingVersion => "missing-version",
            Scenario::OriginRewrite => "origin-rewrite",
            Scenario::Storm => "storm",
            Scenario::Crash => "crash",
            Scenario::Sigterm => "sigterm",
            Scenario::Rollout => "rollout",
            Scenario::Modern => "modern",
            Scenario::Handles => "handles",
            Scenario::NodeLoss => "node-loss",
            Scenario::Partition => "partition",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// What the proxy does to traffic.
#[derive(Debug, Clone, Default)]
pub(crate) struct FaultPlan {
    /// Scenario -> share (0..=1) of the requests (or streams) it applies to that it hits.
    pub(crate) rates: BTreeMap<Scenario, f64>,
    /// Seed of the proxy's decisions.
    pub(crate) seed: u64,
    /// For [`Scenario::OldToken`]: a token the server accepts, of another principal.
    pub(crate) other_token: Option<mcp_runtime::client_http::BearerToken>,
    /// Each scenario fires at most this many times (`None`: no limit).
    pub(crate) limit: Option<u64>,
    /// A 2026-07-28 `tools/call` gets the old-token rewrite only when its `Mcp-Name` is one of
    /// these (read-only tools): served as another principal, a write would be keyed in that
    /// principal's receipts, and a re-issue after a later fault (crash, drain) under the right
    /// token would run it a second time. Empty: every modern request may be rewritten.
    pub(crate) token_rewrite_modern_tools: Vec<String>,
    /// The hosts' idle session TTL, when the gate set it: a 404 for a session whose requests
    /// went unanswered for nearly that long is its expiry (`404.after_idle`), not a session
    /// a fault lost (`404.unexplained`). `None`: every 404 is unexplained.
    pub(crate) session_ttl: Option<std::time::Duration>,
}

impl FaultPlan {
    fn rate(&self, s: Scenario) -> f64 {
        self.rates.get(&s).copied().unwrap_or(0.0)
    }
}

/// Named counters (`"cut"`, `"origin.rejected"`, ...).
pub(crate) type Counts = BTreeMap<&'static str, u64>;

/// Timer slack allowed when checking that a resume waited long enough.
const EARLY_TOLERANCE: std::time::Duration = std::time::Duration::from_millis(2);

/// Most events kept for crossing and replaying.
const POOL: usize = 4096;
const FOREIGN_ORIGIN: &str = "http://evil.example";

/// Event id -> (the session whose stream carried it, the raw event), and the ids in arrival
/// order (to forget the oldest).
type EventsById = (HashMap<String, (String, Rc<[u8]>)>, VecDeque<String>);

/// State shared by every proxied connection (single-threaded runtime).
pub(crate) struct Proxy {
    /// The servers behind it: each request goes to the next (round robin, no affinity); one
    /// that refuses connections is skipped.
    upstreams: Vec<SocketAddr>,
    next_upstream: Cell<usize>,
    plan: FaultPlan,
    rng: Cell<u64>,
    /// Times each scenario fired (for [`FaultPlan::limit`]).
    hits: RefCell<BTreeMap<Scenario, u64>>,
    counts: RefCell<Counts>,
    /// Recent data events with ids: (session, raw event).
    recent: RefCell<VecDeque<(String, Rc<[u8]>)>>,
    /// Raw events by id, for replays.
    by_id: RefCell<EventsById>,
    /// Session -> resume refusals left in its storm.
    storms: RefCell<HashMap<String, u32>>,
    /// (session, cursor) reconnect episodes that had their storm already.
    stormed: RefCell<HashSet<(String, String)>>,
    /// Sessions that answered 404 to an unmodified request.
    dead: RefCell<HashSet<String>>,
    /// Session -> when a request of it last got an answer (a status below 400).
    answered: RefCell<HashMap<String, Instant>>,
    /// Sessions a DELETE was sent for.
    deleting: RefCell<HashSet<String>>,
    /// Sessions with a request that got no answer (its node paused, killed) since their last
    /// answer.
    unanswered: RefCell<HashSet<String>>,
    /// Session -> times of its resume attempts (GET with `Last-Event-ID`).
    resumes: RefCell<HashMap<String, Vec<Instant>>>,
    /// Session -> the earliest moment its next resume is allowed: a cut stream's last `retry`
    /// after the cut, or `Retry-After` after a storm refusal. An earlier one counts as
    /// `resume.too_early`.
    not_before: RefCell<HashMap<(String, String), Instant>>,
}

impl Proxy {
    fn bump(&self, name: &'static str) {
        *self.counts.borrow_mut().entry(name).or_default() += 1;
    }

    /// `session` may not resume from `cursor` sooner than `ms` from now (checked on that
    /// resume: a session's other streams, cut or dropped at other times, wait their own).
    fn resume_not_before(&self, session: &str, cursor: &str, ms: u64) {
        self.not_before.borrow_mut().insert(
            (session.to_owned(), cursor.to_owned()),
            Instant::now() + std::time::Duration::from_millis(ms),
        );
    }

    fn roll(&self, s: Scenario) -> bool {
        let rate = self.plan.rate(s);
        let mut hits = self.hits.borrow_mut();
        let n = hits.entry(s).or_default();
        if rate <= 0.0 || self.plan.limit.is_some_and(|l| *n >= l) || self.uniform() >= rate {
            return false;
        }
        *n += 1;
        true
    }

    fn uniform(&self) -> f64 {
        let mut st = self.rng.get();
        let r = next_random(&mut st);
        self.rng.set(st);
        (r >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&self, n: u64) -> u64 {
        (self.uniform() * n as f64) as u64 % n.max(1)
    }

    /// Counters so far.
    pub(crate) fn counts(&self) -> Counts {
        self.counts.borrow().clone()
    }

    /// The highest number of resume attempts any one session made within one second, and
    /// the highest number across all sessions within one second.
    pub(crate) fn reconnect_peaks(&self) -> (u64, u64) {
        let resumes = self.resumes.borrow();
        let per_session = resumes.values().map(|ts| max_in_window(ts, 1_000)).max().unwrap_or(0);
        let mut all: Vec<Instant> = resumes.values().flatten().copied().collect();
        all.sort();
        (per_session, max_in_window(&all, 1_000))
    }

    fn remember(&self, session: &str, id: Option<&str>, ev: &Rc<[u8]>, has_data: bool) {
        if has_data {
            let mut recent = self.recent.borrow_mut();
            recent.push_back((session.to_owned(), Rc::clone(ev)));
            if recent.len() > POOL {
                recent.pop_front();
            }
        }
        if let Some(id) = id {
            let (map, order) = &mut *self.by_id.borrow_mut();
            if map.insert(id.to_owned(), (session.to_owned(), Rc::clone(ev))).is_none() {
                order.push_back(id.to_owned());
            }
            if order.len() > POOL
                && let Some(old) = order.pop_front()
            {
                map.remove(&old);
            }
        }
    }

    /// A recent data event from a session other than `session`.
    fn foreign_event(&self, session: &str) -> Option<Rc<[u8]>> {
        let recent = self.recent.borrow();
        let n = recent.len() as u64;
        if n == 0 {
            return None;
        }
        (0..8)
            .map(|_| &recent[self.below(n) as usize])
            .find(|(s, _)| s != session)
            .map(|(_, e)| Rc::clone(e))
    }
}

/// Most timestamps within any window of `ms` (timestamps sorted).
pub(crate) fn max_in_window(ts: &[Instant], ms: u64) -> u64 {
    let window = std::time::Duration::from_millis(ms);
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..ts.len() {
        while ts[hi] - ts[lo] >= window {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u64
}

pub(crate) fn next_random(state: &mut u64) -> u64 {
    // splitmix64: decisions need repeatability, not secrecy.
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Start the proxy in front of `upstreams` (at least one; more: a round-robin balancer with
/// no affinity) on the current (local) runtime.
pub(crate) async fn start(
    upstreams: Vec<SocketAddr>,
    plan: FaultPlan,
) -> std::io::Result<(SocketAddr, Rc<Proxy>)> {
    if upstreams.is_empty() {
        return Err(std::io::Error::other("no upstream server"));
    }
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let proxy = Rc::new(Proxy {
        upstreams,
        next_upstream: Cell::new(0),
        rng: Cell::new(plan.seed),
        hits: RefCell::default(),
        plan,
        counts: RefCell::default(),
        recent: RefCell::default(),
        by_id: RefCell::default(),
        storms: RefCell::default(),
        stormed: RefCell::default(),
        dead: RefCell::default(),
        answered: RefCell::default(),
        deleting: RefCell::default(),
        unanswered: RefCell::default(),
        resumes: RefCell::default(),
        not_before: RefCell::default(),
    });
    let p = Rc::clone(&proxy);
    actix_rt::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            p.bump("connections");
            actix_rt::spawn(serve(client, Rc::clone(&p)));
        }
    });
    Ok((addr, proxy))
}

/// `http://host:port/path` -> (socket address, path).
pub(crate) fn split_url(url: &str) -> Result<(std::net::SocketAddr, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("only http:// URLs can be proxied: {url}"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or("no address")?;
    if !addr.ip().is_loopback() {
        return Err(format!("the fault proxy only fronts loopback servers, not {addr}"));
    }
    Ok((addr, format!("/{path}")))
}

// ---- HTTP/1.1 requests -------------------------------------------------------------------

/// A parsed request.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    fn remove(&mut self, name: &str) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }

    fn set(&mut self, name: &str, value: &str) {
        self.remove(name);
        self.headers.push((name.to_owned(), value.as_bytes().to_vec()));
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.path).into_bytes();
        for (n, v) in &self.headers {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

fn parse_request_head(head: &[u8]) -> Option<Request> {
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Request::new(&mut hs);
    if !r.parse(head).ok()?.is_complete() {
        return None;
    }
    let headers = r.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect();
    Some(Request {
        method: r.method?.to_owned(),
        path: r.path?.to_owned(),
        headers,
        body: Vec::new(),
    })
}

// ---- SSE events ---------------------------------------------------------------------------

/// The `id` of a raw SSE event, if it has one.
fn event_id(ev: &[u8]) -> Option<&str> {
    ev.split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"id:"))
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(|v| v.strip_prefix(' ').unwrap_or(v).trim_end_matches('\r'))
}

/// The `retry` field of a raw SSE event, in ms.
fn event_retry(ev: &[u8]) -> Option<u64> {
    ev.split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"retry:"))
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Whether a raw SSE event carries non-empty data.
fn event_has_data(ev: &[u8]) -> bool {
    ev.split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data:"))
        .any(|v| !v.iter().all(|b| b.is_ascii_whitespace()))
}

/// Splits a decoded SSE body into whole events (each including its blank line).
#[derive(Default)]
struct EventSplitter {
    carry: Vec<u8>,
}

impl EventSplitter {
    fn feed(&mut self, data: &[u8]) -> Vec<Rc<[u8]>> {
        self.carry.extend_from_slice(data);
        let mut out = Vec::new();
        while let Some(p) = self.carry.windows(2).position(|w| w == b"\n\n") {
            out.push(self.carry.drain(..p + 2).collect::<Vec<u8>>().into());
        }
        out
    }
}

// ---- the proxy ----------------------------------------------------------------------------

/// The request-side fault chosen for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rewrite {
    None,
    Origin,
    Token,
    Version,
    Cursor,
    Storm,
    LostDelete,
}

/// The response-side faults chosen for one SSE response.
#[derive(Debug, Default, Clone, Copy)]
struct EventFaults {
    /// Cut this many bytes after the first event with an id.
    cut: Option<usize>,
    /// Also arm the cut after the first event without an id (a stream its server does not
    /// make resumable: `rollout` phases), so the client's re-issue is what recovers it.
    cut_plain: bool,
    drop_priming: bool,
    cross: bool,
    replay: bool,
    expiry_race: bool,
}

async fn serve(client: TcpStream, p: Rc<Proxy>) {
    let mut c = Conn::new(client);
    // One kept connection per server behind the proxy.
    let mut ups: Vec<Option<Conn>> = p.upstreams.iter().map(|_| None).collect();
    loop {
        match exchange(&p, &mut c, &mut ups).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
    }
}

impl Proxy {
    /// The index of the server the next request goes to (round robin).
    fn pick(&self) -> usize {
        let i = self.next_upstream.get();
        self.next_upstream.set((i + 1) % self.upstreams.len());
        i
    }
}

async fn upstream(addr: SocketAddr, up: &mut Option<Conn>) -> IoResult<&mut Conn> {
    if up.is_none() {
        *up = Some(Conn::new(TcpStream::connect(addr).await?));
    }
    up.as_mut().ok_or_else(eof)
}

/// One request/response exchange. `Ok(true)`: the connection stays open.
async fn exchange(p: &Proxy, c: &mut Conn, ups: &mut [Option<Conn>]) -> IoResult<bool> {
    let Some(head) = c.read_head().await? else { return Ok(false) };
    let Some(mut req) = parse_request_head(&head) else {
        c.s.write_all(
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await?;
        return Ok(false);
    };
    if req.header("transfer-encoding").is_some() {
        c.s.write_all(
            b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await?;
        return Ok(false);
    }
    let len = req.header("content-length").and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    req.body = c.read_n(len).await?;

    let session = req.header("mcp-session-id").map(str::to_owned);
    // Only 2026-07-28 requests mirror their method in a header.
    let modern = req.header("mcp-method").is_some();
    if modern {
        p.bump("modern.requests");
    }
    let resume_from =
        (req.method == "GET").then(|| req.header("last-event-id").map(str::to_owned)).flatten();
    if let Some(s) = &session {
        if p.dead.borrow().contains(s) {
            p.bump("session.reused_after_404");
        }
        if let Some(cursor) = &resume_from {
            let now = Instant::now();
            p.resumes.borrow_mut().entry(s.clone()).or_default().push(now);
            let due = p.not_before.borrow_mut().remove(&(s.clone(), cursor.clone()));
            match due {
                Some(t) if now + EARLY_TOLERANCE < t => p.bump("resume.too_early"),
                Some(_) => p.bump("resume.waited_enough"),
                None => {}
            }
        }
    }
    // A storm in progress refuses this session's resumes without asking the server.
    if let (Some(s), Some(_)) = (&session, &resume_from) {
        let left = p.storms.borrow().get(s).copied().unwrap_or(0);
        if left > 0 {
            p.storms.borrow_mut().insert(s.clone(), left - 1);
            return refuse_storm(p, c, s, resume_from.as_deref()).await;
        }
    }
    // One storm per reconnect episode: the attempts after it are not stormed again.
    let stormable = match (&session, &resume_from) {
        (Some(s), Some(c)) => p.stormed.borrow_mut().insert((s.clone(), c.clone())),
        _ => false,
    };
    let rewrite =
        choose_rewrite(p, &req, session.is_some(), resume_from.is_some(), stormable, modern);
    match rewrite {
        Rewrite::Origin => req.set("Origin", FOREIGN_ORIGIN),
        Rewrite::Token => req.set(
            "Authorization",
            &format!("Bearer {}", p.plan.other_token.as_ref().map(|t| t.get()).unwrap_or_default()),
        ),
        Rewrite::Version => req.remove("MCP-Protocol-Version"),
        Rewrite::Cursor => {
            let foreign = session
                .as_deref()
                .and_then(|s| p.foreign_event(s))
                .and_then(|e| event_id(&e).map(str::to_owned));
            let forged = foreign
                .filter(|_| p.below(2) == 0)
                .unwrap_or_else(|| format!("forged-{:016x}", p.below(u64::MAX)));
            req.set("Last-Event-ID", &forged);
        }
        Rewrite::Storm => {
            if let Some(s) = &session {
                p.bump("storm.started");
                p.storms.borrow_mut().insert(s.clone(), p.below(2) as u32);
            }
            return refuse_storm(
                p,
                c,
                session.as_deref().unwrap_or_default(),
                resume_from.as_deref(),
            )
            .await;
        }
        Rewrite::None | Rewrite::LostDelete => {}
    }
    let is_call = req.method == "POST"
        && (session.is_some() || modern)
        && req.body.windows(12).any(|w| w == b"\"tools/call\"");
    // A modern request served as another principal is never also cut (see Scenario::Modern).
    let faults = if (is_call || resume_from.is_some()) && !(modern && rewrite == Rewrite::Token) {
        choose_event_faults(p, is_call, modern)
    } else {
        EventFaults::default()
    };

    // A DELETE sent again (the answer to the first was lost with its node) finds the session
    // ended: its 404 is that end.
    let delete_again = req.method == "DELETE"
        && session.as_ref().is_some_and(|s| !p.deleting.borrow_mut().insert(s.clone()));
    let (at, rhead) = match send_any(p, ups, &req).await {
        Ok(sent) => sent,
        Err(e) => {
            if let Some(s) = &session {
                p.unanswered.borrow_mut().insert(s.clone());
            }
            return Err(e);
        }
    };
    let up = &mut ups[at];
    let Some(u) = up.as_mut() else { return Err(eof()) };
    let r =
        parse_response_head(&rhead).ok_or_else(|| std::io::Error::other("bad response head"))?;
    check_rewrite(p, rewrite, r.status, modern);
    if rewrite == Rewrite::Version && !matches!(r.status, 200..=299 | 404 | 410 | 429 | 503) {
        // Refused without its version header: what it was, for the reader of the report.
        eprintln!(
            "mcp-load: proxy: {} without its version header answered {} by node {at}{}",
            req.method,
            r.status,
            if resume_from.is_some() { " (a resume)" } else { "" },
        );
    }
    // A resume whose cursor the proxy left alone is refused only if the client sent a cursor
    // that is not its own (or the host refused one of its own): either is a defect.
    let resume_refused = r.status == 400 && rewrite != Rewrite::Cursor && resume_from.is_some();
    if resume_refused {
        p.bump("resume.refused_unexplained");
    }
    if r.status < 400
        && let Some(s) = &session
    {
        p.answered.borrow_mut().insert(s.clone(), Instant::now());
        p.unanswered.borrow_mut().remove(s);
    }
    if r.status == 404
        && rewrite == Rewrite::None
        && let Some(s) = &session
    {
        p.dead.borrow_mut().insert(s.clone());
        let idle = p.answered.borrow().get(s).map(Instant::elapsed);
        let stuck = p.unanswered.borrow().contains(s);
        let why = not_found_why(delete_again, p.plan.session_ttl, idle, stuck);
        p.bump(why);
        if why == NOT_FOUND_UNEXPLAINED {
            say_404(at, &req, s);
        }
    }
    if rewrite == Rewrite::LostDelete {
        // The server ended the session; its answer never reaches the client.
        skip_body(u, &r).await?;
        p.bump("lost_delete");
        return Ok(false);
    }
    c.s.write_all(&rhead).await?;
    let keep = if r.sse && r.chunked && r.status == 200 {
        let replay_first = resume_from
            .as_deref()
            .filter(|_| faults.replay)
            .and_then(|id| p.by_id.borrow().0.get(id).map(|(_, ev)| Rc::clone(ev)));
        let ctx =
            StreamCtx { session: session.unwrap_or_default(), faults, replay_first, req: &req };
        relay_events(p, c, u, ctx).await?
    } else if resume_refused && let Some(n) = r.length {
        let body = u.read_n(n).await?;
        say_resume_refused(p, at, session.as_deref(), resume_from.as_deref(), &body);
        c.s.write_all(&body).await?;
        true
    } else {
        relay_body(c, u, &r).await?
    };
    if !keep || r.close {
        *up = None;
    }
    Ok(keep && !r.close)
}

/// Say on stderr which resume was refused 400 without a forged cursor, and where the proxy
/// saw its cursor: on this session's streams, another session's, or nowhere.
fn say_resume_refused(
    p: &Proxy,
    at: usize,
    session: Option<&str>,
    cursor: Option<&str>,
    body: &[u8],
) {
    let cursor = cursor.unwrap_or_default();
    let seen = match (p.by_id.borrow().0.get(cursor), session) {
        (Some((s, _)), Some(own)) if s == own => "on this session's streams",
        (Some(_), _) => "on ANOTHER session's stream",
        (None, _) => "nowhere recently",
    };
    eprintln!(
        "mcp-load: proxy: resume of session …{} refused 400 by node {at} (cursor …{}, seen {seen}): {}",
        tail(session.unwrap_or_default()),
        tail(cursor),
        String::from_utf8_lossy(body),
    );
}

/// A 404 to a DELETE sent again for the same session (the first one's answer was lost).
pub(crate) const NOT_FOUND_DELETE_AGAIN: &str = "404.delete_again";
/// A 404 for a session with a request stuck on a faulted node and no answer for about the
/// hosts' idle TTL: it expired.
pub(crate) const NOT_FOUND_AFTER_IDLE: &str = "404.after_idle";
/// A 404 neither explains: the session was lost.
pub(crate) const NOT_FOUND_UNEXPLAINED: &str = "404.unexplained";

/// What explains a 404 to an unmodified request of a session: a DELETE sent again
/// (`delete_again`), or an expiry: the hosts' idle TTL is `ttl`, the session's last answer
/// `idle` ago, and a request of it got no answer since (`stuck`: it went to a node that was
/// paused or killed, which never recorded it as a use). Anything else is unexplained.
pub(crate) fn not_found_why(
    delete_again: bool,
    ttl: Option<std::time::Duration>,
    idle: Option<std::time::Duration>,
    stuck: bool,
) -> &'static str {
    match (ttl, idle) {
        _ if delete_again => NOT_FOUND_DELETE_AGAIN,
        (Some(ttl), Some(idle)) if stuck && idle >= expiry_explains(ttl) => NOT_FOUND_AFTER_IDLE,
        _ => NOT_FOUND_UNEXPLAINED,
    }
}

/// How long unanswered a session may expire after a host's idle TTL `ttl`: a host records
/// a session's last use coarsely (when it moved by a sixteenth of the TTL), so its record may
/// say up to `ttl / 16` earlier than the last answer; a quarter second more for the clocks
/// and the commit.
fn expiry_explains(ttl: std::time::Duration) -> std::time::Duration {
    ttl.saturating_sub(ttl / 16 + std::time::Duration::from_millis(250))
}

/// 404s said so far ([`say_404`]).
static SAID_404: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A 404 nothing explains is said on stderr (the first 200): when, which node, what for, so
/// a host's log can be read beside it.
fn say_404(node: usize, req: &Request, session: &str) {
    if SAID_404.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 200 {
        return;
    }
    let body = String::from_utf8_lossy(&req.body);
    let method = body.split("\"method\":\"").nth(1).and_then(|m| m.split('"').next());
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    eprintln!(
        "mcp-load: proxy: 404 from node {node} for {} {} of session …{} at {at} ms",
        req.method,
        method.unwrap_or("-"),
        tail(session),
    );
}

/// The last 8 characters of a session id or cursor: its random end (an id may begin with
/// its generation and the time it was made).
fn tail(s: &str) -> &str {
    s.get(s.len().saturating_sub(8)..).unwrap_or(s)
}

/// Send `req` to the next server (round robin) and read the response head: the server's
/// index and the head. A server that refuses the connection (it is down) is skipped for the
/// next one, as a balancer's health check would; one that takes the request and closes
/// without a word is an error (the client sees its connection cut).
async fn send_any(
    p: &Proxy,
    ups: &mut [Option<Conn>],
    req: &Request,
) -> IoResult<(usize, Vec<u8>)> {
    let mut last = eof();
    for _ in 0..p.upstreams.len() {
        let at = p.pick();
        let (addr, up) = (p.upstreams[at], &mut ups[at]);
        let reused = up.is_some();
        if !reused && let Err(e) = upstream(addr, up).await {
            // Not connected: nothing was sent. The next server.
            *up = None;
            if p.upstreams.len() > 1 {
                p.bump("upstream.skipped");
            }
            last = e;
            continue;
        }
        match send(addr, up, req).await {
            Ok(Some(h)) => return Ok((at, h)),
            Ok(None) if !reused => return Err(eof()),
            Ok(None) => {
                // The server closed the idle upstream connection without answering (its
                // keep-alive ran out): a real proxy retries that on a new connection, and so
                // do we.
                *up = None;
                return send(addr, up, req).await?.ok_or_else(eof).map(|h| (at, h));
            }
            Err(e) => {
                *up = None;
                return Err(e);
            }
        }
    }
    Err(last)
}

/// Write `req` to the server at `addr` (on `up`, connected first if need be) and read the
/// response head. `None`: the connection closed before any byte of a response.
async fn send(addr: SocketAddr, up: &mut Option<Conn>, req: &Request) -> IoResult<Option<Vec<u8>>> {
    let u = upstream(addr, up).await?;
    if u.s.write_all(&req.to_bytes()).await.is_err() {
        return Ok(None);
    }
    u.read_head().await
}

fn choose_rewrite(
    p: &Proxy,
    req: &Request,
    has_session: bool,
    resume: bool,
    stormable: bool,
    modern: bool,
) -> Rewrite {
    let candidates = [
        (Scenario::OriginRewrite, true, Rewrite::Origin),
        (
            Scenario::OldToken,
            (has_session || (modern && modern_token_rewritable(p, req)))
                && p.plan.other_token.is_some(),
            Rewrite::Token,
        ),
        (Scenario::MissingVersion, has_session, Rewrite::Version),
        (Scenario::ForeignCursor, resume, Rewrite::Cursor),
        // A legacy reconnect episode, or a modern request (which has no resumes).
        (
            Scenario::Storm,
            (resume && has_session && stormable) || (modern && req.method == "POST"),
            Rewrite::Storm,
        ),
        (Scenario::LostDelete, req.method == "DELETE" && has_session, Rewrite::LostDelete),
    ];
    candidates
        .into_iter()
        .find(|(s, applies, _)| *applies && p.roll(*s))
        .map_or(Rewrite::None, |(_, _, r)| r)
}

/// Whether a 2026-07-28 request may be sent with another principal's token (see
/// [`FaultPlan::token_rewrite_modern_tools`]).
fn modern_token_rewritable(p: &Proxy, req: &Request) -> bool {
    let tools = &p.plan.token_rewrite_modern_tools;
    tools.is_empty()
        || req.header("mcp-method") != Some("tools/call")
        || req.header("mcp-name").is_some_and(|n| tools.iter().any(|t| t == n))
}

fn choose_event_faults(p: &Proxy, is_call: bool, modern: bool) -> EventFaults {
    if modern {
        // Its events carry no ids: the cut is armed after the first one, and nothing else
        // applies (a foreign or replayed event cannot be told apart without ids: that is what
        // the legacy era's acceptance point is for).
        return EventFaults {
            cut: p.roll(Scenario::Cut).then(|| p.below(256) as usize),
            cut_plain: true,
            ..EventFaults::default()
        };
    }
    let expiry_race = is_call && p.roll(Scenario::ExpiryRace);
    EventFaults {
        cut: (!expiry_race && p.roll(Scenario::Cut)).then(|| p.below(256) as usize),
        cut_plain: p.plan.rates.contains_key(&Scenario::Rollout),
        drop_priming: is_call && p.roll(Scenario::LostPriming),
        cross: p.roll(Scenario::CrossedIds),
        replay: p.roll(Scenario::ReplayAfterAck),
        expiry_race,
    }
}

/// Record whether the server refused what it had to refuse.
fn check_rewrite(p: &Proxy, rewrite: Rewrite, status: u16, modern: bool) {
    let name = match (rewrite, status) {
        (Rewrite::Token, 429 | 503) if modern => "rewrite.unavailable",
        // Stateless: a valid token is its principal's request, served as such.
        (Rewrite::Token, 200..=299) if modern => "old_token.served_as_other",
        (Rewrite::Token, _) if modern => "old_token.modern_not_served",
        // Draining or busy: the server judged nothing (the Origin check comes first, so a
        // foreign Origin is still 403 then).
        (Rewrite::Token | Rewrite::Version | Rewrite::Cursor, 429 | 503) => "rewrite.unavailable",
        (Rewrite::Origin, 403) => "origin.rejected",
        (Rewrite::Origin, _) => "origin.accepted",
        (Rewrite::Token, 401 | 403 | 404) => "old_token.rejected",
        (Rewrite::Token, _) => "old_token.accepted",
        (Rewrite::Version, 200..=299) => "missing_version.served",
        // The session ended meanwhile (another fault): the header was not the reason.
        (Rewrite::Version, 404) => "missing_version.session_gone",
        // A resume of a stream that is gone (a crash took its unrecorded tail): not the header.
        (Rewrite::Version, 410) => "missing_version.stream_gone",
        (Rewrite::Version, _) => {
            // Which answer, for the report (the gate counts them all).
            p.bump(refused_with(status));
            "missing_version.refused"
        }
        (Rewrite::Cursor, 400) => "foreign_cursor.rejected",
        // The session ended meanwhile: nothing was replayed either.
        (Rewrite::Cursor, 404) => "foreign_cursor.session_gone",
        (Rewrite::Cursor, _) => "foreign_cursor.accepted",
        (Rewrite::None | Rewrite::Storm | Rewrite::LostDelete, _) => return,
    };
    p.bump(name);
}

/// The report's name of a request without its version header answered `status`.
fn refused_with(status: u16) -> &'static str {
    const NAMED: [(u16, &str); 10] = [
        (400, "missing_version.refused_with.400"),
        (401, "missing_version.refused_with.401"),
        (403, "missing_version.refused_with.403"),
        (405, "missing_version.refused_with.405"),
        (406, "missing_version.refused_with.406"),
        (409, "missing_version.refused_with.409"),
        (413, "missing_version.refused_with.413"),
        (500, "missing_version.refused_with.500"),
        (502, "missing_version.refused_with.502"),
        (504, "missing_version.refused_with.504"),
    ];
    if let Some((_, name)) = NAMED.iter().find(|(s, _)| *s == status) {
        return name;
    }
    match status / 100 {
        1 => "missing_version.refused_with.1xx",
        3 => "missing_version.refused_with.3xx",
        4 => "missing_version.refused_with.4xx",
        5 => "missing_version.refused_with.5xx",
        _ => "missing_version.refused_with.other",
    }
}

async fn refuse_storm(
    p: &Proxy,
    c: &mut Conn,
    session: &str,
    cursor: Option<&str>,
) -> IoResult<bool> {
    p.bump("storm.refusals");
    if let Some(cursor) = cursor.filter(|_| !session.is_empty()) {
        p.resume_not_before(session, cursor, 1_000);
    }
    let answer: &[u8] = if p.below(2) == 0 {
        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n"
    } else {
        b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n"
    };
    c.s.write_all(answer).await?;
    Ok(true)
}

async fn skip_body(u: &mut Conn, r: &ResponseHead) -> IoResult<()> {
    if r.chunked {
        while u.read_chunk().await?.is_some() {}
    } else if let Some(n) = r.length {
        u.read_n(n).await?;
    }
    Ok(())
}

/// Forward a body unchanged (re-chunked if chunked). `Ok(false)` if it was close-delimited.
async fn relay_body(c: &mut Conn, u: &mut Conn, r: &ResponseHead) -> IoResult<bool> {
    if r.chunked {
        while let Some(data) = u.read_chunk().await? {
            c.s.write_all(&chunk(&data)).await?;
        }
        c.s.write_all(b"0\r\n\r\n").await?;
        Ok(true)
    } else if let Some(n) = r.length {
        let body = u.read_n(n).await?;
        c.s.write_all(&body).await?;
        Ok(true)
    } else if r.status == 204 || r.status == 304 || (100..200).contains(&r.status) {
        Ok(true)
    } else {
        while let Some(data) = u.read_some().await? {
            c.s.write_all(&data).await?;
        }
        Ok(false)
    }
}

struct StreamCtx<'a> {
    session: String,
    faults: EventFaults,
    replay_first: Option<Rc<[u8]>>,
    req: &'a Request,
}

/// Forward an SSE body event by event, applying the stream's faults. `Ok(false)` when the
/// connection was cut on purpose.
async fn relay_events(p: &Proxy, c: &mut Conn, u: &mut Conn, ctx: StreamCtx<'_>) -> IoResult<bool> {
    let f = ctx.faults;
    let mut split = EventSplitter::default();
    let mut primed = false;
    let mut crossed = false;
    let mut pending_replay: Option<Rc<[u8]>> = None;
    let mut replayed = false;
    // Bytes that may still pass once the cut is armed.
    let mut cut_left: Option<usize> = None;
    // The stream's latest `retry` (ms): after a cut, the client must wait that long.
    let mut retry_ms: Option<u64> = None;
    // The last event id the client got whole on this stream: where it resumes from.
    let mut last_id: Option<String> = ctx.req.header("last-event-id").map(str::to_owned);
    let cut_here = |retry_ms: Option<u64>, last_id: Option<&str>| {
        p.bump("cut");
        if let (Some(ms), Some(cursor)) = (retry_ms, last_id) {
            p.resume_not_before(&ctx.session, cursor, ms);
        }
    };
    if let Some(ev) = ctx.replay_first {
        p.bump("replay_after_ack.resume");
        c.s.write_all(&chunk(&ev)).await?;
    }
    while let Some(data) = u.read_chunk().await? {
        for ev in split.feed(&data) {
            let id = event_id(&ev);
            let has_data = event_has_data(&ev);
            retry_ms = event_retry(&ev).or(retry_ms);
            if f.drop_priming && !primed && id.is_some() && !has_data {
                primed = true;
                p.bump("lost_priming");
                continue;
            }
            primed = true;
            p.remember(&ctx.session, id, &ev, has_data);
            if f.cross
                && !crossed
                && has_data
                && let Some(foreign) = p.foreign_event(&ctx.session)
            {
                crossed = true;
                p.bump("crossed_ids");
                c.s.write_all(&chunk(&foreign)).await?;
            }
            if let Some(dup) = pending_replay.take() {
                p.bump("replay_after_ack.stream");
                c.s.write_all(&chunk(&dup)).await?;
            }
            if let Some(left) = cut_left {
                if ev.len() > left {
                    c.s.write_all(&chunk(&ev[..left])).await?;
                    cut_here(retry_ms, last_id.as_deref());
                    return Ok(false);
                }
                cut_left = Some(left - ev.len());
            }
            c.s.write_all(&chunk(&ev)).await?;
            if let Some(id) = id {
                last_id = Some(id.to_owned());
                if f.expiry_race {
                    end_session(p, ctx.req).await;
                    if let Some(ms) = retry_ms {
                        p.resume_not_before(&ctx.session, id, ms);
                    }
                    return Ok(false);
                }
                if let (Some(extra), None) = (f.cut, cut_left) {
                    cut_left = Some(extra);
                }
                if f.replay && !replayed && has_data {
                    replayed = true;
                    pending_replay = Some(ev);
                }
            } else if f.cut_plain
                && has_data
                && let (Some(extra), None) = (f.cut, cut_left)
            {
                p.bump("cut.plain_armed");
                cut_left = Some(extra);
            }
        }
    }
    if let Some(dup) = pending_replay {
        p.bump("replay_after_ack.stream");
        c.s.write_all(&chunk(&dup)).await?;
    }
    if cut_left.is_some() {
        // The stream ended inside the cut allowance: cut before its end instead.
        cut_here(retry_ms, last_id.as_deref());
        return Ok(false);
    }
    c.s.write_all(b"0\r\n\r\n").await?;
    Ok(true)
}

/// [`Scenario::ExpiryRace`]: end the session (DELETE, as an expiry would) while the
/// request's response is still in flight.
async fn end_session(p: &Proxy, req: &Request) {
    let mut del = Request {
        method: "DELETE".into(),
        path: req.path.clone(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    for name in ["host", "mcp-session-id", "mcp-protocol-version", "authorization"] {
        if let Some(v) = req.header(name) {
            del.set(name, v);
        }
    }
    del.set("content-length", "0");
    del.set("connection", "close");
    let upstream = p.upstreams[p.pick()];
    let deleted = async {
        let mut conn = Conn::new(TcpStream::connect(upstream).await.ok()?);
        conn.s.write_all(&del.to_bytes()).await.ok()?;
        let head = conn.read_head().await.ok()??;
        Some(parse_response_head(&head).is_some_and(|r| (200..300).contains(&r.status)))
    };
    match tokio::time::timeout(DELETE_DEADLINE, deleted).await {
        Ok(Some(true)) => p.bump("expiry_race"),
        Ok(_) => p.bump("expiry_race.delete_failed"),
        // A host that never answers a DELETE: the gate fails on it (never waits for ever).
        Err(_) => p.bump(EXPIRY_RACE_UNANSWERED),
    }
}

/// How long [`end_session`] waits for a host's answer to its DELETE.
const DELETE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// The counter of the expiry race's DELETEs no host answered within [`DELETE_DEADLINE`].
pub(crate) const EXPIRY_RACE_UNANSWERED: &str = "expiry_race.delete_unanswered";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_at_blank_lines_across_feeds() {
        let mut s = EventSplitter::default();
        assert!(s.feed(b"id: a\nretry: 10\ndata: \n").is_empty());
        let evs = s.feed(b"\nid: b\ndata: {\"x\":1}\n\nid: c");
        assert_eq!(evs.len(), 2);
        assert_eq!(
            (event_id(&evs[0]), event_has_data(&evs[0]), event_retry(&evs[0])),
            (Some("a"), false, Some(10))
        );
        assert_eq!(event_retry(&evs[1]), None);
        assert_eq!((event_id(&evs[1]), event_has_data(&evs[1])), (Some("b"), true));
        assert_eq!(&*s.feed(b"\ndata: 1\n\n")[0], b"id: c\ndata: 1\n\n");
        assert_eq!(event_id(b": comment\ndata: x\n\n"), None);
    }

    #[test]
    fn request_heads_round_trip_with_rewrites() {
        let mut r = parse_request_head(b"GET /mcp HTTP/1.1\r\nHost: x\r\nLast-Event-ID: abc\r\nOrigin: http://localhost\r\n\r\n").unwrap();
        assert_eq!((r.method.as_str(), r.header("last-event-id")), ("GET", Some("abc")));
        r.set("origin", FOREIGN_ORIGIN);
        r.remove("Last-Event-ID");
        let again = parse_request_head(&r.to_bytes()).unwrap();
        assert_eq!(again.header("Origin"), Some(FOREIGN_ORIGIN));
        assert_eq!(again.header("last-event-id"), None);
        assert_eq!(again.header("host"), Some("x"));
    }

    #[test]
    fn window_counts_the_densest_second() {
        let t0 = Instant::now();
        let ms = |m| t0 + std::time::Duration::from_millis(m);
        let ts = [ms(0), ms(100), ms(900), ms(1000), ms(1500), ms(1950), ms(1999)];
        // [1000, 2000) holds 4; [0, 1000) holds 3.
        assert_eq!(max_in_window(&ts, 1000), 4);
        assert_eq!(max_in_window(&[], 1000), 0);
    }

    #[test]
    fn scenarios_parse_by_name() {
        for s in Scenario::ALL {
            assert_eq!(Scenario::parse(s.name()), Some(s));
        }
        assert_eq!(Scenario::parse("nope"), None);
    }
}
