//! Event-id (cursor) codec: the one place where `Last-Event-ID` values are made and read.
//!
//! Layout before encoding (32 bytes): `generation u32 BE | stream u64 BE | seq u64 BE |
//! tag[12]`, where `tag` is HMAC-SHA256 truncated to 96 bits over
//! `len(session) | session | len(principal) | principal | payload`. The whole is base64url
//! without padding (43 visible-ASCII characters).
//!
//! A cursor minted for another session, caller or stream fails verification without any
//! store lookup; the tag is checked in constant time.
//!
//! The HMAC is computed from states kept after the parts that never change (the key's two
//! padded blocks, a session's binding: [`HmacKey`], [`BoundMac`]): a tag costs two or three
//! compressions, where the `hmac` crate's `Mac` cloned its whole state and ran its generic
//! padding for every cursor (issue 23: a legacy echo mints two). The same tag bytes.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::digest::{BoundMac, HmacKey};
use super::ids::{Generation, Seq, SessionId, StreamId};

const PAYLOAD_LEN: usize = 20;
const TAG_LEN: usize = 12;
const RAW_LEN: usize = PAYLOAD_LEN + TAG_LEN;
/// Length of an encoded cursor in characters.
pub const ENCODED_LEN: usize = 43;

/// The decoded content of a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId {
    /// Generation of the session that minted it.
    pub generation: Generation,
    /// The stream the event belongs to.
    pub stream: StreamId,
    /// The event's position in its stream.
    pub seq: Seq,
}

/// Why a cursor was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    /// Not a cursor this server could have minted (length, alphabet).
    #[error("malformed cursor")]
    Malformed,
    /// Well-formed, but minted for another session or caller, or altered.
    #[error("cursor was not issued to this session and caller")]
    Forged,
}

/// A server-wide secret for cursor tags, and the secrets it replaced (whose cursors are
/// still accepted: key rotation).
#[derive(Clone)]
pub struct CursorKey {
    current: HmacKey,
    previous: Vec<HmacKey>,
}

impl CursorKey {
    /// Build from secret bytes (at least 32 recommended).
    #[must_use]
    pub fn new(secret: &[u8]) -> CursorKey {
        CursorKey::rotated(secret, &[])
    }

    /// Build from the current secret and earlier ones: cursors are minted with the current
    /// one and accepted from any.
    #[must_use]
    pub fn rotated(secret: &[u8], previous: &[&[u8]]) -> CursorKey {
        // HMAC takes keys of any length.
        CursorKey {
            current: HmacKey::new(secret),
            previous: previous.iter().map(|s| HmacKey::new(s)).collect(),
        }
    }

    /// Derive the signer for one session and caller: the same for the same arguments (a
    /// session derives it as it is made, and again as it wakes from hibernation: both through
    /// [`CursorKey::session_signer`]).
    #[must_use]
    pub fn signer(&self, session: &str, principal: Option<&str>) -> CursorSigner {
        let principal = principal.unwrap_or("");
        let mut bound = Vec::with_capacity(8 + session.len() + principal.len());
        bound.extend_from_slice(&(session.len() as u32).to_be_bytes());
        bound.extend_from_slice(session.as_bytes());
        bound.extend_from_slice(&(principal.len() as u32).to_be_bytes());
        bound.extend_from_slice(principal.as_bytes());
        CursorSigner {
            mac: self.current.bind(&bound),
            previous: self.previous.iter().map(|k| k.bind(&bound)).collect(),
        }
    }

    /// [`CursorKey::signer`] of the session `id` and its caller's `principal`, as a session
    /// holds it (shared with its handle).
    #[must_use]
    pub fn session_signer(&self, id: &SessionId, principal: Option<&str>) -> Arc<CursorSigner> {
        Arc::new(self.signer(id.as_str(), principal))
    }
}

/// A cursor's text from its payload and MAC.
fn encoded(payload: &[u8; PAYLOAD_LEN], mac: &[u8; 32]) -> [u8; ENCODED_LEN] {
    let mut raw = [0u8; RAW_LEN];
    raw[..PAYLOAD_LEN].copy_from_slice(payload);
    raw[PAYLOAD_LEN..].copy_from_slice(&mac[..TAG_LEN]);
    let mut out = [0u8; ENCODED_LEN];
    let n = URL_SAFE_NO_PAD
        .encode_slice(raw, &mut out)
        .expect("32 bytes always encode to 43 characters");
    debug_assert_eq!(n, ENCODED_LEN);
    out
}

/// The payload's part that names the stream: its generation and its id.
const STREAM_PART: usize = 12;

/// Mints the cursors of one stream ([`CursorSigner::stream`]).
pub(crate) struct StreamCursors {
    mac: BoundMac,
    prefix: [u8; STREAM_PART],
}

impl StreamCursors {
    /// The cursor of event `seq`, as [`CursorSigner::encode_array`] encodes it.
    #[must_use]
    pub(crate) fn encode_array(&self, seq: Seq) -> [u8; ENCODED_LEN] {
        let seq = seq.0.to_be_bytes();
        let mut payload = [0u8; PAYLOAD_LEN];
        payload[..STREAM_PART].copy_from_slice(&self.prefix);
        payload[STREAM_PART..].copy_from_slice(&seq);
        encoded(&payload, &self.mac.finish(&seq))
    }
}

/// Mints and verifies cursors for one (session, caller). Cheap to clone.
#[derive(Clone)]
pub struct CursorSigner {
    mac: BoundMac,
    /// The same binding under earlier secrets (verification only).
    previous: Vec<BoundMac>,
}

impl std::fmt::Debug for CursorSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorSigner(..)")
    }
}

impl CursorSigner {
    fn payload(id: &EventId) -> [u8; PAYLOAD_LEN] {
        let mut p = [0u8; PAYLOAD_LEN];
        p[..4].copy_from_slice(&id.generation.0.to_be_bytes());
        p[4..12].copy_from_slice(&id.stream.0.to_be_bytes());
        p[12..].copy_from_slice(&id.seq.0.to_be_bytes());
        p
    }

    /// Encode `id` into a fixed-size ASCII array (no allocation).
    #[must_use]
    pub fn encode_array(&self, id: &EventId) -> [u8; ENCODED_LEN] {
        let payload = Self::payload(id);
        encoded(&payload, &self.mac.finish(&payload))
    }

    /// What mints the cursors of one stream (`generation`, `stream`): the same cursors as
    /// [`CursorSigner::encode_array`], with the MAC's state after the stream's part of the
    /// payload kept, so each costs a compression less when the session's binding leaves that
    /// part across a block's end (a session id of the usual length: the priming event and the
    /// answer of a reply then take five compressions instead of six).
    #[must_use]
    pub(crate) fn stream(&self, generation: Generation, stream: StreamId) -> StreamCursors {
        let mut prefix = [0u8; STREAM_PART];
        prefix[..4].copy_from_slice(&generation.0.to_be_bytes());
        prefix[4..].copy_from_slice(&stream.0.to_be_bytes());
        StreamCursors { mac: self.mac.extend(&prefix), prefix }
    }

    /// Encode `id` as a string.
    #[must_use]
    pub fn encode(&self, id: &EventId) -> String {
        String::from_utf8(self.encode_array(id).to_vec()).expect("base64url is ASCII")
    }

    /// Decode and verify a cursor presented by this session's caller.
    ///
    /// # Errors
    /// [`CursorError::Malformed`] when it cannot be one of ours; [`CursorError::Forged`] when
    /// the tag does not match this session and caller.
    pub fn decode(&self, cursor: &str) -> Result<EventId, CursorError> {
        if cursor.len() != ENCODED_LEN {
            return Err(CursorError::Malformed);
        }
        let mut raw = [0u8; RAW_LEN + 2];
        let n = URL_SAFE_NO_PAD
            .decode_slice(cursor.as_bytes(), &mut raw)
            .map_err(|_| CursorError::Malformed)?;
        if n != RAW_LEN {
            return Err(CursorError::Malformed);
        }
        let payload: &[u8; PAYLOAD_LEN] = raw[..PAYLOAD_LEN].try_into().expect("the payload");
        let tag: &[u8; TAG_LEN] = raw[PAYLOAD_LEN..RAW_LEN].try_into().expect("the tag");
        let verifies = |mac: &BoundMac| mac.verifies(payload, tag);
        if !verifies(&self.mac) && !self.previous.iter().any(verifies) {
            return Err(CursorError::Forged);
        }
        let u32_at = |i: usize| u32::from_be_bytes(raw[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_be_bytes(raw[i..i + 8].try_into().expect("8 bytes"));
        Ok(EventId {
            generation: Generation(u32_at(0)),
            stream: StreamId(u64_at(4)),
            seq: Seq(u64_at(12)),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn key() -> CursorKey {
        CursorKey::new(b"test key test key test key 12345")
    }

    fn id(stream: u64, seq: u64) -> EventId {
        EventId { generation: Generation(3), stream: StreamId(stream), seq: Seq(seq) }
    }

    #[test]
    fn cursors_of_a_previous_key_are_accepted_and_new_ones_use_the_current_key() {
        let old = CursorKey::new(b"old key old key old key old key!");
        let new = CursorKey::new(b"new key new key new key new key!");
        let rotated = CursorKey::rotated(
            b"new key new key new key new key!",
            &[b"old key old key old key old key!"],
        );
        let before = old.signer("s", None).encode(&id(1, 2));
        assert_eq!(
            rotated.signer("s", None).decode(&before),
            Ok(id(1, 2)),
            "an old cursor still resumes"
        );
        assert_eq!(
            new.signer("s", None).decode(&before),
            Err(CursorError::Forged),
            "without the previous key it is refused"
        );
        assert_eq!(
            rotated.signer("other", None).decode(&before),
            Err(CursorError::Forged),
            "still bound to its session"
        );
        let minted = rotated.signer("s", None).encode(&id(1, 3));
        assert_eq!(
            new.signer("s", None).decode(&minted),
            Ok(id(1, 3)),
            "minted with the current key"
        );
    }

    #[test]
    fn cursor_from_another_session_is_forged() {
        let a = key().signer("session-a", None);
        let b = key().signer("session-b", None);
        let c = a.encode(&id(1, 2));
        assert_eq!(b.decode(&c), Err(CursorError::Forged));
        assert_eq!(a.decode(&c), Ok(id(1, 2)));
    }

    #[test]
    fn cursor_from_another_caller_is_forged() {
        let alice = key().signer("s", Some("alice"));
        let bob = key().signer("s", Some("bob"));
        assert_eq!(bob.decode(&alice.encode(&id(1, 1))), Err(CursorError::Forged));
    }

    #[test]
    fn session_and_principal_framing_is_unambiguous() {
        // "ab" + "c" must not collide with "a" + "bc".
        let x = key().signer("ab", Some("c"));
        let y = key().signer("a", Some("bc"));
        assert_eq!(y.decode(&x.encode(&id(1, 1))), Err(CursorError::Forged));
    }

    #[test]
    fn malformed_cursors_are_rejected() {
        let s = key().signer("s", None);
        for bad in ["", "0", "not a cursor", &"A".repeat(44), &"!".repeat(43)] {
            assert_eq!(s.decode(bad), Err(CursorError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn encoded_cursor_is_visible_ascii_of_fixed_length() {
        let c = key().signer("s", None).encode(&id(u64::MAX, u64::MAX));
        assert_eq!(c.len(), ENCODED_LEN);
        assert!(c.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    }

    /// The tag as the `hmac` crate computes it: HMAC-SHA256 under `secret` of the bound
    /// session and principal, then the payload.
    fn reference_tag(secret: &[u8], session: &str, principal: &str, payload: &[u8]) -> [u8; 32] {
        use hmac::{Hmac, Mac};
        use sha2::Sha256;
        let mut mac = <Hmac<Sha256>>::new_from_slice(secret).expect("any key length");
        mac.update(&(session.len() as u32).to_be_bytes());
        mac.update(session.as_bytes());
        mac.update(&(principal.len() as u32).to_be_bytes());
        mac.update(principal.as_bytes());
        mac.update(payload);
        mac.finalize().into_bytes().into()
    }

    #[test]
    fn cursors_are_hmac_sha256_over_the_documented_layout() {
        // Computed outside Rust, so the layout, the binding and the MAC are pinned, not only
        // this code's agreement with the hmac crate:
        //   import hmac, hashlib, struct, base64
        //   def cursor(key, session, principal, g, st, sq):
        //       p = struct.pack(">IQQ", g, st, sq)
        //       m = struct.pack(">I", len(session)) + session
        //       m += struct.pack(">I", len(principal)) + principal + p
        //       t = hmac.new(key, m, hashlib.sha256).digest()[:12]
        //       return base64.urlsafe_b64encode(p + t).rstrip(b"=")
        //   cursor(b"test key test key test key 12345", b"sess", b"p", 3, 1, 2)
        let s = key().signer("sess", Some("p"));
        assert_eq!(s.encode(&id(1, 2)), "AAAAAwAAAAAAAAABAAAAAAAAAALGoKL7_CwqC2xHz8s");
        let session = "1.01a248bf8f80.lw0zGSJwyVo23cZJFrpJ6ozcVIe7Cm_u";
        let priming = EventId { generation: Generation(1), stream: StreamId(1), seq: Seq(0) };
        let expected = "AAAAAQAAAAAAAAABAAAAAAAAAADqQuBi1LiF2fQpfTI";
        assert_eq!(key().signer(session, None).encode(&priming), expected);
        let cursors = key().signer(session, None).stream(Generation(1), StreamId(1));
        assert_eq!(&cursors.encode_array(Seq(0))[..], expected.as_bytes());
    }

    #[test]
    fn a_streams_cursors_are_the_signers() {
        // Session ids that put the stream's part before, across and after a block's end.
        // 43: the stream's part ends a block; 55: the binding does.
        for n in [1, 30, 43, 44, 52, 55, 56, 60, 64, 100] {
            let signer = key().signer(&"s".repeat(n), Some("p"));
            for (g, st) in [(0, 0), (3, 7), (u32::MAX, u64::MAX)] {
                let cursors = signer.stream(Generation(g), StreamId(st));
                for sq in [0, 1, 2, u64::MAX] {
                    let e =
                        EventId { generation: Generation(g), stream: StreamId(st), seq: Seq(sq) };
                    assert_eq!(
                        cursors.encode_array(Seq(sq)),
                        signer.encode_array(&e),
                        "{n} {g} {st} {sq}"
                    );
                }
            }
        }
    }

    #[test]
    fn tags_are_hmac_sha256_at_every_block_boundary() {
        // Bound lengths 8..=200 put the payload and padding in one last block, in two, and
        // after whole bound blocks; keys shorter than, as long as and longer than a block.
        for secret in [&b""[..], b"k", &[7u8; 64], &[9u8; 65], &[1u8; 200]] {
            let key = CursorKey::new(secret);
            for n in 0..=192 {
                let session = "s".repeat(n);
                let payload = [n as u8; PAYLOAD_LEN];
                let tag = key.signer(&session, None).mac.finish(&payload);
                assert_eq!(tag, reference_tag(secret, &session, "", &payload), "{n}");
            }
        }
    }

    proptest! {
        #[test]
        fn a_cursor_tag_is_the_hmac_crates(
            secret in proptest::collection::vec(any::<u8>(), 0..150),
            session in "\\PC{0,120}",
            principal in proptest::option::of("\\PC{0,80}"),
            payload in any::<[u8; PAYLOAD_LEN]>(),
        ) {
            let signer = CursorKey::new(&secret).signer(&session, principal.as_deref());
            let expected =
                reference_tag(&secret, &session, principal.as_deref().unwrap_or(""), &payload);
            prop_assert_eq!(signer.mac.finish(&payload), expected);
            let truncated: [u8; TAG_LEN] = expected[..TAG_LEN].try_into().unwrap();
            prop_assert!(signer.mac.verifies(&payload, &truncated));
            let mut wrong = truncated;
            wrong[TAG_LEN - 1] ^= 1;
            prop_assert!(!signer.mac.verifies(&payload, &wrong));
        }

        #[test]
        fn round_trip(g in any::<u32>(), st in any::<u64>(), sq in any::<u64>(), sess in "[!-~]{1,40}") {
            let s = key().signer(&sess, None);
            let e = EventId { generation: Generation(g), stream: StreamId(st), seq: Seq(sq) };
            prop_assert_eq!(s.decode(&s.encode(&e)), Ok(e));
        }

        #[test]
        fn any_single_character_change_is_rejected(st in any::<u64>(), sq in any::<u64>(), pos in 0usize..ENCODED_LEN, ch in "[A-Za-z0-9_-]") {
            let s = key().signer("sess", Some("p"));
            let c = s.encode(&id(st, sq));
            let mut bytes = c.into_bytes();
            let new = ch.as_bytes()[0];
            prop_assume!(bytes[pos] != new);
            bytes[pos] = new;
            let altered = String::from_utf8(bytes).unwrap();
            // The last character carries 4 padding bits: changing only those bits still
            // decodes to the same 32 bytes, so that (and only that) may verify.
            if let Ok(e) = s.decode(&altered) { prop_assert!(pos == ENCODED_LEN - 1 && e == id(st, sq)) }
        }

        #[test]
        fn decode_never_panics(input in "\\PC{0,64}") {
            let _ = key().signer("s", None).decode(&input);
        }
    }
}
