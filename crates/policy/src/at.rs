//! [`At`]: `Value::pointer` without its allocations.
//!
//! serde_json's `pointer` unescapes every token of the pointer (`~1`, `~0`) into a new
//! `String`, two allocations a token, even when there is nothing to unescape. The host looks
//! fields up by pointer on every object of every reconcile (identity, ownership, stamps): under
//! callgrind that was 11% of a steady-state reconcile's instructions, most of it allocating and
//! freeing those strings. The pointers the host spells have no escapes; one that does goes the
//! serde_json way.

use serde_json::Value;

/// A JSON pointer lookup (RFC 6901) that allocates nothing.
pub trait At {
    /// What `Value::pointer` returns, for the same pointer.
    fn at(&self, pointer: &str) -> Option<&Value>;
    /// What `Value::pointer_mut` returns, for the same pointer.
    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value>;
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.contains('~') {
            return self.pointer(pointer);
        }
        if pointer.is_empty() {
            return Some(self);
        }
        pointer
            .strip_prefix('/')?
            .split('/')
            .try_fold(self, |value, token| match value {
                Value::Object(map) => map.get(token),
                Value::Array(list) => index(token).and_then(|i| list.get(i)),
                _ => None,
            })
    }

    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value> {
        if pointer.contains('~') {
            return self.pointer_mut(pointer);
        }
        if pointer.is_empty() {
            return Some(self);
        }
        pointer
            .strip_prefix('/')?
            .split('/')
            .try_fold(self, |value, token| match value {
                Value::Object(map) => map.get_mut(token),
                Value::Array(list) => index(token).and_then(|i| list.get_mut(i)),
                _ => None,
            })
    }
}

/// An array index as RFC 6901 (and serde_json) reads one: digits, no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_what_serde_json_finds_for_every_pointer() {
        let mut doc = json!({
            "metadata": {"name": "db", "labels": {"a/b": "slash", "m~n": "tilde", "": "empty"}},
            "spec": {"containers": [{"name": "c0"}, {"name": "c1"}], "replicas": 3},
            "": {"": "nested empty"},
            "list": [[1, 2], [3]],
        });
        let pointers = [
            "",
            "/",
            "//",
            "/metadata",
            "/metadata/name",
            "/metadata/name/deeper",
            "/metadata/missing",
            "/metadata/labels/a~1b",
            "/metadata/labels/m~0n",
            "/metadata/labels/",
            "/metadata/labels/a/b",
            "/spec/containers/0/name",
            "/spec/containers/1",
            "/spec/containers/2",
            "/spec/containers/01",
            "/spec/containers/+1",
            "/spec/containers/-1",
            "/spec/containers/name",
            "/spec/replicas/0",
            "/list/0/1",
            "/list/1/0",
            "metadata",
            "/metadata/",
        ];
        for pointer in pointers {
            assert_eq!(doc.at(pointer), doc.pointer(pointer), "{pointer:?}");
            let expected = doc.clone().pointer_mut(pointer).map(|v| v.clone());
            assert_eq!(
                doc.at_mut(pointer).map(|v| v.clone()),
                expected,
                "{pointer:?}"
            );
        }
        *doc.at_mut("/spec/containers/1/name").unwrap() = json!("renamed");
        assert_eq!(doc["spec"]["containers"][1]["name"], "renamed");
    }
}
