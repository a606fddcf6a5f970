//! Opening the ledger a configuration names: its store, its writer and its secret.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{MemoryStore, SqliteStore, Store, StoreError, Writer};
use crate::config::{LedgerBackend, RuntimeConfig};

/// Why the ledger could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The store could not be opened.
    #[error("cannot open the ledger {path}: {source}")]
    Store {
        /// The file.
        path: String,
        /// Why.
        source: StoreError,
    },
    /// The key file could not be read or created.
    #[error("ledger key file {path}: {reason}")]
    Key {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// An open ledger: the writer (and through it the store) and the secret that keys session-id
/// HMACs and cursor tags.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The writer.
    pub writer: Arc<Writer>,
    /// The secret.
    pub secret: Arc<[u8]>,
}

impl Ledger {
    /// A memory ledger with a fresh secret (in-process servers, tests).
    #[must_use]
    pub fn memory(cfg: &RuntimeConfig) -> Ledger {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let secret = cfg.cursor_secret().unwrap_or_else(|| crate::rng::bytes::<32>().to_vec());
        Ledger { writer: Writer::start(store, cfg.ledger.durability, cfg.ledger.batch_max_ops, cfg.ledger.queue_max_bytes, Duration::from_secs(cfg.ledger.sweep_every_secs)), secret: secret.into() }
    }

    /// Open what `cfg.ledger` names: the SQLite file (created if missing) and its key file
    /// (created with mode 0600 if missing), or a memory ledger.
    ///
    /// # Errors
    /// [`OpenError`] naming the file.
    pub fn open(cfg: &RuntimeConfig) -> Result<Ledger, OpenError> {
        let l = &cfg.ledger;
        if l.backend == LedgerBackend::Memory {
            return Ok(Ledger::memory(cfg));
        }
        let path = Path::new(&l.path);
        let store = SqliteStore::open(path).map_err(|source| OpenError::Store { path: l.path.clone(), source })?;
        let secret = match cfg.cursor_secret() {
            Some(s) => s,
            None => load_or_create_key(&l.key_path())?,
        };
        let store: Arc<dyn Store> = Arc::new(store);
        Ok(Ledger { writer: Writer::start(store, l.durability, l.batch_max_ops, l.queue_max_bytes, Duration::from_secs(l.sweep_every_secs)), secret: secret.into() })
    }
}

/// Read the secret from `path` (hex, first line), or create it there with 32 random bytes,
/// readable by the owner only.
///
/// # Errors
/// [`OpenError::Key`] when the file cannot be read, holds no valid key, or cannot be created.
pub fn load_or_create_key(path: &Path) -> Result<Vec<u8>, OpenError> {
    let err = |reason: String| OpenError::Key { path: path.display().to_string(), reason };
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let line = text.lines().next().unwrap_or("").trim();
            match crate::config::decode_hex(line) {
                Some(k) if k.len() >= 16 => Ok(k),
                _ => Err(err("the first line must be at least 32 hexadecimal digits".into())),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = crate::rng::bytes::<32>();
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            match opts.open(path) {
                Ok(mut f) => {
                    writeln!(f, "{}", super::codec::hex(&key)).and_then(|()| f.sync_all()).map_err(|e| err(e.to_string()))?;
                    tracing::info!(path = %path.display(), "created the ledger key file");
                    Ok(key.to_vec())
                }
                // Another process created it first: use theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create_key(path),
                Err(e) => Err(err(e.to_string())),
            }
        }
        Err(e) => Err(err(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_file_is_created_owner_only_once_and_then_reused() {
        let dir = super::super::tests_support::TempDir::new("key");
        let path = dir.path().join("l.db.key");
        let first = load_or_create_key(&path).unwrap();
        assert_eq!(first.len(), 32);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert_eq!(load_or_create_key(&path).unwrap(), first, "a restart reuses the key");
        std::fs::write(&path, "not hex\n").unwrap();
        assert!(matches!(load_or_create_key(&path), Err(OpenError::Key { .. })));
    }
}
