//! `mcp-load`: drives MCP servers with the resilient client.
//!
//! Implemented so far: `probe`, one client against any MCP URL (connect, list tools, call a
//! tool, optionally require that the call completed through a resumed stream, DELETE); and
//! `run`, fault-free load from many virtual clients with a latency report. The
//! fault-injecting proxy and the gate report are still to come.

mod proxy;
mod run;

use std::process::ExitCode;
use std::time::Duration;

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
    /// Load from many virtual clients (one session each) calling a tool mix; prints a report.
    Run {
        /// MCP endpoint URL.
        #[arg(long, required_unless_present = "spawn_host", conflicts_with = "spawn_host")]
        url: Option<String>,
        /// Start this mcp-host binary on a free port and load it.
        #[arg(long)]
        spawn_host: Option<String>,
        /// Virtual clients (sessions), each with one call in flight.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        clients: u32,
        /// Duration in seconds (1..=3600).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        /// Total calls per second across all clients (default: as fast as they complete).
        #[arg(long)]
        rate: Option<f64>,
        /// Mix entry `tool[:weight][:args-json]`, repeatable. Default: mostly `echo`, some
        /// `test_simple_text` and the 100 ms `test_tool_with_progress`.
        #[arg(long = "call")]
        calls: Vec<String>,
        /// Also write the report as JSON here.
        #[arg(long)]
        json_out: Option<String>,
        /// No progress bar.
        #[arg(long)]
        no_progress: bool,
        /// Exit non-zero if any call failed (not only when none succeeded).
        #[arg(long)]
        fail_on_error: bool,
        /// Fault: share of connections (0..=1) cut at a random point of an SSE response,
        /// after its first event with an id (the client must resume and lose nothing).
        #[arg(long, default_value_t = 0.0)]
        cut_rate: f64,
        /// Seed of the fault proxy's decisions.
        #[arg(long, default_value_t = 1)]
        seed: u64,
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

fn run_command(url: Option<String>, spawn_host: Option<String>, spec: run::RunSpec, json_out: Option<String>, fail_on_error: bool) -> ExitCode {
    let host = match spawn_host.as_deref().map(run::spawn_host) {
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            eprintln!("mcp-load: {e}");
            return ExitCode::from(2);
        }
        None => None,
    };
    let url = host.as_ref().map(|h| h.url.clone()).or(url).unwrap_or_default();
    match actix_rt::System::new().block_on(run::run(run::RunSpec { url, ..spec })) {
        Ok(report) => {
            run::print_table(&report);
            let written = json_out.map(|p| std::fs::write(&p, serde_json::to_vec_pretty(&report).unwrap_or_default()).map_err(|e| format!("cannot write {p}: {e}")));
            if let Some(Err(e)) = written {
                eprintln!("mcp-load: {e}");
                return ExitCode::from(2);
            }
            let failed = report["calls_failed"].as_u64().unwrap_or(0);
            if report["calls_ok"].as_u64() == Some(0) || (fail_on_error && failed > 0) { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        Err(e) => {
            eprintln!("mcp-load: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { url, spawn_host, clients, seconds, rate, calls, json_out, no_progress, fail_on_error, cut_rate, seed } => {
            let calls = if calls.is_empty() {
                vec!["echo:8:{\"text\":\"load\"}".to_owned(), "test_simple_text:1".to_owned(), "test_tool_with_progress:1".to_owned()]
            } else {
                calls
            };
            let mix = match run::parse_mix(&calls) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("mcp-load: {e}");
                    return ExitCode::from(2);
                }
            };
            if !(0.0..=1.0).contains(&cut_rate) {
                eprintln!("mcp-load: --cut-rate must be between 0 and 1");
                return ExitCode::from(2);
            }
            let faults = (cut_rate > 0.0).then_some(proxy::FaultPlan { cut_rate, seed });
            let spec = run::RunSpec { url: String::new(), clients: clients as usize, duration: Duration::from_secs(seconds), rate, mix, progress: !no_progress, faults };
            run_command(url, spawn_host, spec, json_out, fail_on_error)
        }
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
