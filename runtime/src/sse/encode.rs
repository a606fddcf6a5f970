use bytes::{BufMut, Bytes, BytesMut};

/// A comment line sent on idle streams so intermediaries keep them open. Clients ignore it.
pub const COMMENT_KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// `id: <cursor>\ndata: <json>\n\n`. `json` must not contain a line break (compact JSON never
/// does: serde escapes them inside strings).
#[must_use]
pub fn event_frame(cursor: &[u8], json: &[u8]) -> Bytes {
    debug_assert!(!json.contains(&b'\n') && !json.contains(&b'\r'));
    let mut b = BytesMut::with_capacity(cursor.len() + json.len() + 12);
    b.put_slice(b"id: ");
    b.put_slice(cursor);
    b.put_slice(b"\ndata: ");
    b.put_slice(json);
    b.put_slice(b"\n\n");
    b.freeze()
}

/// `data: <json>\n\n`: an event without an id (not resumable).
#[must_use]
pub fn data_frame(json: &[u8]) -> Bytes {
    debug_assert!(!json.contains(&b'\n') && !json.contains(&b'\r'));
    let mut b = BytesMut::with_capacity(json.len() + 8);
    b.put_slice(b"data: ");
    b.put_slice(json);
    b.put_slice(b"\n\n");
    b.freeze()
}

/// The SEP-1699 priming event: an id, an optional `retry`, and empty data, which clients
/// record as their cursor and do not dispatch.
#[must_use]
pub fn priming_frame(cursor: &[u8], retry_ms: Option<u64>) -> Bytes {
    let mut b = BytesMut::with_capacity(cursor.len() + 40);
    b.put_slice(b"id: ");
    b.put_slice(cursor);
    b.put_slice(b"\n");
    if let Some(ms) = retry_ms {
        b.put_slice(format!("retry: {ms}\n").as_bytes());
    }
    b.put_slice(b"data: \n\n");
    b.freeze()
}

/// A `retry` field alone, sent before a server-initiated close.
#[must_use]
pub fn retry_frame(retry_ms: u64) -> Bytes {
    Bytes::from(format!("retry: {retry_ms}\n\n"))
}
