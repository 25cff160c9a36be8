//! Garbage collection and deletion finalizers the API server itself handles: ownerReference
//! cascades (Background), `foregroundDeletion`, `orphan`, and namespace termination.
//!
//! # Guarantees
//! - A dependent whose owners are all gone is deleted (its own dependents follow in turn); one
//!   with an owner left loses its references to the gone ones. An owner that never existed
//!   counts as gone.
//! - Each pass looks only at what changed since the last (the store's ownership graph,
//!   [`crate::owners`]), and at the objects being deleted.
//! - An owner deleted with Foreground stays (with `deletionTimestamp`) until its dependents
//!   are gone; with Orphan, its dependents lose the ownerReference and survive.
//! - A terminating namespace is emptied, then removed.
//! - A deleted CRD (Terminating, with `customresourcecleanup.apiextensions.k8s.io`) has its
//!   objects deleted; once none is left (their finalizers cleared) it goes and stops being
//!   served.

use crate::api::{Cluster, DeleteOpts};
use crate::store::Change;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Runs the collector until the task is dropped: a sweep shortly after a deletion (and after a
/// write of a terminating object), and every few seconds regardless.
pub async fn run(cluster: Arc<Cluster>) {
    loop {
        let woken =
            tokio::time::timeout(Duration::from_secs(2), cluster.store.gc_wake.notified()).await;
        if woken.is_ok() {
            // Deletions come in bursts (a namespace, a cascade, a pruning controller): let the
            // burst land so that one pass covers it.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for _ in 0..50 {
            if !sweep(&cluster) {
                break;
            }
        }
    }
}

fn id(obj: &Value) -> (&str, &str, &str) {
    let m = &obj["metadata"];
    (
        m["uid"].as_str().unwrap_or_default(),
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
    )
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .collect()
}

/// Removes one finalizer; the object goes when none is left and it is being deleted.
fn drop_finalizer(cluster: &Cluster, key: &str, ns: &str, name: &str, finalizer: &str) {
    let _ = cluster.store.mutate(key, ns, name, false, |cur| {
        let Some(cur) = cur else {
            return Ok((Change::Keep, ()));
        };
        let mut obj = (**cur).clone();
        if let Some(list) = obj["metadata"]["finalizers"].as_array_mut() {
            list.retain(|f| f != finalizer);
        }
        let empty = obj["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty);
        if empty && obj["metadata"].get("deletionTimestamp").is_some() {
            return Ok((Change::Delete, ()));
        }
        Ok((Change::Put(obj), ()))
    });
}

/// Drops the object's ownerReferences to the owners `gone` picks out by uid; the field goes
/// with its last reference. The write cannot fail: it is one replace under the store's lock, of
/// whatever the object is then (an object deleted meanwhile is left alone).
fn drop_owner_refs(
    cluster: &Cluster,
    key: &str,
    ns: &str,
    name: &str,
    gone: impl Fn(&str) -> bool,
) {
    let _ = cluster.store.mutate(key, ns, name, false, |cur| {
        let Some(cur) = cur else {
            return Ok((Change::Keep, ()));
        };
        let mut d = (**cur).clone();
        if let Some(refs) = d["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| !r["uid"].as_str().is_some_and(&gone));
            if refs.is_empty()
                && let Some(m) = d["metadata"].as_object_mut()
            {
                m.remove("ownerReferences");
            }
        }
        Ok((Change::Put(d), ()))
    });
}

/// Deletes an object with background propagation, as the built-in controllers (this GC, the
/// simulator) do; an object already gone or a resource no longer served is nothing to do.
pub(crate) fn delete(cluster: &Cluster, key: &str, ns: &str, name: &str) {
    if let Some(rt) = cluster.resource(key) {
        let _ = cluster.delete(
            &rt,
            ns,
            name,
            &DeleteOpts {
                propagation: Some("Background".into()),
                ..DeleteOpts::default()
            },
        );
    }
}

/// One pass over what changed since the last (see [`crate::owners`]): the dependents of
/// deleted objects and objects written naming an owner that does not exist, collected when
/// every owner is gone; then the objects being deleted. Returns whether it changed anything.
pub fn sweep(cluster: &Cluster) -> bool {
    let work = cluster.store.take_gc_work();
    let mut changed = false;
    // Orphans: objects whose every owner is gone.
    let mut candidates = cluster.store.objects_at(work.check);
    for uid in &work.gone {
        candidates.extend(cluster.store.dependents(uid));
    }
    // A dependent of several gone owners (or written dangling, then orphaned) is looked at once.
    let mut seen = HashSet::new();
    candidates.retain(|(key, obj)| seen.insert((key.clone(), id(obj).0.to_string())));
    for (key, obj) in &candidates {
        let meta = &obj["metadata"];
        if meta.get("deletionTimestamp").is_some() {
            continue;
        }
        let (gone, live): (Vec<&str>, Vec<&str>) = meta["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str())
            .partition(|o| !cluster.store.is_live(o));
        if gone.is_empty() {
            continue;
        }
        let (_, ns, name) = id(obj);
        if live.is_empty() {
            delete(cluster, key, ns, name);
        } else {
            // Some owner is left: the references to the gone ones are dropped, as
            // kube-controller-manager's collector does.
            drop_owner_refs(cluster, key, ns, name, |u| gone.contains(&u));
        }
        changed = true;
    }
    for (key, obj) in cluster.store.terminating() {
        let (uid, ns, name) = id(&obj);
        let fins = finalizers(&obj);
        if fins.iter().any(|f| f == "orphan") {
            for (dkey, dep) in &cluster.store.dependents(uid) {
                let (_, dns, dname) = id(dep);
                drop_owner_refs(cluster, dkey, dns, dname, |u| u == uid);
            }
            drop_finalizer(cluster, &key, ns, name, "orphan");
            changed = true;
        } else if fins.iter().any(|f| f == "foregroundDeletion") {
            let deps = cluster.store.dependents(uid);
            if deps.is_empty() {
                drop_finalizer(cluster, &key, ns, name, "foregroundDeletion");
                changed = true;
            } else {
                for (dkey, dep) in deps
                    .iter()
                    .filter(|(_, d)| d["metadata"].get("deletionTimestamp").is_none())
                {
                    let (_, dns, dname) = id(dep);
                    if let Some(rt) = cluster.resource(dkey) {
                        let _ = cluster.delete(
                            &rt,
                            dns,
                            dname,
                            &DeleteOpts {
                                propagation: Some("Foreground".into()),
                                ..DeleteOpts::default()
                            },
                        );
                        changed = true;
                    }
                }
            }
        }
        if key == "/namespaces" {
            changed |= terminate_namespace(cluster, name);
        }
        if fins.iter().any(|f| f == crate::api::CRD_CLEANUP)
            && let Some(rt) = cluster.resource(&key)
            && crate::api::is_crd(&rt)
        {
            changed |= terminate_crd(cluster, &rt, &obj);
        }
    }
    changed
}

/// Deletes a terminating CRD's objects; once none is left, drops its cleanup finalizer (and
/// so the CRD, unless someone else's finalizer holds it) and stops serving the kind.
fn terminate_crd(cluster: &Cluster, crd_rt: &crate::resources::ResourceType, crd: &Value) -> bool {
    let Ok(served) = crate::crd::resource_type(crd) else {
        return false;
    };
    let key = served.key();
    let (objects, _) = cluster.store.list(&key, None);
    let mut did = false;
    for obj in &objects {
        if obj["metadata"].get("deletionTimestamp").is_none() {
            let (_, ns, name) = id(obj);
            delete(cluster, &key, ns, name);
            did = true;
        }
    }
    if objects.is_empty() {
        let (_, _, name) = id(crd);
        drop_finalizer(cluster, &crd_rt.key(), "", name, crate::api::CRD_CLEANUP);
        if cluster.store.get(&crd_rt.key(), "", name).is_none() {
            cluster.after_delete(crd_rt, crd);
        }
        did = true;
    }
    did
}

fn terminate_namespace(cluster: &Cluster, ns: &str) -> bool {
    let contents = cluster.store.in_namespace(ns);
    let mut did = false;
    for (key, obj) in &contents {
        if obj["metadata"].get("deletionTimestamp").is_none() {
            delete(cluster, key, ns, id(obj).2);
            did = true;
        }
    }
    if contents.is_empty() {
        let _ = cluster.store.mutate("/namespaces", "", ns, false, |cur| {
            Ok((
                if cur.is_some() {
                    Change::Delete
                } else {
                    Change::Keep
                },
                (),
            ))
        });
        did = true;
    }
    did
}
