//! The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663), the pure part: a task's
//! states and what each shows on the wire, the input requests of a task and how an update
//! answers them, task ids and timestamps. The runs and the store are [`crate::stores::tasks`].
//!
//! A task is `working`, `input_required` (some of its questions are unanswered), then one of
//! the final states `completed` (the tool's result, a tool error included), `failed` (a
//! protocol error: `error`) or `cancelled`. A final state never changes again.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The extension's identifier (capabilities, `_meta`).
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Random bytes in a task id (144 bits).
pub const TASK_ID_RANDOM_BYTES: usize = 18;

/// Whether a tool may, or must, run as a task when the client supports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// Never a task (the default).
    #[default]
    Forbidden,
    /// A task when the request declares the extension and the tool does not finish at once
    /// (or asks for it with `ToolContext::continue_as_task`); else an ordinary call.
    Optional,
    /// Always a task; a request without the extension is refused (`-32021`).
    Required,
}

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for answers to its input requests.
    InputRequired,
    /// Finished with the tool's result.
    Completed,
    /// Finished with a protocol error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl TaskStatus {
    /// Whether the state is final.
    #[must_use]
    pub fn is_final(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled)
    }
}

/// A new task id from `random` (CSPRNG bytes): `tsk_` and 24 URL-safe characters (safe in a
/// header).
#[must_use]
pub fn mint_id(random: &[u8; TASK_ID_RANDOM_BYTES]) -> String {
    format!("tsk_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random))
}

/// Whether `s` has the shape of a task id (it may still be unknown).
#[must_use]
pub fn is_id_shaped(s: &str) -> bool {
    s.strip_prefix("tsk_").is_some_and(|r| {
        r.len() == 24 && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// Whether a request's client capabilities declare the extension.
#[must_use]
pub fn declared(capabilities: &Value) -> bool {
    capabilities.get("extensions").and_then(|e| e.get(EXTENSION)).is_some_and(|v| !v.is_null())
}

/// The `requiredCapabilities` of a request that needs the extension.
#[must_use]
pub fn required_capabilities() -> Value {
    json!({"extensions": {EXTENSION: {}}})
}

/// Milliseconds since the epoch as ISO 8601 UTC (`2026-12-02T02:21:17.123Z`).
#[must_use]
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// What a task shows: its state, and what that state carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    /// The id (not kept in the ledger's record: empty there).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    /// The state.
    pub status: TaskStatus,
    /// A human-readable note on the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Created and last changed (ms since the epoch).
    pub created_ms: u64,
    /// Last changed.
    pub updated_ms: u64,
    /// How long after creation it is kept (ms).
    pub ttl_ms: u64,
    /// How often a client should poll (ms).
    pub poll_ms: u64,
    /// Unanswered questions (key → `{method, params}`), in the order asked.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub input_requests: Map<String, Value>,
    /// The tool's result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The protocol error, once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

impl TaskView {
    fn base(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("taskId".into(), json!(self.task_id));
        m.insert("status".into(), json!(self.status));
        if let Some(s) = &self.status_message {
            m.insert("statusMessage".into(), json!(s));
        }
        m.insert("createdAt".into(), json!(iso8601(self.created_ms)));
        m.insert("lastUpdatedAt".into(), json!(iso8601(self.updated_ms)));
        m.insert("ttlMs".into(), json!(self.ttl_ms));
        m.insert("pollIntervalMs".into(), json!(self.poll_ms));
        m
    }

    /// The `CreateTaskResult` of the `tools/call` that made it: the task, flat, `resultType:
    /// "task"`, nothing of its outcome.
    #[must_use]
    pub fn created(&self) -> Value {
        let mut m = self.base();
        m.insert("resultType".into(), json!("task"));
        Value::Object(m)
    }

    /// The `tasks/get` result (before its `resultType` and `_meta` are added): the task and
    /// what its state carries (the questions while `input_required`, the result once
    /// `completed`, the error once `failed`), nothing else.
    #[must_use]
    pub fn detailed(&self) -> Value {
        let mut m = self.base();
        match self.status {
            TaskStatus::InputRequired => {
                m.insert("inputRequests".into(), Value::Object(self.input_requests.clone()));
            }
            TaskStatus::Completed => {
                if let Some(r) = &self.result {
                    m.insert("result".into(), r.clone());
                }
            }
            TaskStatus::Failed => {
                if let Some(e) = &self.error {
                    m.insert("error".into(), e.clone());
                }
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        Value::Object(m)
    }
}

/// How `tasks/update`'s answers meet a task's questions.
#[derive(Debug, Default, PartialEq)]
pub struct Answered {
    /// Keys answered (each removed from the questions), with their answers.
    pub taken: Vec<(String, Value)>,
    /// Keys not asked now (never, or already answered): ignored, as the extension says.
    pub ignored: Vec<String>,
}

/// Match `responses` against the unanswered `questions`: answers to questions asked now are
/// checked with `check` (its refusal refuses the whole update, changing nothing), others are
/// ignored.
///
/// # Errors
/// The first answer `check` refuses, with its key.
pub fn answer(
    questions: &Map<String, Value>,
    responses: &Map<String, Value>,
    check: impl Fn(&str, &Value, &Value) -> Result<(), String>,
) -> Result<Answered, String> {
    let mut out = Answered::default();
    for (key, answer) in responses {
        match questions.get(key) {
            Some(q) => {
                let method = q.get("method").and_then(Value::as_str).unwrap_or_default();
                check(method, q.get("params").unwrap_or(&Value::Null), answer)
                    .map_err(|why| format!("inputResponses.{key}: {why}"))?;
                out.taken.push((key.clone(), answer.clone()));
            }
            None => out.ignored.push(key.clone()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(status: TaskStatus) -> TaskView {
        TaskView {
            task_id: mint_id(&[0; TASK_ID_RANDOM_BYTES]),
            status,
            status_message: None,
            created_ms: 1_764_642_077_123,
            updated_ms: 1_764_642_078_000,
            ttl_ms: 3_600_000,
            poll_ms: 1000,
            input_requests: Map::from_iter([(
                "confirm".to_owned(),
                json!({"method": "elicitation/create", "params": {}}),
            )]),
            result: Some(json!({"content": []})),
            error: Some(json!({"code": -32603, "message": "x"})),
        }
    }

    #[test]
    fn timestamps_are_iso_8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_764_642_077_123), "2025-12-02T02:21:17.123Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z", "a leap day");
        assert_eq!(iso8601(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_created_task_is_flat_and_carries_nothing_of_its_outcome() {
        let c = view(TaskStatus::Working).created();
        assert_eq!(c["resultType"], "task");
        assert_eq!(
            (c["ttlMs"].clone(), c["pollIntervalMs"].clone()),
            (json!(3_600_000), json!(1000))
        );
        assert!(c["createdAt"].as_str().unwrap().starts_with("2025-12-02T"));
        for absent in
            ["task", "result", "error", "inputRequests", "requestState", "ttl", "pollInterval"]
        {
            assert!(c.get(absent).is_none(), "{absent}: {c}");
        }
        assert!(is_id_shaped(c["taskId"].as_str().unwrap()));
    }

    #[test]
    fn each_state_shows_only_what_it_carries() {
        let d = |s| view(s).detailed();
        assert!(
            d(TaskStatus::Working).get("inputRequests").is_none()
                && d(TaskStatus::Working).get("result").is_none()
        );
        assert_eq!(
            d(TaskStatus::InputRequired)["inputRequests"]["confirm"]["method"],
            "elicitation/create"
        );
        assert!(
            d(TaskStatus::Completed).get("result").is_some()
                && d(TaskStatus::Completed).get("error").is_none()
        );
        assert!(
            d(TaskStatus::Failed).get("error").is_some()
                && d(TaskStatus::Failed).get("result").is_none()
        );
        assert!(
            d(TaskStatus::Cancelled).get("result").is_none()
                && d(TaskStatus::Cancelled).get("error").is_none()
        );
        assert!(TaskStatus::Cancelled.is_final() && !TaskStatus::InputRequired.is_final());
    }

    #[test]
    fn an_update_takes_answers_to_questions_asked_now_and_ignores_the_rest() {
        let q = Map::from_iter([
            ("a".to_owned(), json!({"method": "elicitation/create"})),
            ("b".to_owned(), json!({"method": "roots/list"})),
        ]);
        let r = Map::from_iter([
            ("a".to_owned(), json!({"action": "accept"})),
            ("zzz".to_owned(), json!({"ignored": true})),
        ]);
        let out = answer(&q, &r, |_, _, _| Ok(())).unwrap();
        assert_eq!(out.taken, vec![("a".to_owned(), json!({"action": "accept"}))]);
        assert_eq!(out.ignored, vec!["zzz".to_owned()]);
        let refused = answer(&q, &r, |m, _, _| {
            if m == "elicitation/create" { Err("wrong shape".into()) } else { Ok(()) }
        });
        assert_eq!(refused.unwrap_err(), "inputResponses.a: wrong shape");
    }

    #[test]
    fn the_extension_is_declared_in_the_request_capabilities() {
        assert!(declared(&json!({"extensions": {EXTENSION: {}}})));
        assert!(!declared(&json!({"extensions": {}})));
        assert!(!declared(&json!({"tasks": {}})), "not the 2025-11-25 slot");
        assert_eq!(
            required_capabilities(),
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
        );
    }
}
