use super::*;

fn spec(scenarios: Vec<Scenario>) -> GateSpec {
    GateSpec {
        url: String::new(),
        token: None,
        other_token: None,
        clients: 1,
        events_per_phase: 10,
        phase_seconds: 1,
        min_events: 10,
        scenarios,
        rate: 0.2,
        mixed_rate: 0.05,
        seed: 1,
        calls_per_session: 10,
        resume_p99_limit_ms: RESUME_P99_LIMIT_MS,
        progress: false,
        host: None,
        nodes: Vec::new(),
    }
}

fn clean_phase(name: &str) -> Phase {
    let mut p = Phase::new(name);
    p.events = 10;
    p.sessions_closed = 1;
    p.proxy.insert("cut", 3);
    let _ = p.resume_ms.record(1_000);
    let _ = p.latency_us.record(500);
    p
}

fn failing(gates: &[Gate]) -> Vec<&str> {
    gates.iter().filter(|g| !g.pass).map(|g| g.name.as_str()).collect()
}

#[test]
fn a_crash_phase_must_kill_keep_its_sessions_and_answer_outcome_unknown_only_after_a_kill() {
    let s = spec(vec![Scenario::Crash]);
    let ledger = json!({"duplicates": 0});
    let crash = |kills: u64, unknown: u64, not_found: u64| {
        let mut p = clean_phase("crash");
        p.proxy.clear();
        if kills > 0 {
            p.proxy.insert("crash.kills", kills);
        }
        (p.kills, p.outcome_unknown, p.not_found) = (kills, unknown, not_found);
        p
    };
    assert!(
        failing(&evaluate(&s, &[crash(3, 2, 0)], &ledger)).is_empty(),
        "outcome unknown after a kill is honest"
    );
    assert_eq!(
        failing(&evaluate(&s, &[crash(0, 0, 0)], &ledger)),
        vec!["scenario crash fired", "kills in the crash phase"]
    );
    assert_eq!(
        failing(&evaluate(&s, &[crash(2, 0, 0)], &ledger)),
        vec!["kills in the crash phase"],
        "fewer kills than the phase promises"
    );
    assert_eq!(
        failing(&evaluate(&s, &[crash(3, 0, 1)], &ledger)),
        vec!["404s in the crash phase (sessions survive a kill)"]
    );
    let mut baseline = clean_phase("baseline");
    baseline.outcome_unknown = 1;
    assert_eq!(
        failing(&evaluate(&s, &[baseline, crash(3, 0, 0)], &ledger)),
        vec!["outcome-unknown answers in phases without a kill"]
    );
}

#[test]
fn a_clean_run_passes_and_each_defect_fails_its_gate() {
    let s = spec(vec![Scenario::Cut]);
    let ledger = json!({"duplicates": 0});
    assert!(failing(&evaluate(&s, &[clean_phase("cut")], &ledger)).is_empty());

    let mut p = clean_phase("cut");
    p.cross_stream = 1;
    assert_eq!(failing(&evaluate(&s, &[p], &ledger)), vec!["cross-stream acceptances"]);
    let mut p = clean_phase("cut");
    p.lost = 1;
    assert_eq!(failing(&evaluate(&s, &[p], &ledger)), vec!["lost responses"]);
    let mut p = clean_phase("cut");
    p.clients_panicked = 1;
    assert_eq!(failing(&evaluate(&s, &[p], &ledger)), vec!["virtual clients that panicked"]);
    assert_eq!(
        failing(&evaluate(&s, &[clean_phase("cut")], &json!({"duplicates": 1}))),
        vec!["duplicate dispatches (client + server ledger)"]
    );
    assert_eq!(
        failing(&evaluate(&s, &[clean_phase("cut")], &Value::Null)),
        vec!["duplicate dispatches (client + server ledger)"],
        "no ledger figure is not a pass"
    );
    let mut p = clean_phase("cut");
    p.proxy.insert("resume.refused_unexplained", 1);
    assert_eq!(
        failing(&evaluate(&s, &[p], &ledger)),
        vec!["resumes refused (400) whose cursor the proxy left alone"],
        "an idempotent call re-issued after it does not hide it"
    );
    let mut p = clean_phase("cut");
    let _ = p.resume_ms.record_n(6_000, 10);
    assert_eq!(
        failing(&evaluate(&s, std::slice::from_ref(&p), &ledger)),
        vec!["resume latency p99 (with retry wait)"]
    );
    let roomy = GateSpec { resume_p99_limit_ms: 10_000, ..s.clone() };
    assert!(failing(&evaluate(&roomy, &[p], &ledger)).is_empty(), "--resume-p99-limit-ms");
    let mut p = clean_phase("cut");
    p.proxy.clear();
    assert_eq!(
        failing(&evaluate(&s, &[p], &ledger)),
        vec!["scenario cut fired"],
        "a scenario that never fired is not a pass"
    );
}

#[test]
fn the_modern_phase_runs_2026_clients_with_the_faults_that_reach_them_and_mixed_alternates_eras() {
    let phases = plan(&spec(vec![
        Scenario::CrossedIds,
        Scenario::Storm,
        Scenario::OldToken,
        Scenario::Modern,
    ]));
    let names: Vec<&str> = phases.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["baseline", "crossed-ids", "storm", "old-token", "modern", "mixed"]);
    let (_, rates, eras) = &phases[4];
    assert_eq!(*eras, Eras::Modern);
    let faults: Vec<Scenario> = rates.keys().copied().collect();
    assert_eq!(
        faults,
        [Scenario::Cut, Scenario::OldToken, Scenario::Storm, Scenario::Modern],
        "not crossed-ids: a stateless stream has no ids to check"
    );
    assert_eq!(phases[5].2, Eras::Alternate);
    assert_eq!((Eras::Alternate.of(0), Eras::Alternate.of(1)), (Era::Legacy, Era::Modern));
    assert!(phases[..4].iter().all(|(_, _, e)| *e == Eras::Legacy));
    let legacy_only = plan(&spec(vec![Scenario::Cut, Scenario::Storm]));
    assert!(
        legacy_only.iter().all(|(_, _, e)| *e == Eras::Legacy),
        "without `modern` every client keeps a session"
    );
    assert!(
        Eras::parse("modern").is_ok()
            && Eras::parse("mixed").is_ok()
            && Eras::parse("new").is_err()
    );
}

#[test]
fn the_handles_phase_alternates_eras_with_cuts_and_the_selected_kills() {
    let with_crash = plan(&spec(vec![Scenario::Crash, Scenario::Handles]));
    let (_, rates, eras) = with_crash.iter().find(|(n, _, _)| n == "handles").unwrap();
    assert_eq!(*eras, Eras::Alternate);
    assert_eq!(
        rates.keys().copied().collect::<Vec<_>>(),
        [Scenario::Cut, Scenario::Crash, Scenario::Handles]
    );
    let alone = plan(&spec(vec![Scenario::Handles]));
    assert_eq!(
        alone[1].1.keys().copied().collect::<Vec<_>>(),
        [Scenario::Cut, Scenario::Handles],
        "no kills unless crash is selected"
    );
    // A handles phase with a lost item or a double checkout fails its gates.
    let s = spec(vec![Scenario::Handles]);
    let mut p = clean_phase("handles");
    (p.baskets, p.checkouts, p.tasks_done) = (3, 3, 1);
    let ok = json!({"duplicates": 0, "baskets": {"double_checkouts": 0}});
    assert!(
        failing(&evaluate(&s, &[p], &ok))
            .iter()
            .all(|g| !g.contains("basket") && !g.contains("checkout"))
    );
    let mut lost = clean_phase("handles");
    (lost.baskets, lost.checkouts, lost.tasks_done, lost.items_lost) = (3, 3, 1, 1);
    assert!(
        failing(&evaluate(&s, &[lost], &ok))
            .contains(&"basket items lost (a client was told an item was added; it is missing)")
    );
    let mut fine = clean_phase("handles");
    (fine.baskets, fine.checkouts, fine.tasks_done) = (3, 3, 1);
    let double = json!({"duplicates": 0, "baskets": {"double_checkouts": 1}});
    assert!(
        failing(&evaluate(&s, &[fine], &double)).iter().any(|g| g.starts_with("double checkouts"))
    );
}

#[test]
fn rejection_rates_apply_only_to_selected_scenarios() {
    let ledger = json!({"duplicates": 0});
    let gates = evaluate(&spec(vec![Scenario::Cut]), &[clean_phase("cut")], &ledger);
    assert!(gates.iter().find(|g| g.name == "illegal Origin rejected").is_some_and(|g| g.skipped));
    let mut p = clean_phase("origin-rewrite");
    p.proxy.insert("origin.rejected", 9);
    p.proxy.insert("origin.accepted", 1);
    let gates = evaluate(&spec(vec![Scenario::OriginRewrite]), &[p], &ledger);
    assert_eq!(failing(&gates), vec!["illegal Origin rejected"]);
}

#[test]
fn report_renders_as_tables_and_svg() {
    let s = spec(vec![Scenario::Cut]);
    let phases = [clean_phase("baseline"), clean_phase("cut")];
    let gates = evaluate(&s, &phases, &json!({"duplicates": 0}));
    let report = json!({
        "pass": true, "events": 20, "phases": phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
        "gates": gates.iter().map(|g| json!({"gate": g.name, "value": g.value, "threshold": g.threshold, "pass": g.pass, "skipped": g.skipped})).collect::<Vec<_>>(),
    });
    let table = render(&report);
    assert!(
        table.contains("| cut | 10 |") && table.contains("| lost responses | 0 | 0 | pass |"),
        "{table}"
    );
    let svg = svg(&report);
    assert_eq!(svg.matches("<polyline").count(), 2 * 2, "two panels, two phases with samples");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}
