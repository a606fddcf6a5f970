//! A key rotation as docs/durability.md's procedure does it (the key file moved aside and listed in
//! `ledger.previous_key_files`, a new one created at start) keeps what was made under the
//! previous key: state handles (found, listed with the same ids, usable, moved to the new key
//! by their next use), tasks (found and read), and `requestState` values (still accepted).
//! The 2026-07-28 requests authenticate (as alice): without authentication a 2026-07-28 list
//! shows nothing, and that test lists. A legacy session's list, without authentication,
//! shows what the session made under any of its names.

use crate::common;

use std::time::Duration;

use common::*;
use mcp_devtools::TempDir;
use serde_json::{Value, json};

const TOKEN: &str = "rotation-token-of-alice";

/// The bearer token's config (with `more` after it).
fn auth_config(dir: &TempDir, name: &str, more: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, format!("{more}[security.bearer_tokens]\n{TOKEN:?} = \"alice\"\n"))
        .unwrap();
    path.display().to_string()
}

fn modern(addr: &str, id: i64, method: &str, params: Value) -> Value {
    common::modern_as(addr, Some(TOKEN), id, method, params)
}

fn modern_call(addr: &str, id: i64, tool: &str, args: Value) -> Value {
    common::modern_call_as(addr, Some(TOKEN), id, tool, args)
}

fn basket_ids(addr: &str, id: i64) -> Vec<String> {
    listed_basket_ids(&modern_call(addr, id, "list_baskets", json!({})))
}

fn with_tasks(mut params: Value) -> Value {
    params["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    params
}

/// `test_input_required_result_multi_round` with `answers` and `state` (a client that can
/// elicit).
fn multi_round(addr: &str, id: i64, answers: Value, state: Option<&str>) -> Value {
    let mut params = json!({"name": "test_input_required_result_multi_round", "arguments": {}, "inputResponses": answers, "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    if let Some(s) = state {
        params["requestState"] = json!(s);
    }
    modern(addr, id, "tools/call", params)
}

#[test]
fn after_a_key_rotation_baskets_tasks_and_request_states_of_the_previous_key_are_found_and_usable()
{
    let dir = TempDir::new("rotate-state");
    let auth = auth_config(&dir, "auth.toml", "");
    let mut host = start_with(&dir, 0, &["--packs", "basket", "--config", &auth]);
    let create = |n: i64, sku: &str| {
        modern_call(&host.addr, n, "create_basket", json!({"items": [{"sku": sku}]}))["structuredContent"]["basket_id"].as_str().unwrap().to_owned()
    };
    let (a, b, c) = (create(1, "shoes"), create(2, "hat"), create(3, "socks"));
    let order = modern_call(&host.addr, 4, "checkout", json!({"basket_id": c}))["structuredContent"]["order_id"].as_str().unwrap().to_owned();
    let before = basket_ids(&host.addr, 5);
    assert_eq!(before.len(), 3);
    let task = modern(
        &host.addr,
        6,
        "tools/call",
        with_tasks(json!({"name": "slow_compute", "arguments": {"millis": 10, "label": "before"}})),
    );
    let task = task["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{task}")).to_owned();
    let get_task = |addr: &str| modern(addr, 7, "tasks/get", with_tasks(json!({"taskId": task})));
    let mut done = Value::Null;
    for _ in 0..200 {
        done = get_task(&host.addr);
        if done["result"]["status"] == "completed" {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(done["result"]["status"], "completed", "{done}");
    // A two-round request, its first answer sealed in the requestState of its second round.
    let first = multi_round(&host.addr, 8, json!({}), None);
    let step1 = json!({"step1": {"action": "accept", "content": {"name": "Alice"}}});
    let second = multi_round(&host.addr, 9, step1, first["result"]["requestState"].as_str());
    let state =
        second["result"]["requestState"].as_str().unwrap_or_else(|| panic!("{second}")).to_owned();
    let port = host.port();
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));

    // The documented procedure (docs/durability.md): move the key file aside, list it, restart.
    let old_key = dir.path().join("mcp-host.db.key.old");
    std::fs::rename(dir.path().join("mcp-host.db.key"), &old_key).unwrap();
    let cfg = auth_config(
        &dir,
        "rotate.toml",
        &format!("[ledger]\nprevious_key_files = [{:?}]\n", old_key.display().to_string()),
    );
    let mut host = start_with(&dir, port, &["--packs", "basket", "--config", &cfg]);
    assert!(dir.path().join("mcp-host.db.key").exists(), "a new key");
    assert_eq!(basket_ids(&host.addr, 10), before, "the same baskets, the same ids");
    let got = modern_call(&host.addr, 11, "get_basket", json!({"basket_id": a}));
    assert_eq!(
        got["structuredContent"]["items"],
        json!([{"sku": "shoes", "quantity": 1}]),
        "{got}"
    );
    let added = modern_call(&host.addr, 12, "add_item", json!({"basket_id": b, "sku": "scarf"}));
    assert_eq!(added["structuredContent"]["item_count"], 2, "{added}");
    let ordered = modern_call(&host.addr, 13, "checkout", json!({"basket_id": a}));
    assert!(ordered["structuredContent"]["order_id"].is_string(), "{ordered}");
    let again = modern_call(&host.addr, 14, "checkout", json!({"basket_id": c}));
    assert_eq!(
        again["structuredContent"]["order_id"],
        json!(order),
        "checked out before the rotation: the same order"
    );
    assert_eq!(basket_ids(&host.addr, 15), before, "moved, not copied");
    let after = get_task(&host.addr);
    assert_eq!(
        (after["result"]["status"].clone(), after["result"]["result"].clone()),
        (json!("completed"), done["result"]["result"].clone()),
        "{after}"
    );
    let step2 = json!({"step2": {"action": "accept", "content": {"color": "blue"}}});
    let finished = multi_round(&host.addr, 16, step2, Some(&state));
    assert_eq!(finished["result"]["content"][0]["text"], "Alice likes blue", "{finished}");
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));

    // Every basket was used since: moved, so the previous key is no longer needed for them.
    let host = start_with(&dir, port, &["--packs", "basket", "--config", &auth]);
    assert_eq!(basket_ids(&host.addr, 17), before);
    let got = modern_call(&host.addr, 18, "get_basket", json!({"basket_id": b}));
    assert_eq!(got["structuredContent"]["item_count"], 2, "{got}");
}

/// A legacy session made before a key rotation is named under both keys once revived; it
/// keeps both while it hibernates (a sleeping session keeps only its names under previous
/// keys beside its current one) and, woken, still lists the baskets it made before the
/// rotation.
#[test]
fn a_session_from_before_a_key_rotation_still_lists_its_baskets_after_it_hibernated_and_woke() {
    let dir = TempDir::new("rotate-sleep");
    let sleepy = "[sessions]\nhibernate_after_ms = 200\n";
    let cfg = dir.path().join("sleepy.toml");
    std::fs::write(&cfg, sleepy).unwrap();
    let cfg = cfg.display().to_string();
    let mut host = start_with(&dir, 0, &["--packs", "basket", "--config", &cfg]);
    let sid = initialize(&host.addr);
    let made = call_in(&host.addr, &sid, 1, "create_basket", json!({"items": [{"sku": "shoes"}]}));
    let basket = made["structuredContent"]["basket_id"].as_str().unwrap().to_owned();
    let port = host.port();
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));

    let old_key = dir.path().join("mcp-host.db.key.old");
    std::fs::rename(dir.path().join("mcp-host.db.key"), &old_key).unwrap();
    let rotated = dir.path().join("rotated.toml");
    let previous =
        format!("[ledger]\nprevious_key_files = [{:?}]\n", old_key.display().to_string());
    std::fs::write(&rotated, format!("{previous}{sleepy}")).unwrap();
    let rotated = rotated.display().to_string();
    let mut host = start_with(&dir, port, &["--packs", "basket", "--config", &rotated]);
    let listed = call_in(&host.addr, &sid, 2, "list_baskets", json!({}));
    assert_eq!(
        listed_basket_ids(&listed),
        vec![basket.clone()],
        "revived under the new key, named under both"
    );
    wait_until("the revived session hibernates", Duration::from_secs(10), || {
        host.metric(&dir, "mcp_sessions_hibernating") == 1.0
    });
    let woken = host.metric(&dir, "mcp_sessions_woken_total");
    let listed = call_in(&host.addr, &sid, 3, "list_baskets", json!({}));
    assert_eq!(
        listed_basket_ids(&listed),
        vec![basket],
        "woken with its name under the previous key"
    );
    assert_eq!(host.metric(&dir, "mcp_sessions_woken_total"), woken + 1.0, "it was woken");
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));
}
