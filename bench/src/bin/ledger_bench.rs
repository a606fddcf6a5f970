//! `ledger-bench`: how fast the SQLite ledger commits event appends, at batch sizes 1, 16 and
//! 256 (events per transaction), in both durability modes: events/s and the commit latency
//! (one `Store::apply` call) p50/p99. One thread, so pin it to one core
//! (`taskset -c 1 target/release/ledger-bench`). Each case writes to a fresh file in a
//! temporary directory (removed after), for `--seconds` (default 3) or 5 million events.
//!
//! Usage: ledger-bench [--seconds 3] [--frame-bytes 200] [--json-out FILE]
// A benchmark measures wall time.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use mcp_runtime::ledger::{Durability, Op, SqliteStore, Store};
use serde_json::json;

const LOGS: u64 = 64;
const MAX_EVENTS: u64 = 5_000_000;

fn main() {
    let mut seconds = 3u64;
    let mut frame_bytes = 200usize;
    let mut json_out = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => seconds = val().parse().expect("number"),
            "--frame-bytes" => frame_bytes = val().parse().expect("number"),
            "--json-out" => json_out = Some(val()),
            other => panic!("unknown flag {other}"),
        }
    }
    let frame =
        Bytes::from(format!("id: 1\ndata: {}\n\n", "x".repeat(frame_bytes.saturating_sub(16))));
    let logs: Vec<Arc<str>> = (0..LOGS).map(|i| Arc::from(format!("e/bench/{i}"))).collect();
    println!(
        "SQLite ledger, {} B frames over {LOGS} logs, {seconds} s per case, one thread",
        frame.len()
    );
    println!("| durability | batch | events/s | commits/s | commit p50 µs | commit p99 µs |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for (name, durability) in [("batched", Durability::Batched), ("sync", Durability::Sync)] {
        for batch in [1u64, 16, 256] {
            let dir = mcp_devtools::TempDir::new("ledger-bench");
            let store = SqliteStore::open(&dir.path().join("bench.db")).expect("open");
            store.set_durability(durability);
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let mut seq = vec![0u64; LOGS as usize];
            let mut events = 0u64;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(seconds) && events < MAX_EVENTS {
                let ops: Vec<Op> = (0..batch)
                    .map(|i| {
                        let l = ((events + i) % LOGS) as usize;
                        seq[l] += 1;
                        Op::Append {
                            log: Arc::clone(&logs[l]),
                            seq: seq[l],
                            frame: frame.clone(),
                            max_len: 256,
                            expires_ms: u64::MAX,
                        }
                    })
                    .collect();
                let t0 = Instant::now();
                store.apply(&ops).expect("commit");
                let _ = hist.record(t0.elapsed().as_micros().max(1) as u64);
                events += batch;
            }
            let secs = started.elapsed().as_secs_f64();
            let (p50, p99) = (hist.value_at_quantile(0.5), hist.value_at_quantile(0.99));
            println!(
                "| {name} | {batch} | {:.0} | {:.0} | {p50} | {p99} |",
                events as f64 / secs,
                hist.len() as f64 / secs
            );
            rows.push(json!({"durability": name, "batch": batch, "events": events, "seconds": secs, "events_per_s": events as f64 / secs,
                "commits_per_s": hist.len() as f64 / secs, "commit_p50_us": p50, "commit_p99_us": p99}));
        }
    }
    if let Some(path) = json_out {
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(
                &json!({"frame_bytes": frame.len(), "seconds": seconds, "results": rows}),
            )
            .expect("json"),
        )
        .expect("write");
    }
}
