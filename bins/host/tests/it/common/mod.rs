//! What the host tests share: starting the real binary on a ledger in a temporary
//! directory, one HTTP/1.1 exchange on a fresh connection, SSE parsing, and the MCP requests
//! they send. `MCP_HOST_BIN` overrides the binary.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use mcp_devtools::{HostProcess, TempDir};
use mcp_runtime::sse::Decoder;
use serde_json::{Value, json};

pub(crate) struct Host {
    pub(crate) process: HostProcess,
    pub(crate) addr: String,
}

impl Host {
    /// GET `path` on its admin listener with the token its dir holds (`dir`: the one it was
    /// started in); the body, after a 200.
    pub(crate) fn admin_get(&self, dir: &TempDir, path: &str) -> Vec<u8> {
        let admin = self.process.admin_url(Duration::from_secs(20)).expect("the admin line");
        let admin = admin.trim_start_matches("http://");
        let token = std::fs::read_to_string(dir.path().join("mcp-host.admin-token"))
            .expect("the admin token file");
        let bearer = format!("Bearer {}", token.trim());
        let (status, _, body) =
            http_at(admin, "GET", path, &[("Authorization", &bearer)], "", QUICK);
        assert_eq!(status, 200, "{path}");
        body
    }

    /// The value of `series` (a metric's name and labels as exported) in its `/metrics`.
    pub(crate) fn metric(&self, dir: &TempDir, series: &str) -> f64 {
        let text = String::from_utf8(self.admin_get(dir, "/metrics")).expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{series} in {text}"))
    }
}

pub(crate) fn start(dir: &TempDir, port: u16) -> Host {
    start_with(dir, port, &[])
}

pub(crate) fn start_with(dir: &TempDir, port: u16, extra: &[&str]) -> Host {
    start_logged(dir, port, extra, None)
}

/// The binary, `--packs soak,echo,conformance,ledger` on `port`, its ledger (and admin token
/// file) in `dir`, its admin API on a free port; with `log`, its stderr goes to that file
/// with the log filter `MCP_HOST_LOG` = `log.1`.
pub(crate) fn start_logged(
    dir: &TempDir,
    port: u16,
    extra: &[&str],
    log: Option<(&std::path::Path, &str)>,
) -> Host {
    let bin =
        std::env::var("MCP_HOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-host").to_owned());
    let mut cmd = Command::new(bin);
    cmd.args(["--port", &port.to_string(), "--packs", "soak,echo,conformance,ledger"])
        .args(dir.host_args())
        .args(extra);
    match log {
        Some((path, filter)) => {
            cmd.stderr(std::fs::File::create(path).expect("the log file"))
                .env(mcp_devtools::LOG_ENV, filter);
        }
        None => {
            cmd.stderr(std::process::Stdio::null());
        }
    }
    let process = HostProcess::spawn(cmd, Duration::from_secs(20)).expect("start mcp-host");
    let addr = process.url().trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    Host { process, addr }
}

impl Host {
    pub(crate) fn port(&self) -> u16 {
        self.addr.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// SIGKILL, then the same ledger and port again.
    pub(crate) fn kill_and_restart(self, dir: &TempDir) -> Host {
        self.kill_and_restart_with(dir, &[])
    }

    /// SIGKILL, then the same ledger and port again, with `extra` arguments.
    pub(crate) fn kill_and_restart_with(self, dir: &TempDir, extra: &[&str]) -> Host {
        let port = self.port();
        drop(self.process);
        start_with(dir, port, extra)
    }
}

/// One HTTP/1.1 exchange on a fresh connection: (status, headers, body). A chunked body
/// (SSE) is read until the server ends it or `read_for` passes.
pub(crate) fn http(
    addr: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
    read_for: Duration,
) -> (u16, String, Vec<u8>) {
    http_at(addr, method, "/mcp", headers, body, read_for)
}

/// [`http`] on another path.
pub(crate) fn http_at(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    read_for: Duration,
) -> (u16, String, Vec<u8>) {
    let s = send(addr, method, path, headers, body).expect("connect and send");
    let raw = read_answer(s, read_for);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("status");
    let mut body = raw[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, head, body)
}

/// Connect and send a request (`Connection: close`); its answer is not read yet (a stopped
/// host's kernel takes the request and queues it).
pub(crate) fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())?;
    Ok(s)
}

/// Everything the host answers on `s` until it closes or `read_for` passes between reads.
pub(crate) fn read_answer(mut s: TcpStream, read_for: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(read_for)).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    raw
}

/// The status of an answer [`read_answer`] read; `None` when the host closed without one.
pub(crate) fn status_in(raw: &[u8]) -> Option<u16> {
    let head = raw.split(|b| *b == b'\n').next()?;
    String::from_utf8_lossy(head).split_whitespace().nth(1)?.parse().ok()
}

pub(crate) use mcp_devtools::dechunk;

pub(crate) fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim())
    })
}

/// SSE events: (id, data).
pub(crate) fn events(body: &[u8]) -> Vec<(Option<String>, String)> {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    for e in d.feed(body) {
        out.push((e.id.clone(), e.data));
    }
    out
}

pub(crate) const SSE: (&str, &str) = ("Accept", "application/json, text/event-stream");
pub(crate) const QUICK: Duration = Duration::from_secs(5);

pub(crate) fn initialize(addr: &str) -> String {
    initialize_as(addr, "2025-11-25", &[])
}

/// A session at `version`. The version tests use 2025-06-18: not the newest, so a revive
/// that fell back to negotiating would show (2025-11-25 sessions prime their streams,
/// 2025-06-18 ones do not).
pub(crate) fn initialize_as(addr: &str, version: &str, auth: &[(&str, &str)]) -> String {
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":version,"capabilities":{"sampling":{}},"clientInfo":{"name":"restart-test","version":"1"}}});
    let headers: Vec<(&str, &str)> =
        [("Accept", "application/json")].into_iter().chain(auth.iter().copied()).collect();
    let (status, head, _) = http(addr, "POST", &headers, &init.to_string(), QUICK);
    assert_eq!(status, 200);
    header(&head, "mcp-session-id").expect("a session id").to_owned()
}

pub(crate) fn post_json(addr: &str, sid: &str, body: &Value) -> (u16, Value) {
    let (status, _, b) = http(
        addr,
        "POST",
        &[
            ("Accept", "application/json"),
            ("Mcp-Session-Id", sid),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &body.to_string(),
        QUICK,
    );
    (status, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

/// The basket ids a `list_baskets` result lists, sorted.
pub(crate) fn listed_basket_ids(listed: &Value) -> Vec<String> {
    let mut ids: Vec<String> = listed["structuredContent"]["baskets"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|b| b["basket_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// A legacy session's `tools/call` result (answered as JSON, 200).
pub(crate) fn call_in(addr: &str, sid: &str, id: i64, tool: &str, args: Value) -> Value {
    let params = json!({"name": tool, "arguments": args});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let (status, r) = post_json(addr, sid, &body);
    assert_eq!(status, 200, "{r}");
    r.get("result").cloned().unwrap_or_else(|| panic!("{tool}: {r}"))
}

/// POST a tools/call with SSE and hang up after its first event (the priming event): the
/// cursor to resume from.
pub(crate) fn call_and_hang_up(addr: &str, sid: &str, id: i64, tool: &str, args: Value) -> String {
    hang_up_after_priming(
        addr,
        sid,
        &json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}}),
    )
}

/// A response read as it arrives, on a connection of its own.
pub(crate) struct Streamed {
    s: TcpStream,
    /// Everything read so far (head and chunked body).
    pub(crate) raw: Vec<u8>,
    /// Where [`Streamed::read_until`] starts looking.
    from: usize,
}

/// POST `body` to `/mcp` with `headers` (besides SSE accepted and a JSON body) on a fresh
/// connection; its response is read as it arrives, each read waiting at most `wait`.
pub(crate) fn post_streamed(
    addr: &str,
    headers: &[(&str, &str)],
    body: &str,
    wait: Duration,
) -> Streamed {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    Streamed { s, raw: Vec::new(), from: 0 }
}

impl Streamed {
    /// Read once more; panics when the connection closed or the read waited past its bound.
    pub(crate) fn read_more(&mut self) {
        let mut buf = [0u8; 4096];
        match self.s.read(&mut buf) {
            Ok(0) => panic!("closed; so far: {}", String::from_utf8_lossy(&self.raw)),
            Ok(n) => self.raw.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{e}; so far: {}", String::from_utf8_lossy(&self.raw)),
        }
    }

    /// Read until `what` arrived (since [`Streamed::look_from_here`]).
    pub(crate) fn read_until(&mut self, what: &str) {
        while !self.raw[self.from..].windows(what.len()).any(|w| w == what.as_bytes()) {
            self.read_more();
        }
    }

    /// Look only at what arrives from now on; later reads wait at most `wait`.
    pub(crate) fn look_from_here(&mut self, wait: Duration) {
        self.from = self.raw.len();
        self.s.set_read_timeout(Some(wait)).unwrap();
    }

    /// The messages of the SSE body so far.
    pub(crate) fn messages(&self) -> Vec<Value> {
        let body = self.raw.windows(4).position(|w| w == b"\r\n\r\n").map_or(0, |i| i + 4);
        events(&mcp_devtools::dechunk(&self.raw[body..]))
            .into_iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|(_, d)| json_of(&d))
            .collect()
    }
}

/// The headers of a 2025-11-25 request of session `sid`.
pub(crate) fn session_headers(sid: &str) -> [(&str, &str); 2] {
    [("Mcp-Session-Id", sid), ("MCP-Protocol-Version", "2025-11-25")]
}

/// POST `body` with SSE and hang up after the priming event; returns its cursor.
pub(crate) fn hang_up_after_priming(addr: &str, sid: &str, body: &Value) -> String {
    let mut r = post_streamed(addr, &session_headers(sid), &body.to_string(), QUICK);
    while !String::from_utf8_lossy(&r.raw).contains("\n\n")
        || !String::from_utf8_lossy(&r.raw).contains("id:")
    {
        r.read_more();
    }
    let text = String::from_utf8_lossy(&r.raw).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("id:"))
        .map(|c| c.trim().to_owned())
        .expect("a priming cursor")
}

/// Wait (bounded) until `count_sql` on the ledger file counts at least `n` committed rows.
pub(crate) fn wait_for_ledger(dir: &TempDir, count_sql: &str, n: i64) {
    let db = rusqlite::Connection::open_with_flags(
        dir.path().join("mcp-host.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    for _ in 0..500 {
        if db.query_row(count_sql, [], |r| r.get::<_, i64>(0)).unwrap_or(0) >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the ledger never counted {n} for {count_sql}");
}

/// Wait (bounded) until the ledger file holds `n` committed events in all.
pub(crate) fn wait_for_committed_events(dir: &TempDir, n: i64) {
    wait_for_ledger(dir, "SELECT count(*) FROM events", n);
}

pub(crate) fn resume(addr: &str, sid: &str, cursor: &str) -> (u16, Vec<(Option<String>, String)>) {
    let (status, _, body) = http(
        addr,
        "GET",
        &[
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", sid),
            ("MCP-Protocol-Version", "2025-11-25"),
            ("Last-Event-ID", cursor),
        ],
        "",
        QUICK,
    );
    (status, events(&body))
}

/// `logging/setLevel` info on `sid` (request id 2).
pub(crate) fn set_level_info(addr: &str, sid: &str) {
    assert_eq!(
        post_json(
            addr,
            sid,
            &json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}})
        )
        .0,
        200
    );
}

pub(crate) fn json_of(data: &str) -> Value {
    serde_json::from_str(data).unwrap_or(Value::Null)
}

/// A 2026-07-28 request (`_meta` and mirrored headers, no session), answered as JSON: the
/// whole response.
pub(crate) fn modern(addr: &str, id: i64, method: &str, params: Value) -> Value {
    modern_as(addr, None, id, method, params)
}

/// [`modern`] with `token` as its bearer token, when given.
pub(crate) fn modern_as(
    addr: &str,
    token: Option<&str>,
    id: i64,
    method: &str,
    mut params: Value,
) -> Value {
    // The caller's own `_meta` (its capabilities, say) is kept.
    let caps = params["_meta"]["io.modelcontextprotocol/clientCapabilities"].clone();
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        if caps.is_null() { json!({}) } else { caps };
    let name =
        params.get("name").or_else(|| params.get("uri")).and_then(Value::as_str).map(str::to_owned);
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Accept", "application/json"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(b) = bearer.as_deref() {
        headers.push(("Authorization", b));
    }
    let task = params.get("taskId").and_then(Value::as_str).map(str::to_owned);
    if let Some(n) = name
        .as_deref()
        .filter(|_| matches!(method, "tools/call" | "prompts/get" | "resources/read"))
        .or(task.as_deref())
    {
        headers.push(("Mcp-Name", n));
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let (status, _, b) = http(addr, "POST", &headers, &body.to_string(), QUICK);
    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
    assert!(status == 200 || v.get("error").is_some(), "{status}: {v}");
    v
}

/// A 2026-07-28 `tools/call`'s result.
pub(crate) fn modern_call(addr: &str, id: i64, tool: &str, args: Value) -> Value {
    modern_call_as(addr, None, id, tool, args)
}

/// [`modern_call`] with `token` as its bearer token, when given.
pub(crate) fn modern_call_as(
    addr: &str,
    token: Option<&str>,
    id: i64,
    tool: &str,
    args: Value,
) -> Value {
    let r = modern_as(addr, token, id, "tools/call", json!({"name": tool, "arguments": args}));
    r.get("result").cloned().unwrap_or_else(|| panic!("{tool}: {r}"))
}

/// Wait (bounded: `limit`, in 20 ms pauses) until `cond` holds; panics naming `what` else.
pub(crate) fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let pause = Duration::from_millis(20);
    for _ in 0..limit.as_millis() / pause.as_millis() {
        if cond() {
            return;
        }
        std::thread::sleep(pause);
    }
    panic!("never happened within {limit:?}: {what}");
}

/// A legacy `initialize` whatever its answer: (status, head, body as JSON or null).
pub(crate) fn initialize_status(addr: &str) -> (u16, String, Value) {
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host-test","version":"1"}}});
    let (status, head, body) =
        http(addr, "POST", &[("Accept", "application/json")], &init.to_string(), QUICK);
    (status, head, serde_json::from_slice(&body).unwrap_or(Value::Null))
}
