//! Explicit state handles (SEP-2567), the pure part: what a handle looks like, a kind's
//! policy, and the words a model reads about them. The store is [`crate::stores::handles`].
//!
//! A handle is `<prefix>_<24 URL-safe base64 characters>`: 144 bits from the operating
//! system's CSPRNG, never derived from anything a caller could predict, with a readable type
//! prefix (`bsk_…` for a basket). A string of another shape is no handle of this kind: it is
//! answered like an unknown one.

use base64::Engine as _;

/// Random bytes in a handle (144 bits, 24 base64 characters without padding).
pub const HANDLE_RANDOM_BYTES: usize = 18;
const HANDLE_RANDOM_CHARS: usize = 24;

/// One kind of handle and its policy. Every field is stated to the model somewhere: the
/// expiry in the creating tool's description ([`HandleKind::expiry_sentence`]), the recovery
/// in every "not found" error ([`HandleKind::not_found`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleKind {
    /// Type prefix, `[a-z]{1,8}` (`"bsk"`).
    pub prefix: &'static str,
    /// What it names, singular (`"basket"`).
    pub noun: &'static str,
    /// The tool that makes a new one (`"create_basket"`): named in every error.
    pub create_tool: &'static str,
    /// A handle unused this long (s) expires.
    pub idle_ttl_secs: u64,
    /// Largest value one handle may hold (bytes of its JSON).
    pub max_bytes: usize,
    /// Most live handles of this kind one caller may hold.
    pub max_per_caller: usize,
}

impl HandleKind {
    /// A valid kind.
    ///
    /// # Panics
    /// On a prefix that is not 1 to 8 lower-case ASCII letters, or a zero TTL or bound (a
    /// programming error in the pack that declares it).
    #[must_use]
    pub fn new(
        prefix: &'static str,
        noun: &'static str,
        create_tool: &'static str,
        idle_ttl_secs: u64,
        max_bytes: usize,
        max_per_caller: usize,
    ) -> HandleKind {
        assert!(
            (1..=8).contains(&prefix.len()) && prefix.bytes().all(|b| b.is_ascii_lowercase()),
            "a handle prefix is 1 to 8 lower-case letters: {prefix:?}"
        );
        assert!(
            idle_ttl_secs > 0 && max_bytes > 0 && max_per_caller > 0,
            "a handle kind needs a TTL and bounds"
        );
        HandleKind { prefix, noun, create_tool, idle_ttl_secs, max_bytes, max_per_caller }
    }

    /// A new handle of this kind from `random` (CSPRNG bytes).
    #[must_use]
    pub fn mint(&self, random: &[u8; HANDLE_RANDOM_BYTES]) -> String {
        format!(
            "{}_{}",
            self.prefix,
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
        )
    }

    /// Whether `s` has the shape of a handle of this kind (it may still be unknown).
    #[must_use]
    pub fn is_shaped(&self, s: &str) -> bool {
        s.strip_prefix(self.prefix).and_then(|r| r.strip_prefix('_')).is_some_and(|r| {
            r.len() == HANDLE_RANDOM_CHARS
                && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    }

    /// How long an unused handle lives, in words (`"30 minutes"`).
    #[must_use]
    pub fn ttl_words(&self) -> String {
        duration_words(self.idle_ttl_secs)
    }

    /// The sentence for the creating tool's description: the expiry policy, from the same
    /// setting the store enforces.
    #[must_use]
    pub fn expiry_sentence(&self) -> String {
        format!(
            "A {} expires after {} without use (any call that names it counts as use).",
            self.noun,
            self.ttl_words()
        )
    }

    /// The tool error for a handle that is unknown, expired, destroyed or another caller's
    /// (one text for all: a foreign handle is indistinguishable from an unknown one).
    #[must_use]
    pub fn not_found(&self, handle: &str) -> String {
        let shown: String = handle.chars().take(64).collect();
        format!(
            "{} {shown:?} was not found: it may have expired ({}s expire after {} without use), been destroyed, or never existed. Call {} to start a new {}.",
            capitalized(self.noun),
            self.noun,
            self.ttl_words(),
            self.create_tool,
            self.noun
        )
    }

    /// The text of a list tool's result for a caller that may list nothing (no authentication
    /// and no session: without authentication a handle is a bearer capability, and an
    /// address says nothing about who made it). A plain result, not an error: retrying
    /// cannot change it.
    #[must_use]
    pub fn unlisted(&self) -> String {
        format!(
            "Listing {noun}s needs an authenticated caller, so this list is empty. Without authentication a {noun} is reached only by the handle {create} returned ({prefix}_…): it still works with every tool that takes it. Call {create} to start a new {noun}.",
            noun = self.noun,
            create = self.create_tool,
            prefix = self.prefix,
        )
    }

    /// The tool error for a value over [`HandleKind::max_bytes`].
    #[must_use]
    /// `handle` is `None` for a value refused before its handle was handed out (a create).
    pub fn too_large(&self, handle: Option<&str>, bytes: usize) -> String {
        match handle {
            Some(h) => format!(
                "{} {h} would hold {bytes} bytes; a {} holds at most {} bytes. Nothing was changed.",
                capitalized(self.noun),
                self.noun,
                self.max_bytes
            ),
            None => format!(
                "The new {} would hold {bytes} bytes; a {} holds at most {} bytes. Nothing was created.",
                self.noun, self.noun, self.max_bytes
            ),
        }
    }

    /// How long after the last recorded use a handle's record may outlive its idle TTL: a
    /// read this soon after the last recorded use is not recorded again (a read would
    /// otherwise be a write), and the record's expiry allows for it, so a handle never
    /// expires sooner than its TTL says and at most this much later (a second, or an eighth
    /// of a short TTL).
    #[must_use]
    pub fn touch_slack_ms(&self) -> u64 {
        (self.idle_ttl_secs.saturating_mul(1000) / 8).min(1000)
    }

    /// The tool error for a change that would take the caller's state past its byte bound
    /// (`ledger.handle_bytes_per_caller`, over every kind), retrying after `retry_after_s`.
    #[must_use]
    pub fn caller_state_full(&self, retry_after_s: u32) -> String {
        format!(
            "Your {}s and other state already take as many bytes as one caller may keep; nothing was changed. Destroy what you no longer need, or try again in {} (unused {}s expire after {}).",
            self.noun,
            duration_words(u64::from(retry_after_s)),
            self.noun,
            self.ttl_words()
        )
    }

    /// The tool error for a change that would take the server's state of every caller past
    /// its byte bound (`ledger.handle_bytes_total`).
    #[must_use]
    pub fn server_state_full(&self, retry_after_s: u32) -> String {
        format!(
            "The server keeps as much state as it may right now; nothing was changed. Try again in {}.",
            duration_words(u64::from(retry_after_s))
        )
    }

    /// The tool error for a caller at [`HandleKind::max_per_caller`].
    #[must_use]
    pub fn too_many(&self) -> String {
        format!(
            "You already have {} {}s, the most one caller may hold; nothing was created. Finish or destroy one first (unused ones expire after {}).",
            self.max_per_caller,
            self.noun,
            self.ttl_words()
        )
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// `secs` in the largest whole unit that divides it (`"24 hours"`, `"90 seconds"`).
#[must_use]
pub fn duration_words(secs: u64) -> String {
    let (n, unit) = match secs {
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// XOR `data` with `keystream` (as long as `data`): how a handle's random part is kept sealed
/// in the ledger (the keystream is an HMAC of its record key under a key derived from the
/// ledger's secret), so the file alone never yields a usable handle.
#[must_use]
pub fn xor(data: &[u8], keystream: &[u8]) -> Vec<u8> {
    data.iter().zip(keystream).map(|(a, b)| a ^ b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basket() -> HandleKind {
        HandleKind::new("bsk", "basket", "create_basket", 1800, 1024, 3)
    }

    #[test]
    fn a_handle_has_its_prefix_and_144_random_bits_in_url_safe_characters() {
        let k = basket();
        let h = k.mint(&[0xfb; HANDLE_RANDOM_BYTES]);
        assert_eq!(h, "bsk_-_v7-_v7-_v7-_v7-_v7-_v7");
        assert!(k.is_shaped(&h));
        for bad in [
            "bsk_short",
            "bsk-_v7-_v7-_v7-_v7-_v7-_v7",
            "cart_-_v7-_v7-_v7-_v7-_v7-_v7",
            "bsk_-_v7-_v7-_v7-_v7-_v7-_v7x",
            "bsk_-_v7-_v7-_v7-_v7-_v7-_v/",
            "",
        ] {
            assert!(!k.is_shaped(bad), "{bad}");
        }
        assert_ne!(k.mint(&[1; HANDLE_RANDOM_BYTES]), k.mint(&[2; HANDLE_RANDOM_BYTES]));
    }

    #[test]
    fn the_words_a_model_reads_come_from_the_policy() {
        let k = basket();
        assert_eq!(
            k.expiry_sentence(),
            "A basket expires after 30 minutes without use (any call that names it counts as use)."
        );
        let e = k.not_found("bsk_x");
        assert!(
            e.contains("\"bsk_x\"") && e.contains("30 minutes") && e.contains("Call create_basket"),
            "{e}"
        );
        assert!(k.too_many().contains("3 baskets"));
        assert!(
            k.too_large(Some("bsk_x"), 2000)
                .contains("bsk_x would hold 2000 bytes; a basket holds at most 1024 bytes")
        );
        assert!(
            k.too_large(None, 2000).starts_with("The new basket would hold 2000 bytes"),
            "a create names no handle it never handed out"
        );
        let u = k.unlisted();
        assert!(
            u.starts_with("Listing baskets needs an authenticated caller")
                && u.contains("bsk_…")
                && u.contains("Call create_basket"),
            "{u}"
        );
        assert_eq!(
            (duration_words(86_400), duration_words(7_200), duration_words(60), duration_words(90)),
            ("1 day".into(), "2 hours".into(), "1 minute".into(), "90 seconds".into())
        );
    }

    #[test]
    fn sealing_twice_gives_the_handle_back() {
        let data = b"abcdefghijklmnopqrstuvwx";
        let ks = [0x5a_u8; 32];
        assert_ne!(xor(data, &ks), data.to_vec());
        assert_eq!(xor(&xor(data, &ks), &ks), data.to_vec());
    }

    #[test]
    #[should_panic(expected = "prefix")]
    fn a_bad_prefix_is_a_programming_error() {
        let _ = HandleKind::new("Bad!", "x", "y", 1, 1, 1);
    }
}
