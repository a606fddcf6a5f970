//! The contract every [`Store`] keeps, run against each backend.

use bytes::Bytes;

use super::{Named, Op, Store};

fn put(key: &str, value: &str, expires_ms: u64) -> Op {
    Op::Put { key: key.into(), value: Bytes::from(value.to_owned()), expires_ms }
}

fn append(log: &str, seq: u64, max_len: usize) -> Op {
    let log: std::sync::Arc<str> = log.into();
    Op::Append { log, seq, frame: Bytes::from(format!("frame {seq}")), max_len, expires_ms: 1_000 }
}

pub(crate) fn contract(s: &dyn Store) {
    // Keys, expiry, delete.
    s.apply(&[put("a", "1", 100), put("b", "2", 50)]).unwrap();
    assert_eq!(s.get("a", 10).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(s.get("b", 50).unwrap(), None, "expired at its expiry");
    s.apply(&[put("a", "3", 100), Op::Delete { key: "b".into() }]).unwrap();
    assert_eq!(s.get("a", 10).unwrap().as_deref(), Some(&b"3"[..]), "the last write wins");

    // PutLater: the write expiring later wins, in whichever order the two land; a
    // publication changes nothing stored.
    let later = |key: &str, value: &str, expires_ms| Op::PutLater {
        key: key.into(),
        value: Bytes::from(value.to_owned()),
        expires_ms,
    };
    s.apply(&[later("w", "used at 2", 200), later("w", "used at 1", 150)]).unwrap();
    assert_eq!(s.get("w", 10).unwrap().as_deref(), Some(&b"used at 2"[..]), "the earlier kept out");
    s.apply(&[
        later("w", "used at 3", 300),
        Op::Publish { channel: "test", message: Bytes::from_static(b"hello") },
    ])
    .unwrap();
    assert_eq!(
        s.get("w", 250).unwrap().as_deref(),
        Some(&b"used at 3"[..]),
        "a later one replaces"
    );
    s.apply(&[later("fresh", "v", 100)]).unwrap();
    assert_eq!(s.get("fresh", 10).unwrap().as_deref(), Some(&b"v"[..]), "nothing there: written");

    // Counters: one more each time, raised to a floor first, from 0 when absent or expired;
    // a live counter keeps the expiry it started with (a claim's losers never prolong it).
    assert_eq!(s.incr("n", 0, 100, 0).unwrap(), 1);
    assert_eq!(s.incr("n", 0, 50, 0).unwrap(), 2);
    assert_eq!(s.incr("n", 7, 5_000, 0).unwrap(), 8, "raised to the floor, then counted");
    assert_eq!(s.incr("n", 0, 50, 99).unwrap(), 9, "the expiry of 100 was kept");
    assert_eq!(s.incr("n", 0, 500, 100).unwrap(), 1, "expired at 100, not later: from 0");
    s.apply(&[Op::Expire { name: "n".into(), of: Named::Key, expires_ms: 900 }]).unwrap();
    assert_eq!(s.incr("n", 0, 0, 600).unwrap(), 2, "an Expire pushes a counter's expiry");
    s.apply(&[put("r", "41", 100)]).unwrap();
    assert_eq!(s.incr("r", 0, 100, 0).unwrap(), 42, "a number put as text counts on");
    assert_eq!(s.get("r", 0).unwrap().as_deref(), Some(&b"42"[..]));

    // Logs: bounded, ordered, never duplicated by a replayed append.
    s.apply(&(1..=5).map(|i| append("l", i, 3)).collect::<Vec<_>>()).unwrap();
    s.apply(&[append("l", 4, 3), append("l", 2, 3)]).unwrap();
    let seqs: Vec<u64> = s.read_log("l", 10).unwrap().into_iter().map(|(q, _)| q).collect();
    assert_eq!(seqs, vec![3, 4, 5]);
    assert_eq!(s.read_log("l", 10).unwrap()[2].1, Bytes::from("frame 5"));
    let after = |after, limit, now| -> Vec<u64> {
        s.read_log_after("l", after, limit, now).unwrap().into_iter().map(|(q, _)| q).collect()
    };
    assert_eq!((after(3, 8, 10), after(0, 1, 10), after(5, 8, 10)), (vec![4, 5], vec![3], vec![]));
    assert!(after(0, 8, 1_000).is_empty(), "an expired log reads empty after any cursor");
    assert!(s.read_log("l", 1_000).unwrap().is_empty(), "an expired log reads empty");
    s.apply(&[Op::DropLog { log: "l".into() }]).unwrap();
    assert!(s.read_log("l", 10).unwrap().is_empty());
    assert!(s.read_log("never", 10).unwrap().is_empty());

    // One batch: appends around a drop of their log, trimmed to the last one's bound.
    s.apply(&[
        append("m", 1, 8),
        append("m", 2, 8),
        Op::DropLog { log: "m".into() },
        append("m", 1, 2),
        append("m", 2, 2),
        append("m", 3, 2),
        append("m", 3, 2),
    ])
    .unwrap();
    let seqs: Vec<u64> = s.read_log("m", 10).unwrap().into_iter().map(|(q, _)| q).collect();
    assert_eq!(seqs, vec![2, 3], "dropped, started again, trimmed, the replay ignored");

    // A log with holes keeps the newest `max_len` sequence numbers.
    s.apply(&[append("h", 1, 3), append("h", 2, 3), append("h", 5, 3), append("h", 6, 3)]).unwrap();
    let seqs: Vec<u64> = s.read_log("h", 10).unwrap().into_iter().map(|(q, _)| q).collect();
    assert_eq!(seqs, vec![5, 6], "4..=6 are kept, and only 5 and 6 exist");

    // Indexes.
    let add = |m: &str, score| Op::IndexAdd {
        index: "i".into(),
        member: m.into(),
        score,
        expires_ms: 500,
    };
    // (Only the first add sets the index's expiry; a later one's is ignored.)
    s.apply(&[add("x", 30), add("y", 10), add("z", 20), add("x", 5)]).unwrap();
    let members =
        |now| s.index_lowest("i", 10, now).unwrap().into_iter().map(|(m, _)| m).collect::<Vec<_>>();
    assert_eq!(
        s.index_lowest("i", 2, 0).unwrap(),
        vec![("x".to_owned(), 5), ("y".to_owned(), 10)],
        "re-scored in place"
    );
    s.apply(&[Op::IndexRemove { index: "i".into(), member: "y".into() }]).unwrap();
    assert_eq!(members(0), ["x", "z"]);
    assert_eq!(
        (
            s.index_len("i", 0).unwrap(),
            s.index_len("i", 500).unwrap(),
            s.index_len("never", 0).unwrap()
        ),
        (2, 0, 0),
        "counted unless expired"
    );
    assert_eq!(
        (
            s.index_count_from("i", 5, 0).unwrap(),
            s.index_count_from("i", 6, 0).unwrap(),
            s.index_count_from("i", 21, 0).unwrap(),
            s.index_count_from("i", 5, 500).unwrap()
        ),
        (2, 1, 0, 0),
        "members scored at least the bound, unless expired"
    );
    s.apply(&[add("w", 25), Op::IndexTrim { index: "i".into(), below: 25 }]).unwrap();
    assert_eq!(members(0), ["w"], "members scored below 25 are trimmed");
    s.apply(&[add("x", 5), add("z", 20)]).unwrap();
    assert!(members(500).is_empty(), "an expired index reads empty");
    s.apply(&[Op::DropIndex { index: "i".into() }]).unwrap();
    assert!(members(0).is_empty());

    // Pages of an index, in its order, ties on the score broken by the member.
    let page_add = |m: &str, score| Op::IndexAdd {
        index: "p".into(),
        member: m.into(),
        score,
        expires_ms: 500,
    };
    s.apply(&[page_add("b", 1), page_add("a", 1), page_add("c", 2), page_add("d", 3)]).unwrap();
    let page = |after: Option<(u64, &str)>| s.index_page("p", after, 2, 0).unwrap();
    assert_eq!(page(None), vec![("a".to_owned(), 1), ("b".to_owned(), 1)]);
    assert_eq!(page(Some((1, "b"))), vec![("c".to_owned(), 2), ("d".to_owned(), 3)]);
    assert_eq!(
        page(Some((1, "a"))),
        vec![("b".to_owned(), 1), ("c".to_owned(), 2)],
        "the same score, a later member"
    );
    assert!(page(Some((3, "d"))).is_empty());
    assert!(s.index_page("p", None, 2, 500).unwrap().is_empty(), "an expired index reads empty");

    // Expire pushes a key's, a log's or an index's expiry forward, never back.
    s.apply(&[
        put("e", "v", 100),
        append("e-log", 1, 8),
        add("x", 1),
        Op::Expire { name: "e".into(), of: Named::Key, expires_ms: 5_000 },
    ])
    .unwrap();
    s.apply(&[Op::IndexAdd { index: "i".into(), member: "y".into(), score: 2, expires_ms: 9_000 }])
        .unwrap();
    assert!(members(4_000).is_empty(), "a later add does not push an existing index's expiry");
    s.apply(&[Op::IndexRemove { index: "i".into(), member: "y".into() }]).unwrap();
    s.apply(&[
        Op::Expire { name: "e-log".into(), of: Named::Log, expires_ms: 5_000 },
        Op::Expire { name: "i".into(), of: Named::Index, expires_ms: 5_000 },
        Op::Expire { name: "e".into(), of: Named::Key, expires_ms: 10 },
    ])
    .unwrap();
    assert!(
        s.get("e", 4_000).unwrap().is_some()
            && !s.read_log("e-log", 4_000).unwrap().is_empty()
            && members(4_000) == ["x"]
    );
    s.apply(&[Op::Expire { name: "never-written".into(), of: Named::Key, expires_ms: 5_000 }])
        .unwrap();
    assert_eq!(s.get("never-written", 0).unwrap(), None, "expiring nothing creates nothing");

    // Sweep removes what expired: keys, logs and indexes.
    s.apply(&[
        put("old", "o", 20),
        append("old-log", 1, 8),
        Op::IndexAdd { index: "old-i".into(), member: "m".into(), score: 1, expires_ms: 20 },
    ])
    .unwrap();
    assert_eq!(s.sweep(2_000, 1).unwrap(), 1, "a sweep removes at most its limit");
    assert!(s.sweep(2_000, 1_000).unwrap() >= 2);
    assert_eq!(s.get("a", 0).unwrap(), None);
    assert!(s.read_log("old-log", 0).unwrap().is_empty());
    assert!(
        s.index_lowest("old-i", 10, 0).unwrap().is_empty(),
        "a swept index is gone, not only hidden"
    );
    assert!(members(0) == ["x"], "a live index survives the sweep");

    // Tallies: added and taken back by bucket; a bucket that ended counts no more, and is
    // forgotten when a later batch of the tally is made after it ended.
    let tally = |bucket, count, bytes, now_ms| Op::Tally {
        tally: "u/t".into(),
        bucket,
        count,
        bytes,
        now_ms,
    };
    assert_eq!(s.tally("u/t", 0).unwrap(), (0, 0), "an absent tally is empty");
    s.apply(&[tally(1_000, 1, 100, 0), tally(1_000, 1, 50, 0), tally(2_000, 1, 10, 0)]).unwrap();
    assert_eq!(s.tally("u/t", 500).unwrap(), (3, 160));
    s.apply(&[tally(1_000, -1, -100, 500)]).unwrap();
    assert_eq!(s.tally("u/t", 500).unwrap(), (2, 60), "taken back");
    assert_eq!(s.tally("u/t", 1_000).unwrap(), (1, 10), "the first bucket ended");
    s.apply(&[tally(1_000, -5, -500, 500)]).unwrap();
    assert_eq!(s.tally("u/t", 500).unwrap(), (1, 10), "never below zero");
    s.apply(&[tally(3_000, 1, 1, 2_500)]).unwrap();
    assert_eq!(s.tally("u/t", 0).unwrap(), (1, 1), "ended buckets were forgotten");
    assert_eq!(s.tally("u/other", 0).unwrap(), (0, 0), "tallies are apart");
}
