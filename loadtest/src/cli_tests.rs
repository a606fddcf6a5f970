//! The command line: representative invocations of every subcommand, parsed with
//! `Cli::try_parse_from`, with the values of the shared (flattened) flags and of the flags
//! spelled alike that stay apart. A change to a shared flag's name, default or parser fails
//! here for every subcommand that flattens it.

use clap::CommandFactory;
use clap::Parser;
use clap::error::ErrorKind;

use crate::{Cli, Command, JsonOut, ProxySeed};

fn parse(args: &[&str]) -> Command {
    match Cli::try_parse_from(std::iter::once("mcp-load").chain(args.iter().copied())) {
        Ok(cli) => cli.command,
        Err(e) => panic!("{args:?} refused: {e}"),
    }
}

/// The kind of error the command line gets, `None` when it parses.
fn refusal(args: &[&str]) -> Option<ErrorKind> {
    Cli::try_parse_from(std::iter::once("mcp-load").chain(args.iter().copied()))
        .err()
        .map(|e| e.kind())
}

/// The help line and default of `--long` in `sub`.
fn flag(sub: &str, long: &str) -> (String, Vec<String>) {
    let cli = Cli::command();
    let sub = cli.find_subcommand(sub).unwrap_or_else(|| panic!("no subcommand {sub}"));
    let arg = sub
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .unwrap_or_else(|| panic!("{} has no --{long}", sub.get_name()));
    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    let defaults = arg.get_default_values().iter().map(|d| d.to_string_lossy().into()).collect();
    (help, defaults)
}

#[test]
fn cli_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn run_parses_shared_and_own_flags() {
    let Command::Run {
        url,
        spawn_host,
        clients,
        seconds,
        rate,
        calls,
        json_out: JsonOut { json_out },
        no_progress,
        fail_on_error,
        cut_rate,
        faults,
        seed: ProxySeed { seed },
        era,
        also_urls,
    } = parse(&["run", "--url", "http://127.0.0.1:1/mcp"])
    else {
        panic!("not run");
    };
    assert_eq!(url.as_deref(), Some("http://127.0.0.1:1/mcp"));
    assert_eq!(spawn_host, None);
    assert_eq!((clients, seconds, rate), (16, 10, None));
    assert!(calls.is_empty() && faults.is_empty());
    assert_eq!(json_out, None);
    assert!(!no_progress && !fail_on_error);
    assert_eq!(cut_rate, 0.0);
    assert_eq!(seed, 1);
    assert_eq!(era, "legacy");
    assert!(also_urls.is_empty());

    let Command::Run {
        url,
        spawn_host,
        clients,
        seconds,
        rate,
        calls,
        json_out: JsonOut { json_out },
        no_progress,
        fail_on_error,
        cut_rate,
        faults,
        seed: ProxySeed { seed },
        era,
        also_urls: _,
    } = parse(&[
        "run",
        "--spawn-host",
        "target/debug/mcp-host",
        "--clients",
        "32",
        "--seconds",
        "5",
        "--rate",
        "500",
        "--call",
        "echo:8",
        "--call",
        "test_simple_text:1",
        "--json-out",
        "run.json",
        "--no-progress",
        "--fail-on-error",
        "--cut-rate",
        "0.3",
        "--fault",
        "storm=0.1",
        "--seed",
        "42",
        "--era",
        "mixed",
    ])
    else {
        panic!("not run");
    };
    assert_eq!(url, None);
    assert_eq!(spawn_host.as_deref(), Some("target/debug/mcp-host"));
    assert_eq!((clients, seconds, rate), (32, 5, Some(500.0)));
    assert_eq!(calls, ["echo:8", "test_simple_text:1"]);
    assert_eq!(json_out.as_deref(), Some("run.json"));
    assert!(no_progress && fail_on_error);
    assert_eq!(cut_rate, 0.3);
    assert_eq!(faults, ["storm=0.1"]);
    assert_eq!(seed, 42);
    assert_eq!(era, "mixed");
}

#[test]
fn run_takes_more_nodes_only_beside_a_url() {
    let Command::Run { also_urls, .. } = parse(&[
        "run",
        "--url",
        "http://127.0.0.1:1/mcp",
        "--also-url",
        "http://127.0.0.1:2/mcp",
        "--also-url",
        "http://127.0.0.1:3/mcp",
    ]) else {
        panic!("not run");
    };
    assert_eq!(also_urls, ["http://127.0.0.1:2/mcp", "http://127.0.0.1:3/mcp"]);
    let refused = Cli::try_parse_from([
        "mcp-load",
        "run",
        "--spawn-host",
        "target/debug/mcp-host",
        "--also-url",
        "http://127.0.0.1:2/mcp",
    ]);
    assert!(refused.is_err(), "--also-url needs --url");
}

#[test]
fn gate_parses_shared_and_own_flags() {
    let Command::Gate {
        url,
        spawn_host,
        nodes,
        ledger,
        token,
        other_token,
        token_cmd,
        other_token_cmd,
        token_refresh_secs,
        host_args,
        clients,
        events_per_phase,
        phase_seconds,
        min_events,
        scenarios,
        rate,
        mixed_rate,
        calls_per_session,
        resume_p99_limit_ms,
        seed: ProxySeed { seed },
        json_out: JsonOut { json_out },
        svg_out,
        no_progress,
    } = parse(&["gate", "--spawn-host", "mcp-host"])
    else {
        panic!("not gate");
    };
    assert_eq!((url, spawn_host.as_deref()), (None, Some("mcp-host")));
    assert_eq!((nodes, ledger), (1, None), "one node on its own SQLite ledger by default");
    assert_eq!((token, other_token), (None, None));
    assert_eq!((token_cmd, other_token_cmd, token_refresh_secs), (None, None, 60));
    assert!(host_args.is_empty());
    assert_eq!(clients, 48);
    assert_eq!((events_per_phase, phase_seconds, min_events), (100_000, 120, 100_000));
    assert_eq!(scenarios, "all");
    assert_eq!((rate, mixed_rate, calls_per_session), (0.2, 0.05, 100));
    assert_eq!(resume_p99_limit_ms, 5_000, "the design's recovery bound");
    assert_eq!(seed, 1);
    assert_eq!((json_out, svg_out), (None, None));
    assert!(!no_progress);

    let Command::Gate {
        url,
        spawn_host,
        token,
        other_token,
        clients,
        seed: ProxySeed { seed },
        json_out: JsonOut { json_out },
        svg_out,
        no_progress,
        ..
    } = parse(&[
        "gate",
        "--url",
        "http://127.0.0.1:2/mcp",
        "--token",
        "a",
        "--other-token",
        "b",
        "--clients",
        "8",
        "--seed",
        "7",
        "--json-out",
        "gate.json",
        "--svg-out",
        "gate.svg",
        "--no-progress",
    ])
    else {
        panic!("not gate");
    };
    assert_eq!((url.as_deref(), spawn_host), (Some("http://127.0.0.1:2/mcp"), None));
    assert_eq!((token.as_deref(), other_token.as_deref()), (Some("a"), Some("b")));
    assert_eq!(clients, 8);
    assert_eq!(seed, 7);
    assert_eq!(json_out.as_deref(), Some("gate.json"));
    assert_eq!(svg_out.as_deref(), Some("gate.svg"));
    assert!(no_progress);

    // Tokens from commands, and arguments for the spawned hosts.
    let Command::Gate { token_cmd, other_token_cmd, token_refresh_secs, host_args, .. } = parse(&[
        "gate",
        "--spawn-host",
        "mcp-host",
        "--token-cmd",
        "get-token a",
        "--other-token-cmd",
        "get-token b",
        "--token-refresh-secs",
        "30",
        "--host-arg=--oauth-issuer=http://127.0.0.1:9",
        "--host-arg",
        "--oauth-resource=http://127.0.0.1/mcp",
    ]) else {
        panic!("not gate");
    };
    assert_eq!(
        (token_cmd.as_deref(), other_token_cmd.as_deref()),
        (Some("get-token a"), Some("get-token b"))
    );
    assert_eq!(token_refresh_secs, 30);
    assert_eq!(
        host_args,
        ["--oauth-issuer=http://127.0.0.1:9", "--oauth-resource=http://127.0.0.1/mcp"]
    );
    assert!(
        Cli::try_parse_from([
            "mcp-load",
            "gate",
            "--url",
            "http://127.0.0.1:2/mcp",
            "--token",
            "a",
            "--token-cmd",
            "x"
        ])
        .is_err(),
        "one token source"
    );
}

#[test]
fn soak_keeps_its_own_seed_and_outputs() {
    let Command::Soak {
        spawn_host,
        clients,
        seconds,
        rate,
        session_ttl_secs,
        client_request_timeout_secs,
        replay_max_events,
        retention_after_delivery_ms,
        retention_undelivered_ms,
        keepalive_ms,
        settle_seconds,
        rounds,
        kinds,
        seed,
        json_out,
        svg_out,
        no_progress,
    } = parse(&["soak", "--spawn-host", "mcp-host"])
    else {
        panic!("not soak");
    };
    assert_eq!(spawn_host, "mcp-host");
    assert_eq!((clients, seconds, rate), (16, 20, 400.0));
    assert_eq!((session_ttl_secs, client_request_timeout_secs, replay_max_events), (3, 2, 16));
    assert_eq!((retention_after_delivery_ms, retention_undelivered_ms), (1000, 3000));
    assert_eq!((keepalive_ms, settle_seconds, rounds), (1000, None, 1));
    assert_eq!(kinds, "all");
    assert_eq!(seed, 1);
    assert_eq!((json_out, svg_out), (None, None));
    assert!(!no_progress);

    let Command::Soak { seed, json_out, svg_out, no_progress, settle_seconds, .. } = parse(&[
        "soak",
        "--spawn-host",
        "mcp-host",
        "--seed",
        "9",
        "--json-out",
        "soak.json",
        "--svg-out",
        "soak.svg",
        "--no-progress",
        "--settle-seconds",
        "30",
    ]) else {
        panic!("not soak");
    };
    assert_eq!(seed, 9);
    assert_eq!(json_out.as_deref(), Some("soak.json"));
    assert_eq!(svg_out.as_deref(), Some("soak.svg"));
    assert!(no_progress);
    assert_eq!(settle_seconds, Some(30));
}

#[test]
fn probe_parses() {
    let Command::Probe { url, tool, args, expect_text, expect_resume } =
        parse(&["probe", "--url", "http://h/mcp", "--tool", "echo"])
    else {
        panic!("not probe");
    };
    assert_eq!((url.as_str(), tool.as_str(), args.as_str()), ("http://h/mcp", "echo", "{}"));
    assert_eq!((expect_text, expect_resume), (None, false));

    let Command::Probe { args, expect_text, expect_resume, .. } = parse(&[
        "probe",
        "--url",
        "http://h/mcp",
        "--tool",
        "echo",
        "--args",
        "{\"text\":\"x\"}",
        "--expect-text",
        "x",
        "--expect-resume",
    ]) else {
        panic!("not probe");
    };
    assert_eq!(args, "{\"text\":\"x\"}");
    assert_eq!(expect_text.as_deref(), Some("x"));
    assert!(expect_resume);
}

#[test]
fn shared_flags_read_the_same_in_each_subcommand() {
    let seed = ("Seed of the fault proxy's decisions".to_owned(), vec!["1".to_owned()]);
    let json_out = ("Also write the report as JSON here".to_owned(), vec![]);
    for sub in ["run", "gate"] {
        assert_eq!(flag(sub, "seed"), seed, "{sub} --seed");
        assert_eq!(flag(sub, "json-out"), json_out, "{sub} --json-out");
    }
    // Spelled alike, meant otherwise: soak seeds its clients and writes every sample.
    assert_eq!(flag("soak", "seed").0, "Seed of the clients' choices");
    assert_eq!(
        flag("soak", "json-out").0,
        "Also write the report (with every sample) as JSON here"
    );
    for bad in [["run", "--url", "u", "--seed", "x"], ["gate", "--url", "u", "--seed", "x"]] {
        assert_eq!(refusal(&bad), Some(ErrorKind::ValueValidation), "{bad:?}");
    }
    for missing in [["run", "--url", "u", "--json-out"], ["gate", "--url", "u", "--json-out"]] {
        assert_eq!(refusal(&missing), Some(ErrorKind::InvalidValue), "{missing:?}");
    }
}

#[test]
fn flags_spelled_alike_keep_their_own_rules() {
    // --url and --spawn-host: one of the two for run and gate, --spawn-host alone for soak.
    for sub in ["run", "gate"] {
        assert_eq!(refusal(&[sub]), Some(ErrorKind::MissingRequiredArgument), "{sub}");
        assert_eq!(
            refusal(&[sub, "--url", "u", "--spawn-host", "h"]),
            Some(ErrorKind::ArgumentConflict),
            "{sub}"
        );
    }
    assert_eq!(refusal(&["soak"]), Some(ErrorKind::MissingRequiredArgument));
    assert_eq!(refusal(&["soak", "--url", "u"]), Some(ErrorKind::UnknownArgument));
    assert_eq!(refusal(&["probe", "--tool", "t"]), Some(ErrorKind::MissingRequiredArgument));
    // --clients: up to 10 000 for run and gate, 1000 for soak.
    assert_eq!(refusal(&["run", "--url", "u", "--clients", "10000"]), None);
    assert_eq!(refusal(&["gate", "--url", "u", "--clients", "10000"]), None);
    assert_eq!(
        refusal(&["soak", "--spawn-host", "h", "--clients", "1001"]),
        Some(ErrorKind::ValueValidation)
    );
    for sub in [["run", "--url"], ["gate", "--url"], ["soak", "--spawn-host"]] {
        let base = [sub[0], sub[1], "u"];
        assert_eq!(
            refusal(&[&base[..], &["--clients", "0"][..]].concat()),
            Some(ErrorKind::ValueValidation),
            "{sub:?}"
        );
    }
    // --seconds (run, soak) and --phase-seconds (gate): 1..=3600.
    assert_eq!(
        refusal(&["run", "--url", "u", "--seconds", "3601"]),
        Some(ErrorKind::ValueValidation)
    );
    assert_eq!(
        refusal(&["soak", "--spawn-host", "h", "--seconds", "0"]),
        Some(ErrorKind::ValueValidation)
    );
    // --no-progress takes no value anywhere.
    for sub in [["run", "--url"], ["gate", "--url"], ["soak", "--spawn-host"]] {
        assert_eq!(
            refusal(&[sub[0], sub[1], "u", "--no-progress=true"]),
            Some(ErrorKind::TooManyValues),
            "{sub:?}"
        );
    }
    // --svg-out: gate and soak only; --rate: optional for run, with a default for gate, soak.
    assert_eq!(refusal(&["run", "--url", "u", "--svg-out", "x"]), Some(ErrorKind::UnknownArgument));
    assert_eq!(flag("gate", "rate").1, ["0.2"]);
    assert_eq!(flag("soak", "rate").1, ["400"]);
    assert!(flag("run", "rate").1.is_empty());
}
