//! The report: the text table and the SVG chart.

use std::fmt::Write as _;

use serde_json::Value;

/// The report as terminal tables.
pub(crate) fn render(r: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| phase | events | sessions | streams | calls ok | calls/s | p50 µs | p99 µs | resumes | resume p50/p99/max ms | same, without waits | lost | cross | dup |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|");
    for p in r["phases"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {}/{}/{} | {}/{}/{} | {} | {} | {} |",
            p["name"].as_str().unwrap_or_default(),
            p["events"],
            p["sessions"],
            p["streams"],
            p["calls_ok"],
            p["calls_per_s"].as_f64().unwrap_or(0.0),
            p["latency_us"]["p50"],
            p["latency_us"]["p99"],
            p["resumes"],
            p["resume_ms"]["p50"],
            p["resume_ms"]["p99"],
            p["resume_ms"]["max"],
            p["resume_without_wait_ms"]["p50"],
            p["resume_without_wait_ms"]["p99"],
            p["resume_without_wait_ms"]["max"],
            p["lost_responses"],
            p["cross_stream_acceptances"],
            p["duplicate_dispatches"],
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "| gate | value | threshold | result |");
    let _ = writeln!(out, "|---|---|---|---|");
    for g in r["gates"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            g["gate"].as_str().unwrap_or_default(),
            g["value"].as_str().unwrap_or_default(),
            g["threshold"].as_str().unwrap_or_default(),
            match (g["skipped"] == true, g["pass"] == true) {
                (true, _) => "skipped",
                (false, true) => "pass",
                (false, false) => "FAIL",
            }
        );
    }
    let _ = writeln!(
        out,
        "\n{} events, {} sessions, {} streams, {} calls ok ({:.0}/s) in {:.1} s; latency µs p50 {} p90 {} p99 {} max {}; gate {}",
        r["events"],
        r["sessions"],
        r["streams"],
        r["calls_ok"],
        r["calls_per_s"].as_f64().unwrap_or(0.0),
        r["seconds"].as_f64().unwrap_or(0.0),
        r["latency_us"]["p50"],
        r["latency_us"]["p90"],
        r["latency_us"]["p99"],
        r["latency_us"]["max"],
        if r["pass"] == true { "PASSED" } else { "FAILED" }
    );
    for p in r["phases"].as_array().into_iter().flatten() {
        for e in p["error_samples"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  {}: {}",
                p["name"].as_str().unwrap_or_default(),
                e.as_str().unwrap_or_default()
            );
        }
    }
    out
}

/// An SVG chart: call latency and resume latency by percentile, one line per phase.
pub(crate) fn svg(r: &Value) -> String {
    const W: f64 = 900.0;
    const H: f64 = 300.0;
    const COLORS: [&str; 7] =
        ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"];
    let panels = [("Call latency (µs)", "latency_us"), ("Resume latency (ms)", "resume_ms")];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        H * 2.0 + 40.0
    );
    let phases: Vec<&Value> =
        r["phases"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    for (pi, (title, key)) in panels.iter().enumerate() {
        let top = pi as f64 * (H + 20.0) + 20.0;
        let _ = writeln!(
            out,
            "<text x=\"60\" y=\"{}\" font-size=\"13\">{title}: p50, p90, p99, max per phase (log scale)</text>",
            top - 5.0
        );
        let max =
            phases.iter().filter_map(|p| p[key]["max"].as_u64()).max().unwrap_or(1).max(10) as f64;
        let y = |v: f64| top + H - 20.0 - (v.max(1.0).log10() / max.log10()) * (H - 40.0);
        let stats = ["p50", "p90", "p99", "max"];
        let x = |i: usize| 80.0 + i as f64 * (W - 260.0) / (stats.len() - 1) as f64;
        for (i, s) in stats.iter().enumerate() {
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{s}</text>",
                x(i),
                top + H - 5.0
            );
        }
        for d in 0..=(max.log10().ceil() as u32) {
            let v = 10f64.powi(d as i32);
            let _ = writeln!(
                out,
                "<line x1=\"70\" x2=\"{}\" y1=\"{1}\" y2=\"{1}\" stroke=\"#ddd\"/><text x=\"65\" y=\"{1}\" text-anchor=\"end\">{v}</text>",
                W - 170.0,
                y(v)
            );
        }
        for (n, p) in phases.iter().enumerate() {
            if p[key]["count"].as_u64().unwrap_or(0) == 0 {
                continue;
            }
            let color = COLORS[n % COLORS.len()];
            let dash = if n >= COLORS.len() { " stroke-dasharray=\"5,3\"" } else { "" };
            let points: Vec<String> = stats
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{:.1},{:.1}", x(i), y(p[key][*s].as_f64().unwrap_or(1.0))))
                .collect();
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{color}\"{dash} stroke-width=\"1.5\" points=\"{}\"/>",
                points.join(" ")
            );
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{}</text>",
                W - 160.0,
                top + 12.0 * n as f64 + 10.0,
                p["name"].as_str().unwrap_or_default()
            );
        }
    }
    out.push_str("</svg>\n");
    out
}
