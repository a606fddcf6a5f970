//! Giving freed memory back to the operating system.
//!
//! Two allocators hold memory here: jemalloc every Rust allocation (the global allocator,
//! see main.rs), glibc SQLite's. Each keeps what was freed: after a burst (thousands of
//! sessions holding large handshakes and buffered responses, then gone) the process would stay
//! resident at its peak although the memory is free (measured with glibc alone: 588 MiB after
//! 2,000 such sessions were deleted, 7 MiB after one `malloc_trim`). jemalloc returns dirty
//! pages on its own after about 10 s, but only while it is being called; so the host asks both
//! to return free pages at once, as [`Policy`] says: when the footprint it can see
//! (connections, sessions, streams, stream memory) shrank, and once it stopped changing
//! (read every [`CHECK`]: within a second of a burst's end), each spaced so that a busy or
//! lightly used server does not walk its arenas for nothing. glibc's trim locks each arena in
//! turn while it runs (51 ms for that 580 MiB release, microseconds otherwise). Once the
//! footprint settled, the ledger gives back its SQLite page caches first (pages the OS keeps
//! in its file cache; 0.86 KiB of RSS per idle session after a burst of 10,000:
//! `bench/results/issue23-2026-12-04-sqlite-release/`). [`fix_thresholds`] keeps glibc from
//! raising its thresholds after large frees, which would leave memory at each arena's top out
//! of the trim's reach.

use std::time::Duration;

/// What the host can see of its memory: HTTP requests served so far, then what holds memory
/// and is released when it ends: open connections, awake sessions (live, not hibernating),
/// live streams, stream memory bytes.
pub(crate) type Footprint = (u64, [i64; 4]);

/// How often the footprint is read (a few counters): a burst's memory goes back within
/// two of these after its last request.
const CHECK: Duration = Duration::from_millis(500);

/// Trims at the first checks after the footprint stopped changing (what is freed just after
/// the last request, or was in use at the first trim: a connection the ledger was writing
/// on, the last connections' buffers).
const QUIET_TRIMS: u32 = 3;

/// Requests served since the last quiet trims that make the next quiet a burst's end, trimmed
/// at once however recent those were.
const BURST_REQUESTS: u64 = 1_000;

/// When to trim, read every [`CHECK`]:
/// - where connections, sessions, streams or stream memory shrank (memory is being freed), at
///   most once every `every` checks (a busy server's counts go down and up all the time);
/// - once requests stopped coming and the footprint stopped changing (a burst is over: what
///   it allocated is free now), [`QUIET_TRIMS`] times at quiet checks, a change without a
///   request (a connection closing, a session hibernating) pausing the series, not ending it.
///   A series begins at the first quiet check when [`BURST_REQUESTS`] came since the last
///   series or `every` checks passed since it; otherwise later in the quiet, or not at all if
///   requests come first (a lightly used server goes quiet between its requests).
///
/// Never while the server is steady or idle for longer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    last_check: Footprint,
    every: u32,
    /// Quiet trims still owed since requests last came (fewer than [`QUIET_TRIMS`] and more
    /// than none: their series has begun, and goes on at each quiet check).
    settled_left: u32,
    /// Checks since the last trim of each kind.
    since_shrinking: u32,
    since_settled: u32,
    /// Requests served at the last quiet trim.
    settled_at: u64,
}

impl Policy {
    /// Checked every [`CHECK`], each kind of trim at most once every `every` checks (at
    /// least 1).
    pub(crate) fn new(start: Footprint, every: u32) -> Policy {
        let every = every.max(1);
        Policy {
            last_check: start,
            every,
            settled_left: 0,
            since_shrinking: every,
            since_settled: every,
            settled_at: start.0,
        }
    }

    /// Whether to trim at this check, and why.
    pub(crate) fn due(&mut self, now: Footprint) -> Due {
        let last = self.last_check;
        let shrank = now.1.iter().zip(last.1).any(|(n, l)| *n < l);
        self.last_check = now;
        self.since_shrinking = self.since_shrinking.saturating_add(1);
        self.since_settled = self.since_settled.saturating_add(1);
        if now != last {
            if now.0 != last.0 {
                self.settled_left = QUIET_TRIMS;
            }
            if shrank && self.since_shrinking >= self.every {
                self.since_shrinking = 0;
                return Due::Shrinking;
            }
            return Due::No;
        }
        let series = self.settled_left < QUIET_TRIMS;
        let burst = now.0.saturating_sub(self.settled_at) >= BURST_REQUESTS;
        if self.settled_left > 0 && (series || burst || self.since_settled >= self.every) {
            self.settled_left -= 1;
            (self.since_settled, self.settled_at) = (0, now.0);
            return Due::Settled;
        }
        Due::No
    }
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Steady, growing or idle for long: nothing to give back.
    No,
    /// Connections, sessions, streams or stream memory shrank while serving: the allocators
    /// give back what was freed.
    Shrinking,
    /// The footprint stopped changing: a burst is over. The ledger's page caches are given
    /// back too (not while serving: the writer's is large on purpose, for the logs' appends).
    Settled,
}

/// Largest allocation served from an arena; larger ones are mapped on their own and unmapped
/// when freed. Also the free space an arena keeps at its top before it shrinks.
const FIXED_THRESHOLD: i32 = 128 << 10;

/// Fix glibc's mmap and trim thresholds at their documented defaults (128 KiB). Left
/// dynamic, glibc raises both after the first large free, and every thread arena then keeps
/// megabytes at its top that `malloc_trim` cannot return (measured when glibc held every
/// allocation: a 4 MiB request body lifted the trim threshold past 8 MiB, and 12 MiB of
/// anonymous RSS stayed with 1.4 MiB in use). Request bodies are jemalloc's now; SQLite's page
/// cache and statements are what glibc still holds. Call once, before serving.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn fix_thresholds() {
    // SAFETY: mallopt takes two integers and has no caller-side invariants; glibc serializes
    // it with every other allocator call.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, FIXED_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, FIXED_THRESHOLD);
    }
}

/// Other allocators manage their thresholds themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn fix_thresholds() {}

/// Ask both allocators to return their free pages; `true` if glibc released any (jemalloc's
/// purge does not say).
pub(crate) fn release() -> bool {
    purge_jemalloc();
    trim_glibc()
}

/// Return every jemalloc arena's unused dirty pages now (`arena.<MALLCTL_ARENAS_ALL>.purge`).
#[allow(unsafe_code)]
fn purge_jemalloc() {
    // SAFETY: the name is a NUL-terminated string that outlives the call; this control takes
    // no old or new value, so every pointer passed is null with length 0, as mallctl(3)
    // allows for a void control.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        tracing::debug!(rc, "jemalloc: arena purge refused");
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim_glibc() -> bool {
    // SAFETY: malloc_trim takes no pointers and has no caller-side invariants; glibc
    // serializes it with every other allocator call.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other C allocators (musl, macOS) return memory themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_glibc() -> bool {
    false
}

/// Check every [`CHECK`], trim when [`Policy::due`] says (`every`: the spacing it keeps).
/// Ends once the server is gone.
pub(crate) async fn run(server: mcp_runtime::server::Control, every: Duration) {
    let footprint = || {
        let s = server.stats()?;
        Some((
            s.requests,
            // Awake sessions: one that hibernates frees its actor and stays counted.
            [
                s.connections,
                s.sessions.saturating_sub(s.sessions_hibernating) as i64,
                s.streams,
                s.stream_memory_bytes as i64,
            ],
        ))
    };
    let Some(start) = footprint() else { return };
    let every = every.as_millis().div_ceil(CHECK.as_millis());
    let mut policy = Policy::new(start, u32::try_from(every).unwrap_or(u32::MAX));
    let mut tick = tokio::time::interval(CHECK);
    loop {
        tick.tick().await;
        let Some(now) = footprint() else { return };
        let due = policy.due(now);
        if due != Due::No {
            if due == Due::Settled {
                // SQLite's page caches first: what they free is glibc's, returned just after.
                server.release_ledger_memory();
            }
            let released = release();
            tracing::debug!(
                released,
                connections = now.1[0],
                sessions = now.1[1],
                "returned free memory to the OS"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_while_shrinking_and_a_few_times_once_settled_never_when_steady() {
        let mut p = Policy::new((0, [1, 10, 5, 1000]), 1);
        assert_eq!(p.due((0, [1, 10, 5, 1000])), Due::No, "nothing happened since start");
        assert_eq!(p.due((900, [4, 20, 9, 5000])), Due::No, "growing");
        assert_eq!(p.due((1800, [4, 20, 9, 5000])), Due::No, "requests go on: busy, not shrinking");
        assert!(
            (0..QUIET_TRIMS).all(|_| p.due((1800, [4, 20, 9, 5000])) == Due::Settled),
            "settled: the burst's garbage goes, and what is freed right after"
        );
        assert_eq!(p.due((1800, [4, 20, 9, 5000])), Due::No, "idle since: no more trims");
        assert_eq!(p.due((1800, [0, 20, 9, 5000])), Due::Shrinking, "connections closed");
        assert_eq!(p.due((1810, [0, 5, 9, 5000])), Due::Shrinking, "sessions ended");
        assert_eq!(p.due((1810, [0, 5, 8, 5000])), Due::Shrinking, "a stream stopped");
        assert_eq!(p.due((1810, [0, 5, 8, 10])), Due::Shrinking, "buffered events released");
        assert_eq!(p.due((1810, [0, 5, 8, 10])), Due::Settled, "quiet again: the caches too");
    }

    #[test]
    fn while_busy_a_shrinking_footprint_trims_at_most_once_an_interval() {
        let mut p = Policy::new((0, [10, 10, 10, 1000]), 4);
        // A busy server: requests go on, its streams go down and up.
        let mut dues = Vec::new();
        for i in 1..=12u64 {
            let streams = if i % 2 == 0 { 9 } else { 10 };
            dues.push(p.due((i * 100, [10, 10, streams, 1000])));
        }
        let trims: Vec<usize> = (0..12).filter(|&i| dues[i] != Due::No).collect();
        assert_eq!(trims, vec![1, 5, 9], "{dues:?}");
        assert!(trims.iter().all(|&i| dues[i] == Due::Shrinking));
        // The burst ends: settled at the next three checks, whatever the last shrinking
        // trim's time, then nothing.
        let next: Vec<Due> = (0..10).map(|_| p.due((1200, [10, 10, 9, 1000]))).collect();
        let settled: Vec<usize> = (0..10).filter(|&i| next[i] == Due::Settled).collect();
        assert_eq!(settled, vec![0, 1, 2], "{next:?}");
    }

    #[test]
    fn a_change_without_requests_pauses_the_quiet_trims_of_a_burst_and_does_not_end_them() {
        let mut p = Policy::new((0, [0, 0, 0, 0]), 20);
        assert_eq!(p.due((5_000, [32, 0, 0, 0])), Due::No, "the burst");
        assert_eq!(p.due((5_000, [32, 0, 0, 0])), Due::Settled, "its end");
        assert_eq!(p.due((5_000, [0, 0, 0, 0])), Due::Shrinking, "its connections close");
        assert_eq!(p.due((5_000, [0, 0, 0, 0])), Due::Settled, "the series goes on");
        assert_eq!(p.due((5_000, [0, 0, 0, 0])), Due::Settled);
        assert_eq!(p.due((5_000, [0, 0, 0, 0])), Due::No, "three in all");
    }

    #[test]
    fn a_lightly_used_server_going_quiet_between_requests_trims_at_most_a_series_an_interval() {
        let mut p = Policy::new((0, [1, 1, 0, 0]), 20);
        // A request every 4 checks (a ping every 2 s): quiet for 3 checks after each.
        let dues: Vec<Due> = (1..=100u64).map(|i| p.due((i.div_ceil(4), [1, 1, 0, 0]))).collect();
        let trims: Vec<usize> = (0..100).filter(|&i| dues[i] != Due::No).collect();
        // A series at the first pause, then one trim 20 checks after each (the next request
        // ends it).
        assert_eq!(trims, vec![1, 2, 3, 23, 43, 63, 83], "{dues:?}");
        // A burst of requests, then quiet: its memory goes back at once, recent trims or not.
        assert_eq!(p.due((5_000, [1, 1, 0, 0])), Due::No, "the burst");
        assert_eq!(p.due((5_000, [1, 1, 0, 0])), Due::Settled, "its end");
    }
}
