//! JSON-RPC parser: arbitrary bytes never panic; parsed requests re-encode to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_runtime::proto::jsonrpc::{Incoming, Message, encode_request, parse_body};

fuzz_target!(|data: &[u8]| {
    // The 2026-07-28 `_meta` keys are read apart from `params`: what re-encodes is the rest.
    if let Ok(Incoming::Single(Message::Request { id, method, params, .. })) = parse_body(data) {
        let again = encode_request(&id, &method, params.as_ref());
        match parse_body(&again) {
            Ok(Incoming::Single(Message::Request { id: id2, method: m2, params: p2, .. })) => {
                assert_eq!((id, method, params), (id2, m2, p2));
            }
            other => panic!("re-encoded request did not parse back: {other:?}"),
        }
    }
});
