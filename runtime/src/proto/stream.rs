//! The stream state machine: one SSE stream (a POST's response stream or the standalone GET
//! stream), its replay window, and which connection (if any) is attached.
//!
//! ```text
//! OPEN -> DISCONNECTED -> (resume) -> OPEN | CURSOR_REJECTED
//! OPEN -> CLOSED (final response or cancellation; kept for late resumes)
//! ```
//!
//! Every message gets the next sequence number and is appended to the window *before* it is
//! offered to the attached connection, so a detach at any point loses nothing that the window
//! still holds. Connections are numbered; a detach from an old connection is ignored.
//!
//! Durability: what the ledger must record comes out of [`StreamCore::poll_ledger`] (each
//! event, and "the record changed" when the stream opens, closes or is acknowledged). A
//! stream that is answered while its connection writes it (a tool that finishes at once)
//! is held back until that connection ends: if it returned every frame nothing is owed after
//! a restart and nothing is recorded; if not, the stream is recorded then. With
//! `hold_until_committed` (ledger durability `sync`) an event reaches no connection, neither
//! live nor in a replay, before the shell reports its commit ([`StreamCore::committed`]).

use std::sync::Arc;

use bytes::Bytes;

use super::error::Rejection;
use super::event_id::{CursorSigner, ENCODED_LEN, EventId};
use super::ids::{Generation, JsonRpcId, Seq, StreamId, Tick};
use super::jsonrpc::{ErrorObject, code, encode_error};
use super::replay::{ReplayError, ReplayWindow, WindowLimits};
use super::rollout::{ShadowSent, StreamMode};
use crate::sse;

/// What the stream carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// The response stream of a POSTed request.
    Post {
        /// The request it answers.
        request: JsonRpcId,
    },
    /// The standalone GET stream.
    Get,
}

/// Lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamState {
    /// A connection is attached.
    Open,
    /// No connection; events accumulate in the window.
    Disconnected,
    /// Finished: no more events will be produced.
    Closed(CloseReason),
}

/// Why a stream closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// The final response was appended (also the "server restarted" error of a request
    /// that was running when the process stopped).
    Responded,
    /// The request was cancelled; it gets no response.
    Cancelled,
    /// A resume found a gap; the request was answered with an "events lost" error.
    EventsLost,
    /// The session ended.
    SessionEnded,
    /// A newer standalone GET stream replaced this one.
    Replaced,
    /// Evicted from retention by the session's bounds.
    Evicted,
}

/// How long a closed stream with no connection attached stays resumable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retention {
    /// Its last connection returned its final frame in full, or nothing is owed (cancelled):
    /// kept briefly for late resumes.
    Delivered,
    /// Its final response has not been handed out in full: kept long, for the client to
    /// come back for it.
    Undelivered,
}

/// Settings shared by every stream of a session.
#[derive(Debug, Clone)]
pub(crate) struct StreamSettings {
    /// Replay window bounds.
    pub window: WindowLimits,
    /// Send a priming event first (session negotiated >= 2025-11-25).
    pub prime: bool,
    /// `retry` hint in milliseconds, sent with priming and before server-initiated closes.
    pub retry_ms: Option<u64>,
    /// Release an event to connections only once the ledger committed it (resumable
    /// streams only).
    pub hold_until_committed: bool,
    /// Resumable, shadowed or plain (from the rollout flags of its generation).
    pub mode: StreamMode,
    /// Its keep-alive and retention times.
    pub timing: StreamTiming,
}

impl StreamSettings {
    /// Whether a stream with these settings answered at once may be kept as data
    /// ([`AnsweredAtOnce`]): a resumable one whose answer goes out without waiting for a
    /// commit.
    pub(crate) fn answers_at_once(&self) -> bool {
        self.mode == StreamMode::Resumable && !self.hold_until_committed
    }
}

/// How long a stream lets its connection stay quiet and keeps itself once closed (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamTiming {
    /// A comment goes to an attached connection quiet this long.
    pub keepalive_ms: u64,
    /// [`Retention::Delivered`].
    pub retention_after_delivery_ms: u64,
    /// [`Retention::Undelivered`].
    pub retention_undelivered_ms: u64,
}

/// What is due at a deadline ([`StreamCore::handle_timeout`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StreamDue {
    /// The retention ended: the stream's life is over.
    pub retention_over: bool,
    /// Write a keep-alive comment to the attached connection.
    pub keepalive: bool,
}

/// What the ledger must record for a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StreamChange {
    /// Append this event to the stream's log.
    Event {
        /// Its sequence number.
        seq: Seq,
        /// Its encoded frame.
        frame: Bytes,
    },
    /// The stream's record changed (opened, closed, acknowledged): write it again.
    Record,
}

/// Frames a connection writes first: the priming event and an answer inline (most replies),
/// a replay on the heap.
pub(crate) type Frames = smallvec::SmallVec<[Bytes; 2]>;

/// A connection attachment: its number and the frames to write first.
#[derive(Debug)]
#[must_use = "the initial frames must be written to the new connection"]
pub(crate) struct Attachment {
    /// Connection number, echoed in [`StreamCore::detach`].
    pub conn: u64,
    /// Frames to write before live events (priming or replay).
    pub initial: Frames,
    /// The stream is closed: end the connection after `initial`.
    pub end_after_initial: bool,
}

/// What to do with a frame after appending it.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a delivery must be offered to the attached connection"]
pub(crate) enum Delivery {
    /// No connection is attached; the window keeps the frame.
    Buffered,
    /// Held until the ledger commits it (`hold_until_committed`); [`StreamCore::committed`]
    /// releases it.
    Held,
    /// Write the frame to connection `conn`.
    Write {
        /// Connection number.
        conn: u64,
        /// The frame.
        frame: Bytes,
        /// End the connection after this frame (final response).
        end: bool,
    },
    /// The stream is closed; the message was dropped.
    Dropped,
}

/// Counters the shell exports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamStats {
    /// Messages appended.
    pub events: u64,
    /// Successful resumes.
    pub resumes: u64,
    /// Resumes refused because of a gap.
    pub gaps: u64,
    /// Messages dropped because the stream was closed.
    pub dropped_after_close: u64,
    /// Messages of a plain (not resumable) stream produced while no connection was attached:
    /// lost, as its client was never told it could resume.
    pub lost_unattached: u64,
}

/// One stream.
#[derive(Debug)]
pub(crate) struct StreamCore {
    id: StreamId,
    generation: Generation,
    kind: StreamKind,
    signer: Arc<CursorSigner>,
    settings: StreamSettings,
    window: ReplayWindow,
    state: StreamState,
    conn: Option<u64>,
    next_conn: u64,
    /// An event id went out on the current connection (polling close is allowed).
    id_sent: bool,
    /// The last connection of the closed stream returned every frame (see [`Retention`]).
    delivered: bool,
    /// Newest event the client acknowledged (a resume's cursor).
    acked: Seq,
    /// Newest event that may reach a connection (the newest one unless holding).
    released: Seq,
    ledger: Vec<StreamChange>,
    /// Nothing has been handed to the ledger yet.
    unrecorded: bool,
    /// Closed and delivered before anything of it was recorded: it never will be (a later
    /// resume's acknowledgement is not recorded either: its record would name no event).
    settled: bool,
    stats: StreamStats,
    /// What a shadow stream sent (for its verification).
    shadow: Option<ShadowSent>,
    /// When the shell last wrote to the attached connection (or attached it).
    last_write: Tick,
    /// The retention that applies and since when (restarted when it changes).
    retention_since: Option<(Retention, Tick)>,
}

/// All a settled stream answered in its first write keeps ([`StreamCore::settled_answer`]).
/// Such a stream is resumable, never holds for a commit, and has counted its answer alone
/// ([`SettledAnswer::MODE`], [`SettledAnswer::COUNTERS`]).
#[derive(Debug, Clone)]
pub(crate) struct SettledAnswer {
    /// The request it answers.
    request: JsonRpcId,
    /// Its answer (the only event of its window).
    answer: KeptAnswerBytes,
    /// When its retention began.
    since: Tick,
    /// When its shell last wrote to it (unused once closed; kept so the rebuilt core is the same).
    last_write: Tick,
    /// Whether it primed (its session's version and its generation's setting).
    prime: bool,
}

/// What a settled answer keeps of its frame. A session keeps up to
/// `sessions.max_retained_streams` (64) answered streams for a late resume, so a small
/// answer's overhead is paid many times over: its JSON alone takes less memory (and less
/// cache over many sessions) than the frame, with its cursor, and the header of its shared
/// buffer. That copy is made when the stream settles (as its frame is made, for one answered
/// at once: [`AnsweredAtOnce`]); past [`KeptAnswerBytes::COPY_AT_MOST`]
/// bytes the frame is kept as it is, whose overhead is then a small part of it.
#[derive(Debug, Clone)]
enum KeptAnswerBytes {
    /// Its JSON: a resume makes the frame again ([`StreamCore::from_settled`]; its cursor is
    /// its stream's first event's, so the same bytes).
    Json(Box<[u8]>),
    /// Its frame (boxed: the rarer case does not widen every kept answer).
    Frame(Box<Bytes>),
}

impl KeptAnswerBytes {
    /// The largest JSON copied out of its frame.
    const COPY_AT_MOST: usize = 1024;

    /// What to keep of the answer `frame`.
    fn of(frame: &Bytes) -> KeptAnswerBytes {
        let json = answer_json(frame);
        if json.len() <= Self::COPY_AT_MOST {
            KeptAnswerBytes::Json(json.into())
        } else {
            KeptAnswerBytes::Frame(Box::new(frame.clone()))
        }
    }

    /// The answer's JSON.
    fn json(&self) -> &[u8] {
        match self {
            KeptAnswerBytes::Json(json) => json,
            KeptAnswerBytes::Frame(frame) => answer_json(frame),
        }
    }

    /// The length of the answer's frame ([`answer_json`]'s layout around its JSON).
    fn frame_len(&self) -> usize {
        match self {
            KeptAnswerBytes::Json(json) => ANSWER_AT + json.len() + b"\n\n".len(),
            KeptAnswerBytes::Frame(frame) => frame.len(),
        }
    }
}

/// A POST stream answered at once, as its first connection writes it: what
/// [`StreamCore::new`], [`StreamCore::attach_new`] and [`StreamCore::push_final`] make of a
/// resumable stream that holds nothing for a commit, without a core ([`AnsweredAtOnce::new`]).
/// Its shell keeps this while that connection writes: the connection's end makes it a
/// [`SettledAnswer`] ([`AnsweredAtOnce::settled`]), or, when some frame may not have
/// arrived, the core itself ([`AnsweredAtOnce::into_core`]), rebuilt by those same calls.
#[derive(Debug)]
pub(crate) struct AnsweredAtOnce {
    /// What a settled stream keeps of the answer, made from its frame as the frame is made
    /// (so the frame goes to its connection without a second reference, whose shared
    /// buffer's header would be an allocation a call); [`AnsweredAtOnce::into_core`] pushes
    /// its JSON again.
    answer: KeptAnswerBytes,
    request: JsonRpcId,
    prime: bool,
}

impl AnsweredAtOnce {
    /// The connection every such stream is first attached with.
    pub(crate) const CONN: u64 = 1;

    /// Stream `id` of `generation`, answering `request` with `json`, signed by `signer`, with
    /// `settings` (resumable, not held: [`StreamSettings::answers_at_once`]); and its first
    /// connection's frames: the priming event (when it primes) and the answer.
    pub(crate) fn new(
        id: StreamId,
        generation: Generation,
        request: JsonRpcId,
        signer: &CursorSigner,
        settings: &StreamSettings,
        json: &[u8],
    ) -> (AnsweredAtOnce, Frames) {
        debug_assert!(settings.answers_at_once());
        let cursors = signer.stream(generation, id);
        let answer = sse::event_frame(&cursors.encode_array(Seq::START.next()), json);
        let mut initial = Frames::new();
        if settings.prime {
            let cursor = cursors.encode_array(Seq::START);
            initial.push(sse::priming_frame(&cursor, settings.retry_ms));
        }
        let kept = KeptAnswerBytes::of(&answer);
        initial.push(answer);
        (AnsweredAtOnce { answer: kept, request, prime: settings.prime }, initial)
    }

    /// Bytes its window holds (its answer's frame).
    pub(crate) fn retained_bytes(&self) -> usize {
        self.answer.frame_len()
    }

    /// Its connection returned every frame at `now`: nothing of it will ever be recorded. What
    /// it keeps from here, and when its retention ends with `timing` (what the core's
    /// [`StreamCore::settled_answer`] and [`StreamCore::poll_timeout`] give then).
    pub(crate) fn settled(self, now: Tick, timing: StreamTiming) -> (SettledAnswer, Tick) {
        let AnsweredAtOnce { request, prime, answer, .. } = self;
        let kept = SettledAnswer { request, answer, since: now, last_write: Tick(0), prime };
        let until = kept.retention_end(timing);
        (kept, until)
    }

    /// Its core as it is while its first connection writes, made by the calls this stands
    /// for (the same cursors, so the same frames): for a connection that may not have
    /// delivered every frame, or a resume that comes meanwhile.
    pub(crate) fn into_core(
        self,
        id: StreamId,
        generation: Generation,
        signer: Arc<CursorSigner>,
        settings: StreamSettings,
    ) -> StreamCore {
        let kind = StreamKind::Post { request: self.request.clone() };
        let mut core = StreamCore::new(id, generation, kind, signer, settings);
        let att = core.attach_new();
        debug_assert_eq!(att.conn, Self::CONN);
        let written = core.push_final(self.answer.json());
        debug_assert!(matches!(written, Delivery::Write { .. }), "{written:?}");
        core
    }
}

/// The JSON of an answer's `frame` as [`sse::event_frame`] wrote it: after `id: `, the
/// cursor (always [`ENCODED_LEN`] characters) and `\ndata: `, before the closing `\n\n`.
fn answer_json(frame: &[u8]) -> &[u8] {
    debug_assert!(frame[..ANSWER_AT].ends_with(b"\ndata: ") && frame.ends_with(b"\n\n"));
    &frame[ANSWER_AT..frame.len() - 2]
}

/// Where an answer's JSON starts in its frame ([`answer_json`]).
const ANSWER_AT: usize = b"id: ".len() + ENCODED_LEN + b"\ndata: ".len();

impl SettledAnswer {
    /// When its retention ends with `timing` (its core's only deadline: what
    /// [`StreamCore::poll_timeout`] gives for it).
    pub(crate) fn retention_end(&self, timing: StreamTiming) -> Tick {
        self.since.plus_ms(timing.retention_after_delivery_ms)
    }

    /// The mode of every settled stream.
    pub(crate) const MODE: StreamMode = StreamMode::Resumable;

    /// What every settled stream counted: its answer.
    pub(crate) const COUNTERS: StreamStats =
        StreamStats { events: 1, resumes: 0, gaps: 0, dropped_after_close: 0, lost_unattached: 0 };
}

/// A stream rebuilt from its ledger record.
#[derive(Debug)]
pub(crate) struct RestoredStream {
    /// Its events (the durable copy, oldest first).
    pub events: Vec<(Seq, Bytes)>,
    /// The newest sequence number it ever assigned.
    pub newest: Seq,
    /// The newest one its client acknowledged.
    pub acked: Seq,
    /// Why it closed; `None` when it was still running.
    pub closed: Option<CloseReason>,
    /// The first sequence number it may assign now: above any it could have sent before a
    /// crash (the durable copy may miss the last batch).
    pub first_seq: Seq,
}

impl StreamCore {
    /// A new stream with no connection.
    #[must_use]
    pub(crate) fn new(
        id: StreamId,
        generation: Generation,
        kind: StreamKind,
        signer: Arc<CursorSigner>,
        settings: StreamSettings,
    ) -> StreamCore {
        let window = ReplayWindow::new(settings.window);
        let mut s = StreamCore::with_window(id, generation, kind, signer, settings, window);
        if s.settings.mode != StreamMode::Plain {
            s.ledger.push(StreamChange::Record);
        }
        s
    }

    fn with_window(
        id: StreamId,
        generation: Generation,
        kind: StreamKind,
        signer: Arc<CursorSigner>,
        settings: StreamSettings,
        window: ReplayWindow,
    ) -> StreamCore {
        StreamCore {
            released: window.newest(),
            window,
            id,
            generation,
            kind,
            signer,
            state: StreamState::Disconnected,
            conn: None,
            next_conn: 1,
            id_sent: false,
            delivered: false,
            acked: Seq::START,
            ledger: Vec::new(),
            unrecorded: true,
            settled: false,
            stats: StreamStats::default(),
            shadow: (settings.mode == StreamMode::Shadow)
                .then(|| ShadowSent::new(settings.window.max_events)),
            settings,
            last_write: Tick(0),
            retention_since: None,
        }
    }

    /// Rebuild a stream from the ledger (after a restart, or when its session is revived from
    /// parking), with no connection. A POST stream whose request was still running when the
    /// process stopped cannot get its response any more: it is answered with a "server
    /// restarted" error ([`code::SERVER_RESTARTED`]) as its final event, recorded like any
    /// other, so the client that resumes learns it must re-issue the request.
    #[must_use]
    pub(crate) fn restore(
        id: StreamId,
        generation: Generation,
        kind: StreamKind,
        signer: Arc<CursorSigner>,
        settings: StreamSettings,
        r: RestoredStream,
    ) -> StreamCore {
        let mut window = ReplayWindow::restore(settings.window, r.newest, r.events);
        window.skip_to(r.first_seq);
        let mut s = StreamCore::with_window(id, generation, kind, signer, settings, window);
        s.unrecorded = false;
        s.acked = r.acked.min(s.window.newest());
        match (r.closed, &s.kind) {
            (Some(reason), _) => s.state = StreamState::Closed(reason),
            (None, StreamKind::Post { request }) => {
                let error = ErrorObject::new(
                    code::SERVER_RESTARTED,
                    "The server restarted while this request was running; its outcome is unknown. Re-issue it if running it again is safe.",
                );
                let json = encode_error(Some(request), &error);
                let delivery = s.append(&json, true);
                debug_assert!(matches!(delivery, Delivery::Buffered | Delivery::Held));
            }
            (None, StreamKind::Get) => {}
        }
        s
    }

    /// What the ledger must record since the last call, in order.
    /// `None` when there is nothing to record now.
    pub(crate) fn poll_ledger(&mut self) -> Option<std::vec::Drain<'_, StreamChange>> {
        if self.ledger.is_empty() {
            return None;
        }
        // (A shadow stream is always recorded: its copy is what it verifies.)
        if self.unrecorded
            && !self.settings.hold_until_committed
            && self.settings.mode == StreamMode::Resumable
            && self.state == StreamState::Closed(CloseReason::Responded)
            && self.conn.is_some()
        {
            // Answered while its connection writes it: decided when that connection ends.
            return None;
        }
        self.unrecorded = false;
        Some(self.ledger.drain(..))
    }

    /// Whether it was delivered whole before anything of it was recorded: it never will be.
    #[must_use]
    pub(crate) fn settled(&self) -> bool {
        self.settled
    }

    /// Whether anything of this stream was handed to the ledger (so its end must be).
    #[must_use]
    pub(crate) fn recorded(&self) -> bool {
        !self.unrecorded
    }

    /// The kind of stream.
    #[must_use]
    pub(crate) fn kind(&self) -> &StreamKind {
        &self.kind
    }

    /// The newest event the client acknowledged.
    #[must_use]
    pub(crate) fn acked(&self) -> Seq {
        self.acked
    }

    /// The newest sequence number assigned.
    #[must_use]
    pub(crate) fn newest(&self) -> Seq {
        self.window.newest()
    }

    /// Why it closed, if it did.
    #[must_use]
    pub(crate) fn close_reason(&self) -> Option<CloseReason> {
        match self.state {
            StreamState::Closed(r) => Some(r),
            _ => None,
        }
    }

    /// Generation it was opened under.
    #[must_use]
    pub(crate) fn generation(&self) -> Generation {
        self.generation
    }

    /// How it is served.
    #[must_use]
    pub(crate) fn mode(&self) -> StreamMode {
        self.settings.mode
    }

    /// What a shadow stream sent (`None` unless shadowed).
    #[must_use]
    pub(crate) fn shadow_sent(&self) -> Option<&ShadowSent> {
        self.shadow.as_ref()
    }

    /// The signer of its cursors (a shadow stream's verification decodes its copy's).
    #[must_use]
    pub(crate) fn signer(&self) -> &CursorSigner {
        &self.signer
    }

    /// The `retry` hint it sends.
    #[must_use]
    pub(crate) fn retry_ms(&self) -> Option<u64> {
        self.settings.retry_ms
    }

    /// Its replay bounds.
    #[must_use]
    pub(crate) fn window_limits(&self) -> WindowLimits {
        self.settings.window
    }

    /// The ledger committed every event up to `upto`: with `hold_until_committed`, the held
    /// frames go to the attached connection now, in order (the last may end it).
    pub(crate) fn committed(&mut self, upto: Seq) -> Vec<Delivery> {
        let upto = upto.min(self.window.newest());
        if upto <= self.released {
            return Vec::new();
        }
        let from = self.released;
        self.released = upto;
        let Some(conn) = self.conn else { return Vec::new() };
        let closed_at = matches!(self.state, StreamState::Closed(_)).then(|| self.window.newest());
        let frames: Vec<(Seq, Bytes)> = match self.window.events_after(from) {
            Ok(it) => it.take_while(|&(q, _)| q <= upto).map(|(q, f)| (q, f.clone())).collect(),
            // Evicted before their commit (a window smaller than the commit lag, or trimmed
            // for the memory budget): the connection ends here, never skipping them; its
            // client resumes and gets the explicit events-lost answer.
            Err(_) => return vec![Delivery::Write { conn, frame: Bytes::new(), end: true }],
        };
        if !frames.is_empty() {
            self.id_sent = true;
        }
        frames
            .into_iter()
            .map(|(q, frame)| Delivery::Write { conn, frame, end: closed_at == Some(q) })
            .collect()
    }

    /// Stream id.
    #[must_use]
    pub(crate) fn id(&self) -> StreamId {
        self.id
    }

    /// State.
    #[must_use]
    pub(crate) fn state(&self) -> StreamState {
        self.state
    }

    /// Counters.
    #[must_use]
    pub(crate) fn stats(&self) -> StreamStats {
        self.stats
    }

    /// The attached connection, if any.
    #[must_use]
    pub(crate) fn connection(&self) -> Option<u64> {
        self.conn
    }

    fn cursor(&self, seq: Seq) -> [u8; super::event_id::ENCODED_LEN] {
        self.signer.encode_array(&EventId { generation: self.generation, stream: self.id, seq })
    }

    fn new_conn(&mut self) -> u64 {
        let c = self.next_conn;
        self.next_conn += 1;
        if !matches!(self.state, StreamState::Closed(_)) {
            self.state = StreamState::Open;
        }
        self.conn = Some(c);
        self.id_sent = false;
        c
    }

    /// Attach the first connection of a new stream. Writes the priming event when the session
    /// primes (its cursor is `Seq::START`: resuming from it replays everything).
    pub(crate) fn attach_new(&mut self) -> Attachment {
        let conn = self.new_conn();
        let mut initial = Frames::new();
        if self.settings.prime && self.settings.mode == StreamMode::Resumable {
            initial.push(sse::priming_frame(
                &self.cursor(self.window.newest()),
                self.settings.retry_ms,
            ));
            self.id_sent = true;
        }
        Attachment { conn, initial, end_after_initial: false }
    }

    /// Attach a resuming connection after the event `after` (from a verified cursor). Any
    /// previously attached connection is superseded.
    ///
    /// A POST stream whose events after `after` were evicted answers its request with an
    /// "events lost" JSON-RPC error and closes (a stream that already answered sends the
    /// error without storing a second answer; a cancelled one is refused); a GET stream in
    /// that case is refused.
    ///
    /// # Errors
    /// [`Rejection::EventsLost`] for a gap on the GET stream; [`Rejection::CursorRejected`]
    /// for a cursor ahead of the stream.
    pub(crate) fn attach_resume(&mut self, after: Seq) -> Result<Attachment, Rejection> {
        if self.settings.mode != StreamMode::Resumable {
            // Its client was never given a cursor.
            return Err(Rejection::CursorRejected);
        }
        let released = self.released;
        let replay: Result<Frames, ReplayError> = self
            .window
            .events_after(after)
            .map(|it| it.take_while(|&(q, _)| q <= released).map(|(_, f)| f.clone()).collect());
        match replay {
            Ok(initial) => {
                self.stats.resumes += 1;
                if after > self.acked {
                    self.acked = after;
                    if !self.settled {
                        self.ledger.push(StreamChange::Record);
                    }
                }
                let end_after_initial = matches!(self.state, StreamState::Closed(_))
                    && self.released == self.window.newest();
                let conn = self.new_conn();
                self.id_sent = true;
                Ok(Attachment { conn, initial, end_after_initial })
            }
            Err(ReplayError::Ahead { .. }) => Err(Rejection::CursorRejected),
            Err(ReplayError::Gap(gap)) => {
                self.stats.gaps += 1;
                let StreamKind::Post { request } = &self.kind else {
                    return Err(Rejection::EventsLost);
                };
                let error = ErrorObject::new(code::EVENTS_LOST, "Events after Last-Event-ID were lost; the response to this request cannot be delivered")
                    .with_data(serde_json::json!({"oldestRetained": gap.oldest.0, "requested": gap.requested.0}));
                let json = encode_error(Some(request), &error);
                let frame = match self.state {
                    // A cancelled request is owed nothing, not even this error.
                    StreamState::Closed(CloseReason::Cancelled) => {
                        return Err(Rejection::EventsLost);
                    }
                    // Answered already (its response, or this error): the answer is not
                    // appended a second time; this connection gets the error, without an id.
                    StreamState::Closed(_) => sse::data_frame(&json),
                    // Still running: the error is the request's answer; the session ends it.
                    // (Not held for the ledger: it carries no result, and a resume after a
                    // restart that lost it finds the same gap and gets the same error.)
                    _ => {
                        let seq = self.window.next_seq();
                        let frame = sse::event_frame(&self.cursor(seq), &json);
                        let pushed = self.window.push(frame.clone());
                        debug_assert_eq!(pushed, seq);
                        self.released = seq;
                        self.state = StreamState::Closed(CloseReason::EventsLost);
                        self.ledger.push(StreamChange::Event { seq, frame: frame.clone() });
                        self.ledger.push(StreamChange::Record);
                        frame
                    }
                };
                let conn = self.new_conn();
                Ok(Attachment {
                    conn,
                    initial: smallvec::smallvec![frame],
                    end_after_initial: true,
                })
            }
        }
    }

    /// Append a message (notification or server request) and say where it goes.
    pub(crate) fn push(&mut self, json: &[u8]) -> Delivery {
        self.append(json, false)
    }

    /// Append the final response and close the stream.
    pub(crate) fn push_final(&mut self, json: &[u8]) -> Delivery {
        self.append(json, true)
    }

    fn append(&mut self, json: &[u8], last: bool) -> Delivery {
        if matches!(self.state, StreamState::Closed(_)) {
            self.stats.dropped_after_close += 1;
            return Delivery::Dropped;
        }
        self.stats.events += 1;
        if self.settings.mode == StreamMode::Plain {
            if last {
                self.state = StreamState::Closed(CloseReason::Responded);
            }
            let Some(conn) = self.conn else {
                self.stats.lost_unattached += 1;
                return Delivery::Dropped;
            };
            return Delivery::Write { conn, frame: sse::data_frame(json), end: last };
        }
        let seq = self.window.next_seq();
        let frame = sse::event_frame(&self.cursor(seq), json);
        let pushed = self.window.push(frame.clone());
        debug_assert_eq!(pushed, seq);
        self.ledger.push(StreamChange::Event { seq, frame: frame.clone() });
        if last {
            self.state = StreamState::Closed(CloseReason::Responded);
            self.ledger.push(StreamChange::Record);
        }
        if let Some(sent) = &mut self.shadow {
            // Exactly as if resumable, but the client gets the payload without an id.
            sent.sent(seq, json);
            self.released = seq;
            let Some(conn) = self.conn else { return Delivery::Buffered };
            return Delivery::Write { conn, frame: sse::data_frame(json), end: last };
        }
        if self.settings.hold_until_committed {
            return Delivery::Held;
        }
        self.released = seq;
        match self.conn {
            Some(conn) => {
                self.id_sent = true;
                Delivery::Write { conn, frame, end: last }
            }
            None => Delivery::Buffered,
        }
    }

    /// Close without a further event (cancellation, session end, replacement). Returns the
    /// connection to end, if one is attached.
    pub(crate) fn close(&mut self, reason: CloseReason) -> Option<u64> {
        if !matches!(self.state, StreamState::Closed(_)) {
            self.state = StreamState::Closed(reason);
            // A cancelled request is owed nothing, also after a restart. The other reasons
            // end the stream's life (replaced, evicted) or only this process's copy of it
            // (session end, shutdown, parking): the session records those itself.
            if reason == CloseReason::Cancelled {
                self.ledger.push(StreamChange::Record);
            }
        }
        self.conn.take()
    }

    /// The connection `conn` went away (or was ended); `drained` when it returned every frame
    /// written to it. Ignored unless it is the current one.
    pub(crate) fn detach(&mut self, conn: u64, drained: bool) {
        if self.conn == Some(conn) {
            self.conn = None;
            match self.state {
                StreamState::Open => self.state = StreamState::Disconnected,
                StreamState::Closed(_) => {
                    self.delivered = drained;
                    if drained && self.unrecorded && self.settings.mode == StreamMode::Resumable {
                        // Every frame reached its client: nothing to record, now or later.
                        self.settled = true;
                        self.ledger = Vec::new();
                    }
                }
                StreamState::Disconnected => {}
            }
        }
    }

    /// The retention that applies now: `None` while the stream is open or a connection is
    /// attached (it must not end under its connection).
    #[must_use]
    pub(crate) fn retention(&self) -> Option<Retention> {
        match self.state {
            StreamState::Closed(reason) if self.conn.is_none() => {
                Some(if self.delivered || reason == CloseReason::Cancelled {
                    Retention::Delivered
                } else {
                    Retention::Undelivered
                })
            }
            _ => None,
        }
    }

    /// The shell wrote to the attached connection, or attached one, at `now`: its keep-alive
    /// counts from here.
    pub(crate) fn wrote(&mut self, now: Tick) {
        self.last_write = now;
    }

    /// When the attached connection is owed a keep-alive comment: while one is attached to a
    /// stream that is not closed.
    #[must_use]
    pub(crate) fn keepalive_deadline(&self) -> Option<Tick> {
        (self.conn.is_some() && !matches!(self.state, StreamState::Closed(_)))
            .then(|| self.last_write.plus_ms(self.settings.timing.keepalive_ms))
    }

    fn retention_end(&self) -> Option<Tick> {
        let t = self.settings.timing;
        self.retention_since.map(|(r, since)| {
            since.plus_ms(match r {
                Retention::Delivered => t.retention_after_delivery_ms,
                Retention::Undelivered => t.retention_undelivered_ms,
            })
        })
    }

    /// The next deadline (the retention's end, a keep-alive), to arm one timer at. A retention
    /// starts counting at the first call that finds it applying, and again whenever it
    /// changes (an attach cancels it; the next detach starts a full one).
    pub(crate) fn poll_timeout(&mut self, now: Tick) -> Option<Tick> {
        match (self.retention(), self.retention_since) {
            (None, _) => self.retention_since = None,
            (Some(r), Some((had, _))) if r == had => {}
            (Some(r), _) => self.retention_since = Some((r, now)),
        }
        [self.retention_end(), self.keepalive_deadline()].into_iter().flatten().min()
    }

    /// What is due at `now` (after [`StreamCore::poll_timeout`]).
    #[must_use]
    pub(crate) fn handle_timeout(&self, now: Tick) -> StreamDue {
        StreamDue {
            retention_over: self.retention_end().is_some_and(|t| now >= t),
            keepalive: self.keepalive_deadline().is_some_and(|t| now >= t),
        }
    }

    /// SEP-1699 polling: end the current connection without ending the stream. Allowed only
    /// after an event id went out on it; returns the connection and the `retry` frame to write
    /// before ending it.
    pub(crate) fn close_for_polling(&mut self) -> Option<(u64, Option<Bytes>)> {
        if !self.id_sent || matches!(self.state, StreamState::Closed(_)) {
            return None;
        }
        let conn = self.conn.take()?;
        self.state = StreamState::Disconnected;
        Some((conn, self.settings.retry_ms.map(sse::retry_frame)))
    }

    /// Bytes of encoded frames the window holds.
    #[must_use]
    pub(crate) fn retained_bytes(&self) -> usize {
        self.window.len().1
    }

    /// What a later resume can need of a stream answered in its first write whose connection
    /// returned every frame, never recorded (settled), in its retention: its answer (the one
    /// event of its window, which the priming event's cursor replays), when its retention
    /// began, and whether it primed. `None` in any other state. Its shell may keep that
    /// instead of the core; [`StreamCore::from_settled`] rebuilds the same core from it.
    #[must_use]
    pub(crate) fn settled_answer(&self) -> Option<SettledAnswer> {
        let Some((Retention::Delivered, since)) = self.retention_since else { return None };
        let StreamKind::Post { request } = &self.kind else { return None };
        let shape = self.state == StreamState::Closed(CloseReason::Responded)
            && self.settled
            && self.unrecorded
            && self.delivered
            && self.id_sent
            && self.conn.is_none()
            && self.next_conn == 2
            && self.acked == Seq::START
            && self.released == Seq::START.next()
            && self.stats == SettledAnswer::COUNTERS
            && self.shadow.is_none()
            && self.ledger.is_empty()
            && self.settings.mode == SettledAnswer::MODE
            && !self.settings.hold_until_committed;
        let answer = self.window.only_first().filter(|_| shape)?;
        Some(SettledAnswer {
            request: request.clone(),
            answer: KeptAnswerBytes::of(answer),
            since,
            last_write: self.last_write,
            prime: self.settings.prime,
        })
    }

    /// The core [`StreamCore::settled_answer`] was taken from, rebuilt: the POST stream `id`
    /// of `generation`, signed by `signer`, its window bounded by `window`, its `retry_ms`
    /// and `timing` its generation's and its server's (all as it was opened with: `kept`
    /// holds none of them).
    #[must_use]
    pub(crate) fn from_settled(
        id: StreamId,
        generation: Generation,
        signer: Arc<CursorSigner>,
        (window, retry_ms, timing): (WindowLimits, Option<u64>, StreamTiming),
        kept: SettledAnswer,
    ) -> StreamCore {
        let settings = StreamSettings {
            window,
            prime: kept.prime,
            retry_ms,
            hold_until_committed: false,
            mode: SettledAnswer::MODE,
            timing,
        };
        let mut window = ReplayWindow::new(settings.window);
        let frame = match kept.answer {
            KeptAnswerBytes::Frame(frame) => *frame,
            KeptAnswerBytes::Json(json) => {
                let cursor = signer.stream(generation, id).encode_array(Seq::START.next());
                sse::event_frame(&cursor, &json)
            }
        };
        let seq = window.push(frame);
        debug_assert_eq!(seq, Seq::START.next(), "its answer is its window's first event");
        let mut s = StreamCore::with_window(
            id,
            generation,
            StreamKind::Post { request: kept.request },
            signer,
            settings,
            window,
        );
        s.state = StreamState::Closed(CloseReason::Responded);
        s.released = seq;
        s.next_conn = 2;
        s.id_sent = true;
        s.delivered = true;
        s.settled = true;
        s.stats = SettledAnswer::COUNTERS;
        s.last_write = kept.last_write;
        s.retention_since = Some((Retention::Delivered, kept.since));
        s
    }

    /// The server-wide memory budget is exhausted: keep only the newest event (a later resume
    /// from an older cursor gets the explicit events-lost answer). Returns how many events
    /// were dropped.
    pub(crate) fn trim_for_budget(&mut self) -> usize {
        self.window.trim_to_newest()
    }
}

#[cfg(test)]
mod tests;
