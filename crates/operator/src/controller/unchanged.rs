//! An apply that would write nothing, known without deciding it again: the inputs of the
//! apply's decisions hashed ([`apply_inputs`]), and compared with those of the parent's last
//! apply that wrote and read nothing ([`super::remembered::Remembered::wrote_nothing`]).
//!
//! # Why
//! In a steady state every reconcile of a parent ends with the same decision for each desired
//! object: applying it would change nothing ([`up_to_date`](super::plan::up_to_date)).
//! Reaching it costs the host a copy of the object decorated with owner, labels and
//! provenance, its stamp (the object as JSON, hashed), and a comparison with the child as
//! observed (docs/PERFORMANCE.md). Those decisions ([`claim`](super::plan::claim),
//! [`to_apply`](super::plan::to_apply), `up_to_date`) are functions of the inputs hashed here
//! and of nothing else, so when the inputs are the same as for an apply that wrote nothing and
//! read nothing, so is the outcome.
//!
//! # Guarantees
//! - Any change to a desired object, to who produced it (plugin and digest), to the parent's
//!   identity or the finalizing flag, and any write to an observed child (the API server gives
//!   an object a new `resourceVersion` with each write), a child appearing or going, or a
//!   relist of a cache, changes the inputs: the apply is decided in full again, and what
//!   drifted is put back.
//! - Only an apply that read nothing is remembered: an apply that read an object by name (one
//!   not yet in the caches) decided on something these inputs do not hold.
//!
//! # Assumptions
//! The observed children are as the caches hold them: an object of the same uid and
//! `resourceVersion` is the same object, but for a relist, which may bring an object the API
//! server now serves differently (defaulted under a new schema, converted by a new webhook)
//! with the version it had — hence the count of relists among the inputs. The remembered
//! inputs live as long as the caches (both belong to the parent kind's controller).

use windlass_policy::{At as _, pipeline::Desired};

use serde_json::Value;

use super::plan::ParentRef;

/// The first 16 bytes of BLAKE3 of an apply's inputs.
pub type Fingerprint = [u8; 16];

/// The inputs of an apply's decisions, hashed: the desired objects in order with who produced
/// each, the parent, whether the parent's plugins finalize, each observed child's type, uid
/// and `resourceVersion` in order, and `relists`, the listings the caches have swapped in.
/// None when an observed child lacks a uid or version, which an object read from the API
/// server does not: such a set is not remembered.
pub fn apply_inputs(
    desired: &[Desired],
    parent: &ParentRef,
    observed: &[Value],
    finalizing: bool,
    relists: u64,
) -> Option<Fingerprint> {
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUFFER.with_borrow_mut(|buffer| {
        buffer.clear();
        let framed = frame(
            &mut Framed(buffer),
            desired,
            parent,
            observed,
            finalizing,
            relists,
        );
        let fingerprint = framed.map(|()| {
            let mut out = [0; 16];
            out.copy_from_slice(&blake3::hash(buffer).as_bytes()[..16]);
            out
        });
        // A rare large set does not keep its buffer.
        if buffer.capacity() > 256 * 1024 {
            *buffer = Vec::new();
        }
        fingerprint
    })
}

/// Writes the inputs into `hash`, in the order [`apply_inputs`] names them; none when an
/// observed child lacks a uid or version.
fn frame(
    hash: &mut Framed<'_>,
    desired: &[Desired],
    parent: &ParentRef,
    observed: &[Value],
    finalizing: bool,
    relists: u64,
) -> Option<()> {
    hash.count_u64(relists);
    hash.str(&parent.api_version);
    hash.str(&parent.kind);
    hash.str(&parent.name);
    hash.str(&parent.uid);
    hash.opt(parent.namespace.as_deref());
    hash.flag(parent.adopts_retained);
    hash.flag(finalizing);
    hash.count(desired.len());
    for d in desired {
        hash.str(&d.plugin);
        hash.str(&d.digest);
        hash.str(&d.object.kind);
        hash.opt(d.object.namespace.as_deref());
        hash.str(&d.object.name);
        hash.value(&d.object.object);
    }
    hash.count(observed.len());
    for o in observed {
        let uid = o.at("/metadata/uid").and_then(Value::as_str)?;
        let version = o.at("/metadata/resourceVersion").and_then(Value::as_str)?;
        // From the cache's resource, not the object: one object may be observed under two.
        hash.opt(o.get("apiVersion").and_then(Value::as_str));
        hash.opt(o.get("kind").and_then(Value::as_str));
        hash.str(uid);
        hash.str(version);
    }
    Some(())
}

/// The bytes to hash, written as length-prefixed fields and tagged values, so that no two
/// different sequences of fields write the same bytes. Written into one buffer and hashed
/// once: BLAKE3 fed many small pieces costs more than the bytes, and JSON text more to write
/// (its strings escaped, its numbers formatted) than these.
struct Framed<'a>(&'a mut Vec<u8>);

impl Framed<'_> {
    fn count(&mut self, n: usize) {
        self.count_u64(n as u64);
    }

    fn count_u64(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.0.extend_from_slice(bytes);
    }

    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn opt(&mut self, s: Option<&str>) {
        match s {
            Some(s) => {
                self.flag(true);
                self.str(s);
            }
            None => self.flag(false),
        }
    }

    fn flag(&mut self, b: bool) {
        self.0.push(u8::from(b));
    }

    /// A JSON value: a tag for its type, then its content (an object's keys in the order
    /// serde_json keeps them, sorted).
    fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.0.push(0),
            Value::Bool(b) => {
                self.0.push(1);
                self.flag(*b);
            }
            Value::Number(n) => {
                // 1 and 1.0 are different JSON, and different inputs.
                if let Some(u) = n.as_u64() {
                    self.0.push(2);
                    self.count_u64(u);
                } else if let Some(i) = n.as_i64() {
                    self.0.push(3);
                    self.0.extend_from_slice(&i.to_le_bytes());
                } else {
                    self.0.push(4);
                    self.count_u64(n.as_f64().unwrap_or(f64::NAN).to_bits());
                }
            }
            Value::String(s) => {
                self.0.push(5);
                self.str(s);
            }
            Value::Array(items) => {
                self.0.push(6);
                self.count(items.len());
                for item in items {
                    self.value(item);
                }
            }
            Value::Object(map) => {
                self.0.push(7);
                self.count(map.len());
                for (key, item) in map {
                    self.str(key);
                    self.value(item);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use windlass_policy::Checked;

    fn parent() -> ParentRef {
        ParentRef {
            api_version: "samples.windlass.dev/v1alpha1".into(),
            kind: "SampleDB".into(),
            name: "orders".into(),
            uid: "u-1".into(),
            namespace: Some("shop".into()),
            adopts_retained: false,
        }
    }

    fn desired(name: &str, data: &str) -> Desired {
        Desired {
            object: Checked {
                kind: "v1/ConfigMap".into(),
                namespace: Some("shop".into()),
                name: name.into(),
                object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "shop"}, "data": {"a": data}}),
            },
            plugin: "storage".into(),
            digest: "sha256:ab".into(),
        }
    }

    fn child(name: &str, uid: &str, version: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop", "uid": uid, "resourceVersion": version}})
    }

    fn inputs(desired: &[Desired], parent: &ParentRef, observed: &[Value], f: bool) -> Fingerprint {
        apply_inputs(desired, parent, observed, f, 0).expect("every child has a uid and version")
    }

    #[test]
    fn the_same_inputs_give_the_same_fingerprint_and_any_change_another() {
        let want = vec![desired("orders", "1"), desired("orders-b", "2")];
        let seen = vec![child("orders", "c-1", "10"), child("orders-b", "c-2", "11")];
        let base = inputs(&want, &parent(), &seen, false);
        assert_eq!(base, inputs(&want.clone(), &parent(), &seen.clone(), false));

        let mut changed = Vec::new();
        // A desired object's content, producer, digest, namespace, name, kind; one more or
        // fewer; their order.
        let mut d = want.clone();
        d[1].object.object["data"]["a"] = json!("3");
        changed.push(inputs(&d, &parent(), &seen, false));
        let mut d = want.clone();
        d[0].plugin = "conventions".into();
        changed.push(inputs(&d, &parent(), &seen, false));
        let mut d = want.clone();
        d[0].digest = "sha256:cd".into();
        changed.push(inputs(&d, &parent(), &seen, false));
        let mut d = want.clone();
        d[0].object.namespace = None;
        changed.push(inputs(&d, &parent(), &seen, false));
        let mut d = want.clone();
        d[0].object.name = "orders-a".into();
        changed.push(inputs(&d, &parent(), &seen, false));
        let mut d = want.clone();
        d[0].object.kind = "v1/Secret".into();
        changed.push(inputs(&d, &parent(), &seen, false));
        let mut d = want.clone();
        d.push(desired("orders-c", "3"));
        changed.push(inputs(&d, &parent(), &seen, false));
        changed.push(inputs(&want[..1], &parent(), &seen, false));
        changed.push(inputs(
            &[want[1].clone(), want[0].clone()],
            &parent(),
            &seen,
            false,
        ));
        // The parent: each field, and the finalizing flag.
        let edits: [fn(&mut ParentRef); 6] = [
            |p: &mut ParentRef| p.uid = "u-2".into(),
            |p: &mut ParentRef| p.name = "other".into(),
            |p: &mut ParentRef| p.namespace = None,
            |p: &mut ParentRef| p.adopts_retained = true,
            |p: &mut ParentRef| p.kind = "Other".into(),
            |p: &mut ParentRef| p.api_version = "samples.windlass.dev/v1".into(),
        ];
        for edit in edits {
            let mut p = parent();
            edit(&mut p);
            changed.push(inputs(&want, &p, &seen, false));
        }
        changed.push(inputs(&want, &parent(), &seen, true));
        // An observed child written since (a new resourceVersion), replaced by a namesake (a new
        // uid), gone, or a new one.
        let mut s = seen.clone();
        s[0]["metadata"]["resourceVersion"] = json!("12");
        changed.push(inputs(&want, &parent(), &s, false));
        let mut s = seen.clone();
        s[1]["metadata"]["uid"] = json!("c-3");
        changed.push(inputs(&want, &parent(), &s, false));
        changed.push(inputs(&want, &parent(), &seen[..1], false));
        let mut s = seen.clone();
        s.push(child("orders-c", "c-4", "13"));
        changed.push(inputs(&want, &parent(), &s, false));
        // The same child observed under another kind; a cache relisted.
        let mut s = seen.clone();
        s[0]["apiVersion"] = json!("events.k8s.io/v1");
        changed.push(inputs(&want, &parent(), &s, false));
        changed.push(apply_inputs(&want, &parent(), &seen, false, 1).expect("fingerprinted"));

        for (i, c) in changed.iter().enumerate() {
            assert_ne!(*c, base, "change {i} kept the fingerprint");
        }
        let distinct: std::collections::HashSet<_> = changed.iter().collect();
        assert_eq!(
            distinct.len(),
            changed.len(),
            "two changes gave one fingerprint"
        );
    }

    #[test]
    fn fields_are_framed_so_that_moving_bytes_between_them_changes_the_fingerprint() {
        let seen = [child("ab", "c", "1")];
        let moved = [child("ab", "c1", "")];
        assert_ne!(
            inputs(&[], &parent(), &seen, false),
            inputs(&[], &parent(), &moved, false)
        );
        let mut p = parent();
        p.name = "order".into();
        p.uid = "su-1".into();
        assert_ne!(
            inputs(&[], &parent(), &[], false),
            inputs(&[], &p, &[], false)
        );
    }

    #[test]
    fn values_are_tagged_so_that_no_two_objects_write_the_same_bytes() {
        let of = |object: Value| {
            let mut d = desired("orders", "1");
            d.object.object = object;
            inputs(&[d], &parent(), &[], false)
        };
        let objects = [
            json!({"a": "bc"}),
            json!({"ab": "c"}),
            json!({"a": 1}),
            json!({"a": 1.0}),
            json!({"a": -1}),
            json!({"a": "1"}),
            json!({"a": true}),
            json!({"a": null}),
            json!({"a": []}),
            json!({"a": [null]}),
            json!({"a": {}}),
            json!({"a": [[]]}),
            json!({"a": [], "b": []}),
            json!({"a": [{}]}),
            json!({}),
        ];
        let prints: std::collections::HashSet<Fingerprint> =
            objects.iter().map(|o| of(o.clone())).collect();
        assert_eq!(prints.len(), objects.len());
        // The same object, however built, the same fingerprint.
        assert_eq!(
            of(json!({"b": [1, {"c": "d"}], "a": 2})),
            of(serde_json::from_str(r#"{"a":2,"b":[1,{"c":"d"}]}"#).expect("json"))
        );
    }

    #[test]
    fn a_child_without_a_uid_or_resource_version_is_not_fingerprinted() {
        let mut no_version = child("orders", "c-1", "1");
        no_version["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("resourceVersion");
        assert_eq!(apply_inputs(&[], &parent(), &[no_version], false, 0), None);
        let mut no_uid = child("orders", "c-1", "1");
        no_uid["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("uid");
        assert_eq!(apply_inputs(&[], &parent(), &[no_uid], false, 0), None);
    }
}
