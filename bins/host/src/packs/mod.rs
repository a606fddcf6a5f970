//! Tool packs the host can serve, chosen by name in the config.

mod conformance;
mod echo;
mod ledger;
mod soak;

use mcp_runtime::tools::CatalogBuilder;

/// Build the catalog contents for the named packs.
/// `journal`: where the `ledger` pack journals its writes (none: memory only).
pub(crate) fn build(names: &[String], journal: Option<&std::path::Path>) -> Result<CatalogBuilder, String> {
    let mut b = CatalogBuilder::default();
    for n in names {
        b = b.merge(match n.as_str() {
            "conformance" => conformance::pack(),
            "echo" => echo::pack(),
            "ledger" => ledger::pack(journal)?,
            "soak" => soak::pack(),
            other => return Err(format!("unknown tool pack {other:?} (known: conformance, echo, ledger, soak)")),
        });
    }
    Ok(b)
}
