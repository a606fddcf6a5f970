//! The gate's `handles` phase: virtual clients (both eras) keep baskets of the `basket` pack
//! over many calls — SEP-2567 state handles that outlive streams, sessions and restarts — and
//! run short tasks, through cut streams and kills of the host.
//!
//! Each basket: `create_basket` with its first SKU (after a kill left the create's outcome
//! unknown, `list_baskets` finds the basket by that SKU, if it was made), the other of
//! [`ITEMS`] SKUs by `add_item`, each with an idempotency key of its own (a re-issue after a
//! cut or a kill is answered from its receipt, never added twice), `get_basket` (every SKU the client was told was added must be there,
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

use crate::gate::client::{connect, end_session};
use crate::gate::spec::GateSpec;
use crate::gate::spec::OUTCOME_UNKNOWN;
use crate::gate::tally::Phase;

/// Items per basket.
const ITEMS: usize = 5;
/// Baskets per session before a client ends it and opens another.
const BASKETS_PER_SESSION: u64 = 5;

/// Baskets the phase's clients (one principal) hold at once, at most: the `basket` pack lets
/// a caller hold 100, and a basket a kill left behind counts until it is found and destroyed.
/// (With 128 clients, slower calls — several nodes, one ledger — made the clients hold more
/// than 100 at times: refusals the gate would count as lost.)
const MOST_HELD: usize = 64;

thread_local! {
    /// The places among [`MOST_HELD`] (the gate's clients run on one thread).
    static HELD: Rc<tokio::sync::Semaphore> = Rc::new(tokio::sync::Semaphore::new(MOST_HELD));
}

/// One tool call with an idempotency key: `Ok` with the result, or `Err` when the call was
/// lost (noted in the phase).
async fn call(
    client: &McpClient,
    phase: &RefCell<Phase>,
    tool: &str,
    args: Value,
    key: &str,
) -> Result<Value, ()> {
    let params =
        json!({"name": tool, "arguments": args, "_meta": {"io.mcp-host/idempotencyKey": key}});
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

/// Create a basket holding `first` (a SKU unique to it): its handle. After a kill left the
/// create's outcome unknown, the caller's baskets are listed and the one holding `first`, if
/// any, is the one it made: so no basket is left behind unknown (the caller's bound is 100).
async fn create(
    client: &McpClient,
    phase: &RefCell<Phase>,
    tag: &str,
    first: &str,
) -> Option<String> {
    let created = call(
        client,
        phase,
        "create_basket",
        json!({"items": [{"sku": first}]}),
        &format!("{tag}-create"),
    )
    .await
    .ok()?;
    if unknown(&created) {
        phase.borrow_mut().outcome_unknown += 1;
        let listed =
            call(client, phase, "list_baskets", json!({}), &format!("{tag}-list")).await.ok()?;
        let Some(baskets) =
            listed["structuredContent"]["baskets"].as_array().filter(|_| listed["isError"] != true)
        else {
            let mut p = phase.borrow_mut();
            p.lost += 1;
            p.note_error(format!("list_baskets {tag}: {listed}"));
            return None;
        };
        let holds_first =
            |b: &&Value| b["items"].as_array().into_iter().flatten().any(|l| l["sku"] == first);
        let made: Vec<&Value> = baskets.iter().filter(holds_first).collect();
        if made.len() > 1 {
            // The create ran twice: the idempotency it was sent with failed.
            let mut p = phase.borrow_mut();
            p.items_doubled += 1;
            p.note_error(format!("create_basket {tag} made {} baskets", made.len()));
        }
        return made.first().and_then(|b| b["basket_id"].as_str()).map(str::to_owned);
    }
    let id = created["structuredContent"]["basket_id"].as_str().map(str::to_owned);
    if id.is_none() {
        let mut p = phase.borrow_mut();
        p.note_error(format!("create_basket {tag}: {created}"));
        p.lost += 1;
    }
    id
}

/// One basket's life; `tag` is unique in the run. Once created, it is destroyed whatever
/// happens in between.
async fn basket(client: &McpClient, phase: &RefCell<Phase>, tag: &str, era: Era) {
    let held = HELD.with(Rc::clone);
    // Never closed, so a place always comes.
    let Ok(place) = held.acquire().await else { return };
    let first = format!("{tag}-sku0");
    let Some(id) = create(client, phase, tag, &first).await else { return };
    fill_and_check_out(client, phase, tag, &id, first).await;
    // Done with it: its place among the caller's baskets is free again. A destroy a kill left
    // unknown is made again under another key (a basket already gone is "not found").
    for key in ["destroy", "destroy-again"] {
        let Ok(r) = call(
            client,
            phase,
            "destroy_basket",
            json!({"basket_id": id}),
            &format!("{tag}-{key}"),
        )
        .await
        else {
            break;
        };
        if unknown(&r) {
            phase.borrow_mut().outcome_unknown += 1;
            continue;
        }
        if r["isError"] == true && !(key == "destroy-again" && text(&r).contains("was not found")) {
            let mut p = phase.borrow_mut();
            p.lost += 1;
            p.note_error(format!("destroy_basket {id}: {}", text(&r)));
        }
        break;
    }
    drop(place);
    if era == Era::Modern {
        task(client, phase, tag).await;
    }
}

/// Add the basket's other items, check every item the client was told was added, check out.
async fn fill_and_check_out(
    client: &McpClient,
    phase: &RefCell<Phase>,
    tag: &str,
    id: &str,
    first: String,
) {
    let (mut told, mut maybe) = (vec![first], Vec::new());
    for i in 1..ITEMS {
        let sku = format!("{tag}-sku{i}");
        let Ok(r) = call(
            client,
            phase,
            "add_item",
            json!({"basket_id": id, "sku": sku}),
            &format!("{tag}-add{i}"),
        )
        .await
        else {
            continue;
        };
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
    let Ok(got) =
        call(client, phase, "get_basket", json!({"basket_id": id}), &format!("{tag}-get")).await
    else {
        return;
    };
    let quantity = |sku: &str| {
        got["structuredContent"]["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["sku"] == sku)
            .map(|l| l["quantity"].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
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
    let first =
        call(client, phase, "checkout", json!({"basket_id": id}), &format!("{tag}-checkout")).await;
    let again =
        call(client, phase, "checkout", json!({"basket_id": id}), &format!("{tag}-checkout-again"))
            .await;
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
}

/// A short task, to its result.
async fn task(client: &McpClient, phase: &RefCell<Phase>, tag: &str) {
    let r = match client
        .call_tool_as_task("slow_compute", json!({"millis": 20, "label": tag}), true)
        .await
    {
        Ok(TaskCall::Task { task_id, .. }) => {
            client.task_result(&task_id, Duration::from_secs(30)).await
        }
        Ok(TaskCall::Done(v)) => Ok(v),
        Err(e) => Err(e),
    };
    let mut p = phase.borrow_mut();
    match r {
        Ok(v) if text(&v).starts_with(tag) => p.tasks_done += 1,
        // A kill (or the drain of a graceful stop) interrupted it: its outcome is unknown.
        Err(ClientError::Rpc(e))
            if e.message.contains("restarted") || e.message.contains("interrupted") =>
        {
            p.tasks_interrupted += 1
        }
        other => {
            p.lost += 1;
            p.note_error(format!("task {tag}: {other:?}"));
        }
    }
}

/// One virtual client of the `handles` phase.
pub(crate) async fn basket_client(
    spec: Rc<GateSpec>,
    url: Rc<str>,
    n: usize,
    phase_no: usize,
    phase: Rc<RefCell<Phase>>,
    live_events: Rc<Cell<u64>>,
    deadline: Instant,
) {
    let era = phase.borrow().eras.of(n);
    let done = |events: &Cell<u64>| {
        (events.get() >= spec.events_per_phase && !phase.borrow().owes_faults())
            || Instant::now() >= deadline
    };
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
