//! Bearer tokens from a command (`--token-cmd`): the command's standard output, trimmed, is
//! the token; it is run again every `--token-refresh-secs` while the run lasts, so an OAuth
//! access token is replaced before it expires (every client sees the new one at its next
//! request). A command that fails or prints nothing keeps the previous token and says so on
//! stderr; at start it stops the run (exit status 2). Messages never repeat the command (it
//! may hold a client secret).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_runtime::client_http::BearerToken;

/// How long a token command may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// Run `cmd` with `sh -c` (stdin closed, in a process group of its own, at most
/// [`DEADLINE`]: then the whole group is killed): its trimmed stdout.
///
/// # Errors
/// Why there is no token: the command could not start, failed, timed out or printed nothing.
pub(crate) fn fetch(cmd: &str) -> Result<String, String> {
    use std::os::unix::process::CommandExt as _;
    let mut child = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("the token command did not start: {e}"))?;
    let mut out = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let pause = Duration::from_millis(20);
    let mut status = None;
    for _ in 0..DEADLINE.as_millis() / pause.as_millis() {
        if let Ok(Some(s)) = child.try_wait() {
            status = Some(s);
            break;
        }
        std::thread::sleep(pause);
    }
    let Some(status) = status else {
        // The group: `sh` and whatever it started (a `curl` that hangs).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("the token command took more than {DEADLINE:?}"));
    };
    let text = reader.join().unwrap_or_default();
    let token = text.trim();
    if !status.success() {
        return Err(format!("the token command failed ({status})"));
    }
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err("the token command printed no single token".to_owned());
    }
    Ok(token.to_owned())
}

/// Refreshes tokens from their commands until dropped. It checks every 100 ms whether to
/// stop; a command running then is waited for (at most its [`DEADLINE`]).
pub(crate) struct Refresher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Refresher {
    /// Run each `(token, command)` again every `every`.
    pub(crate) fn start(tokens: Vec<(BearerToken, String)>, every: Duration) -> Refresher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let step = Duration::from_millis(100);
            let mut waited = Duration::ZERO;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(step);
                waited += step;
                if waited < every {
                    continue;
                }
                waited = Duration::ZERO;
                for (token, cmd) in &tokens {
                    match fetch(cmd) {
                        Ok(t) => token.set(&t),
                        Err(e) => eprintln!("mcp-load: the token was not refreshed: {e}"),
                    }
                }
            }
        });
        Refresher { stop, thread: Some(thread) }
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_the_trimmed_output_of_its_command() {
        assert_eq!(fetch("echo '  abc.def  '").unwrap(), "abc.def");
        assert!(fetch("exit 3").unwrap_err().contains("failed"));
        assert!(fetch("true").unwrap_err().contains("no single token"));
        assert!(fetch("echo a b").unwrap_err().contains("no single token"));
    }

    #[test]
    fn the_refresher_replaces_the_token_every_interval_and_stops_when_dropped() {
        let dir = mcp_devtools::TempDir::new("token-cmd");
        let n = dir.path().join("n");
        // Each run prints one more "x" than the last.
        let cmd = format!("echo x >> {0}; tr -d '\\n' < {0}", n.display());
        let token = BearerToken::refreshed(&fetch(&cmd).unwrap(), "p");
        assert_eq!(&*token.get(), "x");
        let r = Refresher::start(vec![(token.clone(), cmd)], Duration::from_millis(200));
        let mut seen = String::new();
        for _ in 0..100 {
            seen = token.get().to_string();
            if seen.len() >= 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(seen.len() >= 3, "refreshed twice within 5 s: {seen}");
        drop(r);
        let after = token.get();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(token.get(), after, "no refresh once dropped");
        assert_eq!(&**token.principal(), "p", "the principal stays");
    }
}
