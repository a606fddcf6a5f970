//! `mcp-host --check`: whether a host with this configuration could open its ledger.

/// Print what the ledger holds for this configuration and exit 0 when a host could open it;
/// else say why and exit 2 (see `Ledger::check` for what it touches).
pub(crate) fn ledger(cfg: &mcp_runtime::config::ValidConfig) -> std::process::ExitCode {
    match mcp_runtime::ledger::Ledger::check(cfg) {
        Ok(found) => {
            found.iter().for_each(|l| println!("{l}"));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mcp-host: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
