//! `handle-bench`: how fast the state handle store (SEP-2567) creates, updates and reads
//! handles on the SQLite ledger, through the ledger's own writer (group commit), in both
//! durability modes: operations/s and latency p50/p99, one caller at a time and 64 at once
//! (each on a handle of its own). Each case uses a fresh ledger in a temporary directory
//! (removed after), for `--seconds` (default 3).
//!
//! Usage: handle-bench [--seconds 3] [--json-out FILE]
// A benchmark measures wall time.
#![allow(clippy::disallowed_types)]

use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mcp_runtime::config::RuntimeConfig;
use mcp_runtime::ledger::{Durability, Ledger};
use mcp_runtime::proto::handle::HandleKind;
use mcp_runtime::stores::handles::Handles;
use serde_json::{Value, json};

const CONCURRENT: usize = 64;

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Create,
    Update,
    Read,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Update => "update (add an item)",
            Op::Read => "read",
        }
    }
}

/// Run `op` from `callers` concurrent tasks for `seconds`: (operations/s, latencies).
async fn run(
    store: Rc<Handles>,
    kind: Rc<HandleKind>,
    op: Op,
    callers: usize,
    seconds: u64,
) -> (f64, Histogram<u64>) {
    // Each caller owns one handle (made before the clock starts) and its own principal, so the
    // per-caller bound is never the limit.
    let mut handles = Vec::new();
    for c in 0..callers {
        handles.push(
            store
                .create(&kind, Some(&format!("p{c}")), None, json!({"items": []}))
                .await
                .expect("create"),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = handles
        .into_iter()
        .enumerate()
        .map(|(c, h)| {
            let (store, kind) = (Rc::clone(&store), Rc::clone(&kind));
            tokio::task::spawn_local(async move {
                let principal = format!("p{c}");
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    match op {
                        Op::Create => {
                            let h = store
                                .create(&kind, Some(&principal), None, json!({"items": []}))
                                .await
                                .expect("create");
                            // Keep under the per-caller bound: the next create has room.
                            store.destroy(&kind, Some(&principal), &h).await.expect("destroy");
                        }
                        Op::Update => {
                            store
                                .update(&kind, Some(&principal), &h, |v| {
                                    let items = v["items"].as_array_mut().ok_or("not a list")?;
                                    items.push(json!(n % 16));
                                    items.truncate(16);
                                    Ok::<_, String>(())
                                })
                                .await
                                .expect("update");
                        }
                        Op::Read => {
                            store.get(&kind, Some(&principal), &h).await.expect("read");
                        }
                    }
                    let _ = hist.record(t0.elapsed().as_micros().max(1) as u64);
                    n += 1;
                }
                (n, hist)
            })
        })
        .collect();
    let mut total = 0u64;
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    for t in tasks {
        let (n, h) = t.await.expect("a bench task");
        total += n;
        all.add(&h).expect("same bounds");
    }
    (total as f64 / started.elapsed().as_secs_f64(), all)
}

fn main() {
    let mut seconds = 3u64;
    let mut json_out = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => seconds = val().parse().expect("number"),
            "--json-out" => json_out = Some(val()),
            other => panic!("unknown flag {other}"),
        }
    }
    println!(
        "state handles on the SQLite ledger, {seconds} s per case (create: create + destroy, as a basket's life)"
    );
    println!("| durability | operation | callers | ops/s | p50 µs | p99 µs |");
    println!("|---|---|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for (dname, durability) in [("batched", Durability::Batched), ("sync", Durability::Sync)] {
        for op in [Op::Create, Op::Update, Op::Read] {
            for callers in [1, CONCURRENT] {
                let dir = mcp_devtools::TempDir::new("handle-bench");
                let mut cfg = RuntimeConfig::default();
                cfg.ledger.path = dir.path().join("bench.db").display().to_string();
                cfg.ledger.durability = durability;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                let local = tokio::task::LocalSet::new();
                let (rate, hist) = local.block_on(&rt, async {
                    let ledger = Ledger::open(&cfg).expect("open the ledger");
                    let store = Rc::new(Handles::new(&ledger));
                    let kind = Rc::new(HandleKind::new(
                        "bsk",
                        "basket",
                        "create_basket",
                        3600,
                        64 * 1024,
                        100,
                    ));
                    let r = run(store, kind, op, callers, seconds).await;
                    drop(ledger);
                    r
                });
                let (p50, p99) = (hist.value_at_quantile(0.5), hist.value_at_quantile(0.99));
                println!("| {dname} | {} | {callers} | {rate:.0} | {p50} | {p99} |", op.name());
                rows.push(json!({"durability": dname, "operation": op.name(), "callers": callers, "ops_per_s": rate.round(), "p50_us": p50, "p99_us": p99}));
            }
        }
    }
    if let Some(path) = json_out {
        let report: Value = json!({"seconds": seconds, "rows": rows});
        std::fs::write(&path, serde_json::to_vec_pretty(&report).expect("json"))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}
