//! The host's signals: SIGTERM and SIGINT stop it (a second one at once), SIGHUP reloads the
//! reloadable settings; and, for test tools, an exit when the parent is gone.

use std::time::Duration;

use mcp_runtime::server::Control;
use tokio::signal::unix::Signal;

use crate::config::{self, HostConfig};

/// For test tools that spawn the host: exit as soon as the spawning process is gone, even
/// if it was killed without a chance to stop us.
pub(crate) fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        while std::os::unix::process::parent_id() == parent {
            std::thread::sleep(Duration::from_millis(200));
        }
        std::process::exit(3);
    });
}

/// The signals the host handles, registered before it listens: a SIGTERM or SIGHUP that
/// arrives right after the listening line must not find the default action (which ends the
/// process) still in place.
pub(crate) struct Signals {
    pub(crate) term: Signal,
    pub(crate) int: Signal,
    pub(crate) hup: Signal,
}

impl Signals {
    pub(crate) fn register() -> Result<Signals, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let on =
            |k: SignalKind, name: &str| signal(k).map_err(|e| format!("cannot handle {name}: {e}"));
        Ok(Signals {
            term: on(SignalKind::terminate(), "SIGTERM")?,
            int: on(SignalKind::interrupt(), "SIGINT")?,
            hup: on(SignalKind::hangup(), "SIGHUP")?,
        })
    }
}

/// SIGTERM or SIGINT.
pub(crate) async fn stop_signal(term: &mut Signal, int: &mut Signal) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Reload the reloadable settings on every SIGHUP: the config file and flags are read again
/// and a new generation starts with their `[rollout]`, replay window, `retry` hint and
/// `sessions.max_in_flight` (streams and sessions opened from then on follow it). A file that
/// does not load is reported and changes nothing.
pub(crate) async fn reload_on_sighup(server: Control, flags: config::Flags, mut hup: Signal) {
    while hup.recv().await.is_some() {
        match HostConfig::load(flags.clone()) {
            Ok(c) => {
                let Some(g) = server.reload(&c.runtime) else { return };
                tracing::info!(
                    generation = g,
                    "reloaded (SIGHUP): rollout flags, replay window, retry hint and max_in_flight apply to what opens from now on; other settings need a restart"
                );
            }
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: the configuration does not load; nothing changed")
            }
        }
    }
}
