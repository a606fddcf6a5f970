//! Replay window against an unbounded model: every answer is either the model's exact suffix
//! or an explicit gap/ahead error, and the bounds always hold.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mcp_runtime::proto::ids::Seq;
use mcp_runtime::proto::replay::{ReplayError, ReplayWindow, WindowLimits};

#[derive(Arbitrary, Debug)]
enum Op {
    Push(u8),
    Replay(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    max_events: u8,
    max_bytes: u16,
    ops: Vec<Op>,
}

fuzz_target!(|i: Input| {
    let limits = WindowLimits {
        max_events: usize::from(i.max_events).max(1),
        max_bytes: usize::from(i.max_bytes),
    };
    let mut w = ReplayWindow::new(limits);
    let mut model: Vec<Bytes> = Vec::new();
    for op in i.ops {
        match op {
            Op::Push(len) => {
                let f = Bytes::from(vec![model.len() as u8; usize::from(len) + 1]);
                model.push(f.clone());
                w.push(f);
                let (n, b) = w.len();
                assert!(n >= 1 && n <= limits.max_events);
                assert!(b <= limits.max_bytes || n == 1);
            }
            Op::Replay(c) => {
                let c = u64::from(c);
                match w.replay_after(Seq(c)) {
                    Ok(it) => {
                        let got: Vec<Bytes> = it.cloned().collect();
                        assert_eq!(got, model[c as usize..].to_vec());
                    }
                    Err(ReplayError::Gap(g)) => assert!(c + 1 < g.oldest.0),
                    Err(ReplayError::Ahead { .. }) => assert!(c > model.len() as u64),
                }
            }
        }
    }
});
