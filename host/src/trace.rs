//! `windlass trace`: why a parent looks the way it does. Its children as a tree (by owner
//! reference, so a StatefulSet's Pods and claims sit under it), each with the plugin and digest
//! that produced it (the `windlass.dev/produced-by` annotation), its readiness, and whether it
//! has drifted from what the host last applied; then the parent's last run plugin by plugin (from
//! the leading host's admin address, [`windlass_operator::runs`]), its conditions and its recent
//! events. This module is the pure part — objects in, a [`Report`] and its text out; the reads
//! are in `cmd/trace.rs`.
//!
//! # Drift
//! The host applies each child with its own field manager (`windlass/<parent uid>`). Someone
//! who changes a value the host set takes that field from it (server-side apply moves a field to
//! whoever last wrote another value); someone who adds a field holds it alone. So a child has
//! drifted when a manager other than the host and the cluster's own controllers holds spec or
//! metadata fields the host does not: `managedFields` says who, when, and which fields. The host
//! takes a changed value back on its next apply (and the drift goes); an added field stays.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

pub use windlass_operator::runs::{LastRun, PluginRun};

/// The label the host puts on every child: the parent's uid.
pub const PARENT_UID_LABEL: &str = windlass_operator::controller::plan::PARENT_UID_LABEL;
/// The annotation the host puts on every child: `plugin@digest`.
pub const PRODUCED_BY: &str = windlass_operator::controller::plan::PRODUCED_BY_ANNOTATION;

/// Kinds the cluster makes from templates the host labels with the parent's uid (a
/// StatefulSet's Pods and claims, a Deployment's ReplicaSets, a CronJob's Jobs): listed beside
/// the kinds the plugins declare.
pub const DERIVED_KINDS: &[&str] = &[
    "v1/Pod",
    "v1/PersistentVolumeClaim",
    "apps/v1/ReplicaSet",
    "batch/v1/Job",
];

/// One object of the tree.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub uid: String,
    /// The plugin that produced it; none for what the cluster made from a template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// That plugin's digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// None: the kind has no notion of ready (a ConfigMap).
    pub ready: Option<bool>,
    /// What its status says, in a few words.
    pub status: String,
    /// Writes by others since the host's last apply.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Node>,
}

/// A write to a child by someone other than the host, after the host's last apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub manager: String,
    /// `Update` or `Apply`.
    pub operation: String,
    pub time: String,
    /// The fields it holds, as paths (`spec.replicas`, `metadata.labels.team`).
    pub fields: Vec<String>,
}

/// One event on the parent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub last_seen: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub reason: String,
    pub count: i64,
    pub message: String,
}

/// Everything `windlass trace` shows of one parent.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The parent, its children under it.
    pub tree: Node,
    /// The parent's last run, plugin by plugin.
    pub last_run: Option<LastRun>,
    /// Why there is no last run, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run_unavailable: Option<String>,
    /// The parent's conditions as stored.
    pub conditions: Vec<Value>,
    /// Its most recent events, oldest first.
    pub events: Vec<Event>,
    /// What could not be read (a kind not listable, say), so that a short tree says why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// How many events a report keeps.
pub const EVENTS_SHOWN: usize = 10;

fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

/// The condition `kind` of an object's status: (status, reason, message).
fn condition<'a>(v: &'a Value, kind: &str) -> Option<(&'a str, &'a str, &'a str)> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
        .map(|c| {
            (
                c.get("status").and_then(Value::as_str).unwrap_or(""),
                c.get("reason").and_then(Value::as_str).unwrap_or(""),
                c.get("message").and_then(Value::as_str).unwrap_or(""),
            )
        })
}

/// Whether an object is ready, as `kubectl rollout status` and kstatus judge its kind, and
/// why in a few words. `None`: the kind has no notion of it.
pub fn readiness(obj: &Value) -> (Option<bool>, String) {
    let kind = text(obj, "/kind").unwrap_or("");
    let generation = int(obj, "/metadata/generation").unwrap_or(0);
    let observed = int(obj, "/status/observedGeneration").unwrap_or(generation);
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return (Some(false), "deleting".into());
    }
    let replicas = || int(obj, "/spec/replicas").unwrap_or(1);
    let current = observed >= generation;
    match kind {
        "Deployment" => {
            let want = replicas();
            let updated = int(obj, "/status/updatedReplicas").unwrap_or(0);
            let available = int(obj, "/status/availableReplicas").unwrap_or(0);
            let ready = current && updated >= want && available >= want;
            (Some(ready), format!("{available}/{want} available"))
        }
        "StatefulSet" => {
            let want = replicas();
            let ready_n = int(obj, "/status/readyReplicas").unwrap_or(0);
            let updated = int(obj, "/status/updatedReplicas").unwrap_or(0);
            let ready = current && ready_n >= want && updated >= want;
            let mut said = format!("{ready_n}/{want} ready");
            if updated < want {
                said.push_str(&format!(", {updated}/{want} updated"));
            }
            (Some(ready), said)
        }
        "ReplicaSet" => {
            let want = replicas();
            let ready_n = int(obj, "/status/readyReplicas").unwrap_or(0);
            (
                Some(current && ready_n >= want),
                format!("{ready_n}/{want} ready"),
            )
        }
        "DaemonSet" => {
            let want = int(obj, "/status/desiredNumberScheduled").unwrap_or(0);
            let ready_n = int(obj, "/status/numberReady").unwrap_or(0);
            (
                Some(current && ready_n >= want),
                format!("{ready_n}/{want} ready"),
            )
        }
        "Pod" => {
            let phase = text(obj, "/status/phase").unwrap_or("Pending");
            match phase {
                "Succeeded" => (Some(true), phase.into()),
                "Failed" => (Some(false), phase.into()),
                _ => match condition(obj, "Ready") {
                    Some(("True", ..)) => (Some(true), phase.into()),
                    _ => (Some(false), format!("{phase}, not ready")),
                },
            }
        }
        "PersistentVolumeClaim" => {
            let phase = text(obj, "/status/phase").unwrap_or("Pending");
            (Some(phase == "Bound"), phase.into())
        }
        "Job" => match (condition(obj, "Complete"), condition(obj, "Failed")) {
            (Some(("True", ..)), _) => (Some(true), "Complete".into()),
            (_, Some(("True", reason, _))) => (Some(false), format!("Failed: {reason}")),
            _ => {
                let active = int(obj, "/status/active").unwrap_or(0);
                (Some(false), format!("running ({active} active)"))
            }
        },
        "Service" if text(obj, "/spec/type") == Some("LoadBalancer") => {
            let has = obj
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
            (
                Some(has),
                if has {
                    "address assigned"
                } else {
                    "no address yet"
                }
                .into(),
            )
        }
        _ => {
            // A kind with conditions: Ready, else Available, as kstatus reads them.
            for kind in ["Ready", "Available"] {
                if let Some((status, reason, message)) = condition(obj, kind) {
                    let said = match (reason, message) {
                        ("", "") => format!("{kind} {status}"),
                        (r, "") => format!("{kind}: {r}"),
                        (_, m) => format!("{kind}: {m}"),
                    };
                    return (Some(status == "True"), said);
                }
            }
            (None, String::new())
        }
    }
}

/// Whether a field manager is the host (any parent's) or one of the cluster's own
/// controllers, whose writes are not drift.
fn is_host_or_cluster(manager: &str) -> bool {
    windlass_operator::controller::plan::is_host_manager(manager)
        || manager.starts_with("kube-")
        || manager == "kubelet"
        || manager.starts_with("devcluster")
}

/// The field paths of a `fieldsV1` set, `status` left out.
pub fn field_paths(fields: &Value) -> Vec<String> {
    fn walk(v: &Value, path: &mut Vec<String>, out: &mut Vec<String>) {
        let Some(map) = v.as_object() else {
            return;
        };
        let children: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| *k != ".").collect();
        if children.is_empty() {
            if !path.is_empty() {
                out.push(path.join("."));
            }
            return;
        }
        for (key, child) in children {
            let segment = if let Some(f) = key.strip_prefix("f:") {
                f.to_string()
            } else if let Some(k) = key.strip_prefix("k:") {
                format!("[{k}]")
            } else if let Some(v) = key.strip_prefix("v:") {
                format!("[={v}]")
            } else if let Some(i) = key.strip_prefix("i:") {
                format!("[{i}]")
            } else {
                key.clone()
            };
            if path.is_empty() && segment == "status" {
                continue;
            }
            path.push(segment);
            walk(child, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(fields, &mut Vec::new(), &mut out);
    out
}

/// Fields of `obj` that managers other than the host and the cluster's controllers hold and the
/// host does not (`ours`: the parent's field manager): values changed from what the host applied
/// (an update takes the field from the host) or added beside it. A field both hold has the
/// value the host applied. Empty when the host never applied the object (the cluster made it).
pub fn drift(obj: &Value, ours: &str) -> Vec<Drift> {
    let Some(entries) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let main = |e: &&Value| {
        matches!(
            e.get("subresource").and_then(Value::as_str).unwrap_or(""),
            "" | "scale"
        )
    };
    let manager = |e: &Value| {
        e.get("manager")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let held: std::collections::HashSet<String> = entries
        .iter()
        .filter(main)
        .filter(|e| manager(e) == ours)
        .flat_map(|e| field_paths(e.get("fieldsV1").unwrap_or(&Value::Null)))
        .collect();
    if held.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for e in entries.iter().filter(main) {
        let who = manager(e);
        if is_host_or_cluster(&who) {
            continue;
        }
        let fields: Vec<String> = field_paths(e.get("fieldsV1").unwrap_or(&Value::Null))
            .into_iter()
            .filter(|f| !held.contains(f))
            .collect();
        if fields.is_empty() {
            continue;
        }
        let text = |key: &str| e.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        out.push(Drift {
            manager: who,
            operation: text("operation"),
            time: text("time"),
            fields,
        });
    }
    out
}

/// One object as a node without children; `ours` is the parent's field manager.
pub fn node(obj: &Value, ours: &str) -> Node {
    let (plugin, digest) = match obj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(PRODUCED_BY))
        .and_then(Value::as_str)
    {
        Some(by) => match by.split_once('@') {
            Some((p, d)) => (Some(p.to_string()), Some(d.to_string())),
            None => (Some(by.to_string()), None),
        },
        None => (None, None),
    };
    let (ready, status) = readiness(obj);
    Node {
        api_version: text(obj, "/apiVersion").unwrap_or("").to_string(),
        kind: text(obj, "/kind").unwrap_or("").to_string(),
        name: text(obj, "/metadata/name").unwrap_or("").to_string(),
        namespace: text(obj, "/metadata/namespace").map(str::to_string),
        uid: text(obj, "/metadata/uid").unwrap_or("").to_string(),
        plugin,
        digest,
        ready,
        status,
        drift: drift(obj, ours),
        children: Vec::new(),
    }
}

/// The parent with its children arranged by owner reference: each under the object that
/// controls it, if that is in the set, else under the parent. Siblings by kind, then name.
pub fn tree(parent: &Value, children: &[Value]) -> Node {
    let uid = text(parent, "/metadata/uid").unwrap_or("");
    let ours = windlass_operator::controller::plan::field_manager(uid);
    let mut root = node(parent, &ours);
    // The parent's own drift is not the host's to judge: users write its spec.
    root.drift.clear();
    let uids: std::collections::HashSet<&str> = children
        .iter()
        .filter_map(|c| text(c, "/metadata/uid"))
        .collect();
    let owner_of = |c: &Value| -> Option<String> {
        let owners = c.pointer("/metadata/ownerReferences")?.as_array()?;
        owners
            .iter()
            .filter(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
            .chain(owners.iter())
            .filter_map(|o| o.get("uid").and_then(Value::as_str))
            .find(|u| uids.contains(u))
            .map(str::to_string)
    };
    let mut by_owner: HashMap<Option<String>, Vec<Node>> = HashMap::new();
    for c in children {
        // An object that is its own owner would be lost: put it under the parent.
        let owner = owner_of(c).filter(|o| Some(o.as_str()) != text(c, "/metadata/uid"));
        by_owner.entry(owner).or_default().push(node(c, &ours));
    }
    fn attach(node: &mut Node, by_owner: &mut HashMap<Option<String>, Vec<Node>>, depth: usize) {
        let mut mine = by_owner.remove(&Some(node.uid.clone())).unwrap_or_default();
        if depth < 16 {
            for child in &mut mine {
                attach(child, by_owner, depth + 1);
            }
        }
        mine.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
        node.children.extend(mine);
    }
    let mut top = by_owner.remove(&None).unwrap_or_default();
    for child in &mut top {
        attach(child, &mut by_owner, 0);
    }
    // Owner cycles, if any: what is left goes under the parent rather than nowhere.
    for (_, rest) in by_owner.drain() {
        top.extend(rest);
    }
    top.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    root.children = top;
    root
}

/// The parent's events (core/v1 objects, as `kubectl get events` lists them), newest
/// [`EVENTS_SHOWN`], oldest first.
pub fn events(all: &[Value], parent_uid: &str) -> Vec<Event> {
    let mut mine: Vec<Event> = all
        .iter()
        .filter(|e| text(e, "/involvedObject/uid") == Some(parent_uid))
        .map(|e| Event {
            last_seen: [
                "/lastTimestamp",
                "/series/lastObservedTime",
                "/eventTime",
                "/metadata/creationTimestamp",
            ]
            .iter()
            .find_map(|p| text(e, p).filter(|t| !t.is_empty()))
            .unwrap_or("")
            .to_string(),
            kind: text(e, "/type").unwrap_or("").to_string(),
            reason: text(e, "/reason").unwrap_or("").to_string(),
            count: int(e, "/series/count")
                .or_else(|| int(e, "/count"))
                .unwrap_or(1),
            message: text(e, "/message").unwrap_or("").to_string(),
        })
        .collect();
    mine.sort_by(|a, b| a.last_seen.cmp(&b.last_seen));
    let skip = mine.len().saturating_sub(EVENTS_SHOWN);
    mine.drain(..skip);
    mine
}

/// Columns padded to the widest cell (the last one not padded).
fn table(rows: &[Vec<String>], indent: &str) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            if widths.len() <= i {
                widths.push(w);
            } else {
                widths[i] = widths[i].max(w);
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::from(indent);
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A digest shortened as `kubectl` users read image digests: `sha256:` and 12 hex digits.
fn short_digest(d: &str) -> String {
    match d.strip_prefix("sha256:") {
        Some(hex) if hex.len() > 12 => format!("sha256:{}", &hex[..12]),
        _ => d.to_string(),
    }
}

fn yes_no(ready: Option<bool>) -> &'static str {
    match ready {
        Some(true) => "True",
        Some(false) => "False",
        None => "-",
    }
}

/// The drift of a node in a few words: who, and (wide: every field) which fields.
fn drift_text(drift: &[Drift], wide: bool) -> String {
    drift
        .iter()
        .map(|d| {
            let shown = if wide || d.fields.len() <= 2 {
                d.fields.join(", ")
            } else {
                format!(
                    "{}, … ({} fields)",
                    d.fields[..2].join(", "),
                    d.fields.len()
                )
            };
            format!("{} ({} {}): {shown}", d.manager, d.operation, d.time)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The report as text: the tree (`├─ └─`), then the last run, the conditions and the events.
/// `wide` adds digests, namespaces and every drifted field.
pub fn render(report: &Report, wide: bool) -> String {
    let mut header = vec!["NAME".to_string()];
    if wide {
        header.push("NAMESPACE".into());
    }
    header.extend([
        "PLUGIN".into(),
        "READY".into(),
        "DRIFT".into(),
        "STATUS".into(),
    ]);
    let mut rows = vec![header];
    fn walk(node: &Node, prefix: &str, branch: &str, wide: bool, rows: &mut Vec<Vec<String>>) {
        let mut row = vec![format!("{prefix}{branch}{}/{}", node.kind, node.name)];
        if wide {
            row.push(node.namespace.clone().unwrap_or_else(|| "-".into()));
        }
        let plugin = match (&node.plugin, &node.digest, wide) {
            (Some(p), Some(d), true) => format!("{p}@{}", short_digest(d)),
            (Some(p), _, _) => p.clone(),
            (None, ..) => "-".into(),
        };
        row.push(plugin);
        row.push(yes_no(node.ready).into());
        row.push(if node.drift.is_empty() {
            "-".into()
        } else {
            "Drifted".into()
        });
        let mut status = node.status.clone();
        if !node.drift.is_empty() {
            if !status.is_empty() {
                status.push_str("; ");
            }
            status.push_str(&format!("changed by {}", drift_text(&node.drift, wide)));
        }
        row.push(status);
        rows.push(row);
        let inner = match branch {
            "├─ " => format!("{prefix}│  "),
            "└─ " => format!("{prefix}   "),
            _ => prefix.to_string(),
        };
        for (i, child) in node.children.iter().enumerate() {
            let last = i + 1 == node.children.len();
            walk(child, &inner, if last { "└─ " } else { "├─ " }, wide, rows);
        }
    }
    walk(&report.tree, "", "", wide, &mut rows);
    let mut out = table(&rows, "");
    out.push('\n');
    match (&report.last_run, &report.last_run_unavailable) {
        (Some(run), _) => {
            out.push_str(&format!(
                "Last run: {} {:.1} ms, {}{}\n",
                run.started,
                run.duration_ms,
                run.result,
                run.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
            let mut rows = vec![{
                let mut h = vec!["PLUGIN".to_string()];
                if wide {
                    h.push("DIGEST".into());
                }
                h.extend(["RESULT", "DURATION", "MEMORY", "FUEL", "RULE"].map(String::from));
                h
            }];
            for p in &run.plugins {
                let mut row = vec![p.name.clone()];
                if wide {
                    row.push(short_digest(&p.digest));
                }
                row.push(p.result.clone());
                row.push(format!("{:.1} ms", p.duration_ms));
                row.push(format!(
                    "{:.1} MiB",
                    p.memory_bytes as f64 / f64::from(1u32 << 20)
                ));
                row.push(p.fuel.map_or_else(|| "-".into(), |f| f.to_string()));
                row.push(p.rule.clone().unwrap_or_else(|| "-".into()));
                rows.push(row);
            }
            if run.plugins.is_empty() {
                out.push_str("  (no plugin ran)\n");
            } else {
                out.push_str(&table(&rows, "  "));
            }
            for p in run.plugins.iter().filter(|p| p.message.is_some()) {
                out.push_str(&format!(
                    "  {}: {}\n",
                    p.name,
                    p.message.as_deref().unwrap_or("")
                ));
            }
        }
        (None, Some(why)) => out.push_str(&format!("Last run: unknown: {why}\n")),
        (None, None) => out.push_str("Last run: none recorded\n"),
    }
    out.push_str("\nConditions:\n");
    if report.conditions.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let mut rows = vec![
            ["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]
                .map(String::from)
                .to_vec(),
        ];
        for c in &report.conditions {
            rows.push(
                ["type", "status", "reason", "lastTransitionTime", "message"]
                    .iter()
                    .map(|k| c.get(*k).and_then(Value::as_str).unwrap_or("").to_string())
                    .collect(),
            );
        }
        out.push_str(&table(&rows, "  "));
    }
    out.push_str("\nEvents:\n");
    if report.events.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let mut rows = vec![
            ["LAST SEEN", "TYPE", "REASON", "COUNT", "MESSAGE"]
                .map(String::from)
                .to_vec(),
        ];
        for e in &report.events {
            rows.push(vec![
                e.last_seen.clone(),
                e.kind.clone(),
                e.reason.clone(),
                e.count.to_string(),
                e.message.clone(),
            ]);
        }
        out.push_str(&table(&rows, "  "));
    }
    for w in &report.warnings {
        out.push_str(&format!("\nwarning: {w}\n"));
    }
    out
}

/// The names a parent kind answers to, from its API resource: `sdb`, `sampledb`,
/// `sampledbs`, `SampleDB`, `sampledbs.samples.windlass.dev`.
pub fn kind_names(
    group: &str,
    plural: &str,
    singular: &str,
    kind: &str,
    short: &[String],
) -> Vec<String> {
    let mut names: Vec<String> = vec![
        plural.to_lowercase(),
        singular.to_lowercase(),
        kind.to_lowercase(),
    ];
    names.extend(short.iter().map(|s| s.to_lowercase()));
    if !group.is_empty() {
        names.push(format!("{}.{group}", plural.to_lowercase()));
        names.push(format!("{}.{group}", kind.to_lowercase()));
    }
    names.sort();
    names.dedup();
    names
}

/// `KIND/NAME` or `KIND NAME` or `KIND` (every parent of the kind) as kubectl takes them.
pub fn target(args: &[String]) -> anyhow::Result<(String, Option<String>)> {
    match args {
        [one] => Ok(match one.split_once('/') {
            Some((k, n)) if !n.is_empty() => (k.to_string(), Some(n.to_string())),
            Some((k, _)) => (k.to_string(), None),
            None => (one.clone(), None),
        }),
        [kind, name] if !kind.contains('/') => Ok((kind.clone(), Some(name.clone()))),
        _ => anyhow::bail!(
            "give the parent as KIND/NAME (sdb/example-database), KIND NAME, or KIND for all: \
             got {args:?}"
        ),
    }
}

/// Groups objects by `apiVersion/kind` key, as the WasmPlugin status names child kinds.
pub fn kind_key(api_version: &str, kind: &str) -> String {
    format!("{api_version}/{kind}")
}

/// `group/version/Kind` or `version/Kind` → (apiVersion, Kind).
pub fn split_kind_key(key: &str) -> Option<(String, String)> {
    let (api_version, kind) = key.rsplit_once('/')?;
    (!api_version.is_empty() && !kind.is_empty())
        .then(|| (api_version.to_string(), kind.to_string()))
}

/// The child kinds to list: those the plugins declared and [`DERIVED_KINDS`], once each.
pub fn child_kinds<'a>(declared: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut kinds: BTreeMap<String, ()> = BTreeMap::new();
    for k in declared.into_iter().chain(DERIVED_KINDS.iter().copied()) {
        kinds.insert(k.to_string(), ());
    }
    kinds.into_keys().collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    const UID: &str = "p-1";

    fn parent() -> Value {
        json!({
            "apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB",
            "metadata": {"name": "orders", "namespace": "shop", "uid": UID},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "3/3 ready"},
            ]},
        })
    }

    fn managed(manager: &str, operation: &str, time: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    fn child(kind: &str, name: &str, uid: &str, owner: Option<&str>) -> Value {
        let mut c = json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "shop", "uid": uid,
                         "labels": {PARENT_UID_LABEL: UID}},
        });
        if let Some(owner) = owner {
            c["metadata"]["ownerReferences"] = json!([{"uid": owner, "controller": true, "kind": "X", "name": "x", "apiVersion": "v1"}]);
        }
        c
    }

    #[test]
    fn children_sit_under_what_controls_them_and_the_rest_under_the_parent() {
        let mut sts = child("StatefulSet", "orders", "s-1", Some(UID));
        sts["apiVersion"] = json!("apps/v1");
        sts["metadata"]["annotations"] =
            json!({PRODUCED_BY: "storage@sha256:0123456789abcdef0123"});
        sts["spec"] = json!({"replicas": 2});
        sts["status"] = json!({"readyReplicas": 1, "updatedReplicas": 2});
        let pod0 = child("Pod", "orders-0", "p0", Some("s-1"));
        let mut pod1 = child("Pod", "orders-1", "p1", Some("s-1"));
        pod1["status"] =
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        // A claim the StatefulSet made: owned by it only when its retention policy says so;
        // otherwise nobody, and it sits under the parent.
        let mut pvc = child("PersistentVolumeClaim", "data-orders-0", "c0", None);
        pvc["status"] = json!({"phase": "Bound"});
        let cm = child("ConfigMap", "orders", "m-1", Some(UID));
        let t = tree(&parent(), &[pod1, cm, pvc, sts, pod0]);
        assert_eq!(t.ready, Some(true));
        let names: Vec<(&str, usize)> = t
            .children
            .iter()
            .map(|c| (c.name.as_str(), c.children.len()))
            .collect();
        assert_eq!(
            names,
            [("orders", 0), ("data-orders-0", 0), ("orders", 2)],
            "{t:#?}"
        );
        let sts = &t.children[2];
        assert_eq!(sts.plugin.as_deref(), Some("storage"));
        assert_eq!(sts.digest.as_deref(), Some("sha256:0123456789abcdef0123"));
        assert_eq!((sts.ready, sts.status.as_str()), (Some(false), "1/2 ready"));
        assert_eq!(
            sts.children
                .iter()
                .map(|p| (p.name.as_str(), p.ready))
                .collect::<Vec<_>>(),
            [("orders-0", Some(false)), ("orders-1", Some(true))]
        );
        assert_eq!(t.children[1].ready, Some(true));
        assert_eq!(t.children[0].ready, None);
        let report = Report {
            tree: t,
            last_run: None,
            last_run_unavailable: Some("no admin address".into()),
            conditions: parent()["status"]["conditions"].as_array().unwrap().clone(),
            events: Vec::new(),
            warnings: Vec::new(),
        };
        let text = render(&report, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{text}");
        assert!(lines[1].starts_with("SampleDB/orders "), "{text}");
        assert!(lines[2].starts_with("├─ ConfigMap/orders "), "{text}");
        assert!(
            lines[3].starts_with("├─ PersistentVolumeClaim/data-orders-0 "),
            "{text}"
        );
        assert!(lines[4].starts_with("└─ StatefulSet/orders "), "{text}");
        assert!(
            lines[4].contains("storage") && lines[4].contains("1/2 ready"),
            "{text}"
        );
        assert!(lines[5].starts_with("   ├─ Pod/orders-0 "), "{text}");
        assert!(lines[6].starts_with("   └─ Pod/orders-1 "), "{text}");
        assert!(
            text.contains("Last run: unknown: no admin address"),
            "{text}"
        );
        assert!(
            render(&report, true).contains("storage@sha256:0123456789ab "),
            "{}",
            render(&report, true)
        );
    }

    #[test]
    fn fields_someone_else_holds_and_the_host_does_not_are_drift_and_the_clusters_are_not() {
        let ours = windlass_operator::controller::plan::field_manager(UID);
        let mut cm = child("ConfigMap", "orders", "m-1", Some(UID));
        cm["metadata"]["managedFields"] = json!([
            managed(&ours, "Apply", "2026-12-05T10:00:00Z", json!({"f:data": {"f:a": {}}})),
            managed("kubectl-edit", "Update", "2026-12-05T10:05:00Z",
                    json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:data": {"f:b": {}}})),
            // The same value as the host's: both hold the field, nothing differs.
            managed("kubectl-patch", "Apply", "2026-12-05T10:09:00Z", json!({"f:data": {"f:a": {}}})),
            // The cluster's controllers and the host's other parents.
            managed("kube-controller-manager", "Update", "2026-12-05T10:06:00Z", json!({"f:metadata": {"f:annotations": {"f:x": {}}}})),
            managed("windlass/other", "Apply", "2026-12-05T10:06:00Z", json!({"f:metadata": {"f:labels": {"f:y": {}}}})),
            // Status writes are not drift of what was applied.
            {"manager": "someone", "operation": "Update", "time": "2026-12-05T10:07:00Z", "subresource": "status", "fieldsV1": {"f:status": {"f:z": {}}}},
        ]);
        let d = drift(&cm, &ours);
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(d[0].manager, "kubectl-edit");
        assert_eq!(d[0].fields, ["data.b", "metadata.labels.team"]);
        // Never applied by this parent (a Pod its StatefulSet made): no drift to speak of.
        assert!(drift(&cm, "windlass/someone-else").is_empty());
        let t = tree(&parent(), &[cm]);
        let text = render(
            &Report {
                tree: t,
                last_run: None,
                last_run_unavailable: None,
                conditions: Vec::new(),
                events: Vec::new(),
                warnings: Vec::new(),
            },
            false,
        );
        assert!(text.contains("Drifted"), "{text}");
        assert!(text.contains("changed by kubectl-edit (Update 2026-12-05T10:05:00Z): data.b, metadata.labels.team"), "{text}");
    }

    #[test]
    fn field_paths_read_keys_values_and_list_items() {
        let f = json!({"f:spec": {"f:containers": {"k:{\"name\":\"db\"}": {".": {}, "f:image": {}}}},
                       "f:metadata": {"f:finalizers": {"v:\"x\"": {}}}, "f:status": {"f:phase": {}}});
        assert_eq!(
            field_paths(&f),
            [
                "metadata.finalizers.[=\"x\"]",
                "spec.containers.[{\"name\":\"db\"}].image"
            ]
        );
    }

    #[test]
    fn readiness_follows_each_kinds_rules() {
        let r = |v: Value| readiness(&v);
        assert_eq!(
            r(json!({"kind": "Deployment", "metadata": {"generation": 2}, "spec": {"replicas": 2},
                     "status": {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2}})).0,
            Some(false),
            "an old generation's status is not ready"
        );
        assert_eq!(
            r(
                json!({"kind": "Job", "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}})
            ),
            (Some(false), "Failed: BackoffLimitExceeded".to_string())
        );
        assert_eq!(r(json!({"kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "True"}]}})).0, Some(true));
        assert_eq!(
            r(json!({"kind": "PersistentVolumeClaim", "status": {"phase": "Pending"}})).0,
            Some(false)
        );
        assert_eq!(
            r(json!({"kind": "Service", "spec": {"type": "ClusterIP"}})).0,
            None
        );
        assert_eq!(
            r(
                json!({"kind": "VolumeSnapshot", "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Creating"}]}})
            ),
            (Some(false), "Ready: Creating".to_string())
        );
    }

    #[test]
    fn events_are_the_parents_newest_oldest_first() {
        let mut all: Vec<Value> = (0..15)
            .map(|i| json!({"involvedObject": {"uid": UID}, "type": "Normal", "reason": format!("R{i:02}"),
                            "message": "m", "count": 1, "lastTimestamp": format!("2026-12-05T10:{i:02}:00Z")}))
            .collect();
        all.push(json!({"involvedObject": {"uid": "other"}, "reason": "Other", "lastTimestamp": "2026-12-05T11:00:00Z"}));
        let e = events(&all, UID);
        assert_eq!(e.len(), EVENTS_SHOWN);
        assert_eq!(e[0].reason, "R05");
        assert_eq!(e.last().unwrap().reason, "R14");
    }

    #[test]
    fn targets_and_kind_names_read_as_kubectl_reads_them() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            target(&s(&["sdb/orders"])).unwrap(),
            ("sdb".into(), Some("orders".into()))
        );
        assert_eq!(
            target(&s(&["sdb", "orders"])).unwrap(),
            ("sdb".into(), Some("orders".into()))
        );
        assert_eq!(target(&s(&["sdb"])).unwrap(), ("sdb".into(), None));
        assert!(target(&s(&["a/b", "c"])).is_err());
        let names = kind_names(
            "samples.windlass.dev",
            "sampledbs",
            "sampledb",
            "SampleDB",
            &["sdb".into()],
        );
        for n in [
            "sdb",
            "sampledb",
            "sampledbs",
            "sampledbs.samples.windlass.dev",
        ] {
            assert!(names.contains(&n.to_string()), "{names:?}");
        }
        assert_eq!(
            split_kind_key("apps/v1/StatefulSet"),
            Some(("apps/v1".into(), "StatefulSet".into()))
        );
        assert_eq!(split_kind_key("v1/Pod"), Some(("v1".into(), "Pod".into())));
        assert!(
            child_kinds(["v1/Pod", "apps/v1/StatefulSet"])
                .iter()
                .filter(|k| *k == "v1/Pod")
                .count()
                == 1
        );
    }
}
