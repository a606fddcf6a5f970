//! The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663), the store and the runs: a
//! `tools/call` that becomes a task is answered at once with its id, and its tool runs on in
//! this process, its state recorded in the ledger (`mcpTask.v1`) at every change, so any
//! request — after a dropped connection, from another connection, after a restart — can read
//! it, answer its questions, or cancel it. The states and their wire shapes are
//! [`crate::proto::task`]'s.
//!
//! Invariants:
//! - A task is recorded before its id is handed out (`tasks/get` right after creation finds
//!   it), and an update or a cancellation is recorded before it is acknowledged.
//! - A task is bound to its caller: another caller's task reads exactly like an unknown one.
//! - A final state never changes: a tool that finishes after its task was cancelled is not
//!   recorded.
//! - A task whose process is gone (a kill) reads as `failed` ("interrupted") from the next
//!   run on; a graceful stop records that itself. Records are kept `tasks.ttl_secs` after
//!   creation.
//! - At most `tasks.max_per_caller` tasks of one caller run at once in this process: a
//!   [`TaskSlot`] is taken before the call runs and given back once its task's end is
//!   recorded (while the ledger fails, it stays taken).
//! - A task's records are queued under its state lock, so they are committed in the order
//!   of its states (a `working` record never lands after `completed`).
//! - A task ends by `tasks.ttl_secs` after its creation at the latest: its tool is stopped
//!   and its place freed when its record expires (it is unknown from then on, as every task
//!   past its TTL).
//! - A key rotation (`ledger.previous_key_files`) loses no task: one recorded before it is
//!   read under its previous key's name (it stays there until it expires).

mod drive;

pub(crate) use drive::drive;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use sha2::Sha256;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::ledger::codec::{self, Record, TaskRecord};
use crate::ledger::{Entry, Ledger, Op, StoreUsage, Writer};
use crate::proto::jsonrpc::{ErrorObject, code};
use crate::proto::task::{self, TASK_ID_RANDOM_BYTES, TaskStatus, TaskView};
use crate::proto::usage::{Over, UsageLimits};

/// Why a `tasks/*` request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// Unknown, expired, or another caller's: `-32602`.
    #[error("Failed to retrieve task: Task not found")]
    NotFound,
    /// An answer of the wrong shape: `-32602`.
    #[error("Invalid params: {0}")]
    BadAnswer(String),
    /// The ledger could not be written: `-32603`.
    #[error("the task store is unavailable right now; try again")]
    Unavailable,
}

impl TaskError {
    /// The JSON-RPC error.
    #[must_use]
    pub fn to_error_object(&self) -> ErrorObject {
        let c = match self {
            TaskError::NotFound | TaskError::BadAnswer(_) => code::INVALID_PARAMS,
            TaskError::Unavailable => code::INTERNAL_ERROR,
        };
        ErrorObject::new(c, self.to_string())
    }
}

/// Settings (from `[tasks]`).
#[derive(Debug, Clone, Copy)]
pub struct TaskSettings {
    /// How long a task is kept after its creation (ms).
    pub ttl_ms: u64,
    /// The poll interval clients are told (ms).
    pub poll_ms: u64,
    /// Most tasks of one caller running at once.
    pub max_per_caller: usize,
    /// Most tasks of one caller kept (running or ended, until their TTL).
    pub max_kept_per_caller: usize,
    /// Largest result kept (bytes of its JSON); a larger one is replaced by a tool error.
    pub max_result_bytes: usize,
    /// Most bytes of one caller's kept tasks (their records).
    pub bytes_per_caller: u64,
    /// Most bytes of every caller's kept tasks.
    pub bytes_total: u64,
}

/// Why a caller has no room for another task ([`Tasks::reserve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// It runs `tasks.max_per_caller` tasks: one may end any moment.
    Running,
    /// It keeps `tasks.max_kept_per_caller` tasks, or `tasks.bytes_per_caller` of them: room
    /// comes back when the oldest expires.
    Kept {
        /// Seconds until then.
        retry_after_s: u32,
    },
    /// Every caller together keeps as many bytes of tasks as the server may
    /// (`tasks.bytes_total`): room comes back when the oldest expires.
    Full {
        /// Seconds until then.
        retry_after_s: u32,
    },
}

impl NoRoom {
    /// When to try again (s): `Retry-After` of a refusal.
    #[must_use]
    pub fn retry_after_s(self) -> u32 {
        match self {
            NoRoom::Running => 1,
            NoRoom::Kept { retry_after_s } | NoRoom::Full { retry_after_s } => retry_after_s,
        }
    }
}

/// Running tasks per caller (an entry leaves at zero).
type Counts = Arc<Mutex<HashMap<Option<Arc<str>>, usize>>>;

/// A place among one caller's running tasks ([`Tasks::reserve`]); given back when dropped.
#[derive(Debug)]
pub struct TaskSlot {
    counts: Counts,
    owner: Option<Arc<str>>,
    /// Its place among what its caller keeps (the bounds), until its first record takes it.
    kept: Option<crate::ledger::Reservation>,
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        let mut c = self.counts.lock();
        if let Some(n) = c.get_mut(&self.owner) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.owner);
            }
        }
    }
}

/// One task running in this process.
#[derive(Debug)]
pub struct Run {
    id: String,
    hmac: String,
    principal: Option<Arc<str>>,
    tool: String,
    /// Fired by `tasks/cancel`: the tool's own cancellation token.
    cancel: CancellationToken,
    state: Mutex<RunState>,
    /// `Some(true)` once its final record is committed (it has left the running ones then),
    /// `Some(false)` when the writer gave that record up (the process stops).
    settled: tokio::sync::watch::Sender<Option<bool>>,
}

/// The tasks running in this process, by the HMAC of their id.
type Live = Arc<Mutex<HashMap<String, Arc<Run>>>>;

#[derive(Debug)]
struct RunState {
    view: TaskView,
    /// What readers see while the record of a final `view` commits: the state before it (a
    /// `tasks/get` never answers an outcome a kill could still take back).
    shown: Option<TaskView>,
    /// Who waits for each unanswered question.
    waiters: HashMap<String, oneshot::Sender<Value>>,
    /// Its place among its caller's running tasks, given back when it ends.
    slot: Option<TaskSlot>,
    /// The bytes its last record was counted with against the bounds (0: none yet).
    recorded_bytes: u64,
}

/// Bytes a task's record is assumed to take when its place is held (a working record is a
/// few hundred bytes).
const RECORD_BYTES: u64 = 512;

impl Run {
    /// The task's id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The tool's cancellation token (fired by `tasks/cancel`).
    #[must_use]
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The `CreateTaskResult` to answer the `tools/call` with.
    #[must_use]
    pub fn created(&self) -> Value {
        self.state.lock().view.created()
    }

    /// Whether it has ended.
    #[must_use]
    pub fn is_final(&self) -> bool {
        self.state.lock().view.status.is_final()
    }
}

/// The tasks of a process.
pub struct Tasks {
    writer: Arc<Writer>,
    clock: crate::clock::Clock,
    run: u64,
    id_key: Hmac<Sha256>,
    /// The id keys of the previous secrets (`ledger.previous_key_files`): tasks recorded
    /// before a rotation.
    previous_id_keys: Vec<Hmac<Sha256>>,
    settings: TaskSettings,
    /// Tasks running here, by the HMAC of their id. Held for a map operation, never across
    /// an await.
    live: Live,
    /// Running tasks (and calls that may become one) per caller.
    counts: Counts,
    /// What each caller, and every caller, keeps (count and bytes of kept tasks).
    usage: Arc<StoreUsage>,
    /// Where records are read (never on the caller's thread).
    reads: Arc<crate::ledger::Reads>,
    /// Other hosts share the ledger: a task running on one of them is read from its record
    /// (not taken for interrupted), and its cancellation and answers are sent to it.
    shared: bool,
}

/// The channel ([`Op::Publish`]) on which a host sends a task's cancellation or answers to
/// the host that runs it (message: JSON `{"task": <hmac>, "cancel": true}` or
/// `{"task": <hmac>, "answers": {...}}`).
pub(crate) const TASKS_CHANNEL: &str = "tasks";

/// How long a cancellation or answers sent to another host wait for its record to show them.
const FORWARD_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often that record is read meanwhile.
const FORWARD_POLL: std::time::Duration = std::time::Duration::from_millis(25);

/// Where a task named in a request runs.
enum Where {
    /// Here.
    Here(Arc<Run>),
    /// On another live host (shared ledger); its record asks `questions`.
    Elsewhere { hmac: String, questions: Map<String, Value> },
    /// Nowhere (it ended).
    Ended,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").field("running", &self.live.lock().len()).finish_non_exhaustive()
    }
}

impl Tasks {
    /// The tasks of `ledger`, kept as `settings` say.
    #[must_use]
    pub fn new(ledger: &Ledger, settings: TaskSettings) -> Tasks {
        let mut keys = ledger
            .derive_rotated("mcp-host task id v1")
            .into_iter()
            .map(|k| <Hmac<Sha256>>::new_from_slice(&k).expect("hmac takes any key length"));
        let limits = UsageLimits {
            per_caller_count: settings.max_kept_per_caller as u64,
            per_caller_bytes: settings.bytes_per_caller,
            total_bytes: settings.bytes_total,
        };
        let bucket_ms = (settings.ttl_ms / 64).max(1000);
        let usage = StoreUsage::open(ledger, "t", "kept tasks", limits, bucket_ms);
        Tasks {
            usage: Arc::new(usage),
            reads: Arc::clone(&ledger.reads),
            writer: Arc::clone(&ledger.writer),
            clock: ledger.clock,
            run: ledger.run,
            id_key: keys.next().expect("the current secret's key comes first"),
            previous_id_keys: keys.collect(),
            settings,
            live: Arc::default(),
            counts: Arc::default(),
            shared: ledger.shared,
        }
    }

    /// Hear the cancellations and answers other hosts send to the tasks running here (a
    /// ledger only this process uses has none). Holds the tasks weakly.
    pub(crate) fn hear(self: &Arc<Self>) {
        let tasks = Arc::downgrade(self);
        let heard = Box::new(move |message: Option<Bytes>| {
            let (Some(tasks), Some(m)) = (tasks.upgrade(), message) else { return };
            let Ok(m) = serde_json::from_slice::<Value>(&m) else { return };
            let Some(hmac) = m["task"].as_str() else { return };
            let Some(run) = tasks.live.lock().get(hmac).cloned() else { return };
            if m["cancel"] == true {
                // It leaves the running ones once its record commits.
                tasks.end_now(&run, TaskStatus::Cancelled, "cancelled by the client", 0);
            } else if let Some(answers) = m["answers"].as_object() {
                // Checked by the host that received them, against the same questions.
                let _ = tasks.deliver(&run, answers, |_, _, _| Ok(()));
            }
        });
        if let Err(e) = self.writer.store().subscribe(TASKS_CHANNEL, heard) {
            tracing::error!(error = %e, "cannot hear other hosts' task cancellations and answers");
        }
    }

    /// The settings.
    #[must_use]
    pub fn settings(&self) -> TaskSettings {
        self.settings
    }

    fn now(&self) -> u64 {
        self.clock.now().0
    }

    fn hmac(&self, id: &str) -> String {
        crate::stores::handles::ledger_name(&self.id_key, id)
    }

    /// The writes of `run`'s record as `state` has it, counted against the bounds in place of
    /// its previous record (its first takes the place its slot held). Call under the run's
    /// state lock: records are queued in the order of its states.
    fn put(&self, run: &Run, state: &mut RunState) -> Vec<Op> {
        self.put_within(run, state, true).unwrap_or_default()
    }

    /// [`Tasks::put`], refused (changing nothing) unless `force` when the record's growth would
    /// take its caller's or every caller's kept tasks past their byte bounds.
    fn put_within(&self, run: &Run, state: &mut RunState, force: bool) -> Result<Vec<Op>, Over> {
        let op = put_record(
            &run.hmac,
            TaskRecord {
                principal: run.principal.as_deref().map(str::to_owned),
                tool: run.tool.clone(),
                run: self.run,
                view: state.view.clone(),
            },
        );
        let Op::Put { key, value, expires_ms } = &op else {
            unreachable!("a task's record is a put")
        };
        let new = Entry {
            name: &run.hmac,
            expires_ms: *expires_ms,
            bytes: (key.len() + value.len()) as u64,
        };
        let now = self.now();
        let counted = match state.slot.as_mut().and_then(|s| s.kept.take()) {
            Some(place) => place.into_entry(&new, now),
            None => {
                let old = (state.recorded_bytes > 0)
                    .then_some(Entry { bytes: state.recorded_bytes, ..new });
                self.usage.replace(&run.principal, old.as_ref(), &new, now, force)?
            }
        };
        state.recorded_bytes = new.bytes;
        let mut ops = vec![op];
        ops.extend(counted);
        Ok(ops)
    }

    /// Wait for a record queued with [`Writer::submit_acked`] (queued under the run's lock,
    /// awaited after it).
    async fn committed(&self, ack: oneshot::Receiver<()>) -> Result<(), TaskError> {
        // Not confirmed: it may still land once the ledger commits again.
        self.writer.wait_committed(ack).await.map_err(|_| TaskError::Unavailable)
    }

    /// A place among `owner`'s running tasks, taken before a call that may become a task
    /// runs; refused when the caller runs as many as it may, or keeps as many (the call then
    /// runs as an ordinary one, or is refused when its tool needs a task).
    ///
    /// # Errors
    /// Why there is no room, with when to try again.
    pub fn reserve(&self, owner: Option<Arc<str>>) -> Result<TaskSlot, NoRoom> {
        // The count in memory first (cheap); the ledger's count of kept tasks only then.
        let slot = {
            let mut c = self.counts.lock();
            let n = c.entry(owner.clone()).or_insert(0);
            if *n >= self.settings.max_per_caller {
                if *n == 0 {
                    c.remove(&owner);
                }
                return Err(NoRoom::Running);
            }
            *n += 1;
            TaskSlot { counts: Arc::clone(&self.counts), owner, kept: None }
        };
        // Refused: the slot is dropped, its place given back.
        let mut slot = slot;
        slot.kept = Some(self.room_to_keep(&slot.owner)?);
        Ok(slot)
    }

    /// A place among what `owner` keeps, if it keeps fewer tasks (and bytes of them) than it
    /// may and every caller fewer bytes than the server may keep: held (counted) until the
    /// task's first record takes it, so concurrent calls cannot all pass the bounds.
    fn room_to_keep(
        &self,
        owner: &crate::ledger::Caller,
    ) -> Result<crate::ledger::Reservation, NoRoom> {
        let now = self.now();
        // A working record is a few hundred bytes; its result is counted when it is written
        // (a result past the bounds is not kept).
        self.usage
            .reserve(owner, now, now.saturating_add(self.settings.ttl_ms), RECORD_BYTES)
            .map_err(|over| match over {
                Over::Caller { .. } => NoRoom::Kept { retry_after_s: over.retry_after_s() },
                Over::Total { .. } => NoRoom::Full { retry_after_s: over.retry_after_s() },
            })
    }

    /// `(tasks, bytes)` kept by `owner`, and by every caller.
    #[must_use]
    pub fn kept(&self, owner: Option<&str>) -> ((u64, u64), (u64, u64)) {
        let now = self.now();
        (self.usage.of(&owner.map(Arc::from), now), self.usage.total(now))
    }

    /// A new task in `slot`'s caller's name running `tool`, recorded (`working`) before it
    /// is returned.
    ///
    /// # Errors
    /// [`TaskError::Unavailable`] when the record could not be written.
    pub async fn create(
        &self,
        slot: TaskSlot,
        tool: &str,
        cancel: CancellationToken,
    ) -> Result<Arc<Run>, TaskError> {
        let principal = slot.owner.clone();
        let id = task::mint_id(&crate::rng::bytes::<TASK_ID_RANDOM_BYTES>());
        let now = self.now();
        let view = TaskView {
            task_id: id.clone(),
            status: TaskStatus::Working,
            status_message: None,
            created_ms: now,
            updated_ms: now,
            ttl_ms: self.settings.ttl_ms,
            poll_ms: self.settings.poll_ms,
            input_requests: Map::new(),
            result: None,
            error: None,
        };
        let run = Arc::new(Run {
            hmac: self.hmac(&id),
            id,
            principal,
            tool: tool.to_owned(),
            cancel,
            state: Mutex::new(RunState {
                view,
                shown: None,
                waiters: HashMap::new(),
                slot: Some(slot),
                recorded_bytes: 0,
            }),
            settled: tokio::sync::watch::Sender::new(None),
        });
        let ops = self.put(&run, &mut run.state.lock());
        let ack = self.writer.submit_acked(ops);
        self.committed(ack).await?;
        self.live.lock().insert(run.hmac.clone(), Arc::clone(&run));
        Ok(run)
    }

    /// Queue `run`'s final record (`state` has its final view): once it commits the run
    /// leaves the running ones, gives its caller's place back and is settled. Until then a
    /// read finds it here and is shown the state before ([`RunState::shown`]), and a cancel
    /// waits for it ([`Tasks::settled`]), whatever time the ledger takes.
    fn settle(&self, run: &Arc<Run>, ops: Vec<Op>) {
        /// Says the record was given up if the writer drops the callback uncalled.
        struct Settling(Arc<Run>, bool);
        impl Settling {
            fn done(&mut self) {
                self.1 = true;
            }
        }
        impl Drop for Settling {
            fn drop(&mut self) {
                self.0.settled.send_replace(Some(self.1));
            }
        }
        let (live, mut settling) = (Arc::clone(&self.live), Settling(Arc::clone(run), false));
        self.writer.submit_then(
            ops,
            Box::new(move || {
                let run = &settling.0;
                live.lock().remove(&run.hmac);
                drop(run.state.lock().slot.take());
                settling.done();
            }),
        );
    }

    /// Wait until `run`'s final record is committed (at once when it is, or it has not
    /// ended).
    ///
    /// # Errors
    /// [`TaskError::Unavailable`]: the ledger fails (it may still commit later).
    async fn settled(&self, run: &Run) -> Result<(), TaskError> {
        if !run.is_final() {
            return Ok(());
        }
        let mut settled = run.settled.subscribe();
        self.writer
            .wait_until(async move {
                settled.wait_for(Option::is_some).await.is_ok_and(|s| *s == Some(true))
            })
            .await
            .map_err(|_| TaskError::Unavailable)
    }

    /// How long `run` may still run before its record expires.
    #[must_use]
    pub fn time_left(&self, run: &Run) -> std::time::Duration {
        let v = &run.state.lock().view;
        std::time::Duration::from_millis(
            v.created_ms.saturating_add(v.ttl_ms).saturating_sub(self.now()),
        )
    }

    /// The task asks the client (`key` names the question): the task shows it among its
    /// input requests (`input_required`) until a `tasks/update` answers it.
    pub fn ask(
        &self,
        run: &Run,
        key: &str,
        method: &str,
        params: Value,
    ) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        let mut s = run.state.lock();
        if s.view.status.is_final() {
            // Dropped sender: the question is never answered (the task is over).
            return rx;
        }
        s.view.input_requests.insert(key.to_owned(), json!({"method": method, "params": params}));
        s.view.status = TaskStatus::InputRequired;
        s.view.updated_ms = self.now().max(s.view.updated_ms);
        s.waiters.insert(key.to_owned(), tx);
        // Readers here see the state in memory at once; the record follows.
        let ops = self.put(run, &mut s);
        self.writer.submit(ops);
        rx
    }

    /// The task's tool finished with `outcome` (unless the task already ended: a cancelled
    /// task stays cancelled). Recorded before the task leaves the running ones.
    pub async fn finish(&self, run: &Arc<Run>, outcome: Result<Value, ErrorObject>) {
        {
            let mut s = run.state.lock();
            if s.view.status.is_final() {
                return;
            }
            s.shown = Some(s.view.clone());
            match outcome {
                Ok(result) => {
                    let encoded = serde_json::to_vec(&result).unwrap_or_default();
                    let size = encoded.len();
                    let max = self.settings.max_result_bytes;
                    s.view.result = Some(match codec::past_kept_bound(&encoded, max) {
                        Some(codec::PastKeptBound::Bytes) => {
                            json!({"content": [{"type": "text", "text": format!("The task completed, but its result ({size} bytes) is larger than the {max} bytes a task keeps.")}], "isError": true})
                        }
                        Some(codec::PastKeptBound::Depth) => {
                            json!({"content": [{"type": "text", "text": format!("The task completed, but its result nests more levels deep than the {} a task keeps.", codec::KEPT_DEPTH_MAX)}], "isError": true})
                        }
                        None => result,
                    });
                    s.view.status = TaskStatus::Completed;
                }
                Err(e) => {
                    s.view.status_message = Some(e.message.clone());
                    s.view.error = Some(serde_json::to_value(&e).unwrap_or(Value::Null));
                    s.view.status = TaskStatus::Failed;
                }
            }
            s.view.input_requests.clear();
            s.waiters.clear();
            s.view.updated_ms = self.now().max(s.view.updated_ms);
            let ops = match self.put_within(run, &mut s, false) {
                Ok(ops) => ops,
                Err(_) => {
                    // Past what its caller (or every caller) may keep: its outcome is not kept.
                    let why = "would take what its caller keeps in tasks past tasks.bytes_per_caller (or every caller's past tasks.bytes_total), so it was not kept";
                    if let Some(r) = s.view.result.take() {
                        let size = serde_json::to_vec(&r).map_or(0, |v| v.len());
                        s.view.result = Some(
                            json!({"content": [{"type": "text", "text": format!("The task completed, but its result ({size} bytes) {why}.")}], "isError": true}),
                        );
                    }
                    if s.view.error.is_some() {
                        let message = format!("The task failed, and its error {why}.");
                        s.view.status_message = Some(message.clone());
                        s.view.error =
                            Some(json!({"code": code::INTERNAL_ERROR, "message": message}));
                    }
                    self.put(run, &mut s)
                }
            };
            self.settle(run, ops);
        }
        if self.settled(run).await.is_err() {
            tracing::error!(task = %run.hmac, "a task's outcome is not recorded yet: the ledger fails (it stays running here until it is)");
        }
    }

    /// A task's state for `principal`.
    ///
    /// # Errors
    /// [`TaskError::NotFound`] (unknown, expired, another caller's); [`TaskError::Unavailable`].
    pub async fn get(&self, principal: Option<&str>, id: &str) -> Result<TaskView, TaskError> {
        if !task::is_id_shaped(id) {
            return Err(TaskError::NotFound);
        }
        let hmac = self.hmac(id);
        let live = self.live.lock().get(&hmac).cloned();
        if let Some(run) = live {
            if run.principal.as_deref() != principal {
                return Err(TaskError::NotFound);
            }
            let s = run.state.lock();
            return Ok(s.shown.as_ref().unwrap_or(&s.view).clone());
        }
        let (record, hmac, stored_bytes) = self
            .read_named(hmac, id)
            .await?
            .filter(|(r, ..)| r.principal.as_deref() == principal)
            .ok_or(TaskError::NotFound)?;
        let mut view = TaskView { task_id: id.to_owned(), ..record.view.clone() };
        if !view.status.is_final() && self.runs_elsewhere(record.run, &hmac).await? {
            // Another live host runs it: its record is its latest state.
            return Ok(view);
        }
        if !view.status.is_final() {
            // Not running here: the process that ran it is gone (a graceful stop records that
            // itself, so this was a kill). Recorded, so every later read agrees (unless the
            // ledger takes nothing now: the next read records it).
            view.status = TaskStatus::Failed;
            view.status_message = Some(
                "interrupted: the server restarted while the task ran; its outcome is unknown"
                    .into(),
            );
            view.error = Some(
                json!({"code": code::SERVER_RESTARTED, "message": "the server restarted while the task ran; its outcome is unknown"}),
            );
            view.input_requests.clear();
            view.updated_ms = self.now().max(view.updated_ms);
            if !self.writer.skip_optional() {
                let caller: crate::ledger::Caller = record.principal.as_deref().map(Arc::from);
                let op = put_record(&hmac, TaskRecord { view: view.clone(), ..record });
                let Op::Put { key, value, expires_ms } = &op else {
                    unreachable!("a task's record is a put")
                };
                let new = Entry {
                    name: &hmac,
                    expires_ms: *expires_ms,
                    bytes: (key.len() + value.len()) as u64,
                };
                // Counted in place of the record it rewrites (it must be written).
                let counted = self
                    .usage
                    .replace(
                        &caller,
                        Some(&Entry { bytes: stored_bytes, ..new }),
                        &new,
                        self.now(),
                        true,
                    )
                    .unwrap_or_default();
                let mut ops = vec![op];
                ops.extend(counted);
                self.writer.submit(ops);
            }
        }
        Ok(view)
    }

    /// The record of task `id` and its name: `hmac` (its name under the current key), else
    /// its name under a previous key (recorded before a rotation).
    async fn read_named(
        &self,
        hmac: String,
        id: &str,
    ) -> Result<Option<(TaskRecord, String, u64)>, TaskError> {
        if let Some((r, bytes)) = self.read(&hmac).await? {
            return Ok(Some((r, hmac, bytes)));
        }
        for key in &self.previous_id_keys {
            let old = crate::stores::handles::ledger_name(key, id);
            if let Some((r, bytes)) = self.read(&old).await? {
                return Ok(Some((r, old, bytes)));
            }
        }
        Ok(None)
    }

    /// The record named `hmac`, read on a reader thread, and its bytes (key and value) as the
    /// bounds count them.
    async fn read(&self, hmac: &str) -> Result<Option<(TaskRecord, u64)>, TaskError> {
        let (key, now) = (codec::task_key(hmac), self.now());
        let key_len = key.len() as u64;
        match self.reads.run(move |store| store.get(&key, now)).await {
            Ok(None) => Ok(None),
            Ok(Some(b)) => match codec::decode(&b) {
                Ok(Record::Task(t)) => Ok(Some((t, key_len + b.len() as u64))),
                _ => {
                    tracing::error!("a task record in the ledger is not readable");
                    Err(TaskError::Unavailable)
                }
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot read a task record");
                Err(TaskError::Unavailable)
            }
        }
    }

    /// Whether run `run` (not this one) is another live host sharing the ledger, that can
    /// still write the record of the task whose HMAC is `hmac`.
    async fn runs_elsewhere(&self, run: u64, hmac: &str) -> Result<bool, TaskError> {
        if !self.shared || run == self.run || run == 0 {
            return Ok(false);
        }
        let near = codec::task_key(hmac);
        self.reads.run(move |store| store.run_alive(run, &near)).await.map_err(|e| {
            tracing::error!(error = %e, "cannot tell whether a task's host is alive");
            TaskError::Unavailable
        })
    }

    async fn locate(&self, principal: Option<&str>, id: &str) -> Result<Where, TaskError> {
        if !task::is_id_shaped(id) {
            return Err(TaskError::NotFound);
        }
        let hmac = self.hmac(id);
        let run = self.live.lock().get(&hmac).cloned();
        match run {
            Some(r) if r.principal.as_deref() == principal => Ok(Where::Here(r)),
            Some(_) => Err(TaskError::NotFound),
            // Not running here: it exists (final, interrupted, or on another host) or not.
            None => {
                let view = self.get(principal, id).await?;
                if view.status.is_final() {
                    return Ok(Where::Ended);
                }
                let (record, hmac, _) =
                    self.read_named(hmac, id).await?.ok_or(TaskError::NotFound)?;
                Ok(Where::Elsewhere { hmac, questions: record.view.input_requests })
            }
        }
    }

    /// Send `message` about task `hmac` to the host that runs it, and wait (at most
    /// [`FORWARD_WAIT`]) until its record shows it (`shown`), or that it ended.
    async fn forward(
        &self,
        hmac: &str,
        message: Value,
        shown: impl Fn(&TaskView) -> bool,
    ) -> Result<(), TaskError> {
        let op = Op::Publish { channel: TASKS_CHANNEL, message: Bytes::from(message.to_string()) };
        self.writer.submit_and_wait(vec![op]).await.map_err(|_| TaskError::Unavailable)?;
        for _ in 0..FORWARD_WAIT.as_millis() / FORWARD_POLL.as_millis() {
            tokio::time::sleep(FORWARD_POLL).await;
            match self.read(hmac).await? {
                Some((r, _)) if shown(&r.view) || r.view.status.is_final() => return Ok(()),
                Some(_) => {}
                None => return Ok(()),
            }
        }
        tracing::warn!("the host running a task did not record what was sent to it in time");
        Err(TaskError::Unavailable)
    }

    /// Deliver the answers to `run`'s questions that `check` accepts (sync): the ledger's
    /// acknowledgement of the record, `None` when none was asked now.
    fn deliver(
        &self,
        run: &Run,
        responses: &Map<String, Value>,
        check: impl Fn(&str, &Value, &Value) -> Result<(), String>,
    ) -> Result<Option<oneshot::Receiver<()>>, TaskError> {
        let mut s = run.state.lock();
        let answered =
            task::answer(&s.view.input_requests, responses, check).map_err(TaskError::BadAnswer)?;
        if answered.taken.is_empty() {
            return Ok(None);
        }
        for (key, answer) in answered.taken {
            s.view.input_requests.remove(&key);
            if let Some(w) = s.waiters.remove(&key) {
                let _ = w.send(answer);
            }
        }
        if s.view.input_requests.is_empty() && s.view.status == TaskStatus::InputRequired {
            s.view.status = TaskStatus::Working;
        }
        s.view.updated_ms = self.now().max(s.view.updated_ms);
        let ops = self.put(run, &mut s);
        Ok(Some(self.writer.submit_acked(ops)))
    }

    /// Answer some of a task's questions (`tasks/update`): answers to questions asked now are
    /// checked with `check` and delivered, others ignored; recorded before it returns. A task
    /// not running here (ended) takes nothing.
    ///
    /// # Errors
    /// [`TaskError::NotFound`]; [`TaskError::BadAnswer`] (nothing is delivered then);
    /// [`TaskError::Unavailable`].
    pub async fn update(
        &self,
        principal: Option<&str>,
        id: &str,
        responses: &Map<String, Value>,
        check: impl Fn(&str, &Value, &Value) -> Result<(), String>,
    ) -> Result<(), TaskError> {
        match self.locate(principal, id).await? {
            Where::Here(run) => match self.deliver(&run, responses, check)? {
                Some(ack) => self.committed(ack).await,
                None => Ok(()),
            },
            Where::Elsewhere { hmac, questions } => {
                // Checked here, against the questions its record asks; sent to its host.
                let answered =
                    task::answer(&questions, responses, check).map_err(TaskError::BadAnswer)?;
                if answered.taken.is_empty() {
                    return Ok(());
                }
                let answers: Map<String, Value> = answered.taken.into_iter().collect();
                let message = json!({"task": hmac, "answers": answers});
                // Shown once none of these questions is asked any more.
                self.forward(&hmac, message, |v| {
                    answers.keys().all(|k| !v.input_requests.contains_key(k))
                })
                .await
            }
            Where::Ended => Ok(()),
        }
    }

    /// Cancel a task (`tasks/cancel`): a running one becomes `cancelled` (recorded before it
    /// returns) and its tool's token fires; an ended one is left as it is.
    ///
    /// # Errors
    /// [`TaskError::NotFound`]; [`TaskError::Unavailable`].
    pub async fn cancel(&self, principal: Option<&str>, id: &str) -> Result<(), TaskError> {
        match self.locate(principal, id).await? {
            Where::Here(run) => {
                self.end(&run, TaskStatus::Cancelled, "cancelled by the client", 0).await
            }
            Where::Elsewhere { hmac, .. } => {
                self.forward(&hmac, json!({"task": hmac, "cancel": true}), |_| false).await
            }
            Where::Ended => Ok(()),
        }
    }

    /// A running task is stopped by the server (its drain's or rollback's grace period is
    /// over): `failed` ("interrupted"), recorded; its tool's token fires.
    pub async fn interrupt(&self, run: &Arc<Run>) {
        let _ = self.end(run, TaskStatus::Failed, "interrupted: the server stopped (or rolled back) while the task ran; its outcome is unknown", code::DRAINED).await;
    }

    /// A task that reached `tasks.ttl_secs` while running is stopped: its tool's token
    /// fires and it leaves the running ones (its record, `failed`, expires with it).
    pub async fn expire(&self, run: &Arc<Run>) {
        let why = format!(
            "expired: the task ran for {} s (tasks.ttl_secs) without finishing and was stopped",
            self.settings.ttl_ms / 1000
        );
        let _ = self.end(run, TaskStatus::Failed, &why, code::INTERNAL_ERROR).await;
    }

    /// A task whose tool stopped without an outcome (it fired its own token, or its run was dropped unfinished): `failed`, recorded.
    pub async fn abandon(&self, run: &Arc<Run>) {
        let _ = self
            .end(
                run,
                TaskStatus::Failed,
                "the task's tool stopped without a result",
                code::INTERNAL_ERROR,
            )
            .await;
    }

    /// End a running task with `status` (a `failed` one with an error of `error_code`).
    /// Returns once its final record is committed, or the one of how it ended before (a
    /// task that just finished: it is not answered as ended before that is recorded).
    async fn end(
        &self,
        run: &Arc<Run>,
        status: TaskStatus,
        why: &str,
        error_code: i64,
    ) -> Result<(), TaskError> {
        self.end_now(run, status, why, error_code);
        self.settled(run).await
    }

    /// [`Tasks::end`]'s change, queued (its tool's token fired); nothing when it had ended
    /// already.
    fn end_now(&self, run: &Arc<Run>, status: TaskStatus, why: &str, error_code: i64) {
        {
            let mut s = run.state.lock();
            if s.view.status.is_final() {
                return;
            }
            s.shown = Some(s.view.clone());
            s.view.status = status;
            s.view.status_message = Some(why.to_owned());
            if status == TaskStatus::Failed {
                s.view.error = Some(json!({"code": error_code, "message": why}));
            }
            s.view.input_requests.clear();
            s.waiters.clear();
            s.view.updated_ms = self.now().max(s.view.updated_ms);
            let ops = self.put(run, &mut s);
            self.settle(run, ops);
        }
        run.cancel.cancel();
    }
}

/// The ledger write of a task's record (kept until the task's own expiry; its id is not in
/// it, only in its key's HMAC).
fn put_record(hmac: &str, mut record: TaskRecord) -> Op {
    record.view.task_id = String::new();
    let expires_ms = record.view.created_ms.saturating_add(record.view.ttl_ms);
    Op::Put {
        key: codec::task_key(hmac),
        value: Bytes::from(codec::encode(&Record::Task(record))),
        expires_ms,
    }
}

#[cfg(test)]
mod tests;
