//! The `WasmPlugin` custom resource (windlass.dev/v1alpha1, cluster-scoped): one plugin in the
//! pipeline of a parent kind, and where its component comes from.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use windlass_policy::{Level, PodGrants};

/// One plugin in the pipeline of a parent kind.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "windlass.dev",
    version = "v1alpha1",
    kind = "WasmPlugin",
    plural = "wasmplugins",
    shortname = "wp",
    category = "windlass",
    status = "WasmPluginStatus",
    printcolumn(name = "Parent", type_ = "string", json_path = ".spec.parent.kind"),
    printcolumn(name = "Order", type_ = "integer", json_path = ".spec.order"),
    printcolumn(name = "Plugin", type_ = "string", json_path = ".status.plugin"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(
        name = "Digest",
        type_ = "string",
        json_path = ".status.digest",
        priority = 1
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WasmPluginSpec {
    /// The parent kind this plugin reconciles.
    pub parent: ParentKind,
    /// Position in the pipeline: lower runs first; ties run in name order. Default 0.
    #[serde(default)]
    pub order: i32,
    /// Where the component comes from: exactly one of configMap, oci, file.
    pub source: PluginSource,
    /// Kinds granted to the plugin (`group/version/Kind`, `v1/Kind` for core), to produce
    /// (child kinds) and to observe (reads kinds), and grants of privileged content by name
    /// (`v1/Secret:service-account-token`, `v1/Service:externalIPs`, `v1/Service:NodePort`,
    /// `v1/Service:LoadBalancer`, `v1/PersistentVolumeClaim:volumeName`). When absent, the
    /// plugin may produce and observe what it declares in its info, except cluster-scoped and
    /// privileged kinds (RBAC, ServiceAccounts, Endpoints, Leases, NetworkPolicies, …) and
    /// privileged content, which must be named here; and it never sees Secrets, which it reads
    /// only when `v1/Secret` is named here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<Vec<String>>,
    /// What the pods the plugin produces may do. Default: Pod Security Standards level
    /// `restricted`, no ServiceAccount but the namespace's default, no token mounted.
    #[serde(default)]
    pub pod_security: PodSecurity,
    /// Limits of each call.
    #[serde(default)]
    pub limits: PluginLimits,
    /// What a failure of this plugin does to a reconcile. Default Fail.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// Fresh (default): a new sandbox per call. Reuse: keep instances warm, for heavy guests
    /// (Python, JavaScript); an instance that trapped is dropped.
    #[serde(default)]
    pub instance_mode: InstanceMode,
    /// The plugin's own configuration, passed to it as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub config: Option<Value>,
    /// How a new version is let in. Default: once the canary passes.
    #[serde(default, skip_serializing_if = "Rollout::is_default")]
    pub rollout: Rollout,
}

/// How a new version of a plugin is let in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Before a new version serves, run it — applying nothing, as `windlass plugin diff` does —
    /// on every live parent of the kind: it serves only if no parent would fail or be refused,
    /// and the status's `rollout` says how many would change. Judged once the rest of the
    /// kind's pipeline serves (as the canary). Default false: the canary's few parents.
    #[serde(default)]
    pub diff_gate: bool,
}

impl Rollout {
    fn is_default(&self) -> bool {
        *self == Rollout::default()
    }
}

/// What the diff gate found for the version that serves.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The version judged.
    pub digest: String,
    /// The live parents it was run on.
    pub parents: u32,
    /// Those where nothing would change.
    pub unchanged: u32,
    /// Those where it changes what is applied, pruned or reported.
    pub changed: u32,
}

/// A parent kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentKind {
    /// e.g. `samples.windlass.dev/v1alpha1`.
    pub api_version: String,
    /// e.g. `SampleDB`.
    pub kind: String,
}

impl ParentKind {
    /// `group/version/Kind`, as plugins declare parent kinds.
    pub fn key(&self) -> String {
        format!("{}/{}", self.api_version, self.kind)
    }
}

/// Where a component comes from: exactly one of `configMap`, `oci` or `file` (the API server
/// refuses any other combination: a CEL rule on the schema), read as a [`Source`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.configMap), has(self.oci), has(self.file)].filter(x, x).size() == 1").message("exactly one of configMap, oci or file is required"))]
pub struct PluginSource {
    /// A key of a ConfigMap's binaryData (or data, base64-free text is not a component).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,
    /// An OCI artifact (WebAssembly artifact layout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
    /// A file on the host's filesystem (development only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileSource>,
    /// The component's expected digest (`sha256:<hex>` or `<hex>`); a mismatch is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A ConfigMap key holding a component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSource {
    /// The ConfigMap's namespace.
    pub namespace: String,
    /// The ConfigMap's name.
    pub name: String,
    /// The key in binaryData. Default `plugin.wasm`.
    #[serde(default = "default_key")]
    pub key: String,
}

fn default_key() -> String {
    "plugin.wasm".into()
}

/// An OCI artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciSource {
    /// `registry/repository:tag` or `registry/repository@sha256:…`.
    pub reference: String,
    /// A Secret of type kubernetes.io/dockerconfigjson in the host's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
    /// Load only an artifact whose manifest is signed, in cosign's format, by one of these
    /// keys; an unsigned or wrongly signed one is refused (the version serving stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
}

/// The keys an OCI plugin's signature is checked with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verify {
    /// Public keys; a signature by any one is accepted (list the old and the new key while
    /// rotating).
    #[schemars(length(min = 1))]
    pub keys: Vec<VerifyKey>,
}

/// One public key signatures are checked with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyKey {
    /// What conditions and events call the key.
    pub name: String,
    /// The PEM public key (ECDSA P-256, `-----BEGIN PUBLIC KEY-----`), as `cosign
    /// generate-key-pair` and `windlass plugin keygen` write it.
    pub public_key: String,
}

/// A file on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileSource {
    /// Absolute path of the component.
    pub path: String,
}

/// What the pods a plugin produces (Pods and the pod templates of workloads) may do.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSecurity {
    /// The Pod Security Standards level every pod spec must meet. Default restricted.
    #[serde(default)]
    pub level: PodSecurityLevel,
    /// ServiceAccounts the pods may run as (besides the namespace's `default`). The host's own
    /// ServiceAccount is never allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<String>,
    /// Let pods mount a ServiceAccount token; otherwise every pod spec must set
    /// `automountServiceAccountToken: false`. Default false.
    #[serde(default)]
    pub automount_service_account_token: bool,
}

impl PodSecurity {
    /// What the policy lets the plugin's pods do.
    pub fn grants(&self) -> PodGrants {
        PodGrants {
            level: match self.level {
                PodSecurityLevel::Restricted => Level::Restricted,
                PodSecurityLevel::Baseline => Level::Baseline,
                PodSecurityLevel::Privileged => Level::Privileged,
            },
            service_accounts: self.service_accounts.clone(),
            automount_token: self.automount_service_account_token,
            ..Default::default()
        }
    }
}

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PodSecurityLevel {
    /// Hardened: non-root, no privilege escalation, all capabilities dropped, a seccomp profile.
    #[default]
    Restricted,
    /// Minimally restrictive: no known privilege escalations (no host namespaces, hostPath, …).
    Baseline,
    /// Unrestricted: the Windlass rules (ServiceAccounts, nodeName, tokens) still hold.
    Privileged,
}

/// Limits of each call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginLimits {
    /// Time limit of one call in milliseconds. Default 2000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Memory limit of one instance in MiB. Default 128.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
    /// Instruction budget of one call, when the host runs with fuel enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Pods one object the plugin returns may ask the cluster for (replicas, a Job's
    /// parallelism and completions, a CronJob's overlapping Jobs), and all of its objects
    /// together. Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
}

/// What a failure of the plugin does to a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum FailurePolicy {
    /// Stop: apply nothing, prune nothing, report the error. Until a version of the plugin
    /// serves, the parents of its kind are not reconciled at all.
    #[default]
    Fail,
    /// Skip the plugin and go on; nothing is pruned while it fails or no version of it serves
    /// (a parent being deleted waits for it).
    Ignore,
}

/// Fresh or reused instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum InstanceMode {
    /// A new sandbox per call.
    #[default]
    Fresh,
    /// Warm instances, dropped after a trap.
    Reuse,
}

/// What the host reports about a WasmPlugin.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WasmPluginStatus {
    /// Digest of the component that is serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The plugin's name, from its info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// The plugin's version, from its info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The kinds the plugin declared it produces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_kinds: Vec<String>,
    /// The last error loading a new version (the serving version, if any, stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What the diff gate found for the serving version (`rollout.diffGate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: a version is loaded and serving.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn free_form(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A WasmPlugin's source as the host acts on it: exactly one kind. Each kind's verbs
/// (describe, resolve a revision, fetch, what to watch) are in `controller::source`, one module
/// per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source<'a> {
    /// A ConfigMap key.
    ConfigMap(&'a ConfigMapSource),
    /// An OCI artifact.
    Oci(&'a OciSource),
    /// A file on the host.
    File(&'a FileSource),
}

impl PluginSource {
    /// The one source given. The CRD's CEL rule refuses any other combination at the API
    /// server; this says it again for a WasmPlugin that reached the host another way (an API
    /// server without CEL, a file).
    ///
    /// # Errors
    /// A message naming the field.
    pub fn parse(&self) -> Result<Source<'_>, String> {
        let given: Vec<Source<'_>> = [
            self.config_map.as_ref().map(Source::ConfigMap),
            self.oci.as_ref().map(Source::Oci),
            self.file.as_ref().map(Source::File),
        ]
        .into_iter()
        .flatten()
        .collect();
        match given[..] {
            [one] => Ok(one),
            [] => Err("spec.source: one of configMap, oci or file is required".into()),
            _ => Err("spec.source: only one of configMap, oci or file may be given".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn a_source_is_exactly_one_kind_and_the_crd_says_so_to_the_api_server() {
        let cm = ConfigMapSource {
            namespace: "ns".into(),
            name: "p".into(),
            key: default_key(),
        };
        let file = FileSource {
            path: "/p.wasm".into(),
        };
        let one = PluginSource {
            config_map: Some(cm.clone()),
            ..PluginSource::default()
        };
        assert_eq!(one.parse(), Ok(Source::ConfigMap(&cm)));
        let two = PluginSource {
            config_map: Some(cm.clone()),
            file: Some(file),
            ..PluginSource::default()
        };
        assert!(two.parse().unwrap_err().contains("only one of"));
        assert!(
            PluginSource::default()
                .parse()
                .unwrap_err()
                .contains("one of")
        );
        let schema = serde_json::to_value(&WasmPlugin::crd().spec.versions[0].schema).unwrap();
        let rules = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["source"]["x-kubernetes-validations"];
        assert_eq!(
            rules[0]["rule"],
            "[has(self.configMap), has(self.oci), has(self.file)].filter(x, x).size() == 1",
            "{schema}"
        );
    }

    #[test]
    fn the_crd_is_cluster_scoped_with_printer_columns_and_a_free_form_config() {
        let crd = WasmPlugin::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["wp".to_string()]));
        let version = &crd.spec.versions[0];
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "Parent", "Order", "Plugin", "Version", "Digest", "Ready", "Reason", "Age"
            ]
        );
        let digest = &version.additional_printer_columns.as_ref().unwrap()[4];
        assert_eq!(
            (digest.json_path.as_str(), digest.priority),
            (".status.digest", Some(1))
        );
        let schema = serde_json::to_value(&version.schema).unwrap();
        let config = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["config"];
        assert_eq!(config["x-kubernetes-preserve-unknown-fields"], true);
    }

    #[test]
    fn exactly_one_source_is_required() {
        let mut s = PluginSource::default();
        assert!(s.parse().unwrap_err().contains("required"));
        s.file = Some(FileSource {
            path: "/p.wasm".into(),
        });
        assert!(s.parse().is_ok());
        s.oci = Some(OciSource {
            reference: "r/p:1".into(),
            pull_secret: None,
            verify: None,
        });
        assert!(s.parse().unwrap_err().contains("only one"));
    }

    #[test]
    fn a_minimal_spec_gets_defaults() {
        let spec: WasmPluginSpec = serde_json::from_value(serde_json::json!({
            "parent": {"apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB"},
            "source": {"configMap": {"namespace": "windlass", "name": "storage"}},
        }))
        .unwrap();
        assert_eq!(spec.order, 0);
        assert_eq!(spec.failure_policy, FailurePolicy::Fail);
        assert_eq!(spec.source.config_map.unwrap().key, "plugin.wasm");
        assert_eq!(spec.parent.key(), "samples.windlass.dev/v1alpha1/SampleDB");
    }
}
