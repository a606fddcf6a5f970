//! Rollout flags (`[rollout]`) and what they decide for one new stream, and the shadow
//! ledger's verification: the copy of a shadow stream read back from the ledger compared
//! with what its client was sent.
//!
//! A flag set belongs to a generation; a stream takes the flags of the generation current
//! when it opens and keeps them for its life. A session's place in `share` comes from a
//! stable hash of the session (its id's HMAC), so growing the share only adds sessions and a
//! session never flips back and forth between two reloads of the same share.

use std::collections::VecDeque;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::event_id::CursorSigner;
use super::ids::{Generation, Seq, StreamId};

/// `rollout.resumable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resumable {
    /// No stream gets event ids.
    Off,
    /// Read-only streams of the chosen sessions are written to the ledger as if resumable
    /// and verified when they close; the client sees no ids.
    Shadow,
    /// Streams of the chosen sessions are resumable.
    On,
}

impl Resumable {
    /// The config spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Resumable::Off => "off",
            Resumable::Shadow => "shadow",
            Resumable::On => "on",
        }
    }
}

/// `rollout.write_tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteTools {
    /// Write tools' streams follow `resumable` like any other.
    All,
    /// A write tool's stream is resumable only when its call carries an idempotency receipt;
    /// otherwise it gets no ids in any mode.
    Receipts,
}

impl WriteTools {
    /// The config spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            WriteTools::All => "all",
            WriteTools::Receipts => "receipts",
        }
    }
}

/// `[rollout]`: which new streams are resumable. Reloadable (SIGHUP, `PUT /admin/flags`);
/// a change applies to streams opened afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutFlags {
    /// `"off"`, `"shadow"` or `"on"`. Default `"on"`.
    pub resumable: Resumable,
    /// Fraction of sessions `resumable` applies to (0.0 to 1.0; the others get no ids).
    /// Default 1.0.
    pub share: f64,
    /// `"all"` or `"receipts"`. Default `"all"`.
    pub write_tools: WriteTools,
}

impl Default for RolloutFlags {
    fn default() -> RolloutFlags {
        RolloutFlags { resumable: Resumable::On, share: 1.0, write_tools: WriteTools::All }
    }
}

/// Flags that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rollout.share must be a number from 0.0 to 1.0 (got {0})")]
pub struct BadShare(pub String);

impl RolloutFlags {
    /// Check the share.
    ///
    /// # Errors
    /// [`BadShare`] when it is not within 0.0..=1.0.
    pub fn validate(self) -> Result<RolloutFlags, BadShare> {
        if (0.0..=1.0).contains(&self.share) {
            Ok(self)
        } else {
            Err(BadShare(self.share.to_string()))
        }
    }

    /// These flags with a rollback applied: no new stream is resumable (nor shadowed).
    #[must_use]
    pub fn rolled_back(self) -> RolloutFlags {
        RolloutFlags { resumable: Resumable::Off, ..self }
    }

    /// What a new stream of the session whose place is `place` ([`share_place`]) gets.
    #[must_use]
    pub fn mode(&self, place: f64, purpose: StreamPurpose) -> StreamMode {
        if self.resumable == Resumable::Off || place >= self.share {
            return StreamMode::Plain;
        }
        let write = match purpose {
            StreamPurpose::ReadOnly => false,
            StreamPurpose::Write { receipt } => {
                if self.write_tools == WriteTools::Receipts && !receipt {
                    return StreamMode::Plain;
                }
                true
            }
        };
        match self.resumable {
            Resumable::On => StreamMode::Resumable,
            // Only read-only streams are shadowed: a write's stream is not where a ledger
            // is proven.
            Resumable::Shadow if !write => StreamMode::Shadow,
            _ => StreamMode::Plain,
        }
    }
}

/// A session's place in `[0, 1)`, from its ledger name (hex HMAC of its id): the session is
/// in the share when its place is below it. From the name's first 13 digits, which are
/// uniform, unless the name is `ordered` (it leads with the id's time): then from its uniform
/// tail ([`crate::proto::ids::session_hmac_tail`]). A session keeps its place across builds.
#[must_use]
pub fn share_place(session_hmac: &str, ordered: bool) -> f64 {
    let uniform =
        if ordered { crate::proto::ids::session_hmac_tail(session_hmac) } else { session_hmac };
    let head = uniform.get(..13).and_then(|h| u64::from_str_radix(h, 16).ok()).unwrap_or(0);
    // 52 bits: exact in an f64.
    head as f64 / (1u64 << 52) as f64
}

/// What a stream carries, as the flags see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamPurpose {
    /// The GET stream, and every request that is not a write-tool call.
    ReadOnly,
    /// A `tools/call` of a tool not annotated `readOnlyHint: true`; `receipt` when the call
    /// carries an idempotency receipt.
    Write {
        /// The call carries an idempotency key.
        receipt: bool,
    },
}

/// How a stream is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// Event ids, priming, `retry`, replay window, ledger copy.
    Resumable,
    /// No ids to the client; the window and the ledger copy are kept exactly as if
    /// resumable, and the copy is verified against what was sent when the stream closes.
    Shadow,
    /// No ids, no window, no ledger copy: an event produced while no connection is attached
    /// is lost (the client was never told it could resume).
    Plain,
}

impl StreamMode {
    /// The name used in metrics and the admin status.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            StreamMode::Resumable => "resumable",
            StreamMode::Shadow => "shadow",
            StreamMode::Plain => "plain",
        }
    }
}

/// What a shadow stream sent its client: the newest events' sequence numbers and digests
/// (as many as its window holds), and how many there were in all.
#[derive(Debug, Clone)]
pub struct ShadowSent {
    recent: VecDeque<(Seq, u64)>,
    cap: usize,
    total: u64,
}

/// A payload's digest (64-bit FNV-1a: not a defence against tampering, a check of content).
#[must_use]
pub fn payload_digest(json: &[u8]) -> u64 {
    json.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl ShadowSent {
    /// Keep the newest `cap` events (the window's event bound: the ledger's log keeps as many).
    #[must_use]
    pub fn new(cap: usize) -> ShadowSent {
        ShadowSent { recent: VecDeque::new(), cap: cap.max(1), total: 0 }
    }

    /// The event `seq` carrying `json` went to the client (or would have: it is counted
    /// whether a connection was attached or not).
    pub fn sent(&mut self, seq: Seq, json: &[u8]) {
        if self.recent.len() == self.cap {
            self.recent.pop_front();
        }
        self.recent.push_back((seq, payload_digest(json)));
        self.total += 1;
    }

    /// Events sent in all.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// The outcome of one shadow stream's verification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShadowReport {
    /// Events the client was sent.
    pub sent: u64,
    /// Events of the ledger copy that matched what was sent.
    pub matched: u64,
    /// Copy events whose payload differs from what was sent, or that were never sent.
    pub content: u64,
    /// Copy events out of order (a lower sequence number after a higher one).
    pub order: u64,
    /// Copy events whose cursor does not verify, names another stream or generation,
    /// disagrees with the log's sequence number, or repeats the previous one.
    pub cursor: u64,
    /// Sent events the window would have kept that the copy lacks.
    pub missing: u64,
    /// Sent events older than the window's bound: a resume from the stream's start would
    /// have found them lost (not a ledger fault; sizes the window).
    pub window_lost: u64,
}

impl ShadowReport {
    /// Mismatches of any kind (`window_lost` is not one).
    #[must_use]
    pub fn mismatches(&self) -> u64 {
        self.content + self.order + self.cursor + self.missing
    }
}

/// The `id:` and the joined `data:` payload of one encoded SSE event frame.
fn split_frame(frame: &[u8]) -> (Option<&str>, Vec<u8>) {
    let mut id = None;
    let mut data: Vec<u8> = Vec::new();
    let mut first = true;
    for line in frame.split(|b| *b == b'\n') {
        if let Some(v) = line.strip_prefix(b"id: ").or_else(|| line.strip_prefix(b"id:")) {
            id = std::str::from_utf8(v).ok();
        } else if let Some(v) = line.strip_prefix(b"data: ").or_else(|| line.strip_prefix(b"data:"))
        {
            if !first {
                data.push(b'\n');
            }
            data.extend_from_slice(v);
            first = false;
        }
    }
    (id, data)
}

/// Compare a shadow stream's ledger copy (`(seq, frame)`, as read back) with what was sent.
#[must_use]
pub fn verify_shadow(
    sent: &ShadowSent,
    copy: &[(u64, Bytes)],
    signer: &CursorSigner,
    generation: Generation,
    stream: StreamId,
) -> ShadowReport {
    let mut r = ShadowReport {
        sent: sent.total,
        window_lost: sent.total - sent.recent.len() as u64,
        ..ShadowReport::default()
    };
    let mut found = std::collections::HashSet::new();
    let mut prev: Option<u64> = None;
    for (seq, frame) in copy {
        let (id, data) = split_frame(frame);
        let cursor_ok = id
            .and_then(|c| signer.decode(c).ok())
            .is_some_and(|e| e.generation == generation && e.stream == stream && e.seq.0 == *seq);
        if !cursor_ok || prev == Some(*seq) {
            r.cursor += 1;
            continue;
        }
        if prev.is_some_and(|p| *seq < p) {
            r.order += 1;
        }
        prev = Some(*seq);
        match sent.recent.iter().find(|(q, _)| q.0 == *seq) {
            Some((_, d)) if *d == payload_digest(&data) => {
                r.matched += 1;
                found.insert(*seq);
            }
            // Older than what is kept of the sent ones: already counted as window-lost.
            None if sent.recent.front().is_some_and(|(q, _)| *seq < q.0) => {}
            _ => r.content += 1,
        }
    }
    r.missing = sent.recent.iter().filter(|(q, _)| !found.contains(&q.0)).count() as u64;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::event_id::{CursorKey, EventId};
    use crate::sse;

    fn flags(resumable: Resumable, share: f64, write_tools: WriteTools) -> RolloutFlags {
        RolloutFlags { resumable, share, write_tools }
    }

    #[test]
    fn defaults_resume_everything() {
        let f = RolloutFlags::default();
        for p in [0.0, 0.5, 0.999_999] {
            assert_eq!(f.mode(p, StreamPurpose::ReadOnly), StreamMode::Resumable);
            assert_eq!(f.mode(p, StreamPurpose::Write { receipt: false }), StreamMode::Resumable);
        }
    }

    #[test]
    fn a_sessions_place_comes_from_its_mac_not_from_the_time_its_name_leads_with() {
        // Two sessions made in one millisecond: their names share the head.
        let (low, high) = ("019412345678000000000000000000ff", "019412345678ffffffffffffffffff00");
        assert!(share_place(low, true) < 0.01 && share_place(high, true) > 0.99);
        // A name that is all MAC keeps the place it had before names were ordered.
        assert!(share_place("00000000000000ffffffffffffffffff", false) < 0.01);
    }

    #[test]
    fn share_picks_sessions_below_it_and_growing_it_only_adds_sessions() {
        let places: Vec<f64> = (0..1000u32)
            .map(|i| {
                share_place(
                    &format!(
                        "{:032x}",
                        u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
                    ),
                    false,
                )
            })
            .collect();
        let chosen = |share: f64| {
            places
                .iter()
                .filter(|p| {
                    flags(Resumable::On, share, WriteTools::All).mode(**p, StreamPurpose::ReadOnly)
                        == StreamMode::Resumable
                })
                .count()
        };
        let (one, ten, all) = (chosen(0.01), chosen(0.1), chosen(1.0));
        assert!(one < ten && ten < all && all == 1000, "{one} {ten} {all}");
        assert!((50..=150).contains(&ten), "about a tenth: {ten}");
        for p in &places {
            let small =
                flags(Resumable::On, 0.1, WriteTools::All).mode(*p, StreamPurpose::ReadOnly);
            let large =
                flags(Resumable::On, 0.5, WriteTools::All).mode(*p, StreamPurpose::ReadOnly);
            assert!(
                small == StreamMode::Plain || large == StreamMode::Resumable,
                "a session in the small share is in the larger one"
            );
        }
        assert_eq!(chosen(0.0), 0);
    }

    #[test]
    fn a_session_keeps_its_place() {
        let hmac = "3fa2c1d4e5f60718293a4b5c6d7e8f90";
        for ordered in [false, true] {
            assert_eq!(share_place(hmac, ordered), share_place(hmac, ordered));
            assert!((0.0..1.0).contains(&share_place(hmac, ordered)));
            assert!((0.0..1.0).contains(&share_place("ffffffffffffffffffffffffffffffff", ordered)));
        }
    }

    #[test]
    fn shadow_applies_to_read_only_streams_only() {
        let f = flags(Resumable::Shadow, 1.0, WriteTools::All);
        assert_eq!(f.mode(0.3, StreamPurpose::ReadOnly), StreamMode::Shadow);
        assert_eq!(f.mode(0.3, StreamPurpose::Write { receipt: true }), StreamMode::Plain);
        assert_eq!(
            flags(Resumable::Shadow, 0.2, WriteTools::All).mode(0.3, StreamPurpose::ReadOnly),
            StreamMode::Plain,
            "outside the share"
        );
    }

    #[test]
    fn write_tools_need_a_receipt_when_asked_in_every_mode() {
        for r in [Resumable::On, Resumable::Shadow] {
            let f = flags(r, 1.0, WriteTools::Receipts);
            assert_eq!(
                f.mode(0.1, StreamPurpose::Write { receipt: false }),
                StreamMode::Plain,
                "{r:?}"
            );
        }
        assert_eq!(
            flags(Resumable::On, 1.0, WriteTools::Receipts)
                .mode(0.1, StreamPurpose::Write { receipt: true }),
            StreamMode::Resumable
        );
        assert_eq!(
            flags(Resumable::On, 1.0, WriteTools::Receipts).mode(0.1, StreamPurpose::ReadOnly),
            StreamMode::Resumable
        );
    }

    #[test]
    fn off_and_rollback_make_nothing_resumable() {
        let f = RolloutFlags::default().rolled_back();
        assert_eq!(f.mode(0.0, StreamPurpose::ReadOnly), StreamMode::Plain);
        assert_eq!(
            flags(Resumable::Off, 1.0, WriteTools::All)
                .mode(0.0, StreamPurpose::Write { receipt: true }),
            StreamMode::Plain
        );
    }

    #[test]
    fn a_share_outside_zero_to_one_is_refused() {
        assert!(flags(Resumable::On, 1.5, WriteTools::All).validate().is_err());
        assert!(flags(Resumable::On, -0.1, WriteTools::All).validate().is_err());
        assert!(flags(Resumable::On, f64::NAN, WriteTools::All).validate().is_err());
        assert!(flags(Resumable::On, 0.01, WriteTools::All).validate().is_ok());
    }

    fn shadow_fixture(n: u64, cap: usize) -> (CursorSigner, ShadowSent, Vec<(u64, Bytes)>) {
        let signer = CursorKey::new(&[9u8; 32]).signer("1.s", None);
        let mut sent = ShadowSent::new(cap);
        let mut copy = Vec::new();
        for q in 1..=n {
            let json = format!("{{\"n\":{q}}}");
            sent.sent(Seq(q), json.as_bytes());
            let cursor = signer.encode(&EventId {
                generation: Generation(2),
                stream: StreamId(5),
                seq: Seq(q),
            });
            copy.push((q, sse::event_frame(cursor.as_bytes(), json.as_bytes())));
        }
        (signer, sent, copy)
    }

    #[test]
    fn a_faithful_copy_matches() {
        let (signer, sent, copy) = shadow_fixture(10, 64);
        let r = verify_shadow(&sent, &copy, &signer, Generation(2), StreamId(5));
        assert_eq!((r.sent, r.matched, r.mismatches(), r.window_lost), (10, 10, 0, 0));
    }

    #[test]
    fn a_corrupted_reordered_duplicated_or_short_copy_is_counted() {
        let (signer, sent, copy) = shadow_fixture(10, 64);
        let check =
            |c: &[(u64, Bytes)]| verify_shadow(&sent, c, &signer, Generation(2), StreamId(5));
        let mut altered = copy.clone();
        altered[3].1 = Bytes::from(
            String::from_utf8(altered[3].1.to_vec()).unwrap().replace("\"n\":4", "\"n\":40"),
        );
        assert_eq!(check(&altered).content, 1);
        let mut swapped = copy.clone();
        swapped.swap(2, 3);
        assert_eq!(check(&swapped).order, 1);
        let mut dup = copy.clone();
        dup.insert(4, dup[3].clone());
        assert_eq!(check(&dup).cursor, 1);
        let short: Vec<_> = copy.iter().filter(|(q, _)| *q != 6).cloned().collect();
        assert_eq!(check(&short).missing, 1);
        let mut wrong_stream = copy.clone();
        let other =
            signer.encode(&EventId { generation: Generation(2), stream: StreamId(6), seq: Seq(1) });
        wrong_stream[0].1 = sse::event_frame(other.as_bytes(), b"{\"n\":1}");
        let r = check(&wrong_stream);
        assert_eq!((r.cursor, r.missing), (1, 1));
    }

    #[test]
    fn events_past_the_window_are_window_lost_not_mismatches() {
        let (signer, sent, copy) = shadow_fixture(10, 4);
        // The ledger's log keeps as many as the window: the newest 4.
        let kept = &copy[6..];
        let r = verify_shadow(&sent, kept, &signer, Generation(2), StreamId(5));
        assert_eq!((r.matched, r.window_lost, r.mismatches()), (4, 6, 0));
    }
}
