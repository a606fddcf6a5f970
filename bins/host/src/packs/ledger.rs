//! The `ledger` pack: write tools for fault-injection runs, made safe to retry by the
//! runtime's idempotency receipts (not by the tools themselves).
//!
//! - `ledger_append {key, hold_ms?}` applies one write. Its `key` argument is its idempotency
//!   key (declared to the runtime), so a retry with the same key — in the same session or a
//!   new one, before or after a restart of the host — is answered from the receipt and never
//!   applied twice; after a crash *during* the call the retry is told the outcome is unknown
//!   (the tool is not idempotent). `hold_ms` (at most [`HOLD_MAX_MS`]) waits after the write
//!   and before the answer, to put a crash between them.
//! - `ledger_set {name, value, hold_ms?}` sets a named value: idempotent (`idempotentHint`),
//!   so a call interrupted by a crash runs again on retry. Keyed through `_meta`.
//! - `ledger_stats` reports writes applied, distinct keys and `duplicates` (a key applied a
//!   second time: a failure of the receipts, which `mcp-load gate` requires to be zero), and
//!   `sets`.
//!
//! The applied keys are journaled (one line per write, flushed to the file before the answer)
//! when the host runs on a SQLite ledger (`<ledger.path>.appends`), so the duplicate count
//! holds across restarts, SIGKILL included. Keys are namespaced by the authenticated
//! principal; each namespace remembers [`KEYS_PER_PRINCIPAL`] keys, oldest forgotten first.

use std::collections::{HashMap, HashSet, VecDeque};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mcp_runtime::tools::{CallToolResult, CatalogBuilder, ToolAnnotations, ToolSpec, tool_fn};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Most keys remembered per principal (for the duplicate count).
pub(crate) const KEYS_PER_PRINCIPAL: usize = 250_000;
/// Longest `hold_ms`.
pub(crate) const HOLD_MAX_MS: u64 = 30_000;

#[derive(Default)]
struct Namespace {
    keys: HashSet<String>,
    order: VecDeque<String>,
}

#[derive(Default)]
struct Ledger {
    spaces: HashMap<Option<String>, Namespace>,
    capacity: usize,
    /// Writes applied (each one a business effect).
    applied: u64,
    /// Writes whose key had been applied before.
    duplicates: u64,
    /// `ledger_set` executions.
    sets: u64,
    /// The principal each recent key was first applied under (bounded like a namespace, over
    /// all principals), and the keys applied under a second principal: fine for two callers
    /// that chose one key, a failure when one call was applied as two callers (`mcp-load`'s
    /// keys are unique per call, so the gate requires zero).
    owners: HashMap<String, Option<String>>,
    owner_order: VecDeque<String>,
    cross_principal: u64,
    journal: Option<super::journal::JsonlJournal>,
}

impl Ledger {
    fn new(capacity: usize) -> Ledger {
        Ledger { capacity, ..Ledger::default() }
    }

    /// Open (or create) the journal at `path` and count what it holds.
    fn with_journal(capacity: usize, path: &Path) -> std::io::Result<Ledger> {
        let mut l = Ledger::new(capacity);
        let journal = super::journal::JsonlJournal::open(path, |v| {
            if let Some(k) = v["k"].as_str() {
                l.count(v["p"].as_str(), k);
            }
        })?;
        l.journal = Some(journal);
        Ok(l)
    }

    fn count(&mut self, principal: Option<&str>, key: &str) -> u64 {
        self.applied += 1;
        match self.owners.get(key) {
            Some(first) if first.as_deref() != principal => self.cross_principal += 1,
            Some(_) => {}
            None => {
                self.owners.insert(key.to_owned(), principal.map(str::to_owned));
                self.owner_order.push_back(key.to_owned());
                if self.owner_order.len() > self.capacity
                    && let Some(old) = self.owner_order.pop_front()
                {
                    self.owners.remove(&old);
                }
            }
        }
        let space = self.spaces.entry(principal.map(str::to_owned)).or_default();
        if !space.keys.insert(key.to_owned()) {
            self.duplicates += 1;
            return self.applied;
        }
        space.order.push_back(key.to_owned());
        if space.order.len() > self.capacity
            && let Some(old) = space.order.pop_front()
        {
            space.keys.remove(&old);
        }
        self.applied
    }

    /// Apply the write for `key` of `principal`; returns its sequence number.
    fn append(&mut self, principal: Option<&str>, key: &str) -> std::io::Result<u64> {
        if let Some(j) = &mut self.journal {
            j.append(&json!({"p": principal, "k": key}))?;
        }
        Ok(self.count(principal, key))
    }

    fn stats(&self) -> Value {
        json!({"applied": self.applied, "keys": self.applied - self.duplicates, "duplicates": self.duplicates, "cross_principal": self.cross_principal, "sets": self.sets})
    }
}

fn hold(args: &Value) -> Result<Duration, String> {
    match args.get("hold_ms") {
        None | Some(Value::Null) => Ok(Duration::ZERO),
        Some(v) => v
            .as_u64()
            .filter(|ms| *ms <= HOLD_MAX_MS)
            .map(Duration::from_millis)
            .ok_or_else(|| format!("hold_ms must be an integer from 0 to {HOLD_MAX_MS}")),
    }
}

/// The pack; `journal` is where applied keys are journaled (none: memory only).
pub(crate) fn pack(journal: Option<&Path>) -> Result<CatalogBuilder, String> {
    let ledger = match journal {
        Some(p) => Ledger::with_journal(KEYS_PER_PRINCIPAL, p)
            .map_err(|e| format!("ledger pack journal {}: {e}", p.display()))?,
        None => Ledger::new(KEYS_PER_PRINCIPAL),
    };
    let ledger = Arc::new(Mutex::new(ledger));
    let hold_schema = json!({"type":"integer","minimum":0,"maximum":HOLD_MAX_MS,"description":"Wait this long after the write, before answering (ms)"});
    let append = ToolSpec::new(
        "ledger_append",
        "Appends one entry to the server's ledger. The key is the call's idempotency key: a retry with the same key is answered from its receipt and not applied again.",
        json!({"type":"object","properties":{"key":{"type":"string","description":"Idempotency key (1 to 128 bytes)"},"amount":{"type":"integer"},"hold_ms":hold_schema},"required":["key"]}),
    )
    .annotations(ToolAnnotations { read_only_hint: Some(false), idempotent_hint: Some(false), destructive_hint: Some(false), open_world_hint: Some(false), ..Default::default() })
    .idempotency_key_argument("key");
    let set = ToolSpec::new(
        "ledger_set",
        "Sets a named value (idempotent: setting it again changes nothing).",
        json!({"type":"object","properties":{"name":{"type":"string"},"value":{},"hold_ms":hold_schema},"required":["name","value"]}),
    )
    .annotations(ToolAnnotations { read_only_hint: Some(false), idempotent_hint: Some(true), destructive_hint: Some(false), open_world_hint: Some(false), ..Default::default() });
    let stats = ToolSpec::new(
        "ledger_stats",
        "Writes applied, distinct idempotency keys and duplicates.",
        json!({"type":"object","properties":{}}),
    )
    .annotations(ToolAnnotations {
        read_only_hint: Some(true),
        idempotent_hint: Some(true),
        ..Default::default()
    });
    let (l1, l2) = (Arc::clone(&ledger), Arc::clone(&ledger));
    Ok(CatalogBuilder::default()
        .tool(tool_fn(append, move |args: Value, cx| {
            let l = Arc::clone(&l1);
            async move {
                let hold = hold(&args).map_err(mcp_runtime::tools::ToolError::Failed)?;
                // The schema requires the key; the runtime checked its length.
                let key = args["key"].as_str().unwrap_or_default();
                let seq = l
                    .lock()
                    .append(cx.principal(), key)
                    .map_err(|e| mcp_runtime::tools::ToolError::Failed(format!("journal: {e}")))?;
                if !hold.is_zero() {
                    // Without a hold the call has no await point after its write: only a
                    // crash can come between the write and the answer.
                    tokio::time::sleep(hold).await;
                }
                let mut r = CallToolResult::text(key);
                r.structured_content = Some(json!({"seq": seq}));
                Ok(r)
            }
        }))
        .tool(tool_fn(set, move |args: Value, _cx| {
            let l = Arc::clone(&l2);
            async move {
                let hold = hold(&args).map_err(mcp_runtime::tools::ToolError::Failed)?;
                let name = args["name"].as_str().unwrap_or_default().to_owned();
                // The value itself is not kept: the pack counts executions, which is what a
                // test of re-running an idempotent call looks at.
                let n = {
                    let mut l = l.lock();
                    l.sets += 1;
                    l.sets
                };
                if !hold.is_zero() {
                    // Without a hold the call has no await point after its write: only a
                    // crash can come between the write and the answer.
                    tokio::time::sleep(hold).await;
                }
                let mut r = CallToolResult::text(format!("{name} set"));
                r.structured_content = Some(json!({"execution": n}));
                Ok(r)
            }
        }))
        .tool(tool_fn(stats, move |_, _cx| {
            let l = Arc::clone(&ledger);
            async move { Ok(CallToolResult::structured(l.lock().stats())) }
        })))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_key_applied_twice_is_counted_as_a_duplicate() {
        let mut l = Ledger::new(10);
        assert_eq!(l.append(None, "a").unwrap(), 1);
        assert_eq!(l.append(None, "b").unwrap(), 2);
        assert_eq!(l.stats()["duplicates"], 0);
        l.append(None, "a").unwrap();
        assert_eq!(
            l.stats(),
            json!({"applied": 3, "keys": 2, "duplicates": 1, "cross_principal": 0, "sets": 0})
        );
    }

    #[test]
    fn keys_are_per_principal_and_each_namespace_is_bounded() {
        let mut l = Ledger::new(2);
        l.append(Some("alice"), "k").unwrap();
        l.append(Some("bob"), "k").unwrap();
        assert_eq!(l.stats()["duplicates"], 0, "bob's key is not alice's");
        assert_eq!(
            l.stats()["cross_principal"],
            1,
            "but one key under two callers is counted apart"
        );
        for k in ["x", "y", "z"] {
            l.append(Some("mallory"), k).unwrap();
        }
        assert_eq!(
            l.spaces[&Some("mallory".to_owned())].keys.len(),
            2,
            "mallory's table is bounded"
        );
        l.append(Some("alice"), "k").unwrap();
        assert_eq!(l.stats()["duplicates"], 1, "mallory's writes did not push alice's key out");
    }

    #[test]
    fn the_journal_keeps_the_count_across_a_restart_and_skips_a_torn_last_line() {
        let dir = mcp_devtools::TempDir::new("ledger-pack");
        let path = dir.path().join("j");
        let mut l = Ledger::with_journal(10, &path).unwrap();
        l.append(Some("p"), "a").unwrap();
        l.append(None, "b").unwrap();
        drop(l);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"p\":null,\"k\":\"tor")
            .unwrap();
        let mut again = Ledger::with_journal(10, &path).unwrap();
        assert_eq!(again.stats()["applied"], 2);
        again.append(Some("p"), "a").unwrap();
        assert_eq!(again.stats()["duplicates"], 1, "a key applied before the restart counts");
        drop(again);
        assert_eq!(
            Ledger::with_journal(10, &path).unwrap().stats()["applied"],
            3,
            "the line after the torn one is whole"
        );
    }

    #[test]
    fn hold_is_bounded() {
        assert!(hold(&json!({"hold_ms": HOLD_MAX_MS + 1})).is_err());
        assert_eq!(hold(&json!({"hold_ms": 5})).unwrap(), Duration::from_millis(5));
        assert_eq!(hold(&json!({})).unwrap(), Duration::ZERO);
    }
}
