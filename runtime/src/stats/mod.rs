//! Process-wide counters and gauges, kept as plain atomics by the actors and read as one
//! [`StatsSnapshot`] (for `mcp-host --stats-every-ms`) and as [`MetricFigures`] (for `/metrics`).

pub mod histogram;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;

use crate::proto::error::Rejection;
use crate::proto::stream::StreamStats;

/// A channel of the bus between hosts sharing a ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusChannel {
    /// Sessions ended on another host.
    Ends,
    /// What clients sent another host for a session served here.
    Sessions,
    /// The catalogs' announcements for listen streams.
    Changes,
}

impl BusChannel {
    /// Every channel, in the order the counters keep them (each at its discriminant).
    pub const ALL: [BusChannel; 3] = [BusChannel::Ends, BusChannel::Sessions, BusChannel::Changes];

    /// Its name (on the bus, and as the metrics label it).
    #[must_use]
    pub fn name(self) -> &'static str {
        use crate::ledger::codec::{CHANGES_CHANNEL, ENDS_CHANNEL, SESSIONS_CHANNEL};
        match self {
            BusChannel::Ends => ENDS_CHANNEL,
            BusChannel::Sessions => SESSIONS_CHANNEL,
            BusChannel::Changes => CHANGES_CHANNEL,
        }
    }
}

/// Counters shared by every actor of a supervisor.
#[derive(Debug)]
pub struct RuntimeStats {
    requests: AtomicU64,
    connections: AtomicI64,
    /// TCP connections accepted since start.
    connections_accepted: AtomicU64,
    /// Subscriptions to the hosts' bus taken (again) after a cut, or for the first time
    /// (what was published before may have been missed), by channel ([`BusChannel::ALL`]).
    bus_missed: [AtomicU64; BusChannel::ALL.len()],
    /// Answers to server-to-client requests read from the ledger after a miss (their
    /// publication was not heard).
    answers_recovered: AtomicU64,
    /// Messages relayed from other hosts dropped at a session's full inbox.
    relays_dropped: AtomicU64,
    streams_live: AtomicI64,
    /// Of those, closed streams kept by their sessions as data (no actor).
    streams_dormant: AtomicI64,
    /// Told when the last live stream stops, the last session leaves or the last request
    /// of a generation ends (shared with the registry and the generations): a stop waits
    /// on it instead of polling.
    pub(crate) quiet: Arc<tokio::sync::Notify>,
    refused: [AtomicU64; Rejection::CAUSES.len()],
    client_requests_timed_out: AtomicU64,
    requests_ended_by_gap: AtomicU64,
    streams_evicted: AtomicU64,
    sessions_revived: AtomicU64,
    sessions_parked: AtomicU64,
    sessions_evicted_from_ledger: AtomicU64,
    budget_trimmed: AtomicU64,
    live: LiveFigures,
    /// Modern requests running now.
    modern_in_flight: AtomicI64,
    /// Modern requests running per caller (entries only while non-zero, so at most
    /// `modern.max_in_flight` of them). A lock held for one map update, never across an await.
    modern_by_caller:
        parking_lot::Mutex<std::collections::HashMap<crate::proto::caller::QuotaKey, usize>>,
    /// Bytes of parsed requests held in flight, charged against `limits.request_memory_bytes`
    /// ([`RequestCharge`]).
    request_memory: AtomicUsize,
    /// Modern requests answered (a result or a JSON-RPC error after admission).
    modern_served: AtomicU64,
    /// Modern requests whose response stream the client closed before the result: cancelled.
    modern_cancelled: AtomicU64,
    /// `subscriptions/listen` streams: open now, opened, ended by the server (drain) with
    /// their completion result.
    listen_open: AtomicI64,
    listen_opened: AtomicU64,
    listen_completed: AtomicU64,
    /// Open listen streams per caller (entries only while non-zero). A lock held for one
    /// map update, never across an await.
    listen_by_caller:
        parking_lot::Mutex<std::collections::HashMap<crate::proto::caller::QuotaKey, u32>>,
}

/// Figures counted as they happen (for the metrics endpoint).
#[derive(Debug)]
struct LiveFigures {
    events: AtomicU64,
    resumes: AtomicU64,
    gaps: AtomicU64,
    slow_readers: AtomicU64,
    lost_unattached: AtomicU64,
    receipt_replays: AtomicU64,
    receipt_attaches: AtomicU64,
    shadow_verified: AtomicU64,
    shadow_events: AtomicU64,
    /// content, order, cursor, missing.
    shadow_mismatches: [AtomicU64; 4],
    shadow_window_lost: AtomicU64,
    shadow_unreadable: AtomicU64,
    shadow_unverified: AtomicU64,
    shadow_latency: histogram::Histo,
    http: [AtomicU64; HTTP_STATUSES.len()],
    streams_by_mode: [AtomicI64; 3],
    streams_by_state: [AtomicI64; 3],
}

/// The statuses counted one by one, in the order `http_response` indexes them (any other is
/// counted as `other`, the last).
const HTTP_STATUSES: [&str; 18] = [
    "200", "202", "204", "400", "401", "403", "404", "405", "406", "408", "409", "410", "413",
    "415", "429", "500", "503", "other",
];
const SHADOW_KINDS: [&str; 4] = ["content", "order", "cursor", "missing"];
const MODES: [&str; 3] = ["resumable", "shadow", "plain"];
/// Stream states as the metrics name them: a connection attached, none, closed.
pub(crate) const STREAM_STATES: [&str; 3] = ["open", "detached", "closed"];
/// [`STREAM_STATES`]' index of an open stream (a connection attached).
pub(crate) const STATE_OPEN: usize = 0;
/// [`STREAM_STATES`]' index of an open stream with no connection.
pub(crate) const STATE_DETACHED: usize = 1;
/// [`STREAM_STATES`]' index of a closed (retained) stream.
pub(crate) const STATE_CLOSED: usize = 2;

impl Default for LiveFigures {
    fn default() -> LiveFigures {
        let z = || AtomicU64::new(0);
        LiveFigures {
            events: z(),
            resumes: z(),
            gaps: z(),
            slow_readers: z(),
            lost_unattached: z(),
            receipt_replays: z(),
            receipt_attaches: z(),
            shadow_verified: z(),
            shadow_events: z(),
            shadow_mismatches: std::array::from_fn(|_| z()),
            shadow_window_lost: z(),
            shadow_unreadable: z(),
            shadow_unverified: z(),
            shadow_latency: histogram::Histo::new(histogram::LATENCY_BOUNDS),
            http: std::array::from_fn(|_| z()),
            streams_by_mode: std::array::from_fn(|_| AtomicI64::new(0)),
            streams_by_state: std::array::from_fn(|_| AtomicI64::new(0)),
        }
    }
}

/// What the metrics endpoint reads (see [`RuntimeStats::metrics`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricFigures {
    /// Open TCP connections.
    pub connections: i64,
    /// TCP connections accepted since start (their rate against the requests' shows clients
    /// that do not keep their connections).
    pub connections_accepted: u64,
    /// Events appended (counted as appended).
    pub events: u64,
    /// Resumes served.
    pub resumes: u64,
    /// Resumes that found a gap.
    pub gaps: u64,
    /// Slow readers detached.
    pub slow_readers: u64,
    /// Events of plain streams lost for want of a connection.
    pub lost_unattached: u64,
    /// Sessions parked.
    pub sessions_parked: u64,
    /// Sessions revived.
    pub sessions_revived: u64,
    /// Sessions evicted from a full ledger.
    pub sessions_evicted_from_ledger: u64,
    /// Calls answered from their idempotency receipt.
    pub receipt_replays: u64,
    /// Retries attached to a running call.
    pub receipt_attaches: u64,
    /// Shadow streams verified.
    pub shadow_verified: u64,
    /// Events of verified shadow streams.
    pub shadow_events: u64,
    /// Shadow mismatches by kind.
    pub shadow_mismatches: Vec<(&'static str, u64)>,
    /// Shadow events past the window bound.
    pub shadow_window_lost: u64,
    /// Shadow copies that could not be read.
    pub shadow_unreadable: u64,
    /// Shadow streams that ended with their session (not verified).
    pub shadow_unverified: u64,
    /// HTTP responses by status.
    pub http_responses: Vec<(&'static str, u64)>,
    /// Live streams by mode.
    pub streams_by_mode: Vec<(&'static str, i64)>,
    /// Live streams by state.
    pub streams_by_state: Vec<(&'static str, i64)>,
}

impl Default for RuntimeStats {
    fn default() -> RuntimeStats {
        RuntimeStats {
            requests: AtomicU64::new(0),
            connections: AtomicI64::new(0),
            connections_accepted: AtomicU64::new(0),
            bus_missed: std::array::from_fn(|_| AtomicU64::new(0)),
            answers_recovered: AtomicU64::new(0),
            relays_dropped: AtomicU64::new(0),
            streams_live: AtomicI64::new(0),
            streams_dormant: AtomicI64::new(0),
            quiet: Arc::default(),
            refused: std::array::from_fn(|_| AtomicU64::new(0)),
            client_requests_timed_out: AtomicU64::new(0),
            requests_ended_by_gap: AtomicU64::new(0),
            streams_evicted: AtomicU64::new(0),
            sessions_revived: AtomicU64::new(0),
            sessions_parked: AtomicU64::new(0),
            sessions_evicted_from_ledger: AtomicU64::new(0),
            budget_trimmed: AtomicU64::new(0),
            live: LiveFigures::default(),
            modern_in_flight: AtomicI64::new(0),
            modern_by_caller: parking_lot::Mutex::new(std::collections::HashMap::new()),
            request_memory: AtomicUsize::new(0),
            modern_served: AtomicU64::new(0),
            modern_cancelled: AtomicU64::new(0),
            listen_open: AtomicI64::new(0),
            listen_opened: AtomicU64::new(0),
            listen_completed: AtomicU64::new(0),
            listen_by_caller: parking_lot::Mutex::new(std::collections::HashMap::new()),
        }
    }
}

fn add(c: &AtomicU64, n: u64) {
    if n > 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

impl RuntimeStats {
    /// Take a place for a modern request of `caller`: at most `max` server-wide and
    /// `per_caller` for one caller.
    ///
    /// # Errors
    /// 503 ([`Overload::ModernInFlight`](crate::proto::error::Overload::ModernInFlight)) when
    /// every place is taken, 429 ([`Quota::ModernInFlight`](crate::proto::error::Quota::ModernInFlight))
    /// when the caller's are.
    pub(crate) fn modern_enter(
        self: &Arc<Self>,
        caller: crate::proto::caller::QuotaKey,
        max: usize,
        per_caller: usize,
    ) -> Result<ModernInFlight, Rejection> {
        use crate::proto::error::{Overload, Quota};
        let was = self.modern_in_flight.fetch_add(1, Ordering::AcqRel);
        let refused = if was >= max as i64 {
            Some(Rejection::Overloaded(Overload::ModernInFlight))
        } else {
            let mut by = self.modern_by_caller.lock();
            let n = by.entry(caller.clone()).or_insert(0);
            if *n >= per_caller {
                // Not left at 0: the entry exists because the caller holds places.
                Some(Rejection::QuotaExceeded {
                    cause: Quota::ModernInFlight,
                    retry_after_s: Overload::ModernInFlight.retry_after_s(),
                })
            } else {
                *n += 1;
                None
            }
        };
        if let Some(r) = refused {
            self.modern_in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(r);
        }
        Ok(ModernInFlight { stats: Arc::clone(self), caller })
    }

    /// Charge `bytes` of a parsed request to the request memory budget of `capacity` bytes,
    /// until the charge is dropped. Never over the capacity, even for a moment (a refused
    /// charge takes nothing, so it cannot make a concurrent one fail).
    ///
    /// # Errors
    /// 503 ([`Overload::RequestMemory`](crate::proto::error::Overload::RequestMemory)) when
    /// the charge would take the budget past `capacity`.
    pub(crate) fn request_memory_enter(
        self: &Arc<Self>,
        bytes: usize,
        capacity: usize,
    ) -> Result<RequestCharge, Rejection> {
        let taken = self.request_memory.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(bytes).filter(|after| *after <= capacity)
        });
        match taken {
            Ok(_) => Ok(RequestCharge { stats: Arc::clone(self), bytes }),
            Err(_) => Err(Rejection::Overloaded(crate::proto::error::Overload::RequestMemory)),
        }
    }

    /// Bytes charged to the request memory budget now.
    #[must_use]
    pub fn request_memory_bytes(&self) -> usize {
        self.request_memory.load(Ordering::Relaxed)
    }

    /// A modern request was answered.
    pub(crate) fn modern_served(&self) {
        self.modern_served.fetch_add(1, Ordering::Relaxed);
    }

    /// A modern request was cancelled by its client closing the response stream.
    pub(crate) fn modern_cancelled(&self) {
        self.modern_cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// Modern requests: running now, answered, cancelled by a disconnect.
    #[must_use]
    pub fn modern(&self) -> (i64, u64, u64) {
        (
            self.modern_in_flight.load(Ordering::Relaxed),
            self.modern_served.load(Ordering::Relaxed),
            self.modern_cancelled.load(Ordering::Relaxed),
        )
    }

    /// Take a place for a `subscriptions/listen` stream of `caller`: at most `max` server-wide
    /// and `per_caller` for one caller.
    ///
    /// # Errors
    /// 503 ([`Overload::Listen`](crate::proto::error::Overload::Listen)) when every place is
    /// taken, 429 ([`Quota::Listen`](crate::proto::error::Quota::Listen)) when the caller's are.
    pub(crate) fn listen_enter(
        self: &Arc<Self>,
        caller: crate::proto::caller::QuotaKey,
        max: usize,
        per_caller: u32,
    ) -> Result<ListenPlace, Rejection> {
        use crate::proto::error::{Overload, Quota};
        let was = self.listen_open.fetch_add(1, Ordering::AcqRel);
        let refused = if was >= max as i64 {
            Some(Rejection::Overloaded(Overload::Listen))
        } else {
            let mut by = self.listen_by_caller.lock();
            let n = by.entry(caller.clone()).or_insert(0);
            if *n >= per_caller {
                Some(Rejection::QuotaExceeded {
                    cause: Quota::Listen,
                    retry_after_s: Overload::Listen.retry_after_s(),
                })
            } else {
                *n += 1;
                None
            }
        };
        if let Some(r) = refused {
            self.listen_open.fetch_sub(1, Ordering::AcqRel);
            return Err(r);
        }
        self.listen_opened.fetch_add(1, Ordering::Relaxed);
        Ok(ListenPlace { stats: Arc::clone(self), caller })
    }

    /// A listen stream was ended by the server with its completion result.
    pub(crate) fn listen_completed(&self) {
        self.listen_completed.fetch_add(1, Ordering::Relaxed);
    }

    /// `subscriptions/listen` streams: open now, opened, completed by the server.
    #[must_use]
    pub fn listen(&self) -> (i64, u64, u64) {
        (
            self.listen_open.load(Ordering::Relaxed),
            self.listen_opened.load(Ordering::Relaxed),
            self.listen_completed.load(Ordering::Relaxed),
        )
    }

    /// An HTTP request reached the endpoint.
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A TCP connection opened; the guard counts it closed when dropped (the host keeps it in
    /// the connection's data, which actix drops with the connection).
    #[must_use]
    pub fn connection(self: &Arc<Self>) -> ConnectionGuard {
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(Arc::clone(self))
    }

    /// A subscription to bus channel `channel` was taken again after a cut, or for the first
    /// time: what was published meanwhile may have been missed.
    pub(crate) fn bus_missed(&self, channel: BusChannel) {
        self.bus_missed[channel as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many times each channel may have missed messages, in [`BusChannel::ALL`]'s order.
    #[must_use]
    pub fn bus_missed_counts(&self) -> [(BusChannel, u64); BusChannel::ALL.len()] {
        std::array::from_fn(|i| (BusChannel::ALL[i], self.bus_missed[i].load(Ordering::Relaxed)))
    }

    /// An answer relayed while a subscription was cut was read from the ledger.
    pub(crate) fn answer_recovered(&self) {
        self.answers_recovered.fetch_add(1, Ordering::Relaxed);
    }

    /// A message relayed from another host found its session's inbox full and was dropped.
    pub(crate) fn relay_dropped(&self) {
        self.relays_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Relayed messages dropped at a full inbox ([`Self::relay_dropped`]).
    #[must_use]
    pub fn relays_dropped(&self) -> u64 {
        self.relays_dropped.load(Ordering::Relaxed)
    }

    /// Answers read from the ledger after a miss ([`Self::answer_recovered`]).
    #[must_use]
    pub fn answers_recovered(&self) -> u64 {
        self.answers_recovered.load(Ordering::Relaxed)
    }

    pub(crate) fn stream_started(&self) {
        self.streams_live.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream began (`1`) or ceased (`-1`) to be kept by its session as data.
    pub(crate) fn stream_dormant(&self, delta: i64) {
        self.streams_dormant.fetch_add(delta, Ordering::Relaxed);
    }

    /// A stream stopped: its gauge drops (events, resumes and gaps were counted as
    /// they happened).
    pub(crate) fn stream_stopped(&self, s: &StreamStats) {
        if self.streams_live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.quiet.notify_waiters();
        }
        add(&self.live.lost_unattached, s.lost_unattached);
    }

    /// A stream of `mode` started (`+1`) or stopped (`-1`).
    pub(crate) fn stream_mode(&self, mode: crate::proto::rollout::StreamMode, delta: i64) {
        let i = MODES.iter().position(|m| *m == mode.as_str()).unwrap_or(0);
        self.live.streams_by_mode[i].fetch_add(delta, Ordering::Relaxed);
    }

    /// A stream moved from state `from` to `to` (indexes of [`STREAM_STATES`]; `None`: it
    /// started or stopped).
    pub(crate) fn stream_state(&self, from: Option<usize>, to: Option<usize>) {
        if let Some(i) = from {
            self.live.streams_by_state[i].fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(i) = to {
            self.live.streams_by_state[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events appended, counted as they are.
    pub(crate) fn events_appended(&self, n: u64) {
        add(&self.live.events, n);
    }

    /// A resume was served (`gap`: it found its events lost).
    pub(crate) fn resume(&self, gap: bool) {
        add(if gap { &self.live.gaps } else { &self.live.resumes }, 1);
    }

    /// A slow reader was detached.
    pub(crate) fn slow_reader(&self) {
        add(&self.live.slow_readers, 1);
    }

    /// A write-tool call was answered from its receipt (`replayed`) or attached to its
    /// running execution.
    pub(crate) fn receipt_hit(&self, replayed: bool) {
        add(if replayed { &self.live.receipt_replays } else { &self.live.receipt_attaches }, 1);
    }

    /// A shadow stream was verified; `latency` from its close to its writes' commit.
    pub(crate) fn shadow_verified(
        &self,
        r: &crate::proto::rollout::ShadowReport,
        latency: std::time::Duration,
    ) {
        let l = &self.live;
        add(&l.shadow_verified, 1);
        add(&l.shadow_events, r.sent);
        for (c, n) in l.shadow_mismatches.iter().zip([r.content, r.order, r.cursor, r.missing]) {
            add(c, n);
        }
        add(&l.shadow_window_lost, r.window_lost);
        l.shadow_latency.observe(latency.as_secs_f64());
    }

    /// A shadow stream's copy could not be read back.
    pub(crate) fn shadow_unreadable(&self) {
        add(&self.live.shadow_unreadable, 1);
    }

    /// A shadow stream ended with its session, unverified.
    pub(crate) fn shadow_unverified(&self) {
        add(&self.live.shadow_unverified, 1);
    }

    /// The shadow commit latency histogram.
    #[must_use]
    pub fn shadow_latency(&self) -> &histogram::Histo {
        &self.live.shadow_latency
    }

    /// An HTTP response of the endpoint went out with `status`.
    pub fn http_response(&self, status: u16) {
        let i = match status {
            200 => 0,
            202 => 1,
            204 => 2,
            400 => 3,
            401 => 4,
            403 => 5,
            404 => 6,
            405 => 7,
            406 => 8,
            408 => 9,
            409 => 10,
            410 => 11,
            413 => 12,
            415 => 13,
            429 => 14,
            500 => 15,
            503 => 16,
            _ => HTTP_STATUSES.len() - 1,
        };
        add(&self.live.http[i], 1);
    }

    /// The figures the metrics endpoint reads.
    #[must_use]
    pub fn metrics(&self) -> MetricFigures {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let l = &self.live;
        MetricFigures {
            connections: self.connections.load(Ordering::Relaxed),
            connections_accepted: get(&self.connections_accepted),
            events: get(&l.events),
            resumes: get(&l.resumes),
            gaps: get(&l.gaps),
            slow_readers: get(&l.slow_readers),
            lost_unattached: get(&l.lost_unattached),
            sessions_parked: get(&self.sessions_parked),
            sessions_revived: get(&self.sessions_revived),
            sessions_evicted_from_ledger: get(&self.sessions_evicted_from_ledger),
            receipt_replays: get(&l.receipt_replays),
            receipt_attaches: get(&l.receipt_attaches),
            shadow_verified: get(&l.shadow_verified),
            shadow_events: get(&l.shadow_events),
            shadow_mismatches: SHADOW_KINDS
                .iter()
                .zip(&l.shadow_mismatches)
                .map(|(k, c)| (*k, get(c)))
                .collect(),
            shadow_window_lost: get(&l.shadow_window_lost),
            shadow_unreadable: get(&l.shadow_unreadable),
            shadow_unverified: get(&l.shadow_unverified),
            http_responses: HTTP_STATUSES.iter().zip(&l.http).map(|(k, c)| (*k, get(c))).collect(),
            streams_by_mode: MODES
                .iter()
                .zip(&l.streams_by_mode)
                .map(|(k, c)| (*k, c.load(Ordering::Relaxed)))
                .collect(),
            streams_by_state: STREAM_STATES
                .iter()
                .zip(&l.streams_by_state)
                .map(|(k, c)| (*k, c.load(Ordering::Relaxed)))
                .collect(),
        }
    }

    pub(crate) fn budget_trimmed(&self, n: usize) {
        add(&self.budget_trimmed, n as u64);
    }

    /// A request was refused (counted once, at the HTTP mapping point).
    pub fn refused(&self, r: &Rejection) {
        if let Some(i) = Rejection::CAUSES.iter().position(|c| *c == r.cause()) {
            add(&self.refused[i], 1);
        }
    }

    pub(crate) fn client_requests_timed_out(&self, n: usize) {
        add(&self.client_requests_timed_out, n as u64);
    }

    pub(crate) fn request_ended_by_gap(&self) {
        add(&self.requests_ended_by_gap, 1);
    }

    pub(crate) fn streams_evicted(&self, n: usize) {
        add(&self.streams_evicted, n as u64);
    }

    /// A session was rebuilt from the ledger (after a restart, or from parking).
    pub(crate) fn session_revived(&self) {
        add(&self.sessions_revived, 1);
    }

    /// `n` sessions were evicted from a full ledger.
    pub(crate) fn sessions_evicted_from_ledger(&self, n: u64) {
        add(&self.sessions_evicted_from_ledger, n);
    }

    /// A session was parked (its state left in the ledger only).
    pub(crate) fn session_parked(&self) {
        add(&self.sessions_parked, 1);
    }

    /// Streams alive now (with an actor or kept as data by their session).
    #[must_use]
    pub fn streams_live(&self) -> i64 {
        self.streams_live.load(Ordering::Relaxed)
    }

    /// Of the live streams, those kept by their sessions as data (no actor).
    #[must_use]
    pub fn streams_dormant(&self) -> i64 {
        self.streams_dormant.load(Ordering::Relaxed)
    }

    /// Refusals of one cause so far.
    #[must_use]
    pub fn refusals(&self, cause: &str) -> u64 {
        Rejection::CAUSES
            .iter()
            .position(|c| *c == cause)
            .map_or(0, |i| self.refused[i].load(Ordering::Relaxed))
    }
}

/// Counts one open TCP connection; see [`RuntimeStats::connection`].
#[derive(Debug)]
pub struct ConnectionGuard(Arc<RuntimeStats>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A point-in-time copy of the supervisor's figures.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// HTTP requests that reached the endpoint.
    pub requests: u64,
    /// TCP connections open (when the host counts them).
    pub connections: i64,
    /// Live sessions (including reservations being set up).
    pub sessions: usize,
    /// Of `sessions`: those hibernating (kept as data, no actor).
    pub sessions_hibernating: usize,
    /// Streams alive (open, and closed but retained).
    pub streams: i64,
    /// Of `streams`: closed ones kept by their sessions as data, with no actor (answered in
    /// their first write, not resumed since).
    pub streams_dormant: i64,
    /// Bytes charged to the stream memory budget.
    pub stream_memory_bytes: usize,
    /// Bytes of parsed requests held in flight, charged to the request memory budget.
    pub request_memory_bytes: usize,
    /// 2026-07-28 requests running (each holds a place of `modern.max_in_flight`).
    pub modern_in_flight: i64,
    /// Refusals by cause (only causes seen).
    pub refused: BTreeMap<&'static str, u64>,
    /// Server-to-client requests given up at their deadline.
    pub client_requests_timed_out: u64,
    /// Requests ended because a resume found their events lost.
    pub requests_ended_by_gap: u64,
    /// Closed streams evicted by `max_retained_streams` / `max_retained_bytes`.
    pub streams_evicted: u64,
    /// Sessions rebuilt from the ledger (after a restart, or from parking).
    pub sessions_revived: u64,
    /// Sessions parked (idle for `sessions.park_after_secs`).
    pub sessions_parked: u64,
    /// Parked (or recorded, not live) sessions evicted because the ledger held
    /// `ledger.max_sessions`.
    pub sessions_evicted_from_ledger: u64,
    /// The ledger writer's counters.
    pub ledger: crate::ledger::WriterSnapshot,
    /// Events appended to streams.
    pub events: u64,
    /// Resumes served from a window.
    pub resumes: u64,
    /// Resumes that found a gap.
    pub gaps: u64,
    /// Events trimmed from windows to respect the stream memory budget.
    pub budget_trimmed: u64,
    /// What the bounded stores of the ledger keep, over every caller (filled by the
    /// supervisor).
    pub kept: KeptFigures,
}

/// Entries and bytes one store of the ledger keeps, over every caller.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Kept {
    /// Entries.
    pub count: u64,
    /// Their bytes (keys and records).
    pub bytes: u64,
}

/// What the bounded stores of the ledger keep.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct KeptFigures {
    /// Idempotency receipts.
    pub receipts: Kept,
    /// State handles.
    pub handles: Kept,
    /// Kept tasks.
    pub tasks: Kept,
}

impl RuntimeStats {
    /// Copy every figure; `sessions`, `stream_memory_bytes` and `ledger` come from their owners.
    #[must_use]
    pub fn snapshot(
        &self,
        sessions: usize,
        stream_memory_bytes: usize,
        ledger: crate::ledger::WriterSnapshot,
    ) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            requests: get(&self.requests),
            connections: self.connections.load(Ordering::Relaxed),
            sessions,
            sessions_hibernating: 0,
            streams: self.streams_live(),
            streams_dormant: self.streams_dormant(),
            stream_memory_bytes,
            request_memory_bytes: self.request_memory_bytes(),
            modern_in_flight: self.modern_in_flight.load(Ordering::Relaxed),
            refused: Rejection::CAUSES
                .iter()
                .zip(&self.refused)
                .filter(|(_, n)| get(n) > 0)
                .map(|(c, n)| (*c, get(n)))
                .collect(),
            client_requests_timed_out: get(&self.client_requests_timed_out),
            requests_ended_by_gap: get(&self.requests_ended_by_gap),
            streams_evicted: get(&self.streams_evicted),
            sessions_revived: get(&self.sessions_revived),
            sessions_parked: get(&self.sessions_parked),
            sessions_evicted_from_ledger: get(&self.sessions_evicted_from_ledger),
            ledger,
            events: get(&self.live.events),
            resumes: get(&self.live.resumes),
            gaps: get(&self.live.gaps),
            budget_trimmed: get(&self.budget_trimmed),
            kept: KeptFigures::default(),
        }
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;

    #[test]
    fn each_listed_status_is_counted_under_its_own_name_and_others_as_other() {
        let s = RuntimeStats::default();
        for code in HTTP_STATUSES.iter().filter_map(|c| c.parse::<u16>().ok()) {
            s.http_response(code);
        }
        s.http_response(418);
        let m = s.metrics();
        assert!(m.http_responses.iter().all(|(_, n)| *n == 1), "{:?}", m.http_responses);
    }

    #[test]
    fn each_bus_channel_is_counted_under_its_own_name() {
        let s = RuntimeStats::default();
        for (i, c) in BusChannel::ALL.into_iter().enumerate() {
            for _ in 0..=i {
                s.bus_missed(c);
            }
        }
        let counts = s.bus_missed_counts();
        let named: Vec<_> = counts.iter().map(|(c, n)| (c.name(), *n)).collect();
        assert_eq!(named, [("ends", 1), ("sessions", 2), ("changes", 3)]);
    }
}

#[cfg(test)]
mod admission_tests {
    use super::*;
    use crate::actor::QuotaKey;

    #[test]
    fn a_callers_modern_share_is_429_the_whole_bound_503_and_entries_leave_at_zero() {
        let s = Arc::new(RuntimeStats::default());
        let (alice, bob) = (QuotaKey::Principal("alice".into()), QuotaKey::Principal("bob".into()));
        let a: Vec<_> = (0..2).map(|_| s.modern_enter(alice.clone(), 3, 2).unwrap()).collect();
        assert_eq!(
            s.modern_enter(alice.clone(), 3, 2).unwrap_err().cause(),
            "quota.modern_in_flight"
        );
        let b = s.modern_enter(bob.clone(), 3, 2).unwrap();
        assert_eq!(
            s.modern_enter(bob.clone(), 3, 2).unwrap_err().cause(),
            "overloaded.modern_in_flight",
            "the whole bound first"
        );
        assert_eq!(s.modern().0, 3);
        drop((a, b));
        assert_eq!(s.modern().0, 0);
        assert!(s.modern_by_caller.lock().is_empty(), "no caller left behind at zero");
    }

    #[test]
    fn request_charges_stay_within_the_capacity_split_and_come_back() {
        let s = Arc::new(RuntimeStats::default());
        let big = s.request_memory_enter(60, 100).unwrap();
        assert_eq!(
            s.request_memory_enter(41, 100).unwrap_err().cause(),
            "overloaded.request_memory"
        );
        assert_eq!(s.request_memory_bytes(), 60, "a refused charge takes nothing");
        let parts = s.request_memory_enter(40, 100).unwrap().split(3);
        assert_eq!(parts.iter().map(|p| p.bytes).collect::<Vec<_>>(), [14, 13, 13]);
        assert_eq!(s.request_memory_bytes(), 100);
        drop(big);
        drop(parts);
        assert_eq!(s.request_memory_bytes(), 0);
    }
}

/// A modern request's place among `modern.max_in_flight` (and its caller's among
/// `modern.max_in_flight_per_caller`); given back when dropped.
#[derive(Debug)]
pub(crate) struct ModernInFlight {
    stats: Arc<RuntimeStats>,
    caller: crate::proto::caller::QuotaKey,
}

impl Drop for ModernInFlight {
    fn drop(&mut self) {
        self.stats.modern_in_flight.fetch_sub(1, Ordering::AcqRel);
        let mut by = self.stats.modern_by_caller.lock();
        if let Some(n) = by.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.caller);
            }
        }
    }
}

/// What a request holds of the request memory budget (`limits.request_memory_bytes`): the
/// estimated size of its parsed body, given back when dropped — with the request: a modern
/// request's response body or task, a legacy request's entry in its session.
#[derive(Debug)]
#[must_use = "the charge is given back when dropped: keep it as long as the request holds its body"]
pub struct RequestCharge {
    stats: Arc<RuntimeStats>,
    bytes: usize,
}

impl RequestCharge {
    /// Split into `n` charges (at least one) that add up to this one: one for each request of
    /// a batch, each given back when its request ends.
    pub(crate) fn split(self, n: usize) -> Vec<RequestCharge> {
        let n = n.max(1);
        let (each, rest) = (self.bytes / n, self.bytes % n);
        let stats = Arc::clone(&self.stats);
        // The bytes move to the parts: this one gives back nothing when it drops.
        let mut this = self;
        this.bytes = 0;
        (0..n)
            .map(|i| RequestCharge {
                stats: Arc::clone(&stats),
                bytes: each + usize::from(i < rest),
            })
            .collect()
    }
}

impl Drop for RequestCharge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.stats.request_memory.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// A `subscriptions/listen` stream's place among `modern.listen_max` (and its caller's among
/// `modern.listen_per_caller`); given back when dropped.
#[derive(Debug)]
pub(crate) struct ListenPlace {
    stats: Arc<RuntimeStats>,
    caller: crate::proto::caller::QuotaKey,
}

impl Drop for ListenPlace {
    fn drop(&mut self) {
        self.stats.listen_open.fetch_sub(1, Ordering::AcqRel);
        let mut by = self.stats.listen_by_caller.lock();
        if let Some(n) = by.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.caller);
            }
        }
    }
}
