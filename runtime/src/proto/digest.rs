//! Hex and SHA-256 digests: the names the ledger keeps instead of secrets, the request digest
//! of a stream record and the arguments digest of a receipt. Pure.

use serde_json::Value;

/// Lower-case hex.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let [hi, lo] = hex_digits(*b);
        s.push(char::from(hi));
        s.push(char::from(lo));
    }
    s
}

/// The two lowercase hex digits of a byte.
#[must_use]
pub(crate) fn hex_digits(b: u8) -> [u8; 2] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]
}

/// SHA-256 of a name and a JSON value (length-prefixed name, then the value serialized
/// straight into the hash, no buffer; serde_json's map is ordered, so objects are canonical),
/// hex: the request digest of a stream record and the arguments digest of a receipt.
#[must_use]
pub fn digest(name: &str, value: Option<&Value>) -> String {
    use sha2::{Digest as _, Sha256};
    struct Hashing(Sha256);
    impl std::io::Write for Hashing {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.update(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut h = Hashing(Sha256::new());
    h.0.update((name.len() as u32).to_be_bytes());
    h.0.update(name.as_bytes());
    if let Some(v) = value {
        // Writing a Value into a sink that never fails cannot fail.
        let _ = serde_json::to_writer(&mut h, v);
    }
    hex(&h.0.finalize())
}
