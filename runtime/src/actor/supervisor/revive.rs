//! What a revive reads of a recorded session (its record and streams, moved from a previous
//! key's names), one revive at a time per session, and the ledger's session cap.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::actor::durable::LedgerCtx;
use crate::actor::env::Settle;
use crate::actor::registry::Registry;
use crate::actor::session::SessionHandle;
use crate::ledger::codec::{self, Record, RecordState};
use crate::stats::RuntimeStats;

/// Copy a session's streams recorded under `old` (a previous key's HMAC) to `new`: records,
/// logs and index. The session's own record is written under `new` by its first record after
/// the revive, after these (the writer keeps order); until then a revive finds it under `old`
/// again. Nothing under `old` is deleted: it expires on its own, so no crash in between can
/// lose the session.
pub(super) fn migration_ops(
    new: &str,
    record: &codec::SessionRecord,
    streams: &[(codec::StreamRecord, Vec<(u64, bytes::Bytes)>)],
    cx: &LedgerCtx,
) -> Vec<crate::ledger::Op> {
    use crate::ledger::Op;
    let expires_ms = record.last_used_ms.saturating_add(cx.stream_ttl_ms);
    let mut ops = Vec::new();
    for (s, events) in streams {
        ops.push(Op::Put {
            key: codec::stream_key(new, s.stream),
            value: bytes::Bytes::from(codec::encode(&Record::Stream(s.clone()))),
            expires_ms,
        });
        let log: Arc<str> = codec::events_key(new, s.stream).into();
        for (seq, frame) in events {
            ops.push(Op::Append {
                log: Arc::clone(&log),
                seq: *seq,
                frame: frame.clone(),
                max_len: s.max_events.max(1),
                expires_ms,
            });
        }
        ops.push(Op::IndexAdd {
            index: codec::streams_index(new),
            member: s.stream.to_string(),
            score: s.stream,
            expires_ms,
        });
    }
    ops
}

/// A session record and its streams (records and events), as a revive reads them.
pub(super) type SessionFound =
    (codec::SessionRecord, Vec<(codec::StreamRecord, Vec<(u64, bytes::Bytes)>)>);

/// The active session recorded under `hmac` for `principal`, with its (at most `most`)
/// streams.
pub(super) fn read_session(
    store: &dyn crate::ledger::Store,
    hmac: &str,
    principal: Option<&Arc<str>>,
    most: usize,
    now: u64,
) -> Result<Option<SessionFound>, crate::ledger::StoreError> {
    let short = crate::proto::ids::session_hmac_tail(hmac);
    if store.get(&codec::session_end_key(hmac), now)?.is_some() {
        tracing::debug!(target: "mcp_runtime::revive", hmac = short, "not revived: its end is recorded");
        return Ok(None);
    }
    let Some(bytes) = store.get(&codec::session_key(hmac), now)? else {
        if tracing::enabled!(target: "mcp_runtime::revive", tracing::Level::DEBUG) {
            // Gone, or kept but past its expiry for this host's clock?
            let kept =
                store.get(&codec::session_key(hmac), 0)?.and_then(|b| match codec::decode(&b) {
                    Ok(Record::Session(r)) => Some((r.expires_ms, r.last_used_ms, r.run, r.state)),
                    _ => None,
                });
            tracing::debug!(target: "mcp_runtime::revive", hmac = short, now, ?kept, "not revived: no record");
        }
        return Ok(None);
    };
    let Record::Session(record) = codec::decode(&bytes)? else { return Ok(None) };
    if record.state != RecordState::Active
        || record.principal.as_deref() != principal.map(|p| &**p)
        || record.session_hmac != hmac
    {
        tracing::debug!(
            target: "mcp_runtime::revive",
            hmac = short,
            state = ?record.state,
            run = record.run,
            same_principal = record.principal.as_deref() == principal.map(|p| &**p),
            "not revived: its record is not an active session of this caller"
        );
        return Ok(None);
    }
    let mut streams = Vec::new();
    for (member, _) in store.index_lowest(&codec::streams_index(hmac), most, now)? {
        let Ok(sid) = member.parse::<u64>() else { continue };
        let Some(bytes) = store.get(&codec::stream_key(hmac, sid), now)? else { continue };
        let Record::Stream(s) = codec::decode(&bytes)? else { continue };
        let events = store.read_log(&codec::events_key(hmac, sid), now)?;
        streams.push((s, events));
    }
    Ok(Some((record, streams)))
}

/// One revive at a time per shard of session HMACs.
#[derive(Debug)]
pub(super) struct ReviveLocks(pub(super) Vec<tokio::sync::Mutex<()>>);

impl ReviveLocks {
    pub(super) fn shard(&self, hmac: &str) -> usize {
        // The HMAC's tail is uniform: its first two hex digits pick the shard evenly.
        let tail = crate::proto::ids::session_hmac_tail(hmac);
        tail.get(..2).and_then(|h| usize::from_str_radix(h, 16).ok()).unwrap_or(0) % self.0.len()
    }

    pub(super) fn of(&self, hmac: &str) -> &tokio::sync::Mutex<()> {
        &self.0[self.shard(hmac)]
    }
}

/// The ledger's session cap, kept on the writer's thread after each sweep: sessions whose
/// last recorded use is older than the idle TTL leave the LRU index (their records expired);
/// past `max` recorded sessions (on a ledger of its own: those the index holds, out of
/// memory, and those in memory here), the least recently used ones that are not live here
/// (parked, or left by an earlier process) are evicted: their record says `evicted` (their
/// id answers 404, a revive never reads them back) and their streams are deleted. Owns
/// nothing that owns the writer.
pub(super) struct LedgerCap {
    pub(super) max: usize,
    /// Several hosts serve the ledger: its LRU index holds every active session.
    pub(super) shared: bool,
    pub(super) idle_ttl_ms: u64,
    pub(super) registry: Arc<Registry<SessionHandle>>,
    pub(super) revive_locks: Arc<ReviveLocks>,
    pub(super) settling: Arc<Mutex<SettlingMap>>,
    pub(super) stats: Arc<RuntimeStats>,
}

/// Most sessions one housekeeping run evicts (in one transaction); more are evicted by the
/// next run, right after the next batch.
pub(super) const EVICT_PER_RUN: usize = 1_000;

impl LedgerCap {
    /// Returns whether more are to be evicted.
    pub(super) fn run(&self, store: &dyn crate::ledger::Store, now: u64) -> bool {
        match self.evict(store, now) {
            Ok(more) => more,
            Err(e) => {
                tracing::warn!(error = %e, "ledger: session cap housekeeping failed");
                false
            }
        }
    }

    pub(super) fn evict(
        &self,
        store: &dyn crate::ledger::Store,
        now: u64,
    ) -> Result<bool, crate::ledger::StoreError> {
        use crate::ledger::Op;
        store.apply(&[Op::IndexTrim {
            index: codec::SESSIONS_LRU.into(),
            below: now.saturating_sub(self.idle_ttl_ms),
        }])?;
        // On a ledger of its own the index holds the sessions out of memory only
        // ([`crate::actor::durable::Residence`]): those in memory are the registry's.
        let in_memory = if self.shared { 0 } else { self.registry.len() };
        let recorded = store.index_len(codec::SESSIONS_LRU, now)? + in_memory;
        let Some(excess) = recorded.checked_sub(self.max).filter(|n| *n > 0) else {
            return Ok(false);
        };
        let want = excess.min(EVICT_PER_RUN);
        // Live sessions (and those settling) are skipped: read past as many as there can be.
        let window = want + self.registry.len() + self.settling.lock().len() + 64;
        let mut ops = Vec::new();
        let mut evicted = 0;
        // Shards whose revive lock is held until the evictions are committed: no revive reads
        // a record in between.
        let mut held = std::collections::HashMap::new();
        for (hmac, _) in store.index_lowest(codec::SESSIONS_LRU, window, now)? {
            if evicted == want {
                break;
            }
            // A revive in progress holds its shard's lock from its read to its start; a
            // session parking or ending has writes on their way: skip both.
            let shard = self.revive_locks.shard(&hmac);
            if let std::collections::hash_map::Entry::Vacant(e) = held.entry(shard) {
                let Ok(g) = self.revive_locks.0[shard].try_lock() else { continue };
                e.insert(g);
            }
            if self.registry.is_live_hmac(&hmac) || self.settling.lock().contains_key(hmac.as_str())
            {
                continue;
            }
            ops.push(Op::IndexRemove { index: codec::SESSIONS_LRU.into(), member: hmac.clone() });
            if let Some(bytes) = store.get(&codec::session_key(&hmac), now)?
                && let Ok(Record::Session(mut r)) = codec::decode(&bytes)
                && r.state == RecordState::Active
            {
                r.state = RecordState::Evicted;
                // A tombstone for one TTL: the id stays 404 and is never revived.
                ops.push(Op::Put {
                    key: codec::session_key(&hmac),
                    value: bytes::Bytes::from(codec::encode(&Record::Session(r))),
                    expires_ms: now.saturating_add(self.idle_ttl_ms),
                });
                for (sid, _) in store.index_lowest(&codec::streams_index(&hmac), usize::MAX, now)? {
                    if let Ok(sid) = sid.parse::<u64>() {
                        crate::actor::durable::forget_stream_ops(
                            &hmac,
                            crate::proto::ids::StreamId(sid),
                            &mut ops,
                        );
                    }
                }
                ops.push(Op::DropIndex { index: codec::streams_index(&hmac) });
                evicted += 1;
            }
        }
        store.apply(&ops)?;
        drop(held);
        if evicted > 0 {
            self.stats.sessions_evicted_from_ledger(evicted as u64);
            tracing::info!(
                evicted,
                recorded,
                max = self.max,
                "ledger full: least recently used parked sessions evicted"
            );
        }
        Ok(excess > want && evicted == want)
    }
}

/// Session HMAC -> why its last writes are on their way, and how many batches of them.
pub(super) type SettlingMap = HashMap<Arc<str>, (Settle, usize)>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{MemoryStore, Op, Store as _};

    #[test]
    fn sessions_made_in_one_millisecond_are_spread_over_the_revive_shards() {
        let locks = ReviveLocks((0..16).map(|_| tokio::sync::Mutex::new(())).collect());
        let shards: std::collections::HashSet<usize> = (0..=255u8)
            .map(|b| locks.shard(&format!("019412345678{b:02x}{}", "0".repeat(18))))
            .collect();
        assert_eq!(shards.len(), 16, "one time head, every shard");
    }

    fn session(hmac: &str, state: RecordState) -> codec::SessionRecord {
        codec::SessionRecord {
            session_hmac: hmac.into(),
            principal: None,
            auth_subject: None,
            protocol_version: "2025-11-25".into(),
            handshake: codec::Handshake {
                requested_version: None,
                capabilities: serde_json::json!({}),
                client_info: serde_json::json!({}),
            },
            origin: None,
            created_ms: 1,
            last_used_ms: 1,
            expires_ms: 10_000,
            generation: 1,
            state,
            log_level: None,
            incarnation: 0,
            run: 1,
        }
    }

    #[test]
    fn an_ended_session_is_not_revived_even_when_another_host_wrote_it_active_after_the_end() {
        let store = MemoryStore::new();
        let hmac = "ab".repeat(16);
        let put = |r: codec::SessionRecord| Op::Put {
            key: codec::session_key(&hmac),
            value: bytes::Bytes::from(codec::encode(&Record::Session(r))),
            expires_ms: 10_000,
        };
        store.apply(&[put(session(&hmac, RecordState::Active))]).unwrap();
        assert!(read_session(&store, &hmac, None, 8, 5).unwrap().is_some());
        // Ended on one host; another, not told yet, records its later use of it.
        store
            .apply(&[
                put(session(&hmac, RecordState::Deleted)),
                Op::Put {
                    key: codec::session_end_key(&hmac),
                    value: bytes::Bytes::from_static(b"Deleted"),
                    expires_ms: 20_000,
                },
                put(session(&hmac, RecordState::Active)),
            ])
            .unwrap();
        assert!(read_session(&store, &hmac, None, 8, 5).unwrap().is_none());
    }
}
