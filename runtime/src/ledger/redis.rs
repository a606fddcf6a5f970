//! The Redis store: the ledger on a Redis (or Valkey) server that more than one host can
//! share. Same semantics as the memory and SQLite stores (the one contract test runs against
//! all three).
//!
//! Layout, under a key prefix `P` (one per deployment), each key with the hash tag `{n}` of
//! its ledger name ([`shard_of`]: a session's keys share one):
//!
//! | ledger item | Redis keys |
//! |---|---|
//! | key `k` | string `P{n}d:k`: its expiry (16 decimal digits, ms) then its value |
//! | log `l` | stream `P{n}l:l` (entry id `seq-1`, field `f`: the frame) and string `P{n}el:l`: its expiry |
//! | index `i` | sorted set `P{n}i:i` and string `P{n}ei:i`: its expiry |
//! | tally `u` | hash `P{n}t:u` |
//! | a lease | `P{0}m:…`; on a Cluster a copy in every tag, `P{n}m:…` |
//!
//! **Two clocks.** The ledger's expiries are in its own clock, and a read says what "now" is
//! (as for the other stores); Redis also drops every key on its own (`PEXPIREAT`), at the
//! ledger's expiry but never sooner than [`EXPIRY_GRACE_MS`] after the writing node's wall
//! clock, so nodes whose clocks differ a little never see a record vanish before its time; a
//! sweep removes what expired for the ledger's clock sooner (checked in a script, so a record
//! another node renewed meanwhile stays).
//!
//! **One batch, one script.** [`Store::apply`] sends the whole batch as one Lua script
//! (atomic, one round trip): the conditions (an append at or below a log's newest is ignored;
//! an index keeps the expiry it was created with; an expiry only grows) are checked inside
//! it. On a Redis Cluster, one script per tag the batch writes (each atomic; the
//! publications with the last), each fenced by the lease's copy in its tag.
//!
//! Scores and expiries are exact up to 2^53 (Redis keeps scores as doubles; Lua numbers are
//! doubles): expiries are capped there (year 287,396), and the ledger's scores (times in ms,
//! counters) stay far below it.
//!
//! The Store trait is synchronous: the writer's thread and the readers' threads call it, never
//! an async worker. Each call takes a connection from a small pool (or opens one, with a
//! deadline) and gives it back unless the call failed; every read and write has a deadline
//! (on a Cluster, per try: [`CLUSTER_TRIES`]).

use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;

use super::{Durability, Op, Store, StoreError};

/// Redis removes a record no sooner than this long after the writing node's wall clock.
pub const EXPIRY_GRACE_MS: u64 = 60_000;

/// The largest expiry kept exactly (2^53 − 1 ms).
const MAX_EXPIRY_MS: u64 = (1 << 53) - 1;

/// Connections kept for reuse (the writer's, the readers', a few more).
const POOL_MAX: usize = 16;

/// Applies one batch, or the part of it whose keys share one hash tag: `ARGV[1]` the key of
/// this store's lease copy in that tag (empty: none) and `ARGV[2]` its token, then each
/// operation as its opcode, its keys' tag (`P{n}`) and its arguments (see `push_op`);
/// `KEYS[1]` is a key of that tag (where a Cluster sends it). A store that holds no longer the
/// lease it took is refused, whatever it sends (fencing).
const APPLY: &str = r"
if ARGV[1] ~= '' and redis.call('GET', ARGV[1]) ~= ARGV[2] then
  return redis.error_reply('FENCED this host no longer holds its ledger lease')
end
local function pexp_at_least(k, phys)
  local cur = redis.call('PEXPIRETIME', k)
  if cur == -2 then return end
  if cur == -1 or cur < phys then redis.call('PEXPIREAT', k, phys) end
end
local function exp_at_least(e, exp, phys)
  local cur = redis.call('GET', e)
  if (not cur) or tonumber(cur) < tonumber(exp) then redis.call('SET', e, exp) end
  pexp_at_least(e, phys)
end
local i, n = 3, #ARGV
while i <= n do
  local op, p = ARGV[i], ARGV[i + 1]
  i = i + 1
  if op == 'P' then
    redis.call('SET', p .. 'd:' .. ARGV[i + 1], ARGV[i + 2], 'PXAT', ARGV[i + 3])
    i = i + 4
  elseif op == 'L' then
    local d = p .. 'd:' .. ARGV[i + 1]
    local v = redis.call('GET', d)
    if (not v) or string.sub(v, 1, 16) <= string.sub(ARGV[i + 2], 1, 16) then
      redis.call('SET', d, ARGV[i + 2], 'PXAT', ARGV[i + 3])
    end
    i = i + 4
  elseif op == 'B' then
    redis.call('PUBLISH', p .. 'bus:' .. ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  elseif op == 'D' then
    redis.call('DEL', p .. 'd:' .. ARGV[i + 1])
    i = i + 2
  elseif op == 'A' then
    local l, e = p .. 'l:' .. ARGV[i + 1], p .. 'el:' .. ARGV[i + 1]
    local seq, phys = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 6])
    exp_at_least(e, ARGV[i + 5], phys)
    local last = redis.call('XREVRANGE', l, '+', '-', 'COUNT', 1)
    if #last == 0 or tonumber(string.match(last[1][1], '^(%d+)')) < seq then
      redis.call('XADD', l, ARGV[i + 2] .. '-1', 'f', ARGV[i + 3])
      local keep_from = seq - math.max(tonumber(ARGV[i + 4]), 1)
      if keep_from > 0 then
        redis.call('XTRIM', l, 'MINID', string.format('%.0f', keep_from + 1) .. '-0')
      end
    end
    pexp_at_least(l, phys)
    i = i + 7
  elseif op == 'X' then
    redis.call('DEL', p .. 'l:' .. ARGV[i + 1], p .. 'el:' .. ARGV[i + 1])
    i = i + 2
  elseif op == 'I' then
    local z, e = p .. 'i:' .. ARGV[i + 1], p .. 'ei:' .. ARGV[i + 1]
    if redis.call('EXISTS', e) == 0 then
      redis.call('SET', e, ARGV[i + 4], 'PXAT', ARGV[i + 5])
    end
    redis.call('ZADD', z, ARGV[i + 3], ARGV[i + 2])
    pexp_at_least(z, redis.call('PEXPIRETIME', e))
    i = i + 6
  elseif op == 'R' then
    redis.call('ZREM', p .. 'i:' .. ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  elseif op == 'T' then
    redis.call('ZREMRANGEBYSCORE', p .. 'i:' .. ARGV[i + 1], '-inf', '(' .. ARGV[i + 2])
    i = i + 3
  elseif op == 'Y' then
    redis.call('DEL', p .. 'i:' .. ARGV[i + 1], p .. 'ei:' .. ARGV[i + 1])
    i = i + 2
  elseif op == 'E' then
    local name, exp, phys = ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
    local d = p .. 'd:' .. name
    local v = redis.call('GET', d)
    if v then
      if tonumber(string.sub(v, 1, 16)) < tonumber(exp) then
        redis.call('SET', d, exp .. string.sub(v, 17), 'KEEPTTL')
      end
      pexp_at_least(d, phys)
    end
    for _, kind in ipairs({'l', 'i'}) do
      local e = p .. 'e' .. kind .. ':' .. name
      if redis.call('EXISTS', e) == 1 then
        exp_at_least(e, exp, phys)
        pexp_at_least(p .. kind .. ':' .. name, phys)
      end
    end
    i = i + 4
  elseif op == 'U' then
    local h, b, dc = p .. 't:' .. ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
    local c = redis.call('HINCRBY', h, b .. 'c', ARGV[i + 3])
    local by = redis.call('HINCRBY', h, b .. 'b', ARGV[i + 4])
    if c <= 0 and by <= 0 then
      redis.call('HDEL', h, b .. 'c', b .. 'b')
    elseif c == dc then
      -- A bucket begins: the ones that ended go.
      local now = tonumber(ARGV[i + 5])
      for _, f in ipairs(redis.call('HKEYS', h)) do
        if tonumber(string.sub(f, 1, -2)) <= now then redis.call('HDEL', h, f) end
      end
    end
    pexp_at_least(h, tonumber(ARGV[i + 6]))
    i = i + 7
  else
    return redis.error_reply('unknown ledger operation ' .. tostring(op))
  end
end
return 1
";

/// Deletes what expired for the ledger's clock: `ARGV[1]` now (ms), `ARGV[2]` the most to
/// delete, `ARGV[3]` and `ARGV[4]` the lease copy's key and token (as for `APPLY`), then
/// candidate keys (`P{n}d:k`, `P{n}el:l`, `P{n}ei:i`; one tag on a Cluster, `KEYS[1]` of
/// it). Each is checked and deleted in the script, so a record another node renewed in
/// between is never deleted. Returns how many were.
const SWEEP: &str = r"
local now, left = tonumber(ARGV[1]), tonumber(ARGV[2])
if ARGV[3] ~= '' and redis.call('GET', ARGV[3]) ~= ARGV[4] then
  return redis.error_reply('FENCED this host no longer holds its ledger lease')
end
local removed = 0
for i = 5, #ARGV do
  if removed >= left then break end
  local name = ARGV[i]
  local p, kind, rest = string.match(name, '^([^}]*})(%a+):(.*)$')
  if kind == 'd' then
    local v = redis.call('GET', name)
    if v and tonumber(string.sub(v, 1, 16)) <= now then
      redis.call('DEL', name)
      removed = removed + 1
    end
  elseif kind == 'el' or kind == 'ei' then
    local e = redis.call('GET', name)
    if e and tonumber(e) <= now then
      redis.call('DEL', name, p .. string.sub(kind, 2) .. ':' .. rest)
      removed = removed + 1
    end
  end
end
return removed
";

/// Keys one sweep looks at, at most (besides the `limit` it deletes).
const SWEEP_SCAN_MAX: usize = 20_000;

/// `SCAN` calls one sweep makes, at most (a Redis shared with other keys: the pattern may
/// match few of the keys each call walks).
const SWEEP_SCANS_MAX: usize = 64;

/// The hash tags a deployment's keys are spread over (`P{0}` … `P{63}`): a Redis Cluster
/// serves each from the node of its slot, and a host keeps one copy of its lease in each,
/// which every script on that tag checks (fencing needs the lease in the script's slot).
const SHARDS: usize = 64;

/// The part of a ledger name its tag is chosen by: what follows its kind, up to the next `/`
/// (`s/<hmac>`, `t/<hmac>/<stream>`, `e/<hmac>/<stream>`, `h/<hmac>`, `hl/<hmac>`: the HMAC), so
/// every key of one session, stream or handle shares a tag; a name without `/`, whole.
fn group(name: &str) -> &str {
    match name.split_once('/') {
        Some((_, rest)) => rest.split('/').next().unwrap_or(rest),
        None => name,
    }
}

/// The tag (0 … [`SHARDS`] − 1) of ledger name `name` (FNV-1a of its [`group`]).
fn shard_of(name: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in group(name).bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // Below SHARDS: fits.
    #[expect(clippy::cast_possible_truncation, reason = "see above")]
    let shard = (h % SHARDS as u64) as usize;
    shard
}

/// The Redis key of ledger name `name` of kind `kind` (`d` a key, `l` a log, `el` its
/// expiry, `i` an index, `ei` its expiry, `t` a tally) under `prefix`: `prefix{n}kind:name`,
/// `n` the name's tag (for tools and tests that look at Redis itself).
#[must_use]
pub fn redis_key(prefix: &str, kind: &str, name: &str) -> String {
    format!("{prefix}{{{}}}{kind}:{name}", shard_of(name))
}

/// A connection: to the one server, or to a Cluster (which sends each command to the node
/// of its key's slot, following `MOVED` and `ASK`).
enum Conn {
    One(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Conn {
    fn like(&mut self) -> &mut dyn redis::ConnectionLike {
        match self {
            Conn::One(c) => c,
            Conn::Cluster(c) => &mut **c,
        }
    }

    fn set_read_timeout(&self, wait: Duration) -> redis::RedisResult<()> {
        match self {
            Conn::One(c) => c.set_read_timeout(Some(wait)),
            Conn::Cluster(c) => c.set_read_timeout(Some(wait)),
        }
    }
}

/// Where a Cluster is found: the URL and each primary seen at open (any one that answers
/// will do), and how to connect to them.
#[derive(Clone)]
struct Seeds {
    urls: Vec<String>,
    tls: Tls,
}

/// How a store reaches Redis: `one` (the URL's server), or a Cluster when that server is one
/// of a Cluster's nodes (`cluster_enabled:1`; the others are found from it).
#[derive(Clone)]
struct Connector {
    one: redis::Client,
    cluster: Option<(Seeds, redis::cluster::ClusterClient)>,
    timeout: Duration,
}

/// Tries of one request on a Cluster (a node that failed over answers `MOVED` or not at all).
const CLUSTER_TRIES: u32 = 3;

impl Connector {
    /// A connection whose connect, reads and writes each wait at most the timeout.
    fn connect(&self) -> Result<Conn, StoreError> {
        match &self.cluster {
            None => Ok(Conn::One(connect(&self.one, self.timeout)?)),
            Some((_, c)) => {
                let con = c.get_connection().map_err(|e| backend(&e))?;
                con.set_read_timeout(Some(self.timeout)).map_err(|e| backend(&e))?;
                con.set_write_timeout(Some(self.timeout)).map_err(|e| backend(&e))?;
                Ok(Conn::Cluster(Box::new(con)))
            }
        }
    }

    /// This connector with every wait at most `timeout` and, on a Cluster, each request tried
    /// once (the lease's renewals: a renewal that waits past a third of the lease could let
    /// it lapse unseen).
    fn bounded(&self, timeout: Duration) -> Result<Connector, StoreError> {
        let cluster = match &self.cluster {
            None => None,
            Some((seeds, _)) => {
                Some((seeds.clone(), seeds.tls.cluster_client(&seeds.urls, timeout, 1)?))
            }
        };
        Ok(Connector { one: self.one.clone(), cluster, timeout })
    }
}

/// The Redis store.
pub struct RedisStore {
    conn: Connector,
    /// Where the subscriptions listen: the URL's server; on a Cluster, each primary in turn
    /// when one fails (a publication reaches every node).
    bus: Vec<redis::Client>,
    prefix: String,
    /// `P{0}` … `P{63}`: each tag's prefix, made once.
    tags: Vec<String>,
    pool: Mutex<Vec<Conn>>,
    apply: redis::Script,
    sweep: redis::Script,
    /// Where the next sweep's `SCAN` goes on: the primary (its place in the Cluster's list;
    /// 0 for one server) and its cursor.
    sweep_cursor: Mutex<(usize, u64)>,
    timeout: Duration,
    /// Pause before a subscription that failed or was cut is taken again
    /// (`ledger.redis_bus_retry_ms`).
    bus_retry: Duration,
    /// The lease this store took ([`RedisStore::take_lease`]): every batch is checked against
    /// it.
    lease: Mutex<Option<Lease>>,
    incr: redis::Script,
    /// Set when the store is dropped: the subscriptions' threads stop.
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    subscribers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The connection [`Store::wait_appended`] blocks on (its own: a blocked read holds it).
    watch_conn: Mutex<Option<Conn>>,
    /// Requests made on pooled connections ([`Store::round_trips`]).
    round_trips: std::sync::atomic::AtomicU64,
    /// The lease's last renewal, one round trip (µs; 0: none yet).
    round_trip_us: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How long a subscription waits for a message before it looks whether the store stopped.
const BUS_POLL: Duration = Duration::from_millis(200);

/// Sleep `d` (a subscription's pause before it subscribes again), in [`BUS_POLL`] slices,
/// ending early once the store stops: a store being dropped joins its subscriptions' threads,
/// and its lease is given up only after them.
fn pause(d: Duration, stopping: &std::sync::atomic::AtomicBool) {
    let until = tokio::time::Instant::now() + d;
    while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(BUS_POLL));
    }
}

/// A held lease: its key (without the prefix and tag: each copy has the tag it fences), its
/// token and the thread that renews it.
struct Lease {
    key: std::sync::Arc<str>,
    token: std::sync::Arc<str>,
    stop: std::sync::mpsc::Sender<()>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

/// Renews a lease copy (`KEYS[1]` its holder, `KEYS[2]` the last to take it) if `ARGV[1]`
/// holds it (1); takes it again if it lapsed and no other holder took it since (the last
/// token that took it is still ours, or is gone with a Redis that lost its data) (2); else 0:
/// another host took the ledger, and this store stays fenced for good (its queued batches
/// must never land over what the other wrote). `ARGV[2]`: the lease's length (ms).
const RENEW: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local last = redis.call('GET', KEYS[2])
if not cur and (last == ARGV[1] or not last) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[2], ARGV[1])
  return 2
end
return 0
";

/// Takes a lease copy (`KEYS[1]`) when nobody holds it: 1, else 0. The taker is recorded as
/// the last (`m:last`) once every copy is taken, so a take given up half way leaves the
/// copies a lapsed holder may take back as they were.
const TAKE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
";

/// Deletes the lease copy `KEYS[1]` if `ARGV[1]` holds it.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
";

/// Renews a host's own lease copy `KEYS[1]` if `ARGV[1]` still holds it (1), else 0: a host
/// whose lease lapsed never takes it back (the others may have ended its streams and taken
/// over its work), and stays fenced.
const RENEW_OWN: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// Counts ([`Store::incr`]): `KEYS[1]` the key, `ARGV[1]` the floor, `ARGV[2]` the expiry of
/// a counter that starts (16 digits), `ARGV[3]` now (ledger clock), `ARGV[4]` Redis' expiry
/// of a counter that starts (a live one keeps both).
const INCR: &str = r"
local d = KEYS[1]
local floor, exp, now, phys = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cur = 0
local v = redis.call('GET', d)
local live = false
if v then
  local e = tonumber(string.sub(v, 1, 16))
  if e > now then
    cur = tonumber(string.sub(v, 17)) or 0
    exp, live = e, true
  end
end
if cur < floor then cur = floor end
cur = cur + 1
local value = string.format('%016.0f', exp) .. string.format('%.0f', cur)
if live then
  redis.call('SET', d, value, 'KEEPTTL')
else
  redis.call('SET', d, value, 'PXAT', phys)
end
return cur
";

/// How a lease is renewed.
enum Renewal {
    /// The ledger's one lease (one host per ledger): taken back after a lapse nobody used.
    Ledger,
    /// A host's own lease on a shared ledger: never taken back; what to do once it is lost,
    /// and the clock each renewal moves on (the request path reads it).
    Own(Box<dyn Fn() + Send>, std::sync::Arc<super::lease::LeaseClock>),
}

/// The key (without the prefix) of run `run`'s lease on a shared ledger.
fn run_lease(run: u64) -> String {
    format!("m:run:{run}")
}

/// A lease token: the holder and 8 random bytes.
fn new_token(holder: &str) -> std::sync::Arc<str> {
    format!("{holder}:{}", super::codec::hex(&crate::rng::bytes::<8>())).into()
}

/// A lease's length in ms (at least 100).
fn lease_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(100)
}

/// Why a lease could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another holder kept it for as long as we waited.
    #[error("held by {holder}")]
    Held {
        /// What the holder wrote (`host:pid`).
        holder: String,
    },
    /// Redis failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.subscribers.lock().drain(..) {
            let _ = t.join();
        }
        let Some(mut lease) = self.lease.lock().take() else { return };
        let _ = lease.stop.send(());
        if let Some(t) = lease.renewer.take() {
            let _ = t.join();
        }
        let all: Vec<usize> = self.copies().collect();
        self.release_copies(&lease.key, &lease.token, &all);
    }
}

fn backend(e: &redis::RedisError) -> StoreError {
    StoreError::Backend(format!("redis: {e}"))
}

/// An expiry as the layout keeps it: 16 decimal digits, capped at 2^53 − 1.
fn digits(expires_ms: u64) -> String {
    format!("{:016}", expires_ms.min(MAX_EXPIRY_MS))
}

/// A connection to `client` whose connect, reads and writes each wait at most `timeout`.
fn connect(client: &redis::Client, timeout: Duration) -> Result<redis::Connection, StoreError> {
    let c = client.get_connection_with_timeout(timeout).map_err(|e| backend(&e))?;
    c.set_read_timeout(Some(timeout)).map_err(|e| backend(&e))?;
    c.set_write_timeout(Some(timeout)).map_err(|e| backend(&e))?;
    Ok(c)
}

/// This host's wall clock (ms since the epoch).
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The expiry Redis enforces for a record the ledger expires at `expires_ms`, written when the
/// wall clock reads `wall`.
fn physical_at(wall: u64, expires_ms: u64) -> u64 {
    expires_ms.max(wall.saturating_add(EXPIRY_GRACE_MS)).min(MAX_EXPIRY_MS)
}

/// [`physical_at`] now.
#[cfg(test)]
fn physical(expires_ms: u64) -> u64 {
    physical_at(wall_ms(), expires_ms)
}

/// A kept expiry (`None`: absent) that has not passed at `now_ms`.
fn alive(expiry: Option<&[u8]>, now_ms: u64) -> bool {
    expiry
        .and_then(|e| std::str::from_utf8(e.get(..16)?).ok()?.parse::<u64>().ok())
        .is_some_and(|e| e > now_ms)
}

/// How a connection is made besides its URL: the files a `rediss://` connection is checked
/// with (PEM; `None`: the system's trusted roots, no client certificate), and a password
/// given apart from the URL.
#[derive(Clone, Default)]
pub struct Tls {
    /// The certificate authority the server's certificate must be signed by.
    pub ca_file: Option<String>,
    /// This host's client certificate and its key (PEM contents; both or neither).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
    /// The password (`ledger.redis_password`, `MCP_HOST_REDIS_PASSWORD`); a URL that has one
    /// too is refused (which one counts would be a guess).
    pub password: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca_file", &self.ca_file)
            .field("client", &self.client.as_ref().map(|_| "a certificate and its key"))
            .field("password", &self.password.as_ref().map(|_| "…"))
            .finish()
    }
}

impl Tls {
    /// How to reach `url` with this password.
    fn info(&self, url: &str) -> Result<redis::ConnectionInfo, StoreError> {
        use redis::IntoConnectionInfo as _;
        let info = url.into_connection_info().map_err(|e| backend(&e))?;
        let Some(password) = &self.password else { return Ok(info) };
        if info.redis_settings().password().is_some() {
            return Err(StoreError::Backend(
                "redis: a password is given both in the URL and apart from it (ledger.redis_password or MCP_HOST_REDIS_PASSWORD): give it once".into(),
            ));
        }
        let settings = info.redis_settings().clone().set_password(password);
        Ok(info.set_redis_settings(settings))
    }

    /// The files' certificates (`None`: none given, the system's roots).
    fn certificates(&self, url: &str) -> Result<Option<redis::TlsCertificates>, StoreError> {
        if self.ca_file.is_none() && self.client.is_none() {
            return Ok(None);
        }
        if !url.starts_with("rediss://") {
            return Err(StoreError::Backend(
                "redis: TLS files (ledger.redis_tls_*) are given for a redis:// URL: use rediss://"
                    .into(),
            ));
        }
        let read = |what: &str, path: &str| {
            std::fs::read(path).map_err(|e| {
                StoreError::Backend(format!("redis: cannot read the TLS {what} file {path}: {e}"))
            })
        };
        let root_cert =
            self.ca_file.as_deref().map(|f| read("certificate authority", f)).transpose()?;
        let client_tls = self.client.as_ref().map(|(cert, key)| redis::ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        });
        Ok(Some(redis::TlsCertificates { client_tls, root_cert }))
    }

    /// The client of `url` with these files and password.
    fn client(&self, url: &str) -> Result<redis::Client, StoreError> {
        let info = self.info(url)?;
        match self.certificates(url)? {
            None => redis::Client::open(info),
            Some(certs) => redis::Client::build_with_tls(info, certs),
        }
        .map_err(|e| backend(&e))
    }

    /// The client of the Cluster whose nodes `urls` are (it starts from whichever answers);
    /// each request waits at most `timeout` per try, and is tried at most `tries` times.
    fn cluster_client(
        &self,
        urls: &[String],
        timeout: Duration,
        tries: u32,
    ) -> Result<redis::cluster::ClusterClient, StoreError> {
        let infos = urls.iter().map(|u| self.info(u)).collect::<Result<Vec<_>, _>>()?;
        let mut b = redis::cluster::ClusterClientBuilder::new(infos)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(tries.saturating_sub(1))
            .min_retry_wait(10)
            .max_retry_wait(200);
        if let Some(certs) = urls.first().map(|u| self.certificates(u)).transpose()?.flatten() {
            b = b.certs(certs);
        }
        b.build().map_err(|e| backend(&e))
    }
}

/// `url` with its host and port replaced by `host`:`port` (another node of its Cluster).
fn url_at(url: &str, host: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let user = authority.rsplit_once('@').map_or("", |(u, _)| u);
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
    let at = if user.is_empty() { String::new() } else { format!("{user}@") };
    let path = if path.is_empty() { String::new() } else { format!("/{path}") };
    format!("{scheme}://{at}{host}:{port}{path}")
}

/// The serving primaries (`host`, `port`) of a `CLUSTER NODES` reply.
fn primaries(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let flags = f.get(2)?;
            let serving = flags.split(',').any(|x| x == "master")
                && !flags.split(',').any(|x| x.starts_with("fail") || x == "noaddr")
                && f.len() > 8;
            let addr = f.get(1)?.split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            serving.then(|| Some((host.to_owned(), port.parse().ok()?)))?
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

impl RedisStore {
    /// The same store, its subscriptions waiting `retry` after a cut before they subscribe
    /// again (default [`crate::config::DEFAULT_BUS_RETRY_MS`]).
    #[must_use]
    pub fn with_bus_retry(mut self, retry: Duration) -> RedisStore {
        self.bus_retry = retry;
        self
    }

    /// The store at `url` (`redis://[user:password@]host:port/db`), its keys under `prefix`;
    /// every connect, read and write waits at most `timeout`. Checks that the server answers.
    ///
    /// # Errors
    /// [`StoreError::Backend`]: a malformed URL, or a server that does not answer.
    pub fn open(url: &str, prefix: &str, timeout: Duration) -> Result<RedisStore, StoreError> {
        RedisStore::open_tls(url, &Tls::default(), prefix, timeout)
    }

    /// [`RedisStore::open`], a `rediss://` server checked with `tls`. A server that is a node
    /// of a Redis Cluster (`cluster_enabled:1`) opens the Cluster: each key goes to the node
    /// of its slot.
    ///
    /// # Errors
    /// [`StoreError::Backend`]: as [`RedisStore::open`], and `tls` files that cannot be read,
    /// or given for a `redis://` URL; a prefix with `{` or `}` (they would change the hash
    /// tag); keys of the layout before hash tags under `prefix`.
    pub fn open_tls(
        url: &str,
        tls: &Tls,
        prefix: &str,
        timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        if prefix.is_empty() || !prefix.ends_with(':') || prefix.contains(['{', '}']) {
            return Err(StoreError::Backend(format!(
                "redis: the key prefix {prefix:?} must be non-empty, end with ':' and hold no '{{' or '}}' (one per deployment; none may begin another)"
            )));
        }
        let one = tls.client(url)?;
        let mut c = connect(&one, timeout)?;
        let (info, cluster_info): (String, String) = redis::pipe()
            .cmd("INFO")
            .arg("server")
            .cmd("INFO")
            .arg("cluster")
            .query(&mut c)
            .map_err(|e| backend(&e))?;
        let version = redis_version(&info);
        if !supported(&version) {
            return Err(StoreError::Backend(format!(
                "redis: the server is redis {version}; the ledger needs 7.0 or later"
            )));
        }
        let (cluster, bus) = if cluster_info.lines().any(|l| l.trim() == "cluster_enabled:1") {
            let nodes: String =
                redis::cmd("CLUSTER").arg("NODES").query(&mut c).map_err(|e| backend(&e))?;
            let urls: Vec<String> =
                primaries(&nodes).iter().map(|(h, p)| url_at(url, h, *p)).collect();
            let bus = urls.iter().map(|u| tls.client(u)).collect::<Result<Vec<_>, _>>()?;
            let seeds = Seeds {
                urls: [url.to_owned()].into_iter().chain(urls).collect(),
                tls: tls.clone(),
            };
            let client = tls.cluster_client(&seeds.urls, timeout, CLUSTER_TRIES)?;
            (Some((seeds, client)), bus)
        } else {
            (None, vec![one.clone()])
        };
        let store = RedisStore {
            conn: Connector { one, cluster, timeout },
            bus,
            prefix: prefix.to_owned(),
            tags: (0..SHARDS).map(|n| format!("{prefix}{{{n}}}")).collect(),
            pool: Mutex::new(Vec::new()),
            apply: redis::Script::new(APPLY),
            sweep: redis::Script::new(SWEEP),
            sweep_cursor: Mutex::new((0, 0)),
            timeout,
            bus_retry: Duration::from_millis(crate::config::DEFAULT_BUS_RETRY_MS),
            lease: Mutex::new(None),
            incr: redis::Script::new(INCR),
            stopping: std::sync::Arc::default(),
            subscribers: Mutex::new(Vec::new()),
            round_trip_us: std::sync::Arc::default(),
            round_trips: std::sync::atomic::AtomicU64::new(0),
            watch_conn: Mutex::new(None),
        };
        // The layout before hash tags kept the key fingerprint at `P` `d:m/key`: a ledger of
        // it would be silently unreachable (every session unknown), so it is refused.
        let old = format!("{prefix}d:m/key");
        let before: i64 = store.with_conn(|c| redis::cmd("EXISTS").arg(&old).query(c))?;
        if before != 0 {
            return Err(StoreError::Backend(format!(
                "redis: keys under the prefix {prefix:?} are of an earlier layout (without hash tags; {old} exists), which this version does not read: give another ledger.redis_prefix, or delete them"
            )));
        }
        Ok(store)
    }

    /// Whether this store is on a Redis Cluster.
    fn on_cluster(&self) -> bool {
        self.conn.cluster.is_some()
    }

    /// `P{shard}`: the prefix and hash tag of the keys of `shard`.
    fn tag(&self, shard: usize) -> &str {
        &self.tags[shard]
    }

    /// The lease copies a host keeps: one per tag on a Cluster (in the order renewed and
    /// taken), one on a single server (every tag's scripts check it).
    fn copies(&self) -> impl Iterator<Item = usize> + use<> {
        (0..if self.on_cluster() { SHARDS } else { 1 }).rev()
    }

    /// The key of lease `key`'s copy that fences the writes to `shard`.
    fn lease_key(&self, key: &str, shard: usize) -> String {
        format!("{}{key}", self.tag(if self.on_cluster() { shard } else { 0 }))
    }

    /// What a check reports of the server and the ledger's lease: `redis <version>, prefix
    /// <prefix>, lease held by <holder>` (or `no lease held`); on a Cluster, how many
    /// primaries serve it.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    pub fn about(&self) -> Result<String, StoreError> {
        // The URL's server (on a Cluster, INFO would go to every node).
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut connect(&self.conn.one, self.timeout)?)
            .map_err(|e| backend(&e))?;
        let holder: Option<String> =
            self.with_conn(|c| redis::cmd("GET").arg(self.lease_key("m:holder", 0)).query(c))?;
        let version = redis_version(&info);
        let lease =
            holder.map_or_else(|| "no lease held".to_owned(), |h| format!("lease held by {h}"));
        let cluster = if self.on_cluster() {
            format!(" (a Cluster of {} primaries)", self.bus.len())
        } else {
            String::new()
        };
        Ok(format!("redis {version}{cluster}, prefix {}, {lease}", self.prefix))
    }

    /// Take the ledger's one lease as `holder` (`host:pid`), waiting at most `ttl` plus a
    /// second for a lapsed holder's lease to expire, and keep it renewed (every `ttl` / 3, on
    /// a thread of its own) until this store is dropped (then it is released). From now on a
    /// batch is applied only while this store holds the lease. One that let it lapse takes it
    /// back if no other holder took it meanwhile; one whose lease another holder took (it was
    /// paused past `ttl`, or cut off from Redis) stays refused for good: what it still holds
    /// must never land over what the other wrote. On a Cluster every copy is taken, or none.
    ///
    /// # Errors
    /// [`LeaseError::Held`] when another holder kept it; [`LeaseError::Store`].
    pub fn take_lease(&self, holder: &str, ttl: Duration) -> Result<(), LeaseError> {
        let token = new_token(holder);
        let ttl_ms = lease_ms(ttl);
        // Tries every 100 ms for the lease's length and a second more.
        let tries = (ttl_ms + 1_000).div_ceil(100);
        let take = redis::Script::new(TAKE);
        for attempt in 1.. {
            let mut taken = Vec::new();
            let mut took_all = true;
            for s in self.copies() {
                let took: Result<i64, _> = self.with_conn(|c| {
                    take.key(self.lease_key("m:holder", s)).arg(&*token).arg(ttl_ms).invoke(c)
                });
                match took {
                    Ok(1) => taken.push(s),
                    Ok(_) => {
                        took_all = false;
                        break;
                    }
                    Err(e) => {
                        self.release_copies("m:holder", &token, &taken);
                        return Err(e.into());
                    }
                }
            }
            if took_all {
                for s in &taken {
                    let last = self.lease_key("m:last", *s);
                    let set: Result<(), _> =
                        self.with_conn(|c| redis::cmd("SET").arg(&last).arg(&*token).query(c));
                    if let Err(e) = set {
                        self.release_copies("m:holder", &token, &taken);
                        return Err(e.into());
                    }
                }
                break;
            }
            self.release_copies("m:holder", &token, &taken);
            if attempt >= tries {
                let key = self.lease_key("m:holder", 0);
                let holder: Option<String> =
                    self.with_conn(|c| redis::cmd("GET").arg(&key).query(c))?;
                return Err(LeaseError::Held { holder: holder.unwrap_or_default() });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.keep_lease("m:holder".into(), token, ttl_ms, Renewal::Ledger)?;
        Ok(())
    }

    /// Delete the copies `shards` of lease `key` that `token` holds.
    fn release_copies(&self, key: &str, token: &str, shards: &[usize]) {
        let release = redis::Script::new(RELEASE);
        for s in shards {
            let _ = self
                .with_conn(|c| release.key(self.lease_key(key, *s)).arg(token).invoke::<i64>(c));
        }
    }

    /// Take this host's own lease as run `run` of a ledger several hosts share (`holder`:
    /// `host:pid`), and keep it renewed every `ttl` / 3 on a thread of its own until this store
    /// is dropped (then it is released). From now on a batch is applied only while the lease
    /// is held; a host paused or cut off past `ttl` finds it lapsed and stays fenced for good
    /// (the other hosts may have ended its streams and taken its work over), and
    /// [`Store::run_alive`] says `false` of it to the others.
    ///
    /// # Errors
    /// [`LeaseError::Held`] when the run's lease exists already (two hosts counted the same
    /// run: never, with [`Store::incr`]); [`LeaseError::Store`].
    pub(crate) fn take_run_lease(
        &self,
        run: u64,
        holder: &str,
        ttl: Duration,
        on_lost: Box<dyn Fn() + Send>,
        clock: std::sync::Arc<super::lease::LeaseClock>,
    ) -> Result<(), LeaseError> {
        let token = new_token(holder);
        let ttl_ms = lease_ms(ttl);
        // Taken before the first copy is asked for: the lease holds from then at least.
        let asked = tokio::time::Instant::now();
        let suffix = run_lease(run);
        let mut taken = Vec::new();
        for s in self.copies() {
            let key = self.lease_key(&suffix, s);
            let took: Result<Option<String>, _> = self.with_conn(|c| {
                redis::cmd("SET").arg(&key).arg(&*token).arg("NX").arg("PX").arg(ttl_ms).query(c)
            });
            let took = match took {
                Ok(t) => t,
                Err(e) => {
                    self.release_copies(&suffix, &token, &taken);
                    return Err(e.into());
                }
            };
            if took.is_none() {
                self.release_copies(&suffix, &token, &taken);
                let holder: Option<String> =
                    self.with_conn(|c| redis::cmd("GET").arg(&key).query(c))?;
                return Err(LeaseError::Held { holder: holder.unwrap_or_default() });
            }
            taken.push(s);
        }
        clock.renewed(asked, ttl_ms);
        self.keep_lease(suffix.into(), token, ttl_ms, Renewal::Own(on_lost, clock))?;
        Ok(())
    }

    /// Start renewing the lease `key` (without the prefix) held as `token`, and fence every
    /// batch by it from now on.
    fn keep_lease(
        &self,
        key: std::sync::Arc<str>,
        token: std::sync::Arc<str>,
        ttl_ms: u64,
        how: Renewal,
    ) -> Result<(), StoreError> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        // Each copy's keys: its holder and (for the ledger's one lease) the last to take it.
        let keys =
            self.copies().map(|s| (self.lease_key(&key, s), self.lease_key("m:last", s))).collect();
        let renewer = self.renewer(keys, std::sync::Arc::clone(&token), ttl_ms, how, stopped)?;
        *self.lease.lock() = Some(Lease { key, token, stop, renewer: Some(renewer) });
        Ok(())
    }

    /// The lease's key (without the prefix) and token every batch is fenced by (empty: none).
    fn fence(&self) -> (std::sync::Arc<str>, std::sync::Arc<str>) {
        self.lease.lock().as_ref().map_or_else(
            || ("".into(), "".into()),
            |l| (std::sync::Arc::clone(&l.key), std::sync::Arc::clone(&l.token)),
        )
    }

    /// The thread that renews the lease copies `keys` (holder, last) held as `token` every
    /// `ttl_ms` / 3 until `stopped` says so (or its sender is dropped).
    fn renewer(
        &self,
        keys: Vec<(String, String)>,
        token: std::sync::Arc<str>,
        ttl_ms: u64,
        how: Renewal,
        stopped: std::sync::mpsc::Receiver<()>,
    ) -> Result<std::thread::JoinHandle<()>, StoreError> {
        let round_trip_us = std::sync::Arc::clone(&self.round_trip_us);
        // A renewal that waits longer than a third of the lease could let it lapse.
        let conn =
            self.conn.bounded(self.timeout.min(Duration::from_millis((ttl_ms / 3).max(50))))?;
        let renew = redis::Script::new(match how {
            Renewal::Ledger => RENEW,
            Renewal::Own(..) => RENEW_OWN,
        });
        std::thread::Builder::new()
            .name("ledger-lease".into())
            .spawn(move || {
                let mut con: Option<Conn> = None;
                let mut held = true;
                let every = Duration::from_millis(ttl_ms / 3);
                // The last renewal of every copy: a host's own lease not renewed for its whole
                // length has lapsed in Redis, whether or not Redis answers now (a host cut off
                // from Redis must stop as one paused past its lease does).
                let mut renewed_at = tokio::time::Instant::now();
                let ttl = Duration::from_millis(ttl_ms);
                let lapsed = |at: tokio::time::Instant| at.elapsed() >= ttl;
                // Each round begins a third of the lease after the last one began (not ended):
                // a slow round (64 copies on a Cluster) does not also delay the next, so the
                // lease's known end (the request path's fence) moves on in time.
                let mut began = tokio::time::Instant::now();
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every.saturating_sub(began.elapsed()))
                {
                    began = tokio::time::Instant::now();
                    if let Renewal::Own(lost, clock) = &how
                        && held
                        && lapsed(renewed_at)
                    {
                        held = false;
                        tracing::error!(
                            "ledger: this host could not renew its lease on the shared Redis ledger for the lease's length (cut off from Redis): the other hosts take its work over"
                        );
                        clock.lapse();
                        lost();
                    }
                    if con.is_none() {
                        con = conn.connect().ok();
                    }
                    let Some(c) = con.as_mut() else { continue };
                    // Taken before the first request: a renewal counts from when it was sent.
                    let sent = tokio::time::Instant::now();
                    // Every copy; the worst answer counts (one copy another host took, or
                    // that lapsed, is the lease lost).
                    let mut worst = Ok(1);
                    for (i, (holder, last)) in keys.iter().enumerate() {
                        let mut inv = renew.key(holder);
                        if let Renewal::Ledger = how {
                            inv.key(last);
                        }
                        inv.arg(&*token).arg(ttl_ms);
                        let began = tokio::time::Instant::now();
                        let renewed = inv.invoke::<i64>(c.like());
                        if i == 0 && renewed.is_ok() {
                            let us = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
                            round_trip_us.store(us.max(1), std::sync::atomic::Ordering::Relaxed);
                        }
                        worst = match (worst, renewed) {
                            (Err(e), _) | (_, Err(e)) => Err(e),
                            (Ok(0), _) | (_, Ok(0)) => Ok(0),
                            (Ok(2), _) | (_, Ok(2)) => Ok(2),
                            (Ok(a), Ok(_)) => Ok(a),
                        };
                        if worst.is_err() {
                            break;
                        }
                    }
                    match worst {
                        Ok(0) if held => {
                            held = false;
                            match &how {
                                Renewal::Ledger => tracing::error!(
                                    "ledger: another host took the Redis ledger's lease: this host's writes are refused from now on (restart it to take the ledger again)"
                                ),
                                Renewal::Own(lost, clock) => {
                                    tracing::error!(
                                        "ledger: this host's lease on the shared Redis ledger lapsed (paused or cut off for longer than the lease): its writes are refused from now on, the other hosts take its work over"
                                    );
                                    clock.lapse();
                                    lost();
                                }
                            }
                        }
                        Ok(2) => {
                            held = true;
                            renewed_at = sent;
                            tracing::warn!("ledger: took the Redis ledger's lease back after it lapsed");
                        }
                        Ok(_) => {
                            renewed_at = sent;
                            // A lost lease is never renewed again: its clock stays lapsed.
                            if let Renewal::Own(_, clock) = &how
                                && held
                            {
                                clock.renewed(sent, ttl_ms);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "ledger: could not renew the Redis ledger's lease");
                            con = None;
                        }
                    }
                }
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the lease thread: {e}")))
    }

    #[cfg(test)]
    fn connect(&self) -> Result<Conn, StoreError> {
        self.conn.connect()
    }

    /// Run `f` on a pooled connection; one that failed is dropped, not pooled.
    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut dyn redis::ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        self.with_conn_raw(f).map_err(|e| backend(&e))
    }

    fn with_conn_raw<T>(
        &self,
        f: impl FnOnce(&mut dyn redis::ConnectionLike) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        self.with_pooled(|c| f(c.like()))
    }

    /// [`RedisStore::with_conn_raw`] on the connection itself (a Cluster's commands for one
    /// node).
    fn with_pooled<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        let pooled = self.pool.lock().pop();
        let mut c = match pooled {
            Some(c) => c,
            None => self
                .conn
                .connect()
                .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?,
        };
        self.round_trips.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = f(&mut c)?;
        let mut pool = self.pool.lock();
        if pool.len() < POOL_MAX {
            pool.push(c);
        }
        Ok(r)
    }

    /// [`RedisStore::with_conn`] for a read (it changes nothing, so it may run twice): one that
    /// failed on its connection (a signal interrupted it, a pooled connection outlived a
    /// Redis restart) is tried once more on a new one.
    fn read_conn<T>(
        &self,
        f: impl Fn(&mut dyn redis::ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        match self.with_conn_raw(&f) {
            Err(e) if e.is_io_error() || e.is_connection_dropped() => self.with_conn(&f),
            r => r.map_err(|e| backend(&e)),
        }
    }

    /// Two reads of one tag's keys in one round trip (a pipeline; on a Cluster, its own kind,
    /// which sends both to the tag's node), tried again once as [`RedisStore::read_conn`].
    fn read_pair<T: redis::FromRedisValue>(
        &self,
        first: redis::Cmd,
        second: redis::Cmd,
    ) -> Result<T, StoreError> {
        let run = |c: &mut Conn| match c {
            Conn::One(c) => {
                redis::pipe().add_command(first.clone()).add_command(second.clone()).query(c)
            }
            Conn::Cluster(c) => redis::cluster::cluster_pipe()
                .add_command(first.clone())
                .add_command(second.clone())
                .query(c),
        };
        match self.with_pooled(run) {
            Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                self.with_pooled(run).map_err(|e| backend(&e))
            }
            r => r.map_err(|e| backend(&e)),
        }
    }

    /// The entries of log `log` from stream id `from` on (at most `limit`), unless it expired
    /// at `now_ms`.
    fn log_range(
        &self,
        log: &str,
        from: &str,
        limit: Option<usize>,
        now_ms: u64,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        type Entry = (String, Vec<Vec<u8>>);
        let mut range = redis::cmd("XRANGE");
        range.arg(self.name("l", log)).arg(from).arg("+");
        if let Some(n) = limit {
            range.arg("COUNT").arg(n);
        }
        let (exp, entries): (Option<Vec<u8>>, Vec<Entry>) =
            self.read_pair(redis::cmd("GET").arg(self.name("el", log)).clone(), range)?;
        if !alive(exp.as_deref(), now_ms) {
            return Ok(Vec::new());
        }
        entries
            .into_iter()
            .map(|(id, mut fields)| {
                let seq = id.split_once('-').and_then(|(s, _)| s.parse::<u64>().ok());
                match (seq, fields.len()) {
                    (Some(seq), 2) => Ok((seq, Bytes::from(fields.swap_remove(1)))),
                    _ => Err(StoreError::Backend(format!("redis: malformed log entry {id}"))),
                }
            })
            .collect()
    }

    /// The Redis key of ledger name `name` of kind `kind` (`d`, `l`, `el`, `i`, `ei`, `t`):
    /// `P{n}kind:name`, `n` its tag.
    fn name(&self, kind: &str, name: &str) -> String {
        redis_key(&self.prefix, kind, name)
    }

    /// The `EVALSHA` of `APPLY` for `ops` (their keys all of `shard` on a Cluster), fenced by
    /// the lease copy of `shard`.
    fn apply_cmd<'o>(
        &self,
        shard: usize,
        ops: impl Iterator<Item = &'o Op>,
        (lease, token): (&str, &str),
        wall: u64,
    ) -> redis::Cmd {
        let fence = if lease.is_empty() { String::new() } else { self.lease_key(lease, shard) };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.apply.get_hash()).arg(1).arg(self.tag(shard)).arg(&fence).arg(token);
        for op in ops {
            let tag = op_name(op).map_or(self.prefix.as_str(), |n| self.tag(shard_of(n)));
            push_op(&mut cmd, op, tag, wall);
        }
        cmd
    }

    /// Send `cmds` (`EVALSHA`s of `APPLY`) in one round trip (on a Cluster, a pipeline: one
    /// per node). A server that does not know the script (started again, failed over) gets it
    /// and the whole is sent again: every write of a batch is idempotent but a tally's, which
    /// may count twice (it only bounds), as after any failed commit the writer retries.
    fn run_scripts(&self, cmds: Vec<redis::Cmd>) -> Result<(), StoreError> {
        // Built once (the commands carry the batch's frames) and sent again as is after a
        // load; a store's connections are all of one kind, so only its pipeline is filled.
        let (mut one, mut cluster) = (redis::pipe(), redis::cluster::cluster_pipe());
        for x in cmds {
            if self.on_cluster() {
                cluster.add_command(x);
            } else {
                one.add_command(x);
            }
        }
        let send = |c: &mut Conn| -> redis::RedisResult<()> {
            match c {
                Conn::One(c) => one.query::<redis::Value>(c).map(drop),
                Conn::Cluster(c) => cluster.query::<redis::Value>(c).map(drop),
            }
        };
        match self.with_pooled(send) {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.with_conn(|c| self.apply.load(c))?;
                self.with_pooled(send).map_err(|e| backend(&e))
            }
            r => r.map_err(|e| backend(&e)),
        }
    }

    /// One pass of a sweep over the keys `names` (full Redis keys): on a Cluster one script
    /// per tag, each fenced by its lease copy. How many it removed.
    fn sweep_keys(&self, names: &[String], now_ms: u64, left: usize) -> Result<usize, StoreError> {
        let mut parts: std::collections::BTreeMap<usize, Vec<&str>> = Default::default();
        for n in names {
            let Some(rest) = n.strip_prefix(&self.prefix).and_then(|r| r.strip_prefix('{')) else {
                continue;
            };
            let Some((shard, kind)) = rest.split_once('}') else { continue };
            let Ok(shard) = shard.parse::<usize>() else { continue };
            if !(kind.starts_with("d:") || kind.starts_with("el:") || kind.starts_with("ei:")) {
                continue;
            }
            let shard = if self.on_cluster() { shard } else { 0 };
            parts.entry(shard).or_default().push(n);
        }
        let (key, token) = self.fence();
        let mut removed = 0;
        for (shard, names) in parts {
            if removed >= left {
                break;
            }
            let fence = if key.is_empty() { String::new() } else { self.lease_key(&key, shard) };
            let mut inv = self.sweep.prepare_invoke();
            inv.key(self.tag(shard))
                .arg(now_ms)
                .arg(left - removed)
                .arg(&fence)
                .arg(&*token)
                .arg(&names);
            removed += self.with_conn(|c| inv.invoke::<usize>(c))?;
        }
        Ok(removed)
    }

    /// The members of `index` (with their scores) from `ZRANGE args… WITHSCORES`, unless the
    /// index expired at `now_ms`.
    fn index_range(
        &self,
        index: &str,
        range: &[String],
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let (exp, members): (Option<Vec<u8>>, Vec<(String, f64)>) = self.read_pair(
            redis::cmd("GET").arg(self.name("ei", index)).clone(),
            redis::cmd("ZRANGE").arg(self.name("i", index)).arg(range).arg("WITHSCORES").clone(),
        )?;
        if !alive(exp.as_deref(), now_ms) {
            return Ok(Vec::new());
        }
        // Scores are integers below 2^53: exact as doubles.
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "see above")]
        Ok(members.into_iter().map(|(m, s)| (m, s as u64)).collect())
    }
}

/// The `redis_version` of an `INFO server` reply (`unknown` without one).
fn redis_version(info: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map_or_else(|| "unknown".to_owned(), |v| v.trim().to_owned())
}

/// Whether a server of `version` runs the scripts: PEXPIRETIME and the expiry options of
/// PEXPIREAT came with 7.0.
fn supported(version: &str) -> bool {
    version.split('.').next().and_then(|m| m.parse::<u32>().ok()).is_some_and(|m| m >= 7)
}

/// `s` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// The ledger name an operation writes (its tag's), none for a publication.
fn op_name(op: &Op) -> Option<&str> {
    match op {
        Op::Put { key, .. } | Op::PutLater { key, .. } | Op::Delete { key } => Some(key),
        Op::Append { log, .. } => Some(log),
        Op::DropLog { log } => Some(log),
        Op::IndexAdd { index, .. }
        | Op::IndexRemove { index, .. }
        | Op::IndexTrim { index, .. }
        | Op::DropIndex { index } => Some(index),
        Op::Expire { name, .. } => Some(name),
        Op::Tally { tally, .. } => Some(tally),
        Op::Publish { .. } => None,
    }
}

/// `op` as `APPLY` reads it: its opcode, `tag` (`P{n}`; the prefix for a publication), its
/// arguments.
fn push_op(inv: &mut redis::Cmd, op: &Op, tag: &str, wall: u64) {
    let physical = |expires_ms| physical_at(wall, expires_ms);
    let code = match op {
        Op::Put { .. } => "P",
        Op::PutLater { .. } => "L",
        Op::Publish { .. } => "B",
        Op::Delete { .. } => "D",
        Op::Append { .. } => "A",
        Op::DropLog { .. } => "X",
        Op::IndexAdd { .. } => "I",
        Op::IndexRemove { .. } => "R",
        Op::IndexTrim { .. } => "T",
        Op::DropIndex { .. } => "Y",
        Op::Expire { .. } => "E",
        Op::Tally { .. } => "U",
    };
    inv.arg(code).arg(tag);
    match op {
        Op::Put { key, value, expires_ms } | Op::PutLater { key, value, expires_ms } => {
            let mut v = digits(*expires_ms).into_bytes();
            v.extend_from_slice(value);
            inv.arg(key).arg(v).arg(physical(*expires_ms));
        }
        Op::Publish { channel, message } => {
            inv.arg(*channel).arg(&message[..]);
        }
        Op::Delete { key } => {
            inv.arg(key);
        }
        Op::Append { log, seq, frame, max_len, expires_ms } => {
            inv.arg(&**log)
                .arg(*seq)
                .arg(&frame[..])
                .arg(*max_len)
                .arg(digits(*expires_ms))
                .arg(physical(*expires_ms));
        }
        Op::DropLog { log } => {
            inv.arg(log);
        }
        Op::IndexAdd { index, member, score, expires_ms } => {
            inv.arg(index)
                .arg(member)
                .arg(*score)
                .arg(digits(*expires_ms))
                .arg(physical(*expires_ms));
        }
        Op::IndexRemove { index, member } => {
            inv.arg(index).arg(member);
        }
        Op::IndexTrim { index, below } => {
            inv.arg(index).arg(*below);
        }
        Op::DropIndex { index } => {
            inv.arg(index);
        }
        // One name space: what it names does not matter here.
        Op::Expire { name, of: _, expires_ms } => {
            inv.arg(name).arg(digits(*expires_ms)).arg(physical(*expires_ms));
        }
        Op::Tally { tally, bucket, count, bytes, now_ms } => {
            inv.arg(tally)
                .arg(digits(*bucket))
                .arg(*count)
                .arg(*bytes)
                .arg(digits(*now_ms))
                .arg(physical(*bucket));
        }
    }
}

impl Store for RedisStore {
    /// One script on one server (atomic). On a Cluster, one script per tag the batch writes
    /// (each atomic, a session's keys sharing one) in one pipeline, then its publications, so
    /// they go out once every write of the batch landed.
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let (key, token) = self.fence();
        let fence = (&*key, &*token);
        let wall = wall_ms();
        if !self.on_cluster() {
            return self.run_scripts(vec![self.apply_cmd(0, ops.iter(), fence, wall)]);
        }
        let mut parts: std::collections::BTreeMap<usize, Vec<&Op>> = Default::default();
        let mut publications = Vec::new();
        for op in ops {
            match op_name(op) {
                Some(name) => parts.entry(shard_of(name)).or_default().push(op),
                None => publications.push(op),
            }
        }
        let last = parts.keys().next_back().copied().unwrap_or(0);
        let writes: Vec<redis::Cmd> = parts
            .into_iter()
            .map(|(shard, part)| self.apply_cmd(shard, part.into_iter(), fence, wall))
            .collect();
        if !writes.is_empty() {
            self.run_scripts(writes)?;
        }
        if !publications.is_empty() {
            self.run_scripts(vec![self.apply_cmd(last, publications.into_iter(), fence, wall)])?;
        }
        Ok(())
    }

    fn get(&self, key: &str, now_ms: u64) -> Result<Option<Bytes>, StoreError> {
        let v: Option<Vec<u8>> =
            self.read_conn(|c| redis::cmd("GET").arg(self.name("d", key)).query(c))?;
        Ok(v.filter(|v| alive(Some(v), now_ms)).map(|v| Bytes::from(v).slice(16..)))
    }

    fn read_log(&self, log: &str, now_ms: u64) -> Result<Vec<(u64, Bytes)>, StoreError> {
        self.log_range(log, "-", None, now_ms)
    }

    fn read_log_after(
        &self,
        log: &str,
        after: u64,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        self.log_range(log, &format!("{}-0", after.saturating_add(1)), Some(limit), now_ms)
    }

    fn index_lowest(
        &self,
        index: &str,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let stop = i64::try_from(limit).map_or(-1, |l| l - 1);
        self.index_range(index, &["0".to_owned(), stop.to_string()], now_ms)
    }

    fn index_page(
        &self,
        index: &str,
        after: Option<(u64, &str)>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let Some((score, member)) = after else {
            return self.index_lowest(index, limit, now_ms);
        };
        // From the cursor's score on; the members of that score at or before the cursor are
        // skipped (Redis orders equal scores by member, bytewise, as the cursor does).
        let mut out = Vec::new();
        let mut offset = 0usize;
        let chunk = limit.clamp(1, 1024) + 16;
        while out.len() < limit {
            let range = [
                score.to_string(),
                "+inf".to_owned(),
                "BYSCORE".to_owned(),
                "LIMIT".to_owned(),
                offset.to_string(),
                chunk.to_string(),
            ];
            let got = self.index_range(index, &range, now_ms)?;
            let n = got.len();
            out.extend(
                got.into_iter()
                    .filter(|(m, s)| (*s, m.as_str()) > (score, member))
                    .take(limit - out.len()),
            );
            if n < chunk {
                break;
            }
            offset += n;
        }
        Ok(out)
    }

    fn index_len(&self, index: &str, now_ms: u64) -> Result<usize, StoreError> {
        // Every score is at least 0: `ZCOUNT` from 0 is `ZCARD`, in the one round trip.
        self.index_count_from(index, 0, now_ms)
    }

    fn index_count_from(&self, index: &str, min: u64, now_ms: u64) -> Result<usize, StoreError> {
        let (exp, n): (Option<Vec<u8>>, usize) = self.read_pair(
            redis::cmd("GET").arg(self.name("ei", index)).clone(),
            redis::cmd("ZCOUNT").arg(self.name("i", index)).arg(min).arg("+inf").clone(),
        )?;
        Ok(if alive(exp.as_deref(), now_ms) { n } else { 0 })
    }

    /// Redis drops expired records itself, at their expiry plus the grace (see the module);
    /// a sweep removes sooner what expired for the ledger's clock: it goes on with a `SCAN`
    /// of the prefix where the last one stopped (on a Cluster, of one primary after the
    /// other), and stops after `limit` removals, a whole pass (of every primary), or
    /// [`SWEEP_SCAN_MAX`] keys looked at.
    fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let pattern = format!("{}*", glob_escape(&self.prefix));
        let nodes = if self.on_cluster() {
            let nodes: String = self.with_conn(|c| redis::cmd("CLUSTER").arg("NODES").query(c))?;
            primaries(&nodes)
        } else {
            Vec::new()
        };
        let mut removed = 0;
        let mut looked = 0;
        let mut scans = 0;
        // Servers whose pass ended in this sweep (one each at most).
        let mut passes = 0;
        let (mut node, mut cursor) = *self.sweep_cursor.lock();
        loop {
            scans += 1;
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(512);
            let (next, keys): (u64, Vec<String>) = match nodes.get(node % nodes.len().max(1)) {
                None => self.with_conn(|c| scan.query(c))?,
                Some((host, port)) => {
                    use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                    let at = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port: *port,
                    });
                    let v = self
                        .with_pooled(|c| match c {
                            Conn::Cluster(c) => c.route_command(&scan, at),
                            Conn::One(c) => scan.query(c),
                        })
                        .map_err(|e| backend(&e))?;
                    redis::from_redis_value(v).map_err(|e| backend(&e.into()))?
                }
            };
            looked += keys.len();
            removed += self.sweep_keys(&keys, now_ms, limit - removed)?;
            cursor = next;
            if cursor == 0 {
                node = (node + 1) % nodes.len().max(1);
                passes += 1;
            }
            if passes >= nodes.len().max(1)
                || removed >= limit
                || looked >= SWEEP_SCAN_MAX
                || scans >= SWEEP_SCANS_MAX
            {
                break;
            }
        }
        *self.sweep_cursor.lock() = (node, cursor);
        Ok(removed)
    }

    /// Redis' own persistence (`appendonly`, `appendfsync`) decides what survives its crash.
    fn set_durability(&self, _: Durability) {}

    fn tally(&self, tally: &str, now_ms: u64) -> Result<(u64, u64), StoreError> {
        let fields: Vec<(String, i64)> =
            self.read_conn(|c| redis::cmd("HGETALL").arg(self.name("t", tally)).query(c))?;
        let mut buckets: std::collections::BTreeMap<u64, (i64, i64)> = Default::default();
        for (field, v) in fields {
            let (end, kind) = field.split_at(field.len().saturating_sub(1));
            let Ok(end) = end.parse::<u64>() else { continue };
            let b = buckets.entry(end).or_default();
            match kind {
                "c" => b.0 = v,
                "b" => b.1 = v,
                _ => {}
            }
        }
        Ok(super::tally_sum(buckets.into_iter().map(|(e, (c, b))| (e, c, b)), now_ms))
    }

    fn incr(&self, key: &str, floor: u64, expires_ms: u64, now_ms: u64) -> Result<u64, StoreError> {
        let mut inv = self.incr.prepare_invoke();
        inv.key(self.name("d", key))
            .arg(floor)
            .arg(digits(expires_ms))
            .arg(now_ms)
            .arg(physical_at(wall_ms(), expires_ms));
        self.with_conn(|c| inv.invoke::<u64>(c))
    }

    fn subscribe(&self, channel: &'static str, deliver: super::Deliver) -> Result<(), StoreError> {
        let (servers, timeout, retry) = (self.bus.clone(), self.timeout, self.bus_retry);
        let (name, stopping) =
            (format!("{}bus:{channel}", self.prefix), std::sync::Arc::clone(&self.stopping));
        let thread = std::thread::Builder::new()
            .name("ledger-bus".into())
            .spawn(move || {
                use std::sync::atomic::Ordering;
                // Each pass: connect, subscribe, say that messages may have been missed (the
                // first pass too: published before this subscription), then deliver until the
                // connection fails or the store stops; the next pass on the next server (a
                // Cluster's publications reach every node).
                let mut pass = 0usize;
                while !stopping.load(Ordering::Relaxed) {
                    let server = &servers[pass % servers.len().max(1)];
                    pass += 1;
                    let Ok(mut con) = connect(server, timeout) else {
                        pause(retry, &stopping);
                        continue;
                    };
                    let mut bus = con.as_pubsub();
                    if bus.subscribe(&name).is_err() || bus.set_read_timeout(Some(BUS_POLL)).is_err()
                    {
                        pause(retry, &stopping);
                        continue;
                    }
                    deliver(None);
                    while !stopping.load(Ordering::Relaxed) {
                        match bus.get_message() {
                            Ok(m) => deliver(Some(Bytes::from(m.get_payload_bytes().to_vec()))),
                            Err(e) if e.is_timeout() => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "ledger: the Redis subscription was cut; taking it again");
                                // Not at once: a server that accepts and cuts again would make
                                // each pass a "missed" (every listen stream told everything
                                // changed, every live session's end looked up).
                                pause(retry, &stopping);
                                break;
                            }
                        }
                    }
                }
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the bus thread: {e}")))?;
        self.subscribers.lock().push(thread);
        Ok(())
    }

    fn run_alive(&self, run: u64, near: &str) -> Result<bool, StoreError> {
        let key = self.lease_key(&run_lease(run), shard_of(near));
        let n: i64 = self.read_conn(|c| redis::cmd("EXISTS").arg(&key).query(c))?;
        Ok(n == 1)
    }

    fn wait_appended(
        &self,
        logs: &[(&str, u64)],
        block_ms: u64,
    ) -> Result<Vec<(usize, u64)>, StoreError> {
        if logs.is_empty() {
            return Ok(Vec::new());
        }
        let mut held = self.watch_conn.lock();
        if held.is_none() {
            let c = self.conn.connect()?;
            // The read waits for the block, then for the answer.
            let wait = self.timeout.saturating_add(Duration::from_millis(block_ms));
            c.set_read_timeout(wait).map_err(|e| backend(&e))?;
            *held = Some(c);
        }
        let Some(c) = held.as_mut() else { return Ok(Vec::new()) };
        // On a Cluster one `XREAD` names keys of one tag only: with logs of several tags it
        // reads each tag's at once, then waits a twentieth of a second when none had one.
        let mut tags: Vec<Vec<usize>> = Vec::new();
        if self.on_cluster() {
            let mut by: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
            for (i, (l, _)) in logs.iter().enumerate() {
                by.entry(shard_of(l)).or_default().push(i);
            }
            tags.extend(by.into_values());
        } else {
            tags.push((0..logs.len()).collect());
        }
        let block = (tags.len() == 1).then_some(block_ms.max(1));
        let mut out = Vec::new();
        for part in &tags {
            let names: Vec<String> = part.iter().map(|&i| self.name("l", logs[i].0)).collect();
            let mut cmd = redis::cmd("XREAD");
            cmd.arg("COUNT").arg(1);
            if let Some(ms) = block {
                cmd.arg("BLOCK").arg(ms);
            }
            cmd.arg("STREAMS").arg(&names);
            // Entries are `<seq>-1`: every id past `<after>-<the largest>` has a later seq.
            for &i in part {
                cmd.arg(format!("{}-{}", logs[i].1, u64::MAX));
            }
            // [[log, [[id, fields]]], ..]: the first entry after `after` of each log that has
            // one.
            type Found = Vec<(String, Vec<(String, redis::Value)>)>;
            let found: redis::RedisResult<Option<Found>> = cmd.query(c.like());
            let found = match found {
                Ok(f) => f.unwrap_or_default(),
                Err(e) => {
                    *held = None;
                    return Err(backend(&e));
                }
            };
            out.extend(found.into_iter().filter_map(|(name, entries)| {
                let at = part[names.iter().position(|n| *n == name)?];
                let seq = entries.first()?.0.split_once('-')?.0.parse().ok()?;
                Some((at, seq))
            }));
        }
        if out.is_empty() && block.is_none() {
            drop(held);
            std::thread::sleep(Duration::from_millis(block_ms.min(50)));
        }
        Ok(out)
    }

    fn round_trips(&self) -> Option<u64> {
        Some(self.round_trips.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn round_trip_us(&self) -> Option<u64> {
        let us = self.round_trip_us.load(std::sync::atomic::Ordering::Relaxed);
        (us > 0).then_some(us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(server: &mcp_devtools::RedisServer, prefix: &str) -> RedisStore {
        RedisStore::open(&server.url(), prefix, Duration::from_secs(5)).unwrap()
    }

    #[test]
    fn the_redis_store_keeps_the_store_contract() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        super::super::store_tests::contract(&store(&server, "contract:"));
    }

    #[test]
    fn on_a_cluster_the_store_keeps_the_contract_and_spreads_its_keys_over_every_node() {
        let cluster = mcp_devtools::RedisCluster::start().unwrap();
        let s = RedisStore::open(&cluster.url(), "contract:", Duration::from_secs(5)).unwrap();
        assert!(s.on_cluster());
        assert!(s.about().unwrap().contains("a Cluster of 3 primaries"), "{}", s.about().unwrap());
        super::super::store_tests::contract(&s);
        // One batch over many sessions' keys lands whole, its keys on every node.
        let far = physical(0) + 3_600_000;
        let ops: Vec<Op> = (0..64)
            .map(|i| Op::Put {
                key: format!("s/session-{i}"),
                value: Bytes::from(format!("{i}")),
                expires_ms: far,
            })
            .collect();
        s.apply(&ops).unwrap();
        for i in 0..64 {
            let got = s.get(&format!("s/session-{i}"), 0).unwrap();
            assert_eq!(got.as_deref(), Some(format!("{i}").as_bytes()));
        }
        for n in cluster.nodes() {
            assert!(n.count_keys("contract:{*}d:s/session-*").unwrap() > 0, "every node has some");
        }
        // Nodes that forgot the script (restarted, failed over) are given it again.
        for n in cluster.nodes() {
            assert!(n.flush_scripts());
        }
        s.apply(&[
            Op::Delete { key: "s/session-1".into() },
            Op::Delete { key: "s/session-2".into() },
        ])
        .unwrap();
        assert_eq!(s.get("s/session-1", 0).unwrap(), None);
        // A session's keys share a tag: one slot, one script.
        assert_eq!(shard_of("s/abc"), shard_of("t/abc/7"));
        assert_eq!(shard_of("e/abc/7"), shard_of("q/abc/\"1\""));
    }

    #[test]
    fn on_a_cluster_each_tag_is_fenced_by_its_own_lease_copy_and_the_lease_is_lost_with_one() {
        let cluster = mcp_devtools::RedisCluster::start().unwrap();
        let open = || RedisStore::open(&cluster.url(), "runs:", Duration::from_secs(5)).unwrap();
        let (a, b) = (open(), open());
        let run = a.incr("m/run", 0, u64::MAX, 0).unwrap();
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let told = std::sync::Arc::clone(&lost);
        let on_lost = Box::new(move || told.store(true, std::sync::atomic::Ordering::SeqCst));
        a.take_run_lease(run, "a", Duration::from_millis(600), on_lost, std::sync::Arc::default())
            .unwrap();
        // A copy in every tag, on every node.
        let copies: usize = cluster
            .nodes()
            .iter()
            .map(|n| n.count_keys(&format!("runs:{{*}}m:run:{run}")).unwrap())
            .sum();
        assert_eq!(copies, SHARDS);
        let far = physical(0) + 3_600_000;
        let put = |key: &str| Op::Put { key: key.into(), value: "v".into(), expires_ms: far };
        // Two keys of different tags.
        let other = (0..).map(|i| format!("s/other-{i}")).find(|k| shard_of(k) != shard_of("s/x"));
        let other = other.unwrap();
        a.apply(&[put("s/x"), put(&other)]).unwrap();
        assert!(b.run_alive(run, "s/x").unwrap() && b.run_alive(run, &other).unwrap());
        // The copy that fences `s/x` lapses (a failover that lost it, or its node's clock).
        let key = a.lease_key(&run_lease(run), shard_of("s/x"));
        let node = cluster.nodes().iter().find(|n| n.count_keys(&key).unwrap() == 1).unwrap();
        assert!(node.set_px(&key, "lapsing", 1));
        std::thread::sleep(Duration::from_millis(20));
        assert!(fenced(&a.apply(&[put("s/x")])), "the tag whose copy is gone is refused");
        assert!(!b.run_alive(run, "s/x").unwrap(), "dead for what that copy fences");
        // The renewal finds it and the host is told its lease is lost.
        let told = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            lost.load(std::sync::atomic::Ordering::SeqCst)
        });
        assert!(told, "told within 5 s");
    }

    #[test]
    fn on_a_cluster_a_wait_wakes_on_logs_of_any_tag_and_a_publication_reaches_every_host() {
        let cluster = mcp_devtools::RedisCluster::start().unwrap();
        let open = || RedisStore::open(&cluster.url(), "watch:", Duration::from_secs(5)).unwrap();
        let (a, b) = (open(), open());
        let logs: Vec<String> = (0..8).map(|i| format!("e/session-{i}/1")).collect();
        let append = |log: &str, seq: u64| Op::Append {
            log: log.into(),
            seq,
            frame: Bytes::from(format!("event {seq}")),
            max_len: 16,
            expires_ms: u64::MAX / 4,
        };
        let ops: Vec<Op> = logs.iter().map(|l| append(l, 1)).collect();
        a.apply(&ops).unwrap();
        let asked: Vec<(&str, u64)> = logs.iter().map(|l| (l.as_str(), 1)).collect();
        assert!(b.wait_appended(&asked, 100).unwrap().is_empty(), "nothing after 1");
        a.apply(&[append(&logs[5], 2)]).unwrap();
        assert_eq!(b.wait_appended(&asked, 100).unwrap(), [(5, 2)]);
        // A publication goes from one node's script to a subscriber on another.
        let (tx, rx) = std::sync::mpsc::channel::<Option<Bytes>>();
        let tx = Mutex::new(tx);
        b.subscribe("ends", Box::new(move |m| drop(tx.lock().send(m)))).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), None);
        // Its batch's keys on many tags: the publication comes after all of them.
        let mut ops: Vec<Op> = (0..16)
            .map(|i| Op::Put {
                key: format!("x/s{i}"),
                value: "1".into(),
                expires_ms: u64::MAX / 4,
            })
            .collect();
        ops.insert(0, Op::Publish { channel: "ends", message: Bytes::from_static(b"s1") });
        a.apply(&ops).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap().as_deref(), Some(&b"s1"[..]));
    }

    #[test]
    fn on_a_cluster_a_sweep_removes_what_expired_on_every_node() {
        let cluster = mcp_devtools::RedisCluster::start().unwrap();
        let s = RedisStore::open(&cluster.url(), "sweep:", Duration::from_secs(5)).unwrap();
        let ops: Vec<Op> = (0..48)
            .map(|i| Op::Put { key: format!("s/gone-{i}"), value: "1".into(), expires_ms: 5 })
            .collect();
        s.apply(&ops).unwrap();
        let left = || -> usize {
            cluster.nodes().iter().map(|n| n.count_keys("sweep:{*}d:s/gone-*").unwrap()).sum()
        };
        assert_eq!(left(), 48);
        let mut removed = 0;
        for _ in 0..6 {
            removed += s.sweep(10, 1_000).unwrap();
        }
        assert_eq!(removed, 48);
        assert_eq!(left(), 0);
    }

    #[test]
    fn a_tls_store_keeps_the_contract_and_checks_both_certificates() {
        let server = mcp_devtools::RedisServer::start_tls().unwrap();
        let (url, (ca, cert, key)) = (server.tls_url().unwrap(), server.tls_files().unwrap());
        let open = |tls: Tls| RedisStore::open_tls(&url, &tls, "tls:", Duration::from_secs(5));
        let client = Some((std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap()));
        let store = open(Tls { ca_file: Some(ca.clone()), client: client.clone(), password: None })
            .unwrap();
        super::super::store_tests::contract(&store);
        // The server's certificate is signed by an authority the system does not trust.
        let e = open(Tls { ca_file: None, client, password: None }).unwrap_err().to_string();
        assert!(e.contains("certificate") || e.contains("Certificate"), "{e}");
        // The server asks for a client certificate.
        assert!(open(Tls { ca_file: Some(ca.clone()), client: None, password: None }).is_err());
        // Files for a URL without TLS are a mistake, said so.
        let plain = RedisStore::open_tls(
            &server.url(),
            &Tls { ca_file: Some(ca), client: None, password: None },
            "tls:",
            Duration::from_secs(5),
        );
        assert!(plain.unwrap_err().to_string().contains("rediss://"));
    }

    #[test]
    fn a_password_given_apart_from_the_url_is_sent_and_one_given_twice_is_refused() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        assert!(server.add_user("mcp", "s3cret"));
        let url = format!("redis://mcp@127.0.0.1:{}/0", server.port());
        let open = |url: &str, password: &str| {
            let tls = Tls { password: Some(password.into()), ..Tls::default() };
            RedisStore::open_tls(url, &tls, "pw:", Duration::from_secs(5))
        };
        let store = open(&url, "s3cret").unwrap();
        store
            .apply(&[Op::Put { key: "k".into(), value: "v".into(), expires_ms: u64::MAX / 4 }])
            .unwrap();
        // Sent: a wrong one is refused by the server (without it, `mcp@` alone would be
        // served as the default user).
        let e = open(&url, "wrong").unwrap_err().to_string();
        assert!(!e.contains("wrong") && !e.contains("s3cret"), "never the password: {e}");
        let both = format!("redis://mcp:s3cret@127.0.0.1:{}/0", server.port());
        let e = open(&both, "s3cret").unwrap_err().to_string();
        assert!(e.contains("give it once"), "{e}");
        let shown = format!("{:?}", Tls { password: Some("s3cret".into()), ..Tls::default() });
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn a_wait_for_appends_wakes_on_the_logs_that_got_one_and_times_out_on_none() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        let s = std::sync::Arc::new(store(&server, "watch:"));
        let append = |log: &str, seq: u64| Op::Append {
            log: log.into(),
            seq,
            frame: Bytes::from(format!("event {seq}")),
            max_len: 16,
            expires_ms: u64::MAX / 4,
        };
        s.apply(&[append("a", 1), append("b", 1), append("b", 2)]).unwrap();
        // Past their last events: nothing within the block.
        assert!(s.wait_appended(&[("a", 1), ("b", 2)], 100).unwrap().is_empty());
        // Behind on `b`: at once, naming its first event after the one asked for.
        assert_eq!(s.wait_appended(&[("a", 1), ("b", 0)], 5_000).unwrap(), [(1, 1)]);
        // An append while it blocks wakes it (not the whole block later).
        let other = std::sync::Arc::clone(&s);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            other.apply(&[append("a", 2)]).unwrap();
        });
        let began = tokio::time::Instant::now();
        assert_eq!(s.wait_appended(&[("a", 1), ("b", 2)], 10_000).unwrap(), [(0, 2)]);
        assert!(began.elapsed() < Duration::from_secs(5), "woken by the append");
        t.join().unwrap();
    }

    #[test]
    fn two_prefixes_on_one_server_never_see_each_other() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        let (a, b) = (store(&server, "a:"), store(&server, "b:"));
        let far = physical(0) + 3_600_000;
        a.apply(&[Op::Put { key: "k".into(), value: Bytes::from_static(b"1"), expires_ms: far }])
            .unwrap();
        assert_eq!(a.get("k", 0).unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(b.get("k", 0).unwrap(), None);
    }

    #[test]
    fn redis_drops_a_record_at_its_expiry_but_never_within_the_grace_of_the_writers_clock() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        let s = store(&server, "exp:");
        let mut c = s.connect().unwrap();
        let far = physical(0) + 3_600_000;
        s.apply(&[
            Op::Put { key: "past".into(), value: Bytes::from_static(b"x"), expires_ms: 5 },
            Op::Put { key: "far".into(), value: Bytes::from_static(b"y"), expires_ms: far },
        ])
        .unwrap();
        let pexpiretime = |c: &mut Conn, k: &str| -> i64 {
            redis::cmd("PEXPIRETIME").arg(s.name("d", k)).query(c.like()).unwrap()
        };
        let wall = physical(0) - EXPIRY_GRACE_MS;
        let past = u64::try_from(pexpiretime(&mut c, "past")).unwrap();
        assert!(
            past >= wall + EXPIRY_GRACE_MS - 5_000,
            "kept at least the grace: {past} vs {wall}"
        );
        assert_eq!(u64::try_from(pexpiretime(&mut c, "far")).unwrap(), far);
        assert_eq!(s.get("past", 10).unwrap(), None, "yet expired for the ledger's clock");
    }

    #[test]
    fn a_server_that_goes_away_is_a_backend_error_and_one_that_comes_back_is_used_again() {
        let mut server = Some(mcp_devtools::RedisServer::start().unwrap());
        let port = server.as_ref().map(mcp_devtools::RedisServer::port).unwrap();
        let s = store(server.as_ref().unwrap(), "gone:");
        let put = |v: &'static [u8]| Op::Put {
            key: "k".into(),
            value: Bytes::from_static(v),
            expires_ms: physical(0) + 3_600_000,
        };
        s.apply(&[put(b"1")]).unwrap();
        server = None;
        assert!(matches!(s.apply(&[put(b"2")]), Err(StoreError::Backend(_))));
        assert!(matches!(s.get("k", 0), Err(StoreError::Backend(_))));
        drop(server);
        // A new server on the same port: the store connects again by itself (data gone:
        // nothing was persisted).
        let again = mcp_devtools::RedisServer::start_on(port).unwrap();
        s.apply(&[put(b"3")]).unwrap();
        assert_eq!(s.get("k", 0).unwrap().as_deref(), Some(&b"3"[..]));
        drop(again);
    }

    fn put(v: &'static [u8]) -> Op {
        Op::Put {
            key: "k".into(),
            value: Bytes::from_static(v),
            expires_ms: physical(0) + 3_600_000,
        }
    }

    fn fenced(r: &Result<(), StoreError>) -> bool {
        matches!(r, Err(StoreError::Backend(m)) if m.contains("FENCED"))
    }

    #[test]
    fn a_store_whose_lease_another_host_took_stays_fenced_even_after_that_host_is_gone() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        let a = store(&server, "lease:");
        a.take_lease("a", Duration::from_millis(600)).unwrap();
        a.apply(&[put(b"a1")]).unwrap();
        // `a` was paused past its lease and host `b` took the ledger (as take_lease does).
        let mut c = a.connect().unwrap();
        redis::pipe()
            .cmd("SET")
            .arg("lease:{0}m:holder")
            .arg("b:token")
            .arg("PX")
            .arg(600)
            .cmd("SET")
            .arg("lease:{0}m:last")
            .arg("b:token")
            .query::<()>(c.like())
            .unwrap();
        let r = a.apply(&[put(b"a2")]);
        assert!(fenced(&r), "{r:?}");
        assert!(fenced(&a.sweep(u64::MAX, 10).map(|_| ())), "a sweep is fenced too");
        // `b` is gone and its lease lapses: `a` never takes it back by itself (what it still
        // holds must not land over what `b` wrote), however long it waits.
        redis::cmd("DEL").arg("lease:{0}m:holder").query::<i64>(c.like()).unwrap();
        std::thread::sleep(Duration::from_millis(1_000));
        let r = a.apply(&[put(b"a3")]);
        assert!(fenced(&r), "{r:?}");
        assert_eq!(a.get("k", 0).unwrap().as_deref(), Some(&b"a1"[..]), "nothing of a landed");
        // A host started again takes the ledger.
        let again = store(&server, "lease:");
        again.take_lease("a-restarted", Duration::from_millis(600)).unwrap();
        again.apply(&[put(b"new")]).unwrap();
    }

    #[test]
    fn a_store_whose_lease_lapsed_while_nobody_took_it_takes_it_back() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        let a = store(&server, "lapse:");
        a.take_lease("a", Duration::from_millis(600)).unwrap();
        let mut c = a.connect().unwrap();
        // Paused past its lease, but no other host came: the key lapsed.
        redis::cmd("DEL").arg("lapse:{0}m:holder").query::<i64>(c.like()).unwrap();
        let healed = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            a.apply(&[put(b"a2")]).is_ok()
        });
        assert!(healed, "the lease came back within 5 s");
        let holder: String = redis::cmd("GET").arg("lapse:{0}m:holder").query(c.like()).unwrap();
        assert!(holder.starts_with("a:"), "{holder}");
    }

    #[test]
    fn a_clusters_nodes_are_read_from_cluster_nodes_and_reached_with_the_urls_credentials() {
        let nodes = "\
07c3 127.0.0.1:30004@40004 master - 0 1 1 connected 10923-16383
a1b2 127.0.0.1:30001@40001,redis-1.example myself,master - 0 0 1 connected 0-5460
e5f6 127.0.0.1:30005@40005 slave a1b2 0 1 1 connected
c3d4 10.0.0.9:30002@40002 master,fail - 0 1 1 disconnected 5461-10922
9f9f ::1:30003@40003 master - 0 1 1 connected 5461-10922
0000 127.0.0.1:30009@40009 master - 0 1 1 connected";
        // Serving primaries only (no replica, no failed one, none without slots), sorted.
        assert_eq!(
            primaries(nodes),
            [("127.0.0.1".to_owned(), 30001), ("127.0.0.1".into(), 30004), ("::1".into(), 30003)]
        );
        assert_eq!(
            url_at("rediss://mcp:pw@10.0.0.1:6379/0", "127.0.0.1", 30004),
            "rediss://mcp:pw@127.0.0.1:30004/0"
        );
        assert_eq!(url_at("redis://10.0.0.1:6379", "::1", 30003), "redis://[::1]:30003");
    }

    #[test]
    fn a_ledger_of_the_layout_before_hash_tags_and_a_prefix_with_braces_are_refused() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        for bad in ["a{b}:", "a}:"] {
            let r = RedisStore::open(&server.url(), bad, Duration::from_secs(5));
            assert!(matches!(&r, Err(StoreError::Backend(m)) if m.contains("prefix")), "{bad:?}");
        }
        // The key fingerprint where the earlier layout kept it.
        assert!(server.set_px("old:d:m/key", "0000000000000000x", 60_000));
        let e = RedisStore::open(&server.url(), "old:", Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("earlier layout"), "{e}");
        RedisStore::open(&server.url(), "new:", Duration::from_secs(5)).unwrap();
    }

    #[test]
    fn a_prefix_that_could_begin_another_or_an_old_server_is_refused() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        for bad in ["", "mcp"] {
            let r = RedisStore::open(&server.url(), bad, Duration::from_secs(5));
            assert!(matches!(&r, Err(StoreError::Backend(m)) if m.contains("prefix")), "{bad:?}");
        }
        assert_eq!(redis_version("# Server\r\nredis_version:7.0.15\r\nredis_mode:x"), "7.0.15");
        assert!(supported("7.0.15") && supported("8.2.1"));
        assert!(!supported("6.2.14") && !supported("unknown"), "refused before a script fails");
    }

    #[test]
    fn a_second_store_is_refused_the_lease_while_the_first_renews_it_and_gets_it_once_released() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        let ttl = Duration::from_millis(1_000);
        let a = store(&server, "two:");
        a.take_lease("host-a:1", ttl).unwrap();
        let b = store(&server, "two:");
        match b.take_lease("host-b:2", ttl) {
            Err(LeaseError::Held { holder }) => {
                assert!(holder.starts_with("host-a:1:"), "{holder}")
            }
            other => panic!("the lease is held by a: {other:?}"),
        }
        drop(a);
        b.take_lease("host-b:2", ttl).unwrap();
        // A store without a lease (the contract tests') is not fenced by another's.
        let free = store(&server, "two:");
        free.apply(&[Op::Delete { key: "nothing".into() }]).unwrap();
    }

    #[test]
    fn hosts_sharing_a_ledger_each_hold_a_run_lease_and_one_that_lapsed_stays_fenced_for_good() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        let (a, b) = (store(&server, "runs:"), store(&server, "runs:"));
        // Two hosts starting at once count different runs.
        let (ra, rb) =
            (a.incr("m/run", 0, u64::MAX, 0).unwrap(), b.incr("m/run", 0, u64::MAX, 0).unwrap());
        assert_ne!(ra, rb);
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let told = std::sync::Arc::clone(&lost);
        let on_lost = Box::new(move || told.store(true, std::sync::atomic::Ordering::SeqCst));
        let clock = std::sync::Arc::new(super::super::lease::LeaseClock::new());
        a.take_run_lease(
            ra,
            "a",
            Duration::from_millis(600),
            on_lost,
            std::sync::Arc::clone(&clock),
        )
        .unwrap();
        b.take_run_lease(
            rb,
            "b",
            Duration::from_millis(600),
            Box::new(|| {}),
            std::sync::Arc::default(),
        )
        .unwrap();
        assert!(matches!(
            b.take_run_lease(
                ra,
                "b",
                Duration::from_millis(600),
                Box::new(|| {}),
                std::sync::Arc::default()
            ),
            Err(LeaseError::Held { .. })
        ));
        // Both write, each fenced by its own lease, renewed past its length.
        std::thread::sleep(Duration::from_millis(900));
        a.apply(&[put(b"a1")]).unwrap();
        b.apply(&[put(b"b1")]).unwrap();
        assert!(a.run_alive(rb, "k").unwrap() && b.run_alive(ra, "k").unwrap());
        assert!(!a.run_alive(rb + 100, "k").unwrap(), "a run nobody holds");
        assert!(clock.holds_at(tokio::time::Instant::now()), "renewed past its first length");
        // `a` is cut off past its lease (here: the lease is gone, as after a lapse): it never
        // takes it back, every batch and sweep of it is refused, and the others see it dead.
        let mut c = a.connect().unwrap();
        redis::cmd("DEL").arg(a.lease_key(&run_lease(ra), 0)).query::<i64>(c.like()).unwrap();
        std::thread::sleep(Duration::from_millis(700));
        assert!(fenced(&a.apply(&[put(b"a2")])));
        assert!(fenced(&a.sweep(u64::MAX, 10).map(|_| ())));
        assert!(lost.load(std::sync::atomic::Ordering::SeqCst), "told once its renewal failed");
        assert!(
            !clock.holds_at(tokio::time::Instant::now()),
            "its clock was not moved on by the failed renewals: the request path refuses"
        );
        assert!(!b.run_alive(ra, "k").unwrap());
        b.apply(&[put(b"b2")]).unwrap();
        assert_eq!(b.get("k", 0).unwrap().as_deref(), Some(&b"b2"[..]));
        // A clean stop releases the lease.
        drop(b);
        assert!(!a.run_alive(rb, "k").unwrap());
    }

    #[test]
    fn a_publication_reaches_the_other_hosts_subscribers_once_its_batch_commits() {
        let server = mcp_devtools::RedisServer::start().unwrap();
        let (a, b) = (store(&server, "bus:"), store(&server, "bus:"));
        let (tx, rx) = std::sync::mpsc::channel::<Option<Bytes>>();
        let tx = Mutex::new(tx);
        b.subscribe(
            "ends",
            Box::new(move |m| {
                let _ = tx.lock().send(m);
            }),
        )
        .unwrap();
        // Subscribed (and told that it may have missed what came before).
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), None);
        a.apply(&[put(b"v"), Op::Publish { channel: "ends", message: Bytes::from_static(b"s1") }])
            .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap().as_deref(), Some(&b"s1"[..]));
        // Another channel, or another prefix, is not heard.
        a.apply(&[Op::Publish { channel: "other", message: Bytes::from_static(b"x") }]).unwrap();
        store(&server, "bus2:")
            .apply(&[Op::Publish { channel: "ends", message: Bytes::from_static(b"y") }])
            .unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
        // A dropped store stops its subscription's thread (the drop returns).
        drop(b);
    }
}
