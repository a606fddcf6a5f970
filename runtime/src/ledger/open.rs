//! Opening the ledger a configuration names: its store, its writer and its secret.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{MemoryStore, Op, SqliteStore, Store, StoreError, Writer, WriterSettings};
use crate::clock::Clock;
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
    /// The secret is not the one this ledger was written with.
    #[error("the ledger {path} was written with another key (ledger.key_file or security.cursor_secret_hex): its sessions cannot be read with this one")]
    KeyMismatch {
        /// The ledger file.
        path: String,
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

/// An open ledger: the writer (and through it the store), the secret that keys session-id
/// HMACs and cursor tags, the clock every record's time comes from, and this process's run.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The writer.
    pub writer: Arc<Writer>,
    /// The secret.
    pub secret: Arc<[u8]>,
    /// Secrets the ledger was written with before a rotation (`ledger.previous_key_files`).
    pub(crate) previous: Vec<Arc<[u8]>>,
    pub(crate) clock: Clock,
    /// This process's run number (one more than the previous process's on this ledger).
    pub(crate) run: u64,
    /// It outlives the process (SQLite): a session id is handed out only once its record is
    /// committed. A memory ledger dies with the process, so nothing waits for it.
    pub(crate) durable: bool,
}

/// The run counter.
const RUN_KEY: &str = "m/run";
/// The highest generation started on this ledger.
const GENERATION_KEY: &str = "m/generation";
/// Fingerprint of the secret the ledger is written with.
const KEY_FINGERPRINT: &str = "m/key";
/// How long a run's clean-stop marker is kept: longer than any session record (7 days).
const CLEAN_MARK_MS: u64 = 8 * 24 * 3_600_000;

/// A purpose-bound key derived from the ledger's secret (HMAC-SHA256 of the purpose), so one
/// secret serves cursors, session-id HMACs and the fingerprint without reuse.
pub(crate) fn derive_key(secret: &[u8], purpose: &str) -> [u8; 32] {
    use hmac::Mac as _;
    let mut m = <hmac::Hmac<sha2::Sha256>>::new_from_slice(secret).expect("hmac takes any key length");
    m.update(purpose.as_bytes());
    m.finalize().into_bytes().into()
}

fn clean_key(run: u64) -> String {
    format!("m/clean/{run}")
}

impl Ledger {
    /// A memory ledger with a fresh secret (in-process servers, tests).
    #[must_use]
    pub fn memory(cfg: &RuntimeConfig) -> Ledger {
        let secret = cfg.cursor_secret().unwrap_or_else(|| crate::rng::bytes::<32>().to_vec());
        Ledger::start(Arc::new(MemoryStore::new()), secret, Vec::new(), cfg, "memory", false).expect("a new memory store holds no other key")
    }

    fn start(store: Arc<dyn Store>, secret: Vec<u8>, previous: Vec<Vec<u8>>, cfg: &RuntimeConfig, path: &str, durable: bool) -> Result<Ledger, OpenError> {
        let clock = Clock::start();
        let now = clock.now().0;
        let err = |source| OpenError::Store { path: path.to_owned(), source };
        let fingerprint_of = |s: &[u8]| super::codec::hex(&derive_key(s, "mcp-host key fingerprint v1")[..8]);
        let fingerprint = fingerprint_of(&secret);
        match store.get(KEY_FINGERPRINT, now).map_err(err)? {
            Some(f) if f == fingerprint.as_bytes() => {}
            // Written with a previous key: rotated (the current key's fingerprint goes in below).
            Some(f) if previous.iter().any(|p| f == fingerprint_of(p).as_bytes()) => {
                tracing::info!(path, "ledger key rotated: sessions and state handles recorded under the previous key move to the current one on first use");
            }
            Some(_) => return Err(OpenError::KeyMismatch { path: path.to_owned() }),
            None => {}
        }
        let run = match store.get(RUN_KEY, now).map_err(err)? {
            Some(v) => std::str::from_utf8(&v).ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0) + 1,
            None => 1,
        };
        store
            .apply(&[
                Op::Put { key: KEY_FINGERPRINT.into(), value: fingerprint.into(), expires_ms: u64::MAX },
                Op::Put { key: RUN_KEY.into(), value: run.to_string().into(), expires_ms: u64::MAX },
            ])
            .map_err(err)?;
        let l = &cfg.ledger;
        let sweep_clock = clock;
        let settings = WriterSettings {
            durability: l.durability,
            batch_max_ops: l.batch_max_ops,
            queue_max_bytes: l.queue_max_bytes,
            sweep_every: Duration::from_secs(l.sweep_every_secs),
            linger: Duration::from_micros(l.commit_linger_us),
        };
        let writer = Writer::start(store, settings, Box::new(move || sweep_clock.now().0));
        Ok(Ledger { writer, secret: secret.into(), previous: previous.into_iter().map(Into::into).collect(), clock, run, durable })
    }

    /// Whether everything run `run` wrote reached the ledger: it is this process, or it
    /// stopped cleanly ([`Ledger::stopped_cleanly`]).
    pub(crate) fn run_complete(&self, run: u64) -> bool {
        run == self.run || self.writer.store().get(&clean_key(run), self.clock.now().0).ok().flatten().is_some()
    }

    /// The highest generation an earlier process on this ledger started (0: none).
    #[must_use]
    pub fn last_generation(&self) -> u32 {
        let v = self.writer.store().get(GENERATION_KEY, self.clock.now().0).ok().flatten();
        v.and_then(|v| std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok())).unwrap_or(0)
    }

    /// Record that generation `n` started (numbers stay unique across restarts).
    pub fn record_generation(&self, n: u32) {
        self.writer.submit(vec![Op::Put { key: GENERATION_KEY.into(), value: n.to_string().into(), expires_ms: u64::MAX }]);
    }

    /// A key for `purpose`, derived from the ledger's secret (so every node with the key file
    /// derives the same one).
    #[must_use]
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        derive_key(&self.secret, purpose)
    }

    /// The keys for `purpose` under the current secret (first: what is made now) and under
    /// each previous one (`ledger.previous_key_files`: what was made before a rotation, still
    /// read).
    pub(crate) fn derive_rotated(&self, purpose: &str) -> Vec<[u8; 32]> {
        std::iter::once(&self.secret).chain(&self.previous).map(|s| derive_key(s, purpose)).collect()
    }

    /// The id of the key cursors and session HMACs are made with: the first hex digits of its
    /// fingerprint (not secret).
    #[must_use]
    pub fn key_id(&self) -> Arc<str> {
        super::codec::hex(&derive_key(&self.secret, "mcp-host key fingerprint v1")[..4]).into()
    }

    /// Mark this run as stopped cleanly (call after the last write of the process); resolves
    /// once the mark and everything before it are committed.
    pub fn stopped_cleanly(&self) -> tokio::sync::oneshot::Receiver<()> {
        let expires_ms = self.clock.now().0.saturating_add(CLEAN_MARK_MS);
        self.writer.submit(vec![Op::Put { key: clean_key(self.run), value: bytes::Bytes::from_static(b"1"), expires_ms }]);
        self.writer.barrier()
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
        let previous = l.previous_key_files.iter().map(|p| read_key(Path::new(p))).collect::<Result<Vec<_>, _>>()?;
        Ledger::start(Arc::new(store), secret, previous, cfg, &l.path, true)
    }
}

#[cfg(test)]
impl Ledger {
    /// The SQLite ledger `dir/l.db` with `secret`, `previous` being the secrets it was
    /// written with before rotations (as `ledger.previous_key_files` lists them).
    pub(crate) fn sqlite_for_tests(dir: &mcp_devtools::TempDir, secret: &[u8], previous: &[&[u8]]) -> Ledger {
        let path = dir.path().join("l.db").display().to_string();
        let store = SqliteStore::open(Path::new(&path)).expect("a test ledger");
        Ledger::start(Arc::new(store), secret.to_vec(), previous.iter().map(|p| p.to_vec()).collect(), &RuntimeConfig::default(), &path, true).expect("a test ledger")
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
        Ok(text) => key_of(path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Written whole under a temporary name, then linked into place: a crash leaves
            // either no key file or a complete one, and of two processes starting at once the
            // second uses the first one's key.
            let key = crate::rng::bytes::<32>();
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let written = opts.open(&tmp).and_then(|mut f| writeln!(f, "{}", super::codec::hex(&key)).and_then(|()| f.sync_all()));
            let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
                        && let Ok(d) = std::fs::File::open(dir)
                    {
                        let _ = d.sync_all();
                    }
                    tracing::info!(path = %path.display(), "created the ledger key file");
                    Ok(key.to_vec())
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create_key(path),
                Err(e) => Err(err(e.to_string())),
            }
        }
        Err(e) => Err(err(e.to_string())),
    }
}

/// Read an existing key file (a previous key: never created).
fn read_key(path: &Path) -> Result<Vec<u8>, OpenError> {
    let text = std::fs::read_to_string(path).map_err(|e| OpenError::Key { path: path.display().to_string(), reason: e.to_string() })?;
    key_of(path, &text)
}

fn key_of(path: &Path, text: &str) -> Result<Vec<u8>, OpenError> {
    #[cfg(unix)]
    if let Ok(m) = std::fs::metadata(path)
        && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), "the ledger key file is readable by others than its owner (chmod 600 it)");
    }
    let line = text.lines().next().unwrap_or("").trim();
    match crate::config::decode_hex(line) {
        Some(k) if k.len() >= 16 => Ok(k),
        _ => Err(OpenError::Key { path: path.display().to_string(), reason: "the first line must be at least 32 hexadecimal digits".into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_written_with_a_previous_key_opens_with_it_listed_and_then_with_the_new_key_alone() {
        let dir = mcp_devtools::TempDir::new("key-rotate");
        let old_key = dir.path().join("old.key");
        std::fs::write(&old_key, format!("{}\n", "ab".repeat(16))).unwrap();
        drop(Ledger::open(&sqlite_cfg(&dir, &"ab".repeat(16))).unwrap());
        let mut rotated = sqlite_cfg(&dir, &"cd".repeat(16));
        assert!(matches!(Ledger::open(&rotated), Err(OpenError::KeyMismatch { .. })), "a new key alone is refused");
        rotated.ledger.previous_key_files = vec![old_key.display().to_string()];
        let l = Ledger::open(&rotated).unwrap();
        assert_eq!(l.previous.len(), 1);
        l.writer.flush_blocking();
        drop(l);
        rotated.ledger.previous_key_files.clear();
        assert!(Ledger::open(&rotated).is_ok(), "the ledger now carries the new key's fingerprint");
        rotated.ledger.previous_key_files = vec![dir.path().join("missing.key").display().to_string()];
        assert!(matches!(Ledger::open(&rotated), Err(OpenError::Key { .. })), "a listed previous key must exist");
    }

    #[test]
    fn the_key_file_is_created_owner_only_once_and_then_reused() {
        let dir = mcp_devtools::TempDir::new("key");
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

    fn sqlite_cfg(dir: &mcp_devtools::TempDir, secret: &str) -> RuntimeConfig {
        let mut cfg = RuntimeConfig::default();
        cfg.ledger.path = dir.path().join("l.db").display().to_string();
        cfg.security.cursor_secret_hex = Some(secret.into());
        cfg
    }

    #[test]
    fn a_ledger_refuses_a_key_it_was_not_written_with() {
        let dir = mcp_devtools::TempDir::new("key-mismatch");
        drop(Ledger::open(&sqlite_cfg(&dir, &"ab".repeat(16))).unwrap());
        assert!(Ledger::open(&sqlite_cfg(&dir, &"ab".repeat(16))).is_ok(), "the same key again");
        assert!(matches!(Ledger::open(&sqlite_cfg(&dir, &"cd".repeat(16))), Err(OpenError::KeyMismatch { .. })));
    }

    #[test]
    fn runs_are_numbered_and_only_a_clean_stop_marks_a_run_complete() {
        let dir = mcp_devtools::TempDir::new("runs");
        let cfg = sqlite_cfg(&dir, &"ab".repeat(16));
        let first = Ledger::open(&cfg).unwrap();
        assert!(first.run_complete(first.run), "this process's own writes");
        drop(first);
        // The first run ended without the mark (a crash).
        let second = Ledger::open(&cfg).unwrap();
        assert_eq!(second.run, 2);
        assert!(!second.run_complete(1));
        second.stopped_cleanly().blocking_recv().unwrap();
        drop(second);
        let third = Ledger::open(&cfg).unwrap();
        assert!(third.run_complete(2) && !third.run_complete(1));
    }
}
