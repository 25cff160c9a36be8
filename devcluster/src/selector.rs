//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!` not-exists) and field selectors
//! (`metadata.name`, `metadata.namespace`, and the fields the real server supports per kind), as
//! list and watch take them.

use crate::error::{ApiError, Result};
use crate::resources::{ResourceType, View};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// Splits at commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_of(rest: &str) -> Result<Vec<String>> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: expected a set in parentheses, got {rest:?}"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `labelSelector`.
    ///
    /// # Errors
    /// 400 when a requirement does not parse.
    pub fn parse(s: &str) -> Result<Self> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(k) = part.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Req::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Req::NotIn(k.trim().into(), set_of(rest)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Req::In(k.trim().into(), set_of(rest)?)
            } else if part
                .chars()
                .all(|c| c.is_alphanumeric() || "-_./".contains(c))
            {
                Req::Exists(part)
            } else {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {part:?}"
                )));
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether an object's labels match.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::NotEq(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Req::NotIn(k, vs) => get(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value` and `path!=value` terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `fieldSelector`.
    ///
    /// # Errors
    /// 400 for a term without an operator.
    pub fn parse(s: &str) -> Result<Self> {
        let mut terms = Vec::new();
        for part in split_top(s) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            terms.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Parses `fieldSelector` for a kind: only the fields the real server supports for it
    /// (`metadata.name`, `metadata.namespace` and the kind's field labels) are accepted, and
    /// each is rewritten to the path it has in the stored object.
    ///
    /// # Errors
    /// 400 as [`FieldSelector::parse`], and 400 `field label not supported: PATH` for any other
    /// field, as the real server answers.
    pub fn for_kind(s: &str, rt: &ResourceType) -> Result<Self> {
        let mut sel = Self::parse(s)?;
        for (path, _, _) in &mut sel.0 {
            let known = matches!(path.as_str(), "metadata.name" | "metadata.namespace")
                || rt
                    .selectable_fields
                    .iter()
                    .any(|f| f.as_str() == path.as_str());
            if !known {
                return Err(ApiError::bad_request(unsupported(rt, path)));
            }
            if rt.view == Some(View::EventsV1) {
                *path = crate::events::core_field(path);
            }
            // An Event's `source` label is its reporting component; a Pod's `spec.host` is the
            // old name of `spec.nodeName`.
            if rt.kind == "Event" && path == "source" {
                *path = "source.component".into();
            }
            if rt.kind == "Pod" && path == "spec.host" {
                *path = "spec.nodeName".into();
            }
        }
        Ok(sel)
    }

    /// Whether an object's fields match.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = obj;
            for seg in path.split('.') {
                cur = &cur[seg];
            }
            let got = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

/// The real server's refusal of a field label, which differs by kind: custom resources and the
/// kinds with their own field labels say "field label not supported", Jobs name the kind, and
/// the rest list the two generic labels.
fn unsupported(rt: &ResourceType, label: &str) -> String {
    let own_labels = !crate::resources::builtin_field_labels(&rt.group, &rt.kind).is_empty();
    if !rt.builtin || (own_labels && rt.kind != "Job") {
        format!("field label not supported: {label}")
    } else if rt.kind == "Job" {
        format!("field label {label:?} not supported for Job")
    } else {
        format!(
            "{label:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns1", "labels": labels}})
    }

    #[test]
    fn set_based_requirements_match_like_the_api_server() {
        let sel = LabelSelector::parse("app in (db, web),tier notin (cache),env,!legacy,team!=x")
            .expect("parses");
        assert!(sel.matches(&obj(json!({"app": "db", "env": "p", "team": "y"}))));
        assert!(!sel.matches(&obj(json!({"app": "db", "env": "p", "tier": "cache"}))));
        assert!(!sel.matches(&obj(json!({"app": "db", "env": "p", "legacy": "1"}))));
        assert!(!sel.matches(&obj(json!({"app": "api", "env": "p"}))));
    }

    #[test]
    fn field_selectors_name_only_the_kinds_field_labels() {
        let reg = crate::resources::Registry::default();
        let kind = |g: &str, p: &str| reg.find(g, "v1", p).expect("served");
        let pods = kind("", "pods");
        assert!(FieldSelector::for_kind("status.phase=Running,spec.host=n1", &pods).is_ok());
        let err = FieldSelector::for_kind("spec.containers=x", &pods).expect_err("refused");
        assert_eq!(
            (err.code, err.message.as_str()),
            (400, "field label not supported: spec.containers")
        );
        let err =
            FieldSelector::for_kind("data.k=v", &kind("", "configmaps")).expect_err("refused");
        assert_eq!(
            err.message,
            r#""data.k" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        let err = FieldSelector::for_kind("spec.parallelism=1", &kind("batch", "jobs"))
            .expect_err("refused");
        assert_eq!(
            err.message,
            r#"field label "spec.parallelism" not supported for Job"#
        );
        let events = kind("events.k8s.io", "events");
        let sel = FieldSelector::for_kind("regarding.name=orders", &events).expect("accepted");
        assert!(sel.matches(&json!({"involvedObject": {"name": "orders"}})));
        let sel = FieldSelector::for_kind("source=kubelet", &kind("", "events")).expect("accepted");
        assert!(sel.matches(&json!({"source": {"component": "kubelet"}})));
    }

    #[test]
    fn field_selector_matches_name_and_namespace() {
        let sel =
            FieldSelector::parse("metadata.name=a,metadata.namespace!=other").expect("parses");
        assert!(sel.matches(&obj(json!({}))));
        assert!(
            !FieldSelector::parse("metadata.name==b")
                .expect("parses")
                .matches(&obj(json!({})))
        );
    }
}
