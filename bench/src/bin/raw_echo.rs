//! Baseline: the cheapest honest actix-web JSON-RPC echo. It parses the request body as JSON
//! and serializes a `tools/call`-shaped result, one worker, TCP_NODELAY, like mcp-host.

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::{Value, json};

async fn echo(body: web::Bytes) -> HttpResponse {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return HttpResponse::BadRequest().finish();
    };
    let text = req.pointer("/params/arguments/text").cloned().unwrap_or(Value::Null);
    let resp = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"content": [{"type": "text", "text": text}]}});
    HttpResponse::Ok()
        .content_type("application/json")
        .body(serde_json::to_vec(&resp).unwrap_or_default())
}

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(|| App::new().route("/echo", web::post().to(echo)))
            .on_connect(|conn, _| {
                if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
                    let _ = tcp.set_nodelay(true);
                }
            })
            .workers(1)
            .bind(("127.0.0.1", port))?;
        for a in server.addrs() {
            println!("raw-echo listening on http://{a}/echo");
        }
        server.run().await
    })
}
