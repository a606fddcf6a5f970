//! The soak's verdict: gates over what was measured ([`evaluate`]), the JSON report, its
//! terminal tables ([`render`]) and an SVG chart of RSS and sessions over time ([`svg`]).
//! Pure: works on figures, never on the host.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::traffic::{Kind, PROBES, Tally};

/// Final RSS may be at most this many times the idle RSS.
pub(crate) const RSS_GROWTH_LIMIT: u64 = 2;

/// The host at the end of one round's silence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RoundEnd {
    /// From a fresh stats line (`None`: no fresh line).
    pub(crate) sessions: Option<u64>,
    pub(crate) streams: Option<i64>,
    /// Bytes charged to the request memory budget.
    pub(crate) request_memory_bytes: Option<u64>,
    pub(crate) rss_kib: Option<u64>,
}

/// What a soak measured, as the gates need it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// After start and a warm-up of every kind at the run's concurrency, before traffic.
    pub(crate) idle_rss_kib: Option<u64>,
    /// One per round of traffic and silence.
    pub(crate) rounds: Vec<RoundEnd>,
    /// The host's refusals by cause, from its last stats line.
    pub(crate) host_refused: BTreeMap<String, u64>,
    /// The host's count of server-to-client requests given up at their deadline.
    pub(crate) host_timed_out: Option<u64>,
    /// The host's count of requests ended because a resume found their events lost.
    pub(crate) host_ended_by_gap: Option<u64>,
    pub(crate) host_running: bool,
    /// Client tasks still running at the hard deadline (then aborted).
    pub(crate) clients_overran: u64,
    /// The traffic kinds that were to run.
    pub(crate) kinds: Vec<Kind>,
    pub(crate) tally: Tally,
    /// The most bytes of receipts the host kept in any sample.
    pub(crate) peak_kept_receipt_bytes: Option<u64>,
}

/// One gate.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    pub(crate) name: String,
    pub(crate) value: String,
    pub(crate) threshold: String,
    pub(crate) pass: bool,
}

impl Gate {
    fn new(
        name: impl Into<String>,
        value: impl Into<String>,
        threshold: impl Into<String>,
        pass: bool,
    ) -> Gate {
        Gate { name: name.into(), value: value.into(), threshold: threshold.into(), pass }
    }
}

fn or_unknown<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

/// Every gate. A figure that could not be measured fails its gate.
pub(crate) fn evaluate(m: &Measured) -> Vec<Gate> {
    let t = &m.tally;
    let ends =
        |f: &dyn Fn(&RoundEnd) -> String| m.rounds.iter().map(f).collect::<Vec<_>>().join(", ");
    let all_zero = |f: &dyn Fn(&RoundEnd) -> bool| !m.rounds.is_empty() && m.rounds.iter().all(f);
    let mut gates = vec![
        Gate::new(
            "host still running at the end",
            if m.host_running { "running" } else { "exited" },
            "running",
            m.host_running,
        ),
        Gate::new(
            "sessions return to 0 (each round)",
            ends(&|r| or_unknown(r.sessions)),
            "0",
            all_zero(&|r| r.sessions == Some(0)),
        ),
        Gate::new(
            "streams return to 0 (each round)",
            ends(&|r| or_unknown(r.streams)),
            "0",
            all_zero(&|r| r.streams == Some(0)),
        ),
        Gate::new(
            "request memory returns to 0 (each round)",
            ends(&|r| or_unknown(r.request_memory_bytes)),
            "0",
            all_zero(&|r| r.request_memory_bytes == Some(0)),
        ),
    ];
    let final_rss = m.rounds.last().and_then(|r| r.rss_kib);
    let rss_pass = matches!((m.idle_rss_kib, final_rss), (Some(i), Some(f)) if i > 0 && f <= RSS_GROWTH_LIMIT * i);
    gates.push(Gate::new(
        "final RSS within 2 × idle RSS",
        format!("{} KiB final, {} KiB idle", or_unknown(final_rss), or_unknown(m.idle_rss_kib)),
        format!(
            "<= {}",
            m.idle_rss_kib
                .map_or_else(|| "2 × idle".into(), |i| format!("{} KiB", RSS_GROWTH_LIMIT * i))
        ),
        rss_pass,
    ));
    gates.push(Gate::new(
        "answers as expected (none refused but the deliberate probes)",
        format!("{} unexpected of {} requests", t.unexpected, t.requests),
        "0 unexpected",
        t.unexpected == 0 && t.requests > 0,
    ));
    gates.push(Gate::new(
        "client tasks ended by the hard deadline",
        m.clients_overran.to_string(),
        "0 overran",
        m.clients_overran == 0,
    ));
    // Host-side refusals must be exactly the documented answers the clients provoked.
    let mut causes: Vec<&str> =
        m.host_refused.keys().map(String::as_str).chain(t.refused.keys().copied()).collect();
    causes.sort_unstable();
    causes.dedup();
    let mismatched: Vec<String> = causes
        .iter()
        .filter_map(|c| {
            let (host, provoked) = (
                m.host_refused.get(*c).copied().unwrap_or(0),
                t.refused.get(c).copied().unwrap_or(0),
            );
            (host != provoked).then(|| format!("{c}: host {host}, provoked {provoked}"))
        })
        .collect();
    let total: u64 = m.host_refused.values().sum();
    gates.push(Gate::new(
        "host refusals are the provoked limits, cause by cause",
        if mismatched.is_empty() {
            format!("{total} refusals, all provoked")
        } else {
            mismatched.join("; ")
        },
        "host = provoked for every cause",
        mismatched.is_empty(),
    ));
    // Server-side proof of the deadlines and of the gap ending its request: one each per
    // elicitation left unanswered, and per resume into a gap of a tool still running.
    let host_counts = [
        (
            Kind::Elicitation,
            "elicitation-create",
            m.host_timed_out,
            "host timed out every unanswered elicitation (client_requests_timed_out)",
        ),
        (
            Kind::Gap,
            "resume",
            m.host_ended_by_gap,
            "host ended every request whose resume found a gap (requests_ended_by_gap)",
        ),
    ];
    for (kind, step, host, name) in host_counts.into_iter().filter(|(k, ..)| m.kinds.contains(k)) {
        let seen = t.steps.get(&format!("{}/{step}", kind.name())).map_or(0, |c| c.as_expected);
        gates.push(Gate::new(
            name,
            format!("host {}, clients {seen}", or_unknown(host)),
            "host = clients, > 0",
            seen > 0 && host == Some(seen),
        ));
    }
    if m.kinds.contains(&Kind::ReceiptFlood) {
        let bound = super::payloads::FLOOD_TOTAL_BYTES + super::payloads::FLOOD_SLACK_BYTES;
        let peak = m.peak_kept_receipt_bytes;
        gates.push(Gate::new(
            "receipts kept within ledger.receipt_bytes_total and one receipt (every sample)",
            or_unknown(peak),
            format!("<= {bound} bytes"),
            peak.is_some_and(|p| p > 0 && p <= bound),
        ));
    }
    for (kind, step, answer) in PROBES.into_iter().filter(|(k, _, _)| m.kinds.contains(k)) {
        let key = format!("{}/{step}", kind.name());
        let c = t.steps.get(&key).cloned().unwrap_or_default();
        gates.push(Gate::new(
            format!("probe {key}: {answer}"),
            format!("{}/{}", c.as_expected, c.sent),
            "all sent, > 0",
            c.sent > 0 && c.as_expected == c.sent,
        ));
    }
    for kind in m.kinds.iter().copied() {
        let c = t.kinds.get(&kind).cloned().unwrap_or_default();
        gates.push(Gate::new(
            format!("traffic {} ran", kind.name()),
            format!("{} of {} iterations completed", c.completed, c.started),
            "> 0",
            c.completed > 0,
        ));
    }
    gates
}

/// The gates as JSON rows.
pub(crate) fn gates_json(gates: &[Gate]) -> Value {
    json!(gates.iter().map(|g| json!({"gate": g.name, "value": g.value, "threshold": g.threshold, "pass": g.pass})).collect::<Vec<_>>())
}

/// The client-side counts as JSON.
pub(crate) fn tally_json(t: &Tally) -> Value {
    json!({
        "requests": t.requests,
        "unexpected": t.unexpected,
        "unexpected_samples": t.samples,
        "kinds": t.kinds.iter().map(|(k, c)| (k.name().to_owned(), json!({"started": c.started, "completed": c.completed}))).collect::<serde_json::Map<_, _>>(),
        "steps": t.steps.iter().map(|(k, c)| (k.clone(), json!({"sent": c.sent, "as_expected": c.as_expected}))).collect::<serde_json::Map<_, _>>(),
        "refused": t.refused,
        "replaced_get": {"first_ended": t.replaced_get_ended, "first_still_open": t.replaced_get_still_open},
    })
}

fn mib(kib: &Value) -> String {
    kib.as_f64().map_or_else(|| "?".into(), |k| format!("{:.1}", k / 1024.0))
}

fn secs(ms: &Value) -> String {
    ms.as_f64().map_or_else(|| "never".into(), |m| format!("{:.1} s", m / 1000.0))
}

/// The report as terminal tables.
pub(crate) fn render(r: &Value) -> String {
    let mut out = String::new();
    let c = &r["clients_tally"];
    let _ = writeln!(
        out,
        "soak: {} clients × {} s of traffic, {} round(s), each then silence (settle {} s); {} requests ({:.0}/s in traffic); kinds: {}",
        r["clients"],
        r["seconds"],
        r["rounds"],
        r["host"]["settle_seconds"],
        c["requests"],
        r["requests_per_s"].as_f64().unwrap_or(0.0),
        r["kinds"]
            .as_array()
            .map(|k| k.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
            .unwrap_or_default(),
    );
    let rss = &r["rss_kib"];
    let _ = writeln!(
        out,
        "RSS MiB: idle {}, peak {} (VmHWM {}), final {} (gate: <= {})",
        mib(&rss["idle"]),
        mib(&rss["peak"]),
        mib(&rss["peak_hwm"]),
        mib(&rss["final"]),
        mib(&rss["limit"])
    );
    let _ = writeln!(
        out,
        "\n| round | peak RSS MiB | final RSS MiB | peak sessions | sessions 0 after | final sessions | peak streams | streams 0 after | final streams | peak stream memory B | peak / final request memory B | peak modern in flight |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for x in r["round_results"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            x["round"],
            mib(&x["peak_rss_kib"]),
            mib(&x["final_rss_kib"]),
            x["peak_sessions"],
            secs(&x["sessions_zero_after_ms"]),
            x["final_sessions"],
            x["peak_streams"],
            secs(&x["streams_zero_after_ms"]),
            x["final_streams"],
            x["peak_stream_memory_bytes"],
            x["peak_request_memory_bytes"],
            x["final_request_memory_bytes"],
            x["peak_modern_in_flight"],
        );
    }
    let h = &r["host_stats"];
    let _ = writeln!(
        out,
        "host counters: client_requests_timed_out {}, requests_ended_by_gap {}, streams_evicted {}, gaps {}, resumes {}, events {}, budget_trimmed {}",
        h["client_requests_timed_out"],
        h["requests_ended_by_gap"],
        h["streams_evicted"],
        h["gaps"],
        h["resumes"],
        h["events"],
        h["budget_trimmed"]
    );
    let g = &c["replaced_get"];
    let _ = writeln!(
        out,
        "replaced GET streams: first connection ended by the server {}, still open after 5 s {}",
        g["first_ended"], g["first_still_open"]
    );
    let _ = writeln!(out, "\n| traffic kind | iterations | completed |\n|---|---:|---:|");
    for (k, v) in c["kinds"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "| {k} | {} | {} |", v["started"], v["completed"]);
    }
    let _ = writeln!(out, "\n| step | sent | as expected |\n|---|---:|---:|");
    for (k, v) in c["steps"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "| {k} | {} | {} |", v["sent"], v["as_expected"]);
    }
    let _ = writeln!(out, "\n| refusal cause | host | provoked (client side) |\n|---|---:|---:|");
    let (host, client) = (&r["refusals"]["host"], &r["refusals"]["client"]);
    let mut causes: Vec<&String> = host
        .as_object()
        .into_iter()
        .flatten()
        .chain(client.as_object().into_iter().flatten())
        .map(|(k, _)| k)
        .collect();
    causes.sort();
    causes.dedup();
    for cause in causes {
        let _ = writeln!(
            out,
            "| {cause} | {} | {} |",
            host[cause].as_u64().unwrap_or(0),
            client[cause].as_u64().unwrap_or(0)
        );
    }
    let _ = writeln!(out, "\n| gate | value | threshold | result |\n|---|---|---|---|");
    for g in r["gates"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            g["gate"].as_str().unwrap_or_default(),
            g["value"].as_str().unwrap_or_default(),
            g["threshold"].as_str().unwrap_or_default(),
            if g["pass"] == true { "pass" } else { "FAIL" }
        );
    }
    for s in c["unexpected_samples"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  unexpected: {}", s.as_str().unwrap_or_default());
    }
    let _ = writeln!(out, "\nsoak {}", if r["pass"] == true { "PASSED" } else { "FAILED" });
    out
}

/// An SVG chart: RSS (MiB, with the gate's limit) and sessions/streams over time, the
/// traffic and silence phases marked.
pub(crate) fn svg(r: &Value) -> String {
    const W: f64 = 900.0;
    const H: f64 = 260.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 150.0;
    let samples: Vec<&Value> =
        r["samples"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let t_max = samples.iter().filter_map(|s| s["t_ms"].as_f64()).fold(1.0, f64::max);
    let x = |t: f64| LEFT + t / t_max * (W - LEFT - RIGHT);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        2.0 * H + 50.0
    );
    let limit_mib = r["rss_kib"]["limit"].as_f64().map(|k| k / 1024.0);
    let rss = ("RSS (MiB)", vec![("rss", "#1f77b4", "rss_kib", 1.0 / 1024.0)], limit_mib);
    let counts = (
        "Sessions and streams",
        vec![("sessions", "#d62728", "sessions", 1.0), ("streams", "#2ca02c", "streams", 1.0)],
        None,
    );
    for (pi, (title, lines, limit)) in [rss, counts].into_iter().enumerate() {
        let top = pi as f64 * (H + 25.0) + 25.0;
        let bottom = top + H - 25.0;
        let _ = writeln!(
            out,
            "<text x=\"{LEFT}\" y=\"{}\" font-size=\"13\">{title} over time (s)</text>",
            top - 8.0
        );
        let max = lines
            .iter()
            .flat_map(|(_, _, key, scale)| {
                samples.iter().filter_map(move |s| s[*key].as_f64().map(|v| v * scale))
            })
            .chain(limit)
            .fold(1.0, f64::max)
            * 1.1;
        let y = |v: f64| bottom - v / max * (H - 40.0);
        for i in 0..=4 {
            let v = max * f64::from(i) / 4.0;
            let _ = writeln!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{0}\" y1=\"{1:.1}\" y2=\"{1:.1}\" stroke=\"#ddd\"/><text x=\"{2}\" y=\"{1:.1}\" text-anchor=\"end\">{v:.0}</text>",
                W - RIGHT,
                y(v),
                LEFT - 5.0
            );
        }
        for i in 0..=5 {
            let t = t_max * f64::from(i) / 5.0;
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{:.0}</text>",
                x(t),
                bottom + 14.0,
                t / 1000.0
            );
        }
        for round in r["round_results"].as_array().into_iter().flatten() {
            for (label, key) in [("traffic", "traffic_start_ms"), ("silence", "traffic_end_ms")] {
                if let Some(t) = round[key].as_f64() {
                    let _ = writeln!(
                        out,
                        "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{top}\" y2=\"{bottom}\" stroke=\"#555\" stroke-dasharray=\"4,3\"/><text x=\"{1:.1}\" y=\"{2}\">{label} →</text>",
                        x(t),
                        x(t) + 3.0,
                        top + 10.0
                    );
                }
            }
        }
        if let Some(l) = limit {
            let _ = writeln!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{0}\" y1=\"{1:.1}\" y2=\"{1:.1}\" stroke=\"#ff7f0e\" stroke-dasharray=\"6,3\"/><text x=\"{2}\" y=\"{1:.1}\" fill=\"#ff7f0e\">gate: 2 × idle</text>",
                W - RIGHT,
                y(l),
                W - RIGHT + 5.0
            );
        }
        for (n, (label, color, key, scale)) in lines.iter().enumerate() {
            let points: Vec<String> = samples
                .iter()
                .filter_map(|s| {
                    Some(format!(
                        "{:.1},{:.1}",
                        x(s["t_ms"].as_f64()?),
                        y(s[*key].as_f64()? * scale)
                    ))
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>",
                points.join(" ")
            );
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{label}</text>",
                W - RIGHT + 5.0,
                top + 30.0 + 14.0 * n as f64
            );
        }
    }
    out.push_str("</svg>\n");
    out
}
