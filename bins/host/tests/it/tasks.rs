//! Tasks (the 2026-07-28 extension) on the real binary and its SQLite ledger: a finished
//! task's result outlives a SIGKILL restart, and a task the kill interrupted reads as failed
//! ("interrupted") afterwards, never as running forever; one a graceful stop interrupts says
//! so, recorded by the stop itself.

use crate::common;

use common::*;
use mcp_devtools::TempDir;
use serde_json::{Value, json};

fn with_tasks(mut params: Value) -> Value {
    params["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    params
}

fn get(addr: &str, task: &str) -> Value {
    modern(addr, 90, "tasks/get", with_tasks(json!({"taskId": task})))
}

#[test]
fn a_task_survives_a_sigkill_restart_and_one_it_interrupted_reads_as_failed() {
    let dir = TempDir::new("tasks-restart");
    let host = start(&dir, 0);
    let quick = modern(
        &host.addr,
        1,
        "tools/call",
        with_tasks(json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "before"}})),
    );
    let quick = quick["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{quick}")).to_owned();
    let long = modern(
        &host.addr,
        2,
        "tools/call",
        with_tasks(
            json!({"name": "slow_compute", "arguments": {"seconds": 600, "label": "killed"}}),
        ),
    );
    let long = long["result"]["taskId"].as_str().unwrap().to_owned();
    // Bounded wait for the quick one to finish.
    let mut done = Value::Null;
    for _ in 0..100 {
        done = get(&host.addr, &quick);
        if done["result"]["status"] == "completed" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(done["result"]["status"], "completed", "{done}");

    let host = host.kill_and_restart(&dir);
    let after = get(&host.addr, &quick);
    assert_eq!(after["result"]["status"], "completed", "{after}");
    assert_eq!(after["result"]["result"]["content"][0]["text"], "before: computed in 1 s");
    let interrupted = get(&host.addr, &long);
    assert_eq!(interrupted["result"]["status"], "failed", "{interrupted}");
    assert!(
        interrupted["result"]["statusMessage"].as_str().unwrap().contains("interrupted"),
        "{interrupted}"
    );
    assert!(interrupted["result"]["error"]["code"].is_i64());
}

#[test]
fn a_task_a_graceful_stop_interrupts_records_that_the_server_stopped() {
    let dir = TempDir::new("tasks-sigterm");
    let config = dir.path().join("host.toml");
    std::fs::write(&config, "[shutdown]\ngrace_secs = 1\n").unwrap();
    let cfg = config.display().to_string();
    let mut host = start_with(&dir, 0, &["--config", &cfg]);
    let long = modern(
        &host.addr,
        1,
        "tools/call",
        with_tasks(
            json!({"name": "slow_compute", "arguments": {"seconds": 600, "label": "stopped"}}),
        ),
    );
    let long = long["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{long}")).to_owned();
    assert_eq!(get(&host.addr, &long)["result"]["status"], "working");
    // The grace period (1 s) ends with the task running: the stop records its interruption
    // before the process exits.
    let port = host.port();
    let exit = host.process.terminate(std::time::Duration::from_secs(15));
    assert!(exit.is_some_and(|s| s.success()), "a graceful stop: {exit:?}");
    let host = start_with(&dir, port, &["--config", &cfg]);
    let stopped = get(&host.addr, &long);
    assert_eq!(stopped["result"]["status"], "failed", "{stopped}");
    assert!(
        stopped["result"]["statusMessage"].as_str().unwrap().contains("the server stopped"),
        "recorded by the stop itself, not inferred after a restart: {stopped}"
    );
}
