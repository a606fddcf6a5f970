//! `--stats-every-ms`: a `stats {json}` line on stdout now and then (tests and mcp-load read it).

use std::io::Write as _;
use std::time::Duration;

use mcp_runtime::server::Control;

/// Print the figures every `every`, on a thread of its own: a reader that stops reading
/// blocks this writer only, never the arbiter that runs the stop signal and the trim timer.
/// It ends at its first tick after the server is gone, or when stdout is closed.
///
/// # Errors
/// The thread could not be started.
pub(crate) fn print_every(server: Control, every: Duration) -> std::io::Result<()> {
    std::thread::Builder::new().name("stats".into()).spawn(move || {
        loop {
            std::thread::sleep(every);
            let Some(s) = server.stats() else { return };
            let line = serde_json::to_string(&s).unwrap_or_default();
            // A reader that went away must not stop the server.
            if writeln!(std::io::stdout(), "stats {line}").is_err() {
                return;
            }
        }
    })?;
    Ok(())
}
