//! Criterion micro-benchmarks of the per-event and per-request hot paths.
//! Run: `cargo bench -p mcp-bench --bench hot_paths`.

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use mcp_runtime::client::accept::{Acceptor, Binding, IncomingEvent};
use mcp_runtime::client::journal::{Journal, MemoryJournal};
use mcp_runtime::proto::admission::{AdmitPolicy, HttpMethod, RequestHead, admit};
use mcp_runtime::proto::event_id::{CursorKey, EventId};
use mcp_runtime::proto::ids::{Generation, JsonRpcId, Seq, StreamId};
use mcp_runtime::proto::replay::{ReplayWindow, WindowLimits};
use mcp_runtime::proto::version::ProtocolVersion;
use mcp_runtime::sse::{Decoder, event_frame};

const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello world"}}}"#;
const RESULT: &[u8] =
    br#"{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"hello world"}]}}"#;

fn event_id(c: &mut Criterion) {
    let signer =
        CursorKey::new(&[7u8; 32]).signer("1.abcdefghijklmnopqrstuvwxyz012345", Some("alice"));
    let id = EventId { generation: Generation(1), stream: StreamId(9), seq: Seq(1234) };
    let cursor = signer.encode(&id);
    c.bench_function("event_id/encode", |b| b.iter(|| signer.encode_array(black_box(&id))));
    c.bench_function("event_id/verify", |b| b.iter(|| signer.decode(black_box(&cursor)).unwrap()));
}

fn replay(c: &mut Criterion) {
    let frame = event_frame(&[b'a'; 43], RESULT);
    c.bench_function("replay/append (full window, evicting)", |b| {
        let mut w = ReplayWindow::new(WindowLimits { max_events: 1024, max_bytes: 1 << 20 });
        for _ in 0..1024 {
            w.push(frame.clone());
        }
        b.iter(|| w.push(black_box(frame.clone())));
    });
    let mut w = ReplayWindow::new(WindowLimits { max_events: 1024, max_bytes: 1 << 20 });
    for _ in 0..1024 {
        w.push(frame.clone());
    }
    let after = Seq(w.newest().0 - 64);
    c.bench_function("replay/replay 64 of 1024", |b| {
        b.iter(|| w.replay_after(black_box(after)).unwrap().cloned().collect::<Vec<Bytes>>())
    });
}

fn sse(c: &mut Criterion) {
    let cursor = [b'a'; 43];
    c.bench_function("sse/encode event", |b| {
        b.iter(|| event_frame(black_box(&cursor), black_box(RESULT)))
    });
    let frame = event_frame(&cursor, RESULT);
    c.bench_function("sse/decode event", |b| {
        b.iter(|| {
            let mut d = Decoder::new();
            d.feed(black_box(&frame))
        })
    });
}

fn admission(c: &mut Criterion) {
    let policy = AdmitPolicy::default();
    let head = RequestHead {
        accept: Some("application/json, text/event-stream"),
        content_type: Some("application/json"),
        session_id: Some("1.abcdefghijklmnopqrstuvwxyz012345"),
        protocol_version: Some("2025-11-25"),
        host: Some("127.0.0.1:8080"),
        ..RequestHead::new(HttpMethod::Post)
    };
    c.bench_function("admit/tools-call POST", |b| {
        b.iter(|| admit(black_box(&head), black_box(CALL), &policy).unwrap())
    });
}

fn accept(c: &mut Criterion) {
    let binding = Binding {
        session_generation: 1,
        session_id: Arc::from("s"),
        protocol_version: ProtocolVersion::V2025_11_25,
        principal: None,
    };
    let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":5}}"#;
    c.bench_function("accept_stream_event/notification", |b| {
        let mut a = Acceptor::new(binding.clone(), MemoryJournal::new(4096));
        let s = a.open_post_stream(&[JsonRpcId::Number(1)]).unwrap();
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            let id = n.to_string();
            let r = a.accept_stream_event(IncomingEvent {
                stream: &s,
                binding: &binding,
                id: Some(&id),
                data: note,
            });
            if n.is_multiple_of(1024) {
                let last = a.journal_mut().pending().last().map_or(0, |d| d.seq);
                a.journal_mut().ack(last);
            }
            r
        })
    });
}

criterion_group!(benches, event_id, replay, sse, admission, accept);
criterion_main!(benches);
