//! Cursor codec: decoding arbitrary input never panics and never accepts a cursor minted for
//! another session; encoding round-trips.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mcp_runtime::proto::event_id::{CursorKey, EventId};
use mcp_runtime::proto::ids::{Generation, Seq, StreamId};

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    raw: &'a str,
    generation: u32,
    stream: u64,
    seq: u64,
    session: &'a str,
}

fuzz_target!(|i: Input<'_>| {
    let key = CursorKey::new(b"fuzz key fuzz key fuzz key 12345");
    let mine = key.signer(i.session, None);
    let _ = mine.decode(i.raw);
    let id = EventId {
        generation: Generation(i.generation),
        stream: StreamId(i.stream),
        seq: Seq(i.seq),
    };
    let c = mine.encode(&id);
    assert_eq!(mine.decode(&c), Ok(id));
    let other = key.signer(&format!("{}x", i.session), None);
    assert!(other.decode(&c).is_err());
});
