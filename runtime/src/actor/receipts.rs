//! Idempotency receipts, the shell: the process's [`ReceiptTable`] with a channel per
//! waiting caller, and the receipts' reads and writes in the ledger. The decisions are the
//! table's; this only reads, writes and answers.
//!
//! An execution's `Running` receipt is committed before the tool runs: a crash after the
//! tool's effect then leaves "running" behind (outcome unknown), never nothing (which would
//! run it a second time). Its outcome is written when it finishes; until that commit, callers
//! are answered from the table.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::durable::LedgerCtx;
use crate::ledger::codec::{self, Outcome, ReceiptRecord, ReceiptState, Record};
use crate::ledger::{Durability, Op};
use crate::proto::jsonrpc::{ErrorObject, code};
use crate::proto::receipt::{Answer, Arrival, Decision, ReceiptTable, Stored, Waiter};
use crate::tools::unwind::CatchUnwind;
use crate::tools::{BoxFuture, CallToolResult, Dispatch, IdempotentCall};

/// Where a call answered from a receipt says so: `_meta["io.mcp-host/idempotency"]` is
/// `"replayed"` (from a finished execution) or `"attached"` (it waited for one running).
pub const IDEMPOTENCY_RESULT_META: &str = "io.mcp-host/idempotency";

/// Runs the execution of a call once its receipt allows it: the tool's dispatch with its
/// panic uncaught ([`crate::tools::Catalog::dispatch_uncaught`]), so that a panic unwinds
/// through the execution (its receipt stays `Running`: outcome unknown) to [`Receipts::call`],
/// which answers it.
pub(crate) type Run = Box<dyn FnOnce() -> Dispatch + Send>;

impl Waiter for oneshot::Sender<Answer> {
    fn is_gone(&self) -> bool {
        self.is_closed()
    }
}

/// The table; shared with the writer's commit callbacks, which must not own the writer (they
/// run on its thread, which the writer's drop joins), so it has an `Arc` of its own.
type Table = Arc<Mutex<ReceiptTable<oneshot::Sender<Answer>>>>;

/// The process's receipts.
pub(crate) struct Receipts {
    table: Table,
    ledger: Arc<LedgerCtx>,
    retention_ms: u64,
    max_bytes: usize,
    stats: Arc<super::stats::RuntimeStats>,
}

impl std::fmt::Debug for Receipts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receipts").field("entries", &self.table.lock().len()).finish_non_exhaustive()
    }
}

impl Receipts {
    pub(crate) fn new(ledger: Arc<LedgerCtx>, retention_ms: u64, max_bytes: usize, stats: Arc<super::stats::RuntimeStats>) -> Receipts {
        Receipts { table: Arc::default(), ledger, retention_ms, max_bytes, stats }
    }

    /// The response of a caller answered without executing, counted.
    fn answered(&self, call: &IdempotentCall, a: Answer) -> Result<Value, ErrorObject> {
        if let Answer::Outcome { attached, .. } = &a {
            self.stats.receipt_hit(!attached);
        }
        answer(call, a)
    }

    /// Serve `call` of its caller (`principal`: the principal, or without authentication the address) under its receipt: `run` executes it, at most once per key
    /// while the receipt is kept. A tool that panics is answered `-32603` and its receipt left
    /// `Running`: a retry with its key reads "interrupted, outcome unknown".
    pub(crate) fn call(self: &Arc<Self>, call: IdempotentCall, principal: Option<Arc<str>>, run: Run) -> BoxFuture<Result<Value, ErrorObject>> {
        let this = Arc::clone(self);
        let served = Box::pin(async move {
            let key = codec::receipt_key(principal.as_deref(), &call.key);
            let (tx, rx) = oneshot::channel();
            let arrival = this.table.lock().arrive(&key, &call.digest, call.idempotent, tx);
            match arrival {
                // A dropped sender: the execution's task went away without a word (cannot
                // happen while its guard lives; answered as interrupted).
                Arrival::Wait => this.answered(&call, rx.await.unwrap_or(Answer::Unknown)),
                Arrival::Answered(a) => this.answered(&call, a),
                Arrival::Execute => this.execute(key, call, principal, run).await,
                Arrival::Lookup => {
                    let stored = this.read(&key);
                    let (first, waiting) = this.table.lock().resolve(&key, stored);
                    for (w, a) in waiting {
                        let _ = w.send(a);
                    }
                    match first {
                        Decision::Execute => this.execute(key, call, principal, run).await,
                        Decision::Answered(a) => this.answered(&call, a),
                    }
                }
            }
        });
        // The execution's guard is dropped armed by the unwinding: the callers attached to it
        // are told the outcome is unknown, and the `Running` receipt says so to later ones.
        Box::pin(async move { CatchUnwind::new(served).await.unwrap_or_else(|p| Err(p.to_error_object())) })
    }

    /// The receipt the ledger holds for `key`; `None` when it cannot be read.
    fn read(&self, key: &str) -> Option<Stored> {
        let now = self.ledger.ledger.clock.now().0;
        let bytes = match self.ledger.writer.store().get(key, now) {
            Ok(Some(b)) => b,
            Ok(None) => return Some(Stored::Absent),
            Err(e) => {
                tracing::error!(error = %e, "cannot read an idempotency receipt");
                return None;
            }
        };
        match codec::decode(&bytes) {
            Ok(Record::Receipt(r)) => Some(match r.state {
                ReceiptState::Running => Stored::Running { digest: r.args_digest },
                ReceiptState::Done { outcome } => Stored::Done { digest: r.args_digest, outcome },
            }),
            Ok(_) | Err(_) => {
                tracing::error!("an idempotency receipt in the ledger is not readable");
                None
            }
        }
    }

    async fn execute(self: Arc<Self>, key: String, call: IdempotentCall, principal: Option<Arc<str>>, run: Run) -> Result<Value, ErrorObject> {
        let mut guard = Executing { receipts: Arc::clone(&self), key, armed: true, started: false };
        let created_ms = self.ledger.ledger.clock.now().0;
        let mut record = ReceiptRecord {
            principal: principal.as_deref().map(str::to_owned),
            key: call.key.clone(),
            tool: call.tool.clone(),
            args_digest: call.digest.clone(),
            created_ms,
            state: ReceiptState::Running,
        };
        let expires_ms = created_ms.saturating_add(self.retention_ms);
        let put = |r: &ReceiptRecord, key: &str| Op::Put { key: key.to_owned(), value: Bytes::from(codec::encode(&Record::Receipt(r.clone()))), expires_ms };
        if self.ledger.writer.refusal().is_some() {
            // The ledger takes no new durable work now (the front door refuses such calls
            // with 503; this one arrived as it began).
            return answer(&call, Answer::Unavailable);
        }
        if self.ledger.writer.submit_and_wait(vec![put(&record, &guard.key)]).await.is_err() {
            // The receipt is not confirmed in the ledger: running now could run it twice
            // later. Not run; the guard queues its deletion behind it.
            return answer(&call, Answer::Unavailable);
        }
        guard.started = true;
        let r = match run() {
            Dispatch::Ready(r) => r,
            Dispatch::Pending(fut) => fut.await,
        };
        guard.armed = false;
        let outcome = match &r {
            Ok(v) => Outcome::Result(v.clone()),
            Err(e) => Outcome::Error(serde_json::to_value(e).expect("an error object serializes")),
        };
        record.state = ReceiptState::Done { outcome: self.kept(outcome.clone()) };
        let ops = vec![put(&record, &guard.key)];
        let (table, key) = (Arc::clone(&self.table), guard.key.clone());
        let answer_waiters = move |waiting: Vec<oneshot::Sender<Answer>>, outcome: &Outcome| {
            for w in waiting {
                let _ = w.send(Answer::Outcome { outcome: outcome.clone(), attached: true });
            }
        };
        if self.ledger.writer.durability() == Durability::Sync {
            // Nobody learns the outcome before it is on disk: the entry stays running (later
            // callers attach) until the commit, which answers them all.
            let (tx, committed) = oneshot::channel();
            self.ledger.writer.submit_then(
                ops,
                Box::new(move || {
                    let mut t = table.lock();
                    let waiting = t.finish(&key, &outcome);
                    t.settled(&key);
                    drop(t);
                    answer_waiters(waiting, &outcome);
                    let _ = tx.send(());
                }),
            );
            let _ = committed.await;
        } else {
            let waiting = self.table.lock().finish(&key, &outcome);
            answer_waiters(waiting, &outcome);
            self.ledger.writer.submit_then(ops, Box::new(move || table.lock().settled(&key)));
        }
        r
    }

    /// What the receipt keeps of `outcome`: all of it up to `ledger.receipt_max_bytes`.
    fn kept(&self, outcome: Outcome) -> Outcome {
        let len = match &outcome {
            Outcome::Result(v) | Outcome::Error(v) => serde_json::to_vec(v).map_or(usize::MAX, |b| b.len()),
        };
        if len <= self.max_bytes {
            return outcome;
        }
        let text = format!(
            "The call with this idempotency key completed, but its result ({len} bytes) was larger than the server keeps for replay (ledger.receipt_max_bytes = {}); it was not run again.",
            self.max_bytes
        );
        Outcome::Result(serde_json::to_value(CallToolResult::error(text)).expect("a tool result serializes"))
    }
}

/// An execution in progress; dropped before it finishes (the caller cancelled, its session
/// ended), it answers the callers attached to it and lets the ledger answer for the key once
/// the `Running` receipt (outcome unknown) is committed.
struct Executing {
    receipts: Arc<Receipts>,
    key: String,
    armed: bool,
    /// The tool was called (before: dropped while its `Running` receipt was being committed,
    /// so nothing happened and the receipt is deleted).
    started: bool,
}

impl Drop for Executing {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (waiting, answer, ops) = if self.started {
            // Nothing to write: the `Running` receipt says it.
            (self.receipts.table.lock().interrupt(&self.key), Answer::Unknown, Vec::new())
        } else {
            (self.receipts.table.lock().not_run(&self.key), Answer::NotRun, vec![Op::Delete { key: self.key.clone() }])
        };
        for w in waiting {
            let _ = w.send(answer.clone());
        }
        let (table, key) = (Arc::clone(&self.receipts.table), std::mem::take(&mut self.key));
        // Once that is committed (the `Running` receipt may still be queued) the ledger answers.
        self.receipts.ledger.writer.submit_then(ops, Box::new(move || table.lock().settled(&key)));
    }
}

/// The response a caller answered without executing gets.
fn answer(call: &IdempotentCall, a: Answer) -> Result<Value, ErrorObject> {
    let tool_error = |text: String| Ok(serde_json::to_value(CallToolResult::error(text)).expect("a tool result serializes"));
    match a {
        Answer::Outcome { outcome: Outcome::Result(mut v), attached } => {
            if let Some(obj) = v.as_object_mut() {
                let meta = obj.entry("_meta").or_insert_with(|| json!({}));
                if let Some(m) = meta.as_object_mut() {
                    m.insert(IDEMPOTENCY_RESULT_META.into(), json!(if attached { "attached" } else { "replayed" }));
                }
            }
            Ok(v)
        }
        Answer::Outcome { outcome: Outcome::Error(e), .. } => {
            Err(serde_json::from_value(e).unwrap_or_else(|_| ErrorObject::new(code::INTERNAL_ERROR, "the recorded error of this idempotency key is unreadable")))
        }
        Answer::Conflict => tool_error(format!(
            "Idempotency key {:?} was already used for a different call (another tool or other arguments); it was not run. Use a new key for a new call.",
            call.key
        )),
        Answer::Unknown => tool_error(format!(
            "The call with idempotency key {:?} was interrupted (the server restarted, or the call was cancelled) before its outcome was recorded: it may or may not have taken effect. Check before calling again with a new key.",
            call.key
        )),
        Answer::NotRun => tool_error(format!(
            "The call with idempotency key {:?} that this one waited for was cancelled before it ran: nothing was done. Call again with the same key to run it.",
            call.key
        )),
        Answer::TooManyWaiting => Err(ErrorObject::new(
            code::INTERNAL_ERROR,
            format!("too many calls are waiting on idempotency key {:?}; try again once the running one has finished", call.key),
        )),
        Answer::Unavailable => Err(ErrorObject::new(code::INTERNAL_ERROR, "idempotency receipts are unavailable (the ledger cannot be read or written); the call was not run")),
    }
}
