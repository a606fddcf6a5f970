//! The process's life as the supervisor runs it: the published phase, reloads and rollbacks
//! of the generation, the stop request, the drain and its waits (the types are
//! `actor::lifecycle`'s).

use std::sync::Arc;
use std::time::Duration;

use crate::actor::generations::{GenOrigin, GenSettings};
use crate::actor::lifecycle::{Lifecycle, Phase};
use crate::proto::ids::Generation;

use super::Supervisor;

impl Supervisor {
    /// Current phase.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.lifecycle.borrow().phase
    }

    /// The published lifecycle, to watch.
    #[must_use]
    pub fn lifecycle(&self) -> tokio::sync::watch::Receiver<Lifecycle> {
        self.lifecycle.subscribe()
    }

    pub(super) fn publish(&self, change: impl FnOnce(&mut Lifecycle)) {
        let now = self.now().0;
        self.lifecycle.send_modify(|l| {
            let before = *l;
            change(l);
            if *l != before {
                l.since_ms = now;
                tracing::info!(phase = ?l.phase, generation = l.generation.0, "lifecycle");
            }
        });
    }

    /// Start a new generation with `flags` (a reload or `PUT /admin/flags`; `origin`
    /// [`GenOrigin::Rollback`] for a rollback): streams opened from now on follow it, older
    /// ones keep theirs.
    pub fn reload(&self, origin: GenOrigin, change: impl FnOnce(&mut GenSettings)) -> Generation {
        let g = self.gens.advance(origin, self.now().0, change);
        let id = g.settings.id;
        self.stream_env.ledger.ledger.record_generation(id.0);
        tracing::info!(generation = id.0, origin = ?origin, flags = ?g.settings.flags, "new generation");
        self.publish(|l| l.generation = id);
        id
    }

    /// Roll back: a new generation whose new streams are not resumable. Streams of older
    /// generations stay resumable until their retention ends; their requests finish, within
    /// `shutdown.grace_secs`: then the ones still running are ended with the "drained" error
    /// (`-32010`). Must run on an actix or tokio runtime (the deadline is a task).
    pub fn rollback(self: &Arc<Self>) -> Generation {
        let g = self.reload(GenOrigin::Rollback, |s| {
            s.flags = s.flags.map(crate::proto::rollout::RolloutFlags::rolled_back)
        });
        let grace = Duration::from_secs(self.cfg.shutdown.grace_secs);
        let sup = Arc::downgrade(self);
        actix_rt::spawn(async move {
            let deadline = tokio::time::Instant::now() + grace;
            loop {
                let Some(s) = sup.upgrade() else { return };
                let left = s.gens.in_flight_older_than(g);
                if left == 0 {
                    return;
                }
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(
                        generation = g.0,
                        requests = left,
                        "rollback drain: grace period over; the older generations' requests still running are ended (-32010)"
                    );
                    // A hibernating session has no request.
                    for h in s.registry.all_awake() {
                        // Control message: it must arrive.
                        h.addr.do_send(crate::actor::session::EndOlderRequests { before: g });
                    }
                    s.gens.end_stateless_requests(Some(g));
                    return;
                }
                drop(s);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        g
    }

    /// Ask the host to stop gracefully (`POST /admin/drain`), as SIGTERM does.
    pub fn request_stop(&self) {
        self.stop_requested.notify_one();
    }

    /// Resolves when [`Supervisor::request_stop`] was called.
    pub async fn stop_requested(&self) {
        self.stop_requested.notified().await;
    }

    /// `starting` -> `serving`: requests are admitted (call once the listeners are up).
    pub fn start_serving(&self) {
        self.publish(|l| {
            if l.phase == Phase::Starting {
                l.phase = Phase::Serving;
            }
        });
    }

    /// Every session has stopped (the host saw the registry empty after
    /// [`Supervisor::shutdown`]): `stopped`; the ledger's last writes follow.
    pub fn mark_stopped(&self) {
        self.publish(|l| l.phase = Phase::Stopped);
    }

    /// Stop admitting new requests (503 with `Retry-After`); in-flight ones go on, and so
    /// does what finishes them (answers to server-to-client requests, cancellations, resumes).
    pub fn begin_drain(&self) {
        self.publish(|l| {
            if l.phase == Phase::Serving || l.phase == Phase::Starting {
                l.phase = Phase::Draining;
            }
        });
    }

    /// Whether no session, no stream and no request is left.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.session_count() == 0 && self.stats().streams_live() <= 0 && self.in_flight() <= 0
    }

    /// Wait until `done` holds or `deadline` passes; returns whether it holds. Woken when
    /// the last session, stream or request (of a generation) ends, not by polling.
    pub async fn wait_until(
        &self,
        deadline: tokio::time::Instant,
        done: impl Fn(&Supervisor) -> bool,
    ) -> bool {
        let quiet = &self.stream_env.stats.quiet;
        loop {
            // Registered before the check: a change between the check and the wait still
            // wakes it.
            let changed = quiet.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return done(self);
            }
        }
    }

    /// Requests in flight, over every generation.
    #[must_use]
    pub fn in_flight(&self) -> i64 {
        self.gens.in_flight_total()
    }

    /// Stop admitting and stop every live session: each stream's connection ends with a
    /// `retry` hint once its events are committed (its client resumes after the restart),
    /// requests still running are cancelled here and answered after the restart with the
    /// "server restarted" error, and the sessions deregister, their records left active.
    /// 2026-07-28 requests still running are answered "drained" (`-32010`) at once.
    /// Returns how many sessions were told to stop.
    pub fn shutdown(&self) -> usize {
        self.begin_drain();
        // 2026-07-28 requests have no "after the restart": they are answered "drained" now.
        self.gens.end_stateless_requests(None);
        let (awake, asleep) = self.registry.take_for_shutdown();
        for h in &awake {
            // Control message: it must arrive.
            h.addr.do_send(crate::actor::session::Shutdown { _place: None });
        }
        // Recorded as data, not woken: a stop with many of them does not start their actors.
        let hibernating = asleep.len();
        for s in asleep {
            s.shut_down();
        }
        awake.len() + hibernating
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RuntimeConfig;
    use crate::tools::Catalog;

    /// With the clock paused, time moves only when every task waits: a wait that returns
    /// before its deadline was woken by what it waited for.
    #[tokio::test(start_paused = true)]
    async fn a_stop_waiting_for_the_last_request_or_stream_is_woken_when_it_ends() {
        let catalog = Catalog::builder().build(crate::tools::ServerInfo::new("t", "1")).unwrap();
        let sup = Supervisor::new(RuntimeConfig::default(), catalog);
        let request = sup.generations().enter_current(crate::actor::generations::Counted::InFlight);
        sup.stats().stream_started();
        let start = tokio::time::Instant::now();
        let deadline = start + Duration::from_secs(3600);
        let stats = Arc::clone(sup.stats());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(request);
            tokio::time::sleep(Duration::from_secs(1)).await;
            stats.stream_stopped(&crate::proto::stream::StreamStats::default());
        });
        assert!(sup.wait_until(deadline, |s| s.in_flight() <= 0).await);
        assert_eq!(start.elapsed(), Duration::from_secs(1), "woken when the request ended");
        assert!(sup.wait_until(deadline, Supervisor::is_idle).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2), "woken when the stream stopped");
        let never = sup.generations().enter_current(crate::actor::generations::Counted::InFlight);
        assert!(!sup.wait_until(start + Duration::from_secs(10), |s| s.in_flight() <= 0).await);
        assert_eq!(start.elapsed(), Duration::from_secs(10), "otherwise at its deadline");
        drop(never);
    }
}
