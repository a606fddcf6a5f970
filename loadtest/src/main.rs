//! `mcp-load`: load generator with fault injection. Its content lands with the issue
//! "Resilient client, the bundled load generator with fault injection, and the release gate";
//! until then it only says so.

fn main() -> std::process::ExitCode {
    eprintln!("mcp-load: not implemented yet (see the open issue for the load generator and release gate)");
    std::process::ExitCode::from(2)
}
