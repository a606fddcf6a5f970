//! What wakes the streams this host follows for another (`actor::follow`): one thread per
//! host waits for appends to every followed stream's log at once ([`Store::wait_appended`]:
//! one `XREAD BLOCK` over them all on Redis) and wakes the followers whose log got an event.
//! It starts with the first follower and ends with the last, or with the host.

use std::sync::Arc;
use std::time::Duration;

use crate::ledger::Store;

/// How long the watch thread's one wait for appends blocks (a follower that starts meanwhile
/// is waited for from the next).
const WATCH_BLOCK_MS: u64 = 250;

/// The followed streams of one host, and the thread that waits for their appends (started
/// with the first follower, ending with the last or with the host).
pub(crate) struct Watch {
    store: Arc<dyn Store>,
    state: parking_lot::Mutex<WatchState>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("followed", &self.state.lock().followed.len()).finish()
    }
}

#[derive(Default)]
struct WatchState {
    next: u64,
    followed: std::collections::HashMap<u64, Followed>,
    /// The thread runs.
    running: bool,
}

struct Followed {
    log: Arc<str>,
    /// The last event the follower has.
    last: u64,
    /// Waited for (not woken since its last read).
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
            // Without the thread the followers read every QUIET_READ.
            st.running = started.is_ok();
        }
        drop(st);
        Watcher { watch: Arc::clone(self), id, wake }
    }
}

/// The watch thread: waits for appends to the armed followers' logs and wakes those whose log
/// got one; ends when no follower is left or the watch is gone.
fn watching(weak: &std::sync::Weak<Watch>) {
    loop {
        let Some(watch) = weak.upgrade() else { return };
        let armed: Vec<(u64, Arc<str>, u64)> = {
            let mut st = watch.state.lock();
            if st.followed.is_empty() {
                st.running = false;
                return;
            }
            st.followed
                .iter()
                .filter(|(_, f)| f.armed)
                .map(|(id, f)| (*id, Arc::clone(&f.log), f.last))
                .collect()
        };
        if armed.is_empty() {
            drop(watch);
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let logs: Vec<(&str, u64)> = armed.iter().map(|(_, l, last)| (&**l, *last)).collect();
        let woken: Vec<usize> = match watch.store.wait_appended(&logs, WATCH_BLOCK_MS) {
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
        for i in woken {
            let (id, _, last) = &armed[i];
            if let Some(f) = st.followed.get_mut(id)
                && f.armed
                && f.last == *last
            {
                f.armed = false;
                f.wake.notify_one();
            }
        }
    }
}

impl Watcher {
    /// Wait for a wake (the followed log got an event), at most `within`: whether one came.
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
