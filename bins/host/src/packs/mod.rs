//! Tool packs the host can serve, chosen by name in the config.

mod basket;
mod conformance;
mod echo;
mod faults;
mod journal;
mod ledger;
mod soak;

use mcp_runtime::tools::CatalogBuilder;

/// The host's catalog: its packs, with the ledger and basket packs journalling beside a
/// SQLite ledger, or at `ledger.path` with a Redis one (so their duplicate counts survive
/// restarts). Their journals are opened
/// here: call it once the ledger is locked for this process.
///
/// # Errors
/// An unknown pack, a journal that does not open, a catalog that does not build.
pub(crate) fn for_host(
    packs: &[String],
    ledger: &mcp_runtime::config::LedgerConfig,
    basket_idle_ttl_secs: u64,
) -> Result<mcp_runtime::tools::Catalog, String> {
    // Beside the ledger file, or on a Redis ledger where that file would be (hosts sharing
    // one Redis ledger and one such path share the journals: their lines are appended whole).
    let beside = |ext: &str| {
        (ledger.backend != mcp_runtime::config::LedgerBackend::Memory)
            .then(|| std::path::PathBuf::from(format!("{}.{ext}", ledger.path)))
    };
    let (appends, orders) = (beside("appends"), beside("orders"));
    build(
        packs,
        &Journals { ledger: appends.as_deref(), orders: orders.as_deref() },
        basket_idle_ttl_secs,
    )?
    .build(mcp_runtime::tools::ServerInfo::new("mcp-host", env!("CARGO_PKG_VERSION")))
    .map_err(|e| e.to_string())
}

/// Where the packs that count effects journal them (none: memory only).
pub(crate) struct Journals<'a> {
    /// The `ledger` pack's applied keys.
    pub(crate) ledger: Option<&'a std::path::Path>,
    /// The `basket` pack's orders.
    pub(crate) orders: Option<&'a std::path::Path>,
}

/// The packs [`build`] knows (the config refuses another name before anything starts).
pub(crate) const KNOWN: [&str; 6] = ["conformance", "echo", "ledger", "soak", "basket", "faults"];

/// Build the catalog contents for the named packs; baskets live `basket_idle_ttl_secs` unused.
/// Their journals are opened (created) here: call it once the ledger they sit beside is
/// locked for this process.
pub(crate) fn build(
    names: &[String],
    journals: &Journals<'_>,
    basket_idle_ttl_secs: u64,
) -> Result<CatalogBuilder, String> {
    let mut b = CatalogBuilder::default();
    for n in names {
        b = b.merge(match n.as_str() {
            "conformance" => conformance::pack(),
            "echo" => echo::pack(),
            "faults" => faults::pack(),
            "ledger" => ledger::pack(journals.ledger)?,
            "soak" => soak::pack(),
            "basket" => basket::pack(basket::kind(basket_idle_ttl_secs), journals.orders)?,
            other => return Err(format!("unknown tool pack {other:?} (known: conformance, echo, ledger, soak, basket, faults)")),
        });
    }
    Ok(b)
}
