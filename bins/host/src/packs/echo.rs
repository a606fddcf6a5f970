//! The `echo` pack: one read-only, idempotent tool that returns its input.

use mcp_runtime::tools::{CallToolResult, CatalogBuilder, ToolAnnotations, ToolSpec, tool_fn};
use serde_json::{Value, json};

pub(crate) fn pack() -> CatalogBuilder {
    let spec = ToolSpec::new(
        "echo",
        "Returns the given text unchanged.",
        json!({"type":"object","properties":{"text":{"type":"string","description":"Text to echo"}},"required":["text"]}),
    )
    .annotations(ToolAnnotations { read_only_hint: Some(true), idempotent_hint: Some(true), destructive_hint: Some(false), open_world_hint: Some(false), ..Default::default() });
    CatalogBuilder::default().tool(tool_fn(spec, |args: Value, _cx| async move {
        Ok(CallToolResult::text(args.get("text").and_then(Value::as_str).unwrap_or_default()))
    }))
}
