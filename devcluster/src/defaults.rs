//! Defaulting of built-in kinds, as kube-apiserver does it before storing: the fields a client
//! leaves out and reads back set (a StatefulSet's `updateStrategy`, a Pod's `restartPolicy`, a
//! Service's `type`, …), so that what a controller observes has the shape it has in production
//! and `kubectl rollout status` finds what it reads. Only fields left out are set; a value a
//! client wrote is never changed. The values are kube-apiserver's (v1.36), checked against it
//! by `tests/kube_rs.rs` (`built_in_kinds_read_back_with_the_api_servers_defaults`).

use serde_json::{Value, json};

use crate::resources::ResourceType;

/// Sets `obj[key]` to `value` when absent (or null).
fn or(obj: &mut Value, key: &str, value: Value) {
    if let Some(map) = obj.as_object_mut()
        && map.get(key).is_none_or(Value::is_null)
    {
        map.insert(key.to_string(), value);
    }
}

/// A Secret's `stringData` is write-only, as on a real API server: each value is stored in
/// `data`, base64-encoded (over a `data` key of the same name), and `stringData` is dropped.
fn merge_string_data(secret: &mut Value) {
    let Some(Value::Object(strings)) = secret.as_object_mut().and_then(|m| m.remove("stringData"))
    else {
        return;
    };
    if !secret["data"].is_object() {
        secret["data"] = json!({});
    }
    for (key, value) in strings {
        let bytes = value.as_str().unwrap_or_default().as_bytes().to_vec();
        secret["data"][key.as_str()] =
            serde_json::to_value(k8s_openapi::ByteString(bytes)).unwrap_or_default();
    }
}

/// Defaults a built-in object about to be stored.
pub fn apply(rt: &ResourceType, obj: &mut Value) {
    if !rt.builtin {
        return;
    }
    if rt.group.is_empty() && rt.kind == "Secret" {
        // A Secret without a type (or with an empty one) is Opaque.
        if obj["type"].as_str().is_none_or(str::is_empty) {
            obj["type"] = json!("Opaque");
        }
        merge_string_data(obj);
    }
    if !obj["spec"].is_object() {
        return;
    }
    let spec = &mut obj["spec"];
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => pod_spec(spec, true),
        ("apps", "StatefulSet") => {
            or(spec, "replicas", json!(1));
            or(spec, "podManagementPolicy", json!("OrderedReady"));
            or(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            if spec["updateStrategy"]["type"] == "RollingUpdate" {
                or(
                    &mut spec["updateStrategy"],
                    "rollingUpdate",
                    json!({"partition": 0}),
                );
            }
            or(spec, "revisionHistoryLimit", json!(10));
            or(
                spec,
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            if let Some(templates) = spec["volumeClaimTemplates"].as_array_mut() {
                for t in templates {
                    if t["spec"].is_object() {
                        or(&mut t["spec"], "volumeMode", json!("Filesystem"));
                    }
                }
            }
            template(spec, true);
        }
        ("apps", "Deployment") => {
            or(spec, "replicas", json!(1));
            or(
                spec,
                "strategy",
                json!({"type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
            );
            or(spec, "revisionHistoryLimit", json!(10));
            or(spec, "progressDeadlineSeconds", json!(600));
            template(spec, true);
        }
        ("batch", "Job") => job_spec(spec),
        ("batch", "CronJob") => {
            or(spec, "concurrencyPolicy", json!("Allow"));
            or(spec, "suspend", json!(false));
            or(spec, "successfulJobsHistoryLimit", json!(3));
            or(spec, "failedJobsHistoryLimit", json!(1));
            // The Job's own fields are defaulted when the Job is made; its Pod template now.
            if spec["jobTemplate"]["spec"].is_object() {
                template(&mut spec["jobTemplate"]["spec"], false);
            }
        }
        ("", "Service") => {
            or(spec, "type", json!("ClusterIP"));
            or(spec, "sessionAffinity", json!("None"));
            if spec["type"] != "ExternalName" {
                or(spec, "internalTrafficPolicy", json!("Cluster"));
            }
            if let Some(ports) = spec["ports"].as_array_mut() {
                for p in ports {
                    or(p, "protocol", json!("TCP"));
                    let port = p["port"].clone();
                    or(p, "targetPort", port);
                }
            }
        }
        ("", "PersistentVolumeClaim") => or(spec, "volumeMode", json!("Filesystem")),
        _ => {}
    }
}

fn job_spec(spec: &mut Value) {
    or(spec, "parallelism", json!(1));
    or(spec, "completions", json!(1));
    or(spec, "backoffLimit", json!(6));
    or(spec, "completionMode", json!("NonIndexed"));
    or(spec, "suspend", json!(false));
    or(spec, "manualSelector", json!(false));
    or(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    // A Job's Pods must say Never or OnFailure: no default there.
    template(spec, false);
}

fn template(spec: &mut Value, restart_always: bool) {
    if spec["template"]["spec"].is_object() {
        pod_spec(&mut spec["template"]["spec"], restart_always);
    }
}

fn pod_spec(spec: &mut Value, restart_always: bool) {
    if restart_always {
        or(spec, "restartPolicy", json!("Always"));
    }
    or(spec, "dnsPolicy", json!("ClusterFirst"));
    or(spec, "schedulerName", json!("default-scheduler"));
    or(spec, "terminationGracePeriodSeconds", json!(30));
    or(spec, "securityContext", json!({}));
    for list in ["initContainers", "containers"] {
        if let Some(containers) = spec[list].as_array_mut() {
            for c in containers {
                container(c);
            }
        }
    }
}

fn container(c: &mut Value) {
    let image = c["image"].as_str().unwrap_or_default();
    // The tag after the last `/`, ignoring a digest: none or `latest` pulls Always.
    let name = image.split('@').next().unwrap_or_default();
    let tag = name
        .rsplit('/')
        .next()
        .and_then(|last| last.split_once(':'));
    let always = !image.contains('@') && tag.is_none_or(|(_, t)| t == "latest");
    or(
        c,
        "imagePullPolicy",
        json!(if always { "Always" } else { "IfNotPresent" }),
    );
    or(c, "terminationMessagePath", json!("/dev/termination-log"));
    or(c, "terminationMessagePolicy", json!("File"));
    if let Some(ports) = c["ports"].as_array_mut() {
        for p in ports {
            or(p, "protocol", json!("TCP"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secrets_string_data_is_stored_base64_in_data() {
        let mut secret = json!({
            "data": {"a": "eA==", "b": "eQ=="},
            "stringData": {"b": "two", "c": "three"},
        });
        merge_string_data(&mut secret);
        assert_eq!(
            secret,
            json!({"data": {"a": "eA==", "b": "dHdv", "c": "dGhyZWU="}})
        );
    }
}
