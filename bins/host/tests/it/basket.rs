//! The basket pack (SEP-2567's example) on the real binary and its SQLite ledger: a basket
//! and its items survive a SIGKILL restart, a retried checkout orders once, the same basket
//! serves both eras, and an expired basket's error names it and the way back. Without
//! authentication `list_baskets` shows a legacy session only the baskets made in it and a
//! 2026-07-28 request none (a basket is then reached by its id alone).

use crate::common;

use common::*;
use mcp_devtools::TempDir;
use serde_json::{Value, json};

fn text(r: &Value) -> &str {
    r["content"][0]["text"].as_str().unwrap_or_default()
}

#[test]
fn a_basket_survives_a_sigkill_restart_and_a_retried_checkout_orders_once() {
    let dir = TempDir::new("basket-restart");
    let host = start_with(&dir, 0, &["--packs", "basket"]);
    let created = modern_call(&host.addr, 1, "create_basket", json!({"items": [{"sku": "shoes"}]}));
    let id = created["structuredContent"]["basket_id"].as_str().expect("a basket_id").to_owned();
    assert!(id.starts_with("bsk_"), "{created}");
    let added = modern_call(
        &host.addr,
        2,
        "add_item",
        json!({"basket_id": id, "sku": "socks", "quantity": 3}),
    );
    assert_eq!(added["structuredContent"]["item_count"], 4, "{added}");

    let host = host.kill_and_restart_with(&dir, &["--packs", "basket"]);
    let got = modern_call(&host.addr, 3, "get_basket", json!({"basket_id": id}));
    assert_eq!(
        got["structuredContent"]["items"],
        json!([{"sku": "shoes", "quantity": 1}, {"sku": "socks", "quantity": 3}]),
        "{got}"
    );
    // The same basket in a legacy session.
    let sid = initialize(&host.addr);
    let (status, legacy) = post_json(
        &host.addr,
        &sid,
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "get_basket", "arguments": {"basket_id": id}}}),
    );
    assert_eq!(
        (status, legacy["result"]["structuredContent"]["item_count"].clone()),
        (200, json!(4)),
        "{legacy}"
    );

    let keyed = |n: i64| {
        modern(&host.addr, n, "tools/call", json!({"name": "checkout", "arguments": {"basket_id": id}, "_meta": {"io.mcp-host/idempotencyKey": "checkout-1"}}))["result"].clone()
    };
    let first = keyed(5);
    let order = first["structuredContent"]["order_id"].as_str().expect("an order").to_owned();
    assert!(
        !order.contains(&id[id.len() - 8..]),
        "the order id carries no part of the handle: {order}"
    );
    let retried = keyed(6);
    assert_eq!(retried["structuredContent"]["order_id"], json!(order), "the same order");
    assert_eq!(
        retried["_meta"]["io.mcp-host/idempotency"], "replayed",
        "answered from its receipt: {retried}"
    );
    // Without a key (or with another one) the basket's own record answers: the same order.
    let unkeyed = modern_call(&host.addr, 61, "checkout", json!({"basket_id": id}));
    assert_eq!(unkeyed["structuredContent"]["order_id"], json!(order), "{unkeyed}");
    assert!(
        unkeyed["_meta"].get("io.mcp-host/idempotency").is_none(),
        "run, not replayed: {unkeyed}"
    );
    let host = host.kill_and_restart_with(&dir, &["--packs", "basket"]);
    let again = modern_call(&host.addr, 7, "checkout", json!({"basket_id": id}));
    assert_eq!(again["structuredContent"]["order_id"], json!(order), "after a restart too");
    let stats = modern_call(&host.addr, 8, "basket_stats", json!({}));
    assert_eq!(
        (
            stats["structuredContent"]["orders"].clone(),
            stats["structuredContent"]["double_checkouts"].clone()
        ),
        (json!(1), json!(0)),
        "{stats}"
    );
    let listed = modern_call(&host.addr, 9, "list_baskets", json!({}));
    assert_eq!(
        listed["structuredContent"]["baskets"],
        json!([]),
        "no authentication, no session: nothing listed: {listed}"
    );
    let added = modern_call(&host.addr, 10, "add_item", json!({"basket_id": id, "sku": "hat"}));
    assert_eq!(added["isError"], true, "a checked-out basket does not change: {added}");
}

#[test]
fn an_expired_basket_is_a_tool_error_that_names_it_and_says_how_to_recover() {
    let dir = TempDir::new("basket-expiry");
    let host = start_with(&dir, 0, &["--packs", "basket", "--basket-idle-ttl-secs", "1"]);
    let tools = modern(&host.addr, 1, "tools/list", json!({}));
    let create = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "create_basket")
        .unwrap()
        .clone();
    assert!(
        create["description"].as_str().unwrap().contains("expires after 1 second without use"),
        "the stated policy is the enforced one: {create}"
    );
    let id =
        modern_call(&host.addr, 2, "create_basket", json!({}))["structuredContent"]["basket_id"]
            .as_str()
            .unwrap()
            .to_owned();
    // Longer than its idle TTL: the ledger lets it go.
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let r = modern_call(&host.addr, 3, "add_item", json!({"basket_id": id, "sku": "shoes"}));
    assert_eq!(r["isError"], true, "a tool error, not a protocol one: {r}");
    assert!(text(&r).contains(&id) && text(&r).contains("Call create_basket"), "{r}");
    let unknown = modern_call(&host.addr, 4, "get_basket", json!({"basket_id": "not-a-basket"}));
    assert!(
        unknown["isError"] == true && text(&unknown).contains("Call create_basket"),
        "{unknown}"
    );
    // Any string is answered as an unknown basket, one that is not ASCII included.
    let odd = modern_call(&host.addr, 5, "checkout", json!({"basket_id": "€€€€€a"}));
    assert!(odd["isError"] == true && text(&odd).contains("Call create_basket"), "{odd}");
}

#[test]
fn a_refused_checkout_does_not_stand_in_for_a_later_one() {
    let dir = TempDir::new("basket-empty-checkout");
    let host = start_with(&dir, 0, &["--packs", "basket"]);
    let id =
        modern_call(&host.addr, 1, "create_basket", json!({}))["structuredContent"]["basket_id"]
            .as_str()
            .unwrap()
            .to_owned();
    let empty = modern_call(&host.addr, 2, "checkout", json!({"basket_id": id}));
    assert!(empty["isError"] == true && text(&empty).contains("empty"), "{empty}");
    modern_call(&host.addr, 3, "add_item", json!({"basket_id": id, "sku": "shoes"}));
    let ordered = modern_call(&host.addr, 4, "checkout", json!({"basket_id": id}));
    assert!(
        ordered["structuredContent"]["order_id"].is_string(),
        "ordered once it has an item: {ordered}"
    );
}

#[test]
fn without_authentication_list_baskets_shows_a_session_its_own_and_a_stateless_request_none() {
    let dir = TempDir::new("basket-anonymous");
    let host = start_with(&dir, 0, &["--packs", "basket"]);
    // Two local clients: one address, two sessions.
    let (a, b) = (initialize(&host.addr), initialize(&host.addr));
    let create = |sid: &str, id: i64, sku: &str| {
        call_in(&host.addr, sid, id, "create_basket", json!({"items": [{"sku": sku}]}))["structuredContent"]["basket_id"].as_str().unwrap().to_owned()
    };
    let (a1, a2, b1) = (create(&a, 1, "shoes"), create(&a, 2, "hat"), create(&b, 3, "socks"));
    let mut of_a = vec![a1.clone(), a2];
    of_a.sort();
    assert_eq!(
        listed_basket_ids(&call_in(&host.addr, &a, 4, "list_baskets", json!({}))),
        of_a,
        "a's own only"
    );
    assert_eq!(
        listed_basket_ids(&call_in(&host.addr, &b, 5, "list_baskets", json!({}))),
        vec![b1.clone()],
        "b's own only"
    );
    // A basket_id is the authority: b uses a's basket, and a stateless request uses b's.
    let added = call_in(&host.addr, &b, 6, "add_item", json!({"basket_id": a1, "sku": "laces"}));
    assert_eq!(added["structuredContent"]["item_count"], 2, "{added}");
    let got = modern_call(&host.addr, 7, "get_basket", json!({"basket_id": b1}));
    assert_eq!(
        got["structuredContent"]["items"],
        json!([{"sku": "socks", "quantity": 1}]),
        "{got}"
    );

    let listed = modern_call(&host.addr, 8, "list_baskets", json!({}));
    assert_eq!(
        (listed["structuredContent"]["baskets"].clone(), listed["isError"].clone()),
        (json!([]), Value::Null),
        "an empty list, not an error: {listed}"
    );
    let text = text(&listed);
    assert!(
        text.starts_with("Listing baskets needs an authenticated caller")
            && text.contains("Call create_basket"),
        "{text}"
    );
    let tools = modern(&host.addr, 9, "tools/list", json!({}));
    let list = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "list_baskets")
        .unwrap()
        .clone();
    assert!(
        list["description"].as_str().unwrap().contains(
            "Without authentication it lists only the baskets created in the same session"
        ),
        "{list}"
    );
}
