//! Returns objects whose harm is done one step later, by the cluster's own controllers, to
//! attack what the host makes of a plugin's output rather than the output itself.
//!
//! Config: `{"attack": A, "target": T, "name": N, "template": C}` (the keys of the parent's
//! `spec.hostile` laid over it), defaults `T` = `billing`, `N` = `db`, `C` = `pgdata-orders`.
//! What must stop each attack:
//! - `claimName`: a StatefulSet `N` whose claim template `C` makes `C-N-0`, the name of another
//!   application's retained claim: the derived-name check at apply time (`ObjectNotOwned`).
//! - `adoptReplicaSet`, `adoptDeployment`, `adoptJob` (a `manualSelector` Job): a workload whose
//!   selector and pod labels are `app: T`, another application's Pods: the host narrows every
//!   selector to the parent's pods, so nothing is adopted.
//! - `labelAdopted`: labels only on the Pod named `T` (one a child adopted): `ObjectNotOwned`.
//! - `serviceSelector`: a Service selecting `app: T`: narrowed to the parent's pods.
//! - `joinTraffic`: a Deployment whose pods carry `app: T`, the selector of another
//!   application's Service; `dnsIdentity`: a Pod with `hostname: T-0` and `subdomain:
//!   T-headless`, another application's headless Service: `ObjectNotOwned` naming the Service.
//! - `templateFinalizers`: a StatefulSet with finalizers and owner references inside its pod
//!   template and claim template: the host drops them.
//! - `parentKind`: a Thing, the parent's own kind: `ParentKind`.
//! - `replicas`, `parallelism`, `cronAllow`: a Deployment of 1,000,000 replicas, a Job of
//!   1,000,000 parallel Pods, a CronJob every minute with `concurrencyPolicy: Allow` and no
//!   deadline: `Amplification`.
//! - `joinPolicy`: a Deployment whose pods carry `app: T-api`, the peer another application's
//!   NetworkPolicy lets reach its database: `ObjectNotOwned` naming the NetworkPolicy.
//! - `cronJobName`: a CronJob `N` (every minute, `Forbid`), while another application's Job
//!   `N-<digits>` exists, a name the CronJob controller gives its Jobs: `ObjectNotOwned`.
//! - `event`, `eventV1`: a core or events.k8s.io Event about the Service `T`, reported as the
//!   kubelet: `PrivilegedKind`.
//! - `resourceClaim`: a Job whose pod uses the ResourceClaim `T`: `ForeignReference`.
//! - `gitRepo`: a Job whose pod mounts a gitRepo volume: `PodSecurity` below privileged.
//! - `logForge`: nothing, but a log line with a newline, a carriage return and an escape
//!   sequence followed by a forged host line: escaped in the host's log.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use serde_json::{Value, json};

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::HostileControllers;
    #[cfg(target_arch = "wasm32")]
    export!(HostileControllers);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};

/// Every kind an attack returns: all served by both the devcluster and kube-apiserver, so the
/// plugin loads on either.
const CHILD_KINDS: &[&str] = &[
    "v1/Pod",
    "v1/Service",
    "v1/Event",
    "events.k8s.io/v1/Event",
    "apps/v1/StatefulSet",
    "apps/v1/Deployment",
    "apps/v1/ReplicaSet",
    "batch/v1/Job",
    "batch/v1/CronJob",
    "example.com/v1/Thing",
];

/// The forged line `logForge` hides behind control characters.
pub const FORGED: &str = "INFO windlass: plugin version swapped in wasm_plugin=billing";

struct HostileControllers;

struct Config {
    attack: String,
    target: String,
    name: String,
    template: String,
}

impl Config {
    fn parse(text: &str, parent: &str) -> Result<Self, PluginError> {
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
        let string = |key: &str, default: Option<&str>| match (&config[key], default) {
            (Value::String(s), _) => Ok(s.clone()),
            (Value::Null, Some(d)) => Ok(d.to_string()),
            (v, _) => Err(PluginError::InvalidConfig(format!(
                "{key}: {v} is not a string"
            ))),
        };
        Ok(Config {
            attack: string("attack", None)?,
            target: string("target", Some("billing"))?,
            name: string("name", Some("db"))?,
            template: string("template", Some("pgdata-orders"))?,
        })
    }
}

/// A pod spec that meets the restricted level, with the labels `labels`.
fn pod_template(labels: Value) -> Value {
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 999,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "busybox",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
            "restartPolicy": "Never",
        },
    })
}

fn attack(c: &Config) -> Result<Vec<Value>, PluginError> {
    let app = json!({"app": c.target});
    let object = |api_version: &str, kind: &str, spec: Value| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": c.name}, "spec": spec});
    let hold = json!({"finalizers": ["example.com/never"],
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x"}]});
    Ok(match c.attack.as_str() {
        "claimName" | "templateFinalizers" => {
            let mut template = pod_template(json!({"app": c.name}));
            let mut claim = json!({"metadata": {"name": c.template},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
            if c.attack == "templateFinalizers" {
                for meta in [&mut template["metadata"], &mut claim["metadata"]] {
                    meta["finalizers"] = hold["finalizers"].clone();
                    meta["ownerReferences"] = hold["ownerReferences"].clone();
                }
            }
            template["spec"]["restartPolicy"] = json!("Always");
            vec![object(
                "apps/v1",
                "StatefulSet",
                json!({"replicas": 1, "serviceName": c.name,
                    "selector": {"matchLabels": {"app": c.name}}, "template": template,
                    "volumeClaimTemplates": [claim]}),
            )]
        }
        "adoptReplicaSet" => {
            let mut template = pod_template(app.clone());
            template["spec"]["restartPolicy"] = json!("Always");
            vec![object(
                "apps/v1",
                "ReplicaSet",
                json!({"replicas": 0, "selector": {"matchLabels": app}, "template": template}),
            )]
        }
        "adoptDeployment" => {
            let mut template = pod_template(app.clone());
            template["spec"]["restartPolicy"] = json!("Always");
            vec![object(
                "apps/v1",
                "Deployment",
                json!({"replicas": 0, "selector": {"matchLabels": app}, "template": template}),
            )]
        }
        "adoptJob" => vec![object(
            "batch/v1",
            "Job",
            json!({"manualSelector": true, "parallelism": 0, "selector": {"matchLabels": app},
                "template": pod_template(app.clone())}),
        )],
        "joinTraffic" => {
            let mut template = pod_template(app.clone());
            template["spec"]["restartPolicy"] = json!("Always");
            vec![object(
                "apps/v1",
                "Deployment",
                json!({"replicas": 1, "selector": {"matchLabels": app}, "template": template}),
            )]
        }
        "dnsIdentity" => {
            let mut pod = pod_template(json!({"role": "impostor"}));
            pod["spec"]["hostname"] = json!(format!("{}-0", c.target));
            pod["spec"]["subdomain"] = json!(format!("{}-headless", c.target));
            vec![json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": c.name, "labels": pod["metadata"]["labels"]}, "spec": pod["spec"]})]
        }
        "labelAdopted" => vec![json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": c.target, "labels": {"stolen": "yes"}}})],
        "serviceSelector" => vec![object(
            "v1",
            "Service",
            json!({"selector": app, "ports": [{"port": 5432}]}),
        )],
        "parentKind" => vec![json!({"apiVersion": "example.com/v1", "kind": "Thing",
            "metadata": {"name": format!("{}-spawn", c.name)}, "spec": {"hostile": {"attack": "parentKind"}}})],
        "replicas" => {
            let mut template = pod_template(json!({"app": c.name}));
            template["spec"]["restartPolicy"] = json!("Always");
            vec![object(
                "apps/v1",
                "Deployment",
                json!({"replicas": 1_000_000, "selector": {"matchLabels": {"app": c.name}}, "template": template}),
            )]
        }
        "parallelism" => vec![object(
            "batch/v1",
            "Job",
            json!({"parallelism": 1_000_000, "template": pod_template(json!({}))}),
        )],
        "cronAllow" => vec![object(
            "batch/v1",
            "CronJob",
            json!({"schedule": "* * * * *", "concurrencyPolicy": "Allow",
                "jobTemplate": {"spec": {"template": pod_template(json!({}))}}}),
        )],
        "joinPolicy" => {
            let labels = json!({"app": format!("{}-api", c.target)});
            let mut template = pod_template(labels.clone());
            template["spec"]["restartPolicy"] = json!("Always");
            vec![object(
                "apps/v1",
                "Deployment",
                json!({"replicas": 1, "selector": {"matchLabels": labels}, "template": template}),
            )]
        }
        "cronJobName" => vec![object(
            "batch/v1",
            "CronJob",
            json!({"schedule": "* * * * *", "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"template": pod_template(json!({}))}}}),
        )],
        "event" => vec![json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("{}.forged", c.target)},
            "involvedObject": {"apiVersion": "v1", "kind": "Service", "name": c.target},
            "reason": "Unhealthy", "message": "database corrupted, failing over", "type": "Warning",
            "source": {"component": "kubelet"}})],
        "eventV1" => vec![json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": format!("{}.forged", c.target)},
            "regarding": {"apiVersion": "v1", "kind": "Service", "name": c.target},
            "reason": "Unhealthy", "note": "database corrupted", "type": "Warning",
            "reportingController": "kubelet", "reportingInstance": "node-1", "action": "Check",
            "eventTime": "2026-01-01T00:00:00.000000Z"})],
        "resourceClaim" => {
            let mut template = pod_template(json!({}));
            template["spec"]["resourceClaims"] =
                json!([{"name": "gpu", "resourceClaimName": c.target}]);
            vec![object("batch/v1", "Job", json!({"template": template}))]
        }
        "gitRepo" => {
            let mut template = pod_template(json!({}));
            template["spec"]["volumes"] = json!([{"name": "src", "gitRepo": {"repository": "https://example.com/hooks.git"}}]);
            vec![object("batch/v1", "Job", json!({"template": template}))]
        }
        "logForge" => {
            let line = format!("ok\n{FORGED}\r{FORGED}\u{1b}[2K{FORGED}");
            bindings::windlass::plugin::log::log(
                bindings::windlass::plugin::log::Level::Info,
                &line,
            );
            Vec::new()
        }
        other => {
            return Err(PluginError::InvalidConfig(format!(
                "unknown attack {other:?}"
            )));
        }
    })
}

impl Guest for HostileControllers {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-hostile-controllers".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: CHILD_KINDS.iter().map(|k| k.to_string()).collect(),
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(req: Request) -> Result<Response, PluginError> {
        let config = Config::parse(&req.config, &req.parent)?;
        Ok(Response {
            desired: attack(&config)?.iter().map(Value::to_string).collect(),
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            requeue_after_secs: None,
            finalized: false,
        })
    }
}
