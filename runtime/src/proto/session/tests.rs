use super::*;

fn limits() -> SessionLimits {
    SessionLimits { idle_ttl_ms: 1_000, max_in_flight: 3, max_retained_streams: 2 }
}

fn core() -> SessionCore<u32, &'static str> {
    SessionCore::new(SessionId::parse("s").unwrap(), None, ProtocolVersion::LATEST, Generation(1), limits(), Tick(0))
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
    assert!(matches!(s.begin_request(&id(9), 0), Err(Rejection::Overloaded { .. })));
}

#[test]
fn idle_session_expires_and_then_refuses_everything() {
    let mut s = core();
    s.touch(Tick(500));
    assert!(!s.handle_timeout(Tick(1_499)));
    assert!(s.handle_timeout(Tick(1_500)));
    assert_eq!(s.state(), SessionState::Expired);
    assert_eq!(s.check_active(), Err(Rejection::SessionNotFound));
    assert_eq!(s.begin_request(&id(1), 0), Err(Rejection::SessionNotFound));
}

#[test]
fn attached_connection_keeps_session_alive() {
    let mut s = core();
    s.connection_delta(Tick(0), true);
    assert_eq!(s.idle_deadline(), None);
    assert!(!s.handle_timeout(Tick(1_000_000)));
    s.connection_delta(Tick(2_000_000), false);
    assert_eq!(s.idle_deadline(), Some(Tick(2_001_000)));
}

#[test]
fn request_in_flight_keeps_session_alive_and_its_end_restarts_the_idle_clock() {
    let mut s = core();
    s.begin_request(&id(1), 0).unwrap();
    assert_eq!(s.idle_deadline(), None, "a running tool is not idleness");
    assert!(!s.handle_timeout(Tick(1_000_000)));
    s.end_request(&id(1), Tick(2_000_000)).unwrap();
    assert_eq!(s.idle_deadline(), Some(Tick(2_001_000)), "the client gets a full TTL to collect the response");
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

#[test]
fn closed_streams_are_retained_up_to_the_limit() {
    let mut s = core();
    let ids: Vec<_> = (0..3).map(|i| {
        s.begin_request(&id(i), 0).unwrap();
        s.open_post_stream(&id(i), "p")
    }).collect();
    assert!(s.stream_closed(ids[0]).is_empty());
    assert!(s.stream_closed(ids[1]).is_empty());
    let evicted = s.stream_closed(ids[2]);
    assert_eq!(evicted.len(), 1);
    assert_eq!(evicted[0].request, Some(id(0)));
    assert!(s.stream(ids[0]).is_none());
    assert!(s.stream(ids[2]).is_some());
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
fn server_request_ids_are_never_reused() {
    let mut s = core();
    let a = s.next_server_request_id();
    let b = s.next_server_request_id();
    assert_ne!(a, b);
}
