//! Opening the ledger a configuration names: its store, its writer and its secret.
//!
//! Refusals at open write nothing to the files they are about: a ledger locked by another
//! process, a file that is not a ledger or is a newer release's (see `sqlite.rs`), a key file
//! that is a symbolic link, or that others than its owner may read (unless allowed).

use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "sqlite")]
use super::SqliteStore;
use super::files;
use super::{MemoryStore, Op, Store, StoreError, Writer, WriterSettings};
use crate::clock::Clock;
use crate::config::{LedgerBackend, RuntimeConfig};

/// Why the ledger could not be opened. Each names the file; none left a change in it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Another host holds the Redis ledger's lease (one host per Redis ledger for now).
    #[error(
        "the Redis ledger {url} is in use by another mcp-host ({holder}); one host writes a Redis ledger at a time for now (it waited for the lease to lapse)"
    )]
    Held {
        /// The server (without its password).
        url: String,
        /// What the holder wrote: `host:pid:token`.
        holder: String,
    },
    /// This build has no Redis store (the `redis` feature is off).
    #[error("cannot open the ledger {url}: built without the `redis` feature")]
    NoRedis {
        /// The server asked for (without its password).
        url: String,
    },
    /// This build has no SQLite store (the `sqlite` feature is off).
    #[error(
        "cannot open the ledger {path}: built without the `sqlite` feature (use the memory ledger)"
    )]
    NoSqlite {
        /// The file asked for.
        path: String,
    },
    /// The store could not be opened.
    #[error("cannot open the ledger {path}: {source}")]
    Store {
        /// The file.
        path: String,
        /// Why.
        source: StoreError,
    },
    /// Another process holds the ledger's lock file (`<path>.lock`).
    #[error("the ledger {path} is in use by another mcp-host ({}); one ledger serves one process", holder(*.holder_pid))]
    Locked {
        /// The ledger file.
        path: String,
        /// The pid the holder wrote into the lock file, when it could be read.
        holder_pid: Option<u32>,
    },
    /// The file is not a ledger: another application's file, or not SQLite at all.
    #[error("{path} is not an mcp-host ledger ({reason}); it was left untouched")]
    NotALedger {
        /// The file.
        path: String,
        /// What it is instead.
        reason: String,
    },
    /// The ledger was written by a newer release.
    #[error(
        "the ledger {path} was written by a newer mcp-host (schema {found}); it was left untouched"
    )]
    Newer {
        /// The file.
        path: String,
        /// Its schema.
        found: String,
    },
    /// A file of the ledger (the database, its lock file) could not be created or read.
    #[error("ledger file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The secret is not the one this ledger was written with.
    #[error(
        "the ledger {path} was written with another key (its fingerprint {recorded}; this process's key: {ours}; ledger.key_file or security.cursor_secret_hex): its sessions cannot be read with this one, and every host sharing a ledger needs the same key"
    )]
    KeyMismatch {
        /// The ledger (file or server).
        path: String,
        /// The fingerprint the ledger records.
        recorded: String,
        /// This process's key's fingerprint.
        ours: String,
    },
    /// A key (or token) file that others than its owner may read or write.
    #[error(
        "{path} is readable by others than its owner (mode {mode:o}): chmod 600 it, or start with --allow-insecure-key (ledger.allow_insecure_key)"
    )]
    InsecureKey {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A key (or token) file path that is a symbolic link: a secret is never read or written
    /// through one.
    #[error(
        "{path} is a symbolic link: a secret is never read or written through one (put the file itself there)"
    )]
    KeySymlink {
        /// The path.
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

fn holder(pid: Option<u32>) -> String {
    pid.map_or_else(|| "its pid is not written yet".to_owned(), |p| format!("pid {p}"))
}

/// An open ledger: the writer (and through it the store), the secret that keys session-id
/// HMACs and cursor tags, the clock every record's time comes from, and this process's run.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The writer.
    pub writer: Arc<Writer>,
    /// The readers: store reads of the async shells run there, never on an HTTP worker.
    pub reads: Arc<super::Reads>,
    /// The secret.
    pub secret: Arc<[u8]>,
    /// Secrets the ledger was written with before a rotation (`ledger.previous_key_files`).
    pub(crate) previous: Vec<Arc<[u8]>>,
    pub(crate) clock: Clock,
    /// This process's run number (one more than the previous process's on this ledger).
    pub(crate) run: u64,
    /// It outlives the process (SQLite, Redis): a session id is handed out only once its record
    /// is committed. A memory ledger dies with the process, so nothing waits for it.
    pub(crate) durable: bool,
    /// Other hosts serve it too (a shared Redis ledger): what one host decides alone
    /// otherwise (an idempotency key's execution) is claimed in the store first.
    pub(crate) shared: bool,
    /// A host's lease on a shared ledger (ms; 0: not shared): a lock across hosts outlives
    /// it, so a host paused past its lease is fenced before its locks lapse.
    pub(crate) lease_ms: u64,
    /// Set once this host lost its lease on a shared ledger ([`Ledger::lease_lost`]).
    lease_lost: Arc<tokio::sync::watch::Sender<bool>>,
    /// How long this host's lease on a shared ledger is known to hold (`None`: not shared).
    lease_clock: Option<Arc<super::lease::LeaseClock>>,
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
    let mut m =
        <hmac::Hmac<sha2::Sha256>>::new_from_slice(secret).expect("hmac takes any key length");
    m.update(purpose.as_bytes());
    m.finalize().into_bytes().into()
}

/// How a ledger's recorded key fingerprint stands to this process's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyMatch {
    /// It records none yet.
    None,
    /// The current key's.
    Current,
    /// A previous key's (`ledger.previous_key_files`): a rotation.
    Previous,
}

/// Compare the fingerprint the ledger at `path` records with `secret` and the `previous` ones.
///
/// # Errors
/// [`OpenError::KeyMismatch`] naming both fingerprints.
fn key_matches(
    recorded: Option<&[u8]>,
    secret: &[u8],
    previous: &[Vec<u8>],
    path: &str,
) -> Result<KeyMatch, OpenError> {
    let ours = fingerprint_of(secret);
    match recorded {
        None => Ok(KeyMatch::None),
        Some(f) if f == ours.as_bytes() => Ok(KeyMatch::Current),
        Some(f) if previous.iter().any(|p| f == fingerprint_of(p).as_bytes()) => {
            Ok(KeyMatch::Previous)
        }
        Some(f) => Err(OpenError::KeyMismatch {
            path: path.to_owned(),
            recorded: String::from_utf8_lossy(f).into_owned(),
            ours,
        }),
    }
}

/// The fingerprint a ledger records of the secret it is written with (not secret).
fn fingerprint_of(secret: &[u8]) -> String {
    super::codec::hex(&derive_key(secret, "mcp-host key fingerprint v1")[..8])
}

fn clean_key(run: u64) -> String {
    format!("m/clean/{run}")
}

impl Ledger {
    /// How long a claim or lock that another host may take over holds on a shared ledger, at
    /// least `floor_ms`: past twice this host's lease and a second, so a host paused while
    /// holding one is fenced (its writes refused) before another host can take it and act.
    #[must_use]
    pub(crate) fn hold_ms(&self, floor_ms: u64) -> u64 {
        self.lease_ms.saturating_mul(2).saturating_add(1_000).max(floor_ms)
    }

    /// A ledger over `store` (an embedder's own store, or a test's), with the configured
    /// secret or a fresh one; like a memory ledger, a new session's id is not held back for
    /// its record.
    ///
    /// # Errors
    /// [`OpenError::Store`] when `store` cannot be read or written.
    pub fn on_store(store: Arc<dyn Store>, cfg: &RuntimeConfig) -> Result<Ledger, OpenError> {
        let secret = cfg.cursor_secret().unwrap_or_else(|| crate::rng::bytes::<32>().to_vec());
        Ledger::start(store, secret, Vec::new(), cfg, "(custom store)", false, &|_| Ok(()))
    }

    /// A memory ledger with a fresh secret (in-process servers, tests).
    #[must_use]
    pub fn memory(cfg: &RuntimeConfig) -> Ledger {
        let secret = cfg.cursor_secret().unwrap_or_else(|| crate::rng::bytes::<32>().to_vec());
        Ledger::start(
            Arc::new(MemoryStore::new()),
            secret,
            Vec::new(),
            cfg,
            "memory",
            false,
            &|_| Ok(()),
        )
        .expect("a new memory store holds no other key")
    }

    fn start(
        store: Arc<dyn Store>,
        secret: Vec<u8>,
        previous: Vec<Vec<u8>>,
        cfg: &RuntimeConfig,
        path: &str,
        durable: bool,
        on_run: &dyn Fn(u64) -> Result<(), OpenError>,
    ) -> Result<Ledger, OpenError> {
        let clock = Clock::start();
        let now = clock.now().0;
        let err = |source| OpenError::Store { path: path.to_owned(), source };
        let recorded = store.get(KEY_FINGERPRINT, now).map_err(err)?;
        let fingerprint = fingerprint_of(&secret);
        if key_matches(recorded.as_deref(), &secret, &previous, path)? == KeyMatch::Previous {
            tracing::info!(
                path,
                "ledger key rotated: sessions and state handles recorded under the previous key move to the current one on first use"
            );
        }
        // Counted, not read and written: hosts starting at once on a shared ledger get
        // different runs.
        let run = store.incr(RUN_KEY, 0, u64::MAX, now).map_err(err)?;
        on_run(run)?;
        store
            .apply(&[Op::Put {
                key: KEY_FINGERPRINT.into(),
                value: fingerprint.into(),
                expires_ms: u64::MAX,
            }])
            .map_err(err)?;
        let l = &cfg.ledger;
        let sweep_clock = clock;
        let settings = WriterSettings {
            durability: l.durability,
            batch_max_ops: l.batch_max_ops,
            queue_max_bytes: l.queue_max_bytes,
            sweep_every: Duration::from_secs(l.sweep_every_secs),
            linger: Duration::from_micros(l.commit_linger_us),
            commit_wait: Duration::from_millis(l.commit_wait_ms),
        };
        let reads = super::Reads::start(&store);
        let writer = Writer::start(store, settings, Box::new(move || sweep_clock.now().0));
        Ok(Ledger {
            writer,
            reads,
            secret: secret.into(),
            previous: previous.into_iter().map(Into::into).collect(),
            clock,
            run,
            durable,
            shared: false,
            lease_ms: 0,
            lease_lost: Arc::new(tokio::sync::watch::Sender::new(false)),
            lease_clock: None,
        })
    }

    /// Whether this host's lease on a shared ledger may have lapsed: its last successful
    /// renewal was sent more than a lease ago (the process was paused or cut off), or a
    /// renewal found it gone. Another host may have taken its sessions over, so it must
    /// answer nothing new from what it holds (it stops as soon as its renewer notices:
    /// [`Ledger::lease_lost`]). Always `false` on a ledger only this process uses.
    #[must_use]
    pub fn lease_lapsed(&self) -> bool {
        self.lease_clock.as_ref().is_some_and(|c| !c.holds_at(tokio::time::Instant::now()))
    }

    /// Resolves once this host lost its lease on a shared ledger (paused, or cut off from
    /// Redis, for longer than `ledger.redis_lease_ms`); never on a ledger only this process
    /// uses. Its writes are refused from then on, and what it holds in memory may have been
    /// taken over by another host (a stream answered "restarted" there, a task cancelled):
    /// answering from it could answer a request twice, so the process must stop at once,
    /// without a drain, as a crash does (what it held is in the ledger); `mcp-host` exits
    /// with [`LEASE_LOST_EXIT`]. Its supervisor starts it again under a new run.
    pub fn lease_lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut lost = self.lease_lost.subscribe();
        async move {
            if lost.wait_for(|l| *l).await.is_err() {
                // The ledger is gone (a stop): never lost.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Whether everything run `run` wrote reached the ledger: it is this process, or it
    /// stopped cleanly ([`Ledger::stopped_cleanly`]).
    #[cfg(test)]
    pub(crate) fn run_complete(&self, run: u64) -> bool {
        run == self.run
            || self.writer.store().get(&clean_key(run), self.clock.now().0).ok().flatten().is_some()
    }

    /// [`Ledger::run_complete`] on `store` (for a read already on a reader thread): `this_run`
    /// is this process's run.
    pub(crate) fn run_complete_in(store: &dyn Store, this_run: u64, run: u64, now_ms: u64) -> bool {
        run == this_run || store.get(&clean_key(run), now_ms).ok().flatten().is_some()
    }

    /// The highest generation an earlier process on this ledger started (0: none).
    #[must_use]
    pub fn last_generation(&self) -> u32 {
        let v = self.writer.store().get(GENERATION_KEY, self.clock.now().0).ok().flatten();
        v.and_then(|v| std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok())).unwrap_or(0)
    }

    /// Record that generation `n` started (numbers stay unique across restarts).
    pub fn record_generation(&self, n: u32) {
        self.writer.submit(vec![Op::Put {
            key: GENERATION_KEY.into(),
            value: n.to_string().into(),
            expires_ms: u64::MAX,
        }]);
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
        std::iter::once(&self.secret)
            .chain(&self.previous)
            .map(|s| derive_key(s, purpose))
            .collect()
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
        self.writer.submit(vec![Op::Put {
            key: clean_key(self.run),
            value: bytes::Bytes::from_static(b"1"),
            expires_ms,
        }]);
        self.writer.barrier()
    }

    /// Open what `cfg.ledger` names: the SQLite file (created with mode 0600 if missing,
    /// locked for this process) and its key file (created with mode 0600 if missing), or a
    /// memory ledger.
    ///
    /// # Errors
    /// [`OpenError`] naming the file.
    pub fn open(cfg: &RuntimeConfig) -> Result<Ledger, OpenError> {
        match cfg.ledger.backend {
            LedgerBackend::Memory => Ok(Ledger::memory(cfg)),
            LedgerBackend::Sqlite => Ledger::open_sqlite(cfg),
            LedgerBackend::Redis => Ledger::open_redis(cfg),
        }
    }

    /// Check that the ledger `cfg.ledger` names can be opened by this configuration, writing
    /// nothing to a Redis ledger and creating no file (a key file is read, never made; a
    /// SQLite file that exists is opened as a host opens it, its lock taken for the moment, a
    /// missing one is not created): the store answers, and the key (the configured one, or the key
    /// file's) is the one the ledger records (or it records none yet). Returns what was found,
    /// a line each (for `mcp-host --check`).
    ///
    /// # Errors
    /// [`OpenError`]: the store cannot be reached or opened ([`OpenError::Locked`] for a SQLite
    /// file another process holds), or [`OpenError::KeyMismatch`].
    pub fn check(cfg: &RuntimeConfig) -> Result<Vec<String>, OpenError> {
        let l = &cfg.ledger;
        let (store, shown): (Arc<dyn Store>, String) = match l.backend {
            LedgerBackend::Memory => return Ok(vec!["ledger: memory (nothing kept)".into()]),
            LedgerBackend::Sqlite => {
                if !Path::new(&l.path).exists() {
                    return Ok(vec![format!(
                        "ledger: {} does not exist yet (a first start creates it)",
                        l.path
                    )]);
                }
                (Ledger::check_sqlite(cfg)?, l.path.clone())
            }
            LedgerBackend::Redis => Ledger::check_redis(cfg)?,
        };
        let mut found = vec![format!("ledger: {shown} answers")];
        let now = Clock::start().now().0;
        let err = |source| OpenError::Store { path: shown.clone(), source };
        let recorded = store.get(KEY_FINGERPRINT, now).map_err(err)?;
        let secret = match cfg.cursor_secret() {
            Some(s) => Some(s),
            None => read_existing(&l.key_path(), l.allow_insecure_key)?,
        };
        let previous = l
            .previous_key_files
            .iter()
            .map(|p| read_key(Path::new(p), l.allow_insecure_key))
            .collect::<Result<Vec<_>, _>>()?;
        match (secret, recorded.as_deref()) {
            (Some(secret), r) => found.push(match key_matches(r, &secret, &previous, &shown)? {
                KeyMatch::None => {
                    "key: the ledger records none yet (a first start writes this host's)".into()
                }
                KeyMatch::Current => format!(
                    "key: fingerprint {}, the one the ledger records",
                    fingerprint_of(&secret)
                ),
                KeyMatch::Previous => format!(
                    "key: a previous key's fingerprint is recorded; a start rotates to {}",
                    fingerprint_of(&secret)
                ),
            }),
            (None, None) => found.push(
                "key: no key file yet, and the ledger records none yet (a first start writes both)"
                    .into(),
            ),
            (None, Some(r)) => {
                return Err(OpenError::Key {
                    path: l.key_path().display().to_string(),
                    reason: format!(
                        "no such file, and the ledger records key fingerprint {}: copy the key file of the hosts that wrote it",
                        String::from_utf8_lossy(r)
                    ),
                });
            }
        }
        if let Some(run) = store.get(RUN_KEY, now).map_err(err)? {
            found.push(format!("runs: {} so far", String::from_utf8_lossy(&run)));
        }
        Ok(found)
    }

    #[cfg(feature = "sqlite")]
    fn check_sqlite(cfg: &RuntimeConfig) -> Result<Arc<dyn Store>, OpenError> {
        Ok(Arc::new(SqliteStore::open_with(Path::new(&cfg.ledger.path), checkpointing(cfg))?))
    }

    #[cfg(not(feature = "sqlite"))]
    fn check_sqlite(cfg: &RuntimeConfig) -> Result<Arc<dyn Store>, OpenError> {
        Err(OpenError::NoSqlite { path: cfg.ledger.path.clone() })
    }

    #[cfg(feature = "redis")]
    fn check_redis(cfg: &RuntimeConfig) -> Result<(Arc<dyn Store>, String), OpenError> {
        let (store, shown) = Ledger::redis_store(cfg)?;
        let about =
            store.about().map_err(|source| OpenError::Store { path: shown.clone(), source })?;
        Ok((Arc::new(store), format!("{shown} ({about})")))
    }

    /// The Redis store `ledger.redis_url` names (over TLS with `ledger.redis_tls_*`), and the
    /// URL as messages show it.
    #[cfg(feature = "redis")]
    fn redis_store(cfg: &RuntimeConfig) -> Result<(super::RedisStore, String), OpenError> {
        let l = &cfg.ledger;
        let shown = redacted(&l.redis_url);
        let err = |source| OpenError::Store { path: shown.clone(), source };
        // Both or neither (checked by `RuntimeConfig::validate`). The key is a secret: read
        // with the key file's checks; the certificate is public.
        let client = match (&l.redis_tls_cert_file, &l.redis_tls_key_file) {
            (Some(cert), Some(key)) => {
                let key = read_private(Path::new(key), l.allow_insecure_key, TLS_KEY_MAX_BYTES)?
                    .ok_or_else(|| OpenError::Key {
                        path: key.clone(),
                        reason: "no such file".into(),
                    })?;
                let cert = std::fs::read(cert).map_err(|e| {
                    err(super::StoreError::Backend(format!(
                        "redis: cannot read the TLS client certificate file {cert}: {e}"
                    )))
                })?;
                Some((cert, key))
            }
            _ => None,
        };
        let tls = super::redis::Tls {
            ca_file: l.redis_tls_ca_file.clone(),
            client,
            password: l.redis_password.as_deref().map(str::to_owned),
        };
        let timeout = Duration::from_millis(l.redis_timeout_ms);
        let store = super::RedisStore::open_tls(&l.redis_url, &tls, &l.redis_prefix, timeout)
            .map_err(err)?
            .with_bus_retry(Duration::from_millis(l.redis_bus_retry_ms));
        Ok((store, shown))
    }

    #[cfg(not(feature = "redis"))]
    fn check_redis(cfg: &RuntimeConfig) -> Result<(Arc<dyn Store>, String), OpenError> {
        Err(OpenError::NoRedis { url: redacted(&cfg.ledger.redis_url) })
    }

    /// The secret (the configured one, or the key file's, created if missing) and the
    /// previous ones.
    fn secrets(cfg: &RuntimeConfig) -> Result<(Vec<u8>, Vec<Vec<u8>>), OpenError> {
        let l = &cfg.ledger;
        let secret = match cfg.cursor_secret() {
            Some(s) => s,
            None => load_or_create_key(&l.key_path(), l.allow_insecure_key)?,
        };
        let previous = l
            .previous_key_files
            .iter()
            .map(|p| read_key(Path::new(p), l.allow_insecure_key))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((secret, previous))
    }

    /// The Redis ledger `ledger.redis_url` names (its keys under `ledger.redis_prefix`). More
    /// than one host may share it; each needs the same key (a host whose key differs from the
    /// one the ledger records refuses to start).
    #[cfg(feature = "redis")]
    fn open_redis(cfg: &RuntimeConfig) -> Result<Ledger, OpenError> {
        let l = &cfg.ledger;
        let (store, shown) = Ledger::redis_store(cfg)?;
        let holder = format!("{}:{}", host_name(), std::process::id());
        let ttl = Duration::from_millis(l.redis_lease_ms);
        let held = |e| match e {
            super::redis::LeaseError::Held { holder } => {
                OpenError::Held { url: shown.clone(), holder }
            }
            super::redis::LeaseError::Store(source) => {
                OpenError::Store { path: shown.clone(), source }
            }
        };
        let store = Arc::new(store);
        if !l.redis_shared {
            // One writer at a time: the lease fences every batch (a host paused past it cannot
            // write after another took it), and a restarted host waits for its predecessor's
            // to lapse.
            store.take_lease(&holder, ttl).map_err(held)?;
        }
        let (secret, previous) = Ledger::secrets(cfg)?;
        let own = Arc::clone(&store);
        let lost_tx = Arc::new(tokio::sync::watch::Sender::new(false));
        let lost_in_run = Arc::clone(&lost_tx);
        let clock = Arc::new(super::lease::LeaseClock::new());
        let clock_in_run = Arc::clone(&clock);
        // Shared: each host holds a lease of its own run, taken before its first write and
        // fencing every batch; the other hosts read it to know whether this one is alive.
        let on_run = move |run| {
            if !l.redis_shared {
                return Ok(());
            }
            // Its writes are refused from now on (fenced); what it holds may have been taken
            // over, so its process must stop (see `Ledger::lease_lost`).
            let lost = Arc::clone(&lost_in_run);
            let lost = Box::new(move || {
                tracing::error!(
                    "this host lost its lease on the shared ledger: its writes are refused, it must stop (start it again to rejoin)"
                );
                lost.send_replace(true);
            });
            own.take_run_lease(run, &holder, ttl, lost, Arc::clone(&clock_in_run)).map_err(held)
        };
        let mut ledger = Ledger::start(store, secret, previous, cfg, &shown, true, &on_run)?;
        ledger.lease_lost = lost_tx;
        ledger.lease_clock = l.redis_shared.then_some(clock);
        ledger.shared = l.redis_shared;
        ledger.lease_ms = if l.redis_shared { l.redis_lease_ms } else { 0 };
        Ok(ledger)
    }

    #[cfg(not(feature = "redis"))]
    fn open_redis(cfg: &RuntimeConfig) -> Result<Ledger, OpenError> {
        Err(OpenError::NoRedis { url: redacted(&cfg.ledger.redis_url) })
    }

    #[cfg(feature = "sqlite")]
    fn open_sqlite(cfg: &RuntimeConfig) -> Result<Ledger, OpenError> {
        let l = &cfg.ledger;
        let store = SqliteStore::open_with(Path::new(&l.path), checkpointing(cfg))?;
        let (secret, previous) = Ledger::secrets(cfg)?;
        Ledger::start(Arc::new(store), secret, previous, cfg, &l.path, true, &|_| Ok(()))
    }

    #[cfg(not(feature = "sqlite"))]
    fn open_sqlite(cfg: &RuntimeConfig) -> Result<Ledger, OpenError> {
        Err(OpenError::NoSqlite { path: cfg.ledger.path.clone() })
    }
}

/// When the SQLite ledger's log is checkpointed, as the configuration says.
#[cfg(feature = "sqlite")]
fn checkpointing(cfg: &RuntimeConfig) -> super::Checkpointing {
    let l = &cfg.ledger;
    super::Checkpointing {
        pages: u32::try_from(l.checkpoint_pages).unwrap_or(u32::MAX),
        every: Duration::from_millis(l.checkpoint_every_ms),
    }
}

#[cfg(test)]
impl Ledger {
    /// The SQLite ledger `dir/l.db` with `secret`, `previous` being the secrets it was
    /// written with before rotations (as `ledger.previous_key_files` lists them).
    pub(crate) fn sqlite_for_tests(
        dir: &mcp_devtools::TempDir,
        secret: &[u8],
        previous: &[&[u8]],
    ) -> Ledger {
        let path = dir.path().join("l.db").display().to_string();
        let store = SqliteStore::open(Path::new(&path)).expect("a test ledger");
        Ledger::start(
            Arc::new(store),
            secret.to_vec(),
            previous.iter().map(|p| p.to_vec()).collect(),
            &RuntimeConfig::default(),
            &path,
            true,
            &|_| Ok(()),
        )
        .expect("a test ledger")
    }
}

/// The exit status of a host that lost its lease on a shared Redis ledger.
pub const LEASE_LOST_EXIT: i32 = 3;

/// This machine's name (for a lease holder's description), or `host`.
#[cfg(feature = "redis")]
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into())
}

/// `url` without its password (`redis://user:***@host:port/db`) and without its query (where
/// a `pass=` may sit), for messages, logs and `/admin/status`.
#[must_use]
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return "(not a URL)".to_owned() };
    let no_query = |s: &str| s.split(['?', '#']).next().unwrap_or_default().to_owned();
    // The user info ends at the last `@` (a password may hold `@`, `/`, `?` or `:`); a user
    // name that is not one (an `@` in a query) is hidden whole.
    match rest.rsplit_once('@') {
        Some((info, host)) => {
            let user = info.split(':').next().unwrap_or_default();
            let host = no_query(host);
            if user.contains(['/', '?', '#']) {
                format!("{scheme}://***@{host}")
            } else if info.contains(':') {
                format!("{scheme}://{user}:***@{host}")
            } else {
                format!("{scheme}://{user}@{host}")
            }
        }
        None => format!("{scheme}://{}", no_query(rest)),
    }
}

/// Read the secret from `path` (hex, first line), or create it there with 32 random bytes,
/// readable by the owner only (written whole under a random temporary name, then linked
/// into place: a crash leaves no half-written key, and of two processes starting at once the
/// second uses the first one's key). A symbolic link at `path` is refused, never followed;
/// so is a file others may read unless `allow_insecure` (then it is a warning).
///
/// # Errors
/// [`OpenError::KeySymlink`], [`OpenError::InsecureKey`]; [`OpenError::Key`] when the file
/// cannot be read, holds no valid key, or cannot be created.
pub fn load_or_create_key(path: &Path, allow_insecure: bool) -> Result<Vec<u8>, OpenError> {
    if let Some(key) = read_existing(path, allow_insecure)? {
        return Ok(key);
    }
    let key = crate::rng::bytes::<32>();
    match files::create_whole(path, &format!("{}\n", super::codec::hex(&key))) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "created the key file");
            Ok(key.to_vec())
        }
        // Another process created it first (or a symbolic link appeared there): read that.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(path, allow_insecure),
        Err(e) => Err(OpenError::Key { path: path.display().to_string(), reason: e.to_string() }),
    }
}

/// Read an existing key file (a previous key: never created).
fn read_key(path: &Path, allow_insecure: bool) -> Result<Vec<u8>, OpenError> {
    read_existing(path, allow_insecure)?.ok_or_else(|| OpenError::Key {
        path: path.display().to_string(),
        reason: "no such file".into(),
    })
}

/// The key in the file at `path`; `None` when there is no file ([`read_private`]'s checks).
fn read_existing(path: &Path, allow_insecure: bool) -> Result<Option<Vec<u8>>, OpenError> {
    let Some(bytes) = read_private(path, allow_insecure, files::SECRET_MAX_BYTES)? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().next().unwrap_or("").trim();
    match crate::config::decode_hex(line) {
        Some(k) if k.len() >= 16 => Ok(Some(k)),
        _ => Err(OpenError::Key {
            path: path.display().to_string(),
            reason: "the first line must be at least 32 hexadecimal digits".into(),
        }),
    }
}

/// At most `max` bytes of the secret file at `path` (a key, a token, a TLS client key);
/// `None` when there is no file. Refused: a symbolic link, not a regular file, or a file
/// others than its owner may read unless `allow_insecure` (then a warning). The checks run
/// on the open file itself (no race between checking a path and reading it).
fn read_private(path: &Path, allow_insecure: bool, max: u64) -> Result<Option<Vec<u8>>, OpenError> {
    let name = || path.display().to_string();
    let err = |reason: String| OpenError::Key { path: name(), reason };
    let f = match files::open_no_follow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if files::is_symlink(&e) => return Err(OpenError::KeySymlink { path: name() }),
        Err(e) => return Err(err(e.to_string())),
    };
    if !f.metadata().map_err(|e| err(e.to_string()))?.is_file() {
        return Err(err("not a regular file".into()));
    }
    match files::mode_of(&f).map_err(|e| err(e.to_string()))? {
        (mode, true) if !allow_insecure => {
            return Err(OpenError::InsecureKey { path: name(), mode });
        }
        (mode, true) => {
            tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "a secret file is readable by others than its owner (allowed by --allow-insecure-key; chmod 600 it)")
        }
        (_, false) => {}
    }
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes).map_err(|e| err(e.to_string()))?;
    Ok(Some(bytes))
}

/// Largest TLS client key file read (PEM; an 8192-bit RSA key is about 6.5 KiB).
#[cfg(feature = "redis")]
const TLS_KEY_MAX_BYTES: u64 = 64 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_written_with_a_previous_key_opens_with_it_listed_and_then_with_the_new_key_alone() {
        let dir = mcp_devtools::TempDir::new("key-rotate");
        let old_key = dir.path().join("old.key");
        write_key(&old_key, &"ab".repeat(16), 0o600);
        drop(Ledger::open(&sqlite_cfg(&dir, &"ab".repeat(16))).unwrap());
        let mut rotated = sqlite_cfg(&dir, &"cd".repeat(16));
        assert!(
            matches!(Ledger::open(&rotated), Err(OpenError::KeyMismatch { .. })),
            "a new key alone is refused"
        );
        rotated.ledger.previous_key_files = vec![old_key.display().to_string()];
        let l = Ledger::open(&rotated).unwrap();
        assert_eq!(l.previous.len(), 1);
        l.writer.flush_blocking();
        drop(l);
        rotated.ledger.previous_key_files.clear();
        assert!(Ledger::open(&rotated).is_ok(), "the ledger now carries the new key's fingerprint");
        rotated.ledger.previous_key_files =
            vec![dir.path().join("missing.key").display().to_string()];
        assert!(
            matches!(Ledger::open(&rotated), Err(OpenError::Key { .. })),
            "a listed previous key must exist"
        );
    }

    fn write_key(path: &Path, hex: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(path, format!("{hex}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_key_file_is_created_owner_only_once_and_then_reused() {
        let dir = mcp_devtools::TempDir::new("key");
        let path = dir.path().join("l.db.key");
        let first = load_or_create_key(&path, false).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(files::mode_of(&std::fs::File::open(&path).unwrap()).unwrap(), (0o600, false));
        assert_eq!(load_or_create_key(&path, false).unwrap(), first, "a restart reuses the key");
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["l.db.key"], "no temporary file is left");
        write_key(&path, "not hex", 0o600);
        assert!(matches!(load_or_create_key(&path, false), Err(OpenError::Key { .. })));
    }

    #[test]
    fn a_key_file_readable_by_others_is_refused_unless_allowed() {
        let dir = mcp_devtools::TempDir::new("key-insecure");
        let path = dir.path().join("l.db.key");
        write_key(&path, &"ab".repeat(16), 0o644);
        match load_or_create_key(&path, false) {
            Err(e @ OpenError::InsecureKey { mode: 0o644, .. }) => {
                assert!(e.to_string().contains("chmod 600"), "{e}")
            }
            other => panic!("expected InsecureKey, got {other:?}"),
        }
        assert_eq!(
            load_or_create_key(&path, true).unwrap(),
            vec![0xab; 16],
            "allowed: read as before"
        );
        // A previous key of a rotation too.
        let mut cfg = RuntimeConfig::default();
        cfg.ledger.path = dir.path().join("l.db").display().to_string();
        cfg.ledger.key_file = Some(dir.path().join("new.key").display().to_string());
        cfg.ledger.previous_key_files = vec![path.display().to_string()];
        assert!(matches!(Ledger::open(&cfg), Err(OpenError::InsecureKey { .. })));
        cfg.ledger.allow_insecure_key = true;
        assert_eq!(Ledger::open(&cfg).unwrap().previous.len(), 1);
    }

    #[test]
    fn a_symlinked_key_file_is_refused_and_its_target_left_unchanged() {
        let dir = mcp_devtools::TempDir::new("key-symlink");
        let target = dir.path().join("elsewhere");
        write_key(&target, &"ab".repeat(16), 0o600);
        let path = dir.path().join("l.db.key");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(matches!(load_or_create_key(&path, true), Err(OpenError::KeySymlink { .. })));
        // A dangling link is not followed to create the key there either.
        let dangling = dir.path().join("dangling.key");
        std::os::unix::fs::symlink(dir.path().join("absent"), &dangling).unwrap();
        assert!(matches!(load_or_create_key(&dangling, false), Err(OpenError::KeySymlink { .. })));
        assert!(!dir.path().join("absent").exists());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), format!("{}\n", "ab".repeat(16)));
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
        assert!(matches!(
            Ledger::open(&sqlite_cfg(&dir, &"cd".repeat(16))),
            Err(OpenError::KeyMismatch { .. })
        ));
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

    #[test]
    fn a_redis_url_is_shown_without_its_password_or_query() {
        assert_eq!(redacted("redis://127.0.0.1:6379/0"), "redis://127.0.0.1:6379/0");
        assert_eq!(redacted("redis://u:secret@h:1/2"), "redis://u:***@h:1/2");
        assert_eq!(redacted("redis://u:p@ss@h:1/2"), "redis://u:***@h:1/2", "an @ in the password");
        assert_eq!(redacted("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redacted("redis://user@h/0"), "redis://user@h/0", "no password, none added");
        assert_eq!(redacted("unix:///run/r.sock?db=1&pass=secret"), "unix:///run/r.sock");
        assert_eq!(redacted("redis://h/0?pass=secret#x"), "redis://h/0");
        assert_eq!(
            redacted("redis://u:a/b?c@h:1/2"),
            "redis://u:***@h:1/2",
            "/ and ? in a password"
        );
        assert_eq!(redacted("redis://h/0?pass=s@x"), "redis://***@x", "an @ in the query");
        assert_eq!(redacted("secret"), "(not a URL)");
    }
}
