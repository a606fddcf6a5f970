//! The real binary in the 2026-07-28 era, on real sockets: a client that closes its
//! connection cancels its request at once (its slot is free again, whichever reply mode it
//! asked for), and a write tool's call re-issued with its idempotency key runs once.
//! `MCP_HOST_BIN` overrides the binary.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use mcp_devtools::TempDir;
use serde_json::{Value, json};

fn modern_body(id: i64, name: &str, args: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args,"_meta":{
        "io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}})
    .to_string()
}

fn modern_call(addr: &str, id: i64, name: &str, args: Value) -> (u16, Vec<u8>) {
    let (status, _, body) = http(
        addr,
        "POST",
        &[
            ("Accept", "application/json"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", name),
        ],
        &modern_body(id, name, args),
        QUICK,
    );
    (status, body)
}

#[test]
fn closing_the_connection_cancels_a_modern_request_at_once_in_both_reply_modes() {
    let dir = TempDir::new("mcp-host-modern-cancel");
    let config = dir.path().join("host.toml");
    std::fs::write(&config, "[modern]\nmax_in_flight = 1\n").unwrap();
    let host = start_with(&dir, 0, &["--config", config.to_str().unwrap()]);
    for accept in ["application/json", "application/json, text/event-stream"] {
        let body = modern_body(1, "sleep", json!({"ms": 30_000}));
        let mut s = TcpStream::connect(&host.addr).unwrap();
        s.set_read_timeout(Some(QUICK)).unwrap();
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: sleep\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).expect("the response head");
            assert!(n > 0, "closed before the head");
            head.extend_from_slice(&b[..n]);
        }
        assert!(
            String::from_utf8_lossy(&head).starts_with("HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        // The one slot is taken while the sleep runs.
        assert_eq!(
            modern_call(&host.addr, 2, "echo", json!({"text": "busy"})).0,
            503,
            "{accept}: the slot is held by the sleep"
        );
        drop(s);
        // Closing is the cancellation: the slot comes back long before the 30 s sleep ends.
        // At most 200 tries 50 ms apart (10 s): far less than the sleep's 30 s.
        let freed = (0..200).any(|_| {
            let (status, body) = modern_call(&host.addr, 3, "echo", json!({"text": "free"}));
            let ok = status == 200 && String::from_utf8_lossy(&body).contains("free");
            if !ok {
                std::thread::sleep(Duration::from_millis(50));
            }
            ok
        });
        assert!(freed, "{accept}: the closed request still holds its slot");
    }
}

#[test]
fn a_modern_write_re_issued_with_its_key_runs_once() {
    let dir = TempDir::new("mcp-host-modern-receipt");
    let host = start(&dir, 0);
    let (s1, first) = modern_call(&host.addr, 1, "ledger_append", json!({"key": "modern-k1"}));
    let (s2, again) = modern_call(&host.addr, 2, "ledger_append", json!({"key": "modern-k1"}));
    assert_eq!((s1, s2), (200, 200));
    let result =
        |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap()["result"]["content"].clone();
    assert_eq!(result(&first), result(&again), "the re-issue is answered from the receipt");
    let (_, stats) = modern_call(&host.addr, 3, "ledger_stats", json!({}));
    let text = serde_json::from_slice::<Value>(&stats).unwrap()["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("\"duplicates\":0")
            || text.contains("duplicates: 0")
            || text.contains("\"duplicates\": 0"),
        "{text}"
    );
}
