//! The session state machine: lifecycle, in-flight requests, stream table, server-to-client
//! request ids and idle expiry.
//!
//! ```text
//! ACTIVE -> DELETE_REQUESTED -> TERMINATED
//! ACTIVE -> EXPIRED
//! EXPIRED | TERMINATED -> (client must) REINITIALIZE   [404 on any use]
//! ```
//!
//! Generic over the shell's per-request data `R` (e.g. a task handle) and per-stream data `S`
//! (e.g. an actor address), so the shell keeps no second table. Memory stays bounded: at most
//! `max_in_flight` requests and `max_retained_streams` closed streams; ids of answered
//! requests are not remembered.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::error::Rejection;
use super::ids::{Generation, JsonRpcId, SessionId, StreamId, Tick};
use super::mcp::LogLevel;
use super::version::ProtocolVersion;

/// Lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
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
pub struct SessionLimits {
    /// Idle time after which the session expires, in milliseconds.
    pub idle_ttl_ms: u64,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
    /// Most closed streams kept for late resumes (oldest evicted first).
    pub max_retained_streams: usize,
}

/// A request being served.
#[derive(Debug)]
pub struct InFlight<R> {
    /// Its response stream (SSE) or `None` (JSON reply).
    pub stream: Option<StreamId>,
    /// Shell data (task handle, cancellation token...).
    pub handle: R,
}

/// A stream in the table.
#[derive(Debug)]
pub struct StreamEntry<S> {
    /// The request it answers, or `None` for the standalone GET stream.
    pub request: Option<JsonRpcId>,
    /// Closed (kept for late resumes only).
    pub closed: bool,
    /// Shell data (actor address).
    pub handle: S,
}

/// Everything a terminated session hands back to its shell: in-flight requests and streams.
pub type Teardown<R, S> = (Vec<(JsonRpcId, InFlight<R>)>, Vec<StreamEntry<S>>);

/// The session core.
#[derive(Debug)]
pub struct SessionCore<R, S> {
    id: SessionId,
    principal: Option<Arc<str>>,
    version: ProtocolVersion,
    generation: Generation,
    state: SessionState,
    limits: SessionLimits,
    log_level: Option<LogLevel>,
    in_flight: HashMap<JsonRpcId, InFlight<R>>,
    streams: HashMap<StreamId, StreamEntry<S>>,
    closed_order: VecDeque<StreamId>,
    get_stream: Option<StreamId>,
    next_stream: u64,
    next_server_request: i64,
    last_activity: Tick,
    attached_connections: usize,
}

impl<R, S> SessionCore<R, S> {
    /// A new active session.
    #[must_use]
    pub fn new(id: SessionId, principal: Option<Arc<str>>, version: ProtocolVersion, generation: Generation, limits: SessionLimits, now: Tick) -> Self {
        SessionCore {
            id,
            principal,
            version,
            generation,
            state: SessionState::Active,
            limits,
            log_level: None,
            in_flight: HashMap::new(),
            streams: HashMap::new(),
            closed_order: VecDeque::new(),
            get_stream: None,
            next_stream: 1,
            next_server_request: 1,
            last_activity: now,
            attached_connections: 0,
        }
    }

    /// Session id.
    #[must_use]
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Owner, when authentication is on.
    #[must_use]
    pub fn principal(&self) -> Option<&Arc<str>> {
        self.principal.as_ref()
    }

    /// Negotiated version.
    #[must_use]
    pub fn version(&self) -> ProtocolVersion {
        self.version
    }

    /// Generation.
    #[must_use]
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Lifecycle state.
    #[must_use]
    pub fn state(&self) -> SessionState {
        self.state
    }

    /// Minimum level for `notifications/message`; `None` until `logging/setLevel`.
    #[must_use]
    pub fn log_level(&self) -> Option<LogLevel> {
        self.log_level
    }

    /// `logging/setLevel`.
    pub fn set_log_level(&mut self, level: LogLevel) {
        self.log_level = Some(level);
    }

    /// Record activity (any request on the session).
    pub fn touch(&mut self, now: Tick) {
        self.last_activity = self.last_activity.max(now);
    }

    /// Whether a request may use this session.
    ///
    /// # Errors
    /// [`Rejection::SessionNotFound`] once it is no longer active.
    pub fn check_active(&self) -> Result<(), Rejection> {
        if self.state == SessionState::Active { Ok(()) } else { Err(Rejection::SessionNotFound) }
    }

    /// Register a request id.
    ///
    /// # Errors
    /// [`Rejection::RequestIdInFlight`] when the id is still being served (the original is
    /// not disturbed); [`Rejection::Overloaded`] past `max_in_flight`.
    pub fn begin_request(&mut self, id: &JsonRpcId, handle: R) -> Result<(), Rejection> {
        self.check_active()?;
        if self.in_flight.contains_key(id) {
            return Err(Rejection::RequestIdInFlight(id.clone()));
        }
        if self.in_flight.len() >= self.limits.max_in_flight {
            return Err(Rejection::Overloaded { retry_after_s: 1 });
        }
        self.in_flight.insert(id.clone(), InFlight { stream: None, handle });
        Ok(())
    }

    /// Mutable access to an in-flight request (to attach its stream or handle).
    pub fn in_flight_mut(&mut self, id: &JsonRpcId) -> Option<&mut InFlight<R>> {
        self.in_flight.get_mut(id)
    }

    /// The request finished (or was cancelled) at `now`: forget it. The idle clock restarts
    /// from here, so a long request does not leave its session expiring the moment it ends.
    pub fn end_request(&mut self, id: &JsonRpcId, now: Tick) -> Option<InFlight<R>> {
        let ended = self.in_flight.remove(id);
        if ended.is_some() {
            self.touch(now);
        }
        ended
    }

    /// Requests in flight.
    #[must_use]
    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// Allocate a stream id and register the POST stream of `request`.
    pub fn open_post_stream(&mut self, request: &JsonRpcId, handle: S) -> StreamId {
        let sid = self.alloc_stream();
        self.streams.insert(sid, StreamEntry { request: Some(request.clone()), closed: false, handle });
        if let Some(f) = self.in_flight.get_mut(request) {
            f.stream = Some(sid);
        }
        sid
    }

    /// Register a new standalone GET stream; returns the id and the stream it replaces.
    pub fn open_get_stream(&mut self, handle: S) -> (StreamId, Option<StreamEntry<S>>) {
        let sid = self.alloc_stream();
        self.streams.insert(sid, StreamEntry { request: None, closed: false, handle });
        let old = self.get_stream.replace(sid).and_then(|old| self.streams.remove(&old));
        (sid, old)
    }

    fn alloc_stream(&mut self) -> StreamId {
        let sid = StreamId(self.next_stream);
        self.next_stream += 1;
        sid
    }

    /// Peek the next stream id (the shell builds the stream before registering it).
    #[must_use]
    pub fn next_stream_id(&self) -> StreamId {
        StreamId(self.next_stream)
    }

    /// The standalone GET stream, if one is registered.
    #[must_use]
    pub fn get_stream(&self) -> Option<(StreamId, &S)> {
        let sid = self.get_stream?;
        self.streams.get(&sid).map(|e| (sid, &e.handle))
    }

    /// Look up a stream named by a verified cursor.
    #[must_use]
    pub fn stream(&self, sid: StreamId) -> Option<&StreamEntry<S>> {
        self.streams.get(&sid)
    }

    /// A stream finished producing events. Returns the streams evicted to respect
    /// `max_retained_streams` (the shell stops them).
    pub fn stream_closed(&mut self, sid: StreamId) -> Vec<StreamEntry<S>> {
        if let Some(e) = self.streams.get_mut(&sid)
            && !e.closed {
                e.closed = true;
                self.closed_order.push_back(sid);
            }
        let mut evicted = Vec::new();
        while self.closed_order.len() > self.limits.max_retained_streams {
            if let Some(old) = self.closed_order.pop_front()
                && let Some(e) = self.remove_stream(old) {
                    evicted.push(e);
                }
        }
        evicted
    }

    /// Forget a stream (its retention ended).
    pub fn remove_stream(&mut self, sid: StreamId) -> Option<StreamEntry<S>> {
        if self.get_stream == Some(sid) {
            self.get_stream = None;
        }
        if let Some(pos) = self.closed_order.iter().position(|s| *s == sid) {
            self.closed_order.remove(pos);
        }
        self.streams.remove(&sid)
    }

    /// Streams in the table (open and retained).
    #[must_use]
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// A connection attached to or detached from one of this session's streams. A session
    /// with an attached connection is never idle.
    pub fn connection_delta(&mut self, now: Tick, attached: bool) {
        self.touch(now);
        if attached {
            self.attached_connections += 1;
        } else {
            self.attached_connections = self.attached_connections.saturating_sub(1);
        }
    }

    /// A fresh id for a server-to-client request; never reused within the session.
    pub fn next_server_request_id(&mut self) -> JsonRpcId {
        let id = JsonRpcId::Number(self.next_server_request);
        self.next_server_request += 1;
        id
    }

    /// When the session expires if nothing happens, or `None` while a connection is attached
    /// or a request is in flight (a tool still running for a disconnected client is work the
    /// client will resume to collect; expiry would cancel it).
    #[must_use]
    pub fn idle_deadline(&self) -> Option<Tick> {
        (self.state == SessionState::Active && self.attached_connections == 0 && self.in_flight.is_empty())
            .then(|| self.last_activity.plus_ms(self.limits.idle_ttl_ms))
    }

    /// Advance time; returns `true` when the session just expired.
    pub fn handle_timeout(&mut self, now: Tick) -> bool {
        match self.idle_deadline() {
            Some(deadline) if now >= deadline => {
                self.state = SessionState::Expired;
                true
            }
            _ => false,
        }
    }

    /// DELETE: the session stops accepting requests.
    pub fn request_delete(&mut self) -> Result<(), Rejection> {
        self.check_active()?;
        self.state = SessionState::DeleteRequested;
        Ok(())
    }

    /// Teardown finished (or shutdown): everything in flight and every stream is handed back
    /// for the shell to stop.
    pub fn terminate(&mut self) -> Teardown<R, S> {
        if self.state != SessionState::Expired {
            self.state = SessionState::Terminated;
        }
        self.get_stream = None;
        self.closed_order.clear();
        (self.in_flight.drain().collect(), self.streams.drain().map(|(_, e)| e).collect())
    }
}

#[cfg(test)]
mod tests;
