use super::*;

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

/// Poll (bounded: at most 5 s) until the host printed `seq` stats lines.
fn stats_after(host: &HostProcess, seq: u64) -> Option<StatsLine> {
    for _ in 0..250 {
        if let Some(s) = host.latest_stats().filter(|s| s.seq >= seq) {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn listening_lines_give_their_url() {
    assert_eq!(
        parse_listening_line("mcp-host listening on http://127.0.0.1:8080/mcp"),
        Some("http://127.0.0.1:8080/mcp")
    );
    assert_eq!(
        parse_listening_line("raw-echo listening on http://127.0.0.1:9/echo"),
        Some("http://127.0.0.1:9/echo")
    );
    assert_eq!(parse_listening_line("mcp-host listening on 127.0.0.1:8080"), None);
    assert_eq!(parse_listening_line("error: http://127.0.0.1:1/ refused"), None);
    assert_eq!(parse_listening_line(""), None);
}

#[test]
fn stats_lines_parse_as_json_objects_only() {
    assert_eq!(
        parse_stats_line(r#"stats {"sessions":3}"#),
        Some(serde_json::json!({"sessions": 3}))
    );
    assert_eq!(parse_stats_line("stats [1]"), None);
    assert_eq!(parse_stats_line("stats {broken"), None);
    assert_eq!(parse_stats_line(r#"statistics {"sessions":3}"#), None);
}

#[test]
fn proc_text_parsers_read_the_right_fields() {
    let status = "Name:\tmcp-host\nVmHWM:\t   9000 kB\nVmRSS:\t   7168 kB\nVmRSSx:\t1 kB\n";
    assert_eq!(status_field_kib(status, "VmRSS"), Some(7168));
    assert_eq!(status_field_kib(status, "VmHWM"), Some(9000));
    assert_eq!(status_field_kib(status, "VmSwap"), None);
    // The command name may hold spaces and parentheses; utime = 7, stime = 5.
    let stat = "42 (odd (name) x) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 100 0 0";
    assert_eq!(stat_ticks(stat), Some(12));
    assert_eq!(stat_ticks("42 (short) S 1"), None);
}

#[test]
fn own_process_figures_are_readable_and_a_gone_pid_reads_none() {
    let me = std::process::id();
    assert!(rss_kib(me).is_some_and(|k| k > 0));
    assert!(peak_rss_kib(me).is_some_and(|k| k >= rss_kib(me).unwrap_or(0) / 2));
    assert!(cpu_ticks(me).is_some());
    assert_eq!(rss_kib(u32::MAX), None);
    assert_eq!(cpu_ticks(u32::MAX), None);
}

#[test]
fn a_host_gives_its_url_then_its_latest_stats_and_is_killed_on_drop() {
    let script = r#"echo "fake listening on http://127.0.0.1:1/mcp"
echo 'not a stats line'
echo 'stats {"n":1}'
echo 'stats {"n":2}'
exec sleep 30"#;
    let host = HostProcess::spawn(sh(script), Duration::from_secs(10)).expect("spawned");
    assert_eq!(host.url(), "http://127.0.0.1:1/mcp");
    let last = stats_after(&host, 2).expect("two stats lines");
    assert_eq!(last, StatsLine { seq: 2, value: serde_json::json!({"n": 2}) });
    let pid = host.pid();
    assert!(rss_kib(pid).is_some(), "running");
    drop(host);
    assert_eq!(rss_kib(pid), None, "killed and reaped on drop");
}

#[test]
fn the_environment_is_set_unless_the_command_sets_the_log_filter() {
    let script = r#"echo "env listening on http://127.0.0.1:1/$MCP_HOST_EXIT_WITH_PARENT/$MCP_HOST_LOG"; exec sleep 30"#;
    let host = HostProcess::spawn(sh(script), Duration::from_secs(10)).expect("spawned");
    let want =
        if std::env::var_os(LOG_ENV).is_some() { None } else { Some("http://127.0.0.1:1/1/warn") };
    if let Some(w) = want {
        assert_eq!(host.url(), w);
    }
    let mut cmd = sh(script);
    cmd.env(LOG_ENV, "debug");
    let host = HostProcess::spawn(cmd, Duration::from_secs(10)).expect("spawned");
    assert_eq!(host.url(), "http://127.0.0.1:1/1/debug");
}

#[test]
fn a_process_that_is_no_host_is_an_error() {
    let e = HostProcess::spawn(sh("echo 'something else'; exec sleep 30"), Duration::from_secs(10))
        .unwrap_err();
    assert!(matches!(e, SpawnError::NotAUrl { ref line, .. } if line == "something else"), "{e}");
    let e = HostProcess::spawn(sh("exit 3"), Duration::from_secs(10)).unwrap_err();
    assert!(matches!(e, SpawnError::Exited { .. }), "{e}");
    let e = HostProcess::spawn(sh("exec sleep 30"), Duration::from_millis(200)).unwrap_err();
    assert!(matches!(e, SpawnError::NoLine { .. }), "{e}");
    let e = HostProcess::spawn(Command::new("/nonexistent/mcp-host"), Duration::from_secs(1))
        .unwrap_err();
    assert!(matches!(e, SpawnError::Start { .. }), "{e}");
}

#[test]
fn a_temp_dir_is_fresh_per_value_names_its_ledger_and_is_removed_with_its_content_on_drop() {
    let (a, b) = (TempDir::new("devtools-test"), TempDir::new("devtools-test"));
    assert_ne!(a.path(), b.path());
    assert!(a.path().is_dir() && std::fs::read_dir(a.path()).unwrap().next().is_none());
    let [flag, db, admin, port] = a.host_args();
    assert_eq!((admin.as_str(), port.as_str()), ("--admin-port", "0"));
    assert_eq!(
        (flag.as_str(), std::path::PathBuf::from(&db)),
        ("--ledger-path", a.path().join("mcp-host.db"))
    );
    for f in ["mcp-host.db", "mcp-host.db-wal", "mcp-host.db-shm", "mcp-host.db.key"] {
        std::fs::write(a.path().join(f), b"x").unwrap();
    }
    let path = a.path().to_owned();
    drop(a);
    assert!(!path.exists());
    assert!(b.path().is_dir());
}

#[test]
fn the_admin_line_gives_the_admin_base_url() {
    assert_eq!(
        parse_admin_line(
            "mcp-host admin on http://127.0.0.1:4321/admin/status (token: /tmp/x/mcp-host.admin-token)"
        ),
        Some("http://127.0.0.1:4321")
    );
    assert_eq!(parse_admin_line("mcp-host listening on http://127.0.0.1:1/mcp"), None);
    assert_eq!(parse_admin_line("mcp-host admin on ftp://x/admin/status"), None);
}

#[test]
fn dechunk_joins_the_chunks_ignores_extensions_and_keeps_what_arrived_of_a_cut_body() {
    assert_eq!(dechunk(b"5\r\nhello\r\n3\r\n ok\r\n0\r\n\r\n"), b"hello ok");
    assert_eq!(dechunk(b"5;name=v\r\nhello\r\n0\r\n\r\n"), b"hello");
    assert_eq!(dechunk(b"a\r\nhello"), b"hello", "cut inside a chunk");
    assert_eq!(dechunk(b"zz\r\nhello"), b"", "not a size");
}
