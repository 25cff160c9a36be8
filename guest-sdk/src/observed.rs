//! The observed objects of a run, each parsed into a `Value` only when the plugin asks for it.
//!
//! The host sends every child of the kinds a plugin produces or reads, and a plugin usually
//! looks at a few of them by kind and name. A first pass reads each text's `apiVersion`,
//! `kind` and `metadata.name` and skips the rest without building anything; the whole object
//! is parsed the first time a plugin reads it. The first pass checks all of the text, so an
//! unreadable object is still refused before the plugin runs.

use std::cell::OnceCell;

use serde::Deserialize;
use serde_json::Value;

use crate::{Error, Result};

/// The observed objects, in the order the host sent them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    items: Vec<Item>,
    /// Every object, for [`crate::Context::observed_all`], made on the first call.
    all: OnceCell<Vec<Value>>,
}

#[derive(Debug, Clone)]
struct Item {
    api_version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    /// The host's text, while the object is not parsed.
    text: String,
    value: OnceCell<Value>,
}

/// What the first pass reads; serde skips every other field. Fields of another type than
/// these, repeated keys and texts that are not objects fail it, and are parsed whole instead.
#[derive(Deserialize)]
struct Head {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<HeadMetadata>,
}

#[derive(Deserialize)]
struct HeadMetadata {
    name: Option<String>,
}

impl Observed {
    /// The objects of the host's texts.
    ///
    /// # Errors
    /// [`Error::Failed`] naming the first text that is not valid JSON.
    pub(crate) fn from_texts(texts: &[String]) -> Result<Self> {
        let items = texts
            .iter()
            .enumerate()
            .map(|(i, text)| match serde_json::from_str::<Head>(text) {
                Ok(head) => Ok(Item {
                    api_version: head.api_version,
                    kind: head.kind,
                    name: head.metadata.and_then(|m| m.name),
                    text: text.clone(),
                    value: OnceCell::new(),
                }),
                Err(_) => serde_json::from_str(text)
                    .map(Item::parsed)
                    .map_err(|e| Error::Failed(format!("observed[{i}] is not valid JSON: {e}"))),
            })
            .collect::<Result<_>>()?;
        Ok(Observed {
            items,
            all: OnceCell::new(),
        })
    }

    /// Adds objects already parsed (the test harness).
    pub(crate) fn extend(&mut self, objects: impl IntoIterator<Item = Value>) {
        self.items.extend(objects.into_iter().map(Item::parsed));
        self.all = OnceCell::new();
    }

    /// Every object.
    pub(crate) fn all(&self) -> &[Value] {
        self.all.get_or_init(|| {
            self.items
                .iter()
                .filter_map(|i| i.value().cloned())
                .collect()
        })
    }

    /// The objects of `kind` (`group/version/Kind`).
    pub(crate) fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.items
            .iter()
            .filter(move |i| is_kind(i.api_version.as_deref(), i.kind.as_deref(), kind))
            .filter_map(Item::value)
    }

    /// The object of `kind` with this name.
    pub(crate) fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.items
            .iter()
            .find(|i| {
                i.name.as_deref() == Some(name)
                    && is_kind(i.api_version.as_deref(), i.kind.as_deref(), kind)
            })
            .and_then(Item::value)
    }
}

impl Item {
    fn parsed(value: Value) -> Self {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        Item {
            api_version: text(value.get("apiVersion")),
            kind: text(value.get("kind")),
            name: text(value.pointer("/metadata/name")),
            text: String::new(),
            value: OnceCell::from(value),
        }
    }

    /// The object, parsed on the first call. The first pass read all of the text, so parsing
    /// it again does not fail; if it did, the object is left out, and said so.
    fn value(&self) -> Option<&Value> {
        if let Some(value) = self.value.get() {
            return Some(value);
        }
        match serde_json::from_str(&self.text) {
            Ok(value) => Some(self.value.get_or_init(|| value)),
            Err(e) => {
                crate::log::warn(format!(
                    "observed {}/{} left out, not readable: {e}",
                    self.kind.as_deref().unwrap_or("?"),
                    self.name.as_deref().unwrap_or("?")
                ));
                None
            }
        }
    }
}

/// True when `api_version` and `kind` make `key` (`group/version/Kind`).
pub(crate) fn is_kind(api_version: Option<&str>, kind: Option<&str>, key: &str) -> bool {
    let (Some(api_version), Some(k)) = (api_version, kind) else {
        return false;
    };
    key.len() == api_version.len() + 1 + k.len()
        && key.starts_with(api_version)
        && key.ends_with(k)
        && key.as_bytes()[api_version.len()] == b'/'
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn texts(objects: &[Value]) -> Vec<String> {
        objects.iter().map(Value::to_string).collect()
    }

    #[test]
    fn objects_are_found_by_kind_and_name_and_parsed_only_when_read() {
        let objects = [
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                   "metadata": {"name": "db", "labels": {"a": "b"}},
                   "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c"}]}}},
                   "status": {"readyReplicas": 2}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                   "data": {"password": "cw=="}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other"}}),
        ];
        let observed = Observed::from_texts(&texts(&objects)).expect("valid texts");
        assert!(observed.items.iter().all(|i| i.value.get().is_none()));

        assert_eq!(
            observed.find("apps/v1/StatefulSet", "db"),
            Some(&objects[0])
        );
        assert_eq!(observed.find("v1/Secret", "db"), Some(&objects[1]));
        assert_eq!(observed.find("v1/Secret", "nope"), None);
        assert_eq!(observed.find("apps/v1/Secret", "db"), None);
        // Only what was read was parsed.
        let parsed: Vec<bool> = observed
            .items
            .iter()
            .map(|i| i.value.get().is_some())
            .collect();
        assert_eq!(parsed, [true, true, false]);

        let secrets: Vec<&Value> = observed.of_kind("v1/Secret").collect();
        assert_eq!(secrets, [&objects[1], &objects[2]]);
        assert_eq!(observed.all(), objects);
    }

    #[test]
    fn texts_the_first_pass_cannot_read_are_parsed_whole_as_before() {
        // Each of these is valid JSON the first pass refuses: the object is parsed whole, and
        // found (or not) exactly as a `Value` would be.
        let odd = [
            r#"{"apiVersion":"v1","kind":"ConfigMap","kind":"Secret","metadata":{"name":"dup"}}"#,
            r#"{"apiVersion":1,"kind":"ConfigMap","metadata":{"name":"number"}}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":["not","an","object"]}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":{"not":"a string"}}}"#,
            r#"["not an object"]"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":null}}"#,
        ]
        .map(String::from);
        let observed = Observed::from_texts(&odd).expect("valid JSON");
        let whole: Vec<Value> = odd
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        assert_eq!(observed.all(), whole);
        // serde_json keeps the last of repeated keys.
        assert_eq!(observed.find("v1/Secret", "dup"), Some(&whole[0]));
        assert_eq!(observed.find("v1/ConfigMap", "dup"), None);
        assert_eq!(observed.of_kind("v1/ConfigMap").count(), 3);
        assert_eq!(observed.of_kind("1/ConfigMap").count(), 0);
    }

    #[test]
    fn an_unreadable_text_is_refused_before_the_plugin_runs_naming_it() {
        let bad = [
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ok"}}).to_string(),
            // Broken after the fields the first pass reads: it still reads all of the text.
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"},"data":{"a":}"#.into(),
        ];
        let err = Observed::from_texts(&bad).expect_err("invalid JSON");
        assert!(
            matches!(&err, Error::Failed(m) if m.starts_with("observed[1] is not valid JSON")),
            "{err:?}"
        );
    }

    #[test]
    fn objects_added_after_every_object_was_listed_are_listed_too() {
        let mut observed =
            Observed::from_texts(&texts(&[json!({"apiVersion": "v1", "kind": "Secret"})]))
                .expect("valid");
        assert_eq!(observed.all().len(), 1);
        observed.extend([json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "added"}})]);
        assert_eq!(observed.all().len(), 2);
        assert!(observed.find("v1/ConfigMap", "added").is_some());
    }
}
