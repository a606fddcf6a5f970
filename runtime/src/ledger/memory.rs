//! The in-memory store: for tests and throwaway runs (`--ledger memory`). Same semantics as
//! the SQLite store, lost with the process.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use parking_lot::Mutex;

use super::{Durability, Named, Op, Store, StoreError};

#[derive(Debug, Default)]
struct Log {
    events: BTreeMap<u64, Bytes>,
    expires_ms: u64,
}

#[derive(Debug, Default)]
struct Index {
    scores: HashMap<String, u64>,
    order: BTreeSet<(u64, String)>,
    expires_ms: u64,
}

#[derive(Debug, Default)]
struct Tables {
    kv: HashMap<String, (Bytes, u64)>,
    logs: HashMap<String, Log>,
    indexes: HashMap<String, Index>,
    /// Tally → bucket end → (entries, bytes).
    tallies: HashMap<String, BTreeMap<u64, (i64, i64)>>,
}

/// The in-memory store.
#[derive(Debug, Default)]
pub struct MemoryStore {
    tables: Mutex<Tables>,
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }
}

fn apply_one(t: &mut Tables, op: &Op) {
    match op {
        Op::Put { key, value, expires_ms } => {
            t.kv.insert(key.clone(), (value.clone(), *expires_ms));
        }
        Op::PutLater { key, value, expires_ms } => {
            if t.kv.get(key).is_none_or(|(_, exp)| exp <= expires_ms) {
                t.kv.insert(key.clone(), (value.clone(), *expires_ms));
            }
        }
        // One process: nobody else to tell.
        Op::Publish { .. } => {}
        Op::Delete { key } => {
            t.kv.remove(key);
        }
        Op::Append { log, seq, frame, max_len, expires_ms } => {
            if !t.logs.contains_key(&**log) {
                t.logs.insert(log.to_string(), Log::default());
            }
            let l = t.logs.get_mut(&**log).expect("inserted above");
            l.expires_ms = l.expires_ms.max(*expires_ms);
            if l.events.last_key_value().is_some_and(|(newest, _)| newest >= seq) {
                return;
            }
            l.events.insert(*seq, frame.clone());
            // The newest `max_len` sequence numbers are kept (as in the SQLite store: with
            // holes in a log that is fewer than `max_len` events).
            let keep_from = seq.saturating_sub((*max_len).max(1) as u64);
            while l.events.first_key_value().is_some_and(|(s, _)| *s <= keep_from) {
                l.events.pop_first();
            }
        }
        Op::DropLog { log } => {
            t.logs.remove(log);
        }
        Op::IndexAdd { index, member, score, expires_ms } => {
            let i = t
                .indexes
                .entry(index.clone())
                .or_insert_with(|| Index { expires_ms: *expires_ms, ..Index::default() });
            if let Some(old) = i.scores.insert(member.clone(), *score) {
                i.order.remove(&(old, member.clone()));
            }
            i.order.insert((*score, member.clone()));
        }
        Op::IndexRemove { index, member } => {
            if let Some(i) = t.indexes.get_mut(index)
                && let Some(old) = i.scores.remove(member)
            {
                i.order.remove(&(old, member.clone()));
            }
        }
        Op::DropIndex { index } => {
            t.indexes.remove(index);
        }
        Op::Tally { tally, bucket, count, bytes, now_ms } => {
            let t = t.tallies.entry(tally.clone()).or_default();
            let b = t.entry(*bucket).or_default();
            *b = (b.0.saturating_add(*count), b.1.saturating_add(*bytes));
            t.retain(|end, (c, b)| *end > *now_ms && (*c > 0 || *b > 0));
        }
        Op::IndexTrim { index, below } => {
            if let Some(i) = t.indexes.get_mut(index) {
                while let Some((_, member)) = i.order.first().filter(|(s, _)| s < below).cloned() {
                    i.order.pop_first();
                    i.scores.remove(&member);
                }
            }
        }
        Op::Expire { name, of, expires_ms } => {
            debug_assert!(
                (*of == Named::Key || !t.kv.contains_key(name))
                    && (*of == Named::Log || !t.logs.contains_key(name))
                    && (*of == Named::Index || !t.indexes.contains_key(name)),
                "an expiry of {name} names it a {of:?}, which it is not"
            );
            match of {
                Named::Key => {
                    if let Some((_, exp)) = t.kv.get_mut(name) {
                        *exp = (*exp).max(*expires_ms);
                    }
                }
                Named::Log => {
                    if let Some(l) = t.logs.get_mut(name) {
                        l.expires_ms = l.expires_ms.max(*expires_ms);
                    }
                }
                Named::Index => {
                    if let Some(i) = t.indexes.get_mut(name) {
                        i.expires_ms = i.expires_ms.max(*expires_ms);
                    }
                }
            }
        }
    }
}

impl Store for MemoryStore {
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        let mut t = self.tables.lock();
        for op in ops {
            apply_one(&mut t, op);
        }
        Ok(())
    }

    fn get(&self, key: &str, now_ms: u64) -> Result<Option<Bytes>, StoreError> {
        Ok(self.tables.lock().kv.get(key).filter(|(_, exp)| *exp > now_ms).map(|(v, _)| v.clone()))
    }

    fn read_log(&self, log: &str, now_ms: u64) -> Result<Vec<(u64, Bytes)>, StoreError> {
        let t = self.tables.lock();
        Ok(t.logs
            .get(log)
            .filter(|l| l.expires_ms > now_ms)
            .map(|l| l.events.iter().map(|(s, f)| (*s, f.clone())).collect())
            .unwrap_or_default())
    }

    fn index_lowest(
        &self,
        index: &str,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let t = self.tables.lock();
        Ok(t.indexes
            .get(index)
            .filter(|i| i.expires_ms > now_ms)
            .map(|i| i.order.iter().take(limit).map(|(s, m)| (m.clone(), *s)).collect())
            .unwrap_or_default())
    }

    fn index_page(
        &self,
        index: &str,
        after: Option<(u64, &str)>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        use std::ops::Bound;
        let t = self.tables.lock();
        let Some(i) = t.indexes.get(index).filter(|i| i.expires_ms > now_ms) else {
            return Ok(Vec::new());
        };
        let from = after.map_or(Bound::Unbounded, |(s, m)| Bound::Excluded((s, m.to_owned())));
        Ok(i.order
            .range((from, Bound::Unbounded))
            .take(limit)
            .map(|(s, m)| (m.clone(), *s))
            .collect())
    }

    fn index_len(&self, index: &str, now_ms: u64) -> Result<usize, StoreError> {
        Ok(self
            .tables
            .lock()
            .indexes
            .get(index)
            .filter(|i| i.expires_ms > now_ms)
            .map_or(0, |i| i.order.len()))
    }

    fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let mut t = self.tables.lock();
        let mut left = limit;
        let mut take = |expired: bool| {
            let go = expired && left > 0;
            left -= usize::from(go);
            !go
        };
        t.kv.retain(|_, (_, exp)| take(*exp <= now_ms));
        t.logs.retain(|_, l| take(l.expires_ms <= now_ms));
        t.indexes.retain(|_, i| take(i.expires_ms <= now_ms));
        t.tallies.retain(|_, b| take(b.last_key_value().is_none_or(|(end, _)| *end <= now_ms)));
        Ok(limit - left)
    }

    fn set_durability(&self, _: Durability) {}

    fn tally(&self, tally: &str, now_ms: u64) -> Result<(u64, u64), StoreError> {
        let t = self.tables.lock();
        Ok(t.tallies.get(tally).map_or((0, 0), |t| {
            super::tally_sum(t.iter().map(|(end, (c, b))| (*end, *c, *b)), now_ms)
        }))
    }

    fn incr(&self, key: &str, floor: u64, expires_ms: u64, now_ms: u64) -> Result<u64, StoreError> {
        let mut t = self.tables.lock();
        let (current, expiry) = match t.kv.get(key).filter(|(_, exp)| *exp > now_ms) {
            Some((v, exp)) => (super::counter_value(v), *exp),
            None => (0, expires_ms),
        };
        let next = current.max(floor).saturating_add(1);
        t.kv.insert(key.to_owned(), (Bytes::from(next.to_string()), expiry));
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_store_keeps_the_store_contract() {
        super::super::store_tests::contract(&MemoryStore::new());
    }
}
