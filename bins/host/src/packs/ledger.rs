//! The `ledger` pack: a write tool with idempotency keys, for fault-injection runs.
//!
//! `ledger_append` applies a write at most once per idempotency key and caller (keys are
//! namespaced by the authenticated principal, so one caller can neither see nor exhaust
//! another's keys; without authentication every caller shares one namespace), across
//! sessions, so a request re-issued in a new session after a 404 is not applied twice.
//! `ledger_stats` reports writes applied and distinct keys over all namespaces:
//! `applied - keys` is the number of duplicate business dispatches, which `mcp-load gate`
//! requires to be zero. Keys are at most [`KEY_MAX_BYTES`] long; each namespace remembers
//! [`KEYS_PER_PRINCIPAL`] of them, oldest forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use mcp_runtime::tools::{CallToolResult, CatalogBuilder, ToolAnnotations, ToolError, ToolSpec, tool_fn};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Most idempotency keys remembered per principal.
pub(crate) const KEYS_PER_PRINCIPAL: usize = 250_000;
/// Longest idempotency key.
pub(crate) const KEY_MAX_BYTES: usize = 128;

#[derive(Default)]
struct Namespace {
    /// key -> sequence number of the write it applied.
    keys: HashMap<String, u64>,
    order: VecDeque<String>,
}

#[derive(Default)]
struct Ledger {
    spaces: HashMap<Option<String>, Namespace>,
    capacity: usize,
    /// Writes applied (each one a business effect).
    applied: u64,
    /// Requests answered from a key table instead of applying again.
    replays: u64,
    forgotten: u64,
}

impl Ledger {
    fn new(capacity: usize) -> Ledger {
        Ledger { capacity, ..Ledger::default() }
    }

    /// Apply the write for `key` of `principal` unless it was applied already; returns
    /// (seq, applied now).
    fn append(&mut self, principal: Option<&str>, key: &str) -> (u64, bool) {
        let space = self.spaces.entry(principal.map(str::to_owned)).or_default();
        if let Some(seq) = space.keys.get(key) {
            self.replays += 1;
            return (*seq, false);
        }
        self.applied += 1;
        let seq = self.applied;
        space.keys.insert(key.to_owned(), seq);
        space.order.push_back(key.to_owned());
        if space.order.len() > self.capacity
            && let Some(old) = space.order.pop_front()
        {
            space.keys.remove(&old);
            self.forgotten += 1;
        }
        (seq, true)
    }

    fn stats(&self) -> Value {
        let keys = self.spaces.values().map(|s| s.keys.len() as u64).sum::<u64>() + self.forgotten;
        json!({"applied": self.applied, "keys": keys, "duplicates": self.applied - keys.min(self.applied), "replays": self.replays})
    }
}

fn key_of(args: &Value) -> Result<&str, ToolError> {
    let key = args.get("key").and_then(Value::as_str).filter(|k| !k.is_empty()).ok_or_else(|| ToolError::Failed("key must be a non-empty string".into()))?;
    if key.len() > KEY_MAX_BYTES {
        return Err(ToolError::Failed(format!("key must be at most {KEY_MAX_BYTES} bytes")));
    }
    Ok(key)
}

pub(crate) fn pack() -> CatalogBuilder {
    let ledger = Arc::new(Mutex::new(Ledger::new(KEYS_PER_PRINCIPAL)));
    let append = ToolSpec::new(
        "ledger_append",
        "Appends one entry to the server's ledger, at most once per idempotency key.",
        json!({"type":"object","properties":{"key":{"type":"string","description":"Idempotency key (at most 128 bytes)"},"amount":{"type":"integer"}},"required":["key"]}),
    )
    .annotations(ToolAnnotations { read_only_hint: Some(false), idempotent_hint: Some(true), destructive_hint: Some(false), open_world_hint: Some(false), ..Default::default() });
    let stats = ToolSpec::new("ledger_stats", "Writes applied and distinct idempotency keys.", json!({"type":"object","properties":{}}))
        .annotations(ToolAnnotations { read_only_hint: Some(true), idempotent_hint: Some(true), ..Default::default() });
    let l = Arc::clone(&ledger);
    CatalogBuilder::default()
        .tool(tool_fn(append, move |args: Value, cx| {
            let l = Arc::clone(&l);
            async move {
                let key = key_of(&args)?;
                let (seq, applied) = l.lock().append(cx.principal(), key);
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
        let mut l = Ledger::new(10);
        assert_eq!(l.append(None, "a"), (1, true));
        assert_eq!(l.append(None, "b"), (2, true));
        assert_eq!(l.append(None, "a"), (1, false), "the same key answers with the first write");
        assert_eq!(l.stats(), json!({"applied": 2, "keys": 2, "duplicates": 0, "replays": 1}));
    }

    #[test]
    fn keys_are_per_principal_and_each_namespace_is_bounded() {
        let mut l = Ledger::new(2);
        assert_eq!(l.append(Some("alice"), "k"), (1, true));
        assert_eq!(l.append(Some("bob"), "k"), (2, true), "bob's key is not alice's");
        for k in ["x", "y", "z"] {
            l.append(Some("mallory"), k);
        }
        assert_eq!(l.spaces[&Some("mallory".to_owned())].keys.len(), 2, "mallory's table is bounded");
        assert_eq!(l.append(Some("alice"), "k"), (1, false), "mallory's writes did not push alice's key out");
        assert_eq!(l.stats()["duplicates"], 0);
    }

    #[test]
    fn overlong_keys_are_refused() {
        assert!(key_of(&json!({"key": "k".repeat(KEY_MAX_BYTES + 1)})).is_err());
        assert!(key_of(&json!({"key": ""})).is_err());
        assert_eq!(key_of(&json!({"key": "ok"})).unwrap(), "ok");
    }
}
