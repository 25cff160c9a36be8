//! Validation of custom resources against their CRD's `openAPIV3Schema`: the structural-schema
//! subset CRDs use (types, required, enum, bounds, lengths, patterns, item counts, nullable,
//! int-or-string, preserve-unknown-fields), with pruning of unknown fields like the real server.

use crate::error::Cause;
use serde_json::Value;

/// What validation found: field errors (422) and unknown fields (pruned, or 400 when strict).
#[derive(Debug, Default)]
pub struct Outcome {
    /// Invalid fields.
    pub causes: Vec<Cause>,
    /// Paths of fields the schema does not know (already pruned from the object).
    pub unknown: Vec<String>,
}

/// Validates and prunes `obj` (its `spec`, `status` and other non-metadata fields) in place.
pub fn validate(obj: &mut Value, schema: &Value) -> Outcome {
    let mut out = Outcome::default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return out;
    };
    let Some(map) = obj.as_object_mut() else {
        return out;
    };
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    for key in map.keys().cloned().collect::<Vec<_>>() {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match (props.get(&key), map.get_mut(&key)) {
            (Some(s), Some(v)) => check(v, s, &key, &mut out),
            (None, _) if !preserve => {
                map.remove(&key);
                out.unknown.push(key);
            }
            _ => {}
        }
    }
    required(map, schema, "", &mut out);
    out
}

fn invalid(out: &mut Outcome, path: &str, message: String) {
    out.causes.push(Cause {
        reason: "FieldValueInvalid".into(),
        field: path.into(),
        message,
    });
}

fn required(map: &serde_json::Map<String, Value>, schema: &Value, path: &str, out: &mut Outcome) {
    for r in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(r) {
            let field = if path.is_empty() {
                r.to_string()
            } else {
                format!("{path}.{r}")
            };
            out.causes.push(Cause {
                reason: "FieldValueRequired".into(),
                field,
                message: "Required value".into(),
            });
        }
    }
}

fn type_ok(v: &Value, ty: &str) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

fn check(v: &mut Value, s: &Value, path: &str, out: &mut Outcome) {
    if v.is_null() {
        if s.get("nullable") != Some(&Value::Bool(true)) {
            invalid(
                out,
                path,
                format!(
                    "Invalid value: \"null\": {path} in body must be of type {}",
                    s["type"].as_str().unwrap_or("object")
                ),
            );
        }
        return;
    }
    let int_or_string = s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if int_or_string {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            invalid(
                out,
                path,
                format!(
                    "Invalid value: \"{}\": {path} in body must be of type integer or string",
                    kind_of(v)
                ),
            );
        }
        return;
    }
    if let Some(ty) = s.get("type").and_then(Value::as_str)
        && !type_ok(v, ty)
    {
        invalid(
            out,
            path,
            format!(
                "Invalid value: \"{}\": {path} in body must be of type {ty}: \"{}\"",
                kind_of(v),
                kind_of(v)
            ),
        );
        return;
    }
    if let Some(options) = s.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        let listed: Vec<String> = options.iter().map(Value::to_string).collect();
        invalid(
            out,
            path,
            format!(
                "Unsupported value: {v}: supported values: {}",
                listed.join(", ")
            ),
        );
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            invalid(
                out,
                path,
                format!(
                    "Invalid value: {v}: {path} in body should be greater than or equal to {min}"
                ),
            );
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            invalid(
                out,
                path,
                format!("Invalid value: {v}: {path} in body should be less than or equal to {max}"),
            );
        }
    }
    match v {
        Value::String(text) => {
            let len = text.chars().count() as u64;
            if s.get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len < m)
            {
                invalid(
                    out,
                    path,
                    format!(
                        "Invalid value: \"{text}\": {path} in body should be at least {} chars long",
                        s["minLength"]
                    ),
                );
            }
            if s.get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len > m)
            {
                invalid(
                    out,
                    path,
                    format!("Too long: may not be more than {} bytes", s["maxLength"]),
                );
            }
            if let Some(p) = s.get("pattern").and_then(Value::as_str)
                && regex::Regex::new(p).is_ok_and(|re| !re.is_match(text))
            {
                invalid(
                    out,
                    path,
                    format!("Invalid value: \"{text}\": {path} in body should match '{p}'"),
                );
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if s.get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
            {
                invalid(
                    out,
                    path,
                    format!(
                        "Invalid value: {n}: {path} in body should have at least {} items",
                        s["minItems"]
                    ),
                );
            }
            if s.get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                out.causes.push(Cause {
                    reason: "FieldValueTooMany".into(),
                    field: path.into(),
                    message: format!("Too many: {n}: must have at most {} items", s["maxItems"]),
                });
            }
            if let Some(item_schema) = s.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    check(item, item_schema, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            let preserve =
                s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            for key in map.keys().cloned().collect::<Vec<_>>() {
                let child_path = format!("{path}.{key}");
                let child_schema = props.and_then(|p| p.get(&key)).or(additional);
                match (child_schema, map.get_mut(&key)) {
                    (Some(cs), Some(cv)) => check(cv, cs, &child_path, out),
                    (None, _) if !preserve && (props.is_some() || s.get("type").is_some()) => {
                        map.remove(&key);
                        out.unknown.push(child_path);
                    }
                    _ => {}
                }
            }
            if let Some(max) = s.get("maxProperties").and_then(Value::as_u64)
                && map.len() as u64 > max
            {
                out.causes.push(Cause {
                    reason: "FieldValueTooMany".into(),
                    field: path.into(),
                    message: format!("Too many: {}: must have at most {max} items", map.len()),
                });
            }
            required(map, s, path, out);
        }
        _ => {}
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 9},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "name": {"type": "string", "pattern": "^[a-z]+$"},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    }

    #[test]
    fn errors_name_the_field_path_like_the_api_server() {
        let mut obj = json!({"spec": {"size": 12, "mode": "c", "name": "X1"}});
        let out = validate(&mut obj, &schema());
        let fields: Vec<&str> = out.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, vec!["spec.mode", "spec.name", "spec.size"]);
        assert!(
            out.causes[2]
                .message
                .contains("should be less than or equal to 9")
        );
    }

    #[test]
    fn missing_required_and_wrong_types_are_reported() {
        let mut obj = json!({"spec": {"mode": 3}});
        let out = validate(&mut obj, &schema());
        assert!(
            out.causes
                .iter()
                .any(|c| c.field == "spec.size" && c.reason == "FieldValueRequired")
        );
        assert!(
            out.causes
                .iter()
                .any(|c| c.field == "spec.mode" && c.message.contains("must be of type string"))
        );
    }

    #[test]
    fn unknown_fields_are_pruned_except_where_preserved() {
        let mut obj =
            json!({"spec": {"size": 1, "bogus": 1, "extra": {"anything": 1}}, "other": 1});
        let out = validate(&mut obj, &schema());
        assert!(out.causes.is_empty());
        assert_eq!(out.unknown, vec!["other", "spec.bogus"]);
        assert_eq!(obj, json!({"spec": {"size": 1, "extra": {"anything": 1}}}));
    }
}
