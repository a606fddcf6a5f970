use super::*;

fn limits() -> SessionLimits {
    SessionLimits {
        idle_ttl_ms: 1_000,
        max_in_flight: 3,
        max_retained_streams: 2,
        max_retained_bytes: 100,
        client_request_timeout_ms: 300,
        park_after_ms: u64::MAX,
        idle_ends_in_ledger: false,
        hibernate_after_ms: u64::MAX,
    }
}

fn core() -> SessionCore<u32, &'static str, &'static str> {
    SessionCore::new(ProtocolVersion::LATEST, Generation(1), limits(), Tick(0))
}

fn id(n: i64) -> JsonRpcId {
    JsonRpcId::Number(n)
}

#[test]
fn duplicate_in_flight_id_is_refused_and_original_kept() {
    let mut s = core();
    s.begin_request(&id(1), 10).unwrap();
    assert_eq!(s.begin_request(&id(1), 11), Err(Rejection::RequestIdInFlight(id(1))));
    assert_eq!(s.in_flight_mut(&id(1)).unwrap().handle, 10, "original untouched");
    // A string id "1" is a different id.
    s.begin_request(&JsonRpcId::String("1".into()), 12).unwrap();
}

#[test]
fn answered_ids_are_forgotten() {
    let mut s = core();
    s.begin_request(&id(1), 0).unwrap();
    assert!(s.end_request(&id(1), Tick(0)).is_some());
    s.begin_request(&id(1), 0).unwrap();
    assert_eq!(s.in_flight_len(), 1);
}

#[test]
fn in_flight_limit_is_overload() {
    let mut s = core();
    for i in 0..3 {
        s.begin_request(&id(i), 0).unwrap();
    }
    assert_eq!(s.begin_request(&id(9), 0), Err(Rejection::Overloaded(Overload::InFlight)));
}

#[test]
fn idle_session_expires_and_then_refuses_everything() {
    let mut s = core();
    s.touch(Tick(500));
    assert_eq!(s.poll_timeout(), Some(Tick(1_500)));
    assert!(!s.handle_timeout(Tick(1_499)).expired);
    assert!(s.handle_timeout(Tick(1_500)).expired);
    assert_eq!(s.state(), SessionState::Expired);
    assert_eq!(s.check_active(), Err(Rejection::SessionNotFound));
    assert_eq!(s.begin_request(&id(1), 0), Err(Rejection::SessionNotFound));
}

#[test]
fn attached_connection_keeps_session_alive() {
    let mut s = core();
    s.connection_delta(Tick(0), true);
    assert_eq!(s.idle_deadline(), None);
    assert_eq!(
        s.poll_timeout(),
        Some(Tick(500)),
        "only the ledger refresh is due, at half the TTL"
    );
    assert!(!s.handle_timeout(Tick(1_000_000)).expired);
    s.connection_delta(Tick(2_000_000), false);
    assert_eq!(s.idle_deadline(), Some(Tick(2_001_000)));
}

#[test]
fn request_in_flight_keeps_session_alive_and_its_end_restarts_the_idle_clock() {
    let mut s = core();
    s.begin_request(&id(1), 0).unwrap();
    assert_eq!(s.idle_deadline(), None, "a running tool is not idleness");
    assert!(!s.handle_timeout(Tick(1_000_000)).expired);
    s.end_request(&id(1), Tick(2_000_000)).unwrap();
    assert_eq!(
        s.idle_deadline(),
        Some(Tick(2_001_000)),
        "the client gets a full TTL to collect the response"
    );
}

#[test]
fn client_request_times_out_at_its_deadline_and_is_forgotten() {
    let mut s = core();
    s.begin_request(&id(1), 0).unwrap();
    let asked = s.begin_client_request(&id(1), "elicitation/create", Tick(100), "reply").unwrap();
    assert_eq!(
        s.poll_timeout(),
        Some(Tick(400)),
        "the deadline wakes the shell although the session is busy"
    );
    assert!(s.handle_timeout(Tick(399)).timed_out.is_empty());
    let due = s.handle_timeout(Tick(400));
    assert!(!due.expired);
    assert_eq!(due.timed_out.len(), 1);
    let (sent_as, req) = &due.timed_out[0];
    assert_eq!((sent_as, &*req.method, req.handle), (&asked, "elicitation/create", "reply"));
    assert!(s.answer_client_request(&asked).is_none(), "a late answer finds nothing");
}

#[test]
fn the_client_requests_waiting_are_those_neither_answered_nor_timed_out() {
    let mut s = core();
    s.begin_request(&id(1), 0).unwrap();
    let first = s.begin_client_request(&id(1), "roots/list", Tick(0), "r").unwrap();
    let second = s.begin_client_request(&id(1), "roots/list", Tick(200), "r").unwrap();
    let third = s.begin_client_request(&id(1), "roots/list", Tick(200), "r").unwrap();
    s.answer_client_request(&second).unwrap();
    assert_eq!(s.handle_timeout(Tick(300)).timed_out.len(), 1, "the first's deadline");
    assert_eq!(s.client_requests_waiting(), vec![third], "not {first} nor {second}");
}

#[test]
fn session_waiting_only_on_an_absent_client_expires_after_the_deadline_and_the_ttl() {
    let mut s = core();
    s.begin_request(&id(1), 0).unwrap();
    s.begin_client_request(&id(1), "sampling/createMessage", Tick(0), "reply").unwrap();
    let due = s.handle_timeout(Tick(300));
    assert_eq!(due.timed_out.len(), 1);
    // The tool gets its error and ends; the session is idle from then on.
    s.end_request(&id(1), Tick(301)).unwrap();
    assert_eq!(s.poll_timeout(), Some(Tick(1_301)));
    assert!(s.handle_timeout(Tick(1_301)).expired);
}

#[test]
fn client_requests_are_refused_for_an_ended_origin_and_past_the_bound_and_end_with_it() {
    let mut s = core();
    assert_eq!(
        s.begin_client_request(&id(1), "roots/list", Tick(0), "r").unwrap_err().1,
        ClientRequestRefused::OriginEnded
    );
    s.begin_request(&id(1), 0).unwrap();
    for _ in 0..3 {
        s.begin_client_request(&id(1), "roots/list", Tick(0), "r").unwrap();
    }
    assert_eq!(
        s.begin_client_request(&id(1), "roots/list", Tick(0), "r").unwrap_err().1,
        ClientRequestRefused::TooMany
    );
    s.end_request(&id(1), Tick(1)).unwrap();
    assert_eq!(s.client_requests_len(), 0, "a finished tool waits on nothing");
}

#[test]
fn client_request_ids_are_never_reused() {
    let mut s = core();
    s.begin_request(&id(1), 0).unwrap();
    let a = s.begin_client_request(&id(1), "roots/list", Tick(0), "r").unwrap();
    s.answer_client_request(&a).unwrap();
    let b = s.begin_client_request(&id(1), "roots/list", Tick(0), "r").unwrap();
    assert_ne!(a, b);
}

#[test]
fn second_get_stream_replaces_the_first() {
    let mut s = core();
    let (a, old) = s.open_get_stream("first");
    assert!(old.is_none());
    let (b, old) = s.open_get_stream("second");
    assert_ne!(a, b);
    assert_eq!(old.unwrap().handle, "first");
    assert_eq!(s.get_stream().unwrap(), (b, &"second"));
    assert!(s.stream(a).is_none());
}

fn post_streams(s: &mut SessionCore<u32, &'static str, &'static str>, n: i64) -> Vec<StreamId> {
    (0..n)
        .map(|i| {
            s.begin_request(&id(i), 0).unwrap();
            s.open_post_stream(&id(i), "p")
        })
        .collect()
}

#[test]
fn closed_streams_are_retained_up_to_the_count_limit() {
    let mut s = core();
    let ids = post_streams(&mut s, 3);
    assert!(s.stream_closed(ids[0], 1).is_empty());
    assert!(s.stream_closed(ids[1], 1).is_empty());
    let evicted = s.stream_closed(ids[2], 1);
    assert_eq!(evicted.len(), 1);
    assert_eq!(evicted[0].request, Some(id(0)));
    assert!(s.stream(ids[0]).is_none());
    assert!(s.stream(ids[2]).is_some());
    assert_eq!(s.retained_bytes(), 2);
}

#[test]
fn closed_streams_are_retained_up_to_the_byte_limit_and_the_newest_always() {
    let mut s = core();
    let ids = post_streams(&mut s, 3);
    assert!(s.stream_closed(ids[0], 60).is_empty());
    let evicted = s.stream_closed(ids[1], 60);
    assert_eq!(
        evicted.iter().map(|e| e.request.clone()).collect::<Vec<_>>(),
        vec![Some(id(0))],
        "120 > 100 bytes"
    );
    assert_eq!(s.retained_bytes(), 60);
    // A single stream over the bound is still kept: it may hold an undelivered response.
    let evicted = s.stream_closed(ids[2], 500);
    assert_eq!(evicted.len(), 1);
    assert!(s.stream(ids[2]).is_some());
    assert_eq!(s.retained_bytes(), 500);
}

#[test]
fn removing_a_retained_stream_releases_its_bytes() {
    let mut s = core();
    let ids = post_streams(&mut s, 1);
    let _ = s.stream_closed(ids[0], 42);
    assert_eq!(s.retained_bytes(), 42);
    s.remove_stream(ids[0]).unwrap();
    assert_eq!(s.retained_bytes(), 0);
}

#[test]
fn stream_ids_where_names_the_streams_whose_shell_data_the_filter_takes() {
    let mut s = core();
    let posts = post_streams(&mut s, 2);
    let (get, _) = s.open_get_stream("g");
    let mut all: Vec<_> = s.stream_ids_where(|_| true).collect();
    all.sort();
    assert_eq!(all, [posts[0], posts[1], get]);
    assert_eq!(s.stream_ids_where(|h| *h == "g").collect::<Vec<_>>(), [get]);
    assert_eq!(s.stream_ids_where(|_| false).count(), 0);
}

#[test]
fn events_lost_ends_the_request_of_that_stream_only() {
    let mut s = core();
    let ids = post_streams(&mut s, 2);
    s.begin_client_request(&id(0), "elicitation/create", Tick(0), "r").unwrap();
    let ended = s.events_lost(ids[0], Tick(5)).expect("request 0 ends");
    assert_eq!(ended.stream, Some(ids[0]));
    assert_eq!(s.in_flight_len(), 1);
    assert_eq!(s.client_requests_len(), 0);
    s.begin_request(&id(0), 0).expect("its id is free again");
    assert!(
        s.events_lost(ids[0], Tick(6)).is_none(),
        "the new request under that id has no stream yet"
    );
}

#[test]
fn delete_then_terminate_hands_back_everything() {
    let mut s = core();
    s.begin_request(&id(1), 5).unwrap();
    s.open_post_stream(&id(1), "p");
    s.request_delete().unwrap();
    assert_eq!(s.check_active(), Err(Rejection::SessionNotFound));
    let (reqs, streams) = s.terminate();
    assert_eq!((reqs.len(), streams.len()), (1, 1));
    assert_eq!(s.state(), SessionState::Terminated);
}

#[test]
fn the_record_is_written_at_start_on_a_log_level_change_and_coarsely_on_use() {
    let mut s = core();
    assert_eq!(s.poll_ledger(Tick(0)), Some(Tick(0)), "a new session is recorded");
    assert_eq!(s.poll_ledger(Tick(0)), None);
    s.touch(Tick(50));
    assert_eq!(s.poll_ledger(Tick(50)), None, "a use within ttl/16 is not written");
    s.touch(Tick(70));
    assert_eq!(s.poll_ledger(Tick(70)), Some(Tick(70)));
    s.set_log_level(LogLevel::parse("info").unwrap());
    assert_eq!(s.poll_ledger(Tick(71)), Some(Tick(70)), "a new log level is written at once");
    s.set_log_level(LogLevel::parse("info").unwrap());
    assert_eq!(s.poll_ledger(Tick(72)), None, "the same level again changes nothing");
}

#[test]
fn a_busy_session_refreshes_its_record_before_it_could_expire_in_the_ledger() {
    let mut s = core();
    let _ = s.poll_ledger(Tick(0));
    s.connection_delta(Tick(0), true);
    assert_eq!(s.poll_timeout(), Some(Tick(500)), "the timer wakes at half the TTL");
    assert_eq!(s.poll_ledger(Tick(499)), None);
    assert_eq!(s.poll_ledger(Tick(500)), Some(Tick(500)), "in use counts as used now");
    assert_eq!(s.poll_timeout(), Some(Tick(1000)));
    s.connection_delta(Tick(600), false);
    assert_eq!(s.poll_timeout(), Some(Tick(1600)), "idle again: only the expiry is due");
}

#[test]
fn a_new_incarnation_never_reuses_an_earlier_ones_stream_or_client_request_ids() {
    let mut first = core();
    let sid = first.open_post_stream(&id(1), "a");
    let mut second: SessionCore<u32, &'static str, &'static str> =
        SessionCore::incarnate(ProtocolVersion::LATEST, Generation(1), limits(), Tick(0), 1);
    let _ = second.restore_stream(sid, Some(id(1)), Some(10), "a");
    let next = second.open_post_stream(&id(2), "b");
    assert!(next.0 > sid.0 && next.0 >= 1 << 32, "{next:?}");
    second.begin_request(&id(3), 0).unwrap();
    let Ok(JsonRpcId::Number(cr)) = second.begin_client_request(&id(3), "m", Tick(0), "p") else {
        panic!()
    };
    assert!(cr > 1 << 32);
}

#[test]
fn a_stream_taken_over_from_a_later_life_never_moves_this_lifes_numbering_into_its_range() {
    // Life 1 here; life 3 was another host's, gone, and its stream 3<<32 + 1 is taken over:
    // its stream 3<<32 + 2 may still be in the ledger, so this life never numbers there.
    let mut s: SessionCore<u32, &'static str, &'static str> =
        SessionCore::incarnate(ProtocolVersion::LATEST, Generation(1), limits(), Tick(0), 1);
    let taken = StreamId((3 << 32) + 1);
    let _ = s.restore_stream(taken, Some(id(1)), Some(10), "taken");
    let next = s.open_post_stream(&id(2), "b");
    assert_eq!(next.0 >> 32, 1, "{next:?}");
    assert!(s.stream(taken).is_some());
}

#[test]
fn a_restored_get_stream_is_the_sessions_get_stream_and_closed_ones_count_against_retention() {
    let mut s = core();
    let _ = s.restore_stream(StreamId(1), None, None, "get");
    assert_eq!(s.get_stream().map(|(id, h)| (id, *h)), Some((StreamId(1), "get")));
    let replaced = s.restore_stream(StreamId(4), None, None, "newer get");
    assert_eq!(
        replaced.iter().map(|e| e.handle).collect::<Vec<_>>(),
        ["get"],
        "an older GET stream is handed back to be forgotten"
    );
    assert_eq!(s.get_stream().map(|(id, _)| id), Some(StreamId(4)));
    assert!(s.restore_stream(StreamId(2), Some(id(1)), Some(60), "a").is_empty());
    let evicted = s.restore_stream(StreamId(3), Some(id(2)), Some(60), "b");
    assert_eq!(
        evicted.iter().map(|e| e.handle).collect::<Vec<_>>(),
        ["a"],
        "over max_retained_bytes the oldest goes"
    );
}

#[test]
fn an_idle_session_parks_before_it_expires_and_a_busy_one_never() {
    let mut s = SessionCore::<u32, &'static str, &'static str>::new(
        ProtocolVersion::LATEST,
        Generation(1),
        SessionLimits { park_after_ms: 200, ..limits() },
        Tick(0),
    );
    let _ = s.poll_ledger(Tick(0));
    assert_eq!(s.poll_timeout(), Some(Tick(200)));
    let due = s.handle_timeout(Tick(200));
    assert!(due.park && !due.expired);
    assert_eq!(s.state(), SessionState::Active, "parking leaves the session active");
    s.begin_request(&id(1), 0).unwrap();
    assert_eq!(s.park_deadline(), None, "a request in flight is not idleness");
    assert!(!s.handle_timeout(Tick(10_000)).park);
    let never = SessionCore::<u32, &'static str, &'static str>::new(
        ProtocolVersion::LATEST,
        Generation(1),
        SessionLimits { park_after_ms: 1_000, ..limits() },
        Tick(0),
    );
    assert_eq!(never.park_deadline(), None, "parking at or after the TTL never happens");
}

#[test]
fn on_a_shared_ledger_a_session_past_both_its_park_time_and_its_ttl_parks_and_never_expires_here() {
    // A host paused past the session's idle TTL: another host may have used the session
    // since; the ledger's record, not this host's clock, ends it.
    let shared = SessionLimits { park_after_ms: 200, idle_ends_in_ledger: true, ..limits() };
    let mut s = SessionCore::<u32, &'static str, &'static str>::new(
        ProtocolVersion::LATEST,
        Generation(1),
        shared,
        Tick(0),
    );
    let _ = s.poll_ledger(Tick(0));
    let due = s.handle_timeout(Tick(1_000_000));
    assert!(due.park && !due.expired, "{due:?}");
    assert_eq!(s.state(), SessionState::Active);
    // On a ledger of its own the same session expires.
    let mut alone = SessionCore::<u32, &'static str, &'static str>::new(
        ProtocolVersion::LATEST,
        Generation(1),
        SessionLimits { park_after_ms: 200, ..limits() },
        Tick(0),
    );
    let _ = alone.poll_ledger(Tick(0));
    assert!(alone.handle_timeout(Tick(1_000_000)).expired);
}

fn sleepy() -> SessionLimits {
    SessionLimits { hibernate_after_ms: 100, park_after_ms: 500, ..limits() }
}

/// Runs one request (with a client request of its own and a stream it then drops) through
/// `s` at `at`, so its numbering moves on.
fn one_request(s: &mut SessionCore<u32, &'static str, &'static str>, n: i64, at: Tick) {
    s.touch(at);
    s.begin_request(&id(n), 0).unwrap();
    let sid = s.open_post_stream(&id(n), "stream");
    let _ = s.begin_client_request(&id(n), "roots/list", at, "route").unwrap();
    let _ = s.handle_timeout(at.plus_ms(300));
    s.end_request(&id(n), at);
    let _ = s.stream_closed(sid, 0);
    let _ = s.remove_stream(sid);
}

#[test]
fn a_sleeping_session_takes_a_use_only_while_its_record_is_not_due() {
    // TTL 1,000 ms: a record is due once the last use is more than 62 ms past the recorded one.
    let mut s = SessionCore::<u32, &'static str, &'static str>::new(
        ProtocolVersion::LATEST,
        Generation(1),
        sleepy(),
        Tick(0),
    );
    assert_eq!(s.poll_ledger(Tick(0)), Some(Tick(0)), "its first record");
    let (mut sleeping, _) = s.sleep().expect("nothing is open");
    assert!(sleeping.try_take_use(Tick(40), 1_000));
    assert!(sleeping.try_take_use(Tick(20), 1_000));
    let then = SessionCore::<u32, &'static str, &'static str>::wake(sleeping, sleepy(), Tick(20));
    assert_eq!(then.last_activity(), Tick(40), "an earlier time does not move it back");
    assert!(sleeping.try_take_use(Tick(62), 1_000));
    let mut woken =
        SessionCore::<u32, &'static str, &'static str>::wake(sleeping, sleepy(), Tick(62));
    assert_eq!(woken.last_activity(), Tick(62), "the uses it took count");
    assert_eq!(woken.poll_ledger(Tick(62)), None, "and need no record yet");
    assert!(!sleeping.try_take_use(Tick(63), 1_000), "its record would be due: it wakes instead");
    let mut woken =
        SessionCore::<u32, &'static str, &'static str>::wake(sleeping, sleepy(), Tick(63));
    assert_eq!(woken.last_activity(), Tick(62), "a use refused is not counted");
    woken.touch(Tick(63));
    assert_eq!(woken.poll_ledger(Tick(63)), Some(Tick(63)), "the awake core records that use");
}

#[test]
fn a_sleeping_sessions_record_is_current_until_a_use_past_the_slack_or_a_log_level_moves_it() {
    let new = || {
        SessionCore::<u32, &'static str, &'static str>::new(
            ProtocolVersion::LATEST,
            Generation(1),
            sleepy(),
            Tick(0),
        )
    };
    let s = new();
    assert!(
        !s.sleep().unwrap().0.record_is_current_within(10),
        "a new session's first record is due"
    );
    let mut s = new();
    assert_eq!(s.poll_ledger(Tick(0)), Some(Tick(0)));
    let (mut sleeping, _) = s.sleep().unwrap();
    assert!(sleeping.record_is_current_within(0), "as its first record states it");
    assert!(sleeping.try_take_use(Tick(10), 1_000));
    assert!(sleeping.record_is_current_within(10), "a use within the slack");
    assert!(!sleeping.record_is_current_within(9), "a use past it");
    let mut s = new();
    assert_eq!(s.poll_ledger(Tick(0)), Some(Tick(0)));
    s.set_log_level(LogLevel::Debug);
    assert!(!s.sleep().unwrap().0.record_is_current_within(10), "its log level changed since");
}

#[test]
fn an_idle_session_with_empty_tables_hibernates_and_wakes_where_it_stopped() {
    let mut s = SessionCore::new(ProtocolVersion::LATEST, Generation(1), sleepy(), Tick(0));
    one_request(&mut s, 1, Tick(10));
    s.set_log_level(LogLevel::Warning);
    let _ = s.poll_ledger(Tick(30));
    assert_eq!(s.hibernate_deadline(), Some(Tick(110)), "idle since the last use");
    assert_eq!(s.poll_timeout(), Some(Tick(110)), "the earliest deadline is the hibernation");
    assert!(!s.handle_timeout(Tick(109)).hibernate);
    let due = s.handle_timeout(Tick(110));
    assert!(due.hibernate && !due.park && !due.expired, "{due:?}");
    let (sleeping, wake_at) = s.sleep().expect("nothing is open");
    assert_eq!(wake_at, Tick(510), "it parks before it expires");
    let never_parks =
        SessionCore::<u32, &'static str, &'static str>::wake(sleeping, limits(), Tick(600));
    assert_eq!(never_parks.sleep().map(|(_, t)| t), Some(Tick(1_010)), "or expires");
    let mut woken = SessionCore::wake(sleeping, sleepy(), Tick(700));
    assert_eq!(woken.last_activity(), Tick(10), "a wake is not a use");
    assert_eq!(woken.idle_deadline(), s.idle_deadline(), "it expires when it would have");
    assert_eq!(woken.log_level(), Some(LogLevel::Warning));
    assert_eq!(woken.poll_ledger(Tick(700)), None, "its record is as written");
    assert_eq!(woken.hibernate_deadline(), Some(Tick(800)), "awake for its time after a wake");
    // It numbers its next stream and client request as the session that never slept.
    one_request(&mut s, 2, Tick(720));
    one_request(&mut woken, 2, Tick(720));
    let (a, b) = (s.open_post_stream(&id(3), "x"), woken.open_post_stream(&id(3), "x"));
    assert_eq!(a, b);
    s.begin_request(&id(4), 0).unwrap();
    woken.begin_request(&id(4), 0).unwrap();
    assert_eq!(
        s.begin_client_request(&id(4), "ping", Tick(730), "r").unwrap(),
        woken.begin_client_request(&id(4), "ping", Tick(730), "r").unwrap()
    );
}

#[test]
fn a_session_holding_a_stream_a_connection_or_a_request_never_hibernates() {
    let mut s = SessionCore::new(ProtocolVersion::LATEST, Generation(1), sleepy(), Tick(0));
    let sid = s.open_post_stream(&id(1), "kept");
    let _ = s.stream_closed(sid, 10);
    assert_eq!((s.hibernate_deadline(), s.sleep()), (None, None), "a retained closed stream");
    assert!(!s.handle_timeout(Tick(400)).hibernate);
    let _ = s.remove_stream(sid);
    assert!(s.sleep().is_some());
    s.connection_delta(Tick(1), true);
    assert_eq!((s.hibernate_deadline(), s.sleep()), (None, None), "an attached connection");
    s.connection_delta(Tick(2), false);
    s.begin_request(&id(2), 0).unwrap();
    let _ = s.begin_client_request(&id(2), "ping", Tick(2), "r").unwrap();
    assert_eq!((s.hibernate_deadline(), s.sleep()), (None, None), "a request asking its client");
}

#[test]
fn a_refused_hibernation_waits_its_time_again() {
    let mut s = SessionCore::<u32, &'static str, &'static str>::new(
        ProtocolVersion::LATEST,
        Generation(1),
        sleepy(),
        Tick(0),
    );
    assert!(s.handle_timeout(Tick(100)).hibernate);
    s.stay_awake(Tick(100));
    assert_eq!(s.hibernate_deadline(), Some(Tick(200)));
    assert!(!s.handle_timeout(Tick(150)).hibernate);
    let never = SessionCore::<u32, &'static str, &'static str>::new(
        ProtocolVersion::LATEST,
        Generation(1),
        limits(),
        Tick(0),
    );
    assert_eq!(never.poll_timeout(), never.idle_deadline(), "u64::MAX: never");
}

#[test]
fn a_session_that_held_a_stream_says_so_after_the_stream_and_across_a_sleep() {
    type Core = SessionCore<u32, &'static str, &'static str>;
    let mut s = Core::new(ProtocolVersion::LATEST, Generation(1), sleepy(), Tick(0));
    assert!(!s.held_streams(), "a new session's first life: no index of its streams");
    let (sid, _) = s.open_get_stream("get");
    assert!(s.held_streams());
    let _ = s.remove_stream(sid);
    assert!(s.held_streams(), "its index may still be written to");
    let (sleeping, _) = s.sleep().expect("nothing is open");
    let woken = Core::wake(sleeping, sleepy(), Tick(5));
    assert!(woken.held_streams(), "kept across a hibernation");
    let never = Core::new(ProtocolVersion::LATEST, Generation(1), sleepy(), Tick(0));
    let (sleeping, _) = never.sleep().expect("nothing is open");
    assert!(!Core::wake(sleeping, sleepy(), Tick(5)).held_streams());
    let revived = Core::incarnate(ProtocolVersion::LATEST, Generation(1), sleepy(), Tick(0), 1);
    assert!(revived.held_streams(), "an earlier life may have indexed streams");
    let mut restored = core();
    let _ = restored.restore_stream(StreamId(1), None, None, "restored");
    assert!(restored.held_streams(), "a stream of this life restored");
}
