//! The tasks extension (2026-07-28): a call that becomes a task, polled to its end; another
//! caller cannot see it; cancelling stops its tool; questions asked inside a task are its
//! input requests, answered by `tasks/update`; without the extension, a tool that may run as
//! a task is an ordinary call and one that needs a task is refused.

use crate::common;

use actix_web::http::StatusCode;
use common::*;
use serde_json::{Value, json};

fn caps_with_tasks() -> Value {
    json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
}

fn call(id: i64, tool: &str, caps: Value) -> actix_web::test::TestRequest {
    modern(id, "tools/call", json!({"name": tool, "arguments": {}, "_meta": meta(caps)}))
}

fn task_req(
    id: i64,
    method: &str,
    task: &str,
    extra: Value,
    caps: Value,
) -> actix_web::test::TestRequest {
    let mut params = json!({"taskId": task, "_meta": meta(caps)});
    if let (Some(p), Value::Object(e)) = (params.as_object_mut(), extra) {
        p.extend(e);
    }
    modern(id, method, params).insert_header(("Mcp-Name", task.to_owned()))
}

async fn get(h: &Harness, task: &str, token: &str) -> Value {
    h.send(
        task_req(50, "tasks/get", task, json!({}), caps_with_tasks())
            .insert_header(("Authorization", format!("Bearer {token}"))),
    )
    .await
    .json()
    .await
}

/// Poll `tasks/get` (bounded) until the task's status is `want`.
async fn until_status(h: &Harness, task: &str, token: &str, want: &str) -> Value {
    for _ in 0..200 {
        let v = get(h, task, token).await;
        if v["result"]["status"] == want {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("task {task} never reached {want}");
}

fn bearer(r: actix_web::test::TestRequest, token: &str) -> actix_web::test::TestRequest {
    r.insert_header(("Authorization", format!("Bearer {token}")))
}

#[actix_web::test]
async fn a_task_runs_to_its_end_and_another_caller_cannot_see_it() {
    let h = harness_with_two_callers().await;
    let created = h.send(bearer(call(1, "job", caps_with_tasks()), "ta")).await.json().await;
    let r = &created["result"];
    assert_eq!(
        (r["resultType"].as_str(), r["status"].as_str()),
        (Some("task"), Some("working")),
        "{created}"
    );
    let task = r["taskId"].as_str().unwrap().to_owned();
    assert!(r.get("content").is_none() && r.get("result").is_none(), "nothing of the outcome yet");
    h.gate.started(1).await;
    let working = get(&h, &task, "ta").await;
    assert_eq!(
        (working["result"]["status"].as_str(), working["result"]["resultType"].as_str()),
        (Some("working"), Some("complete")),
        "{working}"
    );
    // Bob: exactly what an unknown task gets.
    let bobs = get(&h, &task, "tb").await;
    let unknown = get(&h, "tsk_AAAAAAAAAAAAAAAAAAAAAAAA", "tb").await;
    assert_eq!(
        (bobs["error"]["code"].clone(), bobs["error"]["message"].clone()),
        (json!(-32602), unknown["error"]["message"].clone()),
        "{bobs}"
    );
    h.gate.open(1);
    let done = until_status(&h, &task, "ta", "completed").await;
    assert_eq!(done["result"]["result"]["content"][0]["text"], "job done", "{done}");
    assert!(done["result"].get("error").is_none());
}

#[actix_web::test]
async fn cancelling_a_task_stops_its_tool_and_the_task_stays_cancelled() {
    let h = harness().await;
    let created = h.send(call(1, "job", caps_with_tasks())).await.json().await;
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    h.gate.started(1).await;
    let ack =
        h.send(task_req(2, "tasks/cancel", &task, json!({}), caps_with_tasks())).await.json().await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert!(
        ack["result"].get("status").is_none() && ack["result"].get("taskId").is_none(),
        "an empty acknowledgement: {ack}"
    );
    // The tool's future was dropped (its drop counts it finished) without its result.
    h.gate.finished(1).await;
    let v =
        h.send(task_req(3, "tasks/get", &task, json!({}), caps_with_tasks())).await.json().await;
    assert_eq!(v["result"]["status"], "cancelled", "{v}");
    assert!(v["result"].get("result").is_none());
    h.gate.open(1);
    let again =
        h.send(task_req(4, "tasks/cancel", &task, json!({}), caps_with_tasks())).await.json().await;
    assert_eq!(
        again["result"]["resultType"], "complete",
        "cancelling an ended task is acknowledged too"
    );
    let v =
        h.send(task_req(5, "tasks/get", &task, json!({}), caps_with_tasks())).await.json().await;
    assert_eq!(v["result"]["status"], "cancelled", "a final state never changes");
}

#[actix_web::test]
async fn a_question_asked_in_a_task_is_its_input_request_answered_by_update() {
    let h = harness().await;
    let created = h.send(call(1, "ask_job", caps_with_tasks())).await.json().await;
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    let asking = until_status(&h, &task, "", "input_required").await;
    assert_eq!(
        asking["result"]["inputRequests"]["confirm"]["method"], "elicitation/create",
        "{asking}"
    );
    // The wrong shape: refused, nothing delivered.
    let bad = h
        .send(task_req(
            2,
            "tasks/update",
            &task,
            json!({"inputResponses": {"confirm": {"action": "accept", "content": {"ok": "yes"}}}}),
            caps_with_tasks(),
        ))
        .await
        .json()
        .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert_eq!(get(&h, &task, "").await["result"]["status"], "input_required");
    // An unknown key is ignored; the right answer goes on.
    let ok = h.send(task_req(3, "tasks/update", &task, json!({"inputResponses": {"other": {}, "confirm": {"action": "accept", "content": {"ok": true}}}}), caps_with_tasks())).await.json().await;
    assert_eq!(ok["result"]["resultType"], "complete", "{ok}");
    let done = until_status(&h, &task, "", "completed").await;
    assert_eq!(done["result"]["result"]["content"][0]["text"], "confirmed=true", "{done}");
}

#[actix_web::test]
async fn without_the_extension_a_task_tool_is_an_ordinary_call_and_a_task_only_tool_is_refused() {
    let h = harness().await;
    let mut r = h.send(call(1, "needs_task", json!({}))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let body = r.json().await;
    assert_eq!((body["error"]["code"].clone(), body["id"].clone()), (json!(-32021), json!(1)));
    assert_eq!(
        body["error"]["data"]["requiredCapabilities"],
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    );
    // tasks/* need it too, and say so before looking the task up.
    let mut r = h
        .send(task_req(2, "tasks/get", "tsk_AAAAAAAAAAAAAAAAAAAAAAAA", json!({}), json!({})))
        .await;
    assert_eq!(
        (r.status, r.json().await["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32021))
    );
    // A tool that may run as a task runs as an ordinary call (its gate opened ahead).
    h.gate.open(1);
    let ordinary = h.send(call(3, "job", json!({}))).await.json().await;
    assert_eq!(ordinary["result"]["content"][0]["text"], "job done", "{ordinary}");
    assert!(ordinary["result"].get("taskId").is_none());
    // With the extension, a tool that needs a task is one even when it finishes at once.
    let t = h.send(call(4, "needs_task", caps_with_tasks())).await.json().await;
    let task = t["result"]["taskId"].as_str().expect("a task").to_owned();
    let done = until_status(&h, &task, "", "completed").await;
    assert_eq!(done["result"]["result"]["content"][0]["text"], "ran as a task");
    // In a legacy session the same tools are ordinary calls.
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(5, "needs_task", json!({})).await;
    assert_eq!(text_of(&r.message().await), "ran as a task");
}

#[actix_web::test]
async fn concurrent_calls_never_run_more_tasks_than_a_caller_may() {
    let mut c = mcp_runtime::config::RuntimeConfig::default();
    c.tasks.max_per_caller = 1;
    let h = harness_with(c).await;
    // Both calls are admitted before either task is recorded: the place is taken at admission.
    let (a, b) = tokio::join!(
        h.send(call(1, "needs_task", caps_with_tasks())),
        h.send(call(2, "needs_task", caps_with_tasks()))
    );
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS], "one task, one refusal");
    let mut refused = if a.status == StatusCode::OK { b } else { a };
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));
    assert_eq!(refused.json().await["error"]["code"], -32007);
}

#[actix_web::test]
async fn a_task_still_running_at_its_ttl_is_stopped_and_forgotten() {
    let mut c = mcp_runtime::config::RuntimeConfig::default();
    c.tasks.ttl_secs = 1;
    let h = harness_with(c).await;
    let created = h.send(call(1, "job", caps_with_tasks())).await.json().await;
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    h.gate.started(1).await;
    assert_eq!(get(&h, &task, "").await["result"]["status"], "working");
    // Its gate never opens: the TTL ends it (its tool is dropped) and it is gone, as every
    // task is after its TTL.
    h.gate.finished(1).await;
    let gone = get(&h, &task, "").await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    // Its place is free again.
    let next = h.send(call(2, "needs_task", caps_with_tasks())).await.json().await;
    assert!(next["result"]["taskId"].is_string(), "{next}");
}

#[actix_web::test]
async fn a_task_whose_tool_panics_reads_failed_not_working() {
    let h = harness().await;
    let created = h.send(call(1, "panicky_job", caps_with_tasks())).await.json().await;
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    let failed = until_status(&h, &task, "", "failed").await;
    // Caught at the call boundary: the one error table's internal error, as for a call.
    assert_eq!(
        failed["result"]["error"],
        json!({"code": -32603, "message": "Internal error"}),
        "{failed}"
    );
}

#[actix_web::test]
async fn a_caller_keeps_at_most_max_kept_tasks_ended_ones_included() {
    let mut c = mcp_runtime::config::RuntimeConfig::default();
    c.tasks.max_kept_per_caller = 2;
    let h = harness_with(c).await;
    for id in 1..=2 {
        let t = h.send(call(id, "needs_task", caps_with_tasks())).await.json().await;
        let task = t["result"]["taskId"].as_str().expect("a task").to_owned();
        until_status(&h, &task, "", "completed").await;
    }
    // Both ended, both kept until their TTL: a third is refused, whatever is running.
    let mut r = h.send(call(3, "needs_task", caps_with_tasks())).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // Room comes back when the oldest expires (tasks.ttl_secs, an hour; counted in buckets of
    // a 64th of it, so up to that much later): not in a second.
    let retry: u64 = r.header("retry-after").and_then(|v| v.parse().ok()).expect("a Retry-After");
    assert!((3000..=3600 + 3600 / 64 + 1).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.json().await["error"]["code"], -32007);
    // An optional tool runs as an ordinary call instead (its gate opened ahead).
    h.gate.open(1);
    let ordinary = h.send(call(4, "job", caps_with_tasks())).await.json().await;
    assert_eq!(ordinary["result"]["content"][0]["text"], "job done", "{ordinary}");
}

#[actix_web::test]
async fn a_task_whose_tool_cancels_itself_reads_failed_and_gives_its_place_back() {
    let mut c = mcp_runtime::config::RuntimeConfig::default();
    c.tasks.max_per_caller = 1;
    let h = harness_with(c).await;
    let created = h.send(call(1, "self_cancelling_job", caps_with_tasks())).await.json().await;
    let task =
        created["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    let failed = until_status(&h, &task, "", "failed").await;
    assert_eq!(
        failed["result"]["statusMessage"], "the task's tool stopped without a result",
        "{failed}"
    );
    // Its place is given back once its end is committed (bounded wait): the caller's one
    // task may run again.
    let mut next = Value::Null;
    for id in 2..200 {
        next = h.send(call(id, "needs_task", caps_with_tasks())).await.json().await;
        if next["result"]["taskId"].is_string() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(next["result"]["taskId"].is_string(), "{next}");
}
