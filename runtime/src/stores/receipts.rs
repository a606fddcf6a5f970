//! Idempotency receipts, the shell: the process's [`ReceiptTable`] with a channel per
//! waiting caller, and the receipts' reads and writes in the ledger. The decisions are the
//! table's; this only reads, writes and answers.
//!
//! An execution's `Running` receipt is committed before the tool runs: a crash after the
//! tool's effect then leaves "running" behind (outcome unknown), never nothing (which would
//! run it a second time). Its outcome is written when it finishes; until that commit, callers
//! are answered from the table.
//!
//! Bounded: what each caller keeps (receipts and their bytes) and what every caller keeps
//! (bytes) is counted in memory ([`StoreUsage`], rebuilt at start from the ledger), checked
//! before a keyed call is admitted ([`Receipts::admit`]: 429 or 503), and recorded in the
//! same batch as each receipt. A result larger than `ledger.receipt_max_bytes`, or nested
//! deeper than a record can be read back with ([`codec::KEPT_DEPTH_MAX`]), is not kept: its
//! receipt keeps its size and SHA-256, and a replay answers the `-32011` "result not kept"
//! error. Receipts are read on the ledger's reader threads, never on the worker.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::ledger::codec::{self, Outcome, ReceiptRecord, ReceiptState, Record};
use crate::ledger::{Caller, Durability, Entry, Ledger, Op, Reservation, StoreUsage};
use crate::proto::error::{Quota, Rejection, StoreBound};
use crate::proto::jsonrpc::{ErrorObject, Reply, code};
use crate::proto::receipt::{Answer, Arrival, Decision, ReceiptTable, Stored, Waiter};
use crate::proto::usage::{Over, UsageLimits};
use crate::tools::unwind::CatchUnwind;
use crate::tools::{BoxFuture, CallToolResult, Dispatch, IdempotentCall};

/// Where a call answered from a receipt says so: `_meta["io.mcp-host/idempotency"]` is
/// `"replayed"` (from a finished execution) or `"attached"` (it waited for one running).
pub const IDEMPOTENCY_RESULT_META: &str = "io.mcp-host/idempotency";

/// Runs the execution of a call once its receipt allows it: the tool's call with its panic
/// uncaught and its result made a value ([`crate::tools::Catalog::call_tool_kept`]), so that
/// a panic unwinds through the execution (its receipt stays `Running`: outcome unknown) to
/// [`Receipts::call`], which answers it.
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
    ledger: Ledger,
    retention_ms: u64,
    max_bytes: usize,
    stats: Arc<crate::stats::RuntimeStats>,
    /// What each caller, and every caller, keeps.
    usage: Arc<StoreUsage>,
    /// The charge `(expiry, bytes)` of the `Running` receipt an execution interrupted here left
    /// in the ledger, until the table lets the ledger answer for its key (a re-run of an
    /// idempotent tool replaces that receipt and takes its charge back). Held for one insert,
    /// removal or lookup.
    interrupted: Arc<Mutex<std::collections::HashMap<String, (u64, u64)>>>,
    /// The claims this host holds on a shared ledger (an execution that did not start gives
    /// its claim back by deleting it: until that deletion is committed, the next execution of
    /// the key here holds it still, not another host).
    claims: Arc<Mutex<std::collections::HashSet<String>>>,
}

/// How often a receipt whose execution another host runs is read again (shared ledger).
const ELSEWHERE_POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// How long an execution on another host is waited for, at most.
const ELSEWHERE_WAIT: std::time::Duration = std::time::Duration::from_secs(900);
/// How long a claim on an execution holds without its `Running` receipt, at least (the
/// claimer writes it at once; one that died first lets another host claim after this long);
/// longer with a long lease ([`crate::ledger::Ledger::hold_ms`]).
const CLAIM_MS: u64 = 10_000;

/// Bytes a receipt is assumed to take when a call is admitted (a `Running` record is a few
/// hundred bytes; its outcome is counted when it is written).
const ADMIT_BYTES: u64 = 512;

impl std::fmt::Debug for Receipts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receipts")
            .field("entries", &self.table.lock().len())
            .finish_non_exhaustive()
    }
}

impl Receipts {
    /// The receipts of `ledger`, their figures rebuilt from it (a blocking read, at start).
    pub(crate) fn new(
        ledger: Ledger,
        retention_ms: u64,
        max_bytes: usize,
        limits: UsageLimits,
        stats: Arc<crate::stats::RuntimeStats>,
    ) -> Receipts {
        // 64 buckets over the retention: an expired receipt leaves the figures at most 1/64
        // of the retention late.
        let bucket_ms = (retention_ms / 64).max(1000);
        let usage = StoreUsage::open(&ledger, "r", "idempotency receipts", limits, bucket_ms);
        Receipts {
            table: Arc::default(),
            ledger,
            retention_ms,
            max_bytes,
            stats,
            usage: Arc::new(usage),
            interrupted: Arc::default(),
            claims: Arc::default(),
        }
    }

    /// Admit a keyed call of `owner` before anything runs: a place among its receipts is
    /// held (given back if the call is answered without running) so that concurrent calls
    /// cannot all pass the bounds. Refused when the caller keeps as many receipts (or bytes of
    /// them) as it may (429), or every caller together as many bytes (503). A replay of a kept
    /// key is refused too while its caller is over its bound (it is known to be one only once
    /// the ledger is read).
    ///
    /// # Errors
    /// [`Rejection::QuotaExceeded`] ([`Quota::Receipts`]), [`Rejection::StoreFull`].
    pub(crate) fn admit(&self, owner: &Caller) -> Result<Reservation, Rejection> {
        let now = self.ledger.clock.now().0;
        self.usage.reserve(owner, now, now.saturating_add(self.retention_ms), ADMIT_BYTES).map_err(
            |over| match over {
                Over::Caller { .. } => Rejection::QuotaExceeded {
                    cause: Quota::Receipts,
                    retry_after_s: over.retry_after_s(),
                },
                Over::Total { .. } => Rejection::StoreFull {
                    store: StoreBound::Receipts,
                    retry_after_s: over.retry_after_s(),
                },
            },
        )
    }

    /// `(receipts, bytes)` kept by `owner`, and by every caller.
    pub(crate) fn kept(&self, owner: &Caller) -> ((u64, u64), (u64, u64)) {
        let now = self.ledger.clock.now().0;
        (self.usage.of(owner, now), self.usage.total(now))
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
    /// `place` is the call's place among its caller's receipts ([`Receipts::admit`]).
    pub(crate) fn call(
        self: &Arc<Self>,
        call: IdempotentCall,
        principal: Option<Arc<str>>,
        place: Reservation,
        run: Run,
    ) -> BoxFuture<Result<Reply, ErrorObject>> {
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
                Arrival::Execute => {
                    // Over a `Running` receipt this process left when it was interrupted (an
                    // idempotent tool runs again), or over nothing (one that never ran).
                    let prior = this.interrupted.lock().remove(&key);
                    this.execute(key, call, principal, place, prior, run).await
                }
                Arrival::Lookup => {
                    // Resolved whatever happens: dropped during the read (its caller went
                    // away), the lookup answers the callers waiting on it "unavailable".
                    let mut lookup =
                        Lookup { table: Arc::clone(&this.table), key: key.clone(), done: false };
                    let (stored, prior) = this.read(&key).await;
                    lookup.done = true;
                    let (first, waiting) = this.table.lock().resolve(&key, stored);
                    for (w, a) in waiting {
                        let _ = w.send(a);
                    }
                    match first {
                        // Over a `Running` receipt (an idempotent tool's interrupted call) its
                        // charge is taken back; over nothing, there is none.
                        Decision::Execute => {
                            this.execute(key, call, principal, place, prior, run).await
                        }
                        Decision::Answered(a) => this.answered(&call, a),
                    }
                }
            }
        });
        // The execution's guard is dropped armed by the unwinding: the callers attached to it
        // are told the outcome is unknown, and the `Running` receipt says so to later ones.
        Box::pin(async move {
            CatchUnwind::new(served)
                .await
                .unwrap_or_else(|p| Err(p.to_error_object()))
                .map(Reply::Value)
        })
    }

    /// The receipt the ledger holds for `key` (read on a reader thread; `None` when it
    /// cannot be read), and the charge `(expiry, bytes)` it is counted with.
    ///
    /// On a shared ledger, a `Running` receipt whose execution another live host runs is
    /// waited for (read again every [`ELSEWHERE_POLL`], for at most [`ELSEWHERE_WAIT`]):
    /// its outcome, or its host's end (then it reads as interrupted), is what this host
    /// answers with.
    async fn read(&self, key: &str) -> (Option<Stored>, Option<(u64, u64)>) {
        let (this_run, shared) = (self.ledger.run, self.ledger.shared);
        let mut polls = 0u64;
        let bytes = loop {
            let now = self.ledger.clock.now().0;
            let owned = key.to_owned();
            let read = self.ledger.reads.run(move |store| {
                let Some(b) = store.get(&owned, now)? else { return Ok(None) };
                let elsewhere = shared
                    && match codec::decode(&b) {
                        Ok(Record::Receipt(r)) => {
                            r.state == ReceiptState::Running
                                && r.run != 0
                                && r.run != this_run
                                && store.run_alive(r.run, &owned)?
                        }
                        _ => false,
                    };
                Ok(Some((b, elsewhere)))
            });
            match read.await {
                Ok(Some((_, true)))
                    if polls
                        < ELSEWHERE_WAIT.as_millis() as u64 / ELSEWHERE_POLL.as_millis() as u64 =>
                {
                    polls += 1;
                    tokio::time::sleep(ELSEWHERE_POLL).await;
                }
                Ok(Some((_, true))) => {
                    tracing::warn!(
                        "an idempotency key's execution on another host outlasted the wait for it"
                    );
                    return (None, None);
                }
                Ok(Some((b, false))) => break b,
                Ok(None) => return (Some(Stored::Absent), None),
                Err(e) => {
                    tracing::error!(error = %e, "cannot read an idempotency receipt");
                    return (None, None);
                }
            }
        };
        match codec::decode(&bytes) {
            Ok(Record::Receipt(r)) => {
                let charged = (
                    r.created_ms.saturating_add(self.retention_ms),
                    (key.len() + bytes.len()) as u64,
                );
                let stored = match r.state {
                    ReceiptState::Running => Stored::Running { digest: r.args_digest },
                    ReceiptState::Done { outcome } => {
                        Stored::Done { digest: r.args_digest, outcome }
                    }
                };
                (Some(stored), Some(charged))
            }
            Ok(_) | Err(_) => {
                tracing::error!("an idempotency receipt in the ledger is not readable");
                (None, None)
            }
        }
    }

    /// Run `call` under a new `Running` receipt that takes `place`; `prior` is the charge of
    /// the receipt it replaces (an interrupted `Running` one), if any.
    async fn execute(
        self: Arc<Self>,
        key: String,
        call: IdempotentCall,
        principal: Option<Arc<str>>,
        place: Reservation,
        prior: Option<(u64, u64)>,
        run: Run,
    ) -> Result<Value, ErrorObject> {
        let created_ms = self.ledger.clock.now().0;
        let expires_ms = created_ms.saturating_add(self.retention_ms);
        let mut guard = Executing {
            receipts: Arc::clone(&self),
            key,
            armed: true,
            started: false,
            owner: principal.clone(),
            expires_ms,
            bytes: 0,
            claim: None,
            abandoned: None,
            queued: !self.ledger.shared,
            claiming: None,
        };
        let mut record = ReceiptRecord {
            principal: principal.as_deref().map(str::to_owned),
            key: call.key.clone(),
            tool: call.tool.clone(),
            args_digest: call.digest.clone(),
            created_ms,
            state: ReceiptState::Running,
            run: self.ledger.run,
        };
        // A receipt's record and its bytes as the bounds count them (key and value).
        let put = |r: &ReceiptRecord, key: &str| {
            let value = Bytes::from(codec::encode(&Record::Receipt(r.clone())));
            let bytes = (key.len() + value.len()) as u64;
            (Op::Put { key: key.to_owned(), value, expires_ms }, bytes)
        };
        if self.ledger.writer.refusal().is_some() {
            // The ledger takes no new durable work now (the front door refuses such calls
            // with 503; this one arrived as it began).
            return answer(&call, Answer::Unavailable);
        }
        if self.ledger.shared {
            // Another host may have looked the key up as absent too: the first to claim this
            // execution runs it; the others answer with its outcome.
            let replaced =
                prior.map_or(0, |(expires, _)| expires.saturating_sub(self.retention_ms));
            let claim = codec::receipt_claim_key(&guard.key, replaced);
            guard.claiming = Some(claim.clone());
            let claimed = if self.claims.lock().contains(&claim) {
                Ok(true)
            } else {
                self.claim(&claim).await
            };
            if claimed != Ok(true) {
                // Nothing of this execution is written (another host's receipt may be at the
                // key): dropped meanwhile (its session ended while it waited), the guard only
                // answers the callers attached here, so the key is never left running here.
                let key = guard.key.clone();
                if claimed.is_err() {
                    guard.armed = false;
                    return self.end_unrun(&key, &call, Answer::Unavailable);
                }
                if let Some(answered) = self.answered_elsewhere(&key, &call, &claim).await {
                    guard.armed = false;
                    return answered;
                }
                // The other host's claim lapsed (or was given back) with nothing written:
                // this host claimed it and runs the call.
            }
            // Given back if this execution never starts (its receipt is deleted then).
            self.claims.lock().insert(claim.clone());
            guard.claim = Some(claim);
        }
        let (running, bytes) = put(&record, &guard.key);
        if self.ledger.shared {
            // Written if the execution is interrupted here: the same receipt, run by no host,
            // so another host answers for the key at once rather than wait for an outcome this
            // host will never record.
            let mut abandoned = record.clone();
            abandoned.run = 0;
            guard.abandoned = Some(put(&abandoned, &guard.key).0);
        }
        let mut ops = vec![running];
        if let Some((prior_expires, prior_bytes)) = prior {
            ops.extend(self.usage.release(
                &guard.owner,
                &Entry { name: &guard.key, expires_ms: prior_expires, bytes: prior_bytes },
            ));
        }
        ops.extend(place.into_entry(&Entry { name: &guard.key, expires_ms, bytes }, created_ms));
        guard.bytes = bytes;
        guard.queued = true;
        if self.ledger.writer.submit_and_wait(ops).await.is_err() {
            // The receipt is not confirmed in the ledger: running now could run it twice
            // later. Not run; the guard queues its deletion behind it.
            return answer(&call, Answer::Unavailable);
        }
        guard.started = true;
        // As a value: its receipt keeps it.
        let r = match run() {
            Dispatch::Ready(r) => r,
            Dispatch::Pending(fut) => fut.await,
        }
        .and_then(Reply::into_value);
        guard.armed = false;
        // Ran: its receipt answers for the key from now on, whatever becomes of the claim.
        if let Some(c) = guard.claim.take() {
            self.claims.lock().remove(&c);
        }
        let outcome = match &r {
            Ok(v) => Outcome::Result(v.clone()),
            Err(e) => Outcome::Error(serde_json::to_value(e).expect("an error object serializes")),
        };
        // Later callers get what the receipt keeps (also while it is being committed);
        // callers attached to this execution get the whole outcome, as its own caller does.
        // What the receipt keeps is bounded by `receipt_max_bytes`, and by what its caller and
        // every caller may keep: past either, only the result's size and digest.
        let now = self.ledger.clock.now().0;
        let running = Entry { name: &guard.key, expires_ms, bytes: guard.bytes };
        let mut kept = self.kept_outcome(&call, outcome.clone(), false);
        record.state = ReceiptState::Done { outcome: kept.clone() };
        let (mut done, mut done_bytes) = put(&record, &guard.key);
        let usage_ops = match self.usage.replace(
            &guard.owner,
            Some(&running),
            &Entry { name: &guard.key, expires_ms, bytes: done_bytes },
            now,
            false,
        ) {
            Ok(ops) => ops,
            Err(_) => {
                kept = self.kept_outcome(&call, outcome.clone(), true);
                record.state = ReceiptState::Done { outcome: kept.clone() };
                (done, done_bytes) = put(&record, &guard.key);
                // The error is about the size of a `Running` record: it must be written.
                self.usage
                    .replace(
                        &guard.owner,
                        Some(&running),
                        &Entry { name: &guard.key, expires_ms, bytes: done_bytes },
                        now,
                        true,
                    )
                    .unwrap_or_default()
            }
        };
        let mut ops = vec![done];
        ops.extend(usage_ops);
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
                    let waiting = t.finish(&key, &kept);
                    t.settled(&key);
                    drop(t);
                    answer_waiters(waiting, &outcome);
                    let _ = tx.send(());
                }),
            );
            // Bounded: a ledger that cannot commit does not hold the caller for ever. The
            // outcome lands with the record once it can: a retry with the key replays it.
            if self.ledger.writer.wait_committed(committed).await.is_err() {
                return answer(&call, Answer::NotRecordedYet);
            }
        } else {
            let waiting = self.table.lock().finish(&key, &kept);
            answer_waiters(waiting, &outcome);
            self.ledger.writer.submit_then(ops, Box::new(move || table.lock().settled(&key)));
        }
        r
    }

    /// Claim an execution on a shared ledger (`claim`: [`codec::receipt_claim_key`] of its key
    /// and the `Running` receipt it replaces): whether this host is the first. `Err`: the
    /// store could not be asked.
    async fn claim(&self, claim: &str) -> Result<bool, ()> {
        let (now, hold_ms) = (self.ledger.clock.now().0, self.ledger.hold_ms(CLAIM_MS));
        let (reads, claims, claim) =
            (Arc::clone(&self.ledger.reads), Arc::clone(&self.claims), claim.to_owned());
        let writer = Arc::downgrade(&self.ledger.writer);
        // On a task of its own: a caller that goes away meanwhile (its session ended) does
        // not lose a claim it won; the next execution of the key here finds it held.
        let (tx, rx) = oneshot::channel();
        actix_rt::spawn(async move {
            let key = claim.clone();
            let won = reads
                .run(move |store| Ok(store.incr(&key, 0, now.saturating_add(hold_ms), now)? == 1))
                .await
                .map_err(
                    |e| tracing::error!(error = %e, "cannot claim an idempotency key's execution"),
                );
            if won == Ok(true) {
                claims.lock().insert(claim.clone());
            }
            if tx.send(won).is_err() && won == Ok(true) {
                // Its caller went away before it ran anything: the claim is given back, so
                // another host waiting on it runs the call at once.
                claims.lock().remove(&claim);
                if let Some(w) = writer.upgrade() {
                    w.submit(vec![Op::Delete { key: claim }]);
                }
            }
        });
        rx.await.unwrap_or(Err(()))
    }

    /// Another host claimed the execution of `key` this host was about to start: wait for
    /// its receipt (its `Running` one may not be committed yet: read again for as long as a
    /// claim holds), then answer the caller and those attached here with its outcome, or with
    /// what became of it.
    async fn answered_elsewhere(
        &self,
        key: &str,
        call: &IdempotentCall,
        claim: &str,
    ) -> Option<Result<Value, ErrorObject>> {
        let mut stored = None;
        for _ in 0..=(2 * self.ledger.hold_ms(CLAIM_MS) / ELSEWHERE_POLL.as_millis() as u64) {
            stored = self.read(key).await.0;
            if stored != Some(Stored::Absent) {
                break;
            }
            // Nothing written yet: the claimer may be gone (its claim lapses) or have given
            // its claim back (its call never started); then this host claims it.
            match self.claim(claim).await {
                Ok(true) => return None,
                Ok(false) => tokio::time::sleep(ELSEWHERE_POLL).await,
                Err(()) => {
                    stored = None;
                    break;
                }
            }
        }
        Some(self.settle_elsewhere(key, call, stored))
    }

    /// Answer the caller and those attached here with what the other host's execution left:
    /// `stored` as read last.
    fn settle_elsewhere(
        &self,
        key: &str,
        call: &IdempotentCall,
        stored: Option<Stored>,
    ) -> Result<Value, ErrorObject> {
        match stored {
            Some(Stored::Done { digest, outcome }) if digest == call.digest => {
                let waiting = {
                    let mut t = self.table.lock();
                    let waiting = t.finish(key, &outcome);
                    t.settled(key);
                    waiting
                };
                for w in waiting {
                    let _ = w.send(Answer::Outcome { outcome: outcome.clone(), attached: true });
                }
                self.answered(call, Answer::Outcome { outcome, attached: true })
            }
            // The key was used for other arguments.
            Some(Stored::Done { .. }) => self.end_unrun(key, call, Answer::Conflict),
            Some(Stored::Running { digest }) if digest != call.digest => {
                self.end_unrun(key, call, Answer::Conflict)
            }
            // Its host ended without an outcome.
            Some(Stored::Running { .. }) => {
                let waiting = {
                    let mut t = self.table.lock();
                    let waiting = t.interrupt(key);
                    t.settled(key);
                    waiting
                };
                for w in waiting {
                    let _ = w.send(Answer::Unknown);
                }
                answer(call, Answer::Unknown)
            }
            // Its claimer never recorded it: nothing ran.
            Some(Stored::Absent) => self.end_unrun(key, call, Answer::NotRun),
            None => self.end_unrun(key, call, Answer::Unavailable),
        }
    }

    /// End this host's execution of `key` that never started (nothing of it was written):
    /// the caller and those attached get `a`.
    fn end_unrun(&self, key: &str, call: &IdempotentCall, a: Answer) -> Result<Value, ErrorObject> {
        let waiting = {
            let mut t = self.table.lock();
            let waiting = t.not_run(key);
            t.settled(key);
            waiting
        };
        for w in waiting {
            let _ = w.send(a.clone());
        }
        answer(call, a)
    }

    /// What the receipt keeps of `outcome`: all of it up to `ledger.receipt_max_bytes` and
    /// [`codec::KEPT_DEPTH_MAX`] levels (and unless `too_much`: the caller's or every caller's
    /// receipts would pass their byte bound); else the `-32011` "result not kept" error with the result's size and SHA-256
    /// (the call ran once; a replay must not look like a fresh result, nor run it again).
    fn kept_outcome(&self, call: &IdempotentCall, outcome: Outcome, too_much: bool) -> Outcome {
        let encoded = match &outcome {
            Outcome::Result(v) | Outcome::Error(v) => serde_json::to_vec(v).unwrap_or_default(),
        };
        let past = codec::past_kept_bound(&encoded, self.max_bytes);
        if !too_much && past.is_none() {
            return outcome;
        }
        let why = if too_much {
            "past what this caller, or every caller, may keep in receipts (ledger.receipt_bytes_per_caller, ledger.receipt_bytes_total)".to_owned()
        } else if past == Some(codec::PastKeptBound::Bytes) {
            format!(
                "larger than the ledger.receipt_max_bytes = {} kept for a replay",
                self.max_bytes
            )
        } else {
            format!(
                "nested deeper than the {} levels a receipt can be read back with",
                codec::KEPT_DEPTH_MAX
            )
        };
        Outcome::Error(json!({
            "code": code::RESULT_NOT_KEPT,
            "message": format!(
                "The call with idempotency key {:?} ran once; its result ({} bytes) was too large to keep for a replay ({why}), so it cannot be returned again and the call is not run again. Use a new key to run it again.",
                call.key,
                encoded.len()
            ),
            "data": {"idempotencyKey": call.key, "resultBytes": encoded.len(), "resultSha256": codec::sha256_hex(&encoded), "maxBytes": self.max_bytes},
        }))
    }
}

/// A lookup of a receipt in progress: dropped before its read answered (its caller went
/// away), it resolves the key as unreadable, so the callers waiting on it are answered and
/// the key is looked up afresh by the next one.
struct Lookup {
    table: Table,
    key: String,
    done: bool,
}

impl Drop for Lookup {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (_, waiting) = self.table.lock().resolve(&self.key, None);
        for (w, a) in waiting {
            let _ = w.send(a);
        }
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
    /// Whose receipt it is, when it expires, and the bytes its `Running` record was counted
    /// with (0: not counted yet).
    owner: Caller,
    expires_ms: u64,
    bytes: u64,
    /// Its claim on a shared ledger, deleted with its receipt if it never started (a new
    /// call with the key claims it again at once, not once the claim lapses).
    claim: Option<String>,
    /// On a shared ledger, its `Running` receipt run by no host: written if it is interrupted.
    abandoned: Option<Op>,
    /// Its `Running` receipt was queued for the ledger (on a single host: from the start, as
    /// nothing is awaited before). Before, the key may hold another host's receipt or the
    /// interrupted one this execution replaces: a drop deletes nothing but its own claim.
    queued: bool,
    /// The claim this execution asks for on a shared ledger (before it knows whether it won):
    /// one this host won while the caller went away is given back by the drop.
    claiming: Option<String>,
}

impl Drop for Executing {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (waiting, answer, ops) = if self.started {
            // The `Running` receipt says it (and stays counted: a re-run takes its charge
            // back, see `interrupted`); on a shared ledger it no longer names this host.
            self.receipts
                .interrupted
                .lock()
                .insert(self.key.clone(), (self.expires_ms, self.bytes));
            let ops: Vec<Op> = self.abandoned.take().into_iter().collect();
            (self.receipts.table.lock().interrupt(&self.key), Answer::Unknown, ops)
        } else {
            let mut ops = Vec::new();
            if self.queued {
                ops.push(Op::Delete { key: self.key.clone() });
            }
            if let Some(claim) = self.claim.clone() {
                ops.push(Op::Delete { key: claim });
            } else if let Some(claiming) = self.claiming.take()
                && self.receipts.claims.lock().remove(&claiming)
            {
                // Won just as its caller went away (the answer never read): given back.
                ops.push(Op::Delete { key: claiming });
            }
            if self.bytes > 0 {
                ops.extend(self.receipts.usage.release(
                    &self.owner,
                    &Entry { name: &self.key, expires_ms: self.expires_ms, bytes: self.bytes },
                ));
            }
            (self.receipts.table.lock().not_run(&self.key), Answer::NotRun, ops)
        };
        // "Not run: call again" is told once the deletion of a queued `Running` receipt is
        // committed: a kill before it would leave that receipt, read after the restart as
        // "outcome unknown" by the very call it invited.
        let mut waiting = Some(waiting);
        if self.started || !self.queued {
            for w in waiting.take().into_iter().flatten() {
                let _ = w.send(answer.clone());
            }
        }
        let (table, interrupted, key) = (
            Arc::clone(&self.receipts.table),
            Arc::clone(&self.receipts.interrupted),
            std::mem::take(&mut self.key),
        );
        // Started: a retry claims anew (it replaces the `Running` receipt). Not started: the
        // claim is this host's until its deletion is committed.
        let (claims, claim) = (Arc::clone(&self.receipts.claims), self.claim.take());
        if self.started
            && let Some(c) = &claim
        {
            claims.lock().remove(c);
        }
        if ops.is_empty() && !self.started {
            // Nothing of it reached the ledger: the ledger answers for the key already (a
            // lookup reads the charge of an interrupted receipt it would have replaced).
            table.lock().settled(&key);
            return;
        }
        // The callers still waiting are told once the deletion is committed, or told to call
        // again later (unavailable) when the ledger fails to commit it within its commit
        // wait (the receipt may then outlive a kill, answering "outcome unknown").
        let (deleted, committed) = oneshot::channel();
        if let Some(waiting) = waiting {
            let writer = Arc::clone(&self.receipts.ledger.writer);
            // Dropped outside a runtime (never while serving): told at once.
            let rt = tokio::runtime::Handle::try_current();
            let told = |a: &Answer, waiting: Vec<oneshot::Sender<Answer>>| {
                for w in waiting {
                    let _ = w.send(a.clone());
                }
            };
            match rt {
                Ok(rt) => drop(rt.spawn(async move {
                    let ok = writer.wait_committed(committed).await.is_ok();
                    told(if ok { &answer } else { &Answer::Unavailable }, waiting);
                })),
                Err(_) => told(&answer, waiting),
            }
        }
        let wrote = self.started || self.queued;
        // Once that is committed (the `Running` receipt may still be queued) the ledger answers
        // (and a lookup reads the interrupted receipt's charge from it).
        self.receipts.ledger.writer.submit_then(
            ops,
            Box::new(move || {
                table.lock().settled(&key);
                let _ = deleted.send(());
                if wrote {
                    interrupted.lock().remove(&key);
                }
                if let Some(c) = claim {
                    claims.lock().remove(&c);
                }
            }),
        );
    }
}

/// The response a caller answered without executing gets.
fn answer(call: &IdempotentCall, a: Answer) -> Result<Value, ErrorObject> {
    let tool_error = |text: String| {
        Ok(serde_json::to_value(CallToolResult::error(text)).expect("a tool result serializes"))
    };
    match a {
        Answer::Outcome { outcome: Outcome::Result(mut v), attached } => {
            if let Some(obj) = v.as_object_mut() {
                let meta = obj.entry("_meta").or_insert_with(|| json!({}));
                if let Some(m) = meta.as_object_mut() {
                    m.insert(
                        IDEMPOTENCY_RESULT_META.into(),
                        json!(if attached { "attached" } else { "replayed" }),
                    );
                }
            }
            Ok(v)
        }
        Answer::Outcome { outcome: Outcome::Error(e), .. } => Err(serde_json::from_value(e)
            .unwrap_or_else(|_| {
                ErrorObject::new(
                    code::INTERNAL_ERROR,
                    "the recorded error of this idempotency key is unreadable",
                )
            })),
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
            format!(
                "too many calls are waiting on idempotency key {:?}; try again once the running one has finished",
                call.key
            ),
        )),
        // Nothing ran: like a 503, the call may be sent again as it is (the client library
        // waits a second and does).
        Answer::Unavailable => Err(ErrorObject::new(
            code::OVERLOADED,
            "Service Unavailable: idempotency receipts are unavailable (the ledger cannot be read or written, or another host's execution of this key outlasted the wait); the call was not run here: send it again",
        )),
        Answer::NotRecordedYet => tool_error(format!(
            "The call with idempotency key {:?} ran, but the ledger cannot record its outcome right now: it is recorded once the ledger commits again. Call again with the same key later to get it; it is not run again.",
            call.key
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call of a write tool (not idempotent) under `key`.
    fn write_call(tool: &str, key: &str) -> IdempotentCall {
        IdempotentCall { tool: tool.into(), key: key.into(), digest: "d".into(), idempotent: false }
    }

    /// The receipts of a fresh memory ledger.
    fn receipts() -> Arc<Receipts> {
        on(Ledger::memory(&crate::config::RuntimeConfig::default()))
    }

    /// The receipts of `ledger`.
    fn on(ledger: Ledger) -> Arc<Receipts> {
        let limits =
            UsageLimits { per_caller_count: 100, per_caller_bytes: 1 << 20, total_bytes: 1 << 24 };
        Arc::new(Receipts::new(
            ledger,
            60_000,
            64 * 1024,
            limits,
            Arc::new(crate::stats::RuntimeStats::default()),
        ))
    }

    #[tokio::test]
    async fn a_result_too_deep_to_read_back_is_not_kept_and_its_outcome_says_so() {
        let r = receipts();
        let call = write_call("deep", "k-deep");
        let deep = crate::proto::jsonrpc::nested_arrays(codec::KEPT_DEPTH_MAX - 1);
        let within = json!({"structuredContent": deep});
        let kept = r.kept_outcome(&call, Outcome::Result(within.clone()), false);
        assert_eq!(kept, Outcome::Result(within.clone()), "at the bound: kept");
        let past = json!({"structuredContent": within});
        let Outcome::Error(e) = r.kept_outcome(&call, Outcome::Result(past), false) else {
            panic!("past the bound: not kept")
        };
        assert_eq!(e["code"], code::RESULT_NOT_KEPT);
        assert!(e["message"].as_str().unwrap().contains("nested deeper"), "{e}");
    }

    #[tokio::test]
    async fn an_execution_interrupted_on_one_host_leaves_nothing_behind_once_committed() {
        let r = receipts();
        let call = write_call("slow", "k-1");
        let place = r.admit(&None).expect("room for a receipt");
        let never: Run = Box::new(|| Dispatch::Pending(Box::pin(std::future::pending())));
        // The tool runs, and its caller goes away (its session ended).
        let served = r.call(call, None, place, never);
        assert!(tokio::time::timeout(std::time::Duration::from_millis(200), served).await.is_err());
        let writer = &r.ledger.writer;
        writer.wait_committed(writer.barrier()).await.expect("committed");
        assert_eq!(r.table.lock().len(), 0, "the key is the ledger's to answer for again");
        assert!(r.interrupted.lock().is_empty(), "no interrupted charge is kept for ever");
    }

    /// A call attached to an execution dropped before its tool ran is told "nothing was
    /// done, call again" only once the deletion of the `Running` receipt is committed (a kill
    /// before would leave that receipt to answer the invited call "outcome unknown").
    #[tokio::test]
    async fn not_run_is_told_only_once_the_running_receipt_is_deleted() {
        let store = Arc::new(crate::ledger::faulty::Refusing::default());
        let ledger = Ledger::on_store(
            Arc::clone(&store) as Arc<dyn crate::ledger::Store>,
            &crate::config::RuntimeConfig::default(),
        )
        .unwrap();
        let r = on(ledger);
        let call = || write_call("write", "k-2");
        let ran = || -> Run { Box::new(|| Dispatch::Ready(Ok(json!({"content": []}).into()))) };
        let attempts = || store.attempts.load(std::sync::atomic::Ordering::Relaxed);
        let stall = store.stall();
        let tried = attempts();
        let first = tokio::spawn(r.call(call(), None, r.admit(&None).unwrap(), ran()));
        // Its `Running` receipt is in the (held) store's hands.
        crate::ledger::faulty::settle_until(|| attempts() > tried).await;
        assert!(attempts() > tried, "the receipt was submitted");
        let second = tokio::spawn(r.call(call(), None, r.admit(&None).unwrap(), ran()));
        let key = codec::receipt_key(None, "k-2");
        crate::ledger::faulty::settle_until(|| r.table.lock().attached(&key) == 1).await;
        assert_eq!(r.table.lock().attached(&key), 1, "the second call waits on the first");
        first.abort();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!second.is_finished(), "told before the receipt's deletion was committed");
        stall.release();
        let told = second.await.unwrap().unwrap().into_value().unwrap();
        assert!(
            told["content"][0]["text"].as_str().unwrap().contains("nothing was done"),
            "{told}"
        );
    }
}
