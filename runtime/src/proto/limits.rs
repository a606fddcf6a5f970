//! Bounds on what one message may make the server hold, by parsed size rather than wire
//! size (a 4 MiB body of `[0,0,…]` parses into ~64 MiB of values):
//!
//! - [`scan`]: one pass over the raw body before it is parsed, bounding nesting depth and the
//!   number of JSON values, so parsing itself cannot balloon;
//! - [`check_handshake`]: `initialize`'s `capabilities` (which a session keeps for its whole
//!   life) and `clientInfo` are bounded in values, depth and string bytes;
//! - [`check_message`]: string ids, method names, tool/prompt names and resource URIs have
//!   length limits.
//!
//! Over a limit the request is refused (400) with a message naming the limit; nothing is
//! truncated, so a client never gets a session that silently lost its capabilities. Pure.

use serde_json::Value;

use super::ids::JsonRpcId;
use super::jsonrpc::Message;

/// Bounds on the handshake data a session keeps (`capabilities` and `clientInfo`, each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// Most JSON values (scalars, arrays, objects).
    pub max_values: usize,
    /// Deepest nesting.
    pub max_depth: usize,
    /// Most bytes of strings, keys included.
    pub max_string_bytes: usize,
}

/// Every per-message bound; see `config::LimitsConfig` for the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    /// Deepest nesting of a body.
    pub json_max_depth: usize,
    /// Most JSON values in a body (counted by [`scan`]).
    pub json_max_values: usize,
    /// `capabilities` and `clientInfo` of `initialize`.
    pub handshake: HandshakeLimits,
    /// Longest string request id.
    pub id_max_bytes: usize,
    /// Longest method name.
    pub method_max_bytes: usize,
    /// Longest tool or prompt name.
    pub name_max_bytes: usize,
    /// Longest resource URI.
    pub uri_max_bytes: usize,
    /// Most messages in a batch.
    pub batch_max_items: usize,
}

impl Default for MessageLimits {
    fn default() -> MessageLimits {
        MessageLimits {
            json_max_depth: 64,
            json_max_values: 262_144,
            handshake: HandshakeLimits {
                max_values: 1024,
                max_depth: 16,
                max_string_bytes: 64 << 10,
            },
            id_max_bytes: 256,
            method_max_bytes: 256,
            name_max_bytes: 256,
            uri_max_bytes: 8 << 10,
            batch_max_items: 64,
        }
    }
}

/// Which bound a message broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Body nesting depth.
    JsonDepth,
    /// Values in the body.
    JsonValues,
    /// `initialize` `capabilities`: one of its bounds.
    Capabilities(HandshakeBound),
    /// `initialize` `clientInfo`: one of its bounds.
    ClientInfo(HandshakeBound),
    /// Length of a string request id.
    IdLength,
    /// Length of a method name.
    MethodLength,
    /// Length of a tool or prompt name.
    NameLength,
    /// Length of a resource URI.
    UriLength,
    /// Messages in a batch.
    BatchItems,
    /// A request's `_meta.progressToken`: a number, or a string no longer than ids may be.
    ProgressToken,
}

impl Limit {
    /// What the limit bounds, for the error message.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Limit::JsonDepth => "JSON nesting depth (limits.json_max_depth)",
            Limit::JsonValues => "number of JSON values (limits.json_max_values)",
            Limit::Capabilities(HandshakeBound::Values) => {
                "initialize capabilities: values (limits.handshake_max_values)"
            }
            Limit::Capabilities(HandshakeBound::Depth) => {
                "initialize capabilities: depth (limits.handshake_max_depth)"
            }
            Limit::Capabilities(HandshakeBound::StringBytes) => {
                "initialize capabilities: string bytes (limits.handshake_max_string_bytes)"
            }
            Limit::ClientInfo(HandshakeBound::Values) => {
                "initialize clientInfo: values (limits.handshake_max_values)"
            }
            Limit::ClientInfo(HandshakeBound::Depth) => {
                "initialize clientInfo: depth (limits.handshake_max_depth)"
            }
            Limit::ClientInfo(HandshakeBound::StringBytes) => {
                "initialize clientInfo: string bytes (limits.handshake_max_string_bytes)"
            }
            Limit::IdLength => "request id length in bytes (limits.id_max_bytes)",
            Limit::MethodLength => "method name length in bytes (limits.method_max_bytes)",
            Limit::NameLength => "tool or prompt name length in bytes (limits.name_max_bytes)",
            Limit::UriLength => "resource URI length in bytes (limits.uri_max_bytes)",
            Limit::BatchItems => "messages in a batch (limits.batch_max_items)",
            Limit::ProgressToken => {
                "request _meta.progressToken: a number, or a string of at most limits.id_max_bytes bytes"
            }
        }
    }
}

/// Which bound of a handshake value was passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandshakeBound {
    /// `limits.handshake_max_values`.
    Values,
    /// `limits.handshake_max_depth`.
    Depth,
    /// `limits.handshake_max_string_bytes`.
    StringBytes,
}

/// A bound was exceeded: which one, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitExceeded {
    /// The bound.
    pub limit: Limit,
    /// Its configured maximum.
    pub max: usize,
}

/// What [`scan`] measured of a body: enough to estimate the memory its parsed form takes
/// while a request holds it ([`Scanned::parsed_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    /// The body's length.
    pub body_bytes: usize,
    /// Values counted where each starts (object keys included): exact when the full pass
    /// ran, else an upper bound (one, plus every `[`, `{`, `,` and `:`, strings included).
    pub values: usize,
    /// Objects with at least one member: exact when the full pass ran, else every `{`.
    pub objects: usize,
}

/// Bytes one counted value adds to a parsed body: its `serde_json::Value` (32 bytes) with the
/// spare room of the `Vec` it was pushed into (up to as much again), or an object member's
/// key `String` (24 bytes) and allocation.
pub const PARSED_BYTES_PER_VALUE: usize = 64;
/// Bytes a non-empty object adds besides its members: one B-tree leaf (11 keys of 24 bytes,
/// 11 values of 32, links and lengths: 632 bytes), allocated at its first member.
pub const PARSED_BYTES_PER_OBJECT: usize = 640;

/// Bodies at most this long may be measured by the fast path's bound (structural bytes
/// counted, strings included); longer ones are counted value by value, so that a large body
/// is never charged much more than it parses into.
const FAST_MEASURE_MAX_BYTES: usize = 1024;

impl Scanned {
    /// Estimated bytes the parsed body takes: its length (string contents and keys, which
    /// parse into at most as many bytes, escapes shrinking), plus
    /// [`PARSED_BYTES_PER_VALUE`] per value and [`PARSED_BYTES_PER_OBJECT`] per non-empty
    /// object. An upper bound for arrays of scalars (a `Vec`'s slack included) and objects of
    /// any size; within a small factor otherwise.
    #[must_use]
    pub fn parsed_bytes(&self) -> usize {
        self.body_bytes
            .saturating_add(self.values.saturating_mul(PARSED_BYTES_PER_VALUE))
            .saturating_add(self.objects.saturating_mul(PARSED_BYTES_PER_OBJECT))
    }
}

/// The bytes `[` or `{`, the bytes `{`, and the bytes `,` or `:` in `body`. Counted in byte
/// lanes, 255 bytes at a time (a lane cannot overflow within a chunk), which the compiler
/// vectorizes: 28 ns for a 300-byte `tools/call` against 284 ns for the same sums in `usize`
/// (issue 23; one of these runs on every POST body).
fn count_structural(body: &[u8]) -> (usize, usize, usize) {
    let (mut opens, mut braces, mut separators) = (0usize, 0usize, 0usize);
    for chunk in body.chunks(255) {
        let (mut o, mut b, mut s) = (0u8, 0u8, 0u8);
        for &c in chunk {
            o += u8::from(c == b'[') + u8::from(c == b'{');
            b += u8::from(c == b'{');
            s += u8::from(c == b',') + u8::from(c == b':');
        }
        opens += usize::from(o);
        braces += usize::from(b);
        separators += usize::from(s);
    }
    (opens, braces, separators)
}

/// One pass over a raw JSON body: nesting depth and number of values, counted where each
/// value starts (every array or object opened, every string, object keys included, and every
/// run of scalar bytes such as `-1.5e3` or `true`, outside strings). A parser allocates one
/// value per start but the keys, and there are fewer keys than values, so the count is at
/// least the values a parser would allocate and less than twice that. Invalid JSON is left
/// to the parser. Returns what it measured, for the memory estimate of the parsed body.
///
/// # Errors
/// [`Limit::JsonDepth`] or [`Limit::JsonValues`].
pub fn scan(body: &[u8], limits: &MessageLimits) -> Result<Scanned, LimitExceeded> {
    // Fast path (most bodies): the count is at most the body's length (each value starts at
    // a byte of its own), and the depth at most the number of opening brackets anywhere
    // (strings included); counting those is one vectorized pass. So is the measure of a
    // short body: every value but the first follows a `[`, `{`, `,` or `:`.
    let (opens, braces, separators) = count_structural(body);
    if body.len() < limits.json_max_values
        && opens <= limits.json_max_depth
        && body.len() <= FAST_MEASURE_MAX_BYTES
    {
        return Ok(Scanned {
            body_bytes: body.len(),
            values: 1 + opens + separators,
            objects: braces,
        });
    }
    // Values are counted where they start, not by their separators: counting every `,` and
    // `:` counts an object member twice (the `,` before its key and the `:` before its
    // value), and a container member a third time by its own bracket, up to three times the
    // values a parser allocates.
    let mut depth = 0usize;
    let mut values = 0usize;
    let mut objects = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut in_scalar = false;
    // An object was opened and nothing but whitespace followed yet: a key makes it non-empty.
    let mut object_opened = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        let was_scalar = in_scalar;
        in_scalar = false;
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => continue,
            b'"' => {
                in_string = true;
                objects += usize::from(object_opened);
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limits.json_max_depth {
                    return Err(LimitExceeded {
                        limit: Limit::JsonDepth,
                        max: limits.json_max_depth,
                    });
                }
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                object_opened = false;
                continue;
            }
            b',' | b':' => {
                object_opened = false;
                continue;
            }
            // A number or literal: counted at its first byte.
            _ => {
                in_scalar = true;
                if was_scalar {
                    continue;
                }
            }
        }
        object_opened = b == b'{';
        values += 1;
        if values > limits.json_max_values {
            return Err(LimitExceeded { limit: Limit::JsonValues, max: limits.json_max_values });
        }
    }
    Ok(Scanned { body_bytes: body.len(), values, objects })
}

#[derive(Default)]
struct Measure {
    values: usize,
    string_bytes: usize,
}

/// Walks `v`, stopping at the first bound it passes.
fn within(
    v: &Value,
    depth: usize,
    l: &HandshakeLimits,
    m: &mut Measure,
) -> Result<(), HandshakeBound> {
    m.values += 1;
    if m.values > l.max_values {
        return Err(HandshakeBound::Values);
    }
    if depth > l.max_depth {
        return Err(HandshakeBound::Depth);
    }
    let add = |m: &mut Measure, n: usize| {
        m.string_bytes += n;
        if m.string_bytes > l.max_string_bytes { Err(HandshakeBound::StringBytes) } else { Ok(()) }
    };
    match v {
        Value::String(s) => add(m, s.len()),
        Value::Array(items) => items.iter().try_for_each(|i| within(i, depth + 1, l, m)),
        Value::Object(map) => map.iter().try_for_each(|(k, i)| {
            add(m, k.len())?;
            within(i, depth + 1, l, m)
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// Memory a parsed JSON value takes per value, roughly (a `Value` and its share of its
/// container), for [`check_handshake`]'s estimate.
const BYTES_PER_VALUE: usize = 64;

/// Bound the handshake data a session keeps for its whole life. Returns an estimate of the
/// bytes it keeps of it (its capabilities' values and strings; `clientInfo` is bounded the
/// same way but not kept), which the session charges to the memory budgets.
///
/// # Errors
/// [`Limit::Capabilities`] or [`Limit::ClientInfo`] with the bound passed, `max` its value.
pub fn check_handshake(
    capabilities: &Value,
    client_info: &Value,
    limits: &HandshakeLimits,
) -> Result<usize, LimitExceeded> {
    let measure = |v: &Value, which: fn(HandshakeBound) -> Limit| {
        let mut m = Measure::default();
        within(v, 1, limits, &mut m).map_err(|bound| {
            let max = match bound {
                HandshakeBound::Values => limits.max_values,
                HandshakeBound::Depth => limits.max_depth,
                HandshakeBound::StringBytes => limits.max_string_bytes,
            };
            LimitExceeded { limit: which(bound), max }
        })?;
        Ok(m)
    };
    let kept = measure(capabilities, Limit::Capabilities)?;
    measure(client_info, Limit::ClientInfo)?;
    Ok(kept.values * BYTES_PER_VALUE + kept.string_bytes)
}

fn id_ok(id: &JsonRpcId, l: &MessageLimits) -> Result<(), LimitExceeded> {
    match id {
        JsonRpcId::String(s) if s.len() > l.id_max_bytes => {
            Err(LimitExceeded { limit: Limit::IdLength, max: l.id_max_bytes })
        }
        _ => Ok(()),
    }
}

fn param_len(
    params: Option<&Value>,
    key: &str,
    limit: Limit,
    max: usize,
) -> Result<(), LimitExceeded> {
    match params.and_then(|p| p.get(key)).and_then(Value::as_str) {
        Some(s) if s.len() > max => Err(LimitExceeded { limit, max }),
        _ => Ok(()),
    }
}

/// Length limits of one message: string ids, method names, and the tool/prompt name or
/// resource URI of the methods that carry one.
///
/// # Errors
/// The first [`LimitExceeded`] found.
pub fn check_message(m: &Message, l: &MessageLimits) -> Result<(), LimitExceeded> {
    let (method, params) = match m {
        Message::Request { id, method, params, .. } => {
            id_ok(id, l)?;
            // Kept for the whole request and copied into every progress notification.
            match params.as_ref().and_then(crate::proto::jsonrpc::progress_token) {
                None | Some(Value::Number(_)) => {}
                Some(Value::String(t)) if t.len() <= l.id_max_bytes => {}
                Some(_) => {
                    return Err(LimitExceeded { limit: Limit::ProgressToken, max: l.id_max_bytes });
                }
            }
            (method, params.as_ref())
        }
        Message::Notification { method, params, .. } => (method, params.as_ref()),
        Message::Response { id, .. } => return id_ok(id, l),
        Message::ErrorResponse { id, .. } => return id.as_ref().map_or(Ok(()), |id| id_ok(id, l)),
    };
    if method.len() > l.method_max_bytes {
        return Err(LimitExceeded { limit: Limit::MethodLength, max: l.method_max_bytes });
    }
    match method.as_str() {
        "tools/call" | "prompts/get" => {
            param_len(params, "name", Limit::NameLength, l.name_max_bytes)
        }
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            param_len(params, "uri", Limit::UriLength, l.uri_max_bytes)
        }
        _ => Ok(()),
    }
}

/// Most `Mcp-Param-{Name}` headers one preflight may ask for ([`cors_preflight_headers`]).
pub const CORS_MAX_PARAM_HEADERS: usize = 64;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn structural_counts_do_not_wrap_past_a_lane_of_255() {
        // Every byte structural, so each 255-byte lane is full; lengths around the chunk size.
        for len in [0, 1, 254, 255, 256, 600, 1021] {
            let body: Vec<u8> = b"{[,:".iter().copied().cycle().take(len).collect();
            let count = |set: &[u8]| body.iter().filter(|c| set.contains(c)).count();
            assert_eq!(
                count_structural(&body),
                (count(b"[{"), count(b"{"), count(b",:")),
                "{len} bytes"
            );
        }
        let all_braces = vec![b'{'; 1000];
        assert_eq!(count_structural(&all_braces), (1000, 1000, 0));
    }

    proptest! {
        #[test]
        fn structural_counts_match_a_plain_count(body in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let count = |set: &[u8]| body.iter().filter(|c| set.contains(c)).count();
            prop_assert_eq!(count_structural(&body), (count(b"[{"), count(b"{"), count(b",:")));
        }
    }

    fn values_of(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(values_of).sum(),
            Value::Object(m) => m.values().map(values_of).sum(),
            _ => 0,
        }
    }

    fn objects_of(v: &Value) -> usize {
        match v {
            Value::Array(a) => a.iter().map(objects_of).sum(),
            Value::Object(m) => {
                usize::from(!m.is_empty()) + m.values().map(objects_of).sum::<usize>()
            }
            _ => 0,
        }
    }

    fn depth_of(v: &Value) -> usize {
        match v {
            Value::Array(a) => 1 + a.iter().map(depth_of).max().unwrap_or(0),
            Value::Object(m) => 1 + m.values().map(depth_of).max().unwrap_or(0),
            _ => 0,
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z\\[\\]{},:\"\\\\]{0,8}".prop_map(Value::from)
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::btree_map("[a-z,:\\[]{0,4}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The scan's count is between the values a parser allocates and twice that (plus
        /// one), and its depth is exact, whatever the strings contain.
        #[test]
        fn scan_counts_within_a_factor_of_two_and_depth_exactly(v in json_value()) {
            let body = serde_json::to_vec(&v).unwrap();
            let (values, depth) = (values_of(&v), depth_of(&v));
            let l = |max_values, max_depth| MessageLimits { json_max_values: max_values, json_max_depth: max_depth, ..MessageLimits::default() };
            prop_assert!(scan(&body, &l(2 * values + 1, depth.max(1))).is_ok());
            if values > 1 {
                prop_assert_eq!(scan(&body, &l(values - 1, 128)).unwrap_err().limit, Limit::JsonValues);
            }
            if depth > 1 {
                prop_assert_eq!(scan(&body, &l(usize::MAX, depth - 1)).unwrap_err().limit, Limit::JsonDepth);
            }
        }
    }

    fn small() -> MessageLimits {
        MessageLimits { json_max_depth: 4, json_max_values: 10, ..MessageLimits::default() }
    }

    #[test]
    fn scan_bounds_depth_and_values_and_ignores_strings() {
        let l = small();
        assert!(scan(br#"{"a":[1,2,3]}"#, &l).is_ok());
        assert_eq!(scan(b"[[[[[1]]]]]", &l).unwrap_err().limit, Limit::JsonDepth);
        assert_eq!(scan(b"[0,0,0,0,0,0,0,0,0,0,0]", &l).unwrap_err().limit, Limit::JsonValues);
        // Brackets, commas and escaped quotes inside strings are not structure.
        assert!(scan(br#"{"a":"[[[[[[,,,,,,,,,,,\"]]]]"}"#, &l).is_ok());
    }

    #[test]
    fn object_members_holding_containers_are_counted_once() {
        // 5 values (the keys make 3 more), depth 3: within 2 * 5 + 1 = 11, whatever the keys
        // hold. Counting separators made this 12, and `n` members each holding `{}` 3n + 1.
        for body in [&br#"{"":[],":":{"":{}},"[":[]}"#[..], br#"{"a":[],"b":{"c":{}},"d":[]}"#] {
            let l = |max_values, max_depth| MessageLimits {
                json_max_values: max_values,
                json_max_depth: max_depth,
                ..MessageLimits::default()
            };
            assert!(scan(body, &l(11, 3)).is_ok());
            assert_eq!(scan(body, &l(4, 3)).unwrap_err().limit, Limit::JsonValues);
            assert_eq!(scan(body, &l(usize::MAX, 2)).unwrap_err().limit, Limit::JsonDepth);
        }
        let members: Vec<String> = (0..100).map(|i| format!("\"k{i}\": {{}}")).collect();
        let body = format!("{{{}}}", members.join(", "));
        let l = MessageLimits {
            json_max_values: 2 * 101 + 1,
            json_max_depth: 2,
            ..MessageLimits::default()
        };
        assert!(scan(body.as_bytes(), &l).is_ok());
        // Scalars are counted once each, however long, and whitespace not at all.
        let l = MessageLimits { json_max_values: 4, json_max_depth: 1, ..MessageLimits::default() };
        assert!(scan(b"[ -12.5e+30 , true,\n null ]", &l).is_ok());
        let l = MessageLimits { json_max_values: 3, json_max_depth: 1, ..MessageLimits::default() };
        assert_eq!(scan(b"[ -12.5e+30 , true,\n null ]", &l).unwrap_err().limit, Limit::JsonValues);
    }

    #[test]
    fn the_fast_path_never_hides_a_violation() {
        // Short bodies skip the full scan only when no bound can be reached.
        let l =
            MessageLimits { json_max_depth: 3, json_max_values: 1000, ..MessageLimits::default() };
        assert!(
            scan(br#"{"a":"[[[[[[[["}"#, &l).is_ok(),
            "brackets in strings: full scan, no violation"
        );
        assert_eq!(scan(b"[[[[1]]]]", &l).unwrap_err().limit, Limit::JsonDepth);
        let l =
            MessageLimits { json_max_depth: 64, json_max_values: 8, ..MessageLimits::default() };
        assert_eq!(scan(b"[1,2,3,4,5,6,7,8]", &l).unwrap_err().limit, Limit::JsonValues);
        assert!(scan(b"[1,2,3]", &l).is_ok());
    }

    #[test]
    fn the_measure_counts_values_and_non_empty_objects_exactly_and_bounds_them_on_short_bodies() {
        let l = MessageLimits::default();
        let body = r#"{"a": [1, {}, {"b": "x,:{"}], "c": { }}"#;
        // Padded past the fast path's length: the full pass, exact (10 values, keys included;
        // the root and {"b"...} have members, {} and { } do not).
        let full =
            scan(format!("{body}{}", " ".repeat(FAST_MEASURE_MAX_BYTES)).as_bytes(), &l).unwrap();
        assert_eq!((full.values, full.objects), (10, 2));
        let short = scan(body.as_bytes(), &l).unwrap();
        assert_eq!(
            (short.values, short.objects),
            (15, 5),
            "one, plus every [ {{ , : and every {{, strings included"
        );
        assert_eq!(
            short.parsed_bytes(),
            body.len() + 15 * PARSED_BYTES_PER_VALUE + 5 * PARSED_BYTES_PER_OBJECT
        );
        // A large argument is charged about its size, not per byte.
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"pad":"{}"}}}}}}"#,
            "x,".repeat(1 << 20)
        );
        let s = scan(big.as_bytes(), &l).unwrap();
        assert_eq!((s.values, s.objects), (15, 3));
        assert!(s.parsed_bytes() < big.len() + 4096, "{}", s.parsed_bytes());
    }

    proptest! {
        /// The short bodies' bound is never below the full pass's count.
        #[test]
        fn the_fast_measure_is_never_below_the_full_one(v in json_value()) {
            let body = serde_json::to_vec(&v).unwrap();
            prop_assume!(body.len() <= FAST_MEASURE_MAX_BYTES);
            let l = MessageLimits::default();
            let fast = scan(&body, &l).unwrap();
            let mut padded = body.clone();
            padded.resize(FAST_MEASURE_MAX_BYTES + 1, b' ');
            let full = scan(&padded, &l).unwrap();
            prop_assert!(fast.values >= full.values && fast.objects >= full.objects, "{fast:?} {full:?}");
            prop_assert_eq!(full.objects, objects_of(&v));
        }
    }

    #[test]
    fn a_4_mib_array_of_zeros_is_refused_by_the_default_scan() {
        let mut body = Vec::with_capacity(4 << 20);
        body.push(b'[');
        while body.len() < (4 << 20) - 2 {
            body.extend_from_slice(b"0,");
        }
        body.extend_from_slice(b"0]");
        assert_eq!(scan(&body, &MessageLimits::default()).unwrap_err().limit, Limit::JsonValues);
    }

    #[test]
    fn handshake_is_bounded_in_values_depth_and_string_bytes() {
        let l = HandshakeLimits { max_values: 8, max_depth: 3, max_string_bytes: 32 };
        let info = json!({"name": "c", "version": "1"});
        let caps = json!({"sampling": {}, "roots": {"listChanged": true}});
        let kept = check_handshake(&caps, &info, &l).unwrap();
        assert_eq!(kept, 4 * BYTES_PER_VALUE + 24, "values and string bytes of the capabilities");
        let larger_info = json!({"name": "c".repeat(16), "version": "1", "x": 1});
        assert_eq!(
            check_handshake(&caps, &larger_info, &l).unwrap(),
            kept,
            "clientInfo is bounded, not kept, so not charged"
        );
        let over = |caps: Value, info: &Value| check_handshake(&caps, info, &l).unwrap_err();
        assert_eq!(
            over(json!({"x": [0, 0, 0, 0, 0, 0, 0, 0]}), &info),
            LimitExceeded { limit: Limit::Capabilities(HandshakeBound::Values), max: 8 }
        );
        assert_eq!(
            over(json!({"a": {"b": {"c": {}}}}), &info),
            LimitExceeded { limit: Limit::Capabilities(HandshakeBound::Depth), max: 3 }
        );
        assert_eq!(
            over(json!({}), &json!({"name": "x".repeat(29)})),
            LimitExceeded { limit: Limit::ClientInfo(HandshakeBound::StringBytes), max: 32 }
        );
        assert_eq!(
            over(json!({"k".repeat(33): 1}), &info),
            LimitExceeded { limit: Limit::Capabilities(HandshakeBound::StringBytes), max: 32 }
        );
    }

    #[test]
    fn ids_methods_names_and_uris_have_length_limits() {
        let l = MessageLimits {
            id_max_bytes: 8,
            method_max_bytes: 32,
            name_max_bytes: 8,
            uri_max_bytes: 64,
            ..MessageLimits::default()
        };
        let req = |id: JsonRpcId, method: &str, params: Value| Message::Request {
            id,
            method: method.into(),
            params: Some(params),
            meta: None,
        };
        assert!(
            check_message(
                &req(JsonRpcId::String("12345678".into()), "tools/call", json!({"name": "echo"})),
                &l
            )
            .is_ok()
        );
        let long_id = req(JsonRpcId::String("123456789".into()), "ping", json!({}));
        assert_eq!(check_message(&long_id, &l).unwrap_err().limit, Limit::IdLength);
        let long_method =
            Message::Notification { method: "m".repeat(33), params: None, meta: None };
        assert_eq!(check_message(&long_method, &l).unwrap_err().limit, Limit::MethodLength);
        let long_name = req(JsonRpcId::Number(1), "tools/call", json!({"name": "n".repeat(9)}));
        assert_eq!(check_message(&long_name, &l).unwrap_err().limit, Limit::NameLength);
        let long_prompt = req(JsonRpcId::Number(1), "prompts/get", json!({"name": "n".repeat(9)}));
        assert_eq!(check_message(&long_prompt, &l).unwrap_err().limit, Limit::NameLength);
        let long_uri = req(JsonRpcId::Number(1), "resources/read", json!({"uri": "u".repeat(65)}));
        assert_eq!(check_message(&long_uri, &l).unwrap_err().limit, Limit::UriLength);
        let answer =
            Message::Response { id: JsonRpcId::String("x".repeat(9).into()), result: json!({}) };
        assert_eq!(check_message(&answer, &l).unwrap_err().limit, Limit::IdLength);
        let token = |t: Value| {
            req(
                JsonRpcId::Number(1),
                "tools/call",
                json!({"name": "echo", "_meta": {"progressToken": t}}),
            )
        };
        assert!(check_message(&token(json!(7)), &l).is_ok());
        assert!(check_message(&token(json!("12345678")), &l).is_ok());
        assert_eq!(
            check_message(&token(json!("123456789")), &l).unwrap_err().limit,
            Limit::ProgressToken
        );
        assert_eq!(
            check_message(&token(json!({"big": [1, 2, 3]})), &l).unwrap_err().limit,
            Limit::ProgressToken
        );
    }
}
