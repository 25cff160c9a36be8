//! Object identity, the one way every layer names an object: by kind key, namespace and name.

use crate::At as _;
use serde_json::Value;

/// Which object: its kind key (`group/version/Kind`), namespace (none for a cluster-scoped
/// object) and name. The one identity the host compares objects by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `group/version/Kind` (`v1/ConfigMap` for the core group).
    pub kind: String,
    /// The namespace; an empty one counts as none.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectKey {
    /// The key of an object as JSON.
    pub fn of(object: &Value) -> Self {
        let field = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
        ObjectKey::new(
            kind_of(object),
            Some(field("/metadata/namespace")),
            field("/metadata/name"),
        )
    }

    /// Whether `object` (as JSON) is the object this key names, compared in place: the host
    /// looks each desired object up among the observed ones on every reconcile.
    pub fn is(&self, object: &Value) -> bool {
        let field = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
        if field("/metadata/name") != self.name
            || self.namespace.as_deref().unwrap_or_default() != field("/metadata/namespace")
        {
            return false;
        }
        // `apiVersion/kind` without building it.
        let (api_version, kind) = (field("/apiVersion"), field("/kind"));
        self.kind.len() == api_version.len() + 1 + kind.len()
            && self.kind.starts_with(api_version)
            && self.kind[api_version.len()..].starts_with('/')
            && self.kind.ends_with(kind)
    }

    /// A key from its parts; an empty namespace counts as none.
    pub fn new(kind: impl Into<String>, namespace: Option<&str>, name: impl Into<String>) -> Self {
        ObjectKey {
            kind: kind.into(),
            namespace: namespace.filter(|ns| !ns.is_empty()).map(str::to_string),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A kind as the host names it, `group/version/Kind` (`version/Kind` for the core group, whose
/// group is empty), in borrowed parts: the one place such a key is taken apart. No
/// allocation: rules compare kinds on every object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KindKey<'a> {
    /// The API group; empty for the core group.
    pub group: &'a str,
    /// The version (`v1`, `v1beta1`).
    pub version: &'a str,
    /// The Kind (`StatefulSet`).
    pub kind: &'a str,
}

impl<'a> KindKey<'a> {
    /// `group/version/Kind` or `version/Kind`; `None` for anything else (an empty part, no
    /// version, more than three parts).
    pub fn parse(key: &'a str) -> Option<Self> {
        // Borrowed parts, no allocation: the policy parses the key of every known and
        // privileged kind for every desired object of every reconcile.
        let mut parts = key.split('/');
        let (group, version, kind) = match [parts.next(), parts.next(), parts.next(), parts.next()]
        {
            [Some(version), Some(kind), None, None] => ("", version, kind),
            [Some(group), Some(version), Some(kind), None] if !group.is_empty() => {
                (group, version, kind)
            }
            _ => return None,
        };
        (!version.is_empty() && !kind.is_empty()).then_some(KindKey {
            group,
            version,
            kind,
        })
    }

    /// The `apiVersion` of objects of this kind (`apps/v1`, `v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for KindKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.kind)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.kind)
        }
    }
}

/// (group, Kind) of a kind key ([`KindKey`]); for a key that does not parse, its last part as
/// the Kind, in no group.
pub fn group_kind(kind: &str) -> (&str, &str) {
    match KindKey::parse(kind) {
        Some(k) => (k.group, k.kind),
        None => ("", kind.rsplit('/').next().unwrap_or_default()),
    }
}

/// The kind an object of `kind` is stored as. The API server serves some resources under two
/// groups — an `events.k8s.io/v1` Event is a core `v1` Event — so one object is observed once
/// under each, and the host compares them as one: what a plugin produced under one group is
/// not pruned because it was observed under the other.
pub fn stored_as(kind: &str) -> &str {
    match kind.rsplit_once('/') {
        Some((group_version, "Event")) if group_version.starts_with("events.k8s.io/") => "v1/Event",
        _ => kind,
    }
}

impl ObjectKey {
    /// This key with its kind as stored ([`stored_as`]).
    pub fn stored(mut self) -> Self {
        let stored = stored_as(&self.kind);
        if stored != self.kind {
            self.kind = stored.to_string();
        }
        self
    }
}

/// The kind key of an object as JSON: `apiVersion/kind` (`apps/v1/StatefulSet`, `v1/Secret`).
pub fn kind_of(object: &Value) -> String {
    let field = |f: &str| object.get(f).and_then(Value::as_str).unwrap_or_default();
    format!("{}/{}", field("apiVersion"), field("kind"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_key_parses_with_and_without_a_group_and_nothing_else() {
        let apps = KindKey::parse("apps/v1/StatefulSet").expect("parses");
        assert_eq!(
            (apps.group, apps.version, apps.kind),
            ("apps", "v1", "StatefulSet")
        );
        assert_eq!(apps.api_version(), "apps/v1");
        assert_eq!(apps.to_string(), "apps/v1/StatefulSet");
        let core = KindKey::parse("v1/Pod").expect("parses");
        assert_eq!((core.group, core.version, core.kind), ("", "v1", "Pod"));
        assert_eq!(core.api_version(), "v1");
        assert_eq!(core.to_string(), "v1/Pod");
        for bad in ["Pod", "/v1/Pod", "v1/", "a/b/c/D", "apps//Deployment", ""] {
            assert_eq!(KindKey::parse(bad), None, "{bad}");
        }
        assert_eq!(group_kind("batch/v1/Job"), ("batch", "Job"));
        assert_eq!(group_kind("v1/Secret"), ("", "Secret"));
    }

    #[test]
    fn an_object_key_treats_an_empty_namespace_as_none() {
        let a = ObjectKey::of(&serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": ""},
        }));
        let b = ObjectKey::new("apps/v1/StatefulSet", None, "db");
        assert_eq!(a, b);
        assert_eq!(b.to_string(), "apps/v1/StatefulSet db");
        let c = ObjectKey::new("v1/ConfigMap", Some("shop"), "c");
        assert_eq!(c.to_string(), "v1/ConfigMap shop/c");
        assert_ne!(ObjectKey::new("v1/ConfigMap", Some("a"), "c"), c);
        // `is` agrees with comparing keys.
        let objects = [
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "v1/C", "kind": "onfigMap", "metadata": {"name": "c", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": ""}}),
        ];
        for key in [&a, &c] {
            for o in &objects {
                assert_eq!(key.is(o), *key == ObjectKey::of(o), "{key} against {o}");
            }
        }
    }
}
