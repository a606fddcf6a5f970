use std::collections::BTreeMap;

use serde_json::json;

use super::report::{self, Measured, RoundEnd, evaluate};
use super::traffic::{CAUSE_BODY, Expect, Kind, PROBES, StepCount, Tally, Verdict, classify};
use super::*;

fn spec() -> SoakSpec {
    SoakSpec {
        clients: 8,
        seconds: 8,
        rate: Some(400.0),
        session_ttl_secs: 3,
        client_request_timeout_secs: 2,
        replay_max_events: 16,
        retention_after_delivery_ms: 1000,
        retention_undelivered_ms: 3000,
        keepalive_ms: 1000,
        rounds: 1,
        kinds: Kind::ALL.to_vec(),
        settle_seconds: None,
        seed: 1,
        progress: false,
    }
}

/// What a clean soak measures: every kind and probe ran and was answered as documented,
/// the host refused exactly what was provoked, and came back to 0 and to its idle memory.
fn clean() -> Measured {
    let mut t = Tally { requests: 100, ..Tally::default() };
    for k in Kind::ALL {
        t.kinds.insert(k, traffic::KindCount { started: 2, completed: 2 });
    }
    for (k, step, _) in PROBES {
        t.steps.insert(format!("{}/{step}", k.name()), StepCount { sent: 2, as_expected: 2 });
    }
    t.steps.insert(
        "unanswered-elicitation/elicitation-create".into(),
        StepCount { sent: 2, as_expected: 2 },
    );
    t.refused = BTreeMap::from([("limit.json", 4), (CAUSE_BODY, 4)]);
    Measured {
        idle_rss_kib: Some(8_000),
        rounds: vec![RoundEnd {
            sessions: Some(0),
            streams: Some(0),
            request_memory_bytes: Some(0),
            rss_kib: Some(12_000),
        }],
        host_refused: BTreeMap::from([("limit.json".to_owned(), 4), (CAUSE_BODY.to_owned(), 4)]),
        host_timed_out: Some(2),
        host_ended_by_gap: Some(2),
        host_running: true,
        clients_overran: 0,
        kinds: Kind::ALL.to_vec(),
        tally: t,
        peak_kept_receipt_bytes: Some(40_000),
    }
}

fn failing(m: &Measured) -> Vec<String> {
    evaluate(m).into_iter().filter(|g| !g.pass).map(|g| g.name).collect()
}

#[test]
fn a_clean_soak_passes_every_gate() {
    assert_eq!(failing(&clean()), Vec::<String>::new());
}

#[test]
fn receipts_kept_past_the_total_fail_the_soak() {
    let mut m = clean();
    m.peak_kept_receipt_bytes =
        Some(super::payloads::FLOOD_TOTAL_BYTES + super::payloads::FLOOD_SLACK_BYTES + 1);
    assert_eq!(
        failing(&m),
        vec![
            "receipts kept within ledger.receipt_bytes_total and one receipt (every sample)"
                .to_owned()
        ]
    );
    m.peak_kept_receipt_bytes = None;
    assert_eq!(failing(&m).len(), 1, "an unmeasured figure fails its gate");
}

#[test]
fn each_defect_fails_its_own_gate() {
    let only = |m: &Measured, gate: &str| {
        let f = failing(m);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with(gate), "{f:?}");
    };
    let mut m = clean();
    m.host_running = false;
    only(&m, "host still running");
    let mut m = clean();
    m.rounds[0].sessions = Some(3);
    only(&m, "sessions return to 0");
    let mut m = clean();
    m.rounds[0].sessions = None;
    only(&m, "sessions return to 0");
    let mut m = clean();
    m.rounds.insert(
        0,
        RoundEnd {
            sessions: Some(1),
            streams: Some(0),
            request_memory_bytes: Some(0),
            rss_kib: Some(9_000),
        },
    );
    only(&m, "sessions return to 0");
    let mut m = clean();
    m.rounds[0].streams = Some(2);
    only(&m, "streams return to 0");
    let mut m = clean();
    m.rounds[0].request_memory_bytes = Some(4096);
    only(&m, "request memory returns to 0");
    let mut m = clean();
    m.rounds[0].request_memory_bytes = None;
    only(&m, "request memory returns to 0");
    let mut m = clean();
    m.rounds[0].rss_kib = Some(16_001);
    only(&m, "final RSS within 2 × idle RSS");
    let mut m = clean();
    m.rounds[0].rss_kib = None;
    only(&m, "final RSS within 2 × idle RSS");
    let mut m = clean();
    m.idle_rss_kib = None;
    only(&m, "final RSS within 2 × idle RSS");
    let mut m = clean();
    m.tally.unexpected = 1;
    only(&m, "answers as expected");
    let mut m = clean();
    m.clients_overran = 1;
    only(&m, "client tasks ended");
    let mut m = clean();
    m.host_refused.insert("session_not_found".into(), 1);
    only(&m, "host refusals are the provoked limits");
    let mut m = clean();
    m.host_refused.insert("limit.json".into(), 3);
    only(&m, "host refusals are the provoked limits");
    let mut m = clean();
    m.tally
        .steps
        .insert("large-payloads/values-over".into(), StepCount { sent: 2, as_expected: 1 });
    only(&m, "probe large-payloads/values-over");
    let mut m = clean();
    m.tally.steps.remove("resume-into-gap/reuse-id");
    only(&m, "probe resume-into-gap/reuse-id");
    let mut m = clean();
    m.tally.kinds.insert(Kind::Elicitation, traffic::KindCount { started: 3, completed: 0 });
    only(&m, "traffic unanswered-elicitation ran");
    let mut m = clean();
    m.tally.kinds.remove(&Kind::ReplacedGet);
    only(&m, "traffic replaced-get ran");
    let mut m = clean();
    m.host_timed_out = Some(1);
    only(&m, "host timed out every unanswered elicitation");
    let mut m = clean();
    m.host_timed_out = None;
    only(&m, "host timed out every unanswered elicitation");
    let mut m = clean();
    m.host_ended_by_gap = Some(0);
    only(&m, "host ended every request whose resume found a gap");
}

#[test]
fn only_the_selected_kinds_and_their_probes_are_gated() {
    let mut m = clean();
    m.kinds = vec![Kind::Churn];
    m.tally.kinds.clear();
    m.tally.steps.clear();
    m.tally.kinds.insert(Kind::Churn, traffic::KindCount { started: 1, completed: 1 });
    let names: Vec<String> = evaluate(&m).into_iter().map(|g| g.name).collect();
    assert!(names.iter().all(|n| !n.starts_with("probe ")), "{names:?}");
    assert_eq!(names.iter().filter(|n| n.starts_with("traffic ")).count(), 1);
    assert_eq!(failing(&m), Vec::<String>::new());
}

#[test]
fn answers_are_classified_by_status_and_code() {
    let result = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    let err = |code: i64, limit: Option<&str>| json!({"jsonrpc": "2.0", "error": {"code": code, "message": "m", "data": {"limit": limit}}});
    let values = Expect::Limit { cause: "limit.json", limit: "limits.json_max_values" };
    assert_eq!(classify(Expect::Result, 200, Some(&result)), Verdict::Ok);
    assert_eq!(classify(Expect::Status(202), 202, None), Verdict::Ok);
    assert_eq!(classify(Expect::RpcError(-32005), 200, Some(&err(-32005, None))), Verdict::Ok);
    assert_eq!(
        classify(
            values,
            400,
            Some(&err(-32600, Some("number of JSON values (limits.json_max_values)")))
        ),
        Verdict::Refused("limit.json")
    );
    assert_eq!(
        classify(Expect::TooLarge, 413, Some(&err(-32000, None))),
        Verdict::Refused(CAUSE_BODY)
    );
    let unexpected = |v: Verdict| match v {
        Verdict::Unexpected(why) => why,
        other => panic!("expected a failure, got {other:?}"),
    };
    assert!(
        unexpected(classify(Expect::Result, 500, Some(&err(-32603, None))))
            .starts_with("server error")
    );
    assert!(
        unexpected(classify(Expect::Result, 404, Some(&err(-32001, None))))
            .starts_with("404 on a live session")
    );
    assert!(unexpected(classify(Expect::Result, 409, Some(&err(-32003, None)))).starts_with("409"));
    assert!(
        unexpected(classify(Expect::Result, 400, Some(&err(-32600, None))))
            .starts_with("unexpected 400")
    );
    assert!(
        unexpected(classify(Expect::Result, 503, Some(&err(-32006, None))))
            .starts_with("refused for load")
    );
    // A refusal of the wrong limit, or with the wrong code, is not the documented answer.
    assert!(
        unexpected(classify(
            values,
            400,
            Some(&err(-32600, Some("JSON nesting depth (limits.json_max_depth)")))
        ))
        .starts_with("unexpected 400")
    );
    assert!(
        unexpected(classify(values, 400, Some(&err(-32000, Some("limits.json_max_values")))))
            .starts_with("unexpected 400")
    );
    // A gap answered as "gone" (410) or replayed as a result is not the documented answer.
    assert!(
        unexpected(classify(Expect::RpcError(-32005), 410, Some(&err(-32005, None))))
            .starts_with("unexpected status")
    );
    assert!(
        unexpected(classify(Expect::RpcError(-32005), 200, Some(&result)))
            .starts_with("unexpected answer")
    );
    assert!(unexpected(classify(Expect::Result, 200, None)).contains("no JSON-RPC message"));
    assert!(
        unexpected(classify(Expect::TooLarge, 200, Some(&result))).starts_with("unexpected answer")
    );
}

#[test]
fn the_tally_counts_refusals_and_keeps_a_few_samples_per_step() {
    let mut t = Tally::default();
    let limit = Expect::Limit { cause: "limit.length", limit: "limits.id_max_bytes" };
    let refusal = json!({"error": {"code": -32600, "data": {"limit": "request id length in bytes (limits.id_max_bytes)"}}});
    assert!(t.record(Kind::Large, "id-over", limit, Ok((400, Some(refusal)))));
    for _ in 0..5 {
        assert!(!t.record(Kind::Churn, "echo", Expect::Result, Ok((404, None))));
    }
    assert!(!t.record(Kind::Churn, "echo", Expect::Result, Err("no answer".into())));
    assert!(!t.check(Kind::Gap, "priming-event", Err("none".into())));
    assert!(t.check(Kind::Gap, "flood-started", Ok(())));
    assert_eq!(t.refused.get("limit.length"), Some(&1));
    assert_eq!(t.steps["large-payloads/id-over"], StepCount { sent: 1, as_expected: 1 });
    assert_eq!(t.steps["session-churn/echo"], StepCount { sent: 6, as_expected: 0 });
    assert_eq!(t.unexpected, 7);
    assert_eq!(t.samples.iter().filter(|s| s.starts_with("session-churn/echo")).count(), 3);
}

#[test]
fn settle_time_and_host_settings_follow_the_flags() {
    let s = spec();
    // 3 × 3 s TTL + 3 s retention + 2 × 1 s keep-alive + 2 s.
    assert_eq!(s.default_settle_secs(), 16);
    assert_eq!(SoakSpec { settle_seconds: Some(5), ..spec() }.settle(), Duration::from_secs(5));
    assert_eq!(
        SoakSpec { session_ttl_secs: 3600, ..spec() }.default_settle_secs(),
        MAX_SETTLE_SECS
    );
    let args = s.host_args(Path::new("/tmp/x.toml")).join(" ");
    assert_eq!(
        args,
        "--port 0 --packs conformance,echo,soak,ledger --stats-every-ms 250 --session-ttl-secs 3 --client-request-timeout-secs 2 --replay-max-events 16 --config /tmp/x.toml"
    );
    assert_eq!(
        s.config_toml(),
        "[server]\ntrim_every_secs = 1\ntcp_user_timeout_secs = 2\n\n[security]\nbody_read_timeout_ms = 2000\n\n[sessions]\nretention_after_delivery_ms = 1000\nretention_undelivered_ms = 3000\n\n[sse]\nkeepalive_ms = 1000\n\n[limits]\nrequest_memory_bytes = 60948480\n\n[modern]\nmax_in_flight = 64\nmax_in_flight_per_caller = 16\n\n[ledger]\nreceipts_per_caller = 128\nreceipt_bytes_total = 81920\nreceipt_retention_secs = 10\nsweep_every_secs = 1\n"
    );
    // The host takes its bounds: every value in range.
    let mut host = mcp_runtime::config::RuntimeConfig::default();
    host.limits.request_memory_bytes = payloads::REQUEST_MEMORY_BYTES;
    host.modern.max_in_flight = payloads::MODERN_MAX_IN_FLIGHT;
    host.modern.max_in_flight_per_caller = Some(payloads::MODERN_PER_CALLER);
    host.ledger.receipts_per_caller = payloads::FLOOD_PER_CALLER;
    host.ledger.receipt_bytes_total = payloads::FLOOD_TOTAL_BYTES;
    host.ledger.receipt_retention_secs = payloads::FLOOD_RETENTION_SECS;
    host.ledger.sweep_every_secs = 1;
    assert!(host.validate().is_ok());
}

#[test]
fn the_report_renders_as_tables_and_an_svg_with_the_phases_marked() {
    let m = clean();
    let gates = evaluate(&m);
    let samples: Vec<_> = (0..20u64)
        .map(|i| json!({"t_ms": i * 250, "round": 1, "phase": if i < 4 { "idle" } else if i < 12 { "traffic" } else { "silence" },
            "rss_kib": 8_000 + (i % 12) * 1_000, "sessions": if i < 16 { i } else { 0 }, "streams": i / 2, "stream_memory_bytes": 0}))
        .collect();
    let r = json!({
        "pass": true, "clients": 8, "seconds": 2, "rounds": 1, "kinds": ["session-churn"], "host": {"settle_seconds": 16},
        "requests_per_s": 50.0,
        "rss_kib": {"idle": 8_000, "peak": 19_000, "peak_hwm": 20_000, "final": 12_000, "limit": 16_000},
        "round_results": [{"round": 1, "traffic_start_ms": 1_000, "traffic_end_ms": 3_000, "final_rss_kib": 12_000, "peak_sessions": 15, "final_sessions": 0, "sessions_zero_after_ms": 1_000}],
        "host_stats": {"gaps": 2}, "refusals": {"host": {"limit.json": 4}, "client": {"limit.json": 4}},
        "clients_tally": report::tally_json(&m.tally), "gates": report::gates_json(&gates), "samples": samples,
    });
    let table = render(&r);
    assert!(table.contains("| limit.json | 4 | 4 |"), "{table}");
    assert!(table.contains("| sessions return to 0 (each round) | 0 | 0 | pass |"), "{table}");
    assert!(table.contains("| 1 | ? | 11.7 | 15 | 1.0 s | 0 |"), "{table}");
    assert!(table.trim_end().ends_with("soak PASSED"));
    let svg = svg(&r);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 3, "rss, sessions, streams");
    assert_eq!(svg.matches(">traffic →<").count(), 2, "one marker per panel");
    assert_eq!(svg.matches(">silence →<").count(), 2);
    assert!(svg.contains("gate: 2 × idle"));
}
