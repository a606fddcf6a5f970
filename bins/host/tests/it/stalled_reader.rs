//! A client that stops reading a stream cannot hold its connection and its session forever:
//! once the host's written data stays unacknowledged for `server.tcp_user_timeout_secs`, the
//! kernel ends the connection, the session counts it off and expires on its TTL.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use mcp_devtools::{HostProcess, TempDir};
use serde_json::Value;

/// The host with `config` (a file in `dir`, beside its ledger) and its address.
fn start(dir: &TempDir, config: &str) -> (HostProcess, String) {
    let path = dir.path().join("mcp-host.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-host"));
    cmd.args([
        "--port",
        "0",
        "--packs",
        "soak",
        "--session-ttl-secs",
        "1",
        "--stats-every-ms",
        "200",
        "--config",
    ])
    .arg(&path)
    .args(dir.host_args())
    .stderr(std::process::Stdio::null());
    let host = HostProcess::spawn(cmd, Duration::from_secs(10)).expect("start mcp-host");
    let addr = host.url().trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    (host, addr)
}

fn post(s: &mut TcpStream, body: &str, session: Option<&str>, accept: &str) {
    let sid = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: {accept}\r\nContent-Length: {}\r\n{sid}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
}

/// Open a session and start a flood on a connection that is never read. Returns both sockets
/// (dropping them would close the connections).
fn stall(addr: &str) -> (TcpStream, TcpStream) {
    let mut s = TcpStream::connect(addr).unwrap();
    post(
        &mut s,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
        None,
        "application/json",
    );
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
    let sid = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
                .map(|(_, v)| v.trim().to_owned())
        })
        .expect("session id");
    // A small receive buffer: the host's send side fills after a few hundred KiB.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&addr.parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    let mut stalled: TcpStream = sock.into();
    let flood = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"soak_flood","arguments":{"count":2000,"bytes":65536}}}"#;
    post(&mut stalled, flood, Some(&sid), "application/json, text/event-stream");
    (s, stalled)
}

/// The first of the host's stats lines over the next `within` × 200 ms for which `pred`
/// holds.
fn wait_for(host: &HostProcess, within: usize, pred: impl Fn(&Value) -> bool) -> Option<Value> {
    (0..within).find_map(|_| {
        std::thread::sleep(Duration::from_millis(200));
        host.latest_stats().map(|s| s.value).filter(|v| pred(v))
    })
}

#[test]
fn a_stalled_reader_is_cut_by_the_tcp_user_timeout_and_its_session_expires() {
    let dir = TempDir::new("stall-cut");
    let (host, addr) = start(&dir, "[server]\ntcp_user_timeout_secs = 2\n");
    let _sockets = stall(&addr);
    assert!(
        wait_for(&host, 25, |s| s["sessions"] == 1 && s["streams"] == 1).is_some(),
        "the flood started"
    );
    // Kernel timeout (2 s) after the send buffer filled, then the 1 s idle TTL.
    let gone = wait_for(&host, 100, |s| s["sessions"] == 0 && s["streams"] == 0);
    assert!(gone.is_some(), "the session outlived its stalled connection");
}

#[test]
fn without_a_user_timeout_the_stalled_connection_holds_its_session() {
    // The control case: it shows the test above measures the timeout, not something else.
    let dir = TempDir::new("stall-held");
    let (host, addr) = start(&dir, "[server]\ntcp_user_timeout_secs = 0\n");
    let _sockets = stall(&addr);
    assert!(wait_for(&host, 25, |s| s["sessions"] == 1).is_some(), "the flood started");
    let gone = wait_for(&host, 40, |s| s["sessions"] == 0);
    assert!(gone.is_none(), "8 s later the session is still held by its stalled connection");
}
