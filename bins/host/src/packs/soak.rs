//! The `soak` pack (off by default): tools `mcp-load soak` drives to put a host under the
//! traffic of careless and hostile clients.
//!
//! `soak_flood {count, bytes, delay_ms, hold_ms}` waits `delay_ms`, then sends `count` log
//! messages of `bytes` bytes each on its stream, waits `hold_ms`, then answers: with a small
//! replay window and a client that disconnected, its resume finds the events lost (while the
//! tool still holds, the gap ends it). Every argument is bounded and the waits are
//! cancellable.

use std::time::Duration;

use mcp_runtime::proto::mcp::LogLevel;
use mcp_runtime::tools::{
    CallToolResult, CatalogBuilder, ToolAnnotations, ToolError, ToolSpec, tool_fn,
};
use serde_json::{Value, json};

const MAX_COUNT: u64 = 10_000;
const MAX_BYTES: u64 = 64 << 10;
const MAX_DELAY_MS: u64 = 10_000;

fn bounded(args: &Value, key: &str, max: u64) -> Result<u64, ToolError> {
    let v = args.get(key).and_then(Value::as_u64).unwrap_or(0);
    if v > max {
        return Err(ToolError::Failed(format!("{key} must be at most {max}")));
    }
    Ok(v)
}

pub(crate) fn pack() -> CatalogBuilder {
    let schema = json!({"type":"object","properties":{
        "count":{"type":"integer","description":"Log messages to send (at most 10000)"},
        "bytes":{"type":"integer","description":"Bytes per message (at most 65536)"},
        "delay_ms":{"type":"integer","description":"Wait before sending (at most 10000 ms)"},
        "hold_ms":{"type":"integer","description":"Wait after sending, before answering (at most 10000 ms)"}}});
    let spec = ToolSpec::new(
        "soak_flood",
        "Waits, then floods its stream with log messages, then answers.",
        schema,
    )
    .annotations(ToolAnnotations {
        read_only_hint: Some(true),
        idempotent_hint: Some(true),
        ..Default::default()
    });
    CatalogBuilder::default().tool(tool_fn(spec, |args: Value, cx| async move {
        let count = bounded(&args, "count", MAX_COUNT)?;
        let bytes = bounded(&args, "bytes", MAX_BYTES)? as usize;
        let delay = bounded(&args, "delay_ms", MAX_DELAY_MS)?;
        let hold = bounded(&args, "hold_ms", MAX_DELAY_MS)?;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let pad = "x".repeat(bytes);
        for i in 0..count {
            cx.log(LogLevel::Info, Some("soak"), json!({"i": i, "pad": pad})).await;
        }
        tokio::time::sleep(Duration::from_millis(hold)).await;
        Ok(CallToolResult::text(format!("flooded {count}")))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_over_their_bound_are_tool_errors() {
        assert!(bounded(&json!({"count": 10_001}), "count", MAX_COUNT).is_err());
        assert_eq!(bounded(&json!({}), "count", MAX_COUNT).unwrap(), 0);
        assert_eq!(bounded(&json!({"bytes": 65_536}), "bytes", MAX_BYTES).unwrap(), 65_536);
    }
}
