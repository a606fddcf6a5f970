//! The gate's `handles` phase: virtual clients (both eras) keep baskets of the `basket` pack
//! over many calls — SEP-2567 state handles that outlive streams, sessions and restarts — and
//! run short tasks, through cut streams and kills of the host.
//!
//! Each basket: `create_basket`, [`ITEMS`] `add_item`s of distinct SKUs, each with an
//! idempotency key of its own (a re-issue after a cut or a kill is answered from its receipt,
//! never added twice), `get_basket` (every SKU the client was told was added must be there,
//! once: a missing one is a lost item, a quantity above one an item applied twice; one whose
//! outcome a kill left unknown may be there once or not at all), then `checkout` twice (the
//! second a deliberate retry under another idempotency key: the same order, from the basket's
//! own record), `destroy_basket`, and for a 2026-07-28 client
//! a task (`slow_compute` for a few ms) fetched to its result.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use mcp_runtime::client_http::{ClientError, Era, McpClient, TaskCall};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::gate::{GateSpec, OUTCOME_UNKNOWN, Phase, connect, end_session};

/// Items per basket.
const ITEMS: usize = 5;
/// Baskets per session before a client ends it and opens another.
const BASKETS_PER_SESSION: u64 = 5;

/// One tool call with an idempotency key: `Ok` with the result, or `Err` when the call was
/// lost (noted in the phase).
async fn call(client: &McpClient, phase: &RefCell<Phase>, tool: &str, args: Value, key: &str) -> Result<Value, ()> {
    let params = json!({"name": tool, "arguments": args, "_meta": {"io.mcp-host/idempotencyKey": key}});
    let t0 = Instant::now();
    match client.request("tools/call", Some(params), true).await {
        Ok(v) => {
            let mut p = phase.borrow_mut();
            p.calls_ok += 1;
            let _ = p.latency_us.record(t0.elapsed().as_micros().max(1) as u64);
            Ok(v)
        }
        Err(e) => {
            let mut p = phase.borrow_mut();
            p.lost += 1;
            p.note_error(format!("{tool} {key}: {e}"));
            Err(())
        }
    }
}

fn text(v: &Value) -> &str {
    v["content"][0]["text"].as_str().unwrap_or_default()
}

/// Whether a result is the receipts' "outcome unknown" (a kill came between the call's start
/// and its recorded outcome).
fn unknown(v: &Value) -> bool {
    v["isError"] == true && text(v).contains(OUTCOME_UNKNOWN)
}

/// One basket's life; `tag` is unique in the run.
async fn basket(client: &McpClient, phase: &RefCell<Phase>, tag: &str, era: Era) {
    let Ok(created) = call(client, phase, "create_basket", json!({}), &format!("{tag}-create")).await else { return };
    if unknown(&created) {
        // Which basket it made, if any, cannot be known: its handle was never returned.
        phase.borrow_mut().outcome_unknown += 1;
        return;
    }
    let Some(id) = created["structuredContent"]["basket_id"].as_str().map(str::to_owned) else {
        phase.borrow_mut().note_error(format!("create_basket {tag}: {created}"));
        phase.borrow_mut().lost += 1;
        return;
    };
    let (mut told, mut maybe) = (Vec::new(), Vec::new());
    for i in 0..ITEMS {
        let sku = format!("{tag}-sku{i}");
        let Ok(r) = call(client, phase, "add_item", json!({"basket_id": id, "sku": sku}), &format!("{tag}-add{i}")).await else { continue };
        if unknown(&r) {
            phase.borrow_mut().outcome_unknown += 1;
            maybe.push(sku);
        } else if r["isError"] == true {
            let mut p = phase.borrow_mut();
            p.lost += 1;
            p.note_error(format!("add_item {sku}: {}", text(&r)));
        } else {
            told.push(sku);
        }
    }
    let Ok(got) = call(client, phase, "get_basket", json!({"basket_id": id}), &format!("{tag}-get")).await else { return };
    let quantity = |sku: &str| got["structuredContent"]["items"].as_array().into_iter().flatten().filter(|l| l["sku"] == sku).map(|l| l["quantity"].as_u64().unwrap_or(0)).sum::<u64>();
    {
        let mut p = phase.borrow_mut();
        p.baskets += 1;
        for sku in &told {
            match quantity(sku) {
                0 => {
                    p.items_lost += 1;
                    p.note_error(format!("basket {id}: {sku} was added and is missing"));
                }
                1 => {}
                _ => p.items_doubled += 1,
            }
        }
        p.items_doubled += maybe.iter().filter(|s| quantity(s) > 1).count() as u64;
    }
    // Checkout (its re-issues after a fault answered from its receipt), and a deliberate retry
    // under another key, which only the basket's own record can answer: one order.
    let first = call(client, phase, "checkout", json!({"basket_id": id}), &format!("{tag}-checkout")).await;
    let again = call(client, phase, "checkout", json!({"basket_id": id}), &format!("{tag}-checkout-again")).await;
    if let (Ok(a), Ok(b)) = (first, again) {
        let mut p = phase.borrow_mut();
        let (oa, ob) = (&a["structuredContent"]["order_id"], &b["structuredContent"]["order_id"]);
        if oa.is_string() && oa == ob {
            p.checkouts += 1;
        } else if unknown(&a) || unknown(&b) {
            p.outcome_unknown += 1;
        } else {
            p.order_mismatches += 1;
            p.note_error(format!("checkout {id}: {a} then {b}"));
        }
    }
    // Done with it: its place among the caller's baskets is free again.
    if let Ok(r) = call(client, phase, "destroy_basket", json!({"basket_id": id}), &format!("{tag}-destroy")).await
        && r["isError"] == true
        && !unknown(&r)
    {
        let mut p = phase.borrow_mut();
        p.lost += 1;
        p.note_error(format!("destroy_basket {id}: {}", text(&r)));
    }
    if era == Era::Modern {
        task(client, phase, tag).await;
    }
}

/// A short task, to its result.
async fn task(client: &McpClient, phase: &RefCell<Phase>, tag: &str) {
    let r = match client.call_tool_as_task("slow_compute", json!({"millis": 20, "label": tag}), true).await {
        Ok(TaskCall::Task { task_id, .. }) => client.task_result(&task_id, Duration::from_secs(30)).await,
        Ok(TaskCall::Done(v)) => Ok(v),
        Err(e) => Err(e),
    };
    let mut p = phase.borrow_mut();
    match r {
        Ok(v) if text(&v).starts_with(tag) => p.tasks_done += 1,
        // A kill (or the drain of a graceful stop) interrupted it: its outcome is unknown.
        Err(ClientError::Rpc(e)) if e.message.contains("restarted") || e.message.contains("interrupted") => p.tasks_interrupted += 1,
        other => {
            p.lost += 1;
            p.note_error(format!("task {tag}: {other:?}"));
        }
    }
}

/// One virtual client of the `handles` phase.
pub(crate) async fn basket_client(spec: Rc<GateSpec>, url: Rc<str>, n: usize, phase_no: usize, phase: Rc<RefCell<Phase>>, live_events: Rc<Cell<u64>>, deadline: Instant) {
    let era = phase.borrow().eras.of(n);
    let done = |events: &Cell<u64>| (events.get() >= spec.events_per_phase && !phase.borrow().owes_faults()) || Instant::now() >= deadline;
    let mut k = 0u64;
    while !done(&live_events) {
        let Some(client) = connect(&spec, &url, &phase, era).await else { return };
        let mut seen_events = 0;
        for _ in 0..BASKETS_PER_SESSION {
            if done(&live_events) {
                break;
            }
            k += 1;
            basket(&client, &phase, &format!("g{}-p{phase_no}-c{n}-{k}", spec.seed), era).await;
            let events = client.stats().events();
            live_events.set(live_events.get() + events - seen_events);
            seen_events = events;
        }
        end_session(client, &phase).await;
    }
}
