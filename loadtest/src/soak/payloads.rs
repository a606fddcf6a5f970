//! Request bodies at and just over the host's documented limits, and the two measures the
//! host applies to them (mirrored here so a probe is exactly at, or exactly one past, its
//! limit). Pure.

use serde_json::{Value, json};

/// The host's default limits (docs/errors.md; `limits.*` in the config).
pub(crate) const JSON_MAX_VALUES: usize = 262_144;
pub(crate) const JSON_MAX_DEPTH: usize = 64;
pub(crate) const HANDSHAKE_MAX_VALUES: usize = 1024;
pub(crate) const HANDSHAKE_MAX_DEPTH: usize = 16;
pub(crate) const HANDSHAKE_MAX_STRING_BYTES: usize = 64 << 10;
pub(crate) const ID_MAX_BYTES: usize = 256;
pub(crate) const METHOD_MAX_BYTES: usize = 256;
pub(crate) const NAME_MAX_BYTES: usize = 256;
pub(crate) const URI_MAX_BYTES: usize = 8 << 10;
pub(crate) const MAX_BODY_BYTES: usize = 4 << 20;
/// The large `echo` text: well under the body limit, far over the replay window's bytes.
pub(crate) const BIG_TEXT_BYTES: usize = 3_670_016;

/// The 2026-07-28 version the modern kinds speak.
pub(crate) const MODERN_VERSION: &str = "2026-07-28";
/// The soak host's `modern.max_in_flight` and `modern.max_in_flight_per_caller`: small, so
/// `modern-slot-hog` fills them with a few dozen calls.
pub(crate) const MODERN_MAX_IN_FLIGHT: usize = 64;
pub(crate) const MODERN_PER_CALLER: usize = 16;
/// What one `pinned-arguments` call is charged of the request memory budget (the host's
/// estimate of its parsed body; its arguments pad it to exactly this): 3.75 MiB, near the
/// 4 MiB body limit.
pub(crate) const PINNED_CHARGE: usize = 3_932_160;
/// Pinned calls that fit in the soak host's request memory budget.
pub(crate) const PINNED_FIT: usize = 15;
/// What the budget keeps beside [`PINNED_FIT`] pinned calls: room for every other kind's
/// small requests at once (a few KiB each), and less than one more pinned call, so the next
/// one is refused whatever else runs.
pub(crate) const REQUEST_MEMORY_RESERVE: usize = PINNED_CHARGE / 2;
/// The soak host's `limits.request_memory_bytes`.
pub(crate) const REQUEST_MEMORY_BYTES: usize = PINNED_FIT * PINNED_CHARGE + REQUEST_MEMORY_RESERVE;

/// The soak host's receipt bounds: `ledger.receipts_per_caller`, `ledger.receipt_bytes_total`
/// and `ledger.receipt_retention_secs`. A `receipt-flood` caller reaches its count within a
/// flood; two callers together reach the total (a keyed `ledger_append` receipt takes about
/// 450 bytes); receipts expire within seconds, so the figures move during the run.
pub(crate) const FLOOD_PER_CALLER: u64 = 128;
pub(crate) const FLOOD_TOTAL_BYTES: u64 = 80 << 10;
pub(crate) const FLOOD_RETENTION_SECS: u64 = 10;
/// How far one call may take the receipts past the total: one receipt (a result is counted
/// once it is written; the bound is checked before the call).
pub(crate) const FLOOD_SLACK_BYTES: u64 = 2 << 10;

/// A 2026-07-28 keyed call of `ledger_append` (`key` is its idempotency key).
pub(crate) fn keyed_append(id: &Value, key: &str) -> Vec<u8> {
    modern_request(id, "tools/call", json!({"name": "ledger_append", "arguments": {"key": key}}))
}

/// What the host charges a body to its request memory budget (its own estimate, with the
/// default limits the soak host keeps).
pub(crate) fn charge_of(body: &[u8]) -> usize {
    mcp_runtime::proto::limits::scan(body, &mcp_runtime::proto::limits::MessageLimits::default())
        .map_or(usize::MAX, |s| s.parsed_bytes())
}

/// The most one `large-payloads` client holds of the request memory budget at once (its
/// request at the value limit), and how many such clients the budget takes beside its
/// reserve: `large-payloads` runs at most that many at once, and never beside
/// `pinned-arguments`.
pub(crate) fn large_at_once() -> (usize, u32) {
    let peak = charge_of(&ping_with_values_at_limit(u64::MAX))
        .max(charge_of(&echo(&json!(u64::MAX), &filler(BIG_TEXT_BYTES))));
    let n = (REQUEST_MEMORY_BYTES - REQUEST_MEMORY_RESERVE) / peak;
    (peak, u32::try_from(n.max(1)).unwrap_or(1))
}

/// The `_meta` of a 2026-07-28 request.
pub(crate) fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": MODERN_VERSION, "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": {"name": "mcp-load-soak", "version": "1"}})
}

/// A 2026-07-28 request body (`params` gets its `_meta`).
pub(crate) fn modern_request(id: &Value, method: &str, mut params: Value) -> Vec<u8> {
    params["_meta"] = modern_meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().into_bytes()
}

/// `soak_flood` arguments that hold the call (no messages) until it is cancelled, or 20 s.
pub(crate) fn holding_args() -> Value {
    json!({"count": 0, "delay_ms": 10_000, "hold_ms": 10_000})
}

/// A call of `soak_flood` held as [`holding_args`] whose `pad` argument makes the host charge
/// it exactly [`PINNED_CHARGE`]: a 2026-07-28 request, or a legacy one.
pub(crate) fn pinned_call(id: &Value, modern: bool) -> Vec<u8> {
    let body = |pad: &str| {
        let mut args = holding_args();
        args["pad"] = json!(pad);
        let params = json!({"name": "soak_flood", "arguments": args});
        if modern {
            modern_request(id, "tools/call", params)
        } else {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
                .to_string()
                .into_bytes()
        }
    };
    // Bytes of the pad add to the charge one for one (no value or object is added), once the
    // body is long enough to be counted value by value (short ones are charged a bound).
    const PROBE: usize = 4096;
    let rest = charge_of(&body(&filler(PROBE))) - PROBE;
    body(&filler(PINNED_CHARGE.saturating_sub(rest)))
}

/// Values, depth and string bytes of a handshake value, counted as the host counts them:
/// every value once, the root at depth 1, string values and object keys in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Measure {
    pub(crate) values: usize,
    pub(crate) depth: usize,
    pub(crate) string_bytes: usize,
}

pub(crate) fn measure(v: &Value) -> Measure {
    fn walk(v: &Value, depth: usize, m: &mut Measure) {
        m.values += 1;
        m.depth = m.depth.max(depth);
        match v {
            Value::String(s) => m.string_bytes += s.len(),
            Value::Array(items) => items.iter().for_each(|i| walk(i, depth + 1, m)),
            Value::Object(map) => map.iter().for_each(|(k, i)| {
                m.string_bytes += k.len();
                walk(i, depth + 1, m);
            }),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    let mut m = Measure { values: 0, depth: 0, string_bytes: 0 };
    walk(v, 1, &mut m);
    m
}

/// Which handshake bound a probe passes by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    Nothing,
    Values,
    Depth,
    Strings,
}

/// `capabilities` exactly at all three handshake limits (`Over::Nothing`), or one past one
/// of them: `{"experimental": {"soak": {"deep": {"d": {...}}, "pad": "xxx", "a0": 0, ...}}}`.
pub(crate) fn handshake_capabilities(over: Over) -> Value {
    // Root, "experimental" and "soak" take depths 1..=3; the chain fills the rest.
    let chain_len = HANDSHAKE_MAX_DEPTH - 3 + usize::from(over == Over::Depth);
    let mut deep = json!({});
    for _ in 1..chain_len {
        deep = json!({ "d": deep });
    }
    let mut soak = serde_json::Map::new();
    soak.insert("deep".into(), deep);
    soak.insert("pad".into(), json!(""));
    let base = measure(&json!({"experimental": {"soak": Value::Object(soak.clone())}}));
    let numbers = HANDSHAKE_MAX_VALUES - base.values + usize::from(over == Over::Values);
    for i in 0..numbers {
        soak.insert(format!("a{i}"), json!(0));
    }
    let used =
        measure(&json!({"experimental": {"soak": Value::Object(soak.clone())}})).string_bytes;
    let pad =
        (HANDSHAKE_MAX_STRING_BYTES + usize::from(over == Over::Strings)).saturating_sub(used);
    soak.insert("pad".into(), json!("p".repeat(pad)));
    json!({"experimental": {"soak": Value::Object(soak)}})
}

/// JSON values in a body as the host's pre-parse scan counts them: one, plus every array or
/// object opened, plus every `,` and `:` outside strings; and the deepest nesting.
pub(crate) fn scan(body: &[u8]) -> (usize, usize) {
    let (mut values, mut depth, mut deepest) = (1usize, 0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                values += 1;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' | b':' => values += 1,
            _ => {}
        }
    }
    (values, deepest)
}

fn zeros(n: usize) -> String {
    let mut s = String::with_capacity(2 * n + 2);
    s.push('[');
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push('0');
    }
    s.push(']');
    s
}

/// `[0,0,...]`: one value past `limits.json_max_values`.
pub(crate) fn values_over() -> Vec<u8> {
    // `[` plus n-1 commas on top of the initial one: n zeros scan as n + 1 values.
    zeros(JSON_MAX_VALUES).into_bytes()
}

/// A `ping` whose `params.pad` is an array of zeros sized so the whole body scans as exactly
/// `limits.json_max_values` values (accepted).
pub(crate) fn ping_with_values_at_limit(id: u64) -> Vec<u8> {
    let frame = |n: usize| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"pad":{}}}}}"#, zeros(n))
    };
    let probe = scan(frame(1).as_bytes()).0;
    frame(1 + JSON_MAX_VALUES - probe).into_bytes()
}

/// A `ping` whose `params.pad` nests arrays so the body is `depth` deep.
pub(crate) fn ping_with_depth(id: u64, depth: usize) -> Vec<u8> {
    // The envelope and `params` take two levels.
    let n = depth.saturating_sub(2);
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"pad":{}{}}}}}"#,
        "[".repeat(n),
        "]".repeat(n)
    )
    .into_bytes()
}

/// A `tools/call echo` of `text`, with request id `id`.
pub(crate) fn echo(id: &Value, text: &str) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}).to_string().into_bytes()
}

/// A string of `n` bytes.
pub(crate) fn filler(n: usize) -> String {
    "x".repeat(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_capabilities_sit_exactly_at_or_one_past_each_limit() {
        let at = Measure {
            values: HANDSHAKE_MAX_VALUES,
            depth: HANDSHAKE_MAX_DEPTH,
            string_bytes: HANDSHAKE_MAX_STRING_BYTES,
        };
        assert_eq!(measure(&handshake_capabilities(Over::Nothing)), at);
        assert_eq!(
            measure(&handshake_capabilities(Over::Values)),
            Measure { values: at.values + 1, ..at }
        );
        assert_eq!(
            measure(&handshake_capabilities(Over::Depth)),
            Measure { depth: at.depth + 1, values: at.values, ..at }
        );
        let strings = measure(&handshake_capabilities(Over::Strings));
        assert_eq!(strings, Measure { string_bytes: at.string_bytes + 1, ..at });
    }

    #[test]
    fn bodies_scan_exactly_at_or_one_past_the_value_and_depth_limits() {
        assert_eq!(scan(&ping_with_values_at_limit(7)).0, JSON_MAX_VALUES);
        assert_eq!(scan(&values_over()).0, JSON_MAX_VALUES + 1);
        assert_eq!(scan(&ping_with_depth(7, JSON_MAX_DEPTH)).1, JSON_MAX_DEPTH);
        assert_eq!(scan(&ping_with_depth(7, JSON_MAX_DEPTH + 1)).1, JSON_MAX_DEPTH + 1);
        assert!(serde_json::from_slice::<Value>(&ping_with_values_at_limit(7)).is_ok());
        assert!(serde_json::from_slice::<Value>(&ping_with_depth(7, JSON_MAX_DEPTH)).is_ok());
        // Strings do not count, escapes included.
        assert_eq!(scan(br#"{"a":"[,:\"{"}"#), (3, 1));
    }

    /// The mirrors above are checked against the host's own code, so a change to its
    /// defaults or its counting fails here rather than quietly moving a probe off its limit.
    #[test]
    fn the_probes_sit_at_or_one_past_the_hosts_own_limits() {
        use mcp_runtime::proto::limits::{
            HandshakeBound, Limit, MessageLimits, check_handshake, scan as host_scan,
        };
        let l = MessageLimits::default();
        let mirrored = (
            JSON_MAX_VALUES,
            JSON_MAX_DEPTH,
            ID_MAX_BYTES,
            METHOD_MAX_BYTES,
            NAME_MAX_BYTES,
            URI_MAX_BYTES,
        );
        assert_eq!(
            mirrored,
            (
                l.json_max_values,
                l.json_max_depth,
                l.id_max_bytes,
                l.method_max_bytes,
                l.name_max_bytes,
                l.uri_max_bytes
            )
        );
        let h = l.handshake;
        assert_eq!(
            (HANDSHAKE_MAX_VALUES, HANDSHAKE_MAX_DEPTH, HANDSHAKE_MAX_STRING_BYTES),
            (h.max_values, h.max_depth, h.max_string_bytes)
        );
        assert_eq!(MAX_BODY_BYTES, mcp_runtime::config::SecurityConfig::default().max_body_bytes);
        let info = json!({});
        assert!(check_handshake(&handshake_capabilities(Over::Nothing), &info, &h).is_ok());
        for (over, bound) in [
            (Over::Values, HandshakeBound::Values),
            (Over::Depth, HandshakeBound::Depth),
            (Over::Strings, HandshakeBound::StringBytes),
        ] {
            assert_eq!(
                check_handshake(&handshake_capabilities(over), &info, &h).unwrap_err().limit,
                Limit::Capabilities(bound)
            );
        }
        assert!(host_scan(&ping_with_values_at_limit(7), &l).is_ok());
        assert_eq!(host_scan(&values_over(), &l).unwrap_err().limit, Limit::JsonValues);
        assert!(host_scan(&ping_with_depth(7, JSON_MAX_DEPTH), &l).is_ok());
        assert_eq!(
            host_scan(&ping_with_depth(7, JSON_MAX_DEPTH + 1), &l).unwrap_err().limit,
            Limit::JsonDepth
        );
    }

    #[test]
    fn pinned_calls_are_charged_exactly_their_share_and_fill_the_budget_past_its_reserve() {
        for modern in [true, false] {
            for id in [json!(1), json!(123_456_789), json!(u64::MAX)] {
                let body = pinned_call(&id, modern);
                assert_eq!(charge_of(&body), PINNED_CHARGE, "modern {modern}, id {id}");
                assert!(body.len() < MAX_BODY_BYTES, "{}", body.len());
            }
        }
        // PINNED_FIT fit with the reserve left for the other kinds, one more never does.
        const { assert!(REQUEST_MEMORY_RESERVE < PINNED_CHARGE && REQUEST_MEMORY_RESERVE > 1 << 20) };
        const { assert!((PINNED_FIT + 1) * PINNED_CHARGE > REQUEST_MEMORY_BYTES) };
        // The host's minimum.
        const { assert!(REQUEST_MEMORY_BYTES >= 1 << 20) };
        // Every modern pinned call gets a place of its caller's (it is refused for memory).
        const {
            assert!(
                PINNED_FIT < MODERN_PER_CALLER
                    && MODERN_MAX_IN_FLIGHT.is_multiple_of(MODERN_PER_CALLER)
            )
        };
        let (peak, n) = large_at_once();
        assert!(
            n >= 1 && peak * n as usize <= REQUEST_MEMORY_BYTES - REQUEST_MEMORY_RESERVE,
            "{peak} x {n}"
        );
        // A small request of another kind is charged a few KiB.
        assert!(charge_of(&echo(&json!(1), "churn 1 0")) < 8 << 10);
        assert!(
            charge_of(&modern_request(
                &json!(1),
                "tools/call",
                json!({"name": "soak_flood", "arguments": holding_args()})
            )) < 8 << 10
        );
    }

    #[test]
    fn the_large_echo_fits_the_body_limit() {
        let body = echo(&json!(1), &filler(BIG_TEXT_BYTES));
        assert!(body.len() < MAX_BODY_BYTES && body.len() > BIG_TEXT_BYTES);
    }
}
