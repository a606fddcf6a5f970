//! The `faults` pack (off by default): tools that misbehave on purpose, so tests and manual
//! runs can see the host contain them. Never part of the `conformance` pack, whose tool list
//! the official suite expects as it is.
//!
//! `test_panic {when?}` panics: before making its future (`when: "call"`), in its first poll
//! (the default), or after yielding once (`"later"`, so it panics where it was spawned). The
//! runtime answers that call `-32603` and nothing else stops.

use mcp_runtime::tools::{CatalogBuilder, ToolSpec, tool_fn};
use serde_json::{Value, json};

pub(crate) fn pack() -> CatalogBuilder {
    let spec = ToolSpec::new(
        "test_panic",
        "Panics (a fault fixture): before making its future (when: call), in its first poll (default), or after yielding once (when: later). Answered with an internal error.",
        json!({"type":"object","properties":{"when":{"type":"string","enum":["call","poll","later"]}}}),
    );
    CatalogBuilder::default().tool(tool_fn(spec, |args: Value, _cx| {
        let when = args.get("when").and_then(Value::as_str).unwrap_or("poll").to_owned();
        assert!(when != "call", "test_panic: a fault before the tool's future");
        async move {
            if when == "later" {
                tokio::task::yield_now().await;
            }
            panic!("test_panic: a fault in the tool's future ({when})")
        }
    }))
}
