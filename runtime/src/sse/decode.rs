/// One dispatched event (events with empty data are not dispatched, per WHATWG, unless the
/// decoder reports them: [`Decoder::reporting_id_only_events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field, or `"message"`.
    pub event: String,
    /// The data buffer, lines joined with `\n`.
    pub data: String,
    /// The last event id in effect when the event was dispatched.
    pub id: Option<String>,
    /// The event carried an `id` field itself (`id` is not inherited from an earlier event).
    pub own_id: bool,
}

/// Incremental WHATWG `text/event-stream` parser.
///
/// Feed bytes with [`Decoder::feed`]; it returns the events completed by those bytes. It
/// tracks `last_event_id` (also updated by events that are not dispatched, such as priming
/// events) and the latest `retry` value.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    started: bool,
    data: String,
    event: String,
    /// WHATWG "last event ID buffer": set by `id` lines, committed only at dispatch.
    id_buffer: Option<String>,
    /// The event being read had an `id` line.
    id_in_event: bool,
    saw_data: bool,
    /// The stream's last event ID: committed when an event ends (blank line), including
    /// events with empty data. An `id` line of an event that never ended does not count, so
    /// a cut in the middle of an event never skips that event on resume.
    pub last_event_id: Option<String>,
    /// The last valid `retry` value, in milliseconds.
    pub retry_ms: Option<u64>,
    /// How many comment lines were seen.
    pub comments: u64,
    /// Report an event with empty data that carried an id itself (a priming event), in its
    /// place among the others, with empty `data`.
    id_only: bool,
}

impl Decoder {
    /// A fresh parser.
    #[must_use]
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// A fresh parser that also returns each event with empty data and an id of its own (a
    /// priming event: it moves the stream's cursor and carries nothing), in order with the
    /// others: a reader that takes cursors only from events' own ids then sees every one,
    /// however the bytes were split.
    #[must_use]
    pub fn reporting_id_only_events() -> Decoder {
        Decoder { id_only: true, ..Decoder::default() }
    }

    /// Feed bytes; returns the events they complete, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                // A CR at the very end may be the first half of CRLF: wait for more input.
                if b == b'\r' && i + 1 == self.buf.len() {
                    break;
                }
                let line = self.buf[start..i].to_vec();
                let skip = if b == b'\r' && self.buf.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
                i += skip;
                start = i;
                self.line(&line, &mut out);
            } else {
                i += 1;
            }
        }
        self.buf.drain(..start);
        out
    }

    fn line(&mut self, raw: &[u8], out: &mut Vec<SseEvent>) {
        let mut line = String::from_utf8_lossy(raw).into_owned();
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix('\u{feff}') {
                line = rest.to_owned();
            }
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            self.comments += 1;
            return;
        }
        let (field, value) = match line.find(':') {
            Some(p) => {
                let v = &line[p + 1..];
                (&line[..p], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line.as_str(), ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.saw_data = true;
            }
            "event" => self.event = value.to_owned(),
            "id" if !value.contains('\0') => {
                self.id_buffer = Some(value.to_owned());
                self.id_in_event = true;
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry_ms = value.parse().ok();
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        self.last_event_id.clone_from(&self.id_buffer);
        let id = self.last_event_id.clone();
        let own_id = std::mem::replace(&mut self.id_in_event, false);
        let event = std::mem::take(&mut self.event);
        let mut data = std::mem::take(&mut self.data);
        let saw = std::mem::replace(&mut self.saw_data, false);
        if !saw || data.is_empty() || data == "\n" {
            if self.id_only && own_id {
                out.push(SseEvent { event: String::new(), data: String::new(), id, own_id });
            }
            return;
        }
        if data.ends_with('\n') {
            data.pop();
        }
        out.push(SseEvent {
            event: if event.is_empty() { "message".into() } else { event },
            data,
            id,
            own_id,
        });
    }
}

#[cfg(test)]
mod own_id_tests {
    use super::*;

    #[test]
    fn an_event_without_an_id_line_inherits_the_id_but_is_not_its_own() {
        let mut d = Decoder::new();
        let evs = d.feed(b"id: 5\ndata: a\n\ndata: b\n\n");
        assert_eq!((evs[0].id.as_deref(), evs[0].own_id), (Some("5"), true));
        assert_eq!(
            (evs[1].id.as_deref(), evs[1].own_id),
            (Some("5"), false),
            "WHATWG: the last event id carries over"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::{event_frame, priming_frame, retry_frame};

    #[test]
    fn priming_event_sets_cursor_but_is_not_dispatched() {
        let mut d = Decoder::new();
        let evs = d.feed(&priming_frame(b"abc", Some(500)));
        assert!(evs.is_empty());
        assert_eq!(d.last_event_id.as_deref(), Some("abc"));
        assert_eq!(d.retry_ms, Some(500));
    }

    #[test]
    fn frames_split_anywhere_decode_the_same() {
        let mut all = Vec::new();
        all.extend_from_slice(&priming_frame(b"p", None));
        all.extend_from_slice(&event_frame(b"e1", br#"{"a":1}"#));
        all.extend_from_slice(b": keep-alive\n\n");
        all.extend_from_slice(&retry_frame(250));
        all.extend_from_slice(&event_frame(b"e2", br#"{"b":2}"#));
        for cut in 0..all.len() {
            let mut d = Decoder::new();
            let mut evs = d.feed(&all[..cut]);
            evs.extend(d.feed(&all[cut..]));
            assert_eq!(evs.len(), 2, "cut at {cut}");
            assert_eq!(evs[0].data, r#"{"a":1}"#);
            assert_eq!(evs[1].id.as_deref(), Some("e2"));
            assert_eq!(d.retry_ms, Some(250));
            assert_eq!(d.comments, 1);
        }
    }

    #[test]
    fn a_reporting_decoder_returns_priming_events_in_order_however_the_bytes_are_split() {
        let mut all = Vec::new();
        all.extend_from_slice(&priming_frame(b"p", Some(20)));
        all.extend_from_slice(b"data: plain\n\n");
        all.extend_from_slice(b"id: q\n\n");
        all.extend_from_slice(b"\n");
        for cut in 0..all.len() {
            let mut d = Decoder::reporting_id_only_events();
            let mut evs = d.feed(&all[..cut]);
            evs.extend(d.feed(&all[cut..]));
            let got: Vec<_> =
                evs.iter().map(|e| (e.data.as_str(), e.id.as_deref(), e.own_id)).collect();
            assert_eq!(
                got,
                [("", Some("p"), true), ("plain", Some("p"), false), ("", Some("q"), true)],
                "cut at {cut}: a blank line alone reports nothing"
            );
        }
        assert!(Decoder::new().feed(&all).iter().all(|e| !e.data.is_empty()), "the default");
    }

    #[test]
    fn id_of_an_unfinished_event_is_not_the_cursor() {
        let mut d = Decoder::new();
        d.feed(b"id: p\ndata: \n\n");
        assert_eq!(d.last_event_id.as_deref(), Some("p"));
        // A connection cut after the next event's id and data lines, before its blank line.
        assert!(d.feed(b"id: r\ndata: {\"result\":1}\n").is_empty());
        assert_eq!(
            d.last_event_id.as_deref(),
            Some("p"),
            "resume must replay the unfinished event"
        );
        let evs = d.feed(b"\n");
        assert_eq!(evs[0].id.as_deref(), Some("r"));
        assert_eq!(d.last_event_id.as_deref(), Some("r"));
    }

    #[test]
    fn crlf_cr_and_multiline_data() {
        let mut d = Decoder::new();
        let evs = d.feed(b"\xEF\xBB\xBFdata:a\r\ndata: b\rid: 7\r\n\r\n");
        assert_eq!(
            evs,
            vec![SseEvent {
                event: "message".into(),
                data: "a\nb".into(),
                id: Some("7".into()),
                own_id: true
            }]
        );
    }
}
