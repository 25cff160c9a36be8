//! `meta.k8s.io/v1` Table responses, which `kubectl get` asks for: NAME, the kind's printer
//! columns (a CRD's additionalPrinterColumns), and AGE where the kind has no columns of its own.

use crate::resources::{
    ACCESS_MODES, CONTAINERS, EXTERNAL_IPS, IMAGES, INVOLVED_OBJECT, LAST_SEEN, NODE,
    NOMINATED_NODE, POD_IP, PORTS, PrinterColumn, READINESS_GATES, READY_OF, RESTARTS,
    ResourceType, SELECTOR, View,
};
use serde_json::{Value, json};
use std::sync::Arc;

/// Whether an `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Events lead with LAST SEEN and show their name last, and only with `-o wide`, as the real
/// server's table does.
fn name_last(rt: &ResourceType) -> bool {
    rt.kind == "Event" && rt.builtin
}

fn columns(rt: &ResourceType) -> Vec<PrinterColumn> {
    let mut cols = rt.printer_columns.clone();
    if name_last(rt) {
        cols.push(PrinterColumn {
            name: "Name".into(),
            type_: "string".into(),
            json_path: ".metadata.name".into(),
            priority: 1,
            description: String::new(),
        });
    } else if rt.builtin || cols.is_empty() {
        // AGE after the default columns, before the wide ones, as the real server's tables.
        let at = cols
            .iter()
            .position(|c| c.priority > 0)
            .unwrap_or(cols.len());
        cols.insert(
            at,
            PrinterColumn {
                name: "Age".into(),
                type_: "date".into(),
                json_path: ".metadata.creationTimestamp".into(),
                priority: 0,
                description: String::new(),
            },
        );
    }
    cols
}

/// The column definitions.
pub fn definitions(rt: &ResourceType) -> Value {
    let mut defs = Vec::new();
    if !name_last(rt) {
        defs.push(json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}));
    }
    for c in columns(rt) {
        defs.push(json!({"name": c.name, "type": c.type_, "format": "", "description": c.description, "priority": c.priority}));
    }
    Value::Array(defs)
}

/// One row: cells and the object (whole, or its metadata only, per `includeObject`).
pub fn row(rt: &ResourceType, obj: &Value, include: &str) -> Value {
    // A view's cells are read from the stored shape.
    let stored = (rt.view == Some(View::EventsV1) && obj["apiVersion"] != "v1")
        .then(|| crate::events::to_core(obj));
    let fields = stored.as_ref().unwrap_or(obj);
    let mut cells = Vec::new();
    if !name_last(rt) {
        cells.push(obj["metadata"]["name"].clone());
    }
    for c in columns(rt) {
        cells.push(cell(&c, fields));
    }
    let object = match include {
        "None" => Value::Null,
        "Object" => obj.clone(),
        _ => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
        }
    };
    json!({"cells": cells, "object": object})
}

/// A whole Table.
pub fn table(
    rt: &ResourceType,
    items: &[Arc<Value>],
    rv: u64,
    cont: Option<&str>,
    include: &str,
) -> Value {
    let rows: Vec<Value> = items.iter().map(|o| row(rt, o, include)).collect();
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": definitions(rt), "rows": rows})
}

/// The cells `kubectl get` computes rather than reads.
fn computed(path: &str, obj: &Value) -> Option<Value> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    let text = match path {
        EXTERNAL_IPS => {
            let mut ips = strings(&obj["spec"]["externalIPs"]);
            for i in obj["status"]["loadBalancer"]["ingress"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(ip) = i["ip"].as_str().or(i["hostname"].as_str()) {
                    ips.push(ip.to_string());
                }
            }
            match (ips.is_empty(), obj["spec"]["type"].as_str()) {
                (false, _) => ips.join(","),
                (true, Some("LoadBalancer")) => "<pending>".into(),
                (true, _) => "<none>".into(),
            }
        }
        PORTS => {
            let ports: Vec<String> = obj["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let protocol = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                        None => format!("{}/{protocol}", p["port"]),
                    }
                })
                .collect();
            if ports.is_empty() {
                "<none>".into()
            } else {
                ports.join(",")
            }
        }
        ACCESS_MODES => {
            let short: Vec<&str> = strings(&obj["spec"]["accessModes"])
                .iter()
                .map(|m| match m.as_str() {
                    "ReadWriteOnce" => "RWO",
                    "ReadOnlyMany" => "ROX",
                    "ReadWriteMany" => "RWX",
                    "ReadWriteOncePod" => "RWOP",
                    _ => "",
                })
                .filter(|m| !m.is_empty())
                .collect();
            short.join(",")
        }
        LAST_SEEN => {
            let seen = [
                &obj["series"]["lastObservedTime"],
                &obj["lastTimestamp"],
                &obj["eventTime"],
                &obj["metadata"]["creationTimestamp"],
            ]
            .into_iter()
            .find_map(Value::as_str)
            .unwrap_or_default();
            age(seen)
        }
        RESTARTS => obj["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["restartCount"].as_i64())
            .sum::<i64>()
            .to_string(),
        READY_OF => format!(
            "{}/{}",
            obj["status"]["readyReplicas"].as_i64().unwrap_or(0),
            obj["spec"]["replicas"].as_i64().unwrap_or(1)
        ),
        CONTAINERS | IMAGES => {
            let field = if path == CONTAINERS { "name" } else { "image" };
            obj["spec"]["template"]["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c[field].as_str())
                .collect::<Vec<_>>()
                .join(",")
        }
        SELECTOR => {
            let labels: Vec<String> = obj["spec"]["selector"]["matchLabels"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            if labels.is_empty() {
                "<none>".into()
            } else {
                labels.join(",")
            }
        }
        POD_IP | NODE | NOMINATED_NODE => {
            let v = match path {
                POD_IP => &obj["status"]["podIP"],
                NODE => &obj["spec"]["nodeName"],
                _ => &obj["status"]["nominatedNodeName"],
            };
            v.as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("<none>")
                .to_string()
        }
        READINESS_GATES => {
            let gates = obj["spec"]["readinessGates"].as_array().map_or(0, Vec::len);
            if gates == 0 {
                "<none>".into()
            } else {
                let met = obj["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| {
                        c["status"] == "True"
                            && obj["spec"]["readinessGates"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|g| g["conditionType"] == c["type"])
                    })
                    .count();
                format!("{met}/{gates}")
            }
        }
        INVOLVED_OBJECT => {
            let o = &obj["involvedObject"];
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default().to_lowercase(),
                o["name"].as_str().unwrap_or_default()
            )
        }
        _ => return None,
    };
    Some(json!(text))
}

fn cell(c: &PrinterColumn, obj: &Value) -> Value {
    if let Some(v) = computed(&c.json_path, obj) {
        return v;
    }
    if c.json_path == ".status.containerStatuses" {
        let total = obj["spec"]["containers"].as_array().map_or(0, Vec::len);
        let ready = obj["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["ready"] == true)
            .count();
        return json!(format!("{ready}/{total}"));
    }
    let v = eval(obj, &c.json_path);
    match (c.type_.as_str(), v) {
        ("date", Some(Value::String(ts))) => json!(age(&ts)),
        (_, Some(v)) => v,
        ("integer" | "number", None) => json!(0),
        (_, None) => json!("<none>"),
    }
}

/// A JSONPath subset: `.a.b`, `.a[0]`, `.a[?(@.type=="Ready")].status`.
pub fn eval(obj: &Value, path: &str) -> Option<Value> {
    let mut cur = obj.clone();
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('.');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = r[end + 1..].trim_start_matches('.');
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, v) = filter.split_once("==")?;
                let want = v.trim().trim_matches('"').trim_matches('\'');
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|i| i[k.trim()].as_str() == Some(want))?
                    .clone();
            } else {
                cur = cur.get(inner.parse::<usize>().ok()?)?.clone();
            }
            continue;
        }
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        cur = cur.get(&rest[..end])?.clone();
        rest = rest[end..].trim_start_matches('.');
    }
    (!cur.is_null()).then_some(cur)
}

/// kubectl's human duration since an RFC 3339 timestamp (`5s`, `3m12s`, `4h`, `2d`).
pub fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => {
            if s % 60 == 0 {
                format!("{m}m")
            } else {
                format!("{m}m{}s", s % 60)
            }
        }
        s if s < 3 * 3600 => format!("{m}m"),
        s if s < 8 * 3600 => format!("{h}h{}m", (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{h}h"),
        s if s < 8 * 86400 => format!("{d}d{}h", (s % 86400) / 3600),
        _ => format!("{d}d"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset_reads_fields_indices_and_filters() {
        let obj = json!({"spec": {"size": 3, "l": ["a", "b"]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(eval(&obj, ".spec.size"), Some(json!(3)));
        assert_eq!(eval(&obj, ".spec.l[1]"), Some(json!("b")));
        assert_eq!(
            eval(&obj, r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("True"))
        );
        assert_eq!(eval(&obj, ".spec.missing"), None);
    }

    #[test]
    fn only_an_accept_header_preferring_tables_gets_one() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }
}
