use super::*;
use crate::client::journal::MemoryJournal;

fn binding(generation: u32) -> Binding {
    Binding {
        session_generation: generation,
        session_id: Arc::from(format!("s{generation}")),
        protocol_version: ProtocolVersion::V2025_11_25,
        principal: None,
    }
}

fn acceptor() -> Acceptor<MemoryJournal> {
    Acceptor::new(binding(1), MemoryJournal::new(1024))
}

fn ev<'a>(
    stream: &'a StreamKey,
    b: &'a Binding,
    id: Option<&'a str>,
    data: &'a str,
) -> IncomingEvent<'a> {
    IncomingEvent { stream, binding: b, id, data }
}

const NOTE: &str =
    r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
const RESP1: &str = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;

#[test]
fn replayed_event_is_not_dispatched_twice() {
    let mut a = acceptor();
    let b = binding(1);
    let s = a.open_post_stream(&[JsonRpcId::Number(1)]).unwrap();
    assert!(matches!(
        a.accept_stream_event(ev(&s, &b, Some("e1"), NOTE)),
        Ok(Acceptance::Dispatched { .. })
    ));
    assert_eq!(a.accept_stream_event(ev(&s, &b, Some("e1"), NOTE)), Err(Refusal::Duplicate));
    assert!(matches!(
        a.accept_stream_event(ev(&s, &b, Some("e2"), RESP1)),
        Ok(Acceptance::Dispatched { completed: Some(_), .. })
    ));
    // A resume replays both again: neither is dispatched a second time.
    assert_eq!(a.accept_stream_event(ev(&s, &b, Some("e1"), NOTE)), Err(Refusal::Duplicate));
    assert_eq!(a.accept_stream_event(ev(&s, &b, Some("e2"), RESP1)), Err(Refusal::Duplicate));
    assert_eq!(a.journal_mut().pending().len(), 2);
    assert_eq!(a.stats().duplicates, 3);
}

#[test]
fn response_on_a_foreign_stream_is_refused() {
    let mut a = acceptor();
    let b = binding(1);
    let s1 = a.open_post_stream(&[JsonRpcId::Number(1)]).unwrap();
    let s2 = a.open_post_stream(&[JsonRpcId::Number(2)]).unwrap();
    assert_eq!(
        a.accept_stream_event(ev(&s2, &b, Some("x"), RESP1)),
        Err(Refusal::Uncorrelated("1".into()))
    );
    let get = a.open_get_stream().unwrap();
    assert!(matches!(
        a.accept_stream_event(ev(&get, &b, Some("y"), RESP1)),
        Err(Refusal::Uncorrelated(_))
    ));
    assert!(a.accept_stream_event(ev(&s1, &b, Some("z"), RESP1)).is_ok());
    assert!(a.journal_mut().pending().iter().all(|d| d.stream == s1));
}

#[test]
fn string_and_number_ids_do_not_correlate() {
    let mut a = acceptor();
    let b = binding(1);
    let s = a.open_post_stream(&[JsonRpcId::String("1".into())]).unwrap();
    assert!(matches!(
        a.accept_stream_event(ev(&s, &b, None, RESP1)),
        Err(Refusal::Uncorrelated(_))
    ));
}

#[test]
fn cursor_never_moves_backwards() {
    let mut a = acceptor();
    let b = binding(1);
    let s = a.open_post_stream(&[JsonRpcId::Number(1)]).unwrap();
    assert_eq!(a.accept_stream_event(ev(&s, &b, Some("p0"), "")), Ok(Acceptance::CursorOnly));
    assert_eq!(a.resume_cursor(&s).as_deref(), Some("p0"));
    a.accept_stream_event(ev(&s, &b, Some("e1"), NOTE)).unwrap();
    a.accept_stream_event(ev(
        &s,
        &b,
        Some("e2"),
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":2}}"#,
    ))
    .unwrap();
    // A replay of older events after a resume must not pull the cursor back.
    assert_eq!(a.accept_stream_event(ev(&s, &b, Some("e1"), NOTE)), Err(Refusal::Duplicate));
    assert_eq!(a.accept_stream_event(ev(&s, &b, Some("p0"), "")), Err(Refusal::Duplicate));
    assert_eq!(a.resume_cursor(&s).as_deref(), Some("e2"));
}

#[test]
fn empty_data_moves_the_cursor_and_is_not_dispatched() {
    let mut a = acceptor();
    let b = binding(1);
    let s = a.open_get_stream().unwrap();
    assert_eq!(a.accept_stream_event(ev(&s, &b, Some("prime"), "")), Ok(Acceptance::CursorOnly));
    assert!(a.journal_mut().pending().is_empty());
    assert_eq!(a.resume_cursor(&s).as_deref(), Some("prime"));
}

#[test]
fn events_from_the_old_session_are_refused_after_a_new_handshake() {
    let mut a = acceptor();
    let old = binding(1);
    let s = a.open_post_stream(&[JsonRpcId::Number(1), JsonRpcId::Number(7)]).unwrap();
    let lost = a.rebind(binding(2));
    assert_eq!(
        lost,
        vec![JsonRpcId::Number(1), JsonRpcId::Number(7)],
        "unanswered requests are reported, not moved"
    );
    assert_eq!(a.accept_stream_event(ev(&s, &old, Some("e"), RESP1)), Err(Refusal::WrongBinding));
    let new = binding(2);
    assert_eq!(
        a.accept_stream_event(ev(&s, &new, Some("e"), RESP1)),
        Err(Refusal::WrongBinding),
        "old stream key"
    );
}

#[test]
fn another_caller_or_version_on_the_connection_is_refused() {
    let mut a = acceptor();
    let s = a.open_get_stream().unwrap();
    let other_caller = Binding { principal: Some("mallory".into()), ..binding(1) };
    assert_eq!(
        a.accept_stream_event(ev(&s, &other_caller, Some("e"), NOTE)),
        Err(Refusal::WrongBinding)
    );
    let other_version = Binding { protocol_version: ProtocolVersion::V2025_03_26, ..binding(1) };
    assert_eq!(
        a.accept_stream_event(ev(&s, &other_version, Some("e"), NOTE)),
        Err(Refusal::WrongBinding)
    );
}

#[test]
fn unknown_stream_and_malformed_data_are_refused() {
    let mut a = acceptor();
    let b = binding(1);
    let ghost = StreamKey { session_generation: 1, stream: 99 };
    assert_eq!(a.accept_stream_event(ev(&ghost, &b, Some("e"), NOTE)), Err(Refusal::UnknownStream));
    let s = a.open_get_stream().unwrap();
    assert_eq!(a.accept_stream_event(ev(&s, &b, Some("e"), "{not json")), Err(Refusal::Malformed));
    assert_eq!(a.resume_cursor(&s), None, "a refused event does not move the cursor");
}

#[test]
fn server_requests_on_a_stream_are_dispatched() {
    let mut a = acceptor();
    let b = binding(1);
    let s = a.open_post_stream(&[JsonRpcId::Number(1)]).unwrap();
    let req = r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{}}"#;
    assert!(matches!(
        a.accept_stream_event(ev(&s, &b, Some("r"), req)),
        Ok(Acceptance::Dispatched { completed: None, .. })
    ));
    assert_eq!(
        a.outstanding(&s),
        vec![JsonRpcId::Number(1)],
        "a server request with the same id is not our response"
    );
}

#[test]
fn progress_with_a_token_of_another_stream_is_refused() {
    let mut a = acceptor();
    let b = binding(1);
    let mine = a.open_post_stream(&[JsonRpcId::Number(1)]).unwrap();
    let other = a.open_post_stream(&[JsonRpcId::Number(2)]).unwrap();
    a.expect_progress(&mine, &serde_json::json!("tok-1"));
    a.expect_progress(&other, &serde_json::json!("tok-2"));
    let progress = |t: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"{t}","progress":1}}}}"#
        )
    };
    assert!(matches!(
        a.accept_stream_event(ev(&mine, &b, Some("p1"), &progress("tok-1"))),
        Ok(Acceptance::Dispatched { .. })
    ));
    assert!(matches!(
        a.accept_stream_event(ev(&mine, &b, Some("p2"), &progress("tok-2"))),
        Err(Refusal::Uncorrelated(_))
    ));
    assert_eq!(
        a.resume_cursor(&mine).as_deref(),
        Some("p1"),
        "the refused event did not move the cursor"
    );
    let no_token = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#;
    assert!(matches!(
        a.accept_stream_event(ev(&mine, &b, Some("p3"), no_token)),
        Err(Refusal::Uncorrelated(_))
    ));
    // Other notifications carry no correlation and are accepted.
    assert!(matches!(
        a.accept_stream_event(ev(&mine, &b, Some("n"), NOTE)),
        Ok(Acceptance::Dispatched { .. })
    ));
    assert_eq!(a.stats().uncorrelated, 2);
}
