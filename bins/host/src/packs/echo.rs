//! The `echo` pack: `echo` returns its input; `sleep` waits (bounded, cancellable), so drains
//! and rollbacks can be exercised by hand and in tests. Both are read-only and idempotent.

use std::time::Duration;

use mcp_runtime::tools::{
    CallToolResult, CatalogBuilder, ToolAnnotations, ToolError, ToolSpec, tool_fn,
};
use serde_json::{Value, json};

/// The longest `sleep` (ms); its description states it.
pub(crate) const SLEEP_MAX_MS: u64 = 60_000;

fn read_only() -> ToolAnnotations {
    ToolAnnotations {
        read_only_hint: Some(true),
        idempotent_hint: Some(true),
        destructive_hint: Some(false),
        open_world_hint: Some(false),
        ..Default::default()
    }
}

pub(crate) fn pack() -> CatalogBuilder {
    let echo = ToolSpec::new(
        "echo",
        "Returns the given text unchanged.",
        json!({"type":"object","properties":{"text":{"type":"string","description":"Text to echo"}},"required":["text"]}),
    )
    .annotations(read_only());
    let sleep = ToolSpec::new(
        "sleep",
        "Waits `ms` milliseconds (at most 60000), then answers \"slept <ms> ms\"; a cancellation ends it at once.",
        json!({"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":SLEEP_MAX_MS,"description":"How long to wait"}},"required":["ms"]}),
    )
    .annotations(read_only());
    CatalogBuilder::default()
        .tool(tool_fn(echo, |args: Value, _cx| async move { Ok(CallToolResult::text(args.get("text").and_then(Value::as_str).unwrap_or_default())) }))
        .tool(tool_fn(sleep, |args: Value, cx| async move {
            let ms = args.get("ms").and_then(Value::as_u64).filter(|ms| *ms <= SLEEP_MAX_MS).ok_or_else(|| ToolError::Failed(format!("ms must be an integer from 0 to {SLEEP_MAX_MS}")))?;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(CallToolResult::text(format!("slept {ms} ms"))),
                () = cx.cancellation().cancelled() => Ok(CallToolResult::text("cancelled")),
            }
        }))
}
