//! A stream this host does not serve, resumed here (a ledger several hosts share): looked up
//! in the ledger, then followed while the host that serves it lives, or taken over once that
//! host is gone.
//!
//! Following: the events after the client's cursor come from the ledger, then whatever the
//! serving host appends. One thread per host ([`Watch`](super::watch::Watch)) waits for appends to every followed
//! stream at once (one `XREAD BLOCK` over them all on Redis) and wakes the followers whose
//! stream got events; a woken follower reads them (one `XRANGE` after the last event sent and
//! one `GET` of the stream's record), and every [`QUIET_READ`] without a wake it reads anyway
//! (a stream that closed without a last event, a serving host that died) and looks whether
//! that host still holds its lease. A keep-alive comment goes out when nothing came for the
//! keep-alive interval. It ends once the record says the stream closed and every event went
//! out, the serving host is gone (the connection ends: the client's next resume takes the
//! stream over), or the client leaves. A follower holds no session state: it is a reader of
//! the ledger, bounded per host ([`FOLLOWERS_MAX`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::actor::body::SseBody;
use crate::actor::queue::write_queue;
use crate::actor::stream::StreamEnv;
use crate::ledger::codec::{self, Record, StreamRecord};
use crate::ledger::{Store, StoreError};
use crate::proto::stream::Frames;

/// How long a follower waits for a wake before it reads anyway (and looks whether the
/// serving host still holds its lease).
pub(crate) const QUIET_READ: Duration = Duration::from_secs(1);
/// Events one poll reads at most (the rest come with the next).
const READ_MAX: usize = 256;
/// Reads in a row that may fail before a follower ends its connection (the client resumes),
/// [`RETRY`] apart.
const FAILURES_MAX: u32 = 20;
const RETRY: Duration = Duration::from_millis(50);
/// Least time between two reads of a woken follower.
const MIN_READ_GAP: Duration = Duration::from_millis(10);
/// Streams followed at once by one host, at most (one more is refused with 503).
pub(crate) const FOLLOWERS_MAX: usize = 4_096;

/// What the ledger holds of a stream this session does not serve.
pub(crate) enum Found {
    /// No record: it ended and was forgotten, or it never was.
    Nothing,
    /// The host that serves it is alive: follow it from these events on.
    Live { record: StreamRecord, events: Vec<(u64, Bytes)> },
    /// The host that served it is gone and this one claimed it first: take it over. `events`:
    /// its whole log; `complete`: that host stopped cleanly; `life`: a life counted for the
    /// events this host adds to it.
    Orphan { record: StreamRecord, events: Vec<(u64, Bytes)>, complete: bool, life: u32 },
    /// The host that served it is gone and another host claimed it first.
    Claimed,
}

/// What a look-up needs to know besides the stream.
pub(crate) struct LookUp {
    pub(crate) this_run: u64,
    pub(crate) now_ms: u64,
    pub(crate) stream_ttl_ms: u64,
    pub(crate) idle_ttl_ms: u64,
    /// How long a take-over claim holds ([`crate::ledger::Ledger::hold_ms`] of [`CLAIM_MS`]).
    pub(crate) claim_ms: u64,
}

/// Look stream `sid` of session `hmac` up, for a resume after `after` (on a reader thread).
///
/// # Errors
/// [`StoreError`].
pub(crate) fn look_up(
    store: &dyn Store,
    hmac: &str,
    sid: u64,
    after: u64,
    at: &LookUp,
) -> Result<Found, StoreError> {
    let now = at.now_ms;
    let Some(bytes) = store.get(&codec::stream_key(hmac, sid), now)? else {
        return Ok(Found::Nothing);
    };
    let Record::Stream(record) = codec::decode(&bytes)? else { return Ok(Found::Nothing) };
    if record.session_hmac != hmac || record.stream != sid {
        return Ok(Found::Nothing);
    }
    // A shadow stream's client never got a cursor; one this run wrote and no longer holds was
    // forgotten here.
    if record.shadow || record.run == at.this_run {
        return Ok(Found::Nothing);
    }
    if record.run != 0 && store.run_alive(record.run, &codec::stream_key(hmac, sid))? {
        let events = store.read_log_after(&codec::events_key(hmac, sid), after, READ_MAX, now)?;
        return Ok(Found::Live { record, events });
    }
    // Whether its host stopped cleanly, asked before the claim makes the record this run's.
    let complete = crate::ledger::Ledger::run_complete_in(store, at.this_run, record.run, now);
    let mut record = record;
    if !claim(store, &mut record, at)? {
        return Ok(Found::Claimed);
    }
    let life = store.incr(
        &codec::incarnation_key(hmac),
        0,
        now.saturating_add(at.idle_ttl_ms.saturating_mul(2)),
        now,
    )?;
    let events = store.read_log(&codec::events_key(hmac, sid), now)?;
    Ok(Found::Orphan { record, events, complete, life: u32::try_from(life).unwrap_or(u32::MAX) })
}

/// How long a claim on a gone host's stream holds, at least: the claimer records the stream
/// as its own at once; one that dies before it did lets another host claim it after this long.
pub(crate) const CLAIM_MS: u64 = 10_000;

/// Claim a stream whose host is gone (`record.run`, not this one): the first host to count
/// the claim takes it over and records it as its own at once (so the others follow it from
/// then on). Whether this host won (then `record.run` is this run).
///
/// # Errors
/// [`StoreError`].
pub(crate) fn claim(
    store: &dyn Store,
    record: &mut StreamRecord,
    at: &LookUp,
) -> Result<bool, StoreError> {
    let now = at.now_ms;
    let key = codec::takeover_key(&record.session_hmac, record.stream, record.run);
    if store.incr(&key, 0, now.saturating_add(at.claim_ms), now)? != 1 {
        return Ok(false);
    }
    record.run = at.this_run;
    store.apply(&[crate::ledger::Op::Put {
        key: codec::stream_key(&record.session_hmac, record.stream),
        value: Bytes::from(codec::encode(&Record::Stream(record.clone()))),
        expires_ms: now.saturating_add(at.stream_ttl_ms),
    }])?;
    Ok(true)
}

/// Whether every event of a closed stream went out.
fn finished(record: &StreamRecord, last: u64) -> bool {
    record.close_reason.is_some() && last >= record.last_sent
}

/// A body that sends `events` (the stream's after the client's cursor `after`), then follows
/// the stream with `env`'s ledger reads and watch as the module says. `permit` counts the
/// follower until it ends.
pub(crate) fn follow(
    env: &StreamEnv,
    (hmac, sid, after): (Arc<str>, u64, u64),
    record: &StreamRecord,
    events: Vec<(u64, Bytes)>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> SseBody {
    let (reads, clock, keepalive_ms) =
        (Arc::clone(&env.ledger.ledger.reads), env.clock, env.timing.keepalive_ms);
    let mut last = events.last().map_or(after, |(q, _)| *q);
    let initial: Vec<Bytes> = events.into_iter().map(|(_, f)| f).collect();
    if finished(record, last) {
        return SseBody::fixed(initial);
    }
    let run = record.run;
    let (tx, rx) = write_queue(READ_MAX);
    let (key, log): (Arc<str>, Arc<str>) =
        (codec::stream_key(&hmac, sid).into(), codec::events_key(&hmac, sid).into());
    let watcher = env.watch.watch(Arc::clone(&log), last);
    actix_rt::spawn(async move {
        let _permit = permit;
        let (mut failures, mut quiet_ms, mut wait) = (0u32, 0u64, QUIET_READ);
        let mut read_at = tokio::time::Instant::now();
        loop {
            let began = tokio::time::Instant::now();
            let woken = watcher.woken(wait).await;
            if tx.is_closed() {
                return;
            }
            // A busy stream is read at most every MIN_READ_GAP (each read takes what came).
            if woken {
                tokio::time::sleep_until(read_at + MIN_READ_GAP).await;
            }
            read_at = tokio::time::Instant::now();
            // Without a wake, also whether the serving host lives.
            let check_alive = !woken;
            let (now, key, log) = (clock.now().0, Arc::clone(&key), Arc::clone(&log));
            let read = reads
                .run(move |store| {
                    let record = match store.get(&key, now)? {
                        Some(b) => match codec::decode(&b)? {
                            Record::Stream(r) => Some(r),
                            _ => None,
                        },
                        None => None,
                    };
                    let events = store.read_log_after(&log, last, READ_MAX, now)?;
                    let alive = !check_alive || store.run_alive(run, &key)?;
                    Ok((record, events, alive))
                })
                .await;
            let Ok((record, events, alive)) = read else {
                failures += 1;
                if failures >= FAILURES_MAX {
                    return;
                }
                wait = RETRY;
                continue;
            };
            (failures, wait) = (0, QUIET_READ);
            let nothing = events.is_empty();
            if nothing {
                quiet_ms += u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
                if quiet_ms >= keepalive_ms {
                    quiet_ms = 0;
                    if tx.send(Bytes::from_static(crate::sse::COMMENT_KEEPALIVE)).await.is_err() {
                        return;
                    }
                }
            } else {
                quiet_ms = 0;
            }
            for (seq, frame) in events {
                if tx.send(frame).await.is_err() {
                    return;
                }
                last = seq;
            }
            // Forgotten (its session ended), closed and sent, or its host gone: the end.
            if record.as_ref().is_none_or(|r| finished(r, last) || r.run != run) || !alive {
                return;
            }
            // A wake that found nothing (a log this host's clock reads as expired while Redis
            // keeps it a little longer): not waited for again before the next quiet read, which
            // also looks whether the serving host lives.
            if !(woken && nothing) {
                watcher.rearm(last);
            }
        }
    });
    SseBody::new(Frames::from_vec(initial), Some(rx), None)
}
