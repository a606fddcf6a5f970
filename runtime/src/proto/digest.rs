//! Hex, SHA-256 digests and HMAC-SHA256: the names the ledger keeps instead of secrets, the
//! request digest of a stream record, the arguments digest of a receipt, and the MACs of
//! cursors and session names ([`HmacKey`]). Pure.

use serde_json::Value;
use sha2::digest::generic_array::GenericArray;
use sha2::{Digest as _, Sha256};

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

/// SHA-256's block length.
const BLOCK: usize = 64;

/// SHA-256's initial state (FIPS 180-4, 5.3.3).
const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// Run SHA-256's compression over whole `blocks` (a multiple of 64 bytes).
fn compress(state: &mut [u32; 8], blocks: &[u8]) {
    debug_assert_eq!(blocks.len() % BLOCK, 0);
    for b in blocks.chunks_exact(BLOCK) {
        sha2::compress256(state, std::slice::from_ref(GenericArray::from_slice(b)));
    }
}

/// A state's digest bytes.
fn digest_bytes(state: &[u32; 8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// An HMAC-SHA256 key (RFC 2104) kept as SHA-256's states after its padded blocks
/// (`K ^ ipad`, `K ^ opad`), so a MAC starts from them instead of hashing the key again.
///
/// Computed on SHA-256's compression function: a short message's MAC costs its two or three
/// compressions and copies of two 32-byte states, where the `hmac` crate's `Mac` cloned its
/// whole state (both hashes with their block buffers) and ran its generic padding (issue 23:
/// the cursors of every SSE event, the ledger name of every new session). The same bytes as
/// the `hmac` crate's, checked in the tests.
#[derive(Clone, Copy)]
pub(crate) struct HmacKey {
    inner: [u32; 8],
    outer: [u32; 8],
}

impl HmacKey {
    /// The key of `secret`, of any length.
    pub(crate) fn new(secret: &[u8]) -> HmacKey {
        // A key longer than a block is hashed first; a shorter one is padded with zeros.
        let mut k = [0u8; BLOCK];
        if secret.len() > BLOCK {
            k[..32].copy_from_slice(&Sha256::digest(secret));
        } else {
            k[..secret.len()].copy_from_slice(secret);
        }
        let padded = |pad: u8| {
            let mut state = IV;
            compress(&mut state, &k.map(|b| b ^ pad));
            state
        };
        HmacKey { inner: padded(0x36), outer: padded(0x5c) }
    }

    /// The MAC of messages that start with `prefix`, its whole blocks taken in once.
    pub(crate) fn bind(&self, prefix: &[u8]) -> BoundMac {
        let whole = prefix.len() - prefix.len() % BLOCK;
        let mut inner = self.inner;
        compress(&mut inner, &prefix[..whole]);
        let mut tail = [0u8; BLOCK];
        tail[..prefix.len() - whole].copy_from_slice(&prefix[whole..]);
        BoundMac {
            inner,
            outer: self.outer,
            tail,
            tail_len: prefix.len() - whole,
            len: (BLOCK + prefix.len()) as u64,
        }
    }

    /// The MAC of `message`.
    pub(crate) fn mac(&self, message: &[u8]) -> [u8; 32] {
        self.bind(&[]).finish(message)
    }
}

/// HMAC-SHA256 under one key of messages that start with the same bytes: the inner hash's
/// state after the whole blocks of those bytes, the rest of them, and their length.
#[derive(Clone)]
pub(crate) struct BoundMac {
    inner: [u32; 8],
    outer: [u32; 8],
    tail: [u8; BLOCK],
    tail_len: usize,
    /// Bytes the inner hash has taken: the padded key's block and the bound bytes.
    len: u64,
}

impl BoundMac {
    /// The MAC of messages that start with the bound bytes and `more`.
    pub(crate) fn extend(&self, more: &[u8]) -> BoundMac {
        let len = self.len + more.len() as u64;
        let mut inner = self.inner;
        let mut tail = self.tail;
        let mut n = self.tail_len;
        let mut more = more;
        while n + more.len() >= BLOCK {
            let (now, later) = more.split_at(BLOCK - n);
            tail[n..].copy_from_slice(now);
            compress(&mut inner, &tail);
            more = later;
            n = 0;
        }
        tail[n..n + more.len()].copy_from_slice(more);
        BoundMac { inner, outer: self.outer, tail, tail_len: n + more.len(), len }
    }

    /// The MAC of the bound bytes followed by `rest`.
    pub(crate) fn finish(&self, rest: &[u8]) -> [u8; 32] {
        // `rest` taken in as more bound bytes; then what is left, 0x80, zeros and the
        // message's length in bits, in one last block or two.
        let BoundMac { mut inner, outer, tail, tail_len: n, len } = self.extend(rest);
        let mut buf = [0u8; 2 * BLOCK];
        buf[..n].copy_from_slice(&tail[..n]);
        buf[n] = 0x80;
        let end = if n + 9 <= BLOCK { BLOCK } else { 2 * BLOCK };
        buf[end - 8..end].copy_from_slice(&(len * 8).to_be_bytes());
        compress(&mut inner, &buf[..end]);
        // The outer hash: the padded key's block (in its state), then the inner digest.
        let mut block = [0u8; BLOCK];
        block[..32].copy_from_slice(&digest_bytes(&inner));
        block[32] = 0x80;
        block[BLOCK - 8..].copy_from_slice(&(((BLOCK + 32) * 8) as u64).to_be_bytes());
        let mut outer = outer;
        compress(&mut outer, &block);
        digest_bytes(&outer)
    }

    /// Whether `tag` (1 to 32 bytes) is the first bytes of the MAC of the bound bytes and
    /// `rest`, compared in constant time; an empty or longer tag never is.
    pub(crate) fn verifies(&self, rest: &[u8], tag: &[u8]) -> bool {
        use subtle::ConstantTimeEq as _;
        let mac = self.finish(rest);
        // An empty tag proves nothing; one longer than the MAC is not one.
        if tag.is_empty() || tag.len() > mac.len() {
            return false;
        }
        mac[..tag.len()].ct_eq(tag).into()
    }
}

#[cfg(test)]
mod tests {
    use hmac::{Hmac, Mac};
    use proptest::prelude::*;

    use super::*;

    fn reference(secret: &[u8], message: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256>>::new_from_slice(secret).expect("any key length");
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    #[test]
    fn macs_are_the_hmac_crates_at_every_block_boundary() {
        // Prefixes and messages from empty to past two blocks: the padding in one last block
        // or two, whole blocks in the prefix, in the rest, or split between them; keys
        // shorter than, as long as and longer than a block.
        let bytes: Vec<u8> = (0..=255u8).cycle().take(300).collect();
        for secret in [&b""[..], b"k", &[7u8; 64], &[9u8; 65], &[1u8; 200]] {
            let key = HmacKey::new(secret);
            for total in 0..=200 {
                let message = &bytes[..total];
                assert_eq!(key.mac(message), reference(secret, message), "{total}");
                for split in [0, 1, total / 2, total.saturating_sub(20), total] {
                    let (prefix, rest) = message.split_at(split.min(total));
                    let bound = key.bind(prefix);
                    assert_eq!(bound.finish(rest), reference(secret, message), "{total} {split}");
                    // The rest taken in two steps, cut anywhere.
                    for cut in [0, 1, rest.len() / 2, rest.len().saturating_sub(8), rest.len()] {
                        let (more, last) = rest.split_at(cut.min(rest.len()));
                        let extended = bound.extend(more);
                        assert_eq!(
                            extended.finish(last),
                            reference(secret, message),
                            "{total} {split} {cut}"
                        );
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn a_mac_is_the_hmac_crates(
            secret in proptest::collection::vec(any::<u8>(), 0..150),
            prefix in proptest::collection::vec(any::<u8>(), 0..150),
            rest in proptest::collection::vec(any::<u8>(), 0..150),
            cut in 1usize..=32,
        ) {
            let whole: Vec<u8> = prefix.iter().chain(&rest).copied().collect();
            let expected = reference(&secret, &whole);
            let bound = HmacKey::new(&secret).bind(&prefix);
            prop_assert_eq!(bound.finish(&rest), expected);
            let (more, last) = rest.split_at(rest.len() / 3);
            prop_assert_eq!(bound.extend(more).finish(last), expected);
            prop_assert!(bound.verifies(&rest, &expected[..cut]));
            let mut wrong = expected;
            wrong[cut - 1] ^= 1;
            prop_assert!(!bound.verifies(&rest, &wrong[..cut]));
            prop_assert!(!bound.verifies(&rest, &[]), "an empty tag");
            let mut long = expected.to_vec();
            long.push(0);
            prop_assert!(!bound.verifies(&rest, &long), "a tag longer than the MAC");
        }
    }
}
