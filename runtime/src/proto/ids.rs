//! Typed identifiers and units. Each id has exactly one representation; nothing here is
//! re-parsed on a hot path.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A map keyed by ids this server mints (sessions, streams) or computes (HMACs), or whose
/// keys are fixed at start (the catalog's names: a client only looks up, it cannot fill a
/// bucket), looked up several times a request: foldhash, faster than std's SipHash (a few
/// per cent of an echo call in issue 23's profiles) and seeded per process (from addresses
/// and the time) but, by its own account, not resistant to chosen collisions. Keys a client
/// chooses (JSON-RPC request ids) keep std's `HashMap`.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Monotonic time in milliseconds since an origin chosen by the shell. The core never reads a
/// clock; the actors pass `now` in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tick(pub u64);

impl Tick {
    /// `self + ms`, saturating.
    #[must_use]
    pub fn plus_ms(self, ms: u64) -> Tick {
        Tick(self.0.saturating_add(ms))
    }
}

/// Configuration epoch. Tagged into session ids and cursors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(transparent)]
pub struct Generation(pub u32);

/// Stream id: allocated by its session from a counter that never repeats, so it is unique
/// within the session; cursors bind it to the session (see `event_id`), which makes every
/// event id unique across the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u64);

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

/// Sequence number of an event within its stream. `Seq(0)` is the priming position: no
/// message carries it; resuming after it replays everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(pub u64);

impl Seq {
    /// The position before the first event.
    pub const START: Seq = Seq(0);

    /// The following sequence number.
    #[must_use]
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

/// An MCP session id as minted by the server: visible ASCII only (0x21..=0x7E).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// Wrap a header value after checking the visible-ASCII rule. Returns `None` for an empty
    /// value or one with spaces or control characters.
    #[must_use]
    pub fn parse(raw: &str) -> Option<SessionId> {
        if raw.is_empty() || raw.len() > 256 || !raw.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return None;
        }
        Some(SessionId(Arc::from(raw)))
    }

    /// The id as sent on the wire.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A new id, `<generation>.<ms>.<random>`: the generation that made it, the time it was
    /// made (`at_ms`, milliseconds since the epoch, the low 48 bits as 12 lowercase hex
    /// digits), and `random` in base64url. Its ledger name leads with that time (see
    /// [`SessionId::minted_at`]). Without a time, `<generation>.<random>` (what earlier builds
    /// made, and this one with `ledger.ordered_session_ids` off, the default on Redis and
    /// memory ledgers): its ledger name is all MAC, in no order.
    #[must_use]
    pub fn mint(
        generation: u64,
        at_ms: Option<u64>,
        random: &[u8; SESSION_ID_RANDOM_BYTES],
    ) -> SessionId {
        use std::io::Write as _;

        use base64::Engine as _;
        // Written in place, then copied once into the id (one allocation): at most 20
        // digits, a dot, 12 hex digits, a dot and 32 base64 characters.
        const MOST: usize = 72;
        let mut buf = [0u8; MOST];
        let mut w = &mut buf[..];
        let fits = "an id fits its buffer";
        match at_ms {
            Some(ms) => write!(w, "{generation}.{:012x}.", ms & MINTED_AT_MASK).expect(fits),
            None => write!(w, "{generation}.").expect(fits),
        }
        let head = MOST - w.len();
        let tail = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode_slice(random, &mut buf[head..])
            .expect(fits);
        SessionId(Arc::from(std::str::from_utf8(&buf[..head + tail]).expect("ASCII")))
    }

    /// When an id [`SessionId::mint`] made was made (its 48 bits of milliseconds); `None` for
    /// any other id (one minted without its time, one a client made up).
    #[must_use]
    pub fn minted_at(&self) -> Option<u64> {
        // Three parts split by dots, the second 12 lowercase hex digits (read as bytes: a
        // `split` walks the id by characters, and every handshake reads this two or three
        // times).
        let b = self.0.as_bytes();
        let first = memchr::memchr(b'.', b)?;
        let at = b.get(first + 1..first + 13)?;
        if b.get(first + 13) != Some(&b'.') || memchr::memchr(b'.', &b[first + 14..]).is_some() {
            return None;
        }
        at.iter().try_fold(0u64, |n, &d| {
            let v = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                _ => return None,
            };
            Some(n << 4 | u64::from(v))
        })
    }
}

/// Random bytes in a minted session id (192 bits).
pub const SESSION_ID_RANDOM_BYTES: usize = 24;

/// The bits of a millisecond time a session id carries (48: until the year 10889).
pub const MINTED_AT_MASK: u64 = (1 << 48) - 1;

/// The part of a session's ledger name (its id's HMAC, 32 hex digits) that is uniform: the
/// last 20 hex digits (80 bits of MAC), whether the name leads with the id's time or not.
/// What spreads sessions over shards and rollout places, and what logs show of a session.
#[must_use]
pub fn session_hmac_tail(hmac: &str) -> &str {
    hmac.get(hmac.len().saturating_sub(SESSION_HMAC_TAIL_LEN)..).unwrap_or(hmac)
}

/// Hex digits of [`session_hmac_tail`].
pub const SESSION_HMAC_TAIL_LEN: usize = 20;

/// A JSON-RPC request id. Keeps string and number distinct: `1` and `"1"` are different ids.
/// `null` is not an id (rejected by the parser). Fractional numbers are rejected too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JsonRpcId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(Arc<str>),
}

impl JsonRpcId {
    /// Convert a JSON value; `None` for anything that is not an integer or a string.
    #[must_use]
    pub fn from_value(v: &serde_json::Value) -> Option<JsonRpcId> {
        match v {
            serde_json::Value::Number(n) => n.as_i64().map(JsonRpcId::Number),
            serde_json::Value::String(s) => Some(JsonRpcId::String(Arc::from(s.as_str()))),
            _ => None,
        }
    }

    /// The id as a JSON value, type preserved.
    #[must_use]
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            JsonRpcId::Number(n) => serde_json::Value::from(*n),
            JsonRpcId::String(s) => serde_json::Value::from(&**s),
        }
    }
}

impl fmt::Display for JsonRpcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonRpcId::Number(n) => write!(f, "{n}"),
            JsonRpcId::String(s) => write!(f, "{s:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_id_rejects_space_control_and_empty() {
        assert!(SessionId::parse("abc DEF").is_none());
        assert!(SessionId::parse("abc\u{7f}").is_none());
        assert!(SessionId::parse("").is_none());
        assert!(SessionId::parse("abc\tdef").is_none());
        assert_eq!(SessionId::parse("a-b_c.~!").unwrap().as_str(), "a-b_c.~!");
    }

    #[test]
    fn minted_at_reads_ids_as_the_split_by_dots_it_replaces() {
        fn by_split(id: &str) -> Option<u64> {
            let mut parts = id.split('.');
            let (_generation, at, _random) = (parts.next()?, parts.next()?, parts.next()?);
            let hex = at.len() == 12
                && at.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !hex || parts.next().is_some() {
                return None;
            }
            u64::from_str_radix(at, 16).ok()
        }
        // 20,000 ids of 13 to 28 characters over an alphabet of the cases' characters, drawn
        // by a fixed pseudo-random sequence; and the edges by hand.
        let alphabet = b"0123456789abcdefAG.x-";
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut ids: Vec<String> = [
            ".019412345678.",
            "3.019412345678.",
            ".ffffffffffff.x",
            "3..019412345678.x",
            "3.019412345678..",
            "3.0194123456780.",
            "..",
        ]
        .map(String::from)
        .to_vec();
        for _ in 0..20_000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let len = 13 + (seed >> 60) as usize;
            let mut id = String::new();
            for i in 0..len {
                let r = seed.rotate_left(7 * i as u32) ^ (i as u64).wrapping_mul(0x2545_f491);
                // Mostly hex digits, a dot about one time in six.
                let c = if r.is_multiple_of(6) {
                    b'.'
                } else {
                    alphabet[(r >> 8) as usize % alphabet.len()]
                };
                id.push(c as char);
            }
            ids.push(id);
        }
        let edges = 7;
        let mut some = [0, 0];
        for (i, id) in ids.iter().enumerate() {
            let id = SessionId(id.as_str().into());
            assert_eq!(id.minted_at(), by_split(id.as_str()), "{}", id.as_str());
            some[usize::from(i >= edges)] += usize::from(id.minted_at().is_some());
        }
        assert_eq!(some[0], 3, "three of the edges carry a time");
        assert!(some[1] >= 3, "generated ids with a time are among them ({})", some[1]);
    }

    #[test]
    fn a_minted_id_carries_its_time_and_others_carry_none() {
        let id = SessionId::mint(3, Some(0x0194_1234_5678), &[7; SESSION_ID_RANDOM_BYTES]);
        assert!(id.as_str().starts_with("3.019412345678."), "{}", id.as_str());
        assert_eq!(SessionId::parse(id.as_str()).as_ref(), Some(&id), "visible ASCII");
        assert_eq!(id.minted_at(), Some(0x0194_1234_5678));
        // Past 48 bits the time wraps (and stays 12 digits).
        let late = SessionId::mint(3, Some((1 << 48) + 5), &[7; SESSION_ID_RANDOM_BYTES]);
        assert_eq!(late.minted_at(), Some(5));
        let unordered = SessionId::mint(3, None, &[7; SESSION_ID_RANDOM_BYTES]);
        assert_eq!(unordered.as_str().matches('.').count(), 1);
        // The longest: every part written whole.
        use base64::Engine as _;
        let random = [0xfb; SESSION_ID_RANDOM_BYTES];
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random);
        let longest = SessionId::mint(u64::MAX, Some(MINTED_AT_MASK), &random);
        assert_eq!(longest.as_str(), format!("{}.ffffffffffff.{b64}", u64::MAX));
        assert_eq!(
            SessionId::mint(u64::MAX, None, &random).as_str(),
            format!("{}.{b64}", u64::MAX)
        );
        assert_eq!(unordered.minted_at(), None);
        for made_up in [
            "3.01941234567.x",
            "3.0194123456789.x",
            "3.01941234567G.x",
            "3.01941234567A.x",
            "3.019412345678",
            "3.019412345678.x.y",
        ] {
            assert_eq!(SessionId::parse(made_up).unwrap().minted_at(), None, "{made_up}");
        }
    }

    #[test]
    fn a_session_hmac_tail_is_its_last_twenty_digits() {
        assert_eq!(session_hmac_tail("0123456789abcdef0123456789abcdef"), "cdef0123456789abcdef");
        assert_eq!(session_hmac_tail("short"), "short");
    }

    #[test]
    fn number_and_string_ids_are_distinct() {
        let n = JsonRpcId::from_value(&serde_json::json!(1)).unwrap();
        let s = JsonRpcId::from_value(&serde_json::json!("1")).unwrap();
        assert_ne!(n, s);
        assert_eq!(n.to_value(), serde_json::json!(1));
        assert_eq!(s.to_value(), serde_json::json!("1"));
    }

    #[test]
    fn null_float_and_object_are_not_ids() {
        assert!(JsonRpcId::from_value(&serde_json::Value::Null).is_none());
        assert!(JsonRpcId::from_value(&serde_json::json!(1.5)).is_none());
        assert!(JsonRpcId::from_value(&serde_json::json!({})).is_none());
    }
}
