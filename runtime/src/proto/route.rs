//! Which step answers a request, decided from its era and method alone, and what a
//! `tools/call` needs before its tool runs (sans-IO). The shells act on these decisions; the
//! request pipeline (`crate::pipeline`) runs what reaches a handler the same way in both eras.

use serde_json::Value;

use super::jsonrpc::ErrorObject;
use super::jsonrpc::code;
use super::receipt::{IDEMPOTENCY_KEY_MAX_BYTES, IDEMPOTENCY_KEY_META, IdempotentCall};
use super::rollout::StreamPurpose;
use super::task::TaskSupport;

/// How a request reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// Inside a legacy session (`MCP-Session-Id`; 2025-03-26 to 2025-11-25).
    Session,
    /// Stateless, every request on its own (2026-07-28).
    Stateless,
}

/// The step that answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The catalog's handlers: tools, resources, prompts, completion. In a session also the
    /// lists and any other method (the catalog answers "method not found").
    Catalog,
    /// `ping` (session): `{}`.
    Ping,
    /// `logging/setLevel` (session): the session's log level.
    SetLevel,
    /// `resources/subscribe` (session).
    Subscribe,
    /// `resources/unsubscribe` (session).
    Unsubscribe,
    /// `initialize` inside a session that is initialized already: refused.
    Reinitialize,
    /// `server/discover` and the lists (stateless): answered at once, without a place among
    /// the requests in flight (they never wait).
    AtOnce,
    /// `subscriptions/listen` (stateless): a long-lived stream of its own.
    Listen,
    /// `tasks/get`, `tasks/update`, `tasks/cancel` (stateless, the tasks extension).
    Task(TaskOp),
    /// Any other method (stateless): "method not found".
    NotFound,
}

/// A `tasks/*` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskOp {
    /// `tasks/get`.
    Get,
    /// `tasks/update`: answers to a task's questions.
    Update,
    /// `tasks/cancel`.
    Cancel,
}

impl TaskOp {
    /// Its method's name.
    #[must_use]
    pub(crate) fn method(self) -> &'static str {
        match self {
            TaskOp::Get => "tasks/get",
            TaskOp::Update => "tasks/update",
            TaskOp::Cancel => "tasks/cancel",
        }
    }

    /// It changes the task: recorded in the ledger before it is acknowledged.
    #[must_use]
    pub(crate) fn records(self) -> bool {
        !matches!(self, TaskOp::Get)
    }
}

impl Route {
    /// The route of `method` in `era`.
    #[must_use]
    pub(crate) fn of(era: Era, method: &str) -> Route {
        match era {
            Era::Session => match method {
                super::mcp::method::PING => Route::Ping,
                super::mcp::method::SET_LEVEL => Route::SetLevel,
                "resources/subscribe" => Route::Subscribe,
                "resources/unsubscribe" => Route::Unsubscribe,
                super::mcp::method::INITIALIZE => Route::Reinitialize,
                _ => Route::Catalog,
            },
            Era::Stateless => match method {
                "tools/call" | "resources/read" | "prompts/get" | "completion/complete" => {
                    Route::Catalog
                }
                "server/discover"
                | "tools/list"
                | "prompts/list"
                | "resources/list"
                | "resources/templates/list" => Route::AtOnce,
                "subscriptions/listen" => Route::Listen,
                "tasks/get" => Route::Task(TaskOp::Get),
                "tasks/update" => Route::Task(TaskOp::Update),
                "tasks/cancel" => Route::Task(TaskOp::Cancel),
                _ => Route::NotFound,
            },
        }
    }
}

/// Whether a request of `method` may ask the client a question (elicitation, sampling,
/// roots). In the stateless era the others' questions are refused: only these methods carry
/// `inputResponses` and `requestState`.
#[must_use]
pub(crate) fn may_ask(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// What the door of a `tools/call` needs to know of its tool (from the tool's spec).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ToolTraits<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// Not annotated `readOnlyHint: true`.
    pub write: bool,
    /// Annotated `idempotentHint: true`.
    pub idempotent: bool,
    /// It keeps state in the ledger (state handles): it needs the ledger on every call.
    pub keeps_state: bool,
    /// The argument that carries its idempotency key, if any besides `_meta`.
    pub key_argument: Option<&'a str>,
}

/// What a `tools/call` of a known tool needs before the tool runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallClass {
    /// Its idempotency key (`Ok(None)`: none, or a read-only tool; `Err`: a malformed key,
    /// the call's answer).
    pub key: Result<Option<IdempotentCall>, ErrorObject>,
    /// What its stream, if it gets one, is for.
    pub purpose: StreamPurpose,
    /// It needs a ledger that accepts writes: it is keyed (its receipt), or its tool keeps
    /// state.
    pub needs_ledger: bool,
}

impl CallClass {
    /// A request that is not a call of a known tool: nothing to record.
    #[must_use]
    pub(crate) fn read_only() -> CallClass {
        CallClass { key: Ok(None), purpose: StreamPurpose::ReadOnly, needs_ledger: false }
    }

    /// It carries a well-formed idempotency key: it takes a place among its caller's receipts.
    #[must_use]
    pub(crate) fn keyed(&self) -> bool {
        matches!(self.key, Ok(Some(_)))
    }
}

/// Classify a `tools/call` of `tool` with `params`: a write or not, its idempotency key, and
/// whether it needs the ledger.
#[must_use]
pub(crate) fn classify_call(tool: &ToolTraits<'_>, params: Option<&Value>) -> CallClass {
    let key = idempotent_call(tool, params);
    let keyed = matches!(key, Ok(Some(_)));
    let purpose =
        if tool.write { StreamPurpose::Write { receipt: keyed } } else { StreamPurpose::ReadOnly };
    CallClass { key, purpose, needs_ledger: keyed || tool.keeps_state }
}

/// The idempotency key of a call of `tool`: `None` for a read-only tool (a key is ignored)
/// and for a call without one. The key is `_meta`'s [`IDEMPOTENCY_KEY_META`], else the
/// tool's key argument.
fn idempotent_call(
    tool: &ToolTraits<'_>,
    params: Option<&Value>,
) -> Result<Option<IdempotentCall>, ErrorObject> {
    if !tool.write {
        return Ok(None);
    }
    let args = params.and_then(|p| p.get("arguments")).filter(|a| !a.is_null());
    let from_meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(IDEMPOTENCY_KEY_META))
        .map(|k| (k, IDEMPOTENCY_KEY_META));
    let from_arg = || tool.key_argument.and_then(|a| args.and_then(|v| v.get(a)).map(|k| (k, a)));
    let Some((key, field)) = from_meta.or_else(from_arg) else { return Ok(None) };
    let key = key
        .as_str()
        .filter(|k| !k.is_empty() && k.len() <= IDEMPOTENCY_KEY_MAX_BYTES)
        .ok_or_else(|| {
            ErrorObject::new(
                code::INVALID_PARAMS,
                format!("{field} must be a string of 1 to {IDEMPOTENCY_KEY_MAX_BYTES} bytes"),
            )
        })?;
    let empty = Value::Object(serde_json::Map::new());
    Ok(Some(IdempotentCall {
        tool: tool.name.to_owned(),
        key: key.to_owned(),
        digest: super::receipt::args_digest(tool.name, args.unwrap_or(&empty)),
        idempotent: tool.idempotent,
    }))
}

/// Whether a call may become a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskPlan {
    /// Never (the tool forbids it, or the request did not declare the extension).
    Never,
    /// If the ledger accepts writes and the caller has room for one more task; otherwise
    /// an ordinary call.
    IfRoom,
    /// Always: the ledger must accept writes and the caller have room, or it is refused.
    Required,
}

/// The call needs a task and its request did not declare the tasks extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NeedsTasks;

/// Whether a call of a tool with `support` may become a task, for a request that `declared`
/// the tasks extension or not.
///
/// # Errors
/// [`NeedsTasks`] for a tool that runs only as a task, called without the extension.
pub(crate) fn task_plan(support: TaskSupport, declared: bool) -> Result<TaskPlan, NeedsTasks> {
    match (support, declared) {
        (TaskSupport::Required, false) => Err(NeedsTasks),
        (TaskSupport::Required, true) => Ok(TaskPlan::Required),
        (TaskSupport::Optional, true) => Ok(TaskPlan::IfRoom),
        (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => Ok(TaskPlan::Never),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_session_era_routes_its_own_methods_and_gives_the_rest_to_the_catalog() {
        assert_eq!(Route::of(Era::Session, "ping"), Route::Ping);
        assert_eq!(Route::of(Era::Session, "logging/setLevel"), Route::SetLevel);
        assert_eq!(Route::of(Era::Session, "resources/subscribe"), Route::Subscribe);
        assert_eq!(Route::of(Era::Session, "resources/unsubscribe"), Route::Unsubscribe);
        assert_eq!(Route::of(Era::Session, "initialize"), Route::Reinitialize);
        for m in ["tools/call", "tools/list", "server/discover", "tasks/get", "nope"] {
            assert_eq!(Route::of(Era::Session, m), Route::Catalog, "{m}");
        }
    }

    #[test]
    fn the_stateless_era_answers_lists_at_once_and_knows_no_session_methods() {
        for m in ["tools/call", "resources/read", "prompts/get", "completion/complete"] {
            assert_eq!(Route::of(Era::Stateless, m), Route::Catalog, "{m}");
        }
        for m in ["server/discover", "tools/list", "resources/templates/list"] {
            assert_eq!(Route::of(Era::Stateless, m), Route::AtOnce, "{m}");
        }
        assert_eq!(Route::of(Era::Stateless, "subscriptions/listen"), Route::Listen);
        assert_eq!(Route::of(Era::Stateless, "tasks/cancel"), Route::Task(TaskOp::Cancel));
        for m in ["ping", "logging/setLevel", "initialize", "resources/subscribe", "x"] {
            assert_eq!(Route::of(Era::Stateless, m), Route::NotFound, "{m}");
        }
        assert!(!TaskOp::Get.records() && TaskOp::Update.records() && TaskOp::Cancel.records());
        for op in [TaskOp::Get, TaskOp::Update, TaskOp::Cancel] {
            assert_eq!(Route::of(Era::Stateless, op.method()), Route::Task(op));
        }
    }

    #[test]
    fn only_tools_prompts_and_resource_reads_may_ask() {
        assert!(may_ask("tools/call") && may_ask("prompts/get") && may_ask("resources/read"));
        assert!(!may_ask("completion/complete") && !may_ask("tools/list"));
    }

    fn traits(write: bool, keeps_state: bool) -> ToolTraits<'static> {
        ToolTraits { name: "t", write, idempotent: false, keeps_state, key_argument: Some("k") }
    }

    #[test]
    fn a_keyed_write_needs_its_receipt_and_a_read_never_does() {
        let keyed = json!({"name": "t", "arguments": {"k": "abc"}});
        let c = classify_call(&traits(true, false), Some(&keyed));
        assert!(c.keyed() && c.needs_ledger);
        assert_eq!(c.purpose, StreamPurpose::Write { receipt: true });
        let meta = json!({"name": "t", "_meta": {IDEMPOTENCY_KEY_META: "m"}, "arguments": {}});
        assert_eq!(classify_call(&traits(true, false), Some(&meta)).key.unwrap().unwrap().key, "m");
        let plain = json!({"name": "t", "arguments": {}});
        let c = classify_call(&traits(true, false), Some(&plain));
        assert!(!c.keyed() && !c.needs_ledger);
        assert_eq!(c.purpose, StreamPurpose::Write { receipt: false });
        // A read-only tool ignores a key; a tool that keeps state needs the ledger anyway.
        let c = classify_call(&traits(false, false), Some(&keyed));
        assert_eq!(c, CallClass::read_only());
        assert!(classify_call(&traits(false, true), Some(&plain)).needs_ledger);
    }

    #[test]
    fn a_malformed_key_is_the_calls_answer_and_takes_no_receipt() {
        let bad = json!({"name": "t", "arguments": {"k": 5}});
        let c = classify_call(&traits(true, false), Some(&bad));
        assert!(c.key.is_err() && !c.keyed() && !c.needs_ledger);
        assert_eq!(c.purpose, StreamPurpose::Write { receipt: false });
        let long = json!({"name": "t", "arguments": {"k": "x".repeat(129)}});
        assert!(classify_call(&traits(true, false), Some(&long)).key.is_err());
    }

    #[test]
    fn a_task_needs_the_extension_only_when_the_tool_runs_only_as_one() {
        use TaskSupport::{Forbidden, Optional, Required};
        assert_eq!(task_plan(Required, false), Err(NeedsTasks));
        assert_eq!(task_plan(Required, true), Ok(TaskPlan::Required));
        assert_eq!(task_plan(Optional, true), Ok(TaskPlan::IfRoom));
        assert_eq!(task_plan(Optional, false), Ok(TaskPlan::Never));
        assert_eq!(task_plan(Forbidden, true), Ok(TaskPlan::Never));
    }
}
