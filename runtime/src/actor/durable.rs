//! What the actors record in the ledger, and how: the keys and records of one session and its
//! streams, built from their cores' state. The cores decide *when* (their `poll_ledger`);
//! this module only turns that into [`Op`]s for the [`Writer`].

use std::sync::Arc;

use bytes::Bytes;

use crate::ledger::codec::{self, Record, RecordState, StreamKindRecord, StreamRecord};
use crate::ledger::{Ledger, Named, Op, Writer};
use crate::proto::digest::HmacKey;
use crate::proto::ids::{SessionId, StreamId, Tick};
use crate::proto::stream::{CloseReason, StreamChange, StreamCore, StreamKind};

/// The ledger as the actors see it.
pub(crate) struct LedgerCtx {
    pub(crate) writer: Arc<Writer>,
    /// The open ledger (its clock, its run).
    pub(crate) ledger: Ledger,
    id_key: HmacKey,
    /// The same under the secrets of `ledger.previous_key_files` (rotation).
    previous_id_keys: Vec<HmacKey>,
    /// Session idle TTL (ms): a record expires this long after its last recorded use.
    pub(crate) idle_ttl_ms: u64,
    /// How long stream records and logs outlive their last write (ms).
    pub(crate) stream_ttl_ms: u64,
}

impl std::fmt::Debug for LedgerCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerCtx").field("writer", &self.writer).finish_non_exhaustive()
    }
}

impl LedgerCtx {
    pub(crate) fn new(ledger: Ledger, idle_ttl_ms: u64, stream_ttl_ms: u64) -> LedgerCtx {
        let key = |secret: &[u8]| {
            HmacKey::new(&crate::ledger::derive_key(secret, "mcp-host session-id hmac v1"))
        };
        let id_key = key(&ledger.secret);
        let previous_id_keys = ledger.previous.iter().map(|s| key(s)).collect();
        LedgerCtx {
            writer: Arc::clone(&ledger.writer),
            ledger,
            id_key,
            previous_id_keys,
            idle_ttl_ms,
            stream_ttl_ms,
        }
    }

    /// The HMACs a session id had under the previous secrets (where a session recorded
    /// before a key rotation is found).
    pub(crate) fn previous_session_hmacs(&self, id: &SessionId) -> Vec<Arc<str>> {
        self.previous_id_keys.iter().map(|k| id_hmac(k, id)).collect()
    }

    /// The ledger name of a session id (128 bits, hex: [`id_hmac`]): the only form of the id
    /// the ledger holds.
    pub(crate) fn session_hmac(&self, id: &SessionId) -> Arc<str> {
        id_hmac(&self.id_key, id)
    }
}

/// A session's ledger name from its id: 128 bits, hex. For an id that carries its time
/// ([`SessionId::minted_at`]), that time first (48 bits, big-endian, so names sort as the
/// sessions were made) and 80 bits of MAC: a new session's records then go to the end of the
/// ledger's indexes, many to a page, where a random name would dirty a page of its own in
/// each (SQLite writes and checkpoints whole pages: `initialize` ran about 1.7 times as fast
/// with ordered names). For any other id, 128 bits of MAC, as earlier builds named them all.
/// [`crate::proto::ids::session_hmac_tail`] is MAC either way.
fn id_hmac(key: &HmacKey, id: &SessionId) -> Arc<str> {
    let mac = key.mac(id.as_str().as_bytes());
    let mut name = [0u8; 16];
    if let Some(at) = id.minted_at() {
        name[..6].copy_from_slice(&at.to_be_bytes()[2..]);
        name[6..].copy_from_slice(&mac[..10]);
    } else {
        name.copy_from_slice(&mac[..16]);
    }
    // Hex in place, copied once into the name (one allocation).
    let mut text = [0u8; 32];
    for (pair, b) in text.chunks_exact_mut(2).zip(name) {
        pair.copy_from_slice(&crate::proto::digest::hex_digits(b));
    }
    Arc::from(std::str::from_utf8(&text).expect("hex digits are ASCII"))
}

/// What a session's record is made of besides its core's state (ticks in the ledger are
/// milliseconds since the epoch: the shells' clock).
#[derive(Debug, Clone)]
pub(crate) struct SessionMeta {
    pub(crate) hmac: Arc<str>,
    pub(crate) principal: Option<Arc<str>>,
    /// The caller as the quotas count it ([`crate::proto::caller::QuotaKey::owner`]): on a
    /// shared ledger its record writes score it in that caller's index.
    pub(crate) owner: Option<Arc<str>>,
    pub(crate) origin: Option<String>,
    pub(crate) created_ms: u64,
    /// Its name leads with the time its id was made ([`SessionId::minted_at`]): the name's
    /// head is no hash.
    pub(crate) ordered_name: bool,
}

/// The session's state as its record states it.
pub(crate) struct SessionNow<'a, I> {
    pub(crate) version: &'a str,
    pub(crate) generation: u32,
    pub(crate) state: RecordState,
    pub(crate) log_level: Option<&'a str>,
    pub(crate) incarnation: u32,
    pub(crate) last_used: Tick,
    pub(crate) handshake: codec::HandshakeLines<'a>,
    /// Its streams: their records, logs and index live as long as the session does, plus the
    /// streams' retention.
    pub(crate) streams: I,
    /// It ever held a stream (or lives again): the ledger may hold its streams' index. On a
    /// ledger of its own, a session's first life without one has none, whose expiry would be a
    /// statement that finds nothing; on a shared one another host may serve it meanwhile and
    /// index streams of its own there, so the index is pushed whatever this life held.
    pub(crate) held_streams: bool,
    /// Where the session is as the record is written, for the ledger's LRU index.
    pub(crate) residence: Residence,
}

/// Where a session is as its record is written. On a ledger of its own, the LRU index that
/// the session cap reads holds the sessions out of this host's memory only (the cap counts
/// those in memory from the registry and never evicts them): a session enters it as it leaves
/// memory, and leaves it as a revive brings it back (the revive's write,
/// [`lru_leave`]). So a new session, and the writes of one in memory, cost no index row. On a
/// shared ledger every active record is indexed, since other hosts' sessions in memory are
/// not in this host's registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Residence {
    /// In memory before and after the write (a new session's, a periodic one, an end's).
    Stays,
    /// It leaves memory with this write (parked, or the process stops).
    Leaving,
}

/// The write that takes a revived session out of the LRU index of a ledger of its own
/// ([`Residence`]); none on a shared ledger, whose index holds every active session.
pub(crate) fn lru_leave(cx: &LedgerCtx, hmac: &str) -> Option<Op> {
    (!cx.ledger.shared).then(|| lru_remove(hmac))
}

/// The write that puts a session out of memory in the LRU index of a ledger of its own, scored
/// by its last use: a revive that failed after its leave was submitted, and a sleeping
/// session stopped whose record already states it (`SleepingSession::shut_down`).
pub(crate) fn lru_enter(cx: &LedgerCtx, hmac: &str, last_used_ms: u64) -> Option<Op> {
    (!cx.ledger.shared).then(|| lru_add(hmac, last_used_ms))
}

/// A session's row in the LRU index, scored by its last use (the index never expires).
fn lru_add(hmac: &str, last_used_ms: u64) -> Op {
    Op::IndexAdd {
        index: codec::SESSIONS_LRU.into(),
        member: hmac.to_owned(),
        score: last_used_ms,
        expires_ms: u64::MAX,
    }
}

/// A session out of the LRU index.
fn lru_remove(hmac: &str) -> Op {
    Op::IndexRemove { index: codec::SESSIONS_LRU.into(), member: hmac.to_owned() }
}

impl SessionMeta {
    pub(crate) fn record_ops(
        &self,
        cx: &LedgerCtx,
        s: SessionNow<'_, impl Iterator<Item = StreamId>>,
    ) -> Vec<Op> {
        let last_used_ms = s.last_used.0;
        let expires_ms = last_used_ms.saturating_add(cx.idle_ttl_ms);
        let record = codec::encode_session(&codec::SessionOut {
            session_hmac: &self.hmac,
            principal: self.principal.as_deref(),
            auth_subject: self.principal.as_deref(),
            protocol_version: s.version,
            handshake: s.handshake,
            origin: self.origin.as_deref(),
            created_ms: self.created_ms,
            last_used_ms,
            expires_ms,
            generation: s.generation,
            state: s.state,
            log_level: s.log_level,
            incarnation: s.incarnation,
            run: cx.ledger.run,
        });
        let (key, value) = (codec::session_key(&self.hmac), Bytes::from(record));
        let mut ops = vec![if s.state == RecordState::Active && cx.ledger.shared {
            // Another host serving the session may have recorded a later use: the later wins.
            Op::PutLater { key, value, expires_ms }
        } else {
            Op::Put { key, value, expires_ms }
        }];
        // The counter of its lives lives as long as any record of it. Only a shared ledger
        // keeps one (a revive there counts the next life in the store, so two hosts never
        // share one); one process numbers lives from the record alone. So nothing to extend
        // on a ledger of its own.
        if cx.ledger.shared {
            ops.push(Op::Expire {
                name: codec::incarnation_key(&self.hmac),
                of: Named::Key,
                expires_ms: expires_ms.saturating_add(cx.idle_ttl_ms),
            });
        }
        // The caller's sessions across hosts (shared ledger): this one until its record
        // expires; those that expired before its last use leave the index.
        if cx.ledger.shared
            && let Some(owner) = &self.owner
        {
            let index = codec::caller_sessions_index(owner);
            if s.state == RecordState::Active {
                ops.push(Op::IndexTrim { index: index.clone(), below: last_used_ms });
                ops.push(Op::IndexAdd {
                    index: index.clone(),
                    member: self.hmac.to_string(),
                    score: expires_ms,
                    expires_ms,
                });
                ops.push(Op::Expire { name: index, of: Named::Index, expires_ms });
            } else {
                ops.push(Op::IndexRemove { index, member: self.hmac.to_string() });
            }
        }
        // The ledger's session cap evicts by the last use its LRU row states ([`Residence`]
        // says which sessions its index holds); an ended session leaves it.
        let indexed = s.state == RecordState::Active
            && (cx.ledger.shared || s.residence == Residence::Leaving);
        if indexed {
            ops.push(lru_add(&self.hmac, last_used_ms));
        } else if s.state != RecordState::Active {
            ops.push(lru_remove(&self.hmac));
        }
        if s.state == RecordState::Active && (s.held_streams || cx.ledger.shared) {
            let streams_expire = last_used_ms.saturating_add(cx.stream_ttl_ms);
            ops.push(Op::Expire {
                name: codec::streams_index(&self.hmac),
                of: Named::Index,
                expires_ms: streams_expire,
            });
            for sid in s.streams {
                ops.push(Op::Expire {
                    name: codec::stream_key(&self.hmac, sid.0),
                    of: Named::Key,
                    expires_ms: streams_expire,
                });
                ops.push(Op::Expire {
                    name: codec::events_key(&self.hmac, sid.0),
                    of: Named::Log,
                    expires_ms: streams_expire,
                });
            }
        }
        ops
    }
}

/// Forget a stream (its retention ended, it was evicted or replaced, its session ended).
pub(crate) fn forget_stream_ops(hmac: &str, sid: StreamId, ops: &mut Vec<Op>) {
    ops.push(Op::Delete { key: codec::stream_key(hmac, sid.0) });
    ops.push(Op::DropLog { log: codec::events_key(hmac, sid.0) });
    ops.push(Op::IndexRemove { index: codec::streams_index(hmac), member: sid.0.to_string() });
}

/// A POST's request digest: SHA-256 of its method and params.
pub(crate) fn request_digest(method: &str, params: Option<&serde_json::Value>) -> String {
    codec::digest(method, params)
}

/// The keys of one stream, and what its record holds besides its core's state. Keys and
/// digest are made when the stream is first recorded: a stream answered in its first write
/// usually never is.
#[derive(Debug)]
pub(crate) struct StreamLedger {
    hmac: Arc<str>,
    sid: StreamId,
    /// Record key and log name, once needed.
    keys: Option<(String, Arc<str>)>,
    /// The POST's method and params, until its digest is needed.
    request: Option<(String, Option<serde_json::Value>)>,
    request_digest: Option<String>,
    created_ms: u64,
    indexed: bool,
}

fn reason_name(r: CloseReason) -> &'static str {
    match r {
        CloseReason::Responded => "responded",
        CloseReason::Cancelled => "cancelled",
        CloseReason::EventsLost => "events_lost",
        CloseReason::SessionEnded => "session_ended",
        CloseReason::Replaced => "replaced",
        CloseReason::Evicted => "evicted",
    }
}

/// Every close reason, for reading a recorded name back.
const REASONS: [CloseReason; 6] = [
    CloseReason::Responded,
    CloseReason::Cancelled,
    CloseReason::EventsLost,
    CloseReason::SessionEnded,
    CloseReason::Replaced,
    CloseReason::Evicted,
];

pub(crate) fn reason_from(name: &str) -> CloseReason {
    REASONS.into_iter().find(|r| reason_name(*r) == name).unwrap_or(CloseReason::Responded)
}

impl StreamLedger {
    /// A new stream (its record and index entry are written on the first flush).
    pub(crate) fn new(
        hmac: Arc<str>,
        sid: StreamId,
        request: Option<(String, Option<serde_json::Value>)>,
        now: Tick,
    ) -> StreamLedger {
        StreamLedger {
            hmac,
            sid,
            keys: None,
            request,
            request_digest: None,
            created_ms: now.0,
            indexed: false,
        }
    }

    /// Its stream will never be recorded ([`StreamCore::settled`]): the request kept for the
    /// record's digest goes.
    pub(crate) fn never_recorded(&mut self) {
        self.request = None;
    }

    /// The session's HMAC.
    pub(crate) fn hmac(&self) -> &str {
        &self.hmac
    }

    /// A stream restored from its record (already indexed).
    pub(crate) fn restored(hmac: Arc<str>, sid: StreamId, record: &StreamRecord) -> StreamLedger {
        let mut l = StreamLedger::new(hmac, sid, None, Tick(record.created_ms));
        l.request_digest.clone_from(&record.request_digest);
        l.indexed = true;
        l
    }

    /// Turn the core's pending changes into operations. Returns them and the newest event
    /// among them (for a `sync` release).
    pub(crate) fn ops(
        &mut self,
        core: &mut StreamCore,
        cx: &LedgerCtx,
        now: Tick,
    ) -> (Vec<Op>, Option<crate::proto::ids::Seq>) {
        let expires_ms = now.0.saturating_add(cx.stream_ttl_ms);
        let max_len = core.window_limits().max_events;
        let mut ops = Vec::new();
        let mut newest = None;
        let mut record = false;
        let Some(changes) = core.poll_ledger() else { return (ops, newest) };
        let (hmac, sid) = (&self.hmac, self.sid.0);
        let (record_key, log) = &*self.keys.get_or_insert_with(|| {
            (codec::stream_key(hmac, sid), codec::events_key(hmac, sid).into())
        });
        for c in changes {
            match c {
                StreamChange::Event { seq, frame } => {
                    newest = Some(seq);
                    ops.push(Op::Append {
                        log: Arc::clone(log),
                        seq: seq.0,
                        frame,
                        max_len,
                        expires_ms,
                    });
                }
                StreamChange::Record => record = true,
            }
        }
        if record {
            if let Some((method, params)) = self.request.take() {
                self.request_digest = Some(request_digest(&method, params.as_ref()));
            }
            let key = record_key.clone();
            ops.push(Op::Put {
                key,
                value: Bytes::from(codec::encode(&Record::Stream(
                    self.record(core, cx.ledger.run),
                ))),
                expires_ms,
            });
            if !self.indexed {
                self.indexed = true;
                let sid = core.id().0;
                ops.push(Op::IndexAdd {
                    index: codec::streams_index(&self.hmac),
                    member: sid.to_string(),
                    score: sid,
                    expires_ms,
                });
            }
        }
        (ops, newest)
    }

    fn record(&self, core: &StreamCore, run: u64) -> StreamRecord {
        let (kind, request_id) = match core.kind() {
            StreamKind::Post { request } => (StreamKindRecord::Post, Some(request.to_value())),
            StreamKind::Get => (StreamKindRecord::Get, None),
        };
        let limits = core.window_limits();
        StreamRecord {
            session_hmac: self.hmac.to_string(),
            stream: core.id().0,
            kind,
            request_id,
            request_digest: self.request_digest.clone(),
            generation: core.generation().0,
            last_sent: core.newest().0,
            last_acked: core.acked().0,
            retry_ms: core.retry_ms(),
            close_reason: core.close_reason().map(|r| reason_name(r).to_owned()),
            max_events: limits.max_events,
            max_bytes: limits.max_bytes,
            created_ms: self.created_ms,
            shadow: core.mode() == crate::proto::rollout::StreamMode::Shadow,
            run,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RuntimeConfig;
    use crate::ledger::codec::RecordState;

    fn record_ops(cx: &LedgerCtx, incarnation: u32) -> Vec<Op> {
        record_ops_with(cx, incarnation, &[], incarnation > 0)
    }

    /// A session's record, as of `last_used` 5, keeping `streams` (`held`: it ever held one).
    fn record_ops_with(
        cx: &LedgerCtx,
        incarnation: u32,
        streams: &[StreamId],
        held: bool,
    ) -> Vec<Op> {
        record_ops_in(cx, (RecordState::Active, Residence::Stays), incarnation, streams, held)
    }

    fn record_ops_in(
        cx: &LedgerCtx,
        (state, residence): (RecordState, Residence),
        incarnation: u32,
        streams: &[StreamId],
        held: bool,
    ) -> Vec<Op> {
        let meta = SessionMeta {
            hmac: Arc::from("5e55"),
            principal: None,
            owner: None,
            origin: None,
            created_ms: 1,
            ordered_name: false,
        };
        meta.record_ops(
            cx,
            SessionNow {
                version: "2025-11-25",
                generation: 1,
                state,
                log_level: None,
                incarnation,
                last_used: Tick(5),
                handshake: codec::HandshakeLines("null\n{}\n{}"),
                streams: streams.iter().copied(),
                held_streams: held,
                residence,
            },
        )
    }

    /// What a session's record pushes on (its streams' index, each stream's record and events)
    /// outlives its first expiry in the stores that look an expiry's name up by its kind.
    #[test]
    fn a_session_record_pushes_its_streams_key_log_and_index() {
        let cx = LedgerCtx::new(Ledger::memory(&RuntimeConfig::default()), 60_000, 60_000);
        let (hmac, sid) = ("5e55", StreamId(7));
        let first = [
            Op::Put {
                key: codec::stream_key(hmac, sid.0),
                value: bytes::Bytes::from_static(b"r"),
                expires_ms: 100,
            },
            Op::Append {
                log: codec::events_key(hmac, sid.0).into(),
                seq: 1,
                frame: bytes::Bytes::from_static(b"f"),
                max_len: 8,
                expires_ms: 100,
            },
            Op::IndexAdd {
                index: codec::streams_index(hmac),
                member: sid.0.to_string(),
                score: 0,
                expires_ms: 100,
            },
        ];
        let dir = mcp_devtools::TempDir::new("record-pushes");
        let sqlite = crate::ledger::SqliteStore::open(&dir.path().join("l.db")).unwrap();
        let stores: [Box<dyn crate::ledger::Store>; 2] =
            [Box::new(crate::ledger::MemoryStore::default()), Box::new(sqlite)];
        for store in stores {
            store.apply(&first).unwrap();
            store.apply(&record_ops_with(&cx, 0, &[sid], true)).unwrap();
            let later = 1_000;
            assert!(store.get(&codec::stream_key(hmac, sid.0), later).unwrap().is_some());
            assert!(!store.read_log(&codec::events_key(hmac, sid.0), later).unwrap().is_empty());
            let index = store.index_page(&codec::streams_index(hmac), None, 8, later).unwrap();
            assert_eq!(index.len(), 1);
        }
    }

    #[test]
    fn a_session_pushes_its_streams_index_once_it_held_a_stream_or_on_a_shared_ledger() {
        let cx = LedgerCtx::new(Ledger::memory(&RuntimeConfig::default()), 60_000, 60_000);
        let index = codec::streams_index("5e55");
        let pushes = |ops: &[Op]| {
            ops.iter()
                .any(|o| matches!(o, Op::Expire { name, of: Named::Index, .. } if *name == index))
        };
        assert!(!pushes(&record_ops_with(&cx, 0, &[], false)), "never had one: no index");
        // Its streams are gone, but members may be added again before the index expires.
        assert!(pushes(&record_ops_with(&cx, 0, &[], true)));
        assert!(pushes(&record_ops_with(&cx, 0, &[StreamId(3)], true)));
        // Shared: another host serving it meanwhile may have indexed streams of its own.
        let mut shared = Ledger::memory(&RuntimeConfig::default());
        shared.shared = true;
        let shared = LedgerCtx::new(shared, 60_000, 60_000);
        assert!(pushes(&record_ops_with(&shared, 0, &[], false)));
    }

    #[test]
    fn on_a_ledger_of_its_own_only_a_session_leaving_memory_is_indexed_for_the_cap() {
        let lru = |ops: &[Op]| {
            ops.iter().find_map(|o| match o {
                Op::IndexAdd { index, member, score, .. } if index == codec::SESSIONS_LRU => {
                    assert_eq!((&**member, *score), ("5e55", 5), "its name, its last use");
                    Some("add")
                }
                Op::IndexRemove { index, .. } if index == codec::SESSIONS_LRU => Some("remove"),
                _ => None,
            })
        };
        let at = |cx: &LedgerCtx, state: RecordState, residence: Residence, incarnation: u32| {
            lru(&record_ops_in(cx, (state, residence), incarnation, &[], incarnation > 0))
        };
        let own = LedgerCtx::new(Ledger::memory(&RuntimeConfig::default()), 60_000, 60_000);
        use {RecordState::*, Residence::*};
        assert_eq!(at(&own, Active, Stays, 0), None, "a new session writes no row");
        assert_eq!(at(&own, Active, Stays, 2), None, "nor a periodic write in memory");
        assert_eq!(at(&own, Active, Leaving, 0), Some("add"), "parked, or the process stops");
        assert_eq!(at(&own, Deleted, Stays, 0), Some("remove"), "an end leaves the index");
        assert_eq!(at(&own, Expired, Stays, 1), Some("remove"));
        // Shared: other hosts' sessions in memory are not this registry's; all are indexed.
        let mut shared = Ledger::memory(&RuntimeConfig::default());
        shared.shared = true;
        let shared = LedgerCtx::new(shared, 60_000, 60_000);
        for residence in [Stays, Leaving] {
            assert_eq!(at(&shared, Active, residence, 1), Some("add"), "{residence:?}");
        }
        assert_eq!(at(&shared, Evicted, Stays, 1), Some("remove"));
    }

    #[test]
    fn a_life_counter_is_extended_only_on_a_shared_ledger() {
        let counter = codec::incarnation_key("5e55");
        let extends = |ops: &[Op]| {
            ops.iter()
                .any(|o| matches!(o, Op::Expire { name, of: Named::Key, .. } if *name == counter))
        };
        let own = LedgerCtx::new(Ledger::memory(&RuntimeConfig::default()), 60_000, 60_000);
        assert!(!extends(&record_ops(&own, 0)), "one process keeps no counter");
        assert!(!extends(&record_ops(&own, 3)), "not after a revive either");
        let mut shared = Ledger::memory(&RuntimeConfig::default());
        shared.shared = true;
        let shared = LedgerCtx::new(shared, 60_000, 60_000);
        assert!(extends(&record_ops(&shared, 0)), "another host may have counted a life");
        assert!(extends(&record_ops(&shared, 2)));
    }

    #[test]
    fn names_of_ids_with_their_time_sort_as_they_were_made_and_others_are_all_mac() {
        use crate::proto::ids::{SESSION_ID_RANDOM_BYTES, session_hmac_tail};
        let cx = LedgerCtx::new(Ledger::memory(&RuntimeConfig::default()), 60_000, 60_000);
        let at = 0x0194_1234_5678;
        let ids: Vec<SessionId> = [(at, 9), (at, 1), (at + 1, 5), (at + 700, 0)]
            .iter()
            .map(|&(t, r)| SessionId::mint(1, Some(t), &[r; SESSION_ID_RANDOM_BYTES]))
            .collect();
        let names: Vec<Arc<str>> = ids.iter().map(|id| cx.session_hmac(id)).collect();
        for n in &names {
            assert!(n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()), "{n}");
        }
        assert!(names[0].starts_with("019412345678") && names[1].starts_with("019412345678"));
        assert_ne!(names[0], names[1], "the same millisecond: told apart by the MAC");
        assert!(names[0] < names[2] && names[1] < names[2] && names[2] < names[3], "{names:?}");
        // An id without its time (an earlier build's) is named as that build named it: its
        // record is found.
        let old = SessionId::mint(1, None, &[9; SESSION_ID_RANDOM_BYTES]);
        use hmac::{Hmac, Mac};
        let key = crate::ledger::derive_key(&cx.ledger.secret, "mcp-host session-id hmac v1");
        let mut m = <Hmac<sha2::Sha256>>::new_from_slice(&key).expect("any key length");
        m.update(old.as_str().as_bytes());
        assert_eq!(&*cx.session_hmac(&old), codec::hex(&m.finalize().into_bytes()[..16]));
        // The tail is MAC: ids minted in one millisecond differ there.
        assert_ne!(session_hmac_tail(&names[0]), session_hmac_tail(&names[1]));
    }
}
