//! `mcp_devtools`: the one place where the test tools (`mcp-load`, `mcp-bench`) start a
//! server process and read `/proc`.
//!
//! - [`HostProcess::spawn`] starts a [`Command`] (so callers keep control of the program,
//!   its arguments, a `taskset` wrapper, stderr), waits a bounded time for its first stdout
//!   line `... listening on http://ADDR/PATH`, then keeps reading stdout on a thread and
//!   keeps the latest `stats {json}` line. The process is killed and reaped on drop.
//! - [`rss_kib`], [`peak_rss_kib`] and [`cpu_ticks`] read one figure of a pid from `/proc`
//!   (Linux); the parsers behind them are pure and tested on sample text.
//!
//! Invariants: a started process never outlives its [`HostProcess`] (drop kills it), nor
//! the calling process: it gets `MCP_HOST_EXIT_WITH_PARENT=1`, so `mcp-host` exits on its
//! own within about 200 ms when its parent dies, even by SIGKILL. Its stdout is always
//! drained, so its later writes never block on a full pipe.
//!
//! Never: talks to the server over the network, or parses anything but its stdout lines.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

/// Set to `1` on every spawned process: `mcp-host` then exits when its parent is gone.
pub const EXIT_WITH_PARENT_ENV: &str = "MCP_HOST_EXIT_WITH_PARENT";
/// `mcp-host`'s log filter; set to `warn` unless the command or our environment sets it.
pub const LOG_ENV: &str = "MCP_HOST_LOG";
/// A generous bound on the wait for the first stdout line (a debug build on a busy machine).
pub const DEFAULT_START_WAIT: Duration = Duration::from_secs(30);

/// Why a process could not be started as a host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The OS refused to start it.
    #[error("cannot start {program}: {source}")]
    Start {
        /// The program, as given to the command.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// No stdout line within the wait (the process was killed).
    #[error("{program} printed nothing on stdout within {waited:?}")]
    NoLine {
        /// The program.
        program: String,
        /// How long we waited.
        waited: Duration,
    },
    /// Stdout closed before a first line (the process exited, or closed it).
    #[error("{program} closed its stdout before printing its URL (exit status: {status})")]
    Exited {
        /// The program.
        program: String,
        /// Its exit status, if it had already exited, else `running`.
        status: String,
    },
    /// The first line is not `... listening on http://...` (the process was killed).
    #[error("{program} printed {line:?}, not `... listening on http://ADDR/PATH`")]
    NotAUrl {
        /// The program.
        program: String,
        /// The line it printed.
        line: String,
    },
}

/// The latest `stats {json}` line a host printed.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsLine {
    /// 1 for the first stats line, then increasing: a sampler tells a fresh line from one it
    /// already saw.
    pub seq: u64,
    /// The JSON after `stats `.
    pub value: Value,
}

/// The latest stats line of a [`HostProcess`], readable from tasks that cannot borrow the
/// process (a soak's clients wait on its figures). Cloned freely; reads only.
#[derive(Debug, Clone)]
pub struct StatsFeed(Arc<Mutex<Option<StatsLine>>>);

impl StatsFeed {
    /// The latest `stats {json}` line printed so far, if any.
    #[must_use]
    pub fn latest(&self) -> Option<StatsLine> {
        self.0.lock().clone()
    }
}

/// A started server process; killed and reaped on drop.
#[derive(Debug)]
pub struct HostProcess {
    child: Child,
    url: String,
    /// Written by the stdout thread, read by the owner: a lock held for one clone or store
    /// of a small value, never across I/O.
    latest: Arc<Mutex<Option<StatsLine>>>,
    /// The admin API's base URL, once its line was printed.
    admin: Arc<Mutex<Option<String>>>,
}

/// The URL of a `... listening on http://ADDR/PATH` line.
#[must_use]
pub fn parse_listening_line(line: &str) -> Option<&str> {
    if !line.contains(" listening on ") {
        return None;
    }
    line.split_whitespace().last().filter(|u| u.starts_with("http://"))
}

/// The JSON of a `stats {json}` line.
#[must_use]
pub fn parse_stats_line(line: &str) -> Option<Value> {
    let json = line.strip_prefix("stats ")?;
    serde_json::from_str::<Value>(json).ok().filter(Value::is_object)
}

fn env_given(cmd: &Command, key: &str) -> bool {
    cmd.get_envs().any(|(k, _)| k == key) || std::env::var_os(key).is_some()
}

/// The admin API's base URL of a `mcp-host admin on http://ADDR/admin/status ...` line.
#[must_use]
pub fn parse_admin_line(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("mcp-host admin on ")?;
    let url = rest.split_whitespace().next()?;
    url.strip_suffix("/admin/status").filter(|u| u.starts_with("http://"))
}

/// The stdout thread: hands the first line to the spawner, then keeps the admin line and the
/// latest stats line until stdout closes.
fn follow(
    stdout: ChildStdout,
    first: mpsc::SyncSender<String>,
    latest: &Mutex<Option<StatsLine>>,
    admin: &Mutex<Option<String>>,
) {
    let mut reader = BufReader::new(stdout);
    let mut first = Some(first);
    let mut seq = 0;
    let mut raw = Vec::new();
    loop {
        raw.clear();
        match reader.read_until(b'\n', &mut raw) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&raw);
        let line = text.trim_end();
        if let Some(tx) = first.take() {
            let _ = tx.send(line.to_owned());
        } else if let Some(value) = parse_stats_line(line) {
            seq += 1;
            *latest.lock() = Some(StatsLine { seq, value });
        } else if let Some(url) = parse_admin_line(line) {
            *admin.lock() = Some(url.to_owned());
        }
    }
}

impl HostProcess {
    /// Start `cmd` with stdout piped (and `MCP_HOST_EXIT_WITH_PARENT=1`, `MCP_HOST_LOG=warn`
    /// unless set), and wait at most `wait` for its first stdout line, which must end with
    /// the URL it serves.
    ///
    /// # Errors
    /// [`SpawnError`]; on every error after the start the process is killed and reaped.
    pub fn spawn(mut cmd: Command, wait: Duration) -> Result<HostProcess, SpawnError> {
        cmd.env(EXIT_WITH_PARENT_ENV, "1").stdout(Stdio::piped());
        if !env_given(&cmd, LOG_ENV) {
            cmd.env(LOG_ENV, "warn");
        }
        let program = cmd.get_program().to_string_lossy().into_owned();
        let mut child =
            cmd.spawn().map_err(|source| SpawnError::Start { program: program.clone(), source })?;
        let stdout = child.stdout.take();
        let latest = Arc::new(Mutex::new(None));
        let admin = Arc::new(Mutex::new(None));
        let (tx, rx) = mpsc::sync_channel(1);
        let mut host = HostProcess {
            child,
            url: String::new(),
            latest: Arc::clone(&latest),
            admin: Arc::clone(&admin),
        };
        let Some(stdout) = stdout else {
            return Err(SpawnError::Exited { program, status: "no stdout".into() });
        };
        // Detached: it ends when the process's stdout closes, which drop guarantees.
        let started = std::thread::Builder::new()
            .name("host-stdout".into())
            .spawn(move || follow(stdout, tx, &latest, &admin));
        if let Err(source) = started {
            return Err(SpawnError::Start { program, source });
        }
        let line = match rx.recv_timeout(wait) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(SpawnError::NoLine { program, waited: wait });
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = host
                    .child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map_or_else(|| "running".to_owned(), |s| s.to_string());
                return Err(SpawnError::Exited { program, status });
            }
        };
        match parse_listening_line(&line) {
            Some(url) => {
                host.url = url.to_owned();
                Ok(host)
            }
            None => Err(SpawnError::NotAUrl { program, line }),
        }
    }

    /// The URL from the first stdout line.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The process id. With `taskset -c N bin`, `taskset` execs `bin`, so this is the
    /// server's own pid.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The admin API's base URL (`http://ADDR`) from its stdout line, waiting at most `wait`
    /// for it; `None` when none came (started with `--no-admin`, or an older build).
    #[must_use]
    pub fn admin_url(&self, wait: Duration) -> Option<String> {
        for _ in 0..=wait.as_millis().div_ceil(10) {
            if let Some(u) = self.admin.lock().clone() {
                return Some(u);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// The latest `stats {json}` line printed so far, if any.
    #[must_use]
    pub fn latest_stats(&self) -> Option<StatsLine> {
        self.latest.lock().clone()
    }

    /// A handle on its latest stats line that outlives this borrow.
    #[must_use]
    pub fn stats_feed(&self) -> StatsFeed {
        StatsFeed(Arc::clone(&self.latest))
    }

    /// Ask the process to stop (SIGTERM) and wait at most `wait` for it to exit; killed when
    /// it does not. Its exit status.
    pub fn terminate(&mut self, wait: Duration) -> Option<ExitStatus> {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        for _ in 0..wait.as_millis().div_ceil(20) {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }

    /// Send the process `signal` (a `kill` name: `STOP`, `CONT`, `HUP`...); whether `kill`
    /// could. A stopped process is still killed by the drop.
    pub fn signal(&self, signal: &str) -> bool {
        Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// SIGKILL the process and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `Some(status)` once the process has exited; `None` while it runs.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh directory under the system's temporary directory, removed (with its content) when
/// dropped: where a spawned host keeps its ledger.
#[derive(Debug)]
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Create `<tmp>/mcp-<label>-<pid>-<n>`.
    ///
    /// # Panics
    /// When the directory cannot be created.
    #[must_use]
    pub fn new(label: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("mcp-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
        TempDir(p)
    }

    /// Its path.
    #[must_use]
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// `--ledger-path <dir>/mcp-host.db --admin-port 0`, for a host command line: its ledger
    /// (and admin token file) in this directory, its admin API on a free port (hosts run
    /// side by side in tests).
    #[must_use]
    pub fn host_args(&self) -> [String; 4] {
        [
            "--ledger-path".to_owned(),
            self.0.join("mcp-host.db").display().to_string(),
            "--admin-port".to_owned(),
            "0".to_owned(),
        ]
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `kB` field of `/proc/<pid>/status` text, e.g. `VmRSS`.
#[must_use]
pub fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// utime + stime (fields 14 and 15) of `/proc/<pid>/stat` text. The command name in
/// parentheses may contain spaces and parentheses, so fields are counted after the last `)`.
#[must_use]
pub fn stat_ticks(stat: &str) -> Option<u64> {
    let (_, after) = stat.rsplit_once(')')?;
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn proc_status(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// Resident memory of a process now, in KiB (`VmRSS`); `None` if it is gone.
#[must_use]
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_field_kib(&proc_status(pid)?, "VmRSS")
}

/// Peak resident memory of a process, in KiB (`VmHWM`); `None` if it is gone.
#[must_use]
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_field_kib(&proc_status(pid)?, "VmHWM")
}

/// utime + stime of a process, in clock ticks (100 Hz on Linux); `None` if it is gone.
#[must_use]
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The body of a `Transfer-Encoding: chunked` message, decoded (chunk extensions ignored); a
/// body cut short gives what arrived whole, up to the cut.
#[must_use]
pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&b[..eol]);
        let size = size.split(';').next().unwrap_or_default().trim();
        let Ok(n) = usize::from_str_radix(size, 16) else { break };
        let rest = &b[eol + 2..];
        if n == 0 || rest.len() < n {
            out.extend_from_slice(&rest[..rest.len().min(n)]);
            break;
        }
        out.extend_from_slice(&rest[..n]);
        b = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    out
}

#[cfg(test)]
mod tests;

pub mod oidc;
pub use oidc::{OidcError, OidcProvider};

/// A `redis-server` of a test's own: on a free loopback port, its files in a temporary
/// directory, nothing persisted; killed (SIGKILL: it has nothing to save) and its directory
/// removed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    /// Its TLS port and the directory of its certificates, when it has one.
    tls: Option<(u16, std::path::PathBuf)>,
    _dir: TempDir,
}

/// Why a `redis-server` could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// `redis-server` is not installed (the test command installs Debian's `redis-server`).
    #[error(
        "redis-server is not installed: `apt-get install redis-server` (scripts/test.sh does): {0}"
    )]
    NotInstalled(std::io::Error),
    /// It did not answer `PING` in time (its log is included).
    #[error("redis-server did not start: {0}")]
    NotReady(String),
}

impl RedisServer {
    /// Start one and wait (at most 10 s) until it answers `PING`. A port taken between
    /// choosing it and the server's bind is tried again (at most 5 ports).
    ///
    /// # Errors
    /// [`RedisError`].
    pub fn start() -> Result<RedisServer, RedisError> {
        let mut last = RedisError::NotReady(String::new());
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| RedisError::NotReady(e.to_string()))?
                .port();
            match RedisServer::start_on(port) {
                Ok(s) => return Ok(s),
                Err(e @ RedisError::NotInstalled(_)) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Start one on `port` (a server started again where a stopped one was), and wait (at
    /// most 10 s) until it answers `PING`.
    ///
    /// # Errors
    /// [`RedisError`].
    pub fn start_on(port: u16) -> Result<RedisServer, RedisError> {
        RedisServer::spawn(port, None, TempDir::new("redis"), &[])
    }

    /// Start one that also serves TLS on another port, with a certificate for 127.0.0.1
    /// signed by a certificate authority of its own, and asks TLS clients for a certificate
    /// signed by it ([`RedisServer::tls_files`]); made with the `openssl` command.
    ///
    /// # Errors
    /// [`RedisError`]; `NotReady` when the certificates could not be made.
    pub fn start_tls() -> Result<RedisServer, RedisError> {
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .map_err(|e| RedisError::NotReady(e.to_string()))
        };
        // A port taken between choosing it and the server's bind: tried again (at most 5).
        let mut last = RedisError::NotReady(String::new());
        for _ in 0..5 {
            let dir = TempDir::new("redis-tls");
            make_certificates(dir.path()).map_err(RedisError::NotReady)?;
            match RedisServer::spawn(free()?, Some(free()?), dir, &[]) {
                Ok(s) => return Ok(s),
                Err(e @ RedisError::NotInstalled(_)) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn spawn(
        port: u16,
        tls: Option<u16>,
        dir: TempDir,
        extra: &[&str],
    ) -> Result<RedisServer, RedisError> {
        let log = dir.path().join("redis.log");
        let mut command = Command::new("redis-server");
        command.args(extra);
        if let Some(tls) = tls {
            let file = |name: &str| dir.path().join(name).display().to_string();
            command.args(["--tls-port", &tls.to_string()]);
            command.args(["--tls-cert-file", &file("server.crt")]);
            command.args(["--tls-key-file", &file("server.key")]);
            command.args(["--tls-ca-cert-file", &file("ca.crt")]);
            command.args(["--tls-auth-clients", "yes"]);
        }
        let mut child = command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "yes"])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(RedisError::NotInstalled)?;
        // At most 10 s: 500 pauses of 20 ms (a ping's own wait is bounded too).
        for _ in 0..500 {
            // Ours answers only while it runs: a PONG after it exited (it could not bind) is
            // another server's on that port.
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if ping(port) && matches!(child.try_wait(), Ok(None)) {
                let tls = tls.map(|t| (t, dir.path().to_owned()));
                return Ok(RedisServer { child, port, tls, _dir: dir });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(RedisError::NotReady(std::fs::read_to_string(&log).unwrap_or_default()))
    }

    /// `redis://127.0.0.1:<port>/0`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Its port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:<tls port>/0` of one started with [`RedisServer::start_tls`].
    #[must_use]
    pub fn tls_url(&self) -> Option<String> {
        self.tls.as_ref().map(|(p, _)| format!("rediss://127.0.0.1:{p}/0"))
    }

    /// The PEM files `(certificate authority, client certificate, client key)` of one started
    /// with [`RedisServer::start_tls`].
    #[must_use]
    pub fn tls_files(&self) -> Option<(String, String, String)> {
        self.tls.as_ref().map(|(_, d)| {
            let f = |n: &str| d.join(n).display().to_string();
            (f("ca.crt"), f("client.crt"), f("client.key"))
        })
    }

    /// The keys that match `pattern` (`KEYS`: for tests' small data sets); `None` when the
    /// server does not answer.
    #[must_use]
    pub fn keys(&self, pattern: &str) -> Option<Vec<String>> {
        match self.command(&["KEYS", pattern])? {
            Reply::Many(keys) => keys.into_iter().map(|k| String::from_utf8(k).ok()).collect(),
            Reply::Line(_) => None,
        }
    }

    /// How many keys match `pattern`; `None` when the server does not answer.
    #[must_use]
    pub fn count_keys(&self, pattern: &str) -> Option<usize> {
        self.keys(pattern).map(|k| k.len())
    }

    /// Set `key` to `value`, dropped after `px_ms` (what another host would have written, for
    /// tests of what a host does with it); whether the server said OK.
    #[must_use]
    pub fn set_px(&self, key: &str, value: &str, px_ms: u64) -> bool {
        matches!(self.command(&["SET", key, value, "PX", &px_ms.to_string()]), Some(Reply::Line(l)) if l == "OK")
    }

    /// How many times the server ran `command` (lower case, `INFO commandstats`; 0 when it
    /// has not yet); `None` when the server does not answer.
    #[must_use]
    pub fn calls(&self, command: &str) -> Option<u64> {
        let Reply::Line(info) = self.command(&["INFO", "commandstats"])? else { return None };
        let prefix = format!("cmdstat_{command}:calls=");
        Some(
            info.lines()
                .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
                .unwrap_or(0),
        )
    }

    /// Forget every loaded script (`SCRIPT FLUSH`, as a restarted or failed-over server has
    /// none); whether the server said OK.
    #[must_use]
    pub fn flush_scripts(&self) -> bool {
        matches!(self.command(&["SCRIPT", "FLUSH"]), Some(Reply::Line(l)) if l == "OK")
    }

    /// Add the user `name` with `password`, allowed everything (`ACL SETUSER`); the default
    /// user stays as it was. Whether the server said OK.
    #[must_use]
    pub fn add_user(&self, name: &str, password: &str) -> bool {
        let pass = format!(">{password}");
        let args = ["ACL", "SETUSER", name, "on", &pass, "~*", "&*", "+@all"];
        matches!(self.command(&args), Some(Reply::Line(l)) if l == "OK")
    }

    /// How many subscriptions this server has to the channels whose names end with `suffix`
    /// (`PUBSUB CHANNELS`, then `PUBSUB NUMSUB`); `None` when the server does not answer.
    #[must_use]
    pub fn subscribers(&self, suffix: &str) -> Option<u64> {
        let pattern = format!("*{suffix}");
        let Reply::Many(channels) = self.command(&["PUBSUB", "CHANNELS", &pattern])? else {
            return None;
        };
        let mut args = vec!["PUBSUB".to_owned(), "NUMSUB".to_owned()];
        for c in channels {
            args.push(String::from_utf8(c).ok()?);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Reply::Many(counts) = self.command(&args)? else { return None };
        // [channel, count, channel, count, ..]
        counts
            .iter()
            .skip(1)
            .step_by(2)
            .map(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok())
            .sum()
    }

    /// Cut every subscriber's connection (`CLIENT KILL TYPE pubsub`, as a network fault or a
    /// failover does); how many were cut, `None` when the server does not answer.
    #[must_use]
    pub fn kill_subscribers(&self) -> Option<u64> {
        let Reply::Line(n) = self.command(&["CLIENT", "KILL", "TYPE", "pubsub"])? else {
            return None;
        };
        n.parse().ok()
    }

    /// One command (its arguments, binary-safe) on a connection of its own, with a deadline.
    fn command(&self, args: &[&str]) -> Option<Reply> {
        use std::io::{BufRead, BufReader, Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a.as_bytes());
            req.extend_from_slice(b"\r\n");
        }
        s.write_all(&req).ok()?;
        let mut r = BufReader::new(s);
        let head = {
            let mut l = String::new();
            r.read_line(&mut l).ok()?;
            l.trim_end().to_owned()
        };
        let bulk = |n: usize, r: &mut BufReader<std::net::TcpStream>| -> Option<Vec<u8>> {
            let mut b = vec![0; n + 2];
            r.read_exact(&mut b).ok()?;
            b.truncate(n);
            Some(b)
        };
        match head.split_at_checked(1)? {
            ("+" | ":", rest) => Some(Reply::Line(rest.to_owned())),
            ("$", n) => Some(Reply::Line(String::from_utf8(bulk(n.parse().ok()?, &mut r)?).ok()?)),
            ("*", n) => {
                let mut items = Vec::new();
                for _ in 0..n.parse::<usize>().ok()? {
                    let mut l = String::new();
                    r.read_line(&mut l).ok()?;
                    let l = l.trim_end();
                    // A number (`PUBSUB NUMSUB`'s counts) or a bulk string.
                    if let Some(n) = l.strip_prefix(':') {
                        items.push(n.as_bytes().to_vec());
                        continue;
                    }
                    let len = l.strip_prefix('$')?.parse().ok()?;
                    items.push(bulk(len, &mut r)?);
                }
                Some(Reply::Many(items))
            }
            _ => None,
        }
    }
}

/// A Redis Cluster of three primaries (no replicas) on 127.0.0.1, each a [`RedisServer`] of
/// its own (`cluster-enabled`), the slots split in three; all stopped when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Start one and wait (at most 20 s) until every node says `cluster_state:ok`. Each node
    /// needs its port and that port plus 10,000 (its cluster bus) free.
    ///
    /// # Errors
    /// [`RedisError`].
    pub fn start() -> Result<RedisCluster, RedisError> {
        let mut nodes = Vec::new();
        let mut tries = 0;
        while nodes.len() < 3 {
            tries += 1;
            if tries > 50 {
                return Err(RedisError::NotReady("no free ports for a cluster".into()));
            }
            // A port below 55,536 whose bus port is free too.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos() as usize);
            let spread = nanos / 1_000 + tries * 131;
            let port = 20_000 + u16::try_from(spread % 30_000).unwrap_or(0);
            let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
            if !free(port) || !free(port + 10_000) {
                continue;
            }
            let args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"];
            match RedisServer::spawn(port, None, TempDir::new("redis-cluster"), &args) {
                Ok(s) => nodes.push(s),
                Err(e @ RedisError::NotInstalled(_)) => return Err(e),
                Err(_) => {}
            }
        }
        let ok = |r: Option<Reply>| matches!(r, Some(Reply::Line(l)) if l == "OK");
        for (i, n) in nodes.iter().enumerate() {
            let (from, to) = (i * 16_384 / 3, (i + 1) * 16_384 / 3 - 1);
            let (from, to) = (from.to_string(), to.to_string());
            if !ok(n.command(&["CLUSTER", "ADDSLOTSRANGE", &from, &to])) {
                return Err(RedisError::NotReady(format!("node {i} took no slots")));
            }
        }
        for n in &nodes[1..] {
            let port = n.port.to_string();
            if !ok(nodes[0].command(&["CLUSTER", "MEET", "127.0.0.1", &port])) {
                return Err(RedisError::NotReady("CLUSTER MEET failed".into()));
            }
        }
        // At most 20 s: 200 pauses of 100 ms.
        for _ in 0..200 {
            let state_ok = |n: &RedisServer| matches!(n.command(&["CLUSTER", "INFO"]), Some(Reply::Line(i)) if i.contains("cluster_state:ok") && i.contains("cluster_known_nodes:3"));
            if nodes.iter().all(state_ok) {
                return Ok(RedisCluster { nodes });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let info: Vec<String> = nodes
            .iter()
            .map(|n| match n.command(&["CLUSTER", "INFO"]) {
                Some(Reply::Line(i)) => i.lines().take(7).collect::<Vec<_>>().join(" "),
                _ => "no answer".into(),
            })
            .collect();
        Err(RedisError::NotReady(format!(
            "the cluster did not reach cluster_state:ok in 20 s: {info:?}"
        )))
    }

    /// `redis://127.0.0.1:<port>/0` of its first node (a client finds the others from it).
    #[must_use]
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// Its nodes.
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}

/// A Redis reply, as [`RedisServer`]'s test helpers read them.
enum Reply {
    /// A status, a number or a (UTF-8) string.
    Line(String),
    /// An array of strings.
    Many(Vec<Vec<u8>>),
}

/// A raw `PING` to 127.0.0.1:`port`: true on `+PONG`.
fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 16];
    s.write_all(b"PING\r\n").is_ok()
        && s.read(&mut buf).is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
}

/// A certificate authority in `dir` (`ca.crt`, `ca.key`), and the certificates it signs:
/// `server.crt` for 127.0.0.1 and `client.crt` (with their keys), made with `openssl`.
fn make_certificates(dir: &std::path::Path) -> Result<(), String> {
    let openssl = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("openssl is not installed (apt-get install openssl): {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
        }
    };
    let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &key,
            &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=mcp-test-ca"],
        ]
        .concat(),
    )?;
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n")
        .map_err(|e| e.to_string())?;
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")
        .map_err(|e| e.to_string())?;
    for who in ["server", "client"] {
        let (k, csr, crt, ext) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.crt"),
            format!("{who}.ext"),
        );
        openssl(
            &[
                &["req"][..],
                &key,
                &["-keyout", &k, "-out", &csr, "-subj", &format!("/CN=mcp-test-{who}")],
            ]
            .concat(),
        )?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ])?;
    }
    // The client's key is a secret (the host refuses one others may read).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join("client.key"), std::fs::Permissions::from_mode(0o600))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Nothing to save: SIGKILL at once (and no `kill` process spawned for a SIGTERM).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
