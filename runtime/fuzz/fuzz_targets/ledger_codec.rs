//! Ledger record codec: decoding arbitrary bytes never panics, and whatever decodes encodes
//! back to a record that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_runtime::ledger::codec::{decode, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = decode(data) {
        assert_eq!(decode(&encode(&record)), Ok(record));
    }
});
