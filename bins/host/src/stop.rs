//! The end of a stop: the mark that this run stopped cleanly, written only when it did.
//!
//! The mark ([`Ledger::stopped_cleanly`]) tells the next start that everything this run handed
//! to the ledger is committed, so its copies are complete (an open GET stream is restored
//! instead of answered `410`). It is written only when, after a bounded wait, no session, no
//! stream and no request is left, a barrier of the writer resolved (everything queued before
//! it is committed) and then the mark in time. Otherwise the host exits without it, and
//! the log says why: the next start treats the run as a crash, which is safe.
//!
//! Every wait here has a deadline. A writer that cannot commit (a full or stuck disk) gives
//! up when its last handle is dropped, after a few more attempts (bounded), counting what is
//! lost (`lost_ops`).

use std::time::Duration;

use mcp_runtime::actor::Supervisor;
use mcp_runtime::ledger::Ledger;

/// How long the stop waits for sessions, streams and requests to end after the HTTP server
/// stopped.
const SETTLE: Duration = Duration::from_secs(5);
/// How long the stop waits for the writer: once for what is queued, once for the mark.
const COMMIT_DEADLINE: Duration = Duration::from_secs(10);

/// What is still running when the stop's wait ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leftovers {
    pub(crate) sessions: usize,
    pub(crate) streams: i64,
    pub(crate) in_flight: i64,
}

impl Leftovers {
    fn of(sup: &Supervisor) -> Leftovers {
        Leftovers {
            sessions: sup.session_count(),
            streams: sup.stats().streams_live(),
            in_flight: sup.in_flight(),
        }
    }

    /// Why this run cannot be marked clean: anything left may still hand records to the
    /// writer after the mark.
    pub(crate) fn unclean(self) -> Option<String> {
        let Leftovers { sessions, streams, in_flight } = self;
        (sessions > 0 || streams > 0 || in_flight > 0).then(|| {
            format!(
                "{sessions} sessions, {streams} streams and {in_flight} requests were still running"
            )
        })
    }
}

/// Whether the mark was written, and if not, why.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Marked {
    Clean,
    Not(String),
}

/// Stop every session, wait (at most [`SETTLE`]) for sessions, streams and requests to end,
/// then mark the run clean if it is ([`mark_if_clean`]).
pub(crate) async fn finish(sup: &Supervisor, ledger: Ledger) {
    sup.shutdown();
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut left = Leftovers::of(sup);
    while left.unclean().is_some() && tokio::time::Instant::now() < deadline {
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        left = Leftovers::of(sup);
    }
    match mark_if_clean(left, ledger).await {
        Marked::Clean => tracing::info!("marked this run as stopped cleanly"),
        Marked::Not(why) => tracing::warn!(
            "this run is not marked as stopped cleanly ({why}): the next start treats it as a crash"
        ),
    }
}

/// Write the clean-stop mark when nothing is `left` and the writer commits everything queued
/// and then the mark, each within [`COMMIT_DEADLINE`].
pub(crate) async fn mark_if_clean(left: Leftovers, ledger: Ledger) -> Marked {
    if let Some(why) = left.unclean() {
        return Marked::Not(why);
    }
    let stuck = |what: &str| {
        Marked::Not(format!(
            "the ledger did not commit {what} within {} s",
            COMMIT_DEADLINE.as_secs()
        ))
    };
    // A barrier resolves only once everything queued before it is committed: a writer that
    // cannot commit misses the deadline.
    if actix_web::rt::time::timeout(COMMIT_DEADLINE, ledger.writer.barrier()).await.is_err() {
        return stuck("what was queued");
    }
    if actix_web::rt::time::timeout(COMMIT_DEADLINE, ledger.stopped_cleanly()).await.is_err() {
        return stuck("the mark");
    }
    Marked::Clean
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Leftovers = Leftovers { sessions: 0, streams: 0, in_flight: 0 };

    #[test]
    fn a_run_with_a_session_a_stream_or_a_request_left_is_not_clean() {
        assert_eq!(NONE.unclean(), None);
        for left in [
            Leftovers { sessions: 1, ..NONE },
            Leftovers { streams: 1, ..NONE },
            Leftovers { in_flight: 1, ..NONE },
        ] {
            assert!(left.unclean().is_some(), "{left:?}");
        }
    }

    /// The clean marks in the ledger at `path` (read with SQLite, as the next start would).
    fn marks(path: &std::path::Path) -> Vec<String> {
        let db =
            rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut st =
            db.prepare("SELECT key FROM kv WHERE key LIKE 'm/clean/%' ORDER BY key").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn the_clean_stop_mark_is_written_only_when_nothing_is_left() {
        let dir = mcp_devtools::TempDir::new("clean-mark");
        let mut cfg = mcp_runtime::config::RuntimeConfig::default();
        cfg.ledger.path = dir.path().join("l.db").display().to_string();
        cfg.security.cursor_secret_hex = Some("ab".repeat(16));
        let path = dir.path().join("l.db");
        let run = |left: Leftovers| {
            let ledger = Ledger::open(&cfg).unwrap();
            let marked = actix_web::rt::System::new().block_on(mark_if_clean(left, ledger.clone()));
            // The last handle: its drop commits what is queued and closes the file.
            drop(ledger);
            marked
        };
        let first = run(Leftovers { sessions: 1, ..NONE });
        assert!(matches!(&first, Marked::Not(why) if why.contains("1 sessions")), "{first:?}");
        assert!(marks(&path).is_empty(), "a session was left: no mark");
        assert_eq!(run(NONE), Marked::Clean);
        assert_eq!(marks(&path), ["m/clean/2"]);
    }
}
