//! Argument checking against a tool's input schema.
//!
//! Supported subset of JSON Schema (enough for tool arguments; anything else is accepted
//! as written): `type` (string or array of strings), `required`, `properties` (recursive),
//! `enum`, `const`, `additionalProperties: false`, `items`, `minItems`, `maxItems`, and
//! local `$ref` to `#/$defs/...`.

use serde_json::Value;

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => {
            v.as_i64().is_some()
                || v.as_u64().is_some()
                || v.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut s = schema;
    for _ in 0..8 {
        let Some(r) = s.get("$ref").and_then(Value::as_str) else { break };
        let Some(path) = r.strip_prefix("#/") else { break };
        match path.split('/').try_fold(root, |node, key| node.get(key)) {
            Some(target) => s = target,
            None => break,
        }
    }
    s
}

/// Where a value sits in the arguments, made into text only for an error message (a path
/// formatted for every argument checked cost more than the check).
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    /// `""` for the arguments themselves, `a.b` for a key, `a[0]` (`arguments[0]`) for an item.
    fn text(&self) -> String {
        match self {
            Path::Root => String::new(),
            Path::Key(parent, k) => {
                let p = parent.text();
                if p.is_empty() { (*k).to_owned() } else { format!("{p}.{k}") }
            }
            Path::Index(parent, i) => format!("{}[{i}]", parent.at()),
        }
    }

    /// The path as a message names it: `arguments` for the arguments themselves.
    fn at(&self) -> String {
        let p = self.text();
        if p.is_empty() { "arguments".to_owned() } else { p }
    }
}

fn check(
    root: &Value,
    schema: &Value,
    v: &Value,
    path: &Path<'_>,
    depth: usize,
) -> Result<(), String> {
    if depth > 32 {
        return Ok(());
    }
    let schema = resolve(root, schema);
    match schema.get("type") {
        Some(Value::String(t)) if !type_matches(t, v) => {
            return Err(format!("{} must be of type {t}", path.at()));
        }
        Some(Value::Array(ts))
            if !ts.iter().filter_map(Value::as_str).any(|t| type_matches(t, v)) =>
        {
            return Err(format!("{} has the wrong type", path.at()));
        }
        _ => {}
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(v)
    {
        return Err(format!("{} must be one of {}", path.at(), Value::Array(allowed.clone())));
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        return Err(format!("{} must be {c}", path.at()));
    }
    if let Value::Object(obj) = v {
        if let Some(Value::Array(req)) = schema.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    let p = path.text();
                    return Err(format!(
                        "missing required argument {:?}{}",
                        r,
                        if p.is_empty() { String::new() } else { format!(" in {p}") }
                    ));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, val) in obj {
            let sub = Path::Key(path, k);
            match props.and_then(|p| p.get(k)) {
                Some(s) => check(root, s, val, &sub, depth + 1)?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("unexpected argument {:?}", sub.text()));
                }
                None => {}
            }
        }
    }
    if let Value::Array(items) = v {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            return Err(format!("{} needs at least {min} items", path.at()));
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            return Err(format!("{} allows at most {max} items", path.at()));
        }
        if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
            for (i, it) in items.iter().enumerate() {
                check(root, item_schema, it, &Path::Index(path, i), depth + 1)?;
            }
        }
    }
    Ok(())
}

/// Check `args` against `schema`.
///
/// # Errors
/// A message naming the first offending argument, meant for the model to read.
pub fn validate_arguments(schema: &Value, args: &Value) -> Result<(), String> {
    check(schema, schema, args, &Path::Root, 0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn required_types_enums_and_additional_properties() {
        let s = json!({"type":"object","properties":{"n":{"type":"integer"},"c":{"enum":["a","b"]}},"required":["n"],"additionalProperties":false});
        assert!(validate_arguments(&s, &json!({"n": 1, "c": "a"})).is_ok());
        assert!(validate_arguments(&s, &json!({})).unwrap_err().contains("missing required"));
        assert!(validate_arguments(&s, &json!({"n": "x"})).unwrap_err().contains("integer"));
        assert!(validate_arguments(&s, &json!({"n": 1, "c": "z"})).is_err());
        assert!(
            validate_arguments(&s, &json!({"n": 1, "zz": 0})).unwrap_err().contains("unexpected")
        );
    }

    #[test]
    fn refs_to_defs_are_followed() {
        let s = json!({"type":"object","$defs":{"a":{"type":"object","properties":{"city":{"type":"string"}}}},"properties":{"addr":{"$ref":"#/$defs/a"}}});
        assert!(validate_arguments(&s, &json!({"addr":{"city":"x"}})).is_ok());
        assert!(validate_arguments(&s, &json!({"addr":{"city":3}})).is_err());
    }

    #[test]
    fn an_error_names_where_the_argument_sits() {
        let s = json!({"type":"object","properties":{
            "a":{"type":"object","properties":{"b":{"type":"integer"}},"required":["c"]},
            "list":{"type":"array","items":{"type":"object","properties":{"x":{"type":"string"}},"additionalProperties":false}}}});
        let err = |v| validate_arguments(&s, &v).unwrap_err();
        assert_eq!(err(json!({"a":{"b":"s","c":1}})), "a.b must be of type integer");
        assert_eq!(err(json!({"a":{"b":1}})), r#"missing required argument "c" in a"#);
        assert_eq!(err(json!({"list":[{"x":"ok"},{"x":1}]})), "list[1].x must be of type string");
        assert_eq!(err(json!({"list":[{"y":1}]})), r#"unexpected argument "list[0].y""#);
        assert_eq!(err(json!([])), "arguments must be of type object");
        let items = json!({"type":"array","items":{"type":"integer"},"maxItems":1});
        assert_eq!(
            validate_arguments(&items, &json!(["a"])).unwrap_err(),
            "arguments[0] must be of type integer"
        );
        assert_eq!(
            validate_arguments(&items, &json!([1, 2])).unwrap_err(),
            "arguments allows at most 1 items"
        );
    }
}
