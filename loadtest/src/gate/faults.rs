//! The faults the gate makes itself: kills, graceful restarts and flag changes of the host it spawned.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::run::SpawnedHost;
use parking_lot::Mutex;
use std::sync::Arc;

use super::spec::*;
use super::tally::*;

/// How the `crash` and `sigterm` scenarios stop the host.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGKILL.
    Kill,
    /// SIGTERM (the graceful drain), waiting for the exit.
    Term,
}

/// How many nodes the phase's faults have down at once (its tasks run on one thread): one
/// more may go down only while another still serves.
#[derive(Clone)]
pub(crate) struct Outages {
    down: Rc<Cell<usize>>,
    nodes: usize,
}

/// A node taken down, until dropped.
pub(crate) struct Outage(Rc<Cell<usize>>);

impl Drop for Outage {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

impl Outages {
    pub(crate) fn new(nodes: usize) -> Outages {
        Outages { down: Rc::new(Cell::new(0)), nodes }
    }

    /// Take a node down once another still serves (at once with one node: the host is the
    /// only one, and its own faults are the scenario); `None` once `stop` says so first.
    async fn take(&self, stop: impl Fn() -> bool) -> Option<Outage> {
        while self.nodes > 1 && self.down.get() + 1 >= self.nodes {
            if stop() {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.down.set(self.down.get() + 1);
        Some(Outage(Rc::clone(&self.down)))
    }
}

/// The `crash` and `sigterm` scenarios: until `stop`, stop the host after a random pause, each
/// of `stops` in turn, and start it again on the same ledger and port (on a blocking
/// thread: the clients keep running). The pauses are the crash scenario's when it is among
/// `stops`.
pub(crate) async fn kill_now_and_then(
    host: Arc<Mutex<SpawnedHost>>,
    seed: u64,
    stop: Rc<Cell<bool>>,
    phase: Rc<RefCell<Phase>>,
    stops: Vec<Stop>,
    outages: Outages,
) -> Result<(), String> {
    let mut x = seed | 1;
    let (low, high) = if stops.contains(&Stop::Kill) { KILL_PAUSE_MS } else { TERM_PAUSE_MS };
    let mut round = 0usize;
    loop {
        let pause_draw = crate::proxy::next_random(&mut x);
        let pause = low + pause_draw % (high - low);
        let how = stops[round % stops.len()];
        round += 1;
        let until = Instant::now() + Duration::from_millis(pause);
        while Instant::now() < until {
            if stop.get() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Some(_down) = outages.take(|| stop.get()).await else { return Ok(()) };
        let h = Arc::clone(&host);
        let t0 = Instant::now();
        let exit = tokio::task::spawn_blocking(move || match how {
            Stop::Kill => h.lock().kill_and_restart().map(|()| None),
            Stop::Term => h.lock().terminate_and_restart().map(Some),
        })
        .await
        .map_err(|e| format!("restart: {e}"))??;
        let mut p = phase.borrow_mut();
        let _ = p.restart_ms.record(t0.elapsed().as_millis().max(1) as u64);
        match exit {
            None => p.kills += 1,
            Some(code) => {
                p.restarts += 1;
                if code != Some(0) {
                    p.unclean_exits += 1;
                    p.note_error(format!("graceful stop exited with {code:?}"));
                }
            }
        }
    }
}

/// The `rollout` scenario: until `stop` (and at least one whole cycle), set the host's flags
/// through its admin API to each setting of [`ROLLOUT_CYCLE`] in turn, then roll back, each
/// kept [`FLIP_EVERY_MS`]. At the end the defaults are set again for the phases after it.
pub(crate) async fn flip_now_and_then(
    host: Arc<Mutex<SpawnedHost>>,
    stop: Rc<Cell<bool>>,
    phase: Rc<RefCell<Phase>>,
) -> Result<(), String> {
    // Asked for each change, and used with the host held: a restart (crash, sigterm in the
    // mixed phase) moves the admin API to a new port, and waits until the change is made.
    let with_admin = |h: &Arc<Mutex<SpawnedHost>>,
                      f: &dyn Fn(&crate::admin::Admin) -> Result<(), String>| {
        let host = h.lock();
        f(&host.admin().ok_or("the spawned host has no admin API")?)
    };
    let mut step = 0usize;
    while !stop.get() || phase.borrow().flips < FLIPS_PER_PHASE {
        let h = Arc::clone(&host);
        let i = step % (ROLLOUT_CYCLE.len() + 1);
        tokio::task::spawn_blocking(move || {
            with_admin(&h, &|a| match ROLLOUT_CYCLE.get(i) {
                Some((resumable, share)) => {
                    a.set_flags(&json!({"resumable": resumable, "share": share}))
                }
                None => a.rollback(),
            })
        })
        .await
        .map_err(|e| e.to_string())??;
        phase.borrow_mut().flips += 1;
        step += 1;
        let until = Instant::now() + Duration::from_millis(FLIP_EVERY_MS);
        while Instant::now() < until && !(stop.get() && phase.borrow().flips >= FLIPS_PER_PHASE) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let h = Arc::clone(&host);
    tokio::task::spawn_blocking(move || {
        with_admin(&h, &|a| {
            a.set_flags(&json!({"resumable": "on", "share": 1.0, "write_tools": "all"}))
        })
    })
    .await
    .map_err(|e| e.to_string())?
}

/// How a node is taken away.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeFault {
    /// `node-loss`: SIGKILL, down for [`NODE_DOWN_MS`], started again.
    Loss,
    /// `partition`: SIGSTOP past the lease, SIGCONT, its exit (status 3) awaited, started
    /// again.
    Partition,
}

/// The `node-loss` and `partition` scenarios: until `stop` (and their count), take one node
/// after another away after a random pause, as `how` says, while the others serve.
pub(crate) async fn nodes_now_and_then(
    nodes: Vec<Arc<Mutex<SpawnedHost>>>,
    seed: u64,
    stop: Rc<Cell<bool>>,
    phase: Rc<RefCell<Phase>>,
    how: NodeFault,
    outages: Outages,
) -> Result<(), String> {
    let mut x = seed | 1;
    let (low, high) = match how {
        NodeFault::Loss => NODE_LOSS_PAUSE_MS,
        NodeFault::Partition => PARTITION_PAUSE_MS,
    };
    let mut round = seed as usize;
    loop {
        let pause = low + crate::proxy::next_random(&mut x) % (high - low);
        let until = Instant::now() + Duration::from_millis(pause);
        while Instant::now() < until {
            if stop.get() && !phase.borrow().owes_faults() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Some(_down) = outages.take(|| stop.get() && !phase.borrow().owes_faults()).await else {
            return Ok(());
        };
        let node = Arc::clone(&nodes[round % nodes.len()]);
        round += 1;
        let t0 = Instant::now();
        let exited = tokio::task::spawn_blocking(move || {
            let mut n = node.lock();
            match how {
                NodeFault::Loss => {
                    n.process.kill();
                    std::thread::sleep(Duration::from_millis(NODE_DOWN_MS));
                    n.start_again().map(|()| Some(3))
                }
                NodeFault::Partition => {
                    if !n.process.signal("STOP") {
                        return Err("cannot SIGSTOP a node".to_owned());
                    }
                    std::thread::sleep(Duration::from_millis(NODE_LEASE_MS + 1_000));
                    n.process.signal("CONT");
                    // Its lease is gone: it exits 3 at its next renewal (a third of the lease).
                    let mut code = None;
                    for _ in 0..(NODE_LEASE_MS * 4 / 20) {
                        if let Some(s) = n.process.exit_status() {
                            code = s.code();
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    if code.is_none() {
                        n.process.kill();
                    }
                    n.start_again().map(|()| code)
                }
            }
        })
        .await
        .map_err(|e| format!("node fault: {e}"))??;
        let mut p = phase.borrow_mut();
        let _ = p.restart_ms.record(t0.elapsed().as_millis().max(1) as u64);
        match how {
            NodeFault::Loss => p.nodes_lost += 1,
            NodeFault::Partition => {
                p.partitions += 1;
                if exited != Some(3) {
                    p.partition_unexpected += 1;
                    p.note_error(format!(
                        "a node paused past its lease exited with {exited:?}, not 3"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_faults_never_take_the_last_serving_node_down() {
        let two = Outages::new(2);
        let first = two.take(|| false).await.expect("one node down");
        let second = tokio::time::timeout(Duration::from_millis(100), two.take(|| false)).await;
        assert!(second.is_err(), "the other node keeps serving");
        assert!(two.take(|| true).await.is_none(), "a phase that stops waits no more");
        drop(first);
        assert!(two.take(|| false).await.is_some(), "back up: the next may go");
        // One node: its own faults are the scenario.
        let one = Outages::new(1);
        let _a = one.take(|| false).await.expect("down");
        assert!(one.take(|| false).await.is_some());
    }
}
