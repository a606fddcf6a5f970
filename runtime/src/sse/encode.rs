use bytes::Bytes;

/// A comment line sent on idle streams so intermediaries keep them open. Clients ignore it.
pub const COMMENT_KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// A frame of `parts`, in one allocation of its exact length (so the `Bytes` it becomes
/// keeps the allocation as it is; a `BytesMut` with room to spare, frozen, allocated a
/// second block to share it).
fn frame(parts: &[&[u8]]) -> Bytes {
    let mut v = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        v.extend_from_slice(p);
    }
    debug_assert_eq!(v.len(), v.capacity());
    Bytes::from(v)
}

/// `id: <cursor>\ndata: <json>\n\n`. `json` must not contain a line break (compact JSON never
/// does: serde escapes them inside strings).
#[must_use]
pub fn event_frame(cursor: &[u8], json: &[u8]) -> Bytes {
    debug_assert!(!json.contains(&b'\n') && !json.contains(&b'\r'));
    frame(&[b"id: ", cursor, b"\ndata: ", json, b"\n\n"])
}

/// `data: <json>\n\n`: an event without an id (not resumable).
#[must_use]
pub fn data_frame(json: &[u8]) -> Bytes {
    debug_assert!(!json.contains(&b'\n') && !json.contains(&b'\r'));
    frame(&[b"data: ", json, b"\n\n"])
}

/// The SEP-1699 priming event: an id, an optional `retry`, and empty data, which clients
/// record as their cursor and do not dispatch.
#[must_use]
pub fn priming_frame(cursor: &[u8], retry_ms: Option<u64>) -> Bytes {
    match retry_ms {
        Some(ms) => {
            use std::io::Write as _;
            let mut digits = [0u8; 20];
            let mut w = &mut digits[..];
            write!(w, "{ms}").expect("a u64 has at most 20 digits");
            let n = 20 - w.len();
            frame(&[b"id: ", cursor, b"\nretry: ", &digits[..n], b"\ndata: \n\n"])
        }
        None => frame(&[b"id: ", cursor, b"\ndata: \n\n"]),
    }
}

/// A `retry` field alone, sent before a server-initiated close.
#[must_use]
pub fn retry_frame(retry_ms: u64) -> Bytes {
    Bytes::from(format!("retry: {retry_ms}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_written_whole_in_an_allocation_of_their_length() {
        let cursor = [b'c'; 43];
        let e = event_frame(&cursor, br#"{"a":1}"#);
        assert_eq!(&e[..], format!("id: {}\ndata: {{\"a\":1}}\n\n", "c".repeat(43)).as_bytes());
        assert_eq!(&data_frame(b"[]")[..], b"data: []\n\n");
        assert_eq!(&priming_frame(b"x", None)[..], b"id: x\ndata: \n\n");
        assert_eq!(&priming_frame(b"x", Some(1000))[..], b"id: x\nretry: 1000\ndata: \n\n");
        assert_eq!(&priming_frame(b"x", Some(0))[..], b"id: x\nretry: 0\ndata: \n\n");
        let max = priming_frame(b"x", Some(u64::MAX));
        assert_eq!(&max[..], format!("id: x\nretry: {}\ndata: \n\n", u64::MAX).as_bytes());
        // Its own allocation, exactly its length (a frozen `BytesMut` with room left, or
        // one that grew, keeps a larger one).
        for f in [e, priming_frame(&cursor, Some(1000))] {
            let m = f.try_into_mut().expect("not shared");
            assert_eq!(m.capacity(), m.len());
        }
    }
}
