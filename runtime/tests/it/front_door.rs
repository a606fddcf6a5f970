//! The front door on a real socket: a refused caller is answered from the head alone (no body
//! is waited for or buffered), and a body that does not arrive in time is refused (408).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpServer};
use mcp_runtime::actor::Supervisor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn serve(cfg: mcp_runtime::config::RuntimeConfig) -> std::net::SocketAddr {
    let sup = Supervisor::new(cfg, common::catalog(common::Gate::default()));
    let server = HttpServer::new(move || {
        App::new().configure(mcp_runtime::http::configure("/mcp", Arc::clone(&sup)))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .unwrap();
    let addr = server.addrs()[0];
    actix_rt::spawn(server.run());
    addr
}

/// Send `head` (and nothing more), then read the status line of the answer, waiting at most 5 s.
async fn status_after_head_only(addr: std::net::SocketAddr, head: &str) -> u16 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("an answer without the body")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

fn post_head(extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: 1000\r\n{extra}\r\n"
    )
}

#[actix_web::test]
async fn a_refused_caller_is_answered_from_its_head_without_its_body_being_read() {
    let addr = serve(common::cfg(|c| {
        common::two_callers(c);
        c.security.body_read_timeout_ms = 60_000;
    }))
    .await;
    assert_eq!(
        status_after_head_only(addr, &post_head("Authorization: Bearer wrong\r\n")).await,
        401
    );
    assert_eq!(
        status_after_head_only(
            addr,
            &post_head("Authorization: Bearer ta\r\nOrigin: https://evil.example\r\n")
        )
        .await,
        403
    );
    let big = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 99999999\r\nOrigin: https://evil.example\r\n\r\n";
    assert_eq!(
        status_after_head_only(addr, big).await,
        403,
        "the origin rule comes before the size rule"
    );
    let wrong_type = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nAuthorization: Bearer ta\r\nContent-Length: 1000\r\n\r\n";
    assert_eq!(status_after_head_only(addr, wrong_type).await, 415);
}

#[actix_web::test]
async fn a_body_that_does_not_arrive_in_time_is_refused_with_408() {
    let addr = serve(common::cfg(|c| c.security.body_read_timeout_ms = 200)).await;
    // Head and a first part of the body, then nothing (slowloris).
    let head = post_head("");
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("{head}{{\"jsonrpc\":").as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("refused in time")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("-32000"), "{text}");
}
