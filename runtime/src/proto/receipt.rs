//! Idempotency receipts, the decisions (sans-IO): what a `tools/call` of a write tool that
//! carries an idempotency key gets, given the executions of this process and the receipt the
//! ledger holds.
//!
//! One table per process. A key (already namespaced by its caller) has at most one entry:
//! - **looking**: its ledger receipt is being read; later callers wait for the answer;
//! - **running**: this process executes it; later callers with the same arguments attach and
//!   get its outcome, others are told the key is taken by another call;
//! - **settling**: it finished (or was interrupted) and the record saying so is not committed
//!   yet; later callers are answered from the entry, never from the older record in the store.
//!
//! Without an entry the ledger's receipt is the truth: a finished one is replayed, a running
//! one was interrupted by a crash (no process runs it: this one has no entry) and answers
//! "outcome unknown" unless the tool is idempotent, in which case it runs again.
//!
//! `W` is how a waiting caller is answered (a channel in the runtime, anything in tests).

use std::collections::HashMap;

use serde_json::Value;

/// The `_meta` field of `tools/call` that carries an idempotency key (1 to
/// [`IDEMPOTENCY_KEY_MAX_BYTES`] bytes). Honoured for write tools (not annotated
/// `readOnlyHint: true`) and ignored for read-only ones.
pub const IDEMPOTENCY_KEY_META: &str = "io.mcp-host/idempotencyKey";
/// Longest idempotency key.
pub const IDEMPOTENCY_KEY_MAX_BYTES: usize = 128;

/// A `tools/call` of a write tool that carries an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotentCall {
    /// The tool.
    pub tool: String,
    /// The key, as sent.
    pub key: String,
    /// Digest of the tool name and arguments.
    pub digest: String,
    /// The tool is annotated `idempotentHint: true` (an interrupted call may run again).
    pub idempotent: bool,
}

/// How a recorded execution ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The JSON-RPC `result`.
    Result(Value),
    /// The JSON-RPC `error` object.
    Error(Value),
}

/// What the ledger holds for a key, as far as the table needs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stored {
    /// No receipt (never used, or expired).
    Absent,
    /// An execution started under these arguments and recorded no outcome.
    Running {
        /// Its arguments' digest.
        digest: String,
    },
    /// An execution finished.
    Done {
        /// Its arguments' digest.
        digest: String,
        /// Its outcome.
        outcome: Outcome,
    },
}

/// The answer a caller gets without executing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// The outcome of the execution with this key (`attached`: it was running when this
    /// caller arrived; otherwise it was replayed from a receipt).
    Outcome {
        /// The outcome.
        outcome: Outcome,
        /// Whether the caller waited for a running execution.
        attached: bool,
    },
    /// The key was used for another call (other tool or other arguments).
    Conflict,
    /// An execution with this key was interrupted (the server restarted or it was cancelled)
    /// and the tool is not idempotent: whether it took effect is unknown.
    Unknown,
    /// The receipt could not be read.
    Unavailable,
    /// The execution ran, and its outcome's record is not committed yet (`sync` durability:
    /// nobody learns an outcome before its commit, and the ledger cannot commit now).
    NotRecordedYet,
    /// The execution this caller waited for was cancelled before the tool ran: nothing was
    /// done, and a new call with the key runs it.
    NotRun,
    /// [`MAX_WAITERS`] callers already wait on this key.
    TooManyWaiting,
}

/// A waiting caller, as the table needs to know it.
pub(crate) trait Waiter {
    /// The caller went away (its request was cancelled): its place can be reused.
    fn is_gone(&self) -> bool;
}

/// Most callers waiting on one key (attached to one execution, or to one lookup); past it a
/// caller is answered [`Answer::TooManyWaiting`].
pub(crate) const MAX_WAITERS: usize = 256;

/// What the caller that arrives does now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arrival {
    /// Read the ledger's receipt, then call [`ReceiptTable::resolve`].
    Lookup,
    /// Wait: the waiter was kept and will be answered.
    Wait,
    /// Execute (an execution with this key was interrupted here and the tool is
    /// idempotent), then call [`ReceiptTable::finish`] (or [`ReceiptTable::interrupt`]).
    Execute,
    /// Answered at once.
    Answered(Answer),
}

/// What the caller whose lookup finished does now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Execute, then call [`ReceiptTable::finish`] (or [`ReceiptTable::interrupt`]).
    Execute,
    /// Answered without executing.
    Answered(Answer),
}

#[derive(Debug)]
enum Entry<W> {
    Looking { digest: String, idempotent: bool, waiters: Vec<(String, W)> },
    Running { digest: String, waiters: Vec<W> },
    Settling { digest: String, ended: Ended },
}

/// How an execution ended, as the table remembers it until its last write is committed.
#[derive(Debug, Clone)]
enum Ended {
    Finished(Outcome),
    /// Dropped while the tool ran: the outcome is unknown.
    Interrupted,
    /// Dropped before the tool ran: nothing happened (its receipt is being deleted).
    NotRun,
}

/// The table (see the module docs).
#[derive(Debug)]
pub(crate) struct ReceiptTable<W> {
    entries: HashMap<String, Entry<W>>,
}

impl<W> Default for ReceiptTable<W> {
    fn default() -> Self {
        ReceiptTable { entries: HashMap::new() }
    }
}

/// What a caller with arguments `digest` gets once the lookup read `stored` (`None`: it
/// failed), when the first caller had `first`: `None` when it attaches to (or, being the
/// first, starts) the execution.
fn verdict(stored: Option<&Stored>, first: &str, idempotent: bool, digest: &str) -> Option<Answer> {
    match stored {
        None => Some(Answer::Unavailable),
        Some(Stored::Done { digest: d, outcome }) => Some(if d == digest {
            Answer::Outcome { outcome: outcome.clone(), attached: false }
        } else {
            Answer::Conflict
        }),
        Some(Stored::Running { digest: d }) if d != digest => Some(Answer::Conflict),
        Some(Stored::Running { .. }) if !idempotent => Some(Answer::Unknown),
        // Absent, or interrupted and idempotent: it executes with the first caller's arguments.
        Some(Stored::Absent | Stored::Running { .. }) => {
            (digest != first).then_some(Answer::Conflict)
        }
    }
}

/// Keep `w` among `waiters` unless the list is full (callers that went away are dropped
/// first); `false` when it is full.
fn wait_in<T>(waiters: &mut Vec<T>, w: T, gone: impl Fn(&T) -> bool) -> bool {
    if waiters.len() >= MAX_WAITERS {
        waiters.retain(|x| !gone(x));
    }
    if waiters.len() >= MAX_WAITERS {
        return false;
    }
    waiters.push(w);
    true
}

impl<W: Waiter> ReceiptTable<W> {
    /// Keys with an entry (executions running, lookups, records on their way).
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Callers attached to `key`'s running execution (tests).
    #[cfg(test)]
    pub(crate) fn attached(&self, key: &str) -> usize {
        match self.entries.get(key) {
            Some(Entry::Running { waiters, .. }) => waiters.len(),
            _ => 0,
        }
    }

    /// Whether no key has an entry.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A call with `key` and arguments `digest` arrives; `idempotent` is the tool's
    /// `idempotentHint`. `waiter` is kept when the caller is to wait.
    pub(crate) fn arrive(
        &mut self,
        key: &str,
        digest: &str,
        idempotent: bool,
        waiter: W,
    ) -> Arrival {
        match self.entries.get_mut(key) {
            None => {
                self.entries.insert(
                    key.to_owned(),
                    Entry::Looking { digest: digest.to_owned(), idempotent, waiters: Vec::new() },
                );
                Arrival::Lookup
            }
            Some(Entry::Looking { waiters, .. }) => {
                // Whether this caller's arguments match is known once the receipt is read.
                if wait_in(waiters, (digest.to_owned(), waiter), |(_, w): &(String, W)| w.is_gone())
                {
                    Arrival::Wait
                } else {
                    Arrival::Answered(Answer::TooManyWaiting)
                }
            }
            Some(Entry::Running { digest: d, waiters }) => {
                if d != digest {
                    Arrival::Answered(Answer::Conflict)
                } else if wait_in(waiters, waiter, W::is_gone) {
                    Arrival::Wait
                } else {
                    Arrival::Answered(Answer::TooManyWaiting)
                }
            }
            Some(Entry::Settling { digest: d, ended }) => {
                if d != digest {
                    return Arrival::Answered(Answer::Conflict);
                }
                match ended {
                    Ended::Finished(outcome) => Arrival::Answered(Answer::Outcome {
                        outcome: outcome.clone(),
                        attached: false,
                    }),
                    // Interrupted here: an idempotent tool runs again; one that never ran, too.
                    Ended::Interrupted if !idempotent => Arrival::Answered(Answer::Unknown),
                    Ended::Interrupted | Ended::NotRun => {
                        self.entries.insert(
                            key.to_owned(),
                            Entry::Running { digest: digest.to_owned(), waiters: Vec::new() },
                        );
                        Arrival::Execute
                    }
                }
            }
        }
    }

    /// The lookup of `key` read `stored` (or failed: `None`). Returns what the caller that
    /// looked does, and the answers for the callers that waited meanwhile (those whose
    /// arguments match an execution that now starts stay attached to it).
    pub(crate) fn resolve(
        &mut self,
        key: &str,
        stored: Option<Stored>,
    ) -> (Decision, Vec<(W, Answer)>) {
        let Some(Entry::Looking { digest, idempotent, waiters }) = self.entries.remove(key) else {
            debug_assert!(false, "resolve without a lookup");
            return (Decision::Answered(Answer::Unavailable), Vec::new());
        };
        // The first caller's arguments are the ones an execution that starts now runs with.
        let first = match verdict(stored.as_ref(), &digest, idempotent, &digest) {
            None => Decision::Execute,
            Some(a) => Decision::Answered(a),
        };
        let mut answers = Vec::new();
        let mut attached = Vec::new();
        for (d, w) in waiters {
            match verdict(stored.as_ref(), &digest, idempotent, &d) {
                Some(a) => answers.push((w, a)),
                None => attached.push(w),
            }
        }
        if first == Decision::Execute {
            self.entries.insert(key.to_owned(), Entry::Running { digest, waiters: attached });
        }
        (first, answers)
    }

    /// The execution of `key` finished with `outcome`; returns the callers attached to it.
    /// Until [`ReceiptTable::settled`], callers are answered from the table.
    pub(crate) fn finish(&mut self, key: &str, outcome: &Outcome) -> Vec<W> {
        self.end(key, Ended::Finished(outcome.clone()))
    }

    /// The execution of `key` ended without an outcome while the tool ran (its caller
    /// cancelled it, its session ended): the callers attached to it, who are answered
    /// [`Answer::Unknown`].
    pub(crate) fn interrupt(&mut self, key: &str) -> Vec<W> {
        self.end(key, Ended::Interrupted)
    }

    /// The execution of `key` was dropped before the tool ran (its receipt is to be deleted):
    /// the callers attached to it, who are answered [`Answer::NotRun`]; a later call runs it.
    pub(crate) fn not_run(&mut self, key: &str) -> Vec<W> {
        self.end(key, Ended::NotRun)
    }

    fn end(&mut self, key: &str, ended: Ended) -> Vec<W> {
        match self.entries.remove(key) {
            Some(Entry::Running { digest, waiters }) => {
                self.entries.insert(key.to_owned(), Entry::Settling { digest, ended });
                waiters
            }
            Some(other) => {
                debug_assert!(false, "end of an execution that is not running");
                self.entries.insert(key.to_owned(), other);
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// The record written at the end of `key`'s execution is committed: the ledger answers
    /// for it from now on. Leaves an entry that is running again alone.
    pub(crate) fn settled(&mut self, key: &str) {
        if matches!(self.entries.get(key), Some(Entry::Settling { .. })) {
            self.entries.remove(key);
        }
    }
}

/// The digest of a tool call's arguments: SHA-256 over the tool name and the arguments in
/// canonical form (object members sorted, no whitespace), hex.
#[must_use]
pub(crate) fn args_digest(tool: &str, args: &Value) -> String {
    super::digest::digest(tool, Some(args))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    impl Waiter for i32 {
        /// Negative test waiters have gone away.
        fn is_gone(&self) -> bool {
            *self < 0
        }
    }

    impl Waiter for u8 {
        fn is_gone(&self) -> bool {
            false
        }
    }

    #[test]
    fn waiters_on_one_key_are_bounded_and_callers_that_went_away_make_room() {
        let mut t = ReceiptTable::default();
        t.arrive("k", "d", false, 0);
        t.resolve("k", Some(Stored::Absent));
        for i in 0..MAX_WAITERS as i32 {
            assert_eq!(t.arrive("k", "d", false, -1 - i), Arrival::Wait);
        }
        // Every one of those went away: their places are reused.
        for i in 0..MAX_WAITERS as i32 {
            assert_eq!(t.arrive("k", "d", false, i + 1), Arrival::Wait);
        }
        assert_eq!(
            t.arrive("k", "d", false, 9_999),
            Arrival::Answered(Answer::TooManyWaiting),
            "full of live callers"
        );
        assert_eq!(t.finish("k", &ok(1)).len(), MAX_WAITERS);
    }

    fn ok(v: i64) -> Outcome {
        Outcome::Result(json!({"v": v}))
    }

    fn replayed(v: i64) -> Answer {
        Answer::Outcome { outcome: ok(v), attached: false }
    }

    #[test]
    fn a_new_key_is_looked_up_once_and_executed_by_its_first_caller() {
        let mut t = ReceiptTable::default();
        assert_eq!(t.arrive("k", "d", false, 1), Arrival::Lookup);
        assert_eq!(
            t.arrive("k", "d", false, 2),
            Arrival::Wait,
            "a second caller during the lookup waits"
        );
        let (first, answers) = t.resolve("k", Some(Stored::Absent));
        assert_eq!(first, Decision::Execute);
        assert!(answers.is_empty(), "the waiter attaches to the execution");
        assert_eq!(t.finish("k", &ok(7)), vec![2], "the attached caller gets the outcome");
    }

    #[test]
    fn a_retry_while_running_attaches_and_one_with_other_arguments_conflicts() {
        let mut t = ReceiptTable::default();
        t.arrive("k", "d", false, 1);
        t.resolve("k", Some(Stored::Absent));
        assert_eq!(t.arrive("k", "d", false, 2), Arrival::Wait);
        assert_eq!(t.arrive("k", "other", false, 3), Arrival::Answered(Answer::Conflict));
        assert_eq!(t.finish("k", &ok(1)), vec![2]);
    }

    #[test]
    fn a_finished_key_is_answered_from_the_table_until_its_record_is_committed() {
        let mut t = ReceiptTable::default();
        t.arrive("k", "d", false, 1);
        t.resolve("k", Some(Stored::Absent));
        t.finish("k", &ok(5));
        assert_eq!(
            t.arrive("k", "d", false, 2),
            Arrival::Answered(replayed(5)),
            "not read from the store, which may still say running"
        );
        assert_eq!(t.arrive("k", "x", false, 3), Arrival::Answered(Answer::Conflict));
        t.settled("k");
        assert!(t.is_empty());
        assert_eq!(
            t.arrive("k", "d", false, 4),
            Arrival::Lookup,
            "after the commit the ledger answers"
        );
    }

    #[test]
    fn a_recorded_outcome_is_replayed_and_other_arguments_conflict() {
        let mut t = ReceiptTable::default();
        t.arrive("k", "d", false, 1);
        t.arrive("k", "d", false, 2);
        t.arrive("k", "x", false, 3);
        let (first, answers) =
            t.resolve("k", Some(Stored::Done { digest: "d".into(), outcome: ok(9) }));
        assert_eq!(first, Decision::Answered(replayed(9)));
        assert_eq!(answers, vec![(2, replayed(9)), (3, Answer::Conflict)]);
        assert!(t.is_empty(), "the ledger keeps answering");
    }

    #[test]
    fn an_execution_interrupted_by_a_crash_is_unknown_unless_the_tool_is_idempotent() {
        let mut t = ReceiptTable::<u8>::default();
        t.arrive("k", "d", false, 1);
        assert_eq!(
            t.resolve("k", Some(Stored::Running { digest: "d".into() })).0,
            Decision::Answered(Answer::Unknown)
        );
        t.arrive("k", "d", true, 1);
        assert_eq!(
            t.resolve("k", Some(Stored::Running { digest: "d".into() })).0,
            Decision::Execute,
            "an idempotent tool runs again"
        );
        t.interrupt("k");
        t.settled("k");
        t.arrive("k", "x", true, 1);
        assert_eq!(
            t.resolve("k", Some(Stored::Running { digest: "d".into() })).0,
            Decision::Answered(Answer::Conflict),
            "other arguments never rerun it"
        );
    }

    #[test]
    fn a_cancelled_execution_answers_its_attached_callers_unknown_and_reruns_only_if_idempotent() {
        let mut t = ReceiptTable::default();
        t.arrive("k", "d", false, 1);
        t.resolve("k", Some(Stored::Absent));
        t.arrive("k", "d", false, 2);
        assert_eq!(t.interrupt("k"), vec![2]);
        assert_eq!(t.arrive("k", "d", false, 3), Arrival::Answered(Answer::Unknown));
        assert_eq!(t.arrive("k", "d", true, 4), Arrival::Execute, "an idempotent tool runs again");
        t.settled("k");
        assert_eq!(t.len(), 1, "the commit of the interrupted run does not end the new one");
        assert_eq!(t.finish("k", &ok(2)), Vec::<i32>::new());
    }

    #[test]
    fn an_execution_dropped_before_the_tool_ran_runs_on_the_next_call() {
        let mut t = ReceiptTable::default();
        t.arrive("k", "d", false, 1);
        t.resolve("k", Some(Stored::Absent));
        t.arrive("k", "d", false, 2);
        assert_eq!(t.not_run("k"), vec![2]);
        assert_eq!(
            t.arrive("k", "d", false, 3),
            Arrival::Execute,
            "not idempotent, but it never ran"
        );
        assert_eq!(t.arrive("k", "x", false, 4), Arrival::Answered(Answer::Conflict));
    }

    #[test]
    fn an_unreadable_receipt_answers_every_caller_unavailable() {
        let mut t = ReceiptTable::default();
        t.arrive("k", "d", false, 1);
        t.arrive("k", "d", false, 2);
        let (first, answers) = t.resolve("k", None);
        assert_eq!(first, Decision::Answered(Answer::Unavailable));
        assert_eq!(answers, vec![(2, Answer::Unavailable)]);
        assert!(t.is_empty());
    }

    #[test]
    fn the_digest_covers_the_tool_and_canonical_arguments() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":[1,2]}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":[1,2],"y":2},"b":1}"#).unwrap();
        assert_eq!(args_digest("t", &a), args_digest("t", &b), "member order does not matter");
        assert_ne!(args_digest("t", &a), args_digest("u", &a));
        assert_ne!(args_digest("t", &a), args_digest("t", &json!({"b": 2})));
    }
}
