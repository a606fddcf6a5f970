//! Request-metadata headers of 2026-07-28 (SPEC.md §3.4): the base64 sentinel, the
//! `x-mcp-header` annotations of a tool's input schema (checked when the catalog is built),
//! and the comparison of mirrored headers with the body.

use base64::Engine as _;
use serde_json::Value;

/// The annotation a tool puts on an input property to have it mirrored as `Mcp-Param-{Name}`.
pub(crate) const ANNOTATION: &str = "x-mcp-header";

/// Largest integer a mirrored header may carry (±(2^53 − 1)).
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Decode a header value: `=?base64?<base64 of UTF-8>?=` (markers lowercase, case-sensitive)
/// is decoded, anything else is taken as it is.
///
/// # Errors
/// A sentinel whose content is not base64 of UTF-8.
pub(crate) fn decode_value(raw: &str) -> Result<String, &'static str> {
    let Some(inner) = raw.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) else {
        return Ok(raw.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .map_err(|_| "its =?base64?…?= value is not base64")?;
    String::from_utf8(bytes).map_err(|_| "its =?base64?…?= value is not UTF-8")
}

/// Encode a value as a client must: as it is when it is plain visible ASCII without leading or
/// trailing whitespace and does not look like the sentinel, else the base64 sentinel (the
/// client's side of the rule: built with the `client` feature).
#[cfg(any(test, feature = "client"))]
#[must_use]
pub(crate) fn encode_value(v: &str) -> String {
    let plain = v.bytes().all(|b| (0x20..0x7f).contains(&b))
        && v.trim() == v
        && !(v.starts_with("=?base64?") && v.ends_with("?="));
    if plain {
        v.to_owned()
    } else {
        format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(v.as_bytes()))
    }
}

/// The JSON type of a mirrored parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// `string`: compared exactly.
    String,
    /// `integer`: compared numerically.
    Integer,
    /// `boolean`: `true` / `false`.
    Boolean,
}

/// One mirrored parameter of a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderParam {
    /// `{Name}` of `Mcp-Param-{Name}`, as annotated.
    pub name: String,
    /// `{name}` lowercased, for the case-insensitive header lookup.
    pub lower: String,
    /// Property keys from the schema's root to the parameter.
    pub path: Vec<String>,
    /// Its type.
    pub kind: ParamKind,
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Schema keywords under which an annotation is not reachable purely through `properties`.
const NOT_REACHABLE: [&str; 13] = [
    "items",
    "prefixItems",
    "additionalProperties",
    "patternProperties",
    "oneOf",
    "anyOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "$defs",
    "definitions",
];

/// Read the `x-mcp-header` annotations of an input schema.
///
/// # Errors
/// Why the annotations are invalid (which invalidates the tool): an empty name, one that is
/// not an RFC 9110 token, a duplicate (case-insensitive), one on a type other than integer,
/// string or boolean, or one not reachable through `properties` keys only.
pub(crate) fn params_of(schema: &Value) -> Result<Vec<HeaderParam>, String> {
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out, true)?;
    let mut seen = std::collections::HashSet::new();
    for p in &out {
        if !seen.insert(p.lower.clone()) {
            return Err(format!(
                "{ANNOTATION} {:?} is used twice (names are case-insensitive)",
                p.name
            ));
        }
    }
    Ok(out)
}

fn walk(
    schema: &Value,
    path: &mut Vec<String>,
    out: &mut Vec<HeaderParam>,
    reachable: bool,
) -> Result<(), String> {
    let Value::Object(m) = schema else { return Ok(()) };
    if let Some(a) = m.get(ANNOTATION) {
        let at = if path.is_empty() {
            "the schema root".to_owned()
        } else {
            format!("property {:?}", path.join("."))
        };
        let name = a.as_str().ok_or_else(|| format!("{ANNOTATION} on {at} is not a string"))?;
        if !reachable || path.is_empty() {
            return Err(format!(
                "{ANNOTATION} {name:?} on {at} is not reachable through properties alone"
            ));
        }
        if !is_token(name) {
            return Err(format!("{ANNOTATION} {name:?} on {at} is not a non-empty RFC 9110 token"));
        }
        let kind = match m.get("type").and_then(Value::as_str) {
            Some("string") => ParamKind::String,
            Some("integer") => ParamKind::Integer,
            Some("boolean") => ParamKind::Boolean,
            other => {
                return Err(format!(
                    "{ANNOTATION} {name:?} on {at} of type {other:?}: only integer, string and boolean can be mirrored"
                ));
            }
        };
        out.push(HeaderParam {
            name: name.to_owned(),
            lower: name.to_ascii_lowercase(),
            path: path.clone(),
            kind,
        });
    }
    if let Some(Value::Object(props)) = m.get("properties") {
        for (k, v) in props {
            path.push(k.clone());
            walk(v, path, out, reachable)?;
            path.pop();
        }
    }
    for key in NOT_REACHABLE {
        match m.get(key) {
            Some(Value::Array(items)) => {
                items.iter().try_for_each(|v| walk(v, path, out, false))?
            }
            Some(Value::Object(o))
                if key == "$defs" || key == "definitions" || key == "patternProperties" =>
            {
                o.values().try_for_each(|v| walk(v, path, out, false))?
            }
            Some(v) => walk(v, path, out, false)?,
            None => {}
        }
    }
    Ok(())
}

/// Compare the mirrored `Mcp-Param-*` headers with a `tools/call`'s arguments. `header`
/// looks a header up by its lowercase `{name}`.
///
/// # Errors
/// What does not match: a value in the body without its header, a header without a value in
/// the body, a header that differs from the body (integers compared as numbers), or a header
/// that cannot be decoded.
pub(crate) fn check_params<'h>(
    params: &[HeaderParam],
    arguments: Option<&Value>,
    header: impl Fn(&str) -> Option<&'h str>,
) -> Result<(), String> {
    for p in params {
        let mut v = arguments;
        for k in &p.path {
            v = v.and_then(|x| x.get(k));
        }
        let body = v.filter(|x| !x.is_null());
        let name = format!("Mcp-Param-{}", p.name);
        match (body, header(&p.lower)) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(format!("{name} is missing while the body has the parameter"));
            }
            (None, Some(_)) => {
                return Err(format!("{name} is sent while the body has no value for it"));
            }
            (Some(b), Some(raw)) => {
                let h = decode_value(raw).map_err(|e| format!("{name}: {e}"))?;
                let same = match p.kind {
                    ParamKind::String => b.as_str() == Some(h.as_str()),
                    ParamKind::Boolean => {
                        b.as_bool().map(|x| if x { "true" } else { "false" }) == Some(h.as_str())
                    }
                    ParamKind::Integer => match (integer_of(b), h.trim().parse::<i64>().ok()) {
                        (Some(x), Some(y)) => {
                            x == y && (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&y)
                        }
                        _ => false,
                    },
                };
                if !same {
                    return Err(format!("{name} does not match the body's value"));
                }
            }
        }
    }
    Ok(())
}

fn integer_of(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64)
            .map(|f| f as i64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_base64_sentinel_is_decoded_and_plain_values_pass_as_they_are() {
        assert_eq!(decode_value("plain").unwrap(), "plain");
        assert_eq!(decode_value("=?base64?w6lsw6h2ZQ==?=").unwrap(), "élève");
        assert!(decode_value("=?base64?***?=").is_err());
        assert_eq!(
            decode_value("=?BASE64?eA==?=").unwrap(),
            "=?BASE64?eA==?=",
            "markers are case-sensitive"
        );
        for v in ["plain", "élève", " padded ", "=?base64?x?=", "tab\there"] {
            assert_eq!(decode_value(&encode_value(v)).unwrap(), v);
        }
        assert_eq!(encode_value("plain"), "plain");
        assert!(
            encode_value("=?base64?x?=").starts_with("=?base64?"),
            "a literal that looks like the sentinel is itself encoded"
        );
    }

    #[test]
    fn annotations_are_read_through_properties_only() {
        let s = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "opts":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}
        }});
        let p = params_of(&s).unwrap();
        assert_eq!(p.len(), 2);
        assert!(
            p.iter()
                .any(|x| x.name == "N" && x.path == ["opts", "n"] && x.kind == ParamKind::Integer)
        );
    }

    #[test]
    fn invalid_annotations_are_refused_with_the_reason() {
        let bad = [
            (json!({"properties":{"a":{"type":"string","x-mcp-header":""}}}), "token"),
            (json!({"properties":{"a":{"type":"string","x-mcp-header":"a b"}}}), "token"),
            (json!({"properties":{"a":{"type":"string","x-mcp-header":"X\r\n"}}}), "token"),
            (json!({"properties":{"a":{"type":"number","x-mcp-header":"A"}}}), "only integer"),
            (
                json!({"properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}),
                "twice",
            ),
            (
                json!({"properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}),
                "reachable",
            ),
            (
                json!({"properties":{"a":{"anyOf":[{"type":"string","x-mcp-header":"A"}]}}}),
                "reachable",
            ),
        ];
        for (schema, why) in bad {
            let e = params_of(&schema).unwrap_err();
            assert!(e.contains(why), "{schema}: {e}");
        }
    }

    #[test]
    fn mirrored_headers_must_match_the_body_and_integers_compare_as_numbers() {
        let p = params_of(&json!({"properties":{"n":{"type":"integer","x-mcp-header":"N"},"s":{"type":"string","x-mcp-header":"S"},"b":{"type":"boolean","x-mcp-header":"B"}}})).unwrap();
        let check = |args: Value, hs: &[(&'static str, &'static str)]| {
            check_params(&p, Some(&args), |n| hs.iter().find(|(k, _)| *k == n).map(|(_, v)| *v))
        };
        assert!(
            check(json!({"n": 42, "s": "x", "b": true}), &[("n", "42"), ("s", "x"), ("b", "true")])
                .is_ok()
        );
        assert!(check(json!({"n": 42.0}), &[("n", "042")]).is_ok(), "numeric comparison");
        assert!(check(json!({}), &[]).is_ok(), "absent values, absent headers");
        assert!(check(json!({"s": null}), &[]).is_ok(), "null is absent");
        assert!(check(json!({"s": "é"}), &[("s", "=?base64?w6k=?=")]).is_ok());
        assert!(check(json!({"n": 42}), &[]).unwrap_err().contains("missing"));
        assert!(check(json!({}), &[("s", "x")]).unwrap_err().contains("no value"));
        assert!(check(json!({"s": "x"}), &[("s", "y")]).is_err());
        assert!(check(json!({"b": true}), &[("b", "True")]).is_err(), "values are case-sensitive");
        assert!(check(json!({"n": 1}), &[("n", "1.5")]).is_err());
        assert!(
            check(json!({"n": i64::MIN}), &[("n", "-9223372036854775808")]).is_err(),
            "out of the safe range, and no overflow"
        );
    }
}
