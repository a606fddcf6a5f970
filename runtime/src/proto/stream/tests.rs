use super::*;
use crate::proto::event_id::CursorKey;
use crate::sse::Decoder;

const TIMING: StreamTiming = StreamTiming {
    keepalive_ms: 100,
    retention_after_delivery_ms: 1_000,
    retention_undelivered_ms: 5_000,
};

fn settings(prime: bool, max_events: usize) -> StreamSettings {
    StreamSettings {
        window: WindowLimits { max_events, max_bytes: 1 << 20 },
        prime,
        retry_ms: Some(500),
        hold_until_committed: false,
        mode: StreamMode::Resumable,
        timing: TIMING,
    }
}

fn signer() -> std::sync::Arc<CursorSigner> {
    std::sync::Arc::new(CursorKey::new(b"k").signer("session", None))
}

fn post_stream(prime: bool, max_events: usize) -> StreamCore {
    StreamCore::new(
        StreamId(7),
        Generation(1),
        StreamKind::Post { request: JsonRpcId::Number(1) },
        signer(),
        settings(prime, max_events),
    )
}

fn decode(frames: &[Bytes]) -> (Vec<String>, Decoder) {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    for f in frames {
        out.extend(d.feed(f).into_iter().map(|e| e.data));
    }
    (out, d)
}

fn cursor_seq(c: &str) -> Seq {
    signer().decode(c).unwrap().seq
}

#[test]
fn priming_event_comes_first_and_resumes_from_the_start() {
    let mut s = post_stream(true, 8);
    let a = s.attach_new();
    let (data, d) = decode(&a.initial);
    assert!(data.is_empty(), "priming is not dispatched");
    assert_eq!(d.retry_ms, Some(500));
    assert_eq!(cursor_seq(d.last_event_id.as_deref().unwrap()), Seq::START);
}

#[test]
fn no_priming_for_older_sessions() {
    let mut s = post_stream(false, 8);
    assert!(s.attach_new().initial.is_empty());
    assert_eq!(s.close_for_polling(), None, "polling close needs an id sent first");
}

#[test]
fn events_after_disconnect_are_buffered_and_replayed_in_order() {
    let mut s = post_stream(true, 8);
    let a = s.attach_new();
    let Delivery::Write { frame: f1, .. } = s.push(br#"{"n":1}"#) else { panic!() };
    s.detach(a.conn, false);
    assert_eq!(s.state(), StreamState::Disconnected);
    assert_eq!(s.push(br#"{"n":2}"#), Delivery::Buffered);
    assert_eq!(s.push_final(br#"{"n":3}"#), Delivery::Buffered);
    let (_, d) = decode(&[f1]);
    let after = cursor_seq(d.last_event_id.as_deref().unwrap());
    let r = s.attach_resume(after).unwrap();
    assert!(r.end_after_initial, "a closed stream ends after replay");
    assert_eq!(decode(&r.initial).0, vec![r#"{"n":2}"#, r#"{"n":3}"#]);
}

#[test]
fn detach_of_a_superseded_connection_is_ignored() {
    let mut s = post_stream(true, 8);
    let a = s.attach_new();
    let b = s.attach_resume(Seq::START).unwrap();
    s.detach(a.conn, false);
    assert_eq!(s.connection(), Some(b.conn));
    assert_eq!(s.state(), StreamState::Open);
}

#[test]
fn gap_on_post_stream_answers_the_request_with_events_lost() {
    let mut s = post_stream(true, 2);
    let _ = s.attach_new();
    for i in 0..5 {
        let _ = s.push(format!("{{\"n\":{i}}}").as_bytes());
    }
    let r = s.attach_resume(Seq(1)).unwrap();
    assert!(r.end_after_initial);
    let (data, _) = decode(&r.initial);
    let v: serde_json::Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(v["id"], 1);
    assert_eq!(v["error"]["code"], code::EVENTS_LOST);
    assert_eq!(s.state(), StreamState::Closed(CloseReason::EventsLost));
    assert_eq!(
        s.push_final(b"{}"),
        Delivery::Dropped,
        "the late response is not sent after the error"
    );
}

#[test]
fn gap_on_get_stream_is_refused_with_events_lost() {
    let mut s =
        StreamCore::new(StreamId(1), Generation(1), StreamKind::Get, signer(), settings(true, 1));
    let _ = s.attach_new();
    let _ = s.push(b"{}");
    let _ = s.push(b"{}");
    assert_eq!(s.attach_resume(Seq::START).err(), Some(Rejection::EventsLost));
}

#[test]
fn cursor_ahead_of_stream_is_rejected() {
    let mut s = post_stream(true, 4);
    assert_eq!(s.attach_resume(Seq(3)).err(), Some(Rejection::CursorRejected));
}

#[test]
fn polling_close_sends_retry_and_keeps_the_stream() {
    let mut s = post_stream(true, 4);
    let a = s.attach_new();
    let (conn, retry) = s.close_for_polling().unwrap();
    assert_eq!(conn, a.conn);
    assert_eq!(retry.unwrap(), Bytes::from_static(b"retry: 500\n\n"));
    assert_eq!(s.state(), StreamState::Disconnected);
    assert_eq!(s.push_final(b"{}"), Delivery::Buffered);
}

#[test]
fn cancelled_stream_drops_later_messages() {
    let mut s = post_stream(true, 4);
    let a = s.attach_new();
    assert_eq!(s.close(CloseReason::Cancelled), Some(a.conn));
    assert_eq!(s.push_final(b"{}"), Delivery::Dropped);
    assert_eq!(s.stats().dropped_after_close, 1);
}

#[test]
fn retention_applies_only_to_a_closed_stream_without_a_connection_and_follows_its_last_delivery() {
    let mut s = post_stream(true, 8);
    let a = s.attach_new();
    assert_eq!(s.retention(), None, "open");
    let _ = s.push_final(b"{}");
    assert_eq!(s.retention(), None, "closed, its final frame still being written");
    s.detach(a.conn, true);
    assert_eq!(s.retention(), Some(Retention::Delivered));
    let r = s.attach_resume(Seq::START).unwrap();
    assert_eq!(s.retention(), None, "a resumed connection is attached: it never ends under it");
    s.detach(r.conn, false);
    assert_eq!(s.retention(), Some(Retention::Undelivered), "the resumed copy did not get through");
    let mut b = post_stream(true, 8);
    let c = b.attach_new();
    b.detach(c.conn, false);
    let _ = b.push_final(b"{}");
    assert_eq!(b.retention(), Some(Retention::Undelivered), "answered while disconnected");
    let mut cancelled = post_stream(true, 8);
    let _ = cancelled.attach_new();
    let _ = cancelled.close(CloseReason::Cancelled);
    assert_eq!(cancelled.retention(), Some(Retention::Delivered), "nothing is owed");
}

/// A POST stream whose window (2 events) lost the events after its priming cursor.
fn gap_stream() -> StreamCore {
    let mut s = post_stream(true, 2);
    let a = s.attach_new();
    s.detach(a.conn, false);
    for n in 0..4 {
        let _ = s.push(format!("{{\"n\":{n}}}").as_bytes());
    }
    s
}

#[test]
fn a_gap_on_an_answered_stream_sends_the_error_without_storing_a_second_answer() {
    let mut s = gap_stream();
    let _ = s.push_final(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    let (events, bytes) = (s.window.len().0, s.retained_bytes());
    for _ in 0..3 {
        let r = s.attach_resume(Seq::START).unwrap();
        assert!(r.end_after_initial);
        let (data, d) = decode(&r.initial);
        assert!(data[0].contains("-32005"), "{data:?}");
        assert_eq!(
            d.last_event_id, None,
            "the error carries no id: it is not an event of the stream"
        );
        s.detach(r.conn, true);
    }
    assert_eq!((s.window.len().0, s.retained_bytes()), (events, bytes), "nothing was appended");
    assert_eq!(s.state(), StreamState::Closed(CloseReason::Responded));
}

#[test]
fn a_gap_on_a_running_stream_answers_once_and_later_resumes_get_that_answer() {
    let mut s = gap_stream();
    let r = s.attach_resume(Seq::START).unwrap();
    assert_eq!(s.state(), StreamState::Closed(CloseReason::EventsLost));
    let (data, d) = decode(&r.initial);
    assert!(data[0].contains("-32005"));
    let answered = cursor_seq(d.last_event_id.as_deref().unwrap());
    s.detach(r.conn, true);
    let events = s.window.len().0;
    let again = s.attach_resume(Seq::START).unwrap();
    assert!(decode(&again.initial).0[0].contains("-32005"));
    assert_eq!(s.window.len().0, events, "not appended twice");
    s.detach(again.conn, true);
    // From the cursor just before the answer: the stored answer itself.
    let before = s.attach_resume(Seq(answered.0 - 1)).unwrap();
    assert_eq!(decode(&before.initial).0.len(), 1);
}

#[test]
fn a_gap_on_a_cancelled_stream_is_refused() {
    let mut s = gap_stream();
    let _ = s.close(CloseReason::Cancelled);
    assert_eq!(s.attach_resume(Seq::START).unwrap_err(), Rejection::EventsLost);
}

fn changes(s: &mut StreamCore) -> Vec<String> {
    s.poll_ledger()
        .into_iter()
        .flatten()
        .map(|c| match c {
            StreamChange::Event { seq, .. } => format!("event {}", seq.0),
            StreamChange::Record => "record".to_owned(),
        })
        .collect()
}

#[test]
fn the_ledger_gets_every_event_in_order_and_the_record_on_open_close_and_ack() {
    let mut s = post_stream(true, 8);
    assert_eq!(changes(&mut s), ["record"], "opened");
    let _ = s.attach_new();
    let _ = s.push(b"{}");
    let _ = s.push(b"{}");
    s.detach(1, false);
    let _ = s.attach_resume(Seq(1)).unwrap();
    let _ = s.push_final(b"{}");
    assert_eq!(changes(&mut s), ["event 1", "event 2", "record", "event 3", "record"]);
    assert_eq!(
        (s.acked(), s.newest(), s.close_reason()),
        (Seq(1), Seq(3), Some(CloseReason::Responded))
    );
    let _ = s.attach_resume(Seq(1)).unwrap();
    assert!(changes(&mut s).is_empty(), "an older acknowledgement changes nothing");
}

#[test]
fn a_cancelled_stream_records_its_close_and_a_replaced_one_leaves_it_to_its_session() {
    let mut s = post_stream(true, 8);
    let _ = changes(&mut s);
    let _ = s.close(CloseReason::Cancelled);
    assert_eq!(changes(&mut s), ["record"]);
    let mut g =
        StreamCore::new(StreamId(2), Generation(1), StreamKind::Get, signer(), settings(true, 8));
    let _ = changes(&mut g);
    let _ = g.close(CloseReason::Replaced);
    assert!(changes(&mut g).is_empty());
}

fn restored(
    events: &[u64],
    newest: u64,
    closed: Option<CloseReason>,
    kind: StreamKind,
) -> StreamCore {
    // Frames as the original stream encoded them (same signer, same cursors).
    let mut orig =
        StreamCore::new(StreamId(7), Generation(1), kind.clone(), signer(), settings(true, 8));
    let mut frames = Vec::new();
    for _ in 0..newest {
        let _ = orig.push(b"{\"n\":1}");
    }
    for c in orig.poll_ledger().into_iter().flatten() {
        if let StreamChange::Event { seq, frame } = c
            && events.contains(&seq.0)
        {
            frames.push((seq, frame));
        }
    }
    StreamCore::restore(
        StreamId(7),
        Generation(1),
        kind,
        signer(),
        settings(true, 8),
        RestoredStream {
            events: frames,
            newest: Seq(newest),
            acked: Seq(1),
            closed,
            first_seq: Seq(1 << 32),
        },
    )
}

#[test]
fn a_request_running_when_the_server_stopped_is_answered_with_the_restarted_error_on_resume() {
    let mut s = restored(&[1, 2], 2, None, StreamKind::Post { request: JsonRpcId::Number(1) });
    assert_eq!(
        changes(&mut s),
        [format!("event {}", 1u64 << 32), "record".to_owned()],
        "the error is recorded like any final event, numbered above anything sent before"
    );
    assert_eq!(s.close_reason(), Some(CloseReason::Responded));
    let a = s.attach_resume(Seq(2)).unwrap();
    assert!(a.end_after_initial);
    let (data, d) = decode(&a.initial);
    let v: serde_json::Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (serde_json::json!(1), serde_json::json!(code::SERVER_RESTARTED))
    );
    assert_eq!(cursor_seq(d.last_event_id.as_deref().unwrap()), Seq(1 << 32));
    let replay = s.attach_resume(Seq(1)).unwrap();
    assert_eq!(
        decode(&replay.initial).0.len(),
        2,
        "the missed event, then the error: exactly once each"
    );
    // A client holding an event that went out but never reached the copy (3, lost with the
    // last batch) gets the error too, not an empty stream, and no number is reused.
    let lost_tail = s.attach_resume(Seq(3)).unwrap();
    let (data, _) = decode(&lost_tail.initial);
    assert_eq!((data.len(), json_code(&data[0])), (1, code::SERVER_RESTARTED));
}

#[test]
fn a_restored_closed_stream_replays_and_a_restored_get_stream_stays_open() {
    let mut s = restored(
        &[1, 2, 3],
        3,
        Some(CloseReason::Responded),
        StreamKind::Post { request: JsonRpcId::Number(1) },
    );
    assert!(changes(&mut s).is_empty());
    assert_eq!(decode(&s.attach_resume(Seq(1)).unwrap().initial).0.len(), 2);
    let mut g = restored(&[1], 1, None, StreamKind::Get);
    assert_eq!(g.state(), StreamState::Disconnected);
    assert!(matches!(g.push(b"{}"), Delivery::Buffered));
    assert_eq!(
        g.newest(),
        Seq(1 << 32),
        "numbering goes on above anything sent before the restart"
    );
}

#[test]
fn with_hold_until_committed_no_event_reaches_a_connection_before_its_commit() {
    let mut st = settings(false, 8);
    st.hold_until_committed = true;
    let mut s = StreamCore::new(
        StreamId(7),
        Generation(1),
        StreamKind::Post { request: JsonRpcId::Number(1) },
        signer(),
        st,
    );
    let a = s.attach_new();
    assert_eq!(s.push(b"{}"), Delivery::Held);
    assert_eq!(s.push_final(b"{}"), Delivery::Held);
    s.detach(a.conn, false);
    let r = s.attach_resume(Seq::START).unwrap();
    assert!(r.initial.is_empty() && !r.end_after_initial, "a resume replays only committed events");
    let first = s.committed(Seq(1));
    assert!(matches!(&first[..], [Delivery::Write { conn, end: false, .. }] if *conn == r.conn));
    let last = s.committed(Seq(2));
    assert!(
        matches!(&last[..], [Delivery::Write { end: true, .. }]),
        "the final event ends the connection once committed"
    );
    assert!(s.committed(Seq(2)).is_empty(), "released once");
}

fn json_code(data: &str) -> i64 {
    serde_json::from_str::<serde_json::Value>(data).unwrap()["error"]["code"].as_i64().unwrap()
}

#[test]
fn held_events_evicted_before_their_commit_end_the_connection_instead_of_being_skipped() {
    let mut st = settings(false, 2);
    st.hold_until_committed = true;
    let mut s = StreamCore::new(StreamId(7), Generation(1), StreamKind::Get, signer(), st);
    let _ = s.attach_new();
    for _ in 0..4 {
        assert_eq!(s.push(b"{}"), Delivery::Held);
    }
    let d = s.committed(Seq(4));
    assert!(
        matches!(&d[..], [Delivery::Write { frame, end: true, .. }] if frame.is_empty()),
        "{d:?}"
    );
}

#[test]
fn a_restored_held_stream_releases_its_restarted_error_on_commit_and_ends() {
    let mut st = settings(true, 8);
    st.hold_until_committed = true;
    let kind = StreamKind::Post { request: JsonRpcId::Number(1) };
    let mut s = StreamCore::restore(
        StreamId(7),
        Generation(1),
        kind,
        signer(),
        st,
        RestoredStream {
            events: Vec::new(),
            newest: Seq(2),
            acked: Seq(0),
            closed: None,
            first_seq: Seq(1 << 32),
        },
    );
    let a = s.attach_resume(Seq(2)).unwrap();
    assert!(a.initial.is_empty() && !a.end_after_initial, "not released before its commit");
    let d = s.committed(Seq(1 << 32));
    assert!(
        matches!(&d[..], [Delivery::Write { end: true, .. }]),
        "released, and it ends the connection: {d:?}"
    );
}

#[test]
fn a_stream_answered_in_its_first_write_is_recorded_only_if_that_write_did_not_arrive() {
    for drained in [true, false] {
        let mut s = post_stream(true, 8);
        let a = s.attach_new();
        assert!(matches!(s.push_final(b"{}"), Delivery::Write { end: true, .. }));
        assert!(changes(&mut s).is_empty(), "held back while its connection writes it");
        s.detach(a.conn, drained);
        let after = changes(&mut s);
        if drained {
            assert!(
                after.is_empty() && !s.recorded(),
                "every frame arrived: nothing is owed after a restart"
            );
        } else {
            assert_eq!(
                after,
                ["record", "event 1", "record"],
                "not delivered: recorded now, in order"
            );
            assert!(s.recorded());
        }
    }
}

#[test]
fn a_stream_delivered_before_it_was_recorded_is_not_recorded_by_a_later_resume() {
    let mut s = post_stream(true, 8);
    let a = s.attach_new();
    assert!(matches!(s.push_final(b"{}"), Delivery::Write { end: true, .. }));
    s.detach(a.conn, true);
    assert!(s.settled() && changes(&mut s).is_empty());
    // The client resumes with the answer's own cursor (an acknowledgement) and goes away
    // before that connection drained.
    let r = s.attach_resume(s.newest()).unwrap();
    s.detach(r.conn, false);
    assert!(changes(&mut s).is_empty() && !s.recorded(), "nothing to record, ever");
    // One not delivered is recorded, and so is a later acknowledgement.
    let mut u = post_stream(true, 8);
    let b = u.attach_new();
    let _ = u.push_final(b"{}");
    u.detach(b.conn, false);
    assert!(!u.settled() && !changes(&mut u).is_empty());
    let r = u.attach_resume(u.newest()).unwrap();
    u.detach(r.conn, true);
    assert_eq!(changes(&mut u), ["record"], "the acknowledgement is recorded");
}

fn stream_in(mode: StreamMode, hold: bool) -> StreamCore {
    let s = StreamSettings { mode, hold_until_committed: hold, ..settings(true, 8) };
    StreamCore::new(
        StreamId(7),
        Generation(1),
        StreamKind::Post { request: JsonRpcId::Number(1) },
        signer(),
        s,
    )
}

fn frames_of(d: Delivery) -> Bytes {
    match d {
        Delivery::Write { frame, .. } => frame,
        other => panic!("expected a write, got {other:?}"),
    }
}

#[test]
fn a_shadow_stream_records_as_if_resumable_but_sends_no_id_priming_or_retry() {
    // Also under sync durability: the client of a shadow stream must not wait for the ledger.
    let mut s = stream_in(StreamMode::Shadow, true);
    let a = s.attach_new();
    assert!(a.initial.is_empty(), "no priming event");
    let f1 = frames_of(s.push(br#"{"n":1}"#));
    let f2 = frames_of(s.push_final(br#"{"n":2}"#));
    let wire = [f1, f2].concat();
    let text = String::from_utf8(wire.clone()).unwrap();
    assert!(!text.contains("id:") && !text.contains("retry:"), "{text}");
    assert_eq!(decode(&[Bytes::from(wire)]).0, vec![r#"{"n":1}"#, r#"{"n":2}"#]);
    let recorded: Vec<StreamChange> = s.poll_ledger().map(Iterator::collect).unwrap_or_default();
    let events: Vec<&Bytes> = recorded
        .iter()
        .filter_map(|c| if let StreamChange::Event { frame, .. } = c { Some(frame) } else { None })
        .collect();
    assert_eq!(events.len(), 2, "the ledger gets both events");
    assert!(events.iter().all(|f| f.starts_with(b"id: ")), "with their cursors");
    assert_eq!(s.shadow_sent().map(ShadowSent::total), Some(2));
    assert_eq!(
        s.attach_resume(Seq::START).unwrap_err(),
        Rejection::CursorRejected,
        "no cursor was ever handed out"
    );
    assert_eq!(s.close_for_polling(), None);
}

#[test]
fn a_plain_stream_keeps_no_window_and_records_nothing() {
    let mut s = stream_in(StreamMode::Plain, false);
    let a = s.attach_new();
    assert!(a.initial.is_empty());
    let f1 = frames_of(s.push(br#"{"n":1}"#));
    assert!(!String::from_utf8_lossy(&f1).contains("id:"));
    s.detach(a.conn, false);
    assert_eq!(s.push(br#"{"n":2}"#), Delivery::Dropped, "no connection: lost");
    assert_eq!(s.push_final(br#"{"n":3}"#), Delivery::Dropped);
    assert_eq!(s.stats().lost_unattached, 2);
    assert_eq!(s.retained_bytes(), 0);
    assert!(s.poll_ledger().is_none(), "nothing for the ledger");
    assert!(!s.recorded());
    assert_eq!(s.state(), StreamState::Closed(CloseReason::Responded));
}

#[test]
fn the_keepalive_is_due_after_a_quiet_interval_while_a_connection_is_attached() {
    let mut s = post_stream(true, 8);
    let a = s.attach_new();
    s.wrote(Tick(1_000));
    assert_eq!(s.poll_timeout(Tick(1_000)), Some(Tick(1_100)));
    assert_eq!(s.handle_timeout(Tick(1_099)), StreamDue::default());
    assert!(s.handle_timeout(Tick(1_100)).keepalive);
    s.wrote(Tick(1_100));
    assert_eq!(s.poll_timeout(Tick(1_100)), Some(Tick(1_200)), "a write moves it");
    s.detach(a.conn, false);
    assert_eq!(s.poll_timeout(Tick(1_150)), None, "no connection, not closed: no deadline");
}

#[test]
fn retention_counts_from_when_it_starts_applying_and_restarts_when_it_changes() {
    let mut s = post_stream(true, 8);
    let a = s.attach_new();
    let _ = s.push_final(br#"{"n":1}"#);
    assert_eq!(s.poll_timeout(Tick(10)), None, "closed, but its connection is still attached");
    s.detach(a.conn, false);
    assert_eq!(s.poll_timeout(Tick(20)), Some(Tick(5_020)), "undelivered: the long retention");
    assert_eq!(s.poll_timeout(Tick(3_000)), Some(Tick(5_020)), "asking again does not restart it");
    assert!(!s.handle_timeout(Tick(5_019)).retention_over);
    let r = s.attach_resume(Seq::START).unwrap();
    assert_eq!(s.poll_timeout(Tick(4_000)), None, "an attached connection cancels it");
    s.detach(r.conn, true);
    assert_eq!(
        s.poll_timeout(Tick(4_500)),
        Some(Tick(5_500)),
        "delivered in full: the short one, from now"
    );
    assert!(s.handle_timeout(Tick(5_500)).retention_over);
}

/// A stream answered in its first write, delivered, its retention begun at `since`.
fn settled_post_stream(prime: bool, since: Tick) -> StreamCore {
    settled_post_stream_answering(prime, since, br#"{"result":1}"#)
}

/// The same, answered with `json`.
fn settled_post_stream_answering(prime: bool, since: Tick, json: &[u8]) -> StreamCore {
    let mut s = post_stream(prime, 8);
    let a = s.attach_new();
    assert!(matches!(s.push_final(json), Delivery::Write { end: true, .. }));
    assert!(changes(&mut s).is_empty(), "held back while its connection writes it");
    assert!(s.settled_answer().is_none(), "its connection still writes it");
    s.wrote(Tick(3));
    s.detach(a.conn, true);
    assert!(s.settled_answer().is_none(), "its retention has not begun");
    let _ = s.poll_timeout(since);
    s
}

/// What [`post_stream`]'s streams are opened with, as [`StreamCore::from_settled`] takes it.
const OPENED_WITH: (WindowLimits, Option<u64>, StreamTiming) =
    (WindowLimits { max_events: 8, max_bytes: 1 << 20 }, Some(500), TIMING);

#[test]
fn a_settled_answer_keeps_a_small_json_alone_and_a_large_answer_as_its_frame() {
    let large = format!(r#"{{"result":"{}"}}"#, "x".repeat(KeptAnswerBytes::COPY_AT_MOST));
    for (json, copied) in [(&br#"{"result":1}"#[..], true), (large.as_bytes(), false)] {
        let s = settled_post_stream_answering(true, Tick(5), json);
        let frame = s.window.only_first().expect("its answer").clone();
        let kept = s.settled_answer().expect("settled, in its retention");
        match &kept.answer {
            KeptAnswerBytes::Json(j) => assert!(copied && &j[..] == json, "the JSON alone"),
            KeptAnswerBytes::Frame(f) => assert!(!copied && **f == frame, "the frame as it is"),
        }
        let r = StreamCore::from_settled(StreamId(7), Generation(1), signer(), OPENED_WITH, kept);
        assert_eq!(r.window.only_first(), Some(&frame), "the same bytes, cursor and all");
    }
}

#[test]
fn a_settled_stream_is_rebuilt_the_same_from_its_answer_and_replays_it() {
    for prime in [true, false] {
        let s = settled_post_stream(prime, Tick(5));
        let kept = s.settled_answer().expect("settled, in its retention");
        let mut r =
            StreamCore::from_settled(StreamId(7), Generation(1), signer(), OPENED_WITH, kept);
        assert_eq!(format!("{r:?}"), format!("{s:?}"), "prime {prime}: the same core");
        assert_eq!(r.poll_timeout(Tick(500)), Some(Tick(1_005)), "its retention runs on");
        let resumed = r.attach_resume(Seq::START).expect("the priming cursor resumes");
        assert!(resumed.end_after_initial, "closed: the answer, then the end");
        assert_eq!(decode(&resumed.initial).0, [r#"{"result":1}"#]);
        assert!(r.settled_answer().is_none(), "resumed: a connection is attached");
    }
}

#[test]
fn only_a_settled_stream_in_its_retention_gives_its_answer() {
    // Not delivered: it is recorded, and kept as it is.
    let mut u = post_stream(true, 8);
    let a = u.attach_new();
    let _ = u.push_final(b"{}");
    u.detach(a.conn, false);
    let _ = u.poll_timeout(Tick(1));
    assert!(u.settled_answer().is_none(), "undelivered");
    // Delivered, then resumed and delivered again: more than its first connection.
    let mut s = settled_post_stream(true, Tick(1));
    let r = s.attach_resume(Seq::START).unwrap();
    s.detach(r.conn, true);
    let _ = s.poll_timeout(Tick(2));
    assert!(s.settled_answer().is_none(), "a resumed stream");
    // A notification before the answer: two events.
    let mut n = post_stream(true, 8);
    let a = n.attach_new();
    let _ = n.push(b"{}");
    let _ = n.push_final(b"{}");
    n.detach(a.conn, true);
    let _ = n.poll_timeout(Tick(1));
    assert!(n.settled_answer().is_none(), "two events");
    // A closed GET stream (replaced) answers nothing.
    let mut g =
        StreamCore::new(StreamId(8), Generation(1), StreamKind::Get, signer(), settings(true, 8));
    let a = g.attach_new();
    let _ = g.close(CloseReason::Replaced);
    g.detach(a.conn, true);
    let _ = g.poll_timeout(Tick(1));
    assert!(g.settled_answer().is_none(), "a GET stream");
    // A plain stream is never resumed.
    let mut p = stream_in(StreamMode::Plain, false);
    let a = p.attach_new();
    let _ = p.push_final(b"{}");
    p.detach(a.conn, true);
    let _ = p.poll_timeout(Tick(1));
    assert!(p.settled_answer().is_none(), "a plain stream");
}

proptest::proptest! {
    #[test]
    fn a_stream_answered_at_once_without_a_core_writes_keeps_and_rebuilds_what_its_core_would(
        prime in proptest::bool::ANY,
        retry_ms in proptest::option::of(0u64..100_000),
        // Past KeptAnswerBytes::COPY_AT_MOST too: the frame kept as it is.
        text in "[ -~]{0,1100}",
        now in 0u64..1 << 40,
    ) {
        let settings = StreamSettings { retry_ms, ..settings(prime, 8) };
        let json = Bytes::from(serde_json::json!({"result": {"text": text}}).to_string());
        let open = || {
            let mut core = StreamCore::new(
                StreamId(7),
                Generation(1),
                StreamKind::Post { request: JsonRpcId::Number(1) },
                signer(),
                settings.clone(),
            );
            let mut att = core.attach_new();
            let Delivery::Write { frame, .. } = core.push_final(&json) else { panic!("written") };
            att.initial.push(frame);
            (core, att)
        };
        let at_once = || {
            AnsweredAtOnce::new(
                StreamId(7),
                Generation(1),
                JsonRpcId::Number(1),
                &signer(),
                &settings,
                &json,
            )
        };
        // The first connection's frames and the window's bytes.
        let (core, att) = open();
        let (a, initial) = at_once();
        proptest::prop_assert_eq!(att.conn, AnsweredAtOnce::CONN);
        proptest::prop_assert_eq!(&att.initial[..], &initial[..]);
        proptest::prop_assert_eq!(core.retained_bytes(), a.retained_bytes());
        proptest::prop_assert_eq!(core.stats(), SettledAnswer::COUNTERS, "what its shell counts");
        // Rebuilt while its connection writes: the same core.
        let rebuilt = a.into_core(StreamId(7), Generation(1), signer(), settings.clone());
        proptest::prop_assert_eq!(format!("{core:?}"), format!("{rebuilt:?}"));
        // Its connection returned every frame: the same answer kept, the same retention end.
        let (mut core, _) = open();
        core.detach(AnsweredAtOnce::CONN, true);
        let until = core.poll_timeout(Tick(now));
        let kept = core.settled_answer().expect("settled");
        let (settled, end) = at_once().0.settled(Tick(now), TIMING);
        proptest::prop_assert_eq!(format!("{kept:?}"), format!("{settled:?}"));
        proptest::prop_assert_eq!(until, Some(end));
    }
}
