//! The `basket` pack: SEP-2567's own example of explicit state handles, done properly, with
//! the SEP's names. Every tool is listed unconditionally and takes the handle as an argument;
//! baskets live in the runtime's handle store (the ledger), bound to their caller, so they
//! survive restarts and are served the same way in both eras.
//!
//! - `create_basket {items?}` → `structuredContent.basket_id` (`bsk_…`); create-time items, as
//!   the SEP advises. Its description states the expiry, from the same setting the store uses.
//! - `add_item {basket_id, sku, quantity?}`: atomic per basket (two concurrent adds never lose
//!   an item).
//! - `get_basket {basket_id}`, `list_baskets` (the caller's own: with authentication all of
//!   them; without, only those created in the same legacy session, and in the 2026-07-28 era
//!   none, with a text saying listing needs an authenticated caller), `destroy_basket
//!   {basket_id}`.
//! - `checkout {basket_id}`: one order per basket. The order is recorded in the basket by the
//!   same atomic update that checks it has none, so a retried checkout (with or without an
//!   idempotency key; with one it is answered from its receipt) returns the same order and
//!   never orders twice. The order id is derived from the basket's tag (never from the
//!   handle). Orders are journaled (`<ledger.path>.orders` beside a SQLite ledger, by the
//!   basket's tag), so `basket_stats` can count any basket ordered twice, which `mcp-load`'s
//!   handles phase requires to be zero.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use mcp_runtime::proto::handle::HandleKind;
use mcp_runtime::tools::{
    CallToolResult, CatalogBuilder, ToolAnnotations, ToolError, ToolSpec, tool_fn,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Most distinct SKUs in one basket, and the largest quantity of one.
const MAX_LINES: usize = 100;
const MAX_QUANTITY: u64 = 10_000;
/// Baskets whose orders `basket_stats` remembers (to count one ordered twice), the latest.
const TRACKED_BASKETS: usize = 100_000;

/// What a basket holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Basket {
    /// SKU → quantity, in the order first added.
    items: Vec<Line>,
    /// Set once, by the one checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    order_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Line {
    sku: String,
    quantity: u64,
}

impl Basket {
    fn add(&mut self, sku: &str, quantity: u64) -> Result<(), String> {
        if self.order_id.is_some() {
            return Err("the basket is checked out: it cannot change any more (create a new basket for another order)".into());
        }
        let lines = self.items.len();
        match self.items.iter_mut().find(|l| l.sku == sku) {
            Some(l) => l.quantity = (l.quantity + quantity).min(MAX_QUANTITY),
            None if lines >= MAX_LINES => {
                return Err(format!("a basket holds at most {MAX_LINES} different SKUs"));
            }
            None => self.items.push(Line { sku: sku.to_owned(), quantity }),
        }
        Ok(())
    }

    fn count(&self) -> u64 {
        self.items.iter().map(|l| l.quantity).sum()
    }
}

/// Orders placed, journaled; `double` counts baskets ordered a second time (never, unless the
/// handle store's atomic updates failed), among the latest [`TRACKED_BASKETS`] ordered.
#[derive(Default)]
struct OrderBook {
    /// Orders per basket tag, and the tags oldest first (the bound).
    by_basket: HashMap<String, u64>,
    tracked: VecDeque<String>,
    orders: u64,
    double: u64,
    journal: Option<super::journal::JsonlJournal>,
}

impl OrderBook {
    fn open(path: Option<&Path>) -> std::io::Result<OrderBook> {
        let mut b = OrderBook::default();
        if let Some(p) = path {
            let j = super::journal::JsonlJournal::open(p, |v| {
                b.count(v["b"].as_str().unwrap_or_default())
            })?;
            b.journal = Some(j);
        }
        Ok(b)
    }

    fn count(&mut self, basket: &str) {
        self.orders += 1;
        let n = self.by_basket.entry(basket.to_owned()).or_insert(0);
        *n += 1;
        if *n > 1 {
            self.double += 1;
        } else {
            self.tracked.push_back(basket.to_owned());
            if self.tracked.len() > TRACKED_BASKETS
                && let Some(old) = self.tracked.pop_front()
            {
                self.by_basket.remove(&old);
            }
        }
    }

    fn place(&mut self, basket: &str, order: &str) -> std::io::Result<()> {
        if let Some(j) = &mut self.journal {
            j.append(&json!({"b": basket, "o": order}))?;
        }
        self.count(basket);
        Ok(())
    }
}

fn basket_id_schema() -> Value {
    json!({"type": "string", "description": "The basket's handle, as create_basket returned it (bsk_…)"})
}

fn basket_output() -> Value {
    json!({"type": "object", "properties": {
        "basket_id": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}}, "required": ["sku", "quantity"]}},
        "item_count": {"type": "integer"},
        "order_id": {"type": "string"}
    }, "required": ["basket_id", "items", "item_count"]})
}

fn view(id: &str, b: &Basket) -> CallToolResult {
    let mut s = json!({"basket_id": id, "items": b.items, "item_count": b.count()});
    if let Some(o) = &b.order_id {
        s["order_id"] = json!(o);
    }
    CallToolResult::structured(s)
}

fn arg<'a>(args: &'a Value, key: &str) -> &'a str {
    // The input schema makes these required strings; the runtime checked it.
    args[key].as_str().unwrap_or_default()
}

fn spec(
    name: &str,
    description: &str,
    input: Value,
    output: Option<Value>,
    read_only: bool,
) -> ToolSpec {
    let mut s = ToolSpec::new(name, description, input).annotations(ToolAnnotations {
        read_only_hint: Some(read_only),
        idempotent_hint: Some(read_only),
        destructive_hint: Some(false),
        open_world_hint: Some(false),
        ..Default::default()
    });
    s.output_schema = output;
    // Its writes are basket changes: while the ledger cannot commit, the call is refused
    // (503) before it runs rather than failing halfway.
    if read_only { s } else { s.keeps_state() }
}

/// Baskets: `bsk_…`, unused for `idle_ttl_secs` they expire; at most 64 KiB and 100 per
/// caller.
pub(crate) fn kind(idle_ttl_secs: u64) -> HandleKind {
    HandleKind::new("bsk", "basket", "create_basket", idle_ttl_secs, 64 * 1024, 100)
}

/// The pack, with baskets of `kind` (its TTL and bounds) and the order journal at `orders`.
pub(crate) fn pack(kind: HandleKind, orders: Option<&Path>) -> Result<CatalogBuilder, String> {
    let book = Arc::new(Mutex::new(
        OrderBook::open(orders).map_err(|e| format!("basket pack journal: {e}"))?,
    ));
    let kind = Arc::new(kind);
    let items_schema = json!({"type": "array", "maxItems": MAX_LINES, "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1, "maximum": MAX_QUANTITY}}, "required": ["sku"]}});
    let create = spec(
        "create_basket",
        &format!(
            "Creates a shopping basket, optionally with its first items, and returns its basket_id (bsk_…), which every other basket tool takes. {} A caller holds at most {} baskets.",
            kind.expiry_sentence(),
            kind.max_per_caller
        ),
        json!({"type": "object", "properties": {"items": items_schema}}),
        Some(basket_output()),
        false,
    );
    let add = spec(
        "add_item",
        "Adds a quantity (default 1) of a SKU to a basket; adding a SKU it holds raises its quantity.",
        json!({"type": "object", "properties": {"basket_id": basket_id_schema(), "sku": {"type": "string", "minLength": 1}, "quantity": {"type": "integer", "minimum": 1, "maximum": MAX_QUANTITY}}, "required": ["basket_id", "sku"]}),
        Some(basket_output()),
        false,
    );
    let get = spec(
        "get_basket",
        "Shows a basket: its items, their count, and its order once checked out.",
        json!({"type": "object", "properties": {"basket_id": basket_id_schema()}, "required": ["basket_id"]}),
        Some(basket_output()),
        true,
    );
    let checkout = spec(
        "checkout",
        "Orders a basket's items: one order per basket. Calling it again for the same basket returns the same order and never orders twice.",
        json!({"type": "object", "properties": {"basket_id": basket_id_schema()}, "required": ["basket_id"]}),
        Some(basket_output()),
        false,
    );
    // An interrupted checkout may run again: it orders only a basket without an order.
    let checkout = ToolSpec {
        annotations: checkout
            .annotations
            .map(|a| ToolAnnotations { idempotent_hint: Some(true), ..a }),
        ..checkout
    };
    let destroy = spec(
        "destroy_basket",
        "Destroys a basket; its basket_id is unknown afterwards.",
        json!({"type": "object", "properties": {"basket_id": basket_id_schema()}, "required": ["basket_id"]}),
        None,
        false,
    );
    let list = spec(
        "list_baskets",
        "Lists the caller's baskets (never anyone else's), each with its item count. Without authentication it lists only the baskets created in the same session, and none outside a session: a basket is then reached by its basket_id alone.",
        json!({"type": "object", "properties": {}}),
        Some(
            json!({"type": "object", "properties": {"baskets": {"type": "array", "items": basket_output()}}, "required": ["baskets"]}),
        ),
        true,
    );
    let stats = spec(
        "basket_stats",
        "Orders placed, and baskets ordered more than once (always 0 unless something is broken).",
        json!({"type": "object", "properties": {}}),
        None,
        true,
    );
    let k = |k: &Arc<HandleKind>| Arc::clone(k);
    let (k1, k2, k3, k4, k5, k6) = (k(&kind), k(&kind), k(&kind), k(&kind), k(&kind), k(&kind));
    let b1 = Arc::clone(&book);
    Ok(CatalogBuilder::default()
        .tool(tool_fn(create, move |args: Value, cx| {
            let kind = Arc::clone(&k1);
            async move {
                let mut basket = Basket::default();
                for l in args["items"].as_array().into_iter().flatten() {
                    basket.add(arg(l, "sku"), l["quantity"].as_u64().unwrap_or(1)).map_err(ToolError::Failed)?;
                }
                let id = cx.handles(&kind)?.create(&basket).await?;
                let mut r = view(&id, &basket);
                r.content = vec![mcp_runtime::tools::Content::text(format!("Created basket {id} ({} items). {}", basket.count(), kind.expiry_sentence()))];
                Ok(r)
            }
        }))
        .tool(tool_fn(add, move |args: Value, cx| {
            let kind = Arc::clone(&k2);
            async move {
                let (id, sku, quantity) = (arg(&args, "basket_id").to_owned(), arg(&args, "sku").to_owned(), args["quantity"].as_u64().unwrap_or(1));
                let basket = cx
                    .handles(&kind)?
                    .update(&id, |b: &mut Basket| {
                        b.add(&sku, quantity)?;
                        Ok(b.clone())
                    })
                    .await?;
                Ok(view(&id, &basket))
            }
        }))
        .tool(tool_fn(get, move |args: Value, cx| {
            let kind = Arc::clone(&k3);
            async move {
                let id = arg(&args, "basket_id");
                let basket: Basket = cx.handles(&kind)?.get(id).await?;
                Ok(view(id, &basket))
            }
        }))
        .tool(tool_fn(checkout, move |args: Value, cx| {
            let (kind, book) = (Arc::clone(&k4), Arc::clone(&b1));
            async move {
                let id = arg(&args, "basket_id").to_owned();
                let baskets = cx.handles(&kind)?;
                // The basket's tag names it in the journal and in its order id: never the handle.
                let tag = baskets.tag(&id);
                let order = format!("ord_{}", &tag[..20]);
                let (basket, placed) = baskets
                    .update(&id, |b: &mut Basket| {
                        if b.items.is_empty() {
                            return Err("the basket is empty: add an item before checking out".to_owned());
                        }
                        let placed = b.order_id.is_none();
                        b.order_id.get_or_insert_with(|| order.clone());
                        Ok((b.clone(), placed))
                    })
                    .await?;
                if placed {
                    book.lock().place(&tag, &order).map_err(|e| ToolError::Failed(format!("order journal: {e}")))?;
                }
                Ok(view(&id, &basket))
            }
        }))
        .tool(tool_fn(destroy, move |args: Value, cx| {
            let kind = Arc::clone(&k5);
            async move {
                let id = arg(&args, "basket_id");
                cx.handles(&kind)?.destroy(id).await?;
                Ok(CallToolResult::text(format!("Destroyed basket {id}.")))
            }
        }))
        .tool(tool_fn(list, move |_, cx| {
            let kind = Arc::clone(&k6);
            async move {
                let scope = cx.handles(&kind)?;
                let all: Vec<(String, Basket)> = scope.list().await?;
                let baskets: Vec<Value> = all.iter().map(|(id, b)| view(id, b).structured_content.unwrap_or_default()).collect();
                let mut r = CallToolResult::structured(json!({"baskets": baskets}));
                if let Some(why) = scope.unlisted() {
                    // An empty list that says why: a plain result (retrying cannot change it).
                    r.content = vec![mcp_runtime::tools::Content::text(why)];
                }
                Ok(r)
            }
        }))
        .tool(tool_fn(stats, move |_, _| {
            let book = Arc::clone(&book);
            async move {
                let s = {
                    let b = book.lock();
                    json!({"orders": b.orders, "baskets_ordered": b.by_basket.len(), "double_checkouts": b.double})
                };
                Ok(CallToolResult::structured(s))
            }
        })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_basket_adds_up_and_refuses_changes_once_checked_out() {
        let mut b = Basket::default();
        b.add("shoes", 1).unwrap();
        b.add("shoes", 2).unwrap();
        b.add("socks", 5).unwrap();
        assert_eq!((b.items.len(), b.count()), (2, 8));
        b.order_id = Some("ord_x".into());
        assert!(b.add("hat", 1).unwrap_err().contains("checked out"));
    }

    #[test]
    fn the_order_book_counts_a_basket_ordered_twice_across_a_restart() {
        let dir = mcp_devtools::TempDir::new("basket-pack");
        let path = dir.path().join("orders");
        let mut book = OrderBook::open(Some(&path)).unwrap();
        book.place("bsk_a", "ord_a").unwrap();
        drop(book);
        let mut again = OrderBook::open(Some(&path)).unwrap();
        assert_eq!((again.orders, again.double), (1, 0));
        again.place("bsk_a", "ord_a").unwrap();
        assert_eq!(again.double, 1);
    }

    #[test]
    fn the_order_book_remembers_a_bounded_number_of_baskets() {
        let mut book = OrderBook::default();
        for i in 0..=TRACKED_BASKETS {
            book.place(&format!("t{i}"), "o").unwrap();
        }
        assert_eq!(
            (book.by_basket.len(), book.tracked.len()),
            (TRACKED_BASKETS, TRACKED_BASKETS),
            "the oldest left"
        );
        book.place(&format!("t{TRACKED_BASKETS}"), "o").unwrap();
        assert_eq!(book.double, 1, "a recent basket ordered twice is still counted");
    }
}
