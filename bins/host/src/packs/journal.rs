//! A JSON-lines journal for the packs that count effects across restarts (`ledger`, `basket`):
//! one object per line, written before the tool answers (in the page cache: a kill of the
//! process keeps it). A line torn by a kill can only be the last one, whose write was never
//! answered: it is skipped on reading, and ended so the next line is whole. A journal is
//! created readable by its owner only (mode 0600), like the ledger beside it.

use std::io::{BufRead, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use serde_json::Value;

pub(crate) struct JsonlJournal(std::fs::File);

impl JsonlJournal {
    /// Open (or create) the journal at `path`, passing every whole line to `each` first.
    pub(crate) fn open(path: &Path, mut each: impl FnMut(&Value)) -> std::io::Result<JsonlJournal> {
        let mut torn = false;
        if let Ok(f) = std::fs::File::open(path) {
            for line in std::io::BufReader::new(f).split(b'\n') {
                let line = line?;
                match serde_json::from_slice::<Value>(&line) {
                    Ok(v) => {
                        each(&v);
                        torn = false;
                    }
                    Err(_) => torn = !line.is_empty(),
                }
            }
        }
        let mut f = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        if torn {
            f.write_all(b"\n")?;
        }
        Ok(JsonlJournal(f))
    }

    /// Append one line, in one write: processes appending to one journal (hosts sharing a
    /// ledger) never interleave their lines.
    pub(crate) fn append(&mut self, v: &Value) -> std::io::Result<()> {
        let mut line = v.to_string();
        line.push('\n');
        self.0.write_all(line.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_is_created_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = mcp_devtools::TempDir::new("journal-mode");
        let path = dir.path().join("l.db.appends");
        JsonlJournal::open(&path, |_| {}).unwrap().append(&serde_json::json!({"k": 1})).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
