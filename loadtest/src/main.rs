//! `mcp-load`: drives MCP servers with the resilient client.
//!
//! Implemented so far: `probe`, one client against any MCP URL (connect, list tools, call a
//! tool, optionally require that the call completed through a resumed stream, DELETE).
//! The load generator, the fault-injecting proxy and the gate report are still to come.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{ClientConfig, McpClient};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(name = "mcp-load", version, about = "Drive MCP servers with the resilient client")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Connect to URL, list tools, call one, check the result; exit 1 on any failure.
    Probe {
        /// MCP endpoint URL.
        #[arg(long)]
        url: String,
        /// Tool to call.
        #[arg(long)]
        tool: String,
        /// Tool arguments (JSON object).
        #[arg(long, default_value = "{}")]
        args: String,
        /// The first text content must equal this.
        #[arg(long)]
        expect_text: Option<String>,
        /// The call must have completed through at least one GET + Last-Event-ID resume.
        #[arg(long)]
        expect_resume: bool,
    },
}

async fn probe(url: &str, tool: &str, args: Value, expect_text: Option<&str>, expect_resume: bool) -> Result<Value, String> {
    let client = McpClient::connect(ClientConfig::new(url), MemoryJournal::new(4096)).await.map_err(|e| format!("connect: {e}"))?;
    let tools = client.request("tools/list", None, true).await.map_err(|e| format!("tools/list: {e}"))?;
    let listed = tools["tools"].as_array().is_some_and(|ts| ts.iter().any(|t| t["name"] == tool));
    if !listed {
        return Err(format!("tool {tool:?} is not listed"));
    }
    let result = client.request("tools/call", Some(json!({"name": tool, "arguments": args})), false).await.map_err(|e| format!("tools/call: {e}"))?;
    let text = result["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    if let Some(want) = expect_text.filter(|w| *w != text) {
        return Err(format!("expected text {want:?}, got {text:?}"));
    }
    let stats = client.stats();
    if expect_resume && stats.resumes == 0 {
        return Err("the call completed without a resume".into());
    }
    let notifications = client.take_notifications().len();
    let deleted = client.close().await.map_err(|e| format!("DELETE: {e}"))?;
    Ok(json!({"text": text, "resumes": stats.resumes, "handshakes": stats.handshakes, "notifications": notifications, "deleted": deleted}))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Probe { url, tool, args, expect_text, expect_resume } => {
            let args: Value = match serde_json::from_str(&args) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    eprintln!("mcp-load: --args must be a JSON object");
                    return ExitCode::from(2);
                }
            };
            match actix_rt::System::new().block_on(probe(&url, &tool, args, expect_text.as_deref(), expect_resume)) {
                Ok(summary) => {
                    println!("probe ok: {summary}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("probe failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
