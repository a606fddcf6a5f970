//! The real binary under SIGTERM: new sessions are refused from the moment the stop begins,
//! also on connections that were open before it, while the HTTP server's graceful stop lets
//! running responses finish. `MCP_HOST_BIN` overrides the binary (to check another build).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use mcp_devtools::{HostProcess, TempDir};

/// The host on a free port, its ledger in `dir`; `MCP_HOST_BIN` overrides the binary. Its
/// address.
fn start(dir: &TempDir) -> (HostProcess, String) {
    let bin =
        std::env::var("MCP_HOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-host").to_owned());
    let mut cmd = Command::new(bin);
    cmd.args(["--port", "0"]).args(dir.host_args()).stderr(std::process::Stdio::null());
    let host = HostProcess::spawn(cmd, Duration::from_secs(10)).expect("start mcp-host");
    let addr = host.url().trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    (host, addr)
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

fn send(s: &mut TcpStream, head: &str, body: &str) {
    let req = format!(
        "{head}Host: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
}

/// Read one response head; returns (status, head text).
fn read_head(s: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).expect("response head"),
            1,
            "connection closed before a response head"
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("status code");
    (status, head)
}

/// Read a JSON response with Content-Length; returns (status, head).
fn json_response(s: &mut TcpStream) -> (u16, String) {
    let (status, head) = read_head(s);
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("content-length");
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    (status, head)
}

#[test]
fn initialize_arriving_during_the_graceful_stop_is_refused() {
    let dir = TempDir::new("graceful-stop");
    let (host, addr) = start(&dir);
    // An open SSE stream keeps the server in its graceful stop for a while.
    let mut s = connect(&addr);
    send(&mut s, "POST /mcp HTTP/1.1\r\nAccept: application/json\r\n", INIT);
    let (_, head) = json_response(&mut s);
    let sid = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
                .map(|(_, v)| v.trim().to_owned())
        })
        .expect("session id");
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n\r\n"
    );
    s.write_all(get.as_bytes()).unwrap();
    assert_eq!(read_head(&mut s).0, 200);
    // An initialize in progress: its head and half its body are sent before the signal, on a
    // connection the server has certainly accepted (it answered a request on it first: a
    // connection still in the listen backlog would be reset when the listener closes).
    let mut late = connect(&addr);
    send(
        &mut late,
        "POST /mcp HTTP/1.1\r\nAccept: application/json\r\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    );
    assert_eq!(json_response(&mut late).0, 400, "a ping without a session");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        INIT.len()
    );
    let (first, rest) = INIT.split_at(INIT.len() / 2);
    late.write_all(format!("{head}{first}").as_bytes()).unwrap();

    let killed =
        Command::new("kill").args(["-TERM", &host.pid().to_string()]).status().expect("kill");
    assert!(killed.success());
    // The listener closes once the stop has begun (the drain starts before it).
    let closed = (0..250).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        TcpStream::connect(&addr).is_err()
    });
    assert!(closed, "the listener did not close within 5 s of SIGTERM");
    late.write_all(rest.as_bytes()).unwrap();
    let (status, head) = json_response(&mut late);
    assert_eq!(status, 503, "initialize admitted during the graceful stop:\n{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after: 5"), "{head}");
}

/// Read a chunked SSE body until `needle` appears or the connection ends; what was read.
fn read_until(s: &mut TcpStream, needle: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn sigterm_ends_a_listen_stream_with_its_completion_result() {
    let dir = TempDir::new("graceful-listen");
    let (host, addr) = start(&dir);
    let mut s = connect(&addr);
    let body = r#"{"jsonrpc":"2.0","id":"sub-1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    send(
        &mut s,
        "POST /mcp HTTP/1.1\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\n",
        body,
    );
    assert_eq!(read_head(&mut s).0, 200);
    let ack = read_until(&mut s, "acknowledged");
    assert!(ack.contains(r#""io.modelcontextprotocol/subscriptionId":"sub-1""#), "{ack}");
    let killed =
        Command::new("kill").args(["-TERM", &host.pid().to_string()]).status().expect("kill");
    assert!(killed.success());
    let rest = read_until(&mut s, r#""resultType":"complete""#);
    assert!(
        rest.contains(r#""id":"sub-1""#) && rest.contains(r#""resultType":"complete""#),
        "the completion result, not a bare close:\n{rest}"
    );
    // Then the stream ends (the chunked body's last chunk) and the host exits.
    let end = read_until(&mut s, "0\r\n\r\n");
    assert!(
        end.contains("0\r\n\r\n") || rest.contains("0\r\n\r\n"),
        "the stream was ended: {end:?}"
    );
}
