//! The sink of a stateless (2026-07-28) request: its notifications queue for its own
//! response, and its questions to the client are answered from the retry's `inputResponses`
//! and the answers its `requestState` carries, collected for an `input_required` result, or,
//! once the call runs as a task, asked through the task.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::proto::jsonrpc::{ErrorObject, code};
use crate::proto::stateless::state;
use crate::stores::tasks::{Run, Tasks};
use crate::tools::BoxFuture;

/// Notifications a running stateless request may have queued before it waits for the client.
const NOTIFY_QUEUE: usize = 64;

/// See the module.
pub(crate) struct StatelessSink {
    queue: Mutex<Queue>,
    inputs: Mutex<Inputs>,
    /// The call may become a task.
    task_ok: bool,
    /// The handler has not been polled yet, or is in its first poll (`continue_as_task`
    /// yields then).
    first_poll: AtomicBool,
    /// Once it runs as a task: its run (questions go there).
    task: Mutex<Option<(Arc<Tasks>, Arc<Run>)>>,
}

/// The notification queue of a stateless request: made when the handler first notifies (most
/// never do, and a channel is the dearest thing a request would otherwise allocate).
enum Queue {
    /// Nothing sent yet.
    Unused,
    /// The sender, and the receiver until the response body takes it.
    Open(mpsc::Sender<Bytes>, Option<mpsc::Receiver<Bytes>>),
    /// No more notifications: a JSON-only client, or the response is over.
    Closed,
}

/// The multi-round-trip state of one stateless request.
pub(crate) struct Inputs {
    /// This method may ask (tools/call, prompts/get, resources/read).
    allowed: bool,
    /// Answers of earlier rounds, from the verified `requestState`.
    known: Map<String, Value>,
    /// This round's `inputResponses` (checked when a question looks one up; extra keys are
    /// ignored).
    responses: Map<String, Value>,
    /// Answers the handler used in this run: sealed into the next `requestState`.
    used: Map<String, Value>,
    /// Questions without an answer, in the order asked.
    asked: Vec<(String, Value)>,
    /// Questions asked without a key so far (their keys are `input_<n>`).
    next: usize,
    ttl_ms: u64,
}

impl Inputs {
    /// For a method that may not ask (every question is refused).
    pub(crate) fn none() -> Inputs {
        Inputs {
            allowed: false,
            known: Map::new(),
            responses: Map::new(),
            used: Map::new(),
            asked: Vec::new(),
            next: 0,
            ttl_ms: 0,
        }
    }

    /// For a request of `method` with `params` from `owner` that may ask: the answers its
    /// `requestState` carries (opened with one of `keys`) and its `inputResponses`; a next
    /// `requestState` lives `ttl_ms`.
    ///
    /// # Errors
    /// Why its `inputResponses` or `requestState` are refused.
    pub(crate) fn of(
        keys: &[[u8; 32]],
        ttl_ms: u64,
        owner: Option<&str>,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Inputs, String> {
        let responses = match params.and_then(|p| p.get("inputResponses")) {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err("inputResponses must be an object".into()),
        };
        let known = match params.and_then(|p| p.get("requestState")) {
            None => Map::new(),
            Some(Value::String(s)) => {
                state::open(keys, s, owner, &state::request_digest(method, params), unix_ms())
                    .map_err(|r| r.describe().to_owned())?
            }
            Some(_) => return Err("requestState must be a string".into()),
        };
        Ok(Inputs { allowed: true, known, responses, ttl_ms, ..Inputs::none() })
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl StatelessSink {
    /// A sink whose notifications are kept (`notify`) or dropped (a JSON-only client: there is
    /// nowhere to put them), with the request's `inputs`; `task_ok` when the call may become a
    /// task.
    pub(crate) fn new(notify: bool, inputs: Inputs, task_ok: bool) -> StatelessSink {
        StatelessSink {
            queue: Mutex::new(if notify { Queue::Unused } else { Queue::Closed }),
            inputs: Mutex::new(inputs),
            task_ok,
            first_poll: AtomicBool::new(true),
            task: Mutex::new(None),
        }
    }

    /// The first poll is over: `continue_as_task` no longer yields.
    pub(crate) fn first_poll_done(&self) {
        self.first_poll.store(false, Ordering::Release);
    }

    /// The call runs as a task from now on: its questions go to `run`.
    pub(crate) fn runs_as_task(&self, tasks: Arc<Tasks>, run: Arc<Run>) {
        *self.task.lock() = Some((tasks, run));
    }

    /// The handler asked nothing it had no answer for.
    pub(crate) fn asked_nothing(&self) -> bool {
        self.inputs.lock().asked.is_empty()
    }

    /// The `input_required` result, when the handler waits for answers it does not have (then
    /// it is dropped: it runs again from its start on the client's retry). Its `requestState`
    /// is sealed with `key` for `owner` and the request (`method`, `params`).
    pub(crate) fn input_required(
        &self,
        key: &[u8; 32],
        owner: Option<&str>,
        method: &str,
        params: Option<&Value>,
    ) -> Option<Value> {
        let i = self.inputs.lock();
        if i.asked.is_empty() {
            return None;
        }
        let requests: Map<String, Value> = i.asked.iter().cloned().collect();
        let expires = unix_ms().saturating_add(i.ttl_ms);
        let digest = state::request_digest(method, params);
        let sealed = state::seal(key, owner, &digest, expires, &i.used);
        Some(
            serde_json::json!({"resultType": "input_required", "inputRequests": requests, "requestState": sealed}),
        )
    }

    /// The receiver, once the handler has notified (for the response body).
    pub(crate) fn take_receiver(&self) -> Option<mpsc::Receiver<Bytes>> {
        match &mut *self.queue.lock() {
            Queue::Open(_, rx) => rx.take(),
            Queue::Unused | Queue::Closed => None,
        }
    }

    /// The receiver, making the queue if the handler has not notified yet (`None` when
    /// notifications are dropped: JSON only, or over).
    pub(crate) fn open(&self) -> Option<mpsc::Receiver<Bytes>> {
        let mut q = self.queue.lock();
        if matches!(*q, Queue::Unused) {
            let (tx, rx) = mpsc::channel(NOTIFY_QUEUE);
            *q = Queue::Open(tx, None);
            return Some(rx);
        }
        match &mut *q {
            Queue::Open(_, rx) => rx.take(),
            Queue::Unused | Queue::Closed => None,
        }
    }

    /// Notifications wait that the body has not taken yet.
    pub(crate) fn has_queued(&self) -> bool {
        matches!(&*self.queue.lock(), Queue::Open(_, Some(rx)) if !rx.is_empty())
    }

    /// No more notifications: later ones are dropped (a receiver not taken goes with it).
    pub(crate) fn close(&self) {
        *self.queue.lock() = Queue::Closed;
    }

    pub(super) fn continue_as_task(&self) -> BoxFuture<()> {
        if self.task_ok && self.first_poll.load(Ordering::Acquire) {
            // Pending once: the first poll ends here, and the shell makes the call a task.
            let mut yielded = false;
            return Box::pin(std::future::poll_fn(move |cx| {
                if yielded {
                    return Poll::Ready(());
                }
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }));
        }
        Box::pin(async {})
    }

    pub(super) fn notify(&self, json: Bytes) -> BoxFuture<()> {
        let tx = match &mut *self.queue.lock() {
            Queue::Closed => return Box::pin(async {}),
            Queue::Open(tx, _) => tx.clone(),
            q @ Queue::Unused => {
                let (tx, rx) = mpsc::channel(NOTIFY_QUEUE);
                *q = Queue::Open(tx.clone(), Some(rx));
                tx
            }
        };
        Box::pin(async move {
            // Closed: the client went away (the handler is being dropped).
            let _ = tx.send(json).await;
        })
    }

    pub(super) fn request(
        &self,
        method: &str,
        params: Value,
    ) -> BoxFuture<Result<Value, ErrorObject>> {
        let key = {
            let mut i = self.inputs.lock();
            i.next += 1;
            format!("input_{}", i.next)
        };
        self.input(&key, method, params)
    }

    pub(super) fn input(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> BoxFuture<Result<Value, ErrorObject>> {
        if let Some((tasks, run)) = self.task.lock().clone() {
            // A task asks through its input requests; `tasks/update` answers.
            let answer = tasks.ask(&run, key, method, params);
            return Box::pin(async move {
                answer.await.map_err(|_| {
                    ErrorObject::new(
                        code::INTERNAL_ERROR,
                        "the task ended before its question was answered",
                    )
                })
            });
        }
        let mut i = self.inputs.lock();
        if !i.allowed {
            let msg = format!(
                "{method}: only tools/call, prompts/get and resources/read may ask the client (2026-07-28)"
            );
            return Box::pin(async move { Err(ErrorObject::new(code::METHOD_NOT_FOUND, msg)) });
        }
        let answer = match i.known.get(key).cloned() {
            Some(a) => Some(a),
            None => match i.responses.get(key).cloned() {
                Some(a) => match state::check_answer(method, &params, &a) {
                    Ok(()) => Some(a),
                    Err(why) => {
                        let msg = format!("inputResponses.{key}: {why}");
                        return Box::pin(async move {
                            Err(ErrorObject::new(code::INVALID_PARAMS, msg))
                        });
                    }
                },
                None => None,
            },
        };
        match answer {
            Some(a) => {
                i.used.insert(key.to_owned(), a.clone());
                Box::pin(async move { Ok(a) })
            }
            None => {
                i.asked.push((
                    key.to_owned(),
                    serde_json::json!({"method": method, "params": params}),
                ));
                // Never answered in this run: the shell answers `input_required` and drops it.
                Box::pin(std::future::pending())
            }
        }
    }
}
