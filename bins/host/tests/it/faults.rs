//! The `faults` pack on the real binary: a tool that panics ends its own call with the
//! internal error (`-32603`), in both eras; the session it ran in, that session's other
//! requests, and the server go on.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use mcp_devtools::TempDir;
use serde_json::{Value, json};

const WHEN: [&str; 3] = ["call", "poll", "later"];

fn internal_error(m: &Value, when: &str) {
    assert_eq!(
        (&m["error"]["code"], &m["error"]["message"]),
        (&json!(-32603), &json!("Internal error")),
        "{when}: {m}"
    );
}

/// A legacy request on an SSE stream of its own, read up to its priming event (it runs).
struct Running {
    s: TcpStream,
    raw: Vec<u8>,
}

impl Running {
    fn start(addr: &str, sid: &str, body: &Value) -> Running {
        let body = body.to_string();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nMcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&raw).contains("id:") {
            let n = s.read(&mut buf).expect("the priming event");
            assert!(n > 0, "closed before the priming event");
            raw.extend_from_slice(&buf[..n]);
        }
        Running { s, raw }
    }

    /// Its messages, read until the server ends the response.
    fn finish(mut self) -> Vec<Value> {
        self.s.read_to_end(&mut self.raw).expect("the rest of the stream");
        let split = self.raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
        events(&dechunk(&self.raw[split + 4..]))
            .into_iter()
            .map(|(_, d)| json_of(&d))
            .filter(|m| !m.is_null())
            .collect()
    }
}

#[test]
fn a_panicking_tool_ends_its_call_not_its_session_or_the_server_in_both_eras() {
    let dir = TempDir::new("faults");
    let host = start_with(&dir, 0, &["--packs", "faults"]);
    let sid = initialize(&host.addr);
    // Another request of the session, on its own stream, runs across the panics.
    let sleeping = Running::start(
        &host.addr,
        &sid,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 2000}}}),
    );
    for (n, when) in (2..).zip(WHEN) {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "test_panic", "arguments": {"when": when}}});
        let headers =
            [SSE, ("Mcp-Session-Id", sid.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
        let (status, _, body) = http(&host.addr, "POST", &headers, &call.to_string(), QUICK);
        assert_eq!(status, 200, "{when}");
        let answer = events(&body)
            .into_iter()
            .map(|(_, d)| json_of(&d))
            .find(|m| m["id"] == n)
            .unwrap_or_else(|| panic!("{when}: no answer"));
        internal_error(&answer, when);
    }
    let slept = sleeping.finish();
    assert_eq!(
        slept.last().map(|m| m["result"]["content"][0]["text"].clone()),
        Some(json!("slept 2000 ms")),
        "{slept:?}"
    );
    let (status, echoed) = post_json(
        &host.addr,
        &sid,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "same session"}}}),
    );
    assert_eq!(
        (status, echoed["result"]["content"][0]["text"].clone()),
        (200, json!("same session")),
        "{echoed}"
    );

    // 2026-07-28: stateless calls.
    for (n, when) in (10..).zip(WHEN) {
        internal_error(
            &modern(
                &host.addr,
                n,
                "tools/call",
                json!({"name": "test_panic", "arguments": {"when": when}}),
            ),
            when,
        );
    }
    assert_eq!(
        modern_call(&host.addr, 20, "echo", json!({"text": "served"}))["content"][0]["text"],
        "served"
    );
}
