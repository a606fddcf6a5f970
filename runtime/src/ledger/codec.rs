//! The ledger's versioned records and their codec (sans-IO: no clock, no I/O).
//!
//! Each record is one JSON object whose `type` names its kind and version
//! (`mcpHttpSession.v1`, `mcpSseStream.v1`, `mcpIdempotencyReceipt.v1`). A reader refuses a
//! type it does not know (a record from a newer release is never misread) and ignores fields
//! it does not know (a newer minor writer stays readable by this release, so a rollback
//! keeps its sessions). Events are not records: they are the SSE frames themselves, stored
//! in the stream's append-only log (see [`super::Op::Append`]).
//!
//! Timestamps are milliseconds since the Unix epoch (the shells' [`crate::proto::Tick`]).

pub use crate::proto::digest::{digest, hex};
pub use crate::proto::receipt::Outcome;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Lifecycle state of a recorded session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// Usable (live, or parked in the ledger only).
    Active,
    /// Ended by DELETE.
    Deleted,
    /// Ended by idle expiry.
    Expired,
    /// Evicted from a full ledger (least recently used first).
    Evicted,
}

/// The `initialize` a session was created with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handshake {
    /// The version the client asked for.
    pub requested_version: Option<String>,
    /// The client's capabilities.
    pub capabilities: Value,
    /// `clientInfo`, as sent.
    pub client_info: Value,
}

/// `mcpHttpSession.v1`: one legacy session. The raw session id is never stored (only the time
/// it was made, when it carries one): records are keyed and identified by
/// [`SessionRecord::session_hmac`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session's ledger name: HMAC of its id under the ledger key, led by the time the
    /// id was made when it carries one; 32 hex digits.
    pub session_hmac: String,
    /// The owning principal (bearer authentication), if any. This and the other optional
    /// fields are left out when they have no value (earlier releases wrote `null`; both read
    /// the same): a session's record is rewritten often, and smaller records fit more to a
    /// page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The authentication subject the principal was derived from (today the principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_subject: Option<String>,
    /// Negotiated protocol version.
    pub protocol_version: String,
    /// The handshake receipt.
    pub handshake: Handshake,
    /// The `Origin` the session was created from (checked by the front door's policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Created (ms since the epoch).
    pub created_ms: u64,
    /// Last used (ms since the epoch; recorded coarsely, see `SessionCore`).
    pub last_used_ms: u64,
    /// Ends unless used again (ms since the epoch).
    pub expires_ms: u64,
    /// Generation it was opened under.
    pub generation: u32,
    /// Lifecycle state.
    pub state: RecordState,
    /// `logging/setLevel`, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// Incarnation: bumped each time the session is restored from the ledger. Stream ids,
    /// event sequence numbers and server-to-client request ids of incarnation `n` start at
    /// `n << 32`, so no id is ever reused within a session, across restarts and parking.
    pub incarnation: u32,
    /// The process run that wrote the record (runs are numbered per ledger; a run that stopped
    /// cleanly leaves a mark, so a revive knows whether the copy may miss a last batch).
    #[serde(default)]
    pub run: u64,
}

/// Whether a stream answers a POST or is the standalone GET stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKindRecord {
    /// A POST's response stream.
    Post,
    /// The standalone GET stream.
    Get,
}

/// `mcpSseStream.v1`: one SSE stream. Its events live in the stream log of the same name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// The session's HMAC, hex.
    pub session_hmac: String,
    /// Stream id within the session.
    pub stream: u64,
    /// POST or GET.
    pub kind: StreamKindRecord,
    /// The request it answers (POST), JSON-RPC id as sent.
    pub request_id: Option<Value>,
    /// SHA-256 of the request's canonical JSON (method and params), hex (POST).
    pub request_digest: Option<String>,
    /// Generation the stream was opened under.
    pub generation: u32,
    /// Newest event sequence number produced (as of this record).
    pub last_sent: u64,
    /// Newest sequence number the client acknowledged (a resume's `Last-Event-ID`).
    pub last_acked: u64,
    /// `retry` hint sent (ms).
    pub retry_ms: Option<u64>,
    /// Why it closed (`None` while it runs).
    pub close_reason: Option<String>,
    /// Replay bound in events (the log keeps at most this many).
    pub max_events: usize,
    /// Replay bound in bytes (applied when the window is rebuilt).
    pub max_bytes: usize,
    /// Opened (ms since the epoch).
    pub created_ms: u64,
    /// A shadow stream (`rollout.resumable = "shadow"`): written as if resumable, its client
    /// never got a cursor, so it is not restored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// The run (host process) that wrote it last, which serves it: on a ledger several hosts
    /// share, another host follows a stream whose run is alive and takes over one whose run
    /// is gone (0: a release before shared ledgers).
    #[serde(default)]
    pub run: u64,
}

/// State of an idempotency receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ReceiptState {
    /// The execution started and has not recorded an outcome.
    Running,
    /// The execution finished.
    Done {
        /// Its outcome.
        outcome: Outcome,
    },
}

/// `mcpIdempotencyReceipt.v1`: one idempotency key of one caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReceiptRecord {
    /// The caller (principal), if authenticated.
    pub principal: Option<String>,
    /// The key, as sent.
    pub key: String,
    /// The tool called.
    pub tool: String,
    /// SHA-256 of the tool name and canonical arguments, hex.
    pub args_digest: String,
    /// Started (ms since the epoch).
    pub created_ms: u64,
    /// Its outcome so far.
    #[serde(flatten)]
    pub state: ReceiptState,
    /// The run (host process) that executes it: on a ledger several hosts share, another
    /// host waits for the outcome of a `Running` receipt whose run is alive (0: a release
    /// before shared ledgers).
    #[serde(default)]
    pub run: u64,
}

/// `mcpStateHandle.v1`: one explicit state handle (SEP-2567) and its value. Keyed by an HMAC
/// of the handle; the handle's random part is kept sealed (XOR with a keystream only the
/// ledger's secret yields), so that listing a caller's handles can give them back while the
/// file alone yields none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandleRecord {
    /// The kind's prefix (`"bsk"`).
    pub kind: String,
    /// The caller it is bound to (`None`: authentication off).
    pub principal: Option<String>,
    /// The legacy session it was created in (its HMAC, hex; never the session id): without
    /// authentication a list in a session shows only the handles created in it. `None`:
    /// created outside a session (2026-07-28), or by a release before this field (absent
    /// then, and left out when `None`, so the previous release reads every record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The sealed random part, hex.
    pub sealed: String,
    /// The value, as the tool last stored it.
    pub value: serde_json::Value,
    /// Bumped on every update.
    pub version: u64,
    /// Created and last used (ms since the epoch).
    pub created_ms: u64,
    /// Last used (ms since the epoch): it expires an idle TTL after this.
    pub used_ms: u64,
    /// When it expires as written (ms since the epoch; its bounds counted it until then).
    /// `0`: written by a release before this field (left out then).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expires_ms: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// `mcpTask.v1`: one task of the tasks extension, keyed by an HMAC of its id (the id itself
/// is not kept: only its caller, who was given it, can name it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The caller it is bound to (`None`: authentication off).
    pub principal: Option<String>,
    /// The tool it runs.
    pub tool: String,
    /// The process run that executes it (a task still running in another run was interrupted
    /// by a restart).
    pub run: u64,
    /// Its state and what the state carries (`task_id` empty here).
    #[serde(flatten)]
    pub view: crate::proto::task::TaskView,
}

/// Any record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Record {
    /// A session.
    #[serde(rename = "mcpHttpSession.v1")]
    Session(SessionRecord),
    /// A stream.
    #[serde(rename = "mcpSseStream.v1")]
    Stream(StreamRecord),
    /// An idempotency receipt.
    #[serde(rename = "mcpIdempotencyReceipt.v1")]
    Receipt(ReceiptRecord),
    /// A state handle.
    #[serde(rename = "mcpStateHandle.v1")]
    Handle(HandleRecord),
    /// A task.
    #[serde(rename = "mcpTask.v1")]
    Task(TaskRecord),
}

/// Why bytes are not a record this release can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Not JSON, or not an object of a known shape.
    #[error("malformed ledger record: {0}")]
    Malformed(String),
    /// A `type` this release does not know (written by a newer one).
    #[error("unknown ledger record type {0:?}")]
    UnknownType(String),
}

const KNOWN_TYPES: [&str; 5] = [
    "mcpHttpSession.v1",
    "mcpSseStream.v1",
    "mcpIdempotencyReceipt.v1",
    "mcpStateHandle.v1",
    "mcpTask.v1",
];

/// A session's handshake as its record is written: the three lines of compact JSON a session
/// keeps ([`handshake_lines`]), copied as they are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandshakeLines<'a>(pub(crate) &'a str);

/// A handshake as the three lines a session keeps: its requested version, capabilities and
/// client info, each as compact JSON (which has no raw line break) on a line of its own.
///
/// # Panics
/// Never: JSON values print, as JSON, in UTF-8.
#[must_use]
pub(crate) fn handshake_lines(
    requested_version: Option<&str>,
    capabilities: &Value,
    client_info: &Value,
) -> String {
    let mut text = Vec::with_capacity(64);
    let print = "parsed JSON values print";
    serde_json::to_writer(&mut text, &requested_version).expect(print);
    for v in [capabilities, client_info] {
        text.push(b'\n');
        serde_json::to_writer(&mut text, v).expect(print);
    }
    String::from_utf8(text).expect("JSON is UTF-8")
}

/// A session record's fields, borrowed: what [`encode_session`] writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionOut<'a> {
    pub(crate) session_hmac: &'a str,
    pub(crate) principal: Option<&'a str>,
    pub(crate) auth_subject: Option<&'a str>,
    pub(crate) protocol_version: &'a str,
    pub(crate) handshake: HandshakeLines<'a>,
    pub(crate) origin: Option<&'a str>,
    pub(crate) created_ms: u64,
    pub(crate) last_used_ms: u64,
    pub(crate) expires_ms: u64,
    pub(crate) generation: u32,
    pub(crate) state: RecordState,
    pub(crate) log_level: Option<&'a str>,
    pub(crate) incarnation: u32,
    pub(crate) run: u64,
}

/// A session's record, byte for byte what [`encode`] makes of the [`SessionRecord`] these
/// fields are, written from borrowed fields: no record is built, and the session's kept
/// handshake text is copied, not parsed and printed again. A session's record is written at
/// its creation and again through its life.
///
/// # Panics
/// When its handshake is not three lines (a session's kept text always is); strings and
/// numbers always serialize.
#[must_use]
pub(crate) fn encode_session(s: &SessionOut<'_>) -> Vec<u8> {
    fn text(out: &mut Vec<u8>, key: &[u8], v: &str) {
        out.extend_from_slice(key);
        serde_json::to_writer(&mut *out, v).expect("a string serializes");
    }
    fn number(out: &mut Vec<u8>, key: &[u8], n: u64) {
        out.extend_from_slice(key);
        serde_json::to_writer(&mut *out, &n).expect("a number serializes");
    }
    let mut out = Vec::with_capacity(320 + s.handshake.0.len());
    text(&mut out, b"{\"type\":\"mcpHttpSession.v1\",\"session_hmac\":", s.session_hmac);
    if let Some(p) = s.principal {
        text(&mut out, b",\"principal\":", p);
    }
    if let Some(a) = s.auth_subject {
        text(&mut out, b",\"auth_subject\":", a);
    }
    text(&mut out, b",\"protocol_version\":", s.protocol_version);
    out.extend_from_slice(b",\"handshake\":{\"requested_version\":");
    let mut lines = s.handshake.0.splitn(3, '\n');
    let mut next = || lines.next().expect("a kept handshake is three lines").as_bytes();
    out.extend_from_slice(next());
    out.extend_from_slice(b",\"capabilities\":");
    out.extend_from_slice(next());
    out.extend_from_slice(b",\"client_info\":");
    out.extend_from_slice(next());
    out.push(b'}');
    if let Some(o) = s.origin {
        text(&mut out, b",\"origin\":", o);
    }
    number(&mut out, b",\"created_ms\":", s.created_ms);
    number(&mut out, b",\"last_used_ms\":", s.last_used_ms);
    number(&mut out, b",\"expires_ms\":", s.expires_ms);
    number(&mut out, b",\"generation\":", u64::from(s.generation));
    out.extend_from_slice(match s.state {
        RecordState::Active => b",\"state\":\"active\"",
        RecordState::Deleted => b",\"state\":\"deleted\"",
        RecordState::Expired => b",\"state\":\"expired\"",
        RecordState::Evicted => b",\"state\":\"evicted\"",
    });
    if let Some(l) = s.log_level {
        text(&mut out, b",\"log_level\":", l);
    }
    number(&mut out, b",\"incarnation\":", u64::from(s.incarnation));
    number(&mut out, b",\"run\":", s.run);
    out.push(b'}');
    out
}

/// Encode a record.
#[must_use]
pub fn encode(record: &Record) -> Vec<u8> {
    serde_json::to_vec(record).expect("records are plain data and always serialize")
}

/// Decode a record.
///
/// # Errors
/// [`CodecError::UnknownType`] for a type this release does not know,
/// [`CodecError::Malformed`] for anything else that is not a valid record.
pub fn decode(bytes: &[u8]) -> Result<Record, CodecError> {
    #[derive(Deserialize)]
    struct Tag<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let tag: Tag<'_> =
        serde_json::from_slice(bytes).map_err(|e| CodecError::Malformed(e.to_string()))?;
    match tag.kind {
        None => return Err(CodecError::Malformed("no \"type\"".into())),
        Some(t) if !KNOWN_TYPES.contains(&&*t) => {
            return Err(CodecError::UnknownType(t.into_owned()));
        }
        Some(_) => {}
    }
    let record: Record =
        serde_json::from_slice(bytes).map_err(|e| CodecError::Malformed(e.to_string()))?;
    validate(&record)?;
    Ok(record)
}

fn is_hex_digest(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn validate(record: &Record) -> Result<(), CodecError> {
    let bad = |what: &str| Err(CodecError::Malformed(what.to_owned()));
    match record {
        Record::Session(s) => {
            if !is_hex_digest(&s.session_hmac, HMAC_HEX_LEN) {
                return bad("session_hmac must be 32 hex digits");
            }
            if s.expires_ms < s.last_used_ms && s.state == RecordState::Active {
                return bad("an active session cannot expire before its last use");
            }
        }
        Record::Stream(t) => {
            if !is_hex_digest(&t.session_hmac, HMAC_HEX_LEN) {
                return bad("session_hmac must be 32 hex digits");
            }
            if t.last_acked > t.last_sent {
                return bad("last_acked is after last_sent");
            }
            if (t.kind == StreamKindRecord::Post) != t.request_id.is_some() {
                return bad("a POST stream has a request id and a GET stream none");
            }
            if t.request_digest.as_deref().is_some_and(|d| !is_hex_digest(d, 64)) {
                return bad("request_digest must be 64 hex digits");
            }
        }
        Record::Receipt(r) => {
            if !is_hex_digest(&r.args_digest, 64) {
                return bad("args_digest must be 64 hex digits");
            }
        }
        Record::Handle(h) => {
            if !is_hex_digest(&h.sealed, 2 * crate::proto::handle::HANDLE_RANDOM_BYTES) {
                return bad("sealed must be 36 hex digits");
            }
            if h.used_ms < h.created_ms {
                return bad("a handle cannot be used before it was created");
            }
            if h.session.as_deref().is_some_and(|s| !is_hex_digest(s, HMAC_HEX_LEN)) {
                return bad("session must be 32 hex digits");
            }
        }
        Record::Task(t) => {
            if t.view.updated_ms < t.view.created_ms {
                return bad("a task cannot change before it was created");
            }
        }
    }
    Ok(())
}

/// How deeply a result a record keeps may nest (arrays and objects): serde_json reads records
/// back through at most 128 levels, and a record wraps what it keeps in a few of its own. A
/// deeper result is not kept (as one too large is not): kept, its record could never be read.
pub const KEPT_DEPTH_MAX: usize = 120;

/// Whether the JSON text `encoded` nests no deeper than [`KEPT_DEPTH_MAX`] (measured by the
/// request bodies' scan, [`crate::proto::limits::scan`]).
#[must_use]
pub fn nests_within_kept_depth(encoded: &[u8]) -> bool {
    use crate::proto::limits::{Limit, MessageLimits, scan};
    let limits = MessageLimits {
        json_max_depth: KEPT_DEPTH_MAX,
        json_max_values: usize::MAX,
        ..MessageLimits::default()
    };
    !matches!(scan(encoded, &limits), Err(e) if e.limit == Limit::JsonDepth)
}

/// The bound a result crosses, kept in a record: its size past the keeper's `max_bytes`,
/// checked first, or its depth past [`KEPT_DEPTH_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PastKeptBound {
    /// Larger than `max_bytes`.
    Bytes,
    /// Nested deeper than [`KEPT_DEPTH_MAX`].
    Depth,
}

/// Which bound the JSON text `encoded` crosses to be kept by a record holding at most
/// `max_bytes` (receipts and tasks keep results so), if any.
#[must_use]
pub fn past_kept_bound(encoded: &[u8], max_bytes: usize) -> Option<PastKeptBound> {
    if encoded.len() > max_bytes {
        Some(PastKeptBound::Bytes)
    } else if !nests_within_kept_depth(encoded) {
        Some(PastKeptBound::Depth)
    } else {
        None
    }
}

/// Hex digits of a session HMAC (128 bits).
pub const HMAC_HEX_LEN: usize = 32;

/// SHA-256 of `bytes`, hex.
#[must_use]
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest as _, Sha256};
    hex(&Sha256::digest(bytes))
}

/// `prefix` and `name` in one string of their length: every key that is a prefix and one name
/// (a session's record key is made on each of its record writes; through `format!` it was
/// 0.7 % of an `initialize`'s samples, `bench/profiles/round15-before-initialize-shares.txt`).
fn prefixed(prefix: &str, name: &str) -> String {
    let mut k = String::with_capacity(prefix.len() + name.len());
    k.push_str(prefix);
    k.push_str(name);
    k
}

/// Key of a session record.
#[must_use]
pub fn session_key(hmac: &str) -> String {
    prefixed("s/", hmac)
}

/// Key of a stream record.
#[must_use]
pub fn stream_key(hmac: &str, stream: u64) -> String {
    format!("t/{hmac}/{stream}")
}

/// Key of a session's end (DELETE, expiry): while it exists the session stays ended, whatever
/// record another host still writes for it (it outlives every such record: twice the idle
/// TTL).
#[must_use]
pub fn session_end_key(hmac: &str) -> String {
    prefixed("x/", hmac)
}

/// The channel ([`super::Op::Publish`]) on which a host tells the others sharing the ledger
/// that a session ended (message: its HMAC).
pub const ENDS_CHANNEL: &str = "ends";

/// The channel on which a host tells the others what a client sent it for a session another
/// host may be serving: an answer to a server-to-client request (`{"s": <hmac>, "id": ..,
/// "result"|"error": ..}`, kept under [`answer_key`] too), a cancellation (`{"s": <hmac>,
/// "cancel": <request id>}`) or a log level (`{"s": <hmac>, "level": ..}`).
pub const SESSIONS_CHANNEL: &str = "sessions";

/// The channel on which hosts sharing a ledger relay their catalogs' announcements to one
/// another's `subscriptions/listen` streams (message: `{"list": ..}` or `{"uri": ..}`).
pub const CHANGES_CHANNEL: &str = "changes";

/// Key of a session's incarnation counter ([`super::Store::incr`]): each revive, on any
/// host, counts a life of its own.
#[must_use]
pub fn incarnation_key(hmac: &str) -> String {
    prefixed("n/", hmac)
}

/// Key of a server-to-client request's asker (shared ledger): the run (host process) whose
/// request asked the client `id` (its JSON text) in a session, so a host that gets the
/// client's answer and finds that run gone says so rather than relaying it to nobody.
#[must_use]
pub fn question_key(hmac: &str, id: &str) -> String {
    format!("q/{hmac}/{id}")
}

/// Key of the client's answer to server-to-client request `id` (its JSON text) of a session,
/// kept by the host that relayed it to the asker (the message as published), so an asker
/// whose subscription was cut (the publication may have been missed) reads it there.
#[must_use]
pub fn answer_key(hmac: &str, id: &str) -> String {
    format!("qa/{hmac}/{id}")
}

/// Key of the claim on a stream whose host (run `run`) is gone: the first host to count it
/// takes the stream over ([`super::Store::incr`]).
#[must_use]
pub fn takeover_key(hmac: &str, stream: u64, run: u64) -> String {
    format!("o/{hmac}/{stream}/{run}")
}

/// Name of a stream's event log.
#[must_use]
pub fn events_key(hmac: &str, stream: u64) -> String {
    format!("e/{hmac}/{stream}")
}

/// Index of recorded sessions by last recorded use (member: session HMAC; score: last used,
/// ms): the ledger's session cap evicts from its low end, and members older than the idle
/// TTL (expired sessions) are trimmed from it. On a shared ledger it holds every active
/// session; on a ledger of its own only those out of the host's memory (parked, or left by
/// a stopped process; see `Residence` in the actor layer).
pub const SESSIONS_LRU: &str = "lru/sessions";

/// Index of one caller's sessions on a shared ledger (member: session HMAC; score: when its
/// record expires, ms): a caller's sessions across hosts are those scored in the future.
/// `owner` is the caller as the quotas count it (a principal, or `ip:` and an address).
#[must_use]
pub fn caller_sessions_index(owner: &str) -> String {
    format!("ps/{}:{owner}", owner.len())
}

/// Index of one caller's new sessions on a shared ledger (member: a random tag; score: when
/// it leaves the rate's window, a second after it was made): those scored in the future are
/// the caller's sessions made in the last second on every host.
#[must_use]
pub fn caller_rate_index(owner: &str) -> String {
    format!("pr/{}:{owner}", owner.len())
}

/// Index of a session's streams (member: stream id; score: its id).
#[must_use]
pub fn streams_index(hmac: &str) -> String {
    prefixed("ts/", hmac)
}

/// Key of an idempotency receipt: the caller and the key, length-prefixed so that no two
/// (principal, key) pairs share a ledger key.
#[must_use]
pub fn receipt_key(principal: Option<&str>, key: &str) -> String {
    let p = principal.unwrap_or("");
    format!("r/{}:{p}/{key}", p.len())
}

/// Key of the claim on an idempotency key's execution (shared ledger): `receipt` is the
/// receipt's key, `replaced` when the `Running` receipt the execution replaces was created
/// (0: none). The first host to count it runs the execution ([`super::Store::incr`]).
#[must_use]
pub fn receipt_claim_key(receipt: &str, replaced: u64) -> String {
    format!("c/{replaced}/{receipt}")
}

/// Key of a state handle's lock across hosts (shared ledger): held (counted once with
/// [`super::Store::incr`]) from an update's read to its commit, which deletes it.
#[must_use]
pub fn handle_lock_key(hmac: &str) -> String {
    prefixed("hl/", hmac)
}

/// Key of a task: the HMAC of its id.
#[must_use]
pub fn task_key(hmac: &str) -> String {
    prefixed("k/", hmac)
}

/// Key of a state handle: its HMAC.
#[must_use]
pub fn handle_key(hmac: &str) -> String {
    prefixed("h/", hmac)
}

/// Index of what callers keep in one store (`store`: `r` receipts, `h` handles, `t` tasks),
/// for its bounds: member `<bytes>/<caller>/<name>` ([`usage_member`]), score: when the entry
/// expires (ms). Read once at start to rebuild the in-memory figures
/// ([`crate::proto::usage`]); expired members are trimmed as entries are added.
#[must_use]
pub(crate) fn usage_index(store: &str) -> String {
    prefixed("u/", store)
}

/// The tally of what one caller keeps in store `store` (`Some(caller)`, as in
/// [`usage_member`]) or every caller (`None`), on a ledger several hosts share.
#[must_use]
pub(crate) fn usage_tally(store: &str, caller: Option<Option<&str>>) -> String {
    match caller {
        None => prefixed("ut/", store),
        Some(None) => format!("ut/{store}/-"),
        Some(Some(c)) => format!("ut/{store}/{}:{c}", c.len()),
    }
}

/// A member of a [`usage_index`]: the entry's bytes, its caller (`-` for none, else
/// length-prefixed as in [`receipt_key`]) and its name.
#[must_use]
pub(crate) fn usage_member(caller: Option<&str>, bytes: u64, name: &str) -> String {
    match caller {
        Some(c) => format!("{bytes}/{}:{c}/{name}", c.len()),
        None => format!("{bytes}/-/{name}"),
    }
}

/// `(caller, bytes)` of a [`usage_member`]; `None` for a member of another shape.
#[must_use]
pub(crate) fn parse_usage_member(m: &str) -> Option<(Option<&str>, u64)> {
    let (bytes, rest) = m.split_once('/')?;
    let bytes = bytes.parse().ok()?;
    if rest.starts_with("-/") {
        return Some((None, bytes));
    }
    let (len, rest) = rest.split_once(':')?;
    let caller = rest.get(..len.parse::<usize>().ok()?)?;
    rest[caller.len()..].starts_with('/').then_some((Some(caller), bytes))
}

/// Index of one caller's handles of one kind (member: handle HMAC; score: when it expires,
/// ms): counted against the kind's per-caller bound, listed by `list_*` tools, trimmed of
/// expired members. Length-prefixed like [`receipt_key`].
#[must_use]
pub fn handles_index(kind: &str, principal: Option<&str>) -> String {
    let p = principal.unwrap_or("");
    format!("hi/{kind}/{}:{p}", p.len())
}

#[cfg(test)]
mod usage_member_tests {
    use super::*;

    #[test]
    fn a_receipt_keeping_a_result_as_deep_as_the_bound_is_read_back() {
        let nested = crate::proto::jsonrpc::nested_arrays;
        let within = |v: &Value| nests_within_kept_depth(&serde_json::to_vec(v).unwrap());
        assert!(within(&nested(KEPT_DEPTH_MAX)));
        assert!(!within(&nested(KEPT_DEPTH_MAX + 1)));
        let receipt = |v: Value| {
            Record::Receipt(ReceiptRecord {
                principal: None,
                key: "k".into(),
                tool: "t".into(),
                args_digest: "0".repeat(64),
                created_ms: 1,
                state: ReceiptState::Done { outcome: Outcome::Result(v) },
                run: 1,
            })
        };
        let at_bound = receipt(nested(KEPT_DEPTH_MAX));
        assert_eq!(decode(&encode(&at_bound)).unwrap(), at_bound);
        // What the bound keeps out: past serde_json's 128 levels, a record is never read back.
        assert!(decode(&encode(&receipt(nested(130)))).is_err());
    }

    #[test]
    fn a_usage_member_gives_its_caller_and_bytes_back_whatever_the_caller_holds() {
        for caller in [None, Some(""), Some("alice"), Some("ip:10.0.0.1"), Some("a/b:c/d")] {
            let m = usage_member(caller, 1234, "r/5:alice/key/with/slashes");
            assert_eq!(parse_usage_member(&m), Some((caller, 1234)), "{m}");
        }
        assert_eq!(parse_usage_member("x/-/n"), None);
        assert_eq!(parse_usage_member("1/9:short/n"), None);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_sessions_keys_are_its_name_behind_their_prefix_as_every_release_wrote_them() {
        let hmac = "019412345678aabbccddeeff00112233";
        assert_eq!(session_key(hmac), format!("s/{hmac}"));
        assert_eq!(session_end_key(hmac), format!("x/{hmac}"));
        assert_eq!(incarnation_key(hmac), format!("n/{hmac}"));
        assert_eq!(stream_key(hmac, 7), format!("t/{hmac}/7"));
        assert_eq!(session_key(""), "s/");
    }

    fn session(hmac: String) -> SessionRecord {
        SessionRecord {
            session_hmac: hmac,
            principal: Some("alice".into()),
            auth_subject: Some("alice".into()),
            protocol_version: "2025-11-25".into(),
            handshake: Handshake {
                requested_version: Some("2025-11-25".into()),
                capabilities: serde_json::json!({"sampling": {}}),
                client_info: serde_json::json!({"name": "c"}),
            },
            origin: None,
            created_ms: 1,
            last_used_ms: 2,
            expires_ms: 3,
            generation: 1,
            state: RecordState::Active,
            log_level: Some("info".into()),
            incarnation: 0,
            run: 3,
        }
    }

    #[test]
    fn a_record_of_a_newer_type_is_refused_not_misread() {
        assert_eq!(
            decode(br#"{"type":"mcpHttpSession.v2","session_hmac":"x"}"#),
            Err(CodecError::UnknownType("mcpHttpSession.v2".into()))
        );
        assert!(matches!(decode(b"{}"), Err(CodecError::Malformed(_))));
        assert!(matches!(decode(b"not json"), Err(CodecError::Malformed(_))));
    }

    #[test]
    fn a_session_records_empty_fields_are_left_out_and_a_record_with_nulls_reads_the_same() {
        let bare = SessionRecord {
            principal: None,
            auth_subject: None,
            log_level: None,
            ..session("ab".repeat(16))
        };
        let text = String::from_utf8(encode(&Record::Session(bare.clone()))).unwrap();
        for field in ["principal", "auth_subject", "origin", "log_level", "null"] {
            assert!(!text.contains(field), "{field} left out: {text}");
        }
        assert_eq!(decode(text.as_bytes()), Ok(Record::Session(bare.clone())));
        // The shape earlier releases wrote.
        let mut with_nulls = serde_json::to_value(Record::Session(bare.clone())).unwrap();
        for field in ["principal", "auth_subject", "origin", "log_level"] {
            with_nulls[field] = Value::Null;
        }
        assert_eq!(decode(&serde_json::to_vec(&with_nulls).unwrap()), Ok(Record::Session(bare)));
        let full =
            SessionRecord { origin: Some("https://a.example".into()), ..session("ab".repeat(16)) };
        assert_eq!(decode(&encode(&Record::Session(full.clone()))), Ok(Record::Session(full)));
    }

    #[test]
    fn a_kept_handshake_with_line_breaks_and_controls_in_its_strings_is_copied_whole() {
        let mut r = session("ab".repeat(16));
        r.handshake.capabilities =
            serde_json::json!({"x\ny": "a\nb\r\u{1}\"", "n": [1, {"\n": null}]});
        r.handshake.client_info = serde_json::json!({"name": "c\n\u{7f}é"});
        let lines = kept_lines(&r.handshake);
        assert_eq!(lines.matches('\n').count(), 2, "compact JSON has no raw line break");
        let out = encode_session(&session_out(&r, &lines));
        assert_eq!(out, encode(&Record::Session(r.clone())));
        assert_eq!(decode(&out), Ok(Record::Session(r)));
    }

    #[test]
    fn unknown_fields_of_a_known_type_are_ignored() {
        let mut v = serde_json::to_value(Record::Session(session("0".repeat(32)))).unwrap();
        v["added_by_a_newer_minor"] = serde_json::json!(true);
        assert_eq!(
            decode(&serde_json::to_vec(&v).unwrap()).unwrap(),
            Record::Session(session("0".repeat(32)))
        );
    }

    #[test]
    fn inconsistent_records_are_refused() {
        let mut s = session("zz".repeat(16));
        assert!(decode(&encode(&Record::Session(s.clone()))).is_err(), "hmac not hex");
        s.session_hmac = "ab".repeat(16);
        s.expires_ms = 0;
        assert!(decode(&encode(&Record::Session(s))).is_err(), "expires before last use");
    }

    #[test]
    fn a_handle_record_of_the_previous_release_reads_as_made_outside_a_session_and_the_field_stays_optional()
     {
        let previous = br#"{"type":"mcpStateHandle.v1","kind":"bsk","principal":null,"sealed":"000102030405060708090a0b0c0d0e0f1011","value":{},"version":1,"created_ms":1,"used_ms":1}"#;
        let Ok(Record::Handle(h)) = decode(previous) else { panic!("readable") };
        assert_eq!(h.session, None);
        assert!(
            !String::from_utf8(encode(&Record::Handle(h.clone()))).unwrap().contains("session"),
            "left out when None: the previous release's shape"
        );
        let made_in_one = HandleRecord { session: Some("ab".repeat(16)), ..h.clone() };
        assert_eq!(
            decode(&encode(&Record::Handle(made_in_one.clone()))),
            Ok(Record::Handle(made_in_one))
        );
        assert!(
            decode(&encode(&Record::Handle(HandleRecord {
                session: Some("a session id".into()),
                ..h
            })))
            .is_err(),
            "an HMAC, never anything else"
        );
    }

    #[test]
    fn receipt_keys_of_different_callers_never_collide() {
        assert_ne!(receipt_key(Some("a"), "b/c"), receipt_key(Some("a/b"), "c"));
        assert_ne!(receipt_key(None, "k"), receipt_key(Some(""), "k/"));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from)
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("\\PC{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A record state from a number below 4.
    fn arb_state(n: u8) -> RecordState {
        [RecordState::Active, RecordState::Deleted, RecordState::Expired, RecordState::Evicted]
            [usize::from(n)]
    }

    /// A handshake as the three lines a session keeps.
    fn kept_lines(h: &Handshake) -> String {
        handshake_lines(h.requested_version.as_deref(), &h.capabilities, &h.client_info)
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        let hmac = proptest::collection::vec(any::<u8>(), 16).prop_map(|b| hex(&b));
        let digest = proptest::collection::vec(any::<u8>(), 32).prop_map(|b| hex(&b));
        let opt_s = proptest::option::of("\\PC{0,16}");
        let session = (
            hmac.clone(),
            opt_s.clone(),
            arb_json(),
            arb_json(),
            any::<u32>(),
            0u64..1 << 50,
            0u64..1 << 20,
            0u8..4,
            any::<u32>(),
        )
            .prop_map(
                |(h, principal, caps, info, generation, used, ttl, st, incarnation)| {
                    Record::Session(SessionRecord {
                        session_hmac: h,
                        auth_subject: principal.clone(),
                        principal,
                        protocol_version: "2025-06-18".into(),
                        handshake: Handshake {
                            requested_version: None,
                            capabilities: caps,
                            client_info: info,
                        },
                        origin: Some("http://localhost".into()),
                        created_ms: used / 2,
                        last_used_ms: used,
                        expires_ms: used + ttl,
                        generation,
                        state: arb_state(st),
                        log_level: None,
                        incarnation,
                        run: u64::from(incarnation % 7),
                    })
                },
            );
        let stream = (
            hmac,
            any::<u64>(),
            any::<bool>(),
            any::<i64>(),
            digest.clone(),
            0u64..1000,
            0u64..1000,
            proptest::option::of("[a-z_]{1,12}"),
        )
            .prop_map(|(h, sid, post, rid, d, a, b, reason)| {
                Record::Stream(StreamRecord {
                    session_hmac: h,
                    stream: sid,
                    kind: if post { StreamKindRecord::Post } else { StreamKindRecord::Get },
                    request_id: post.then(|| Value::from(rid)),
                    request_digest: post.then_some(d),
                    generation: 1,
                    last_sent: a.max(b),
                    last_acked: a.min(b),
                    retry_ms: Some(1000),
                    close_reason: reason,
                    max_events: 1024,
                    max_bytes: 1 << 20,
                    created_ms: 5,
                    shadow: sid % 2 == 0,
                    run: a,
                })
            });
        let receipt = (opt_s, "\\PC{1,20}", digest, proptest::option::of(arb_json())).prop_map(
            |(principal, key, d, result)| {
                Record::Receipt(ReceiptRecord {
                    principal,
                    key,
                    tool: "t".into(),
                    args_digest: d,
                    created_ms: 9,
                    state: match result {
                        Some(r) => ReceiptState::Done { outcome: Outcome::Result(r) },
                        None => ReceiptState::Running,
                    },
                    run: 3,
                })
            },
        );
        let handle = (
            proptest::option::of("\\PC{0,16}"),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 16).prop_map(|b| hex(&b))),
            proptest::collection::vec(any::<u8>(), 18),
            arb_json(),
            0u64..1 << 50,
        )
            .prop_map(|(principal, session, sealed, value, created)| {
                Record::Handle(HandleRecord {
                    kind: "bsk".into(),
                    principal,
                    session,
                    sealed: hex(&sealed),
                    value,
                    version: 1,
                    created_ms: created,
                    used_ms: created + 1,
                    expires_ms: created + 2,
                })
            });
        prop_oneof![session, stream, receipt, handle]
    }

    /// The borrowed fields of `r`, its handshake as the kept `lines`.
    fn session_out<'a>(r: &'a SessionRecord, lines: &'a str) -> SessionOut<'a> {
        SessionOut {
            session_hmac: &r.session_hmac,
            principal: r.principal.as_deref(),
            auth_subject: r.auth_subject.as_deref(),
            protocol_version: &r.protocol_version,
            handshake: HandshakeLines(lines),
            origin: r.origin.as_deref(),
            created_ms: r.created_ms,
            last_used_ms: r.last_used_ms,
            expires_ms: r.expires_ms,
            generation: r.generation,
            state: r.state,
            log_level: r.log_level.as_deref(),
            incarnation: r.incarnation,
            run: r.run,
        }
    }

    fn arb_session() -> impl Strategy<Value = SessionRecord> {
        let opt = || proptest::option::of(any::<String>());
        (
            (any::<String>(), opt(), opt(), any::<String>(), opt(), arb_json(), arb_json()),
            (opt(), opt(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>(), 0u8..4),
            (any::<u32>(), any::<u64>()),
        )
            .prop_map(
                |((h, p, a, v, rv, caps, info), (o, l, c, u, e, g, st), (i, run))| SessionRecord {
                    session_hmac: h,
                    principal: p,
                    auth_subject: a,
                    protocol_version: v,
                    handshake: Handshake {
                        requested_version: rv,
                        capabilities: caps,
                        client_info: info,
                    },
                    origin: o,
                    created_ms: c,
                    last_used_ms: u,
                    expires_ms: e,
                    generation: g,
                    state: arb_state(st),
                    log_level: l,
                    incarnation: i,
                    run,
                },
            )
    }

    proptest! {
        #[test]
        fn a_session_record_from_borrowed_fields_is_the_records_encoding(r in arb_session()) {
            let encoded = encode(&Record::Session(r.clone()));
            let lines = kept_lines(&r.handshake);
            prop_assert_eq!(&encode_session(&session_out(&r, &lines)), &encoded);
        }

        #[test]
        fn every_record_round_trips(r in arb_record()) {
            prop_assert_eq!(decode(&encode(&r)), Ok(r));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
        }
    }
}
