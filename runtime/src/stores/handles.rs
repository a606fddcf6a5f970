//! Explicit state handles (SEP-2567), the store: values that tools create, name by an opaque
//! handle the model passes back (`create_basket` → `bsk_…` → `add_item(bsk_…, …)`), and keep
//! in the ledger, so they outlive connections, sessions and restarts, in either era. The
//! handle's shape, a kind's policy and every text a model reads are
//! [`crate::proto::handle`]'s.
//!
//! Invariants:
//! - A handle is bound to the caller that made it: every use checks `(handle, principal)`, and
//!   another caller's handle is answered exactly like an unknown one.
//! - Without authentication a handle is a bearer capability (its unguessable id the only
//!   authority) and the "caller" is only an address that many clients may share: a list
//!   ([`ListScope`]) shows an authenticated caller all of its handles, an unauthenticated one
//!   only those created in the same legacy session (the record names the session's HMAC,
//!   never its id), and outside a session nothing. A use by id works as for anyone.
//! - A handle unused for its kind's idle TTL expires (the ledger drops it; its record's expiry
//!   moves with every use).
//! - Updates of one handle are serialized ([`HandleScope::update`] reads, changes and commits
//!   under the handle's lock stripe), so two concurrent changes never lose one another. On a
//!   ledger several hosts share, a lock in the store (`hl/<id>`, counted once, deleted by the
//!   change's own commit, lapsing after twice the hosts' lease) serializes them across hosts
//!   too; the SQLite ledger has one process.
//! - A write is answered only once committed; a value over its kind's size bound, a create
//!   over the caller's count bound, or a change past the caller's or the server's byte bound
//!   (`ledger.handle_bytes_*`, counted in memory over every kind) changes nothing.
//! - Records are read on the ledger's reader threads, never on the caller's.
//! - The ledger holds an HMAC of each handle as its key and the handle's random part sealed
//!   (XOR with an HMAC keystream of a key derived from the ledger's secret): the file alone
//!   yields no usable handle. Unsealing is verified: a handle is listed only if its HMAC is
//!   the name of the record it came from.
//! - A key rotation (`ledger.previous_key_files`) loses no handle: one not found under its
//!   current name is looked up under each previous key's, and moved to its current name by
//!   its next write (a use or an update: the old record and index entry go in the same batch,
//!   so it is never under both names or neither).

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::Sha256;

use crate::ledger::codec::{self, HandleRecord, Record};
use crate::ledger::{Caller, Entry, Ledger, Named, Op, StoreUsage, Writer};
use crate::proto::handle::{HANDLE_RANDOM_BYTES, HandleKind, xor};
use crate::proto::usage::{Over, UsageLimits};

/// Lock stripes: updates of one handle, and creates of one caller's kind, take one.
const STRIPES: usize = 64;

/// How often a handle's lock held by another host is tried again.
const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// A handle's lock across hosts (shared ledger; `key: None` otherwise).
struct HostLock {
    writer: Arc<Writer>,
    key: Option<String>,
}

impl HostLock {
    /// The lock's deletion, to commit with the change it guards (`None`: no lock).
    fn release(&mut self) -> Option<Op> {
        self.key.take().map(|key| Op::Delete { key })
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        if let Some(op) = self.release() {
            self.writer.submit(vec![op]);
        }
    }
}

/// Why a handle operation did nothing. Each becomes a tool error (`isError: true`) whose text
/// names the handle and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// Unknown, expired, destroyed, or another caller's.
    #[error("{0}")]
    NotFound(String),
    /// The value would be over the kind's size bound.
    #[error("{0}")]
    TooLarge(String),
    /// The caller holds the most handles of this kind it may.
    #[error("{0}")]
    TooMany(String),
    /// The change was refused by the tool itself (its update closure said why).
    #[error("{0}")]
    Refused(String),
    /// The ledger could not be read or written: nothing was changed.
    #[error("the state store is unavailable right now; nothing was changed, try again")]
    Unavailable,
    /// The change was handed to the ledger, which did not confirm it in time: it may still
    /// take effect when the store commits again.
    #[error(
        "the state store could not confirm this change in time (it cannot commit right now); the change may still take effect once it recovers: read the state again before you retry"
    )]
    Unconfirmed,
}

impl From<HandleError> for crate::tools::ToolError {
    fn from(e: HandleError) -> crate::tools::ToolError {
        crate::tools::ToolError::Failed(e.to_string())
    }
}

/// The handle store of a process.
pub struct Handles {
    writer: Arc<Writer>,
    clock: crate::clock::Clock,
    /// Makes a handle's ledger key.
    id_key: Hmac<Sha256>,
    /// Makes the keystream its random part is sealed with.
    seal_key: Hmac<Sha256>,
    /// The `(id_key, seal_key)` of each previous secret (`ledger.previous_key_files`): records
    /// made before a rotation.
    previous: Vec<(Hmac<Sha256>, Hmac<Sha256>)>,
    /// Async locks (held across the commit, never across anything else), by stripe.
    stripes: Box<[tokio::sync::Mutex<()>]>,
    /// Where records are read (never on the caller's thread).
    reads: Arc<crate::ledger::Reads>,
    /// What each caller, and every caller, keeps (bytes over every kind).
    usage: StoreUsage,
    /// On a shared ledger, how long a handle's lock across hosts holds (ms): past twice the
    /// hosts' lease, so a holder paused that long is fenced before its lock lapses.
    lock_ms: Option<u64>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").finish_non_exhaustive()
    }
}

fn hmac_of(key: &Hmac<Sha256>, data: &[u8]) -> [u8; 32] {
    let mut m = key.clone();
    m.update(data);
    m.finalize().into_bytes().into()
}

/// The ledger name of a secret (a handle, a task id): 128 bits of its HMAC under `key`, hex.
pub(crate) fn ledger_name(key: &Hmac<Sha256>, secret: &str) -> String {
    codec::hex(&hmac_of(key, secret.as_bytes())[..16])
}

impl Handles {
    /// The store of `ledger`, with the default byte bounds (`ledger.handle_bytes_*`).
    #[must_use]
    pub fn new(ledger: &Ledger) -> Handles {
        let l = crate::config::LedgerConfig::default();
        Handles::bounded(ledger, l.handle_bytes_per_caller, l.handle_bytes_total)
    }

    /// The store of `ledger` with these byte bounds, over every kind (the counts are each
    /// kind's own), its figures rebuilt from the ledger (a blocking read, at start).
    #[must_use]
    pub fn bounded(ledger: &Ledger, bytes_per_caller: u64, bytes_total: u64) -> Handles {
        let limits = UsageLimits {
            per_caller_count: u64::MAX,
            per_caller_bytes: bytes_per_caller,
            total_bytes: bytes_total,
        };
        let keys = |purpose: &str| {
            ledger
                .derive_rotated(purpose)
                .into_iter()
                .map(|k| <Hmac<Sha256>>::new_from_slice(&k).expect("hmac takes any key length"))
        };
        let mut pairs = keys("mcp-host handle id v1").zip(keys("mcp-host handle seal v1"));
        let (id_key, seal_key) = pairs.next().expect("the current secret's keys come first");
        // Expiries move with every use: buckets of a minute.
        let usage = StoreUsage::open(ledger, "h", "state handles", limits, 60_000);
        Handles {
            writer: Arc::clone(&ledger.writer),
            clock: ledger.clock,
            id_key,
            seal_key,
            previous: pairs.collect(),
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            reads: Arc::clone(&ledger.reads),
            usage,
            lock_ms: ledger.shared.then(|| ledger.hold_ms(0)),
        }
    }

    /// On a shared ledger, take `id`'s lock across hosts (after its stripe here): waited for
    /// while another host holds it, at most as long as a lock holds. The change's commit
    /// deletes it ([`HostLock::release`]); dropped unreleased, its deletion is queued.
    async fn lock_across(&self, id: &str) -> Result<HostLock, HandleError> {
        let Some(lock_ms) = self.lock_ms else {
            return Ok(HostLock { writer: Arc::clone(&self.writer), key: None });
        };
        let key = codec::handle_lock_key(id);
        for _ in 0..=lock_ms / LOCK_POLL.as_millis() as u64 {
            let (k, now) = (key.clone(), self.now());
            match self
                .reads
                .run(move |store| store.incr(&k, 0, now.saturating_add(lock_ms), now))
                .await
            {
                Ok(1) => return Ok(HostLock { writer: Arc::clone(&self.writer), key: Some(key) }),
                Ok(_) => tokio::time::sleep(LOCK_POLL).await,
                Err(e) => {
                    tracing::error!(error = %e, "cannot take a state handle's lock");
                    return Err(HandleError::Unavailable);
                }
            }
        }
        tracing::warn!("a state handle's lock stayed held by another host");
        Err(HandleError::Unavailable)
    }

    fn now(&self) -> u64 {
        self.clock.now().0
    }

    /// The ledger name of `handle` (128 bits of its HMAC, hex).
    fn id(&self, handle: &str) -> String {
        ledger_name(&self.id_key, handle)
    }

    fn stripe(&self, name: &str) -> &tokio::sync::Mutex<()> {
        let h = name.bytes().fold(0usize, |a, b| a.wrapping_mul(31).wrapping_add(usize::from(b)));
        &self.stripes[h % STRIPES]
    }

    fn seal(&self, id: &str, random: &[u8]) -> String {
        codec::hex(&xor(random, &hmac_of(&self.seal_key, id.as_bytes())))
    }

    /// The handle a record named `id` seals: the one, under the current or a previous key,
    /// whose HMAC under that key is `id` (`None` for a record sealed under none of them).
    fn unseal(&self, kind: &HandleKind, id: &str, sealed: &str) -> Option<String> {
        let bytes: Vec<u8> = (0..sealed.len() / 2)
            .map(|i| u8::from_str_radix(sealed.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        std::iter::once((&self.id_key, &self.seal_key))
            .chain(self.previous.iter().map(|(i, s)| (i, s)))
            .find_map(|(id_key, seal_key)| {
                let random: [u8; HANDLE_RANDOM_BYTES] =
                    xor(&bytes, &hmac_of(seal_key, id.as_bytes())).try_into().ok()?;
                let handle = kind.mint(&random);
                (ledger_name(id_key, &handle) == id).then_some(handle)
            })
    }

    /// The record of `handle` (whose ledger name is `id`) if it is a live handle of `kind`
    /// bound to `principal`, where it was found (`id`, or a previous key's name), and its
    /// bytes as its bounds count them.
    async fn find(
        &self,
        kind: &HandleKind,
        principal: Option<&str>,
        handle: &str,
        id: &str,
    ) -> Result<Found, HandleError> {
        let missing = || HandleError::NotFound(kind.not_found(handle));
        if !kind.is_shaped(handle) {
            return Err(missing());
        }
        let found = match self.read(id).await? {
            Some((record, bytes)) => Found { record, bytes, moved_from: None },
            None => self.find_previous(handle, id).await?.ok_or_else(missing)?,
        };
        if found.record.kind != kind.prefix || found.record.principal.as_deref() != principal {
            return Err(missing());
        }
        Ok(found)
    }

    /// `handle`'s record under a previous key's name (made before a rotation).
    async fn find_previous(&self, handle: &str, id: &str) -> Result<Option<Found>, HandleError> {
        if self.previous.is_empty() {
            return Ok(None);
        }
        for (id_key, _) in &self.previous {
            let old = ledger_name(id_key, handle);
            if let Some((record, bytes)) = self.read(&old).await? {
                return Ok(Some(Found { record, bytes, moved_from: Some(old) }));
            }
        }
        // Moved to `id` since it was first read (a move is one batch: had it not been under
        // its old name, it was under `id` by then).
        Ok(self.read(id).await?.map(|(record, bytes)| Found { record, bytes, moved_from: None }))
    }

    /// The record named `id` and its bytes (key and value), read on a reader thread.
    async fn read(&self, id: &str) -> Result<Option<(HandleRecord, u64)>, HandleError> {
        let (key, now) = (codec::handle_key(id), self.now());
        let read =
            self.reads.run(move |store| Ok(store.get(&key, now)?.map(|v| (v, key.len())))).await;
        let (bytes, key_len) = match read {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::error!(error = %e, "cannot read a state handle");
                return Err(HandleError::Unavailable);
            }
        };
        match codec::decode(&bytes) {
            Ok(Record::Handle(h)) => Ok(Some((h, (key_len + bytes.len()) as u64))),
            _ => {
                tracing::error!("a state handle in the ledger is not readable");
                Err(HandleError::Unavailable)
            }
        }
    }

    /// The live members of a caller's index (enough of them to count to the bound).
    async fn index(
        &self,
        kind: &HandleKind,
        index: &str,
        now: u64,
    ) -> Result<Vec<(String, u64)>, HandleError> {
        let (index, limit) =
            (index.to_owned(), kind.max_per_caller.saturating_mul(4).saturating_add(64));
        self.reads.run(move |store| store.index_lowest(&index, limit, now)).await.map_err(|e| {
            tracing::error!(error = %e, "cannot read a caller's state handles");
            HandleError::Unavailable
        })
    }

    /// When `record` of `kind` expires as written: the expiry it carries (the one its bounds
    /// counted it with, whatever the kind's TTL is now), or for a record of an earlier release
    /// its last use, the idle TTL and the slack for uses not recorded.
    fn expires_of(kind: &HandleKind, record: &HandleRecord) -> u64 {
        if record.expires_ms > 0 {
            return record.expires_ms;
        }
        Self::expiry_from_use(kind, record)
    }

    /// When `record` expires counted from its last use.
    fn expiry_from_use(kind: &HandleKind, record: &HandleRecord) -> u64 {
        record
            .used_ms
            .saturating_add(kind.idle_ttl_secs.saturating_mul(1000))
            .saturating_add(kind.touch_slack_ms())
    }

    /// The writes that store `record` under `id`, keep the caller's index of it and count it
    /// against the bounds in place of `before` (its previous record), in one step: refused,
    /// changing nothing, when the change would take the caller's or everyone's state past
    /// the byte bounds, unless `before` already held as many bytes. A record `before` found
    /// under a previous key's name is moved: sealed again under the current key, its old
    /// record and index entry dropped, all in the one batch.
    fn write(
        &self,
        kind: &HandleKind,
        handle: &str,
        id: &str,
        mut record: HandleRecord,
        before: Option<&Found>,
    ) -> Result<Vec<Op>, HandleError> {
        let mut ops = Vec::new();
        let index = codec::handles_index(kind.prefix, record.principal.as_deref());
        if let Some(old) = before.and_then(|b| b.moved_from.as_deref()) {
            // A found handle is well shaped, so this is its random part.
            let random = handle
                .strip_prefix(kind.prefix)
                .and_then(|r| r.strip_prefix('_'))
                .and_then(|r| URL_SAFE_NO_PAD.decode(r).ok())
                .ok_or(HandleError::Unavailable)?;
            record.sealed = self.seal(id, &random);
            ops.push(Op::Delete { key: codec::handle_key(old) });
            ops.push(Op::IndexRemove { index: index.clone(), member: old.to_owned() });
        }
        let expires_ms = Self::expiry_from_use(kind, &record);
        record.expires_ms = expires_ms;
        let key = codec::handle_key(id);
        let value = Bytes::from(codec::encode(&Record::Handle(record.clone())));
        let bytes = (key.len() + value.len()) as u64;
        let caller: Caller = record.principal.as_deref().map(Arc::from);
        let old = before.map(|b| Entry {
            name: b.moved_from.as_deref().unwrap_or(id),
            expires_ms: Self::expires_of(kind, &b.record),
            bytes: b.bytes,
        });
        let counted = self
            .usage
            .replace(
                &caller,
                old.as_ref(),
                &Entry { name: id, expires_ms, bytes },
                self.now(),
                false,
            )
            .map_err(|over| match over {
                Over::Caller { .. } => {
                    HandleError::TooMany(kind.caller_state_full(over.retry_after_s()))
                }
                Over::Total { .. } => {
                    HandleError::TooMany(kind.server_state_full(over.retry_after_s()))
                }
            })?;
        ops.push(Op::Put { key, value, expires_ms });
        ops.push(Op::IndexAdd {
            index: index.clone(),
            member: id.to_owned(),
            score: expires_ms,
            expires_ms,
        });
        ops.push(Op::Expire { name: index, of: Named::Index, expires_ms });
        ops.extend(counted);
        Ok(ops)
    }

    /// Refuse a change while the ledger takes no new durable work (checked before the
    /// change's writes are made: they count it against the bounds at once).
    fn writable(&self) -> Result<(), HandleError> {
        if self.writer.refusal().is_some() { Err(HandleError::Unavailable) } else { Ok(()) }
    }

    /// Hand `ops` to the ledger and wait until they are committed (at most the commit wait).
    async fn commit(&self, ops: Vec<Op>) -> Result<(), HandleError> {
        self.writer.submit_and_wait(ops).await.map_err(|_| HandleError::Unconfirmed)
    }

    /// `handle` is `None` for a create (its handle is not handed out).
    fn checked(kind: &HandleKind, handle: Option<&str>, value: &Value) -> Result<(), HandleError> {
        let bytes = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
        if bytes > kind.max_bytes {
            return Err(HandleError::TooLarge(kind.too_large(handle, bytes)));
        }
        Ok(())
    }

    /// A new handle of `kind` for `principal`, holding `value`, made in the legacy session
    /// whose HMAC is `session` (`None` outside one); returned once committed.
    ///
    /// # Errors
    /// [`HandleError::TooMany`] (also past the byte bounds), [`HandleError::TooLarge`],
    /// [`HandleError::Unavailable`], [`HandleError::Unconfirmed`].
    pub async fn create(
        &self,
        kind: &HandleKind,
        principal: Option<&str>,
        session: Option<&str>,
        value: Value,
    ) -> Result<String, HandleError> {
        let index = codec::handles_index(kind.prefix, principal);
        // One create of this caller's kind at a time: the count below stays exact.
        let _turn = self.stripe(&index).lock().await;
        let now = self.now();
        let live = self.index(kind, &index, now).await?;
        if live.iter().filter(|(_, expires)| *expires > now).count() >= kind.max_per_caller {
            return Err(HandleError::TooMany(kind.too_many()));
        }
        let random = crate::rng::bytes::<HANDLE_RANDOM_BYTES>();
        let handle = kind.mint(&random);
        Self::checked(kind, None, &value)?;
        let id = self.id(&handle);
        let record = HandleRecord {
            kind: kind.prefix.to_owned(),
            principal: principal.map(str::to_owned),
            session: session.map(str::to_owned),
            sealed: self.seal(&id, &random),
            value,
            version: 1,
            created_ms: now,
            used_ms: now,
            expires_ms: 0,
        };
        self.writable()?;
        let mut ops = vec![Op::IndexTrim { index: index.clone(), below: now.saturating_add(1) }];
        ops.extend(self.write(kind, &handle, &id, record, None)?);
        self.commit(ops).await?;
        Ok(handle)
    }

    /// The value of `handle` (it counts as a use: its expiry moves).
    ///
    /// # Errors
    /// [`HandleError::NotFound`], [`HandleError::Unavailable`].
    pub async fn get(
        &self,
        kind: &HandleKind,
        principal: Option<&str>,
        handle: &str,
    ) -> Result<Value, HandleError> {
        // A use is recorded under the handle's stripe, as an update or a destroy holds it:
        // it rewrites the record, so it must be queued after every change already committed
        // and before any later one (the writer commits in queue order), or it would put an
        // older value back, or a destroyed handle.
        let id = self.id(handle);
        // The use is recorded in the background, at most once per `touch_slack_ms` (the
        // record's expiry allows for the ones skipped), and not while the writer is backed up
        // or failing: a lost use only shortens the idle TTL.
        // A handle under a previous key's name is moved by its use (as an update moves it).
        let due = |f: &Found, now: u64| {
            (f.moved_from.is_some()
                || now.saturating_sub(f.record.used_ms) >= kind.touch_slack_ms())
                && !self.writer.skip_optional()
        };
        let found = self.find(kind, principal, handle, &id).await?;
        if !due(&found, self.now()) {
            // Nothing to record: no wait for the stripe (an update may hold it through a
            // commit).
            return Ok(found.record.value);
        }
        let _turn = self.stripe(&id).lock().await;
        // Another host's change must not be overwritten by this use's record: its lock too.
        let Ok(mut lock) = self.lock_across(&id).await else {
            // The use is not recorded (it only shortens the idle TTL).
            return Ok(found.record.value);
        };
        let found = self.find(kind, principal, handle, &id).await?;
        let now = self.now();
        if due(&found, now) {
            let mut record = found.record.clone();
            record.used_ms = now;
            // A use the bounds would refuse (its record grew by a digit) is not recorded. One
            // that is holds the stripe until committed (at most the commit wait): a change
            // after it must read the record it wrote, not the one before (the figures count
            // the new one already).
            if let Ok(mut ops) = self.write(kind, handle, &id, record, Some(&found)) {
                ops.extend(lock.release());
                let _ = self.writer.submit_and_wait(ops).await;
            }
        }
        Ok(found.record.value)
    }

    /// Change the value of `handle` with `change` (which may refuse, leaving it unchanged),
    /// atomically: no other update of this handle runs between its read and its commit.
    ///
    /// # Errors
    /// [`HandleError::NotFound`], [`HandleError::Refused`] (from `change`),
    /// [`HandleError::TooLarge`], [`HandleError::TooMany`] (past the byte bounds),
    /// [`HandleError::Unavailable`], [`HandleError::Unconfirmed`].
    pub async fn update<R>(
        &self,
        kind: &HandleKind,
        principal: Option<&str>,
        handle: &str,
        change: impl FnOnce(&mut Value) -> Result<R, String>,
    ) -> Result<R, HandleError> {
        let id = self.id(handle);
        let _turn = self.stripe(&id).lock().await;
        let mut lock = self.lock_across(&id).await?;
        let found = self.find(kind, principal, handle, &id).await?;
        let mut record = found.record.clone();
        let out = change(&mut record.value).map_err(HandleError::Refused)?;
        Self::checked(kind, Some(handle), &record.value)?;
        record.version += 1;
        record.used_ms = self.now().max(record.used_ms);
        self.writable()?;
        let mut ops = self.write(kind, handle, &id, record, Some(&found))?;
        ops.extend(lock.release());
        self.commit(ops).await?;
        Ok(out)
    }

    /// Destroy `handle`: later uses are answered like an unknown handle's.
    ///
    /// # Errors
    /// [`HandleError::NotFound`], [`HandleError::Unavailable`].
    pub async fn destroy(
        &self,
        kind: &HandleKind,
        principal: Option<&str>,
        handle: &str,
    ) -> Result<(), HandleError> {
        let id = self.id(handle);
        let _turn = self.stripe(&id).lock().await;
        let mut lock = self.lock_across(&id).await?;
        let found = self.find(kind, principal, handle, &id).await?;
        let index = codec::handles_index(kind.prefix, found.record.principal.as_deref());
        let name = found.moved_from.clone().unwrap_or(id);
        let caller: Caller = found.record.principal.as_deref().map(Arc::from);
        self.writable()?;
        let released = self.usage.release(
            &caller,
            &Entry {
                name: &name,
                expires_ms: Self::expires_of(kind, &found.record),
                bytes: found.bytes,
            },
        );
        let mut ops = vec![
            Op::Delete { key: codec::handle_key(&name) },
            Op::IndexRemove { index, member: name },
        ];
        ops.extend(released);
        ops.extend(lock.release());
        self.commit(ops).await
    }

    /// The caller's live handles of `kind` that `scope` shows, with their values, oldest
    /// expiry first.
    ///
    /// # Errors
    /// [`HandleError::Unavailable`].
    pub async fn list(
        &self,
        kind: &HandleKind,
        principal: Option<&str>,
        scope: ListScope<'_>,
    ) -> Result<Vec<(String, Value)>, HandleError> {
        if let ListScope::Nothing = scope {
            return Ok(Vec::new());
        }
        let now = self.now();
        let index = codec::handles_index(kind.prefix, principal);
        let members = self.index(kind, &index, now).await?;
        let mut out = Vec::new();
        for (id, _) in members.into_iter().filter(|(_, expires)| *expires > now) {
            if let Some((r, _)) = self.read(&id).await?.filter(|(r, _)| {
                r.kind == kind.prefix
                    && r.principal.as_deref() == principal
                    && scope.shows(r.session.as_deref())
            }) && let Some(handle) = self.unseal(kind, &id, &r.sealed)
            {
                out.push((handle, r.value));
            }
        }
        Ok(out)
    }

    /// `(handles, bytes)` kept by `principal`, and by every caller.
    #[must_use]
    pub fn kept(&self, principal: Option<&str>) -> ((u64, u64), (u64, u64)) {
        let now = self.now();
        (self.usage.of(&principal.map(Arc::from), now), self.usage.total(now))
    }
}

/// A handle's record as found, with where and how big.
#[derive(Debug)]
struct Found {
    record: HandleRecord,
    /// Bytes of its key and value (as its bounds counted them).
    bytes: u64,
    /// The previous key's name it was found under (made before a rotation), if not its
    /// current one.
    moved_from: Option<String>,
}

/// Which of a caller's handles a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListScope<'a> {
    /// All of them: an authenticated caller.
    All,
    /// Those created in this legacy session: an unauthenticated caller in one. Its names
    /// (HMACs), the current key's first, then each previous key's (made before a rotation).
    Session(&'a [Arc<str>]),
    /// None: an unauthenticated caller outside a session (2026-07-28).
    Nothing,
}

impl ListScope<'_> {
    /// Whether a handle created in `session` is shown.
    fn shows(&self, session: Option<&str>) -> bool {
        match self {
            ListScope::All => true,
            ListScope::Session(names) => session.is_some_and(|s| names.iter().any(|n| **n == *s)),
            ListScope::Nothing => false,
        }
    }
}

/// One kind of handle as one caller's tool uses it, typed (see [`crate::tools::ToolContext::handles`]).
#[derive(Debug, Clone, Copy)]
pub struct HandleScope<'a> {
    pub(crate) store: &'a Handles,
    pub(crate) kind: &'a HandleKind,
    pub(crate) principal: Option<&'a str>,
    /// The legacy session's names (current key's first), `None` outside one.
    pub(crate) session: Option<&'a [Arc<str>]>,
    /// The caller is a bearer principal.
    pub(crate) authenticated: bool,
}

fn to_value<T: Serialize>(v: &T) -> Result<Value, HandleError> {
    serde_json::to_value(v)
        .map_err(|e| HandleError::Refused(format!("the value cannot be stored: {e}")))
}

fn from_value<T: DeserializeOwned>(kind: &HandleKind, v: Value) -> Result<T, HandleError> {
    serde_json::from_value(v).map_err(|e| {
        tracing::error!(kind = kind.prefix, error = %e, "a stored handle value does not match its type");
        HandleError::Unavailable
    })
}

impl HandleScope<'_> {
    /// A stable name of `handle` that does not give it away (128 bits of its HMAC under a
    /// key derived from the ledger's secret, hex): for logs, journals and ids derived from
    /// a handle, which must never carry the handle itself. Stable while the ledger's key is:
    /// a key rotation changes it.
    #[must_use]
    pub fn tag(&self, handle: &str) -> String {
        self.store.id(handle)
    }

    /// A new handle holding `value`.
    ///
    /// # Errors
    /// As [`Handles::create`].
    pub async fn create<T: Serialize>(&self, value: &T) -> Result<String, HandleError> {
        self.store
            .create(
                self.kind,
                self.principal,
                self.session.and_then(|s| s.first()).map(|s| &**s),
                to_value(value)?,
            )
            .await
    }

    /// The value of `handle`.
    ///
    /// # Errors
    /// As [`Handles::get`].
    pub async fn get<T: DeserializeOwned>(&self, handle: &str) -> Result<T, HandleError> {
        from_value(self.kind, self.store.get(self.kind, self.principal, handle).await?)
    }

    /// Change the value of `handle` atomically; `change` may refuse with a reason.
    ///
    /// # Errors
    /// As [`Handles::update`].
    pub async fn update<T: Serialize + DeserializeOwned, R>(
        &self,
        handle: &str,
        change: impl FnOnce(&mut T) -> Result<R, String>,
    ) -> Result<R, HandleError> {
        let kind = self.kind;
        self.store
            .update(kind, self.principal, handle, |v| {
                let mut typed: T = serde_json::from_value(v.clone())
                    .map_err(|e| format!("the stored {} is not readable: {e}", kind.noun))?;
                let out = change(&mut typed)?;
                *v = serde_json::to_value(&typed)
                    .map_err(|e| format!("the value cannot be stored: {e}"))?;
                Ok(out)
            })
            .await
    }

    /// Destroy `handle`.
    ///
    /// # Errors
    /// As [`Handles::destroy`].
    pub async fn destroy(&self, handle: &str) -> Result<(), HandleError> {
        self.store.destroy(self.kind, self.principal, handle).await
    }

    /// The caller's live handles of this kind with their values: all of them for an
    /// authenticated caller; without authentication only those created in this legacy
    /// session, and none outside a session (then [`HandleScope::unlisted`] says why, for the
    /// tool's result).
    ///
    /// # Errors
    /// As [`Handles::list`].
    pub async fn list<T: DeserializeOwned>(&self) -> Result<Vec<(String, T)>, HandleError> {
        self.store
            .list(self.kind, self.principal, self.list_scope())
            .await?
            .into_iter()
            .map(|(h, v)| Ok((h, from_value(self.kind, v)?)))
            .collect()
    }

    /// Which handles [`HandleScope::list`] shows this caller.
    #[must_use]
    pub fn list_scope(&self) -> ListScope<'_> {
        match (self.authenticated, self.session) {
            (true, _) => ListScope::All,
            (false, Some(names)) => ListScope::Session(names),
            (false, None) => ListScope::Nothing,
        }
    }

    /// When this caller may list nothing (unauthenticated, outside a session): the text for
    /// the list tool's result, which says listing needs an authenticated caller and how to
    /// go on ([`HandleKind::unlisted`]). A plain result, not an error: the call did what it
    /// may, and retrying cannot change it.
    #[must_use]
    pub fn unlisted(&self) -> Option<String> {
        (self.list_scope() == ListScope::Nothing).then(|| self.kind.unlisted())
    }
}

#[cfg(test)]
mod tests;
