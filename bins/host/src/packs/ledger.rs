//! The `ledger` pack: a write tool with idempotency keys, for fault-injection runs.
//!
//! `ledger_append` applies a write at most once per idempotency key, server-wide (across
//! sessions, so a request re-issued in a new session after a 404 is not applied twice).
//! `ledger_stats` reports how many writes were applied and how many distinct keys they had:
//! `applied - keys` is the number of duplicate business dispatches, which `mcp-load gate`
//! requires to be zero. Keys are remembered up to [`KEY_CAPACITY`], oldest forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use mcp_runtime::tools::{CallToolResult, CatalogBuilder, ToolAnnotations, ToolError, ToolSpec, tool_fn};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Most idempotency keys remembered.
pub(crate) const KEY_CAPACITY: usize = 1_000_000;

#[derive(Default)]
struct Ledger {
    /// key -> sequence number of the write it applied.
    keys: HashMap<String, u64>,
    order: VecDeque<String>,
    /// Writes applied (each one a business effect).
    applied: u64,
    /// Requests answered from the key table instead of applying again.
    replays: u64,
    forgotten: u64,
}

impl Ledger {
    /// Apply the write for `key` unless it was applied already; returns (seq, applied now).
    fn append(&mut self, key: &str) -> (u64, bool) {
        if let Some(seq) = self.keys.get(key) {
            self.replays += 1;
            return (*seq, false);
        }
        self.applied += 1;
        let seq = self.applied;
        self.keys.insert(key.to_owned(), seq);
        self.order.push_back(key.to_owned());
        if self.order.len() > KEY_CAPACITY
            && let Some(old) = self.order.pop_front()
        {
            self.keys.remove(&old);
            self.forgotten += 1;
        }
        (seq, true)
    }

    fn stats(&self) -> Value {
        let keys = self.keys.len() as u64 + self.forgotten;
        json!({"applied": self.applied, "keys": keys, "duplicates": self.applied - keys.min(self.applied), "replays": self.replays})
    }
}

pub(crate) fn pack() -> CatalogBuilder {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let append = ToolSpec::new(
        "ledger_append",
        "Appends one entry to the server's ledger, at most once per idempotency key.",
        json!({"type":"object","properties":{"key":{"type":"string","description":"Idempotency key"},"amount":{"type":"integer"}},"required":["key"]}),
    )
    .annotations(ToolAnnotations { read_only_hint: Some(false), idempotent_hint: Some(true), destructive_hint: Some(false), open_world_hint: Some(false), ..Default::default() });
    let stats = ToolSpec::new("ledger_stats", "Writes applied and distinct idempotency keys.", json!({"type":"object","properties":{}}))
        .annotations(ToolAnnotations { read_only_hint: Some(true), idempotent_hint: Some(true), ..Default::default() });
    let l = Arc::clone(&ledger);
    CatalogBuilder::default()
        .tool(tool_fn(append, move |args: Value, _cx| {
            let l = Arc::clone(&l);
            async move {
                let key = args.get("key").and_then(Value::as_str).filter(|k| !k.is_empty()).ok_or_else(|| ToolError::Failed("key must be a non-empty string".into()))?;
                let (seq, applied) = l.lock().append(key);
                let mut r = CallToolResult::text(key);
                r.structured_content = Some(json!({"seq": seq, "applied": applied}));
                Ok(r)
            }
        }))
        .tool(tool_fn(stats, move |_, _cx| {
            let l = Arc::clone(&ledger);
            async move {
                let s = l.lock().stats();
                let mut r = CallToolResult::text(s.to_string());
                r.structured_content = Some(s);
                Ok(r)
            }
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_applied_once_and_replays_are_counted() {
        let mut l = Ledger::default();
        assert_eq!(l.append("a"), (1, true));
        assert_eq!(l.append("b"), (2, true));
        assert_eq!(l.append("a"), (1, false), "the same key answers with the first write");
        assert_eq!(l.stats(), json!({"applied": 2, "keys": 2, "duplicates": 0, "replays": 1}));
    }
}
