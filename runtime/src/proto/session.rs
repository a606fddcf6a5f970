//! The session state machine: lifecycle, in-flight requests, server-to-client requests and
//! their deadlines, the stream table with its retention bounds, attached connections, and
//! idle expiry.
//!
//! ```text
//! ACTIVE -> DELETE_REQUESTED -> TERMINATED
//! ACTIVE -> EXPIRED
//! EXPIRED | TERMINATED -> (client must) REINITIALIZE   [404 on any use]
//! ```
//!
//! Generic over the shell's per-request data `R` (a task handle), per-stream data `S` (an
//! actor address) and per-client-request data `P` (the waiting tool's reply route), so the
//! shell keeps no second table. Time comes in as `now`; [`SessionCore::poll_timeout`] says
//! when the shell must call [`SessionCore::handle_timeout`] next.
//!
//! Memory stays bounded: at most `max_in_flight` requests and as many client requests,
//! `max_retained_streams` closed streams holding at most `max_retained_bytes`; ids of
//! answered requests are not remembered.
//!
//! Durability: [`SessionCore::poll_ledger`] says when the session's record must be written
//! again (log level changed, last use moved on by a sixteenth of the TTL, or a busy session's
//! record would expire within half its TTL), so a busy session writes its record a few times
//! per TTL, never per request. Stream ids and server-to-client request ids of incarnation `n`
//! (the session's `n`-th life: creation, then each restore from the ledger) start at
//! `n << 32`, so none is reused across restarts.
//!
//! Idleness is derived from state the shell cannot lose: the count of attached connections
//! changes only through [`SessionCore::connection_delta`], which the shell calls from a guard
//! whose drop always reaches the session (by message, or queued for its next turn), and the
//! set of requests in flight.

use std::collections::{HashMap, VecDeque};

use super::error::{Overload, Rejection};
use super::ids::{Generation, JsonRpcId, StreamId, Tick};
use super::mcp::LogLevel;
use super::version::ProtocolVersion;
use table::StreamTable;

mod table;

/// Lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionState {
    /// Serving.
    Active,
    /// DELETE received; finishing teardown.
    DeleteRequested,
    /// Ended by DELETE or shutdown.
    Terminated,
    /// Ended by idle expiry.
    Expired,
}

/// Bounds of one session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLimits {
    /// Idle time after which the session expires (ms).
    pub idle_ttl_ms: u64,
    /// Most requests in flight at once; also the most client requests waiting at once.
    pub max_in_flight: usize,
    /// Most closed streams kept for late resumes (oldest evicted first).
    pub max_retained_streams: usize,
    /// Most bytes of closed streams kept for late resumes (oldest evicted first; the newest
    /// closed stream is always kept).
    pub max_retained_bytes: usize,
    /// Deadline of a server-to-client request (ms).
    pub client_request_timeout_ms: u64,
    /// Idle time after which the session is parked: its shell stops, its state stays in
    /// the ledger, its next request revives it (ms; at or past `idle_ttl_ms`: never).
    pub park_after_ms: u64,
    /// Other hosts serve the session too (a shared ledger): this host's idle time is not the
    /// session's (another may have used it since), so past its park time it parks even when
    /// its idle TTL passed by this host's clock (a pause); the ledger's record, expiring from
    /// the last use on any host, ends it.
    pub idle_ends_in_ledger: bool,
    /// Idle time, with no stream and no client request either, after which the session
    /// hibernates: its shell keeps a [`SleepingCore`] and nothing else runs for it (ms;
    /// `u64::MAX`: never).
    pub hibernate_after_ms: u64,
}

/// A request being served.
#[derive(Debug)]
pub(crate) struct InFlight<R> {
    /// Its response stream (SSE) or `None` (JSON reply).
    pub stream: Option<StreamId>,
    /// Shell data (task handle, cancellation token...).
    pub handle: R,
}

/// A server-to-client request waiting for the client's answer.
#[derive(Debug)]
pub(crate) struct ClientRequest<P> {
    /// The request (of the client) whose tool asked.
    pub origin: JsonRpcId,
    /// Its method, for the timeout message.
    pub method: Box<str>,
    /// When it is given up.
    pub deadline: Tick,
    /// Shell data (the tool's reply route).
    pub handle: P,
}

/// Why a server-to-client request could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientRequestRefused {
    /// The tool's own request is no longer in flight.
    OriginEnded,
    /// `max_in_flight` client requests are already waiting.
    TooMany,
}

impl ClientRequestRefused {
    /// What the tool is told.
    #[must_use]
    pub(crate) fn message(self) -> &'static str {
        match self {
            ClientRequestRefused::OriginEnded => "the originating request is no longer running",
            ClientRequestRefused::TooMany => {
                "too many server-to-client requests are waiting in this session"
            }
        }
    }
}

/// A stream in the table.
#[derive(Debug)]
pub(crate) struct StreamEntry<S> {
    /// The request it answers, or `None` for the standalone GET stream.
    pub request: Option<JsonRpcId>,
    /// Closed (kept for late resumes only).
    pub closed: bool,
    /// Bytes its window held when it closed (counted against `max_retained_bytes`; a window
    /// holds far less than 4 GiB, and a `u32` keeps the entries of a session's table, up to
    /// 64 kept streams and more, a slot smaller).
    pub retained_bytes: u32,
    /// Shell data (actor address).
    pub handle: S,
}

/// The streams a closing stream evicted, oldest first: nearly always none or one, held
/// inline.
pub(crate) type Evicted<S> = smallvec::SmallVec<[StreamEntry<S>; 1]>;

/// Everything a terminated session hands back to its shell: in-flight requests and streams.
pub(crate) type Teardown<R, S> = (Vec<(JsonRpcId, InFlight<R>)>, Vec<StreamEntry<S>>);

/// What [`SessionCore::handle_timeout`] found due.
#[derive(Debug)]
#[must_use = "timed-out client requests must be answered to their tools"]
pub(crate) struct Due<P> {
    /// The session expired just now (the shell stops it).
    pub expired: bool,
    /// The session has been idle for `park_after_ms`: the shell parks it (its state stays
    /// active; a request that arrives meanwhile keeps it live).
    pub park: bool,
    /// The session has had nothing to do for `hibernate_after_ms` (and neither expired nor
    /// parks): the shell may keep it as a [`SleepingCore`] ([`SessionCore::sleep`]).
    pub hibernate: bool,
    /// Client requests past their deadline, with the id they were sent under; forgotten by
    /// the core.
    pub timed_out: Vec<(JsonRpcId, ClientRequest<P>)>,
}

/// The session core.
#[derive(Debug)]
pub(crate) struct SessionCore<R, S, P> {
    version: ProtocolVersion,
    generation: Generation,
    state: SessionState,
    limits: SessionLimits,
    log_level: Option<LogLevel>,
    in_flight: HashMap<JsonRpcId, InFlight<R>>,
    pending: HashMap<JsonRpcId, ClientRequest<P>>,
    streams: StreamTable<StreamEntry<S>>,
    closed_order: VecDeque<StreamId>,
    retained_bytes: usize,
    get_stream: Option<StreamId>,
    next_stream: u64,
    next_client_request: i64,
    last_activity: Tick,
    attached_connections: usize,
    incarnation: u32,
    /// The last-used time last handed to the ledger.
    recorded: Tick,
    /// Something besides the last use changed (log level).
    dirty: bool,
    /// When it last woke from hibernation (or was made): it stays awake for
    /// `hibernate_after_ms` from then, whatever its last activity.
    awake_since: Tick,
}

/// What a hibernating session keeps of its core: enough to go on where it stopped (its
/// numbering, log level, last use and what its record says), and nothing of its tables,
/// which were empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SleepingCore {
    version: ProtocolVersion,
    generation: Generation,
    log_level: Option<LogLevel>,
    next_stream: u64,
    next_client_request: i64,
    last_activity: Tick,
    incarnation: u32,
    recorded: Tick,
    dirty: bool,
}

/// How far a sleeping session's record may lag its last use for a stop to leave it as it is
/// ([`SleepingCore::record_is_current_within`]): restored after the restart, the session
/// expires at most this much early, and never more than a sixteenth of its idle TTL (a
/// sleeping session's record never lags more: [`SleepingCore::try_take_use`]). Its LRU row,
/// which orders the ledger's session cap, states the last use exactly. A second covers the
/// handshake's own `notifications/initialized`, a round trip after the record.
pub(crate) const STOP_RECORD_SLACK_MS: u64 = 1_000;

/// Whether a last use of `last` makes a record that states `recorded` due: more than a
/// sixteenth of the idle TTL behind (a crash then loses at most that much of its lifetime).
fn record_moved(last: Tick, recorded: Tick, idle_ttl_ms: u64) -> bool {
    last.0.saturating_sub(recorded.0) > idle_ttl_ms / 16
}

impl SleepingCore {
    /// Its protocol version.
    #[must_use]
    pub(crate) fn version(&self) -> ProtocolVersion {
        self.version
    }

    /// A message that asks for nothing but to count as a use (a notification, an answer to
    /// no question of its: a hibernating session has none) reached it at `now`: its last use
    /// moves there, unless its record would then be due (the last use it states more than a
    /// sixteenth of `idle_ttl_ms` behind, as an awake core's [`SessionCore::poll_ledger`]
    /// judges it). Returns whether it took the message; if not, the message wakes it, and its
    /// awake core records the use.
    pub(crate) fn try_take_use(&mut self, now: Tick, idle_ttl_ms: u64) -> bool {
        let now = self.last_activity.max(now);
        if record_moved(now, self.recorded, idle_ttl_ms) {
            return false;
        }
        self.last_activity = now;
        true
    }

    /// Its last use.
    #[must_use]
    pub(crate) fn last_activity(&self) -> Tick {
        self.last_activity
    }

    /// Whether the record last handed to the ledger states it as it is, its last use at most
    /// `slack_ms` behind. A stop then has no record to write again, only the session's place
    /// among those out of memory. (`dirty` is checked though a sleeping core is never dirty
    /// today: a session writes its record before it sleeps, and `logging/setLevel` wakes it.)
    #[must_use]
    pub(crate) fn record_is_current_within(&self, slack_ms: u64) -> bool {
        !self.dirty && self.last_activity.0.saturating_sub(self.recorded.0) <= slack_ms
    }
}

impl<R, S, P> SessionCore<R, S, P> {
    /// A new active session.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn new(
        version: ProtocolVersion,
        generation: Generation,
        limits: SessionLimits,
        now: Tick,
    ) -> Self {
        Self::incarnate(version, generation, limits, now, 0)
    }

    /// A session in its `incarnation`-th life (0: just created; then one more per restore).
    #[must_use]
    pub(crate) fn incarnate(
        version: ProtocolVersion,
        generation: Generation,
        limits: SessionLimits,
        now: Tick,
        incarnation: u32,
    ) -> Self {
        let base = u64::from(incarnation) << 32;
        SessionCore {
            version,
            generation,
            state: SessionState::Active,
            limits,
            log_level: None,
            in_flight: HashMap::new(),
            pending: HashMap::new(),
            streams: StreamTable::default(),
            closed_order: VecDeque::new(),
            retained_bytes: 0,
            get_stream: None,
            next_stream: base + 1,
            next_client_request: base as i64 + 1,
            last_activity: now,
            attached_connections: 0,
            incarnation,
            recorded: now,
            // Its record is written when it begins (or begins again).
            dirty: true,
            awake_since: now,
        }
    }

    /// What it keeps while it hibernates, and when it must be woken without a request (it
    /// expires or parks then); `None` unless it is active with nothing at all in its tables
    /// (no request, connection, stream or client request).
    #[must_use]
    pub(crate) fn sleep(&self) -> Option<(SleepingCore, Tick)> {
        let wake_at = [self.idle_deadline(), self.park_deadline()].into_iter().flatten().min()?;
        self.tables_empty().then_some((
            SleepingCore {
                version: self.version,
                generation: self.generation,
                log_level: self.log_level,
                next_stream: self.next_stream,
                next_client_request: self.next_client_request,
                last_activity: self.last_activity,
                incarnation: self.incarnation,
                recorded: self.recorded,
                dirty: self.dirty,
            },
            wake_at,
        ))
    }

    /// A hibernating session's core, woken at `now` (it stays awake for `hibernate_after_ms`
    /// at least); its last activity is not moved: a wake is not a use.
    #[must_use]
    pub(crate) fn wake(s: SleepingCore, limits: SessionLimits, now: Tick) -> Self {
        let mut core =
            Self::incarnate(s.version, s.generation, limits, s.last_activity, s.incarnation);
        core.log_level = s.log_level;
        core.next_stream = s.next_stream;
        core.next_client_request = s.next_client_request;
        core.recorded = s.recorded;
        core.dirty = s.dirty;
        core.awake_since = now;
        core
    }

    /// Its hibernation was refused (a request is on its way): it stays awake for another
    /// `hibernate_after_ms`.
    pub(crate) fn stay_awake(&mut self, now: Tick) {
        self.awake_since = now;
    }

    /// When it hibernates if nothing happens: `hibernate_after_ms` after it became idle with
    /// empty tables, or after it woke, whichever is later (`None` while anything is open).
    #[must_use]
    pub(crate) fn hibernate_deadline(&self) -> Option<Tick> {
        let since = self.idle_since().filter(|_| self.tables_empty())?.max(self.awake_since);
        Some(since.plus_ms(self.limits.hibernate_after_ms))
    }

    /// No stream (open or kept) and no client request: with nothing in flight, nothing of the
    /// session is left but its numbering and settings.
    fn tables_empty(&self) -> bool {
        self.streams.is_empty() && self.pending.is_empty()
    }

    /// Which life this is.
    #[must_use]
    pub(crate) fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Last activity.
    #[must_use]
    pub(crate) fn last_activity(&self) -> Tick {
        self.last_activity
    }

    fn busy(&self) -> bool {
        self.attached_connections > 0 || !self.in_flight.is_empty()
    }

    /// When a busy session's record must be refreshed (so it does not expire in the ledger
    /// while the session is in use).
    fn refresh_at(&self) -> Option<Tick> {
        self.busy().then(|| self.recorded.plus_ms(self.limits.idle_ttl_ms / 2))
    }

    /// The last-use time to record in the ledger now, if the record must be written.
    pub(crate) fn poll_ledger(&mut self, now: Tick) -> Option<Tick> {
        if self.state != SessionState::Active {
            return None;
        }
        let moved = record_moved(self.last_activity, self.recorded, self.limits.idle_ttl_ms);
        let due = self.refresh_at().is_some_and(|t| now >= t);
        if !(self.dirty || moved || due) {
            return None;
        }
        // In use counts as used now.
        let used = if self.busy() { now.max(self.last_activity) } else { self.last_activity };
        self.dirty = false;
        self.recorded = used;
        Some(used)
    }

    /// Register a stream rebuilt from the ledger: `request` is the POST's request (`None` for
    /// the GET stream), `closed` with the bytes its window holds when it produced its last
    /// event. Returns the streams the shell must stop and forget: closed ones evicted to
    /// respect the retention bounds, and an older open GET stream this one replaces.
    pub(crate) fn restore_stream(
        &mut self,
        sid: StreamId,
        request: Option<JsonRpcId>,
        closed: Option<usize>,
        handle: S,
    ) -> Evicted<S> {
        let is_get = request.is_none();
        self.streams.insert(sid, StreamEntry { request, closed: false, retained_bytes: 0, handle });
        // Only a stream of this life moves its numbering on: one of another life (an earlier
        // one, or a host that is gone whose stream was taken over) keeps its own range, which
        // this life never numbers in.
        if sid.0 >> 32 == self.next_stream >> 32 {
            self.next_stream = self.next_stream.max(sid.0 + 1);
        }
        let mut gone = Evicted::new();
        if is_get
            && closed.is_none()
            && let Some(old) = self.get_stream.replace(sid)
        {
            gone.extend(self.remove_stream(old));
        }
        if let Some(bytes) = closed {
            gone.extend(self.stream_closed(sid, bytes));
        }
        gone
    }

    /// Negotiated version.
    #[must_use]
    pub(crate) fn version(&self) -> ProtocolVersion {
        self.version
    }

    /// Generation.
    #[must_use]
    pub(crate) fn generation(&self) -> Generation {
        self.generation
    }

    /// Lifecycle state.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn state(&self) -> SessionState {
        self.state
    }

    /// Minimum level for `notifications/message`; `None` until `logging/setLevel`.
    #[must_use]
    pub(crate) fn log_level(&self) -> Option<LogLevel> {
        self.log_level
    }

    /// `logging/setLevel`.
    pub(crate) fn set_log_level(&mut self, level: LogLevel) {
        if self.log_level != Some(level) {
            self.dirty = true;
        }
        self.log_level = Some(level);
    }

    /// `logging/setLevel` answered (and recorded) by another host serving this session.
    pub(crate) fn heard_log_level(&mut self, level: LogLevel) {
        self.log_level = Some(level);
    }

    /// Record activity (any request on the session).
    pub(crate) fn touch(&mut self, now: Tick) {
        self.last_activity = self.last_activity.max(now);
    }

    /// Whether a request may use this session.
    ///
    /// # Errors
    /// [`Rejection::SessionNotFound`] once it is no longer active.
    pub(crate) fn check_active(&self) -> Result<(), Rejection> {
        if self.state == SessionState::Active { Ok(()) } else { Err(Rejection::SessionNotFound) }
    }

    /// Register a request id.
    ///
    /// # Errors
    /// [`Rejection::RequestIdInFlight`] when the id is still being served (the original is
    /// not disturbed); [`Rejection::Overloaded`] past `max_in_flight`.
    pub(crate) fn begin_request(&mut self, id: &JsonRpcId, handle: R) -> Result<(), Rejection> {
        self.check_active()?;
        if self.in_flight.contains_key(id) {
            return Err(Rejection::RequestIdInFlight(id.clone()));
        }
        if self.in_flight.len() >= self.limits.max_in_flight {
            return Err(Rejection::Overloaded(Overload::InFlight));
        }
        self.in_flight.insert(id.clone(), InFlight { stream: None, handle });
        Ok(())
    }

    /// The ids of the requests in flight whose handle `pick` selects.
    pub(crate) fn in_flight_where(&self, pick: impl Fn(&R) -> bool) -> Vec<JsonRpcId> {
        self.in_flight.iter().filter(|(_, f)| pick(&f.handle)).map(|(id, _)| id.clone()).collect()
    }

    /// Mutable access to an in-flight request (to attach its stream or handle).
    pub(crate) fn in_flight_mut(&mut self, id: &JsonRpcId) -> Option<&mut InFlight<R>> {
        self.in_flight.get_mut(id)
    }

    /// The request finished (or was cancelled) at `now`: forget it, and every client request
    /// its tool was waiting on. The idle clock restarts from here, so a long request does not
    /// leave its session expiring the moment it ends.
    pub(crate) fn end_request(&mut self, id: &JsonRpcId, now: Tick) -> Option<InFlight<R>> {
        let ended = self.in_flight.remove(id);
        if ended.is_some() {
            self.touch(now);
            if !self.pending.is_empty() {
                self.pending.retain(|_, p| p.origin != *id);
            }
        }
        ended
    }

    /// Requests in flight.
    #[must_use]
    pub(crate) fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// A tool of request `origin` sends a server-to-client request at `now`: allocate its id
    /// (never reused within the session) and start its deadline.
    ///
    /// # Errors
    /// The handle back, with why, when `origin` is no longer in flight or too many client
    /// requests are waiting.
    pub(crate) fn begin_client_request(
        &mut self,
        origin: &JsonRpcId,
        method: &str,
        now: Tick,
        handle: P,
    ) -> Result<JsonRpcId, (P, ClientRequestRefused)> {
        if !self.in_flight.contains_key(origin) {
            return Err((handle, ClientRequestRefused::OriginEnded));
        }
        if self.pending.len() >= self.limits.max_in_flight {
            return Err((handle, ClientRequestRefused::TooMany));
        }
        let id = JsonRpcId::Number(self.next_client_request);
        self.next_client_request += 1;
        let deadline = now.plus_ms(self.limits.client_request_timeout_ms);
        self.pending.insert(
            id.clone(),
            ClientRequest { origin: origin.clone(), method: method.into(), deadline, handle },
        );
        Ok(id)
    }

    /// Whether client request `id` still waits for its answer.
    pub(crate) fn client_request_pending(&self, id: &JsonRpcId) -> bool {
        self.pending.contains_key(id)
    }

    /// The client requests still waiting for their answers.
    #[must_use]
    pub(crate) fn client_requests_waiting(&self) -> Vec<JsonRpcId> {
        self.pending.keys().cloned().collect()
    }

    /// How long a server-to-client request waits for its answer (ms).
    pub(crate) fn client_request_timeout_ms(&self) -> u64 {
        self.limits.client_request_timeout_ms
    }

    /// The client answered the request `id`; `None` when it is unknown (never sent, answered
    /// already, timed out, or its tool ended).
    pub(crate) fn answer_client_request(&mut self, id: &JsonRpcId) -> Option<ClientRequest<P>> {
        self.pending.remove(id)
    }

    /// Client requests waiting.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn client_requests_len(&self) -> usize {
        self.pending.len()
    }

    /// Allocate a stream id and register the POST stream of `request` (for tests; its shell
    /// does it in two steps, [`Self::alloc_stream`] then [`Self::insert_post_stream`], once
    /// the request's handler returned from its first poll).
    #[cfg(test)]
    pub(crate) fn open_post_stream(&mut self, request: &JsonRpcId, handle: S) -> StreamId {
        let sid = self.alloc_stream();
        self.insert_post_stream(sid, request.clone(), handle);
        sid
    }

    /// Register the POST stream `sid` ([`Self::alloc_stream`]) of `request`.
    pub(crate) fn insert_post_stream(&mut self, sid: StreamId, request: JsonRpcId, handle: S) {
        if let Some(f) = self.in_flight.get_mut(&request) {
            f.stream = Some(sid);
        }
        self.streams.insert(
            sid,
            StreamEntry { request: Some(request), closed: false, retained_bytes: 0, handle },
        );
    }

    /// Register a new standalone GET stream; returns the id and the stream it replaces.
    pub(crate) fn open_get_stream(&mut self, handle: S) -> (StreamId, Option<StreamEntry<S>>) {
        let sid = self.alloc_stream();
        self.streams
            .insert(sid, StreamEntry { request: None, closed: false, retained_bytes: 0, handle });
        let old = self.get_stream.replace(sid).and_then(|old| self.remove_stream(old));
        (sid, old)
    }

    /// Allocate the id of a new stream (registered next: its shell may need the id to make
    /// the stream's handle).
    pub(crate) fn alloc_stream(&mut self) -> StreamId {
        let sid = StreamId(self.next_stream);
        self.next_stream += 1;
        sid
    }

    /// Whether this session may have put an index of its streams in the ledger: it made or
    /// restored one in this life, or lives again (`false`: a first life that never had a
    /// stream; on a shared ledger other hosts' lives and streams taken in are not counted
    /// here).
    #[must_use]
    pub(crate) fn held_streams(&self) -> bool {
        // A life numbers its streams from `(incarnation << 32) + 1`: past 1, a stream of this
        // life was made or restored, or this is a later life. (A stream of another life taken
        // in during a first life does not move the numbering; that happens only on a shared
        // ledger, whose records push the index anyway.)
        self.next_stream > 1
    }

    /// The standalone GET stream, if one is registered.
    #[must_use]
    pub(crate) fn get_stream(&self) -> Option<(StreamId, &S)> {
        let sid = self.get_stream?;
        self.streams.get(&sid).map(|e| (sid, &e.handle))
    }

    /// Look up a stream named by a verified cursor.
    #[must_use]
    pub(crate) fn stream(&self, sid: StreamId) -> Option<&StreamEntry<S>> {
        self.streams.get(&sid)
    }

    /// The shell data of stream `sid`, to replace it (an actor started or stopped for it).
    pub(crate) fn stream_handle_mut(&mut self, sid: StreamId) -> Option<&mut S> {
        self.streams.get_mut(&sid).map(|e| &mut e.handle)
    }

    /// A stream finished producing events, holding `bytes` in its window. Returns the streams
    /// evicted to respect `max_retained_streams` and `max_retained_bytes`, oldest first (the
    /// shell stops them); the newest closed stream is never evicted.
    pub(crate) fn stream_closed(&mut self, sid: StreamId, bytes: usize) -> Evicted<S> {
        if let Some(e) = self.streams.get_mut(&sid)
            && !e.closed
        {
            e.closed = true;
            e.retained_bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
            self.retained_bytes += e.retained_bytes as usize;
            self.closed_order.push_back(sid);
        }
        let mut evicted = Evicted::new();
        while self.closed_order.len() > 1
            && (self.closed_order.len() > self.limits.max_retained_streams
                || self.retained_bytes > self.limits.max_retained_bytes)
        {
            if let Some(old) = self.closed_order.front().copied()
                && let Some(e) = self.remove_stream(old)
            {
                evicted.push(e);
            }
        }
        evicted
    }

    /// Forget a stream (its retention ended, or it was replaced or evicted).
    pub(crate) fn remove_stream(&mut self, sid: StreamId) -> Option<StreamEntry<S>> {
        if self.get_stream == Some(sid) {
            self.get_stream = None;
        }
        if let Some(pos) = self.closed_order.iter().position(|s| *s == sid) {
            self.closed_order.remove(pos);
        }
        let e = self.streams.remove(&sid)?;
        if e.closed {
            self.retained_bytes -= e.retained_bytes as usize;
        }
        Some(e)
    }

    /// The streams in the table whose shell data `keep` takes.
    pub(crate) fn stream_ids_where<'a>(
        &'a self,
        keep: impl Fn(&S) -> bool + 'a,
    ) -> impl Iterator<Item = StreamId> + 'a {
        self.streams.iter().filter(move |(_, e)| keep(&e.handle)).map(|(sid, _)| sid)
    }

    /// Bytes of closed streams retained.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn retained_bytes(&self) -> usize {
        self.retained_bytes
    }

    /// A resume of stream `sid` found the events after its cursor lost, and the stream
    /// answered its request with an "events lost" error: that request ends now (its id is
    /// free again, its client requests are forgotten). Returns it for the shell to cancel its
    /// tool; `None` when the request had ended already.
    pub(crate) fn events_lost(&mut self, sid: StreamId, now: Tick) -> Option<InFlight<R>> {
        let request = self.streams.get(&sid)?.request.clone()?;
        if self.in_flight.get(&request)?.stream != Some(sid) {
            return None;
        }
        self.end_request(&request, now)
    }

    /// A connection attached to (`true`) or detached from one of this session's streams. A
    /// session with an attached connection is never idle; the idle clock restarts on each
    /// change.
    pub(crate) fn connection_delta(&mut self, now: Tick, attached: bool) {
        self.touch(now);
        if attached {
            self.attached_connections += 1;
        } else {
            debug_assert!(self.attached_connections > 0, "a connection detached twice");
            self.attached_connections = self.attached_connections.saturating_sub(1);
        }
    }

    /// Connections attached now.
    #[must_use]
    pub(crate) fn attached_connections(&self) -> usize {
        self.attached_connections
    }

    /// When the session expires if nothing happens, or `None` while a connection is attached
    /// or a request is in flight (a tool still running for a disconnected client is work the
    /// client will resume to collect; a tool waiting on an absent client ends at its client
    /// request's deadline, after which the session becomes idle).
    #[must_use]
    pub(crate) fn idle_deadline(&self) -> Option<Tick> {
        self.idle_since().map(|t| t.plus_ms(self.limits.idle_ttl_ms))
    }

    fn idle_since(&self) -> Option<Tick> {
        (self.state == SessionState::Active && !self.busy()).then_some(self.last_activity)
    }

    /// When the session parks if nothing happens (`None` while busy, or when it would
    /// expire first).
    #[must_use]
    pub(crate) fn park_deadline(&self) -> Option<Tick> {
        (self.limits.park_after_ms < self.limits.idle_ttl_ms).then_some(())?;
        self.idle_since().map(|t| t.plus_ms(self.limits.park_after_ms))
    }

    /// The earliest moment [`Self::handle_timeout`] has something to do, if any.
    #[must_use]
    pub(crate) fn poll_timeout(&self) -> Option<Tick> {
        let client = self.pending.values().map(|p| p.deadline).min();
        let sleep = self.hibernate_deadline();
        [self.idle_deadline(), self.park_deadline(), client, self.refresh_at(), sleep]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advance time: give up client requests past their deadline (forgotten here; the shell
    /// fails their tools), expire the session when it has been idle for its TTL, or park it
    /// when idle for its park time (always, past both, when the ledger ends idle sessions:
    /// [`SessionLimits::idle_ends_in_ledger`]).
    pub(crate) fn handle_timeout(&mut self, now: Tick) -> Due<P> {
        let mut timed_out = Vec::new();
        if self.pending.values().any(|p| p.deadline <= now) {
            let due: Vec<JsonRpcId> = self
                .pending
                .iter()
                .filter(|(_, p)| p.deadline <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in due {
                if let Some(p) = self.pending.remove(&id) {
                    timed_out.push((id, p));
                }
            }
        }
        let park_due = self.park_deadline().is_some_and(|t| now >= t);
        let expired = match self.idle_deadline() {
            Some(_) if park_due && self.limits.idle_ends_in_ledger => false,
            Some(deadline) if now >= deadline => {
                self.state = SessionState::Expired;
                true
            }
            _ => false,
        };
        let park = !expired && park_due;
        let hibernate = !expired && !park && self.hibernate_deadline().is_some_and(|t| now >= t);
        Due { expired, park, hibernate, timed_out }
    }

    /// DELETE: the session stops accepting requests.
    ///
    /// # Errors
    /// [`Rejection::SessionNotFound`] when it is no longer active.
    pub(crate) fn request_delete(&mut self) -> Result<(), Rejection> {
        self.check_active()?;
        self.state = SessionState::DeleteRequested;
        Ok(())
    }

    /// Teardown finished (or shutdown): everything in flight and every stream is handed back
    /// for the shell to stop; waiting client requests are dropped.
    pub(crate) fn terminate(&mut self) -> Teardown<R, S> {
        if self.state != SessionState::Expired {
            self.state = SessionState::Terminated;
        }
        self.get_stream = None;
        self.closed_order.clear();
        self.retained_bytes = 0;
        self.pending.clear();
        (self.in_flight.drain().collect(), self.streams.take_all())
    }
}

#[cfg(test)]
mod tests;
