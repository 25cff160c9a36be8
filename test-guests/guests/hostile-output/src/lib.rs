//! Returns one hostile object, chosen by its config, to attack the host's output rules; or
//! attacks through a side channel (`side.rs`): time, clocks, floods of events and logs, the
//! host's resource table.
//!
//! Every attack is a single object the plugin declared in `info` (so `KindNotDeclared` never
//! hides the rule under test) and, unless the attack says so, no namespace. What must stop it:
//! - `takeover`, `takeover-configmap`, `takeover-service`: an object named like one that already
//!   exists and is not this parent's: apply-time ownership (`ObjectNotOwned`).
//! - `omit`: nothing at all, to tempt a prune of everything: the host deletes only its own
//!   children.
//! - `pod-labels`, `pod-spec`: a Pod controlled by the parent's StatefulSet: labels and
//!   annotations only (`ObjectNotOwned` for the spec).
//! - pod breakouts (`privileged`, `hostPath`, …; `compliant` is the control that must pass): a
//!   pod spec inside the `workload` of the config: Pod Security Standards (`PodSecurity`).
//! - `tokenSecret`, `externalIPs`, `nodePort`, `loadBalancer`, `pvcVolumeName`: privileged
//!   content of an ordinary kind (`PrivilegedContent`); `endpoints`, `endpointSlice`, `lease`,
//!   `networkPolicy`: privileged kinds (`PrivilegedKind`); `slashV1`: a non-canonical
//!   `apiVersion` (`InvalidApiVersion`); `otherNamespace`: `Namespace`; `externalName`,
//!   `templateVolumeName`: privileged content (`PrivilegedContent`).
//! - `mountSecret`, `mountClaim` (a workload whose pod reads the Secret or mounts the claim
//!   `T`), `cloneClaim` (a claim named `N` cloned from the claim `T`): references to another
//!   application's data (`ForeignReference`). `tolerateAll`, `systemPriority`: placement
//!   (`PodSecurity`).
//!
//! - `sleep`, `clock`, `flood`, `pollables`: side channels rather than objects, see `side.rs`.
//!
//! Config: `{"attack": A, "name": N, "workload": W, "serviceAccount": S, "target": T}`,
//! defaults `N` = `victim`, `W` = `StatefulSet`, `S` = `windlass`, `T` = `victim`. An unknown attack or workload is
//! `invalid-config`.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would: the SDK's own checks
//! must not be what protects the cluster.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use serde_json::{Value, json};

mod side;

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::HostileOutput;
    #[cfg(target_arch = "wasm32")]
    export!(HostileOutput);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};

/// Every kind an attack returns. `slashV1` returns `apiVersion: /v1`, which no declaration
/// can match: only the apiVersion rule refuses it (a host that read `/v1` as the core group
/// would have taken it for the declared `v1/ServiceAccount`).
const CHILD_KINDS: &[&str] = &[
    "v1/Secret",
    "v1/ConfigMap",
    "v1/Service",
    "v1/Pod",
    "v1/Endpoints",
    "v1/PersistentVolumeClaim",
    "v1/ServiceAccount",
    "discovery.k8s.io/v1/EndpointSlice",
    "coordination.k8s.io/v1/Lease",
    "networking.k8s.io/v1/NetworkPolicy",
    "apps/v1/StatefulSet",
    "apps/v1/Deployment",
    "apps/v1/DaemonSet",
    "apps/v1/ReplicaSet",
    "batch/v1/Job",
    "batch/v1/CronJob",
];

struct HostileOutput;

/// The config, with defaults filled in.
struct Config {
    attack: String,
    name: String,
    workload: String,
    service_account: String,
    target: String,
}

/// The config, with the keys of the parent's `spec.hostile` (when an object) laid over it: one
/// pipeline then holds a victim parent and an attacker.
fn merged_config(text: &str, parent: &str) -> Result<Value, PluginError> {
    let mut config: Value = serde_json::from_str(text)
        .map_err(|e| PluginError::InvalidConfig(format!("config is not JSON: {e}")))?;
    let parent: Value = serde_json::from_str(parent)
        .map_err(|e| PluginError::InvalidParent(format!("parent is not JSON: {e}")))?;
    if let (Some(base), Some(over)) = (
        config.as_object_mut(),
        parent.pointer("/spec/hostile").and_then(Value::as_object),
    ) {
        base.extend(over.clone());
    }
    Ok(config)
}

impl Config {
    fn parse(config: &Value) -> Result<Self, PluginError> {
        let string = |key: &str, default: Option<&str>| match (&config[key], default) {
            (Value::String(s), _) => Ok(s.clone()),
            (Value::Null, Some(d)) => Ok(d.to_string()),
            (Value::Null, None) => Err(PluginError::InvalidConfig(format!("{key}: missing"))),
            (v, _) => Err(PluginError::InvalidConfig(format!(
                "{key}: {v} is not a string"
            ))),
        };
        Ok(Config {
            attack: string("attack", None)?,
            name: string("name", Some("victim"))?,
            workload: string("workload", Some("StatefulSet"))?,
            service_account: string("serviceAccount", Some("windlass"))?,
            target: string("target", Some("victim"))?,
        })
    }
}

/// A container that meets the restricted Pod Security Standard.
fn container(name: &str) -> Value {
    json!({
        "name": name,
        "image": "busybox",
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
    })
}

/// A privileged container. The API server refuses `privileged` with
/// `allowPrivilegeEscalation: false`, so that is true too.
fn privileged(name: &str) -> Value {
    let mut c = container(name);
    c["securityContext"]["privileged"] = json!(true);
    c["securityContext"]["allowPrivilegeEscalation"] = json!(true);
    c
}

/// A restricted-compliant pod spec with one breakout, or `None` when `attack` is not a pod
/// breakout.
fn pod_spec(attack: &str, service_account: &str, target: &str) -> Option<Value> {
    let mut spec = json!({
        "automountServiceAccountToken": false,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 999,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container("c")],
    });
    match attack {
        "compliant" => {}
        "privileged" => spec["containers"][0] = privileged("c"),
        "hostPath" => {
            spec["volumes"] = json!([{"name": "host", "hostPath": {"path": "/"}}]);
            spec["containers"][0]["volumeMounts"] = json!([{"name": "host", "mountPath": "/host"}]);
        }
        "hostNetwork" | "hostPID" | "hostIPC" => spec[attack] = json!(true),
        "capabilities" => {
            spec["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["SYS_ADMIN"]);
        }
        "hostPort" => {
            spec["containers"][0]["ports"] = json!([{"containerPort": 22, "hostPort": 22}]);
        }
        "runAsRoot" => {
            spec["securityContext"]["runAsUser"] = json!(0);
            spec["securityContext"]["runAsNonRoot"] = json!(false);
        }
        "nodeName" => spec["nodeName"] = json!("node-1"),
        "serviceAccount" => spec["serviceAccountName"] = json!(service_account),
        "automount" => spec["automountServiceAccountToken"] = json!(true),
        "seccompUnconfined" => {
            spec["securityContext"]["seccompProfile"]["type"] = json!("Unconfined");
        }
        "procMount" => {
            spec["containers"][0]["securityContext"]["procMount"] = json!("Unmasked");
            // The API server allows an unmasked /proc only in a user namespace.
            spec["hostUsers"] = json!(false);
        }
        "sysctls" => {
            spec["securityContext"]["sysctls"] = json!([{"name": "kernel.msgmax", "value": "1"}]);
        }
        "ephemeralPrivileged" => spec["ephemeralContainers"] = json!([privileged("debug")]),
        "initPrivileged" => spec["initContainers"] = json!([privileged("init")]),
        "mountSecret" => {
            spec["containers"][0]["env"] = json!([{"name": "STOLEN", "valueFrom":
                {"secretKeyRef": {"name": target, "key": "password"}}}]);
        }
        "mountClaim" => {
            spec["volumes"] =
                json!([{"name": "loot", "persistentVolumeClaim": {"claimName": target}}]);
            spec["containers"][0]["volumeMounts"] = json!([{"name": "loot", "mountPath": "/loot"}]);
        }
        "tolerateAll" => spec["tolerations"] = json!([{"operator": "Exists"}]),
        "systemPriority" => spec["priorityClassName"] = json!("system-node-critical"),
        _ => return None,
    }
    Some(spec)
}

/// `spec` wrapped in a valid object of kind `workload`, named `name`.
fn workload(workload: &str, name: &str, mut spec: Value) -> Result<Value, PluginError> {
    let labels = json!({"app": name});
    let (api_version, body) = match workload {
        "Pod" => {
            spec["restartPolicy"] = json!("Never");
            return Ok(json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
            }));
        }
        "Deployment" | "DaemonSet" | "ReplicaSet" | "StatefulSet" => {
            let mut body = json!({
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            });
            if workload == "StatefulSet" {
                body["serviceName"] = json!(name);
            }
            ("apps/v1", body)
        }
        "Job" | "CronJob" => {
            spec["restartPolicy"] = json!("Never");
            let job = json!({"template": {"metadata": {"labels": labels}, "spec": spec}});
            if workload == "Job" {
                ("batch/v1", job)
            } else {
                (
                    "batch/v1",
                    json!({"schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid", "jobTemplate": {"spec": job}}),
                )
            }
        }
        other => {
            return Err(PluginError::InvalidConfig(format!(
                "workload: unknown value {other:?}"
            )));
        }
    };
    Ok(json!({
        "apiVersion": api_version,
        "kind": workload,
        "metadata": {"name": name},
        "spec": body,
    }))
}

/// A Service named `name` on port 80, with `extra` merged into its spec.
fn service(name: &str, extra: Value) -> Value {
    let mut spec = json!({"ports": [{"port": 80}]});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

/// The one object `config` asks for, or `None` for `omit`.
fn hostile(config: &Config) -> Result<Option<Value>, PluginError> {
    let name = config.name.as_str();
    let object = match config.attack.as_str() {
        "takeover" => json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "data": {"password": "cHduZWQ="},
        }),
        "takeover-configmap" => json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": {"pwned": "true"},
        }),
        "takeover-service" => service(name, json!({})),
        "omit" => return Ok(None),
        "pod-labels" => json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"x": "y"}},
        }),
        "pod-spec" => json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"x": "y"}},
            "spec": {"nodeName": "n1"},
        }),
        "tokenSecret" => json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "annotations": {"kubernetes.io/service-account.name": config.service_account},
            },
            "type": "kubernetes.io/service-account-token",
        }),
        "endpoints" => json!({
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": name},
            "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 443}]}],
        }),
        "endpointSlice" => json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            // The label attaches the slice to the Service of that name: its traffic is stolen.
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"port": 443}],
        }),
        "lease" => json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": "evil"},
        }),
        "networkPolicy" => json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]},
        }),
        "externalIPs" => service(name, json!({"externalIPs": ["1.2.3.4"]})),
        "nodePort" => service(name, json!({"type": "NodePort"})),
        "loadBalancer" => service(name, json!({"type": "LoadBalancer"})),
        "pvcVolumeName" => json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "volumeName": "pv-of-someone-else",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }),
        "slashV1" => {
            json!({"apiVersion": "/v1", "kind": "ServiceAccount", "metadata": {"name": name}})
        }
        "externalName" => service(
            name,
            json!({"type": "ExternalName", "externalName": "evil.example.com", "ports": null}),
        ),
        "cloneClaim" => json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "dataSource": {"kind": "PersistentVolumeClaim", "name": config.target},
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }),
        "templateVolumeName" => {
            let spec = pod_spec("compliant", &config.service_account, &config.target);
            let mut sts = workload("StatefulSet", name, spec.unwrap_or_default())?;
            sts["spec"]["volumeClaimTemplates"] = json!([{
                "metadata": {"name": "data"},
                "spec": {
                    "volumeName": "pv-of-someone-else",
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }]);
            sts
        }
        "otherNamespace" => json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "kube-system"},
            "data": {"pwned": "true"},
        }),
        attack => match pod_spec(attack, &config.service_account, &config.target) {
            Some(spec) => workload(&config.workload, name, spec)?,
            None => {
                return Err(PluginError::InvalidConfig(format!(
                    "attack: unknown value {attack:?}"
                )));
            }
        },
    };
    Ok(Some(object))
}

impl Guest for HostileOutput {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-hostile-output".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: CHILD_KINDS.iter().map(|k| k.to_string()).collect(),
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(req: Request) -> Result<Response, PluginError> {
        let merged = merged_config(&req.config, &req.parent)?;
        if let Some(response) = side::attack(merged["attack"].as_str().unwrap_or_default(), &merged)
        {
            return response;
        }
        let config = Config::parse(&merged)?;
        Ok(Response {
            desired: hostile(&config)?.iter().map(Value::to_string).collect(),
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            requeue_after_secs: None,
            finalized: false,
        })
    }
}
