//! What wakes the streams this host follows for another (`actor::follow`): one thread per
//! host waits for appends to every followed stream's log at once ([`Store::wait_appended`]:
//! one `XREAD BLOCK` over them all on Redis) and wakes the followers whose log got an event
//! after the last one they have. It starts with the first follower and ends with the last, or
//! with the host.
//!
//! A woken follower is left out of the waits until it has read and asks again
//! ([`Watcher::rearm`]); while any follower is woken, a wait blocks only [`SHORT_BLOCK_MS`],
//! so one that asks again is waited for within that, whatever the other streams do.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ledger::Store;

/// How long one wait for appends blocks while every follower waits (a follower that starts
/// meanwhile is waited for from the next).
const WATCH_BLOCK_MS: u64 = 250;
/// How long it blocks while some follower is woken and reading (it asks again soon).
const SHORT_BLOCK_MS: u64 = 10;
/// The pause while no follower waits (all reading).
const ALL_READING: Duration = Duration::from_millis(5);

/// The followed streams of one host, and the thread that waits for their appends.
pub(crate) struct Watch {
    store: Arc<dyn Store>,
    /// Taken by the followers (to join, ask again, leave) and by the thread between two waits,
    /// never across one: a short lock beside a blocking read.
    state: parking_lot::Mutex<WatchState>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("followed", &self.state.lock().followed.len()).finish()
    }
}

#[derive(Default)]
struct WatchState {
    /// The next follower's number.
    next: u64,
    followed: HashMap<u64, Followed>,
    /// The thread runs (cleared by the thread itself as it ends, even by a panic).
    running: bool,
}

struct Followed {
    log: Arc<str>,
    /// The last event the follower has.
    last: u64,
    /// Waited for (not woken since it last asked).
    armed: bool,
    wake: Arc<tokio::sync::Notify>,
}

/// One follower's place in the [`Watch`]; dropping it leaves.
pub(crate) struct Watcher {
    watch: Arc<Watch>,
    id: u64,
    wake: Arc<tokio::sync::Notify>,
}

impl Watch {
    /// The watch of `store`'s logs (its thread starts with the first follower).
    pub(crate) fn new(store: Arc<dyn Store>) -> Arc<Watch> {
        Arc::new(Watch { store, state: parking_lot::Mutex::default() })
    }

    /// Follow `log` from after event `last`.
    pub(crate) fn watch(self: &Arc<Self>, log: Arc<str>, last: u64) -> Watcher {
        let wake = Arc::new(tokio::sync::Notify::new());
        let mut st = self.state.lock();
        let id = st.next;
        st.next += 1;
        st.followed.insert(id, Followed { log, last, armed: true, wake: Arc::clone(&wake) });
        if !st.running {
            let weak = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("ledger-follow".into())
                .spawn(move || watching(&weak));
            // Without the thread the followers read once a second by themselves.
            st.running = started.is_ok();
        }
        drop(st);
        Watcher { watch: Arc::clone(self), id, wake }
    }
}

/// Clears [`WatchState::running`] when the thread panics, so the next follower starts
/// another (an ordinary end clears it under the lock as it decides to end).
struct Running(std::sync::Weak<Watch>);

impl Drop for Running {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(w) = self.0.upgrade()
        {
            w.state.lock().running = false;
        }
    }
}

/// The followers to wait for, one entry per log (from the least `last` of its followers),
/// and whether some follower is woken and reading; `None` when no follower is left.
type Waits = (Vec<(Arc<str>, u64)>, bool);

fn waits(st: &WatchState) -> Option<Waits> {
    if st.followed.is_empty() {
        return None;
    }
    let mut logs: HashMap<&Arc<str>, u64> = HashMap::new();
    let mut reading = false;
    for f in st.followed.values() {
        if f.armed {
            let after = logs.entry(&f.log).or_insert(f.last);
            *after = (*after).min(f.last);
        } else {
            reading = true;
        }
    }
    Some((logs.into_iter().map(|(l, a)| (Arc::clone(l), a)).collect(), reading))
}

/// The watch thread: waits for appends to the waiting followers' logs and wakes those whose
/// log got an event after their last; ends when no follower is left or the watch is gone.
fn watching(weak: &std::sync::Weak<Watch>) {
    let _running = Running(weak.clone());
    loop {
        let Some(watch) = weak.upgrade() else { return };
        let waits = {
            let mut st = watch.state.lock();
            let w = waits(&st);
            if w.is_none() {
                st.running = false;
            }
            w
        };
        let Some((logs, reading)) = waits else { return };
        if logs.is_empty() {
            drop(watch);
            std::thread::sleep(ALL_READING);
            continue;
        }
        let block = if reading { SHORT_BLOCK_MS } else { WATCH_BLOCK_MS };
        let asked: Vec<(&str, u64)> = logs.iter().map(|(l, a)| (&**l, *a)).collect();
        let found = match watch.store.wait_appended(&asked, block) {
            Ok(found) => found,
            Err(e) => {
                // The followers read by themselves meanwhile (and count their failures).
                tracing::debug!(error = %e, "cannot wait for the followed streams' appends");
                drop(watch);
                std::thread::sleep(Duration::from_millis(WATCH_BLOCK_MS));
                continue;
            }
        };
        let mut st = watch.state.lock();
        for (i, seq) in found {
            let log = &logs[i].0;
            for f in st.followed.values_mut() {
                if f.armed && f.log == *log && f.last < seq {
                    f.armed = false;
                    f.wake.notify_one();
                }
            }
        }
    }
}

impl Watcher {
    /// Wait for a wake (the followed log got an event after the last asked for), at most
    /// `within`: whether one came.
    pub(crate) async fn woken(&self, within: Duration) -> bool {
        tokio::time::timeout(within, self.wake.notified()).await.is_ok()
    }

    /// The follower has every event up to `last`: wait for the next.
    pub(crate) fn rearm(&self, last: u64) {
        if let Some(f) = self.watch.state.lock().followed.get_mut(&self.id) {
            f.last = last;
            f.armed = true;
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.watch.state.lock().followed.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_wait_per_log_from_its_least_last_and_the_readers_make_it_short() {
        let mut st = WatchState::default();
        let log: Arc<str> = "e/s/1".into();
        let other: Arc<str> = "e/s/2".into();
        let wake = Arc::new(tokio::sync::Notify::new());
        let f = |log: &Arc<str>, last, armed| Followed {
            log: Arc::clone(log),
            last,
            armed,
            wake: Arc::clone(&wake),
        };
        assert!(waits(&st).is_none(), "none left: the thread ends");
        st.followed.insert(0, f(&log, 7, true));
        st.followed.insert(1, f(&log, 3, true));
        st.followed.insert(2, f(&other, 9, false));
        let (logs, reading) = waits(&st).unwrap();
        assert_eq!(logs, [(Arc::clone(&log), 3)]);
        assert!(reading, "follower 2 is reading");
    }
}
