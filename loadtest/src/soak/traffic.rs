//! The soak's virtual clients. They speak raw HTTP/1.1 over TCP (not the resilient client:
//! these clients misbehave on purpose), each looping over a shuffled deck of traffic kinds,
//! and every answer is classified on the client side by status and JSON-RPC code
//! ([`classify`]) and tallied ([`Tally`]).
//!
//! Every wait is bounded ([`REQUEST_TIMEOUT`], [`EVENT_WAIT`]), every loop is bounded in
//! count, and a client starts no iteration after the traffic deadline.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use mcp_devtools::StatsFeed;
use mcp_runtime::sse::Decoder;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::{Instant, timeout};

use super::payloads::{self, Over};
use crate::http1::{Conn, ResponseHead, chunk, parse_response_head};

/// Longest wait for a whole answer (the 3.5 MiB echo included, on a debug build).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the next expected SSE event.
pub(crate) const EVENT_WAIT: Duration = Duration::from_secs(5);
/// Largest answer body read (the 3.5 MiB echo, SSE-framed, fits).
const MAX_ANSWER_BYTES: usize = 16 << 20;
/// Chunks read from one stream before giving up on the event we wait for.
const MAX_STREAM_CHUNKS: usize = 10_000;
/// Messages of a resume-into-gap client's flood: it reads them all before it resumes, so
/// the events after its cursor are gone from the host's window by then (far more than the
/// soak host's 16).
const GAP_FLOOD: u64 = 64;
/// Unexpected answers quoted in the report, per step.
const SAMPLES_PER_STEP: usize = 3;
/// Longest wait for the host's stats line to show a figure back (it is printed every 250 ms).
const HOST_SETTLE_WAIT: Duration = Duration::from_secs(10);
/// How often that wait looks at the latest stats line.
const HOST_LOOK_EVERY: Duration = Duration::from_millis(50);
/// How long past the traffic deadline a client may still wait for its turn at an exclusive
/// kind (then it gives the iteration up, uncompleted).
const TURN_GRACE: Duration = Duration::from_secs(10);
/// The callers of `modern-slot-hog` (the host counts a caller by its address without
/// authentication; Linux routes all of 127/8 to the loopback interface): the first four fill
/// the whole bound, one share each, the fifth finds it full.
const HOG_CALLERS: [Ipv4Addr; 5] = [
    Ipv4Addr::new(127, 0, 0, 11),
    Ipv4Addr::new(127, 0, 0, 12),
    Ipv4Addr::new(127, 0, 0, 13),
    Ipv4Addr::new(127, 0, 0, 14),
    Ipv4Addr::new(127, 0, 0, 15),
];
/// The caller of `pinned-arguments`' 2026-07-28 calls.
const PINNED_CALLER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 21);
/// The callers of `receipt-flood`.
const FLOOD_CALLERS: [Ipv4Addr; 2] = [Ipv4Addr::new(127, 0, 0, 31), Ipv4Addr::new(127, 0, 0, 32)];

const ACCEPT_BOTH: &str = "application/json, text/event-stream";
const ACCEPT_JSON: &str = "application/json";
const ACCEPT_SSE: &str = "text/event-stream";
const VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
/// Versions with elicitation.
const ELICITATION_VERSIONS: [&str; 2] = ["2025-06-18", "2025-11-25"];

/// One kind of careless or hostile client behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// initialize, initialized, a few `echo` calls, then DELETE half the time, else abandon.
    Churn,
    /// An SSE call of a slow tool, dropped after its first event, never resumed.
    Abandoned,
    /// A GET stream, replaced by a second one, both dropped.
    ReplacedGet,
    /// `test_elicitation`, read up to the server's `elicitation/create`, never answered.
    Elicitation,
    /// Payloads at and just over every documented size limit.
    Large,
    /// A resume whose events were evicted (-32005), then the same request id reused.
    Gap,
    /// A POST whose body stops half-way (slowloris): 408 once the host's body deadline passes.
    SlowBody,
    /// An SSE call of a flood on a connection that is never read: the host's kernel ends it
    /// (`server.tcp_user_timeout_secs`), its session then expires.
    Stalled,
    /// Slow 2026-07-28 calls of one caller up to its share and past it (429), of other callers
    /// until every place is taken (503), then `server/discover` and `tools/list` (answered).
    ModernSlotHog,
    /// Slow calls whose ~3.75 MiB arguments the host holds, until the request memory budget
    /// is full (503), then ended: the budget comes back.
    PinnedArguments,
    /// Keyed write calls, each with a new idempotency key, from one caller until its receipt
    /// bound refuses it (429) and from a second until its own or the total does (429 or 503);
    /// what the host keeps stays within the total.
    ReceiptFlood,
}

impl Kind {
    pub(crate) const ALL: [Kind; 11] = [
        Kind::Churn,
        Kind::Abandoned,
        Kind::ReplacedGet,
        Kind::Elicitation,
        Kind::Large,
        Kind::Gap,
        Kind::SlowBody,
        Kind::Stalled,
        Kind::ModernSlotHog,
        Kind::PinnedArguments,
        Kind::ReceiptFlood,
    ];

    /// The kind named `name` (as [`Kind::name`] spells it).
    pub(crate) fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Churn => "session-churn",
            Kind::Abandoned => "abandoned-stream",
            Kind::ReplacedGet => "replaced-get",
            Kind::Elicitation => "unanswered-elicitation",
            Kind::Large => "large-payloads",
            Kind::Gap => "resume-into-gap",
            Kind::SlowBody => "slow-body",
            Kind::Stalled => "stalled-reader",
            Kind::ModernSlotHog => "modern-slot-hog",
            Kind::PinnedArguments => "pinned-arguments",
            Kind::ReceiptFlood => "receipt-flood",
        }
    }

    /// Share of the deck.
    fn weight(self) -> usize {
        match self {
            Kind::Churn => 4,
            Kind::Large
            | Kind::SlowBody
            | Kind::Stalled
            | Kind::ModernSlotHog
            | Kind::PinnedArguments
            | Kind::ReceiptFlood => 1,
            Kind::Abandoned | Kind::ReplacedGet | Kind::Elicitation | Kind::Gap => 2,
        }
    }
}

/// What a request must get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// This status (202 for a notification, 204 for DELETE, 200 for an opened stream).
    Status(u16),
    /// 200 with a JSON-RPC result for the request.
    Result,
    /// 200 with a JSON-RPC error of this code for the request (an admitted request's
    /// protocol error, or -32005 for a resume into a gap).
    RpcError(i64),
    /// A deliberate limit probe: 400, -32600, `error.data.limit` naming `limit`; the host
    /// counts it under `cause`.
    Limit { cause: &'static str, limit: &'static str },
    /// A deliberate body over `security.max_body_bytes`: 413, -32000.
    TooLarge,
    /// A deliberate body that stops half-way: 408, -32000.
    BodyTimeout,
    /// A deliberate refusal for load or a share: this status and code, a message that
    /// `says` this; the host counts it under `cause`.
    Refused { status: u16, code: i64, says: &'static str, cause: &'static str },
    /// A result, or one of these refusals (a flood that runs until a bound refuses it).
    ResultOr(&'static [Expect]),
}

/// Past a caller's share of the 2026-07-28 places.
const PAST_THE_SHARE: Expect = Expect::Refused {
    status: 429,
    code: -32007,
    says: "requests of this caller are running",
    cause: "quota.modern_in_flight",
};
/// Every 2026-07-28 place taken.
const PAST_THE_BOUND: Expect = Expect::Refused {
    status: 503,
    code: -32006,
    says: "2026-07-28 requests running",
    cause: "overloaded.modern_in_flight",
};
/// A keyed write call of a flood: its result, or the refusal of a receipt bound (the
/// caller's: 429; every caller's: 503).
const FLOOD_CALL: Expect = Expect::ResultOr(&[
    Expect::Refused {
        status: 429,
        code: -32007,
        says: "idempotency receipts",
        cause: "quota.receipts",
    },
    Expect::Refused {
        status: 503,
        code: -32006,
        says: "ledger.receipt_bytes_total",
        cause: "overloaded.receipts",
    },
]);
/// The request memory budget full.
const PAST_THE_BUDGET: Expect = Expect::Refused {
    status: 503,
    code: -32006,
    says: "request memory budget",
    cause: "overloaded.request_memory",
};

/// How an answer compares with its expectation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// As expected, and not a refusal.
    Ok,
    /// The documented refusal of a deliberate probe (the host's cause).
    Refused(&'static str),
    /// Anything else: why.
    Unexpected(String),
}

/// The host's cause for a body over the limit.
pub(crate) const CAUSE_BODY: &str = "body_too_large";
/// The host's cause for a body that did not arrive in time.
pub(crate) const CAUSE_BODY_TIMEOUT: &str = "body_timeout";
/// How long a stalled reader leaves its connection unread before looking: the soak host's
/// user timeout is 2 s, checked at the kernel's zero-window probes (0.2 s, then doubling),
/// so the host has ended it by then. Looking (reading) would un-stall it, so it waits first.
const STALL_CUT_WITHIN: Duration = Duration::from_secs(8);

/// Classify an answer: its status and the JSON-RPC message answering the request (the
/// response, or a refusal's error body), if there was one.
pub(crate) fn classify(expect: Expect, status: u16, msg: Option<&Value>) -> Verdict {
    if let Expect::ResultOr(refusals) = expect {
        let as_result = classify(Expect::Result, status, msg);
        return refusals
            .iter()
            .map(|r| classify(*r, status, msg))
            .find(|v| !matches!(v, Verdict::Unexpected(_)))
            .unwrap_or(as_result);
    }
    let code = msg.and_then(|m| m["error"]["code"].as_i64());
    let limit = msg.and_then(|m| m["error"]["data"]["limit"].as_str());
    let as_expected = match expect {
        Expect::Status(s) => status == s,
        Expect::Result => status == 200 && msg.is_some_and(|m| m.get("result").is_some()),
        Expect::RpcError(c) => status == 200 && code == Some(c),
        Expect::Limit { limit: want, .. } => {
            status == 400 && code == Some(-32600) && limit.is_some_and(|l| l.contains(want))
        }
        Expect::TooLarge => status == 413 && code == Some(-32000),
        Expect::BodyTimeout => status == 408 && code == Some(-32000),
        Expect::Refused { status: s, code: c, says, .. } => {
            status == s
                && code == Some(c)
                && msg
                    .and_then(|m| m["error"]["message"].as_str())
                    .is_some_and(|m| m.contains(says))
        }
        Expect::ResultOr(_) => unreachable!("classified above"),
    };
    if as_expected {
        return match expect {
            Expect::Limit { cause, .. } | Expect::Refused { cause, .. } => Verdict::Refused(cause),
            Expect::TooLarge => Verdict::Refused(CAUSE_BODY),
            Expect::BodyTimeout => Verdict::Refused(CAUSE_BODY_TIMEOUT),
            _ => Verdict::Ok,
        };
    }
    let what = match status {
        503 => "refused for load",
        500..=599 => "server error",
        404 => "404 on a live session",
        409 => "409 (request id still in flight)",
        400 => "unexpected 400",
        429 => "refused for load",
        200..=299 => "unexpected answer",
        _ => "unexpected status",
    };
    let got = match msg {
        Some(m) if m.get("error").is_some() => format!(
            "error {} {:?}{}",
            code.map_or("?".into(), |c| c.to_string()),
            m["error"]["message"].as_str().unwrap_or_default(),
            limit.map(|l| format!(" (limit: {l})")).unwrap_or_default()
        ),
        Some(m) if m.get("result").is_some() => "a result".into(),
        Some(_) => "a JSON-RPC message without result or error".into(),
        None => "no JSON-RPC message".into(),
    };
    Verdict::Unexpected(format!("{what}: expected {expect:?}, got {status} with {got}"))
}

/// Counts of one step (one kind of request within a kind of traffic).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StepCount {
    pub(crate) sent: u64,
    /// Answered as expected (documented refusals included).
    pub(crate) as_expected: u64,
}

/// Iterations of one traffic kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KindCount {
    pub(crate) started: u64,
    /// Ran to their end with every answer as expected.
    pub(crate) completed: u64,
}

/// Everything the clients saw.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    pub(crate) requests: u64,
    pub(crate) kinds: BTreeMap<Kind, KindCount>,
    /// By `kind/step`.
    pub(crate) steps: BTreeMap<String, StepCount>,
    /// Documented refusals of deliberate probes, by the host's cause.
    pub(crate) refused: BTreeMap<&'static str, u64>,
    pub(crate) unexpected: u64,
    /// A few unexpected answers, verbatim, per step.
    pub(crate) samples: Vec<String>,
    /// A replaced GET stream whose connection the server ended (informational).
    pub(crate) replaced_get_ended: u64,
    /// A replaced GET stream still open after [`EVENT_WAIT`] (informational).
    pub(crate) replaced_get_still_open: u64,
}

impl Tally {
    /// Record one answer (or why there was none); `true` if as expected.
    pub(crate) fn record(
        &mut self,
        kind: Kind,
        step: &str,
        expect: Expect,
        outcome: Result<(u16, Option<Value>), String>,
    ) -> bool {
        let key = format!("{}/{step}", kind.name());
        let verdict = match outcome {
            Ok((status, msg)) => classify(expect, status, msg.as_ref()),
            Err(e) => Verdict::Unexpected(e),
        };
        let entry = self.steps.entry(key.clone()).or_default();
        entry.sent += 1;
        match verdict {
            Verdict::Ok => entry.as_expected += 1,
            Verdict::Refused(cause) => {
                entry.as_expected += 1;
                *self.refused.entry(cause).or_default() += 1;
            }
            Verdict::Unexpected(why) => {
                self.unexpected_answer(&key, &why);
                return false;
            }
        }
        true
    }

    /// Record a check of what a stream carried (a first event, an `elicitation/create`) as a
    /// step of its own; `true` if it held.
    pub(crate) fn check(&mut self, kind: Kind, step: &str, held: Result<(), String>) -> bool {
        let key = format!("{}/{step}", kind.name());
        let entry = self.steps.entry(key.clone()).or_default();
        entry.sent += 1;
        match held {
            Ok(()) => {
                entry.as_expected += 1;
                true
            }
            Err(why) => {
                self.unexpected_answer(&key, &why);
                false
            }
        }
    }

    fn unexpected_answer(&mut self, key: &str, why: &str) {
        self.unexpected += 1;
        let prefix = format!("{key}: ");
        if self.samples.iter().filter(|s| s.starts_with(&prefix)).count() < SAMPLES_PER_STEP {
            self.samples.push(format!("{prefix}{why}"));
        }
    }
}

/// Where the host listens.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) path: String,
}

/// Spaces requests out so all clients together send at most `rate` per second.
struct Pacer {
    interval: Option<Duration>,
    next: Cell<Instant>,
}

impl Pacer {
    async fn wait(&self) {
        let Some(gap) = self.interval else { return };
        let now = Instant::now();
        let slot = self.next.get().max(now);
        self.next.set(slot + gap);
        if slot > now {
            tokio::time::sleep_until(slot).await;
        }
    }
}

/// What the clients share.
pub(crate) struct Traffic {
    target: Target,
    /// The host's figures, for the kinds that must see what they held given back.
    host: StatsFeed,
    /// Turns at the request memory budget: a `large-payloads` client takes one permit (its
    /// largest request), `pinned-arguments` takes them all (it fills the budget up to the
    /// reserve the other kinds' small requests use).
    budget: Semaphore,
    budget_permits: u32,
    /// One turn at a time at the 2026-07-28 places (`modern-slot-hog`, and
    /// `pinned-arguments` in that era): each fills them, and gives them back before the next;
    /// `receipt-flood` (2026-07-28 calls too) takes a turn so that it never meets them full.
    modern_places: Semaphore,
    /// One `receipt-flood` at a time (each drives the receipt bounds on its own).
    flood_turn: Semaphore,
    /// No client starts an iteration after this (set per round).
    deadline: Cell<Instant>,
    pacer: Pacer,
    seed: u64,
    /// The kinds in the deck.
    kinds: Vec<Kind>,
    pub(crate) tally: RefCell<Tally>,
}

impl Traffic {
    pub(crate) fn new(
        target: Target,
        host: StatsFeed,
        rate: Option<f64>,
        seed: u64,
        kinds: Vec<Kind>,
    ) -> Traffic {
        let interval = rate.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(1.0 / r));
        let now = Instant::now();
        let (_, budget_permits) = payloads::large_at_once();
        Traffic {
            target,
            host,
            budget: Semaphore::new(budget_permits as usize),
            budget_permits,
            modern_places: Semaphore::new(1),
            flood_turn: Semaphore::new(1),
            deadline: Cell::new(now),
            pacer: Pacer { interval, next: Cell::new(now) },
            seed,
            kinds,
            tally: RefCell::new(Tally::default()),
        }
    }

    /// The end of this round's traffic.
    pub(crate) fn set_deadline(&self, at: Instant) {
        self.deadline.set(at);
    }
}

/// A session the client created.
struct Session {
    id: String,
    version: &'static str,
}

/// An answer read to its end.
struct Answer {
    head: ResponseHead,
    body: Vec<u8>,
}

/// The JSON-RPC messages of a body: the JSON object or array, or each SSE event's data.
fn messages(head: &ResponseHead, body: &[u8]) -> Vec<Value> {
    if head.sse {
        let mut d = Decoder::new();
        d.feed(body)
            .into_iter()
            .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
            .collect()
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Array(items)) => items,
            Ok(v) => vec![v],
            Err(_) => Vec::new(),
        }
    }
}

/// The message answering `id` (a response with that id), or else the first error body.
fn answer_to(msgs: &[Value], id: Option<&Value>) -> Option<Value> {
    let is_response = |m: &Value| m.get("result").is_some() || m.get("error").is_some();
    msgs.iter()
        .find(|m| is_response(m) && id.is_none_or(|id| m.get("id") == Some(id)))
        .or_else(|| msgs.iter().find(|m| m.get("error").is_some() && m.get("id").is_none()))
        .cloned()
}

/// An open SSE response.
struct Stream {
    conn: Conn,
    decoder: Decoder,
    chunked: bool,
}

impl Stream {
    /// Read the next piece of the body (unbounded: callers bound it); the JSON messages it
    /// completed, or `None` at the end of the stream.
    async fn next(&mut self) -> Result<Option<Vec<Value>>, String> {
        let read =
            if self.chunked { self.conn.read_chunk().await } else { self.conn.read_some().await };
        match read {
            Ok(Some(data)) => Ok(Some(
                self.decoder
                    .feed(&data)
                    .into_iter()
                    .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
                    .collect(),
            )),
            Ok(None) => Ok(None),
            Err(e) => Err(format!("stream read: {e}")),
        }
    }

    /// Read until `want` matches a message (returned), within [`EVENT_WAIT`].
    async fn until(&mut self, want: impl Fn(&Value) -> bool) -> Result<Value, String> {
        let work = async {
            for _ in 0..MAX_STREAM_CHUNKS {
                match self.next().await? {
                    Some(msgs) => {
                        if let Some(m) = msgs.into_iter().find(|m| want(m)) {
                            return Ok(m);
                        }
                    }
                    None => return Err("the stream ended before the expected message".to_owned()),
                }
            }
            Err("too many chunks without the expected message".to_owned())
        };
        timeout(EVENT_WAIT, work)
            .await
            .unwrap_or_else(|_| Err(format!("no expected message within {EVENT_WAIT:?}")))
    }

    /// Read until the first event (a priming event counts: it carries an id and no data);
    /// returns its messages (none for a priming event).
    async fn first_event(&mut self) -> Result<Vec<Value>, String> {
        let work = async {
            for _ in 0..MAX_STREAM_CHUNKS {
                match self.next().await? {
                    Some(msgs) if !msgs.is_empty() || self.decoder.last_event_id.is_some() => {
                        return Ok(msgs);
                    }
                    Some(_) => {}
                    None => return Err("the stream ended before its first event".to_owned()),
                }
            }
            Err("too many chunks without an event".to_owned())
        };
        timeout(EVENT_WAIT, work)
            .await
            .unwrap_or_else(|_| Err(format!("no event within {EVENT_WAIT:?}")))
    }

    /// Read to the end of the stream (within [`EVENT_WAIT`]); its messages.
    async fn read_to_end(&mut self) -> Result<Vec<Value>, String> {
        let work = async {
            let mut all = Vec::new();
            for _ in 0..MAX_STREAM_CHUNKS {
                match self.next().await? {
                    Some(msgs) => all.extend(msgs),
                    None => return Ok(all),
                }
            }
            Err("too many chunks before the end".to_owned())
        };
        timeout(EVENT_WAIT, work)
            .await
            .unwrap_or_else(|_| Err(format!("the stream did not end within {EVENT_WAIT:?}")))
    }
}

/// What opening a stream gave: the stream, or an answer that is no stream.
enum Opened {
    Stream(Stream),
    Answer(Answer),
}

/// One virtual client.
struct Client {
    t: Rc<Traffic>,
    n: usize,
    /// The keep-alive connection for request/response exchanges.
    conn: Option<Conn>,
    rng: u64,
    ids: u64,
}

impl Client {
    fn rand(&mut self) -> u64 {
        crate::proxy::next_random(&mut self.rng)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.rand() % from.len() as u64) as usize]
    }

    fn next_id(&mut self) -> Value {
        self.ids += 1;
        json!(self.ids)
    }

    fn record(
        &self,
        kind: Kind,
        step: &str,
        expect: Expect,
        outcome: Result<(u16, Option<Value>), String>,
    ) -> bool {
        self.t.tally.borrow_mut().record(kind, step, expect, outcome)
    }

    fn check(&self, kind: Kind, step: &str, held: Result<(), String>) -> bool {
        self.t.tally.borrow_mut().check(kind, step, held)
    }

    fn head(
        &self,
        method: &str,
        s: Option<&Session>,
        accept: &str,
        extra: &[(&str, &str)],
    ) -> String {
        let t = &self.t.target;
        let mut h =
            format!("{method} {} HTTP/1.1\r\nHost: {}\r\nAccept: {accept}\r\n", t.path, t.addr);
        if let Some(s) = s {
            h.push_str(&format!(
                "Mcp-Session-Id: {}\r\nMCP-Protocol-Version: {}\r\n",
                s.id, s.version
            ));
        }
        for (k, v) in extra {
            h.push_str(&format!("{k}: {v}\r\n"));
        }
        h
    }

    fn post(&self, s: Option<&Session>, accept: &str, body: &[u8]) -> Vec<u8> {
        let mut out =
            self.head("POST", s, accept, &[("Content-Type", "application/json")]).into_bytes();
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(body);
        out
    }

    fn post_chunked(&self, s: &Session, body: &[u8]) -> Vec<u8> {
        let mut out = self
            .head(
                "POST",
                Some(s),
                ACCEPT_BOTH,
                &[("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")],
            )
            .into_bytes();
        out.extend_from_slice(b"\r\n");
        for piece in body.chunks(64 << 10) {
            out.extend_from_slice(&chunk(piece));
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    fn bodiless(&self, method: &str, s: &Session, accept: &str, extra: &[(&str, &str)]) -> Vec<u8> {
        let mut h = self.head(method, Some(s), accept, extra);
        h.push_str("\r\n");
        h.into_bytes()
    }

    async fn connect(&self) -> Result<Conn, String> {
        let s = timeout(REQUEST_TIMEOUT, TcpStream::connect(self.t.target.addr))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| format!("connect: {e}"))?;
        Ok(Conn::new(s))
    }

    /// A new connection, from loopback address `from` when given (another caller to a host
    /// without authentication).
    async fn connect_from(&self, from: Option<Ipv4Addr>) -> Result<Conn, String> {
        let Some(ip) = from else { return self.connect().await };
        let sock = tokio::net::TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
        sock.bind(SocketAddr::new(ip.into(), 0)).map_err(|e| format!("bind {ip}: {e}"))?;
        let s = timeout(REQUEST_TIMEOUT, sock.connect(self.t.target.addr))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| format!("connect from {ip}: {e}"))?;
        Ok(Conn::new(s))
    }

    /// Send a request and read its whole answer, on the keep-alive connection (re-opened
    /// once if the server had closed it while idle).
    async fn send(&mut self, request: &[u8]) -> Result<Answer, String> {
        self.t.pacer.wait().await;
        self.t.tally.borrow_mut().requests += 1;
        timeout(REQUEST_TIMEOUT, self.exchange(request)).await.unwrap_or_else(|_| {
            self.conn = None;
            Err(format!("no answer within {REQUEST_TIMEOUT:?}"))
        })
    }

    async fn exchange(&mut self, request: &[u8]) -> Result<Answer, String> {
        for attempt in 0..2 {
            let reused = self.conn.is_some();
            let mut conn = match self.conn.take() {
                Some(c) => c,
                None => self.connect().await?,
            };
            // A reused connection the server closed while it was idle fails before any byte
            // of an answer, and nothing was processed: once, try again on a new one.
            let retry = reused && attempt == 0;
            let (head, complete) = match conn.send_watching(request).await {
                Ok(sent) => sent,
                Err(_) if retry => continue,
                Err(e) => return Err(format!("send: {e}")),
            };
            let Some(head) = head else {
                if retry {
                    continue;
                }
                return Err("the connection closed without an answer".into());
            };
            let head = parse_response_head(&head).ok_or("unparsable response head")?;
            let (body, framed) = read_body(&mut conn, &head).await?;
            if complete && framed && !head.close {
                self.conn = Some(conn);
            }
            return Ok(Answer { head, body });
        }
        Err("the connection closed without an answer".into())
    }

    /// Open a stream on a connection of its own. An answer that is not a 200 SSE stream is
    /// read to its end instead.
    async fn open(&self, request: &[u8]) -> Result<Opened, String> {
        self.open_from(None, request).await
    }

    /// [`Client::open`] on a connection from `from`.
    async fn open_from(&self, from: Option<Ipv4Addr>, request: &[u8]) -> Result<Opened, String> {
        self.t.pacer.wait().await;
        self.t.tally.borrow_mut().requests += 1;
        let work = async {
            let mut conn = self.connect_from(from).await?;
            let (head, _) = conn.send_watching(request).await.map_err(|e| format!("send: {e}"))?;
            let head = parse_response_head(&head.ok_or("the connection closed without an answer")?)
                .ok_or("unparsable response head")?;
            if head.status == 200 && head.sse {
                return Ok(Opened::Stream(Stream {
                    conn,
                    decoder: Decoder::new(),
                    chunked: head.chunked,
                }));
            }
            let (body, _) = read_body(&mut conn, &head).await?;
            Ok(Opened::Answer(Answer { head, body }))
        };
        timeout(REQUEST_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {REQUEST_TIMEOUT:?}")))
    }

    /// A request/response exchange, recorded; the answer if it was as expected.
    async fn call(
        &mut self,
        kind: Kind,
        step: &str,
        request: &[u8],
        id: Option<&Value>,
        expect: Expect,
    ) -> Option<Answer> {
        self.call_checked(kind, step, request, id, expect, |_, _| Ok(())).await
    }

    /// [`Client::call`], where an answer as expected must also pass `check`.
    async fn call_checked(
        &mut self,
        kind: Kind,
        step: &str,
        request: &[u8],
        id: Option<&Value>,
        expect: Expect,
        check: impl FnOnce(&Answer, Option<&Value>) -> Result<(), String>,
    ) -> Option<Answer> {
        let answer = self.send(request).await;
        let outcome = match &answer {
            Ok(a) => {
                let msg = answer_to(&messages(&a.head, &a.body), id);
                let fits = !matches!(
                    classify(expect, a.head.status, msg.as_ref()),
                    Verdict::Unexpected(_)
                );
                match (fits, fits.then(|| check(a, msg.as_ref()))) {
                    (true, Some(Err(why))) => Err(why),
                    _ => Ok((a.head.status, msg)),
                }
            }
            Err(e) => Err(e.clone()),
        };
        if self.record(kind, step, expect, outcome) { answer.ok() } else { None }
    }

    /// A request answered on a connection of its own from `from` (read to its end, a
    /// stream included), recorded; whether it was as expected.
    async fn call_from(
        &mut self,
        kind: Kind,
        step: &str,
        from: Option<Ipv4Addr>,
        request: &[u8],
        id: Option<&Value>,
        expect: Expect,
    ) -> Option<()> {
        let outcome = match self.open_from(from, request).await {
            Ok(Opened::Answer(a)) => {
                Ok((a.head.status, answer_to(&messages(&a.head, &a.body), id)))
            }
            Ok(Opened::Stream(mut st)) => {
                st.read_to_end().await.map(|msgs| (200, answer_to(&msgs, id)))
            }
            Err(e) => Err(e),
        };
        self.record(kind, step, expect, outcome).then_some(())
    }

    /// A 2026-07-28 POST of `body` (its headers mirror `method` and the tool `name`).
    fn modern_post(&self, method: &str, name: Option<&str>, body: &[u8]) -> Vec<u8> {
        let mut extra = vec![
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", payloads::MODERN_VERSION),
            ("Mcp-Method", method),
        ];
        extra.extend(name.map(|n| ("Mcp-Name", n)));
        let mut out = self.head("POST", None, ACCEPT_BOTH, &extra).into_bytes();
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(body);
        out
    }

    /// A 2026-07-28 call of `soak_flood` that holds its place until it is cancelled.
    fn slow_modern_call(&mut self) -> (Value, Vec<u8>) {
        let id = self.next_id();
        let body = payloads::modern_request(
            &id,
            "tools/call",
            json!({"name": "soak_flood", "arguments": payloads::holding_args()}),
        );
        let req = self.modern_post("tools/call", Some("soak_flood"), &body);
        (id, req)
    }

    /// Wait for `n` permits of `sem` (a turn at what a kind fills), at most until the
    /// traffic deadline plus [`TURN_GRACE`]; `None` if the turn never came (the iteration is
    /// given up, uncompleted).
    async fn turn<'s>(&self, sem: &'s Semaphore, n: u32) -> Option<SemaphorePermit<'s>> {
        tokio::time::timeout_at(self.t.deadline.get() + TURN_GRACE, sem.acquire_many(n))
            .await
            .ok()?
            .ok()
    }

    /// Wait (at most [`HOST_SETTLE_WAIT`]) for a stats line of the host sampled after this
    /// call whose figures pass `ok`: what a kind held is given back.
    async fn host_settled(&self, what: &str, ok: impl Fn(&Value) -> bool) -> Result<(), String> {
        let from = self.t.host.latest().map_or(0, |l| l.seq);
        let until = Instant::now() + HOST_SETTLE_WAIT;
        loop {
            let latest = self.t.host.latest();
            // The line after the next one was sampled after now, whatever the pipe's delay.
            if let Some(l) = latest.as_ref().filter(|l| l.seq >= from + 2)
                && ok(&l.value)
            {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!(
                    "the host's {what} was not back within {HOST_SETTLE_WAIT:?}: {}",
                    latest.map_or(Value::Null, |l| l.value[what].clone())
                ));
            }
            tokio::time::sleep(HOST_LOOK_EVERY).await;
        }
    }

    /// Open a stream, recorded as `Status(200)` (an SSE 200); the stream if it opened.
    async fn open_stream(&mut self, kind: Kind, step: &str, request: &[u8]) -> Option<Stream> {
        self.open_stream_from(kind, step, None, request).await
    }

    /// [`Client::open_stream`] on a connection from `from`.
    async fn open_stream_from(
        &mut self,
        kind: Kind,
        step: &str,
        from: Option<Ipv4Addr>,
        request: &[u8],
    ) -> Option<Stream> {
        match self.open_from(from, request).await {
            Ok(Opened::Stream(s)) => {
                self.record(kind, step, Expect::Status(200), Ok((200, None)));
                Some(s)
            }
            Ok(Opened::Answer(a)) => {
                let msg = answer_to(&messages(&a.head, &a.body), None);
                let outcome = if a.head.status == 200 {
                    Err(format!("200 without an SSE stream: {msg:?}"))
                } else {
                    Ok((a.head.status, msg))
                };
                self.record(kind, step, Expect::Status(200), outcome);
                None
            }
            Err(e) => {
                self.record(kind, step, Expect::Status(200), Err(e));
                None
            }
        }
    }

    /// initialize, then notifications/initialized; the session.
    async fn session(
        &mut self,
        kind: Kind,
        version: &'static str,
        capabilities: Value,
    ) -> Option<Session> {
        let id = self.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "mcp-load-soak", "version": "1"}}});
        let accept = self.pick(&[ACCEPT_BOTH, ACCEPT_JSON]);
        let a = self
            .call_checked(
                kind,
                "initialize",
                &self.post(None, accept, body.to_string().as_bytes()),
                Some(&id),
                Expect::Result,
                has_session,
            )
            .await?;
        let s = Session { id: a.head.session_id?, version };
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        self.call(
            kind,
            "initialized",
            &self.post(Some(&s), ACCEPT_BOTH, note),
            None,
            Expect::Status(202),
        )
        .await?;
        Some(s)
    }

    /// An `echo` whose answer must carry `text`.
    async fn echo(
        &mut self,
        kind: Kind,
        step: &str,
        s: &Session,
        id: &Value,
        text: &str,
    ) -> Option<()> {
        let accept = self.pick(&[ACCEPT_BOTH, ACCEPT_JSON]);
        let echoed = |_: &Answer, m: Option<&Value>| {
            let got = m.and_then(|m| m["result"]["content"][0]["text"].as_str());
            if got == Some(text) {
                Ok(())
            } else {
                Err(format!(
                    "echo of {} bytes answered with {:?} bytes",
                    text.len(),
                    got.map(str::len)
                ))
            }
        };
        self.call_checked(
            kind,
            step,
            &self.post(Some(s), accept, &payloads::echo(id, text)),
            Some(id),
            Expect::Result,
            echoed,
        )
        .await
        .map(|_| ())
    }

    async fn churn(&mut self) -> Option<()> {
        let k = Kind::Churn;
        let version = self.pick(&VERSIONS);
        let s = self.session(k, version, json!({})).await?;
        for i in 0..1 + self.rand() % 3 {
            let id = self.next_id();
            self.echo(k, "echo", &s, &id, &format!("churn {} {i}", self.n)).await?;
        }
        if self.rand().is_multiple_of(2) {
            self.call(
                k,
                "delete",
                &self.bodiless("DELETE", &s, ACCEPT_BOTH, &[]),
                None,
                Expect::Status(204),
            )
            .await?;
        }
        Some(())
    }

    async fn abandoned(&mut self) -> Option<()> {
        let k = Kind::Abandoned;
        let version = self.pick(&VERSIONS[1..]);
        let s = self.session(k, version, json!({})).await?;
        let id = self.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "soak_flood", "arguments": {"count": 4, "bytes": 256, "delay_ms": 500}}});
        let mut stream = self
            .open_stream(k, "flood", &self.post(Some(&s), ACCEPT_BOTH, body.to_string().as_bytes()))
            .await?;
        let first = stream.first_event().await.map(|_| ());
        // Dropped here (after the check): no resume, ever.
        self.check(k, "first-event", first).then_some(())
    }

    async fn replaced_get(&mut self) -> Option<()> {
        let k = Kind::ReplacedGet;
        let version = self.pick(&VERSIONS);
        let s = self.session(k, version, json!({})).await?;
        let get = self.bodiless("GET", &s, ACCEPT_SSE, &[]);
        let mut first = self.open_stream(k, "get", &get).await?;
        if version == "2025-11-25" {
            let primed = first.first_event().await.and_then(|m| {
                if m.is_empty() { Ok(()) } else { Err(format!("the first event carried {m:?}")) }
            });
            if !self.check(k, "priming-event", primed) {
                return None;
            }
        }
        let _second = self.open_stream(k, "get-again", &get).await?;
        let ended = first.read_to_end().await.is_ok();
        let mut t = self.t.tally.borrow_mut();
        if ended {
            t.replaced_get_ended += 1
        } else {
            t.replaced_get_still_open += 1
        }
        // Both dropped here.
        Some(())
    }

    async fn elicitation(&mut self) -> Option<()> {
        let k = Kind::Elicitation;
        let version = self.pick(&ELICITATION_VERSIONS);
        let s = self.session(k, version, json!({"elicitation": {}})).await?;
        let id = self.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "test_elicitation", "arguments": {"message": "soak: nobody will answer"}}});
        let mut stream = self
            .open_stream(k, "call", &self.post(Some(&s), ACCEPT_BOTH, body.to_string().as_bytes()))
            .await?;
        let asked = stream.until(|m| m["method"] == "elicitation/create").await.map(|_| ());
        // Dropped unanswered here.
        self.check(k, "elicitation-create", asked).then_some(())
    }

    async fn large(&mut self) -> Option<()> {
        let k = Kind::Large;
        // Its request at the value limit takes a share of the request memory budget: one turn
        // of the few that fit (none while pinned-arguments fills it).
        let t = Rc::clone(&self.t);
        let _budget = self.turn(&t.budget, 1).await?;
        let handshake = |limit| Expect::Limit { cause: "limit.handshake", limit };
        let json_limit = |limit| Expect::Limit { cause: "limit.json", limit };
        let length = |limit| Expect::Limit { cause: "limit.length", limit };
        // Handshakes: at every limit (a session, abandoned), then one past each.
        for (step, over, expect) in [
            ("handshake-at-limits", Over::Nothing, Expect::Result),
            ("handshake-over-values", Over::Values, handshake("initialize capabilities")),
            ("handshake-over-depth", Over::Depth, handshake("initialize capabilities")),
            ("handshake-over-strings", Over::Strings, handshake("initialize capabilities")),
        ] {
            let id = self.next_id();
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": payloads::handshake_capabilities(over), "clientInfo": {"name": "mcp-load-soak", "version": "1"}}});
            let check = |a: &Answer, m: Option<&Value>| {
                if expect == Expect::Result { has_session(a, m) } else { Ok(()) }
            };
            self.call_checked(
                k,
                step,
                &self.post(None, ACCEPT_JSON, body.to_string().as_bytes()),
                Some(&id),
                expect,
                check,
            )
            .await?;
        }
        let s = self.session(k, "2025-11-25", json!({})).await?;
        let id = self.next_id();
        self.echo(k, "echo-3.5MiB", &s, &id, &payloads::filler(payloads::BIG_TEXT_BYTES)).await?;
        let id = self.next_id().as_u64().unwrap_or_default();
        self.call(
            k,
            "values-at-limit",
            &self.post(Some(&s), ACCEPT_JSON, &payloads::ping_with_values_at_limit(id)),
            Some(&json!(id)),
            Expect::Result,
        )
        .await?;
        self.call(
            k,
            "values-over",
            &self.post(Some(&s), ACCEPT_JSON, &payloads::values_over()),
            None,
            json_limit("limits.json_max_values"),
        )
        .await?;
        let id = self.next_id().as_u64().unwrap_or_default();
        self.call(
            k,
            "depth-at-limit",
            &self.post(
                Some(&s),
                ACCEPT_JSON,
                &payloads::ping_with_depth(id, payloads::JSON_MAX_DEPTH),
            ),
            Some(&json!(id)),
            Expect::Result,
        )
        .await?;
        let id = self.next_id().as_u64().unwrap_or_default();
        self.call(
            k,
            "depth-over",
            &self.post(
                Some(&s),
                ACCEPT_JSON,
                &payloads::ping_with_depth(id, payloads::JSON_MAX_DEPTH + 1),
            ),
            None,
            json_limit("limits.json_max_depth"),
        )
        .await?;
        // Lengths: a string id at its limit is served; one byte more, and each other length, refused.
        let at = json!(format!(
            "{}{}",
            self.n,
            "i".repeat(payloads::ID_MAX_BYTES - self.n.to_string().len())
        ));
        self.echo(k, "id-at-limit", &s, &at, "id").await?;
        let over = json!("i".repeat(payloads::ID_MAX_BYTES + 1));
        self.call(
            k,
            "id-over",
            &self.post(Some(&s), ACCEPT_JSON, &payloads::echo(&over, "id")),
            None,
            length("limits.id_max_bytes"),
        )
        .await?;
        let id = self.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "m".repeat(payloads::METHOD_MAX_BYTES + 1)});
        self.call(
            k,
            "method-over",
            &self.post(Some(&s), ACCEPT_JSON, body.to_string().as_bytes()),
            None,
            length("limits.method_max_bytes"),
        )
        .await?;
        let id = self.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "n".repeat(payloads::NAME_MAX_BYTES + 1), "arguments": {}}});
        self.call(
            k,
            "tool-name-over",
            &self.post(Some(&s), ACCEPT_JSON, body.to_string().as_bytes()),
            None,
            length("limits.name_max_bytes"),
        )
        .await?;
        for (step, len, expect) in [
            ("uri-at-limit", payloads::URI_MAX_BYTES, Expect::RpcError(-32002)),
            ("uri-over", payloads::URI_MAX_BYTES + 1, length("limits.uri_max_bytes")),
        ] {
            let id = self.next_id();
            let uri = format!("soak://{}", "u".repeat(len - "soak://".len()));
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": uri}});
            self.call(
                k,
                step,
                &self.post(Some(&s), ACCEPT_JSON, body.to_string().as_bytes()),
                Some(&id),
                expect,
            )
            .await?;
        }
        // Bodies over `security.max_body_bytes`, declared and chunked.
        let over = payloads::echo(&json!(0), &payloads::filler(payloads::MAX_BODY_BYTES));
        self.call(
            k,
            "body-over-declared",
            &self.post(Some(&s), ACCEPT_JSON, &over),
            None,
            Expect::TooLarge,
        )
        .await?;
        self.call(k, "body-over-chunked", &self.post_chunked(&s, &over), None, Expect::TooLarge)
            .await?;
        Some(())
    }

    async fn gap(&mut self) -> Option<()> {
        let k = Kind::Gap;
        let s = self.session(k, "2025-11-25", json!({})).await?;
        let id = self.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "soak_flood", "arguments": {"count": GAP_FLOOD, "bytes": 64, "delay_ms": 300, "hold_ms": 5000}}});
        let mut stream = self
            .open_stream(k, "flood", &self.post(Some(&s), ACCEPT_BOTH, body.to_string().as_bytes()))
            .await?;
        let first = stream.first_event().await;
        let cursor = match (first, stream.decoder.last_event_id.clone()) {
            (Ok(msgs), Some(c)) if msgs.is_empty() => Ok(c),
            (outcome, _) => Err(format!("the first event is no priming event: {outcome:?}")),
        };
        let cursor = match cursor {
            Ok(c) => {
                self.check(k, "priming-event", Ok(()));
                c
            }
            Err(e) => {
                self.check(k, "priming-event", Err(e));
                return None;
            }
        };
        // Read the whole flood (the host appended each message to the window before it sent
        // it), so the resume below finds the events after the cursor evicted, whatever the
        // load; the tool then holds (5 s), so the stream is still live.
        let flooded = stream
            .until(|m| {
                m["method"] == "notifications/message" && m["params"]["data"]["i"] == GAP_FLOOD - 1
            })
            .await
            .map(|_| ());
        drop(stream);
        if !self.check(k, "flood-read", flooded) {
            return None;
        }
        let resume = self.bodiless("GET", &s, ACCEPT_SSE, &[("Last-Event-ID", &cursor)]);
        let outcome = match self.open(&resume).await {
            Ok(Opened::Stream(mut st)) => match st.read_to_end().await {
                Ok(msgs) => Ok((200, answer_to(&msgs, Some(&id)))),
                Err(e) => Err(e),
            },
            Ok(Opened::Answer(a)) => {
                Ok((a.head.status, answer_to(&messages(&a.head, &a.body), Some(&id))))
            }
            Err(e) => Err(e),
        };
        if !self.record(k, "resume", Expect::RpcError(-32005), outcome) {
            return None;
        }
        // The tool is still holding (hold_ms): the gap ended its request, so its id is free
        // at once (no 409).
        self.echo(k, "reuse-id", &s, &id, "same id").await?;
        Some(())
    }

    async fn slow_body(&mut self) -> Option<()> {
        let k = Kind::SlowBody;
        let s = self.session(k, "2025-11-25", json!({})).await?;
        let id = self.next_id();
        let body = payloads::echo(&id, "never finished");
        let full = self.post(Some(&s), ACCEPT_JSON, &body);
        // Everything but the last 10 bytes of the body, then nothing.
        let half = &full[..full.len() - 10];
        self.t.pacer.wait().await;
        self.t.tally.borrow_mut().requests += 1;
        let work = async {
            let mut conn = self.connect().await?;
            let (head, _) = conn.send_watching(half).await.map_err(|e| format!("send: {e}"))?;
            let head = match head {
                Some(h) => h,
                None => conn
                    .read_head()
                    .await
                    .map_err(|e| format!("head: {e}"))?
                    .ok_or("closed without an answer")?,
            };
            let head = parse_response_head(&head).ok_or("unparsable response head")?;
            let (body, _) = read_body(&mut conn, &head).await?;
            Ok::<_, String>((head.status, answer_to(&messages(&head, &body), None)))
        };
        let outcome = timeout(REQUEST_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {REQUEST_TIMEOUT:?}")));
        self.record(k, "half-body", Expect::BodyTimeout, outcome).then_some(())
    }

    async fn stalled(&mut self) -> Option<()> {
        let k = Kind::Stalled;
        let s = self.session(k, "2025-11-25", json!({})).await?;
        let id = self.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "soak_flood", "arguments": {"count": 200, "bytes": 65536}}});
        let request = self.post(Some(&s), ACCEPT_BOTH, body.to_string().as_bytes());
        self.t.pacer.wait().await;
        self.t.tally.borrow_mut().requests += 1;
        let cut = async {
            // A small receive buffer, never read: the host's send side fills at once.
            let sock = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
            sock.set_recv_buffer_size(4096).map_err(|e| e.to_string())?;
            let mut conn = timeout(REQUEST_TIMEOUT, sock.connect(self.t.target.addr))
                .await
                .map_err(|_| "connect timed out".to_owned())?
                .map_err(|e| e.to_string())?;
            tokio::io::AsyncWriteExt::write_all(&mut conn, &request)
                .await
                .map_err(|e| e.to_string())?;
            // The host must end the connection while nobody reads it: a reset (or an end)
            // shows up once we look. A connection still alive goes on serving the flood.
            tokio::time::sleep(STALL_CUT_WITHIN).await;
            let mut buf = vec![0u8; 64 << 10];
            let mut read = 0usize;
            loop {
                match timeout(
                    Duration::from_secs(2),
                    tokio::io::AsyncReadExt::read(&mut conn, &mut buf),
                )
                .await
                {
                    Err(_) => {
                        return Err(format!(
                            "the connection is still open, {read} bytes read after the stall"
                        ));
                    }
                    Ok(Err(_)) => return Ok(()),
                    Ok(Ok(0)) => return Ok(()),
                    Ok(Ok(n)) => read += n,
                }
                if read > 32 << 20 {
                    return Err(
                        "the whole flood arrived: the stalled connection was never cut".into()
                    );
                }
            }
        };
        let cut: Result<(), String> = cut.await;
        self.check(k, "cut-by-the-host", cut).then_some(())
    }

    async fn modern_slot_hog(&mut self) -> Option<()> {
        let k = Kind::ModernSlotHog;
        let t = Rc::clone(&self.t);
        let _turn = self.turn(&t.modern_places, 1).await?;
        let mut held = Vec::new();
        let callers = payloads::MODERN_MAX_IN_FLIGHT / payloads::MODERN_PER_CALLER;
        for (c, ip) in HOG_CALLERS[..callers].iter().enumerate() {
            for i in 0..payloads::MODERN_PER_CALLER {
                // The second caller's first call: in, although the first is at its share.
                let step = if c == 1 && i == 0 { "another-caller-gets-in" } else { "hold" };
                let (_, req) = self.slow_modern_call();
                held.push(self.open_stream_from(k, step, Some(*ip), &req).await?);
            }
            if c == 0 {
                let (id, req) = self.slow_modern_call();
                self.call_from(k, "past-the-share", Some(*ip), &req, Some(&id), PAST_THE_SHARE)
                    .await?;
            }
        }
        // Every place taken: one more call is refused; discover and the lists need none.
        let last = Some(HOG_CALLERS[callers]);
        let (id, req) = self.slow_modern_call();
        self.call_from(k, "past-the-bound", last, &req, Some(&id), PAST_THE_BOUND).await?;
        for (step, method) in
            [("discover-when-full", "server/discover"), ("tools-list-when-full", "tools/list")]
        {
            let id = self.next_id();
            let req =
                self.modern_post(method, None, &payloads::modern_request(&id, method, json!({})));
            self.call_from(k, step, last, &req, Some(&id), Expect::Result).await?;
        }
        // Closing the streams cancels the calls; the next turn finds every place free.
        drop(held);
        let back = self
            .host_settled("modern_in_flight", |s| s["modern_in_flight"].as_i64() == Some(0))
            .await;
        self.check(k, "places-given-back", back).then_some(())
    }

    async fn pinned_arguments(&mut self) -> Option<()> {
        let k = Kind::PinnedArguments;
        let modern = self.rand().is_multiple_of(2);
        let t = Rc::clone(&self.t);
        // The whole budget's turn: no large-payloads request beside these.
        let _budget = self.turn(&t.budget, t.budget_permits).await?;
        let _places = if modern { Some(self.turn(&t.modern_places, 1).await?) } else { None };
        let session =
            if modern { None } else { Some(self.session(k, "2025-11-25", json!({})).await?) };
        let from = modern.then_some(PINNED_CALLER);
        let pinned = |c: &mut Client| {
            let id = c.next_id();
            let body = payloads::pinned_call(&id, modern);
            let req = if modern {
                c.modern_post("tools/call", Some("soak_flood"), &body)
            } else {
                c.post(session.as_ref(), ACCEPT_BOTH, &body)
            };
            (id, req)
        };
        let mut held = Vec::new();
        for _ in 0..payloads::PINNED_FIT {
            let (_, req) = pinned(self);
            held.push(self.open_stream_from(k, "hold", from, &req).await?);
        }
        // A legacy refusal comes before its session sees the request: it echoes no id.
        let (id, req) = pinned(self);
        self.call_from(k, "past-the-budget", from, &req, modern.then_some(&id), PAST_THE_BUDGET)
            .await?;
        // Ended: a session's requests with the session, 2026-07-28 calls by closing their
        // streams.
        if let Some(s) = &session {
            self.call(
                k,
                "delete",
                &self.bodiless("DELETE", s, ACCEPT_BOTH, &[]),
                None,
                Expect::Status(204),
            )
            .await?;
        }
        drop(held);
        let pinned_gone = |s: &Value| {
            s["request_memory_bytes"].as_u64().is_some_and(|b| b < payloads::PINNED_CHARGE as u64)
                && (!modern || s["modern_in_flight"].as_i64() == Some(0))
        };
        let back = self.host_settled("request_memory_bytes", pinned_gone).await;
        self.check(k, "budget-given-back", back).then_some(())
    }

    /// Keyed `ledger_append` calls from `from`, each with a new key, until one is refused (at
    /// most `max`): how many got their result, and the refusal's cause if one came.
    async fn flood(
        &mut self,
        k: Kind,
        step: &str,
        from: Ipv4Addr,
        max: u64,
    ) -> Option<(u64, Option<&'static str>)> {
        let mut ok = 0;
        for _ in 0..max {
            let id = self.next_id();
            let key = format!("flood-{}-{}-{id}", self.t.seed, self.n);
            let req = self.modern_post(
                "tools/call",
                Some("ledger_append"),
                &payloads::keyed_append(&id, &key),
            );
            let outcome = match self.open_from(Some(from), &req).await {
                Ok(Opened::Answer(a)) => {
                    Ok((a.head.status, answer_to(&messages(&a.head, &a.body), Some(&id))))
                }
                Ok(Opened::Stream(mut st)) => {
                    st.read_to_end().await.map(|msgs| (200, answer_to(&msgs, Some(&id))))
                }
                Err(e) => Err(e),
            };
            let verdict = outcome
                .as_ref()
                .ok()
                .map(|(status, msg)| classify(FLOOD_CALL, *status, msg.as_ref()));
            if !self.record(k, step, FLOOD_CALL, outcome) {
                return None;
            }
            match verdict {
                Some(Verdict::Refused(cause)) => return Some((ok, Some(cause))),
                _ => ok += 1,
            }
        }
        Some((ok, None))
    }

    async fn receipt_flood(&mut self) -> Option<()> {
        let k = Kind::ReceiptFlood;
        let t = Rc::clone(&self.t);
        let _turn = self.turn(&t.flood_turn, 1).await?;
        // Its calls are 2026-07-28 requests: not while `modern-slot-hog` holds every place.
        let _places = self.turn(&t.modern_places, 1).await?;
        let bounded = |(ok, refused): (u64, Option<&'static str>)| match refused {
            Some(_) => Ok(()),
            None => Err(format!("{ok} keyed calls with new keys, none refused")),
        };
        // One caller until its own bound (or the total, when the other's receipts still fill
        // it) refuses it; a second until its own or the total does.
        let first =
            self.flood(k, "first-caller", FLOOD_CALLERS[0], payloads::FLOOD_PER_CALLER + 1).await?;
        self.check(k, "first-caller-bounded", bounded(first)).then_some(())?;
        let second = self
            .flood(k, "second-caller", FLOOD_CALLERS[1], payloads::FLOOD_PER_CALLER + 1)
            .await?;
        self.check(k, "second-caller-bounded", bounded(second)).then_some(())?;
        // What the host keeps in receipts never passes the total by more than one receipt.
        let bound = payloads::FLOOD_TOTAL_BYTES + payloads::FLOOD_SLACK_BYTES;
        let kept = self.t.host.latest().and_then(|l| l.value["kept"]["receipts"]["bytes"].as_u64());
        let within = match kept {
            Some(b) if b <= bound => Ok(()),
            Some(b) => Err(format!("the host keeps {b} bytes of receipts, over {bound}")),
            None => Err("no stats line with the kept receipts".into()),
        };
        self.check(k, "kept-within-total", within).then_some(())
    }

    async fn iteration(&mut self, kind: Kind) -> Option<()> {
        match kind {
            Kind::Churn => self.churn().await,
            Kind::Abandoned => self.abandoned().await,
            Kind::ReplacedGet => self.replaced_get().await,
            Kind::Elicitation => self.elicitation().await,
            Kind::Large => self.large().await,
            Kind::Gap => self.gap().await,
            Kind::SlowBody => self.slow_body().await,
            Kind::Stalled => self.stalled().await,
            Kind::ModernSlotHog => self.modern_slot_hog().await,
            Kind::PinnedArguments => self.pinned_arguments().await,
            Kind::ReceiptFlood => self.receipt_flood().await,
        }
    }
}

fn has_session(a: &Answer, _: Option<&Value>) -> Result<(), String> {
    if a.head.session_id.is_some() {
        Ok(())
    } else {
        Err("initialize answered without an Mcp-Session-Id".into())
    }
}

/// The deliberate probes, by `kind/step`, and their documented answers (docs/errors.md's
/// table and "Unresumable cursors").
pub(crate) const PROBES: [(Kind, &str, &str); 32] = [
    (
        Kind::Large,
        "handshake-at-limits",
        "200 and a session (capabilities at 1024 values, depth 16, 64 KiB of strings)",
    ),
    (Kind::Large, "handshake-over-values", "400 -32600 limit.handshake"),
    (Kind::Large, "handshake-over-depth", "400 -32600 limit.handshake"),
    (Kind::Large, "handshake-over-strings", "400 -32600 limit.handshake"),
    (Kind::Large, "echo-3.5MiB", "200, the 3.5 MiB text echoed"),
    (Kind::Large, "values-at-limit", "200 result (262,144 values)"),
    (Kind::Large, "values-over", "400 -32600 limits.json_max_values"),
    (Kind::Large, "depth-at-limit", "200 result (depth 64)"),
    (Kind::Large, "depth-over", "400 -32600 limits.json_max_depth"),
    (Kind::Large, "id-at-limit", "200 result (256-byte string id)"),
    (Kind::Large, "id-over", "400 -32600 limits.id_max_bytes"),
    (Kind::Large, "method-over", "400 -32600 limits.method_max_bytes"),
    (Kind::Large, "tool-name-over", "400 -32600 limits.name_max_bytes"),
    (Kind::Large, "uri-at-limit", "200 with -32002 (8 KiB URI, no such resource)"),
    (Kind::Large, "uri-over", "400 -32600 limits.uri_max_bytes"),
    (Kind::Large, "body-over-declared", "413 (Content-Length over 4 MiB)"),
    (Kind::Large, "body-over-chunked", "413 (chunked body over 4 MiB)"),
    (Kind::Gap, "resume", "200 SSE carrying -32005 for the request id, then the stream ends"),
    (Kind::Gap, "reuse-id", "200 result for the same id at once (no 409)"),
    (Kind::SlowBody, "half-body", "408 -32000 once security.body_read_timeout_ms passes"),
    (
        Kind::Stalled,
        "cut-by-the-host",
        "the host ends a connection nobody reads (server.tcp_user_timeout_secs)",
    ),
    (
        Kind::ModernSlotHog,
        "past-the-share",
        "429 -32007 quota.modern_in_flight past the caller's modern.max_in_flight_per_caller",
    ),
    (
        Kind::ModernSlotHog,
        "another-caller-gets-in",
        "200: another caller's call gets in while the first is at its share",
    ),
    (
        Kind::ModernSlotHog,
        "past-the-bound",
        "503 -32006 overloaded.modern_in_flight once every modern.max_in_flight place is taken",
    ),
    (
        Kind::ModernSlotHog,
        "discover-when-full",
        "200 server/discover result with every place taken",
    ),
    (Kind::ModernSlotHog, "tools-list-when-full", "200 tools/list result with every place taken"),
    (
        Kind::ModernSlotHog,
        "places-given-back",
        "the host's modern_in_flight back to 0 once the calls are closed",
    ),
    (
        Kind::PinnedArguments,
        "past-the-budget",
        "503 -32006 overloaded.request_memory once the pinned calls fill limits.request_memory_bytes",
    ),
    (
        Kind::PinnedArguments,
        "budget-given-back",
        "the host's request_memory_bytes back under one pinned call once they end",
    ),
    (
        Kind::ReceiptFlood,
        "first-caller-bounded",
        "a caller's keyed calls with new keys are refused (429 quota.receipts, or 503 overloaded.receipts) within ledger.receipts_per_caller + 1",
    ),
    (
        Kind::ReceiptFlood,
        "second-caller-bounded",
        "a second caller's likewise, by its own bound or the total (ledger.receipt_bytes_total)",
    ),
    (
        Kind::ReceiptFlood,
        "kept-within-total",
        "the host's kept receipt bytes within ledger.receipt_bytes_total and one receipt",
    ),
];

/// The deck: every kind, as often as its weight.
fn deck(kinds: &[Kind]) -> Vec<Kind> {
    kinds.iter().flat_map(|k| std::iter::repeat_n(*k, k.weight())).collect()
}

/// One virtual client: rounds of the shuffled deck until the deadline (at most
/// `max_iterations`).
pub(crate) async fn client(t: Rc<Traffic>, n: usize, round: u64, max_iterations: u64) {
    let rng = (t.seed
        ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ round.wrapping_mul(0xd1b5_4a32_d192_ed03))
        | 1;
    let mut c = Client { rng, t, n, conn: None, ids: 0 };
    let mut cards = deck(&c.t.kinds);
    if cards.is_empty() {
        return;
    }
    // Each client starts at another card, so short runs still see every kind early.
    let first = n % cards.len();
    cards.rotate_left(first);
    let mut done = 0;
    'rounds: loop {
        for kind in cards.clone() {
            if Instant::now() >= c.t.deadline.get() || done >= max_iterations {
                break 'rounds;
            }
            done += 1;
            c.t.tally.borrow_mut().kinds.entry(kind).or_default().started += 1;
            if c.iteration(kind).await.is_some() {
                c.t.tally.borrow_mut().kinds.entry(kind).or_default().completed += 1;
            }
        }
        for i in (1..cards.len()).rev() {
            let j = (c.rand() % (i as u64 + 1)) as usize;
            cards.swap(i, j);
        }
    }
}

/// The warm-up of client `n`: one iteration of every kind of `t`, in turn, counted in `t`'s
/// tally like any traffic (so its deliberate refusals match the host's counters).
///
/// # Errors
/// An iteration that did not complete (nothing is measured then).
pub(crate) async fn warm_up(t: Rc<Traffic>, n: usize) -> Result<(), String> {
    let mut c = Client { rng: 1 + n as u64, t, n, conn: None, ids: 0 };
    for kind in c.t.kinds.clone() {
        c.t.tally.borrow_mut().kinds.entry(kind).or_default().started += 1;
        if c.iteration(kind).await.is_none() {
            return Err(format!("warm-up iteration of {} failed", kind.name()));
        }
        c.t.tally.borrow_mut().kinds.entry(kind).or_default().completed += 1;
    }
    Ok(())
}

/// Read a body by its framing: the bytes, and whether it was delimited (not by close).
async fn read_body(conn: &mut Conn, head: &ResponseHead) -> Result<(Vec<u8>, bool), String> {
    let mut body = Vec::new();
    if head.chunked {
        while let Some(data) = conn.read_chunk().await.map_err(|e| format!("body: {e}"))? {
            body.extend_from_slice(&data);
            if body.len() > MAX_ANSWER_BYTES {
                return Err(format!("answer over {MAX_ANSWER_BYTES} bytes"));
            }
        }
        Ok((body, true))
    } else if let Some(n) = head.length {
        if n > MAX_ANSWER_BYTES {
            return Err(format!("answer of {n} bytes"));
        }
        Ok((conn.read_n(n).await.map_err(|e| format!("body: {e}"))?, true))
    } else if head.status == 204 || head.status == 304 || (100..200).contains(&head.status) {
        Ok((body, true))
    } else {
        while let Some(data) = conn.read_some().await.map_err(|e| format!("body: {e}"))? {
            body.extend_from_slice(&data);
            if body.len() > MAX_ANSWER_BYTES {
                return Err(format!("answer over {MAX_ANSWER_BYTES} bytes"));
            }
        }
        Ok((body, false))
    }
}
