//! One tool served with the `Server` facade: `cargo run -p mcp-runtime --example one_tool`.
use mcp_runtime::Server;
use mcp_runtime::tools::{CallToolResult, CatalogBuilder, ServerInfo, ToolSpec, tool_fn};
use serde_json::{Value, json};

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    let greet = ToolSpec::new("greet", "Greets someone by name.", schema);
    let catalog = CatalogBuilder::default()
        .tool(tool_fn(greet, |args: Value, _cx| async move {
            let name = args["name"].as_str().unwrap_or("you");
            Ok(CallToolResult::text(format!("Hello, {name}!")))
        }))
        .build(ServerInfo::new("greeter", "1.0.0"))?;
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8080".into());
    // Durable by default: a SQLite ledger at ./mcp-host.db (config: Server::builder(..).config).
    let server = Server::builder(catalog).serve(addr)?;
    println!("serving on http://{}/mcp", server.addrs()[0]);
    tokio::signal::ctrl_c().await?; // Ctrl-C: drain (in-flight calls finish), then stop.
    let stopped = server.shutdown(std::time::Duration::from_secs(10)).await?;
    println!("stopped: {stopped:?}");
    Ok(())
}
