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

fn check(root: &Value, schema: &Value, v: &Value, path: &str, depth: usize) -> Result<(), String> {
    if depth > 32 {
        return Ok(());
    }
    let schema = resolve(root, schema);
    let at = |p: &str| if p.is_empty() { "arguments".to_owned() } else { p.to_owned() };
    match schema.get("type") {
        Some(Value::String(t)) if !type_matches(t, v) => {
            return Err(format!("{} must be of type {t}", at(path)));
        }
        Some(Value::Array(ts))
            if !ts.iter().filter_map(Value::as_str).any(|t| type_matches(t, v)) =>
        {
            return Err(format!("{} has the wrong type", at(path)));
        }
        _ => {}
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(v)
    {
        return Err(format!("{} must be one of {}", at(path), Value::Array(allowed.clone())));
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        return Err(format!("{} must be {c}", at(path)));
    }
    if let Value::Object(obj) = v {
        if let Some(Value::Array(req)) = schema.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!(
                        "missing required argument {:?}{}",
                        r,
                        if path.is_empty() { String::new() } else { format!(" in {path}") }
                    ));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, val) in obj {
            let sub =
                format!("{}{k}", if path.is_empty() { String::new() } else { format!("{path}.") });
            match props.and_then(|p| p.get(k)) {
                Some(s) => check(root, s, val, &sub, depth + 1)?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("unexpected argument {sub:?}"));
                }
                None => {}
            }
        }
    }
    if let Value::Array(items) = v {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            return Err(format!("{} needs at least {min} items", at(path)));
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            return Err(format!("{} allows at most {max} items", at(path)));
        }
        if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
            for (i, it) in items.iter().enumerate() {
                check(root, item_schema, it, &format!("{}[{i}]", at(path)), depth + 1)?;
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
    check(schema, schema, args, "", 0)
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
}
