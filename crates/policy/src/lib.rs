//! What a plugin may return. Nothing a plugin produced is used before it passes these checks.
//!
//! # Guarantees
//! Every desired object has a canonical `apiVersion` (`group/version`, or `version` for the core
//! group: `/v1` and other spellings the API server would read differently are refused), a
//! `kind` and a valid `metadata.name`; its kind was declared by the plugin in `info` *and*
//! granted by the operator; its namespace is empty or the parent's; cluster-scoped kinds, kinds
//! that confer privileges (RBAC, ServiceAccounts, tokens, webhooks, Endpoints, Leases,
//! NetworkPolicies) and privileged content of ordinary kinds (service-account-token Secrets,
//! externalIPs, NodePort and LoadBalancer Services, claims and claim templates naming a volume)
//! are refused unless granted by name; every pod spec meets the granted Pod Security Standards
//! level ([`pod_security`]); Secrets, claims and snapshots are named only within the parent's
//! family ([`references`]); the count and total size of objects are capped; the status fragment is a
//! JSON object; conditions and events are bounded in number, their reasons have the shape
//! Kubernetes accepts and their messages are cut where the API would cut them.
//!
//! A [`Violation`] names the plugin, the object, the field and the [`Rule`].
//!
//! What this module cannot know — whether an object of that name already exists and belongs
//! to someone else — is decided at apply time (`controller::plan::claim`).

pub mod amplification;
mod at;
mod object;
pub mod pipeline;
pub mod pod_security;
pub mod references;
mod spelling;

use std::collections::{BTreeSet, HashSet};
use std::sync::LazyLock;

use serde_json::Value;

pub use at::At;
pub use object::{KindKey, ObjectKey, group_kind, kind_of, stored_as};
pub use pod_security::{HostAccount, Level, PodGrants};
pub use references::Family;

/// Kinds that are never namespaced (`group/version/Kind`). Extended by discovery for CRDs.
const CLUSTER_SCOPED: &[&str] = &[
    "v1/Namespace",
    "v1/Node",
    "v1/PersistentVolume",
    "rbac.authorization.k8s.io/v1/ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    "apiextensions.k8s.io/v1/CustomResourceDefinition",
    "apiregistration.k8s.io/v1/APIService",
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding",
    "storage.k8s.io/v1/StorageClass",
    "storage.k8s.io/v1/CSIDriver",
    "storage.k8s.io/v1/CSINode",
    "storage.k8s.io/v1/VolumeAttachment",
    "scheduling.k8s.io/v1/PriorityClass",
    "node.k8s.io/v1/RuntimeClass",
    "networking.k8s.io/v1/IngressClass",
    "certificates.k8s.io/v1/CertificateSigningRequest",
    "snapshot.storage.k8s.io/v1/VolumeSnapshotClass",
    "snapshot.storage.k8s.io/v1/VolumeSnapshotContent",
    "windlass.dev/v1alpha1/WasmPlugin",
];

/// Kinds that grant privileges, credentials or traffic: refused unless granted by name, in any
/// version of their group ([`is_privileged`]). Endpoints and EndpointSlices can steer a
/// Service's traffic anywhere; a Lease can take over another controller's leadership; a
/// NetworkPolicy can open or close the namespace's network; an Ingress or a Gateway route can
/// claim any host name on a shared ingress; a ResourceQuota or LimitRange governs every other
/// application's pods in the namespace. An Event can be forged about any object, in any
/// component's name (`source: kubelet`): the host writes a plugin's events from its response,
/// about its parent. A CSIStorageCapacity is read by the scheduler across namespaces; a Binding
/// places a Pod on a node.
const PRIVILEGED: &[&str] = &[
    "v1/ServiceAccount",
    "v1/Event",
    "events.k8s.io/v1/Event",
    "storage.k8s.io/v1/CSIStorageCapacity",
    "v1/Binding",
    "v1/Endpoints",
    "discovery.k8s.io/v1/EndpointSlice",
    "coordination.k8s.io/v1/Lease",
    "networking.k8s.io/v1/NetworkPolicy",
    "networking.k8s.io/v1/Ingress",
    "gateway.networking.k8s.io/v1/Gateway",
    "gateway.networking.k8s.io/v1/HTTPRoute",
    "gateway.networking.k8s.io/v1/GRPCRoute",
    "gateway.networking.k8s.io/v1/TLSRoute",
    "gateway.networking.k8s.io/v1/TCPRoute",
    "v1/ResourceQuota",
    "v1/LimitRange",
    "rbac.authorization.k8s.io/v1/Role",
    "rbac.authorization.k8s.io/v1/RoleBinding",
    "rbac.authorization.k8s.io/v1/ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    "authentication.k8s.io/v1/TokenRequest",
    "certificates.k8s.io/v1/CertificateSigningRequest",
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding",
];

/// Whether `kind` (`group/version/Kind`) is one of [`PRIVILEGED`] in any version and in any
/// case: a kind served at `v1beta1` too is no less privileged there, and another spelling
/// (refused as such by the policy) fails closed here too.
pub fn is_privileged(kind: &str) -> bool {
    // This runs for every desired object of every reconcile: the list is indexed by group once.
    static BY_GROUP: LazyLock<spelling::Kinds> = LazyLock::new(|| {
        let mut kinds = spelling::Kinds::default();
        for p in PRIVILEGED {
            kinds.add(p);
        }
        kinds
    });
    BY_GROUP.holds_in_any_case(kind)
}

/// Grants, by name, for privileged content of ordinary kinds.
pub mod content {
    /// A Secret of type `kubernetes.io/service-account-token`: the token controller mints a
    /// token into it.
    pub const TOKEN_SECRET: &str = "v1/Secret:service-account-token";
    /// A Service with `spec.externalIPs`: traffic for any address can be captured.
    pub const EXTERNAL_IPS: &str = "v1/Service:externalIPs";
    /// A Service of type NodePort: a port on every node.
    pub const NODE_PORT: &str = "v1/Service:NodePort";
    /// A Service of type LoadBalancer: an address outside the cluster.
    pub const LOAD_BALANCER: &str = "v1/Service:LoadBalancer";
    /// A PersistentVolumeClaim (or a claim template) naming `spec.volumeName`: it could bind
    /// someone else's volume.
    pub const VOLUME_NAME: &str = "v1/PersistentVolumeClaim:volumeName";
    /// A Service of type ExternalName: a name in the cluster's DNS for any outside host.
    pub const EXTERNAL_NAME: &str = "v1/Service:ExternalName";
}

/// Privileged content of an ordinary kind: what an object holds that confers privileges, and
/// the grant by name that allows it. One row of [`CONTENT_GRANTS`].
#[derive(Debug)]
pub struct ContentGrant {
    /// The grant that allows it ([`content`]).
    pub grant: &'static str,
    /// The kind it is found on (`group/version/Kind`).
    pub kind: &'static str,
    /// The field the refusal names.
    pub field: &'static str,
    /// Whether `object` holds it.
    present: fn(&Value) -> bool,
    /// Why it confers privileges, as the refusal says it.
    pub why: &'static str,
}

fn service_type(object: &Value, wanted: &str) -> bool {
    object.at("/spec/type").and_then(Value::as_str) == Some(wanted)
}

/// Every privileged content the policy knows, in the order it looks (`PrivilegedContent`); a
/// claim template's `volumeName` is found by `references` with the same grant. docs/SECURITY.md
/// names every grant (`the_security_docs_name_every_content_grant`).
pub const CONTENT_GRANTS: &[ContentGrant] = &[
    ContentGrant {
        grant: content::TOKEN_SECRET,
        kind: "v1/Secret",
        field: "type",
        present: |o| {
            o.get("type").and_then(Value::as_str) == Some("kubernetes.io/service-account-token")
        },
        why: "a Secret of type kubernetes.io/service-account-token gets a ServiceAccount's token minted into it",
    },
    ContentGrant {
        grant: content::EXTERNAL_IPS,
        kind: "v1/Service",
        field: "spec.externalIPs",
        present: |o| {
            o.at("/spec/externalIPs")
                .and_then(Value::as_array)
                .is_some_and(|ips| !ips.is_empty())
        },
        why: "externalIPs capture traffic for addresses outside the Service",
    },
    ContentGrant {
        grant: content::NODE_PORT,
        kind: "v1/Service",
        field: "spec.type",
        present: |o| service_type(o, "NodePort"),
        why: "type NodePort opens a port on every node",
    },
    ContentGrant {
        grant: content::LOAD_BALANCER,
        kind: "v1/Service",
        field: "spec.type",
        present: |o| service_type(o, "LoadBalancer"),
        why: "type LoadBalancer exposes the Service outside the cluster",
    },
    ContentGrant {
        grant: content::EXTERNAL_NAME,
        kind: "v1/Service",
        field: "spec.type",
        present: |o| service_type(o, "ExternalName"),
        why: "type ExternalName points a cluster DNS name at any outside host",
    },
    ContentGrant {
        grant: content::VOLUME_NAME,
        kind: "v1/PersistentVolumeClaim",
        field: "spec.volumeName",
        present: |o| {
            o.at("/spec/volumeName")
                .and_then(Value::as_str)
                .is_some_and(|v| !v.is_empty())
        },
        why: "a claim that names a volume can bind a volume holding someone else's data",
    },
];

/// The kind whose objects a plugin reads only with a grant by name.
pub const SECRET: &str = "v1/Secret";

/// Most conditions one plugin may report in one call.
pub const MAX_CONDITIONS: usize = 32;
/// Most events one plugin may report in one call.
pub const MAX_EVENTS: usize = 16;
/// The API server's limit on a condition message (metav1.Condition), in bytes.
pub const MAX_CONDITION_MESSAGE: usize = 32 * 1024;
/// The API server's limit on an event note (events.k8s.io/v1), in bytes.
pub const MAX_EVENT_NOTE: usize = 1024;

/// Which rule refused a plugin's output: a stable word for conditions and the
/// `windlass_policy_refusals_total{plugin,rule}` metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Not a JSON object, or apiVersion, kind or metadata.name missing.
    InvalidObject,
    /// `apiVersion` is not `group/version` or `version`.
    InvalidApiVersion,
    /// `metadata.name` is not a valid name for the kind.
    InvalidName,
    /// The kind is not among the plugin's declared child kinds.
    KindNotDeclared,
    /// The kind is not among the kinds its WasmPlugin grants.
    KindNotGranted,
    /// A kind that confers privileges, not granted by name.
    PrivilegedKind,
    /// A cluster-scoped kind, not granted by name.
    ClusterScoped,
    /// Privileged content of an ordinary kind (token Secret, externalIPs, …), not granted.
    PrivilegedContent,
    /// A namespace other than the parent's.
    Namespace,
    /// The same object twice.
    Duplicate,
    /// Too many or too large objects, status, conditions or events.
    OutputTooLarge,
    /// The status fragment is not a JSON object.
    InvalidStatus,
    /// A condition's type or reason, or an event's reason, has the wrong shape.
    InvalidReason,
    /// A pod spec breaks the granted Pod Security Standards level or a Windlass pod rule.
    PodSecurity,
    /// An existing object that is not this parent's child (decided at apply time).
    ObjectNotOwned,
    /// A reference by name (a pod's Secret or claim, a snapshot's or claim's source) to an
    /// object outside the parent's family ([`references`]).
    ForeignReference,
    /// A workload asking the cluster for more Pods than the WasmPlugin's `limits.maxPods`
    /// ([`amplification`]).
    Amplification,
    /// An object of a kind the host serves as a parent, not granted by name or nested too deep:
    /// each would be reconciled in turn and could make more.
    ParentKind,
}

impl Rule {
    /// Every rule.
    pub const ALL: [Rule; 18] = [
        Rule::InvalidObject,
        Rule::InvalidApiVersion,
        Rule::InvalidName,
        Rule::KindNotDeclared,
        Rule::KindNotGranted,
        Rule::PrivilegedKind,
        Rule::ClusterScoped,
        Rule::PrivilegedContent,
        Rule::Namespace,
        Rule::Duplicate,
        Rule::OutputTooLarge,
        Rule::InvalidStatus,
        Rule::InvalidReason,
        Rule::PodSecurity,
        Rule::ObjectNotOwned,
        Rule::ForeignReference,
        Rule::Amplification,
        Rule::ParentKind,
    ];

    /// The rule's name, as in conditions and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::InvalidObject => "InvalidObject",
            Rule::InvalidApiVersion => "InvalidApiVersion",
            Rule::InvalidName => "InvalidName",
            Rule::KindNotDeclared => "KindNotDeclared",
            Rule::KindNotGranted => "KindNotGranted",
            Rule::PrivilegedKind => "PrivilegedKind",
            Rule::ClusterScoped => "ClusterScoped",
            Rule::PrivilegedContent => "PrivilegedContent",
            Rule::Namespace => "Namespace",
            Rule::Duplicate => "Duplicate",
            Rule::OutputTooLarge => "OutputTooLarge",
            Rule::InvalidStatus => "InvalidStatus",
            Rule::InvalidReason => "InvalidReason",
            Rule::PodSecurity => "PodSecurity",
            Rule::ObjectNotOwned => "ObjectNotOwned",
            Rule::ForeignReference => "ForeignReference",
            Rule::Amplification => "Amplification",
            Rule::ParentKind => "ParentKind",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the operator granted a plugin (from its WasmPlugin, or `--grant` in `windlass render`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Grants {
    /// Whatever the plugin declared in `info`, except cluster-scoped and privileged kinds,
    /// privileged content, and reading Secrets.
    #[default]
    Declared,
    /// Exactly these kinds (`group/version/Kind`, `v1/Kind` for core) and content grants
    /// ([`content`]). Naming a cluster-scoped or privileged kind here is how it is allowed;
    /// naming `v1/Secret` lets the plugin read Secrets.
    Kinds(BTreeSet<String>),
}

impl Grants {
    /// Whether `name` (a kind or a content grant) is granted by name.
    pub fn names(&self, name: &str) -> bool {
        matches!(self, Grants::Kinds(kinds) if kinds.contains(name))
    }

    /// Whether the plugin may see Secrets: observed ones, and those earlier plugins produced.
    pub fn reads_secrets(&self) -> bool {
        self.names(SECRET)
    }

    /// Checks the kinds a plugin declared it reads (`info.reads-kinds`) against these grants,
    /// at load: reads are granted like child kinds, and Secrets only by name. (Child kinds are
    /// checked object by object in what the plugin returns.)
    ///
    /// # Errors
    /// A message naming the first kind that may not be read.
    pub fn check_reads(&self, policy: &Policy, reads_kinds: &[String]) -> Result<(), String> {
        for kind in reads_kinds {
            let granted = match self {
                Grants::Kinds(names) => names.contains(kind),
                Grants::Declared => {
                    !(is_privileged(kind) || policy.is_cluster_scoped(kind) || kind == SECRET)
                }
            };
            if !granted {
                return Err(format!(
                    "reads kind {kind}, which is not granted to this plugin (grant it by name in the WasmPlugin's spec.grants)"
                ));
            }
        }
        Ok(())
    }
}

/// Caps and scope knowledge shared by every plugin of a host.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Most desired objects after one plugin. Default 1,000.
    pub max_objects: usize,
    /// Most bytes of JSON across all desired objects after one plugin. Default 8 MiB.
    pub max_total_bytes: usize,
    /// Most bytes of JSON in one status fragment. Default 64 KiB.
    pub max_status_bytes: usize,
    /// The host's own ServiceAccount, never given to a plugin's pods.
    pub host_account: Option<HostAccount>,
    /// How deep parents may make parents of a kind the host serves (with the kind granted):
    /// a user's parent is at depth 0, its parent-kind children at 1. Default 2.
    pub max_nesting: u32,
    cluster_scoped: HashSet<String>,
    parent_kinds: HashSet<String>,
    /// Every kind the spelling check compares with: built-in, privileged, cluster-scoped and
    /// parent kinds, kept with the two sets above.
    spellings: spelling::Kinds,
}

/// Annotation the policy sets on an object of a parent kind: how many parents made by plugins
/// lie between it and the one a user created (1 for a child of a user's parent).
pub const NESTING_ANNOTATION: &str = "windlass.dev/nesting";

/// The nesting of a parent: its [`NESTING_ANNOTATION`], 0 when absent (a user made it).
pub fn nesting_of(parent: &Value) -> u32 {
    parent
        .at("/metadata/annotations")
        .and_then(|a| a.get(NESTING_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_objects: 1_000,
            max_total_bytes: 8 << 20,
            max_status_bytes: 64 << 10,
            host_account: None,
            max_nesting: 2,
            cluster_scoped: CLUSTER_SCOPED.iter().map(|s| s.to_string()).collect(),
            parent_kinds: HashSet::new(),
            spellings: {
                let mut kinds = spelling::Kinds::built_in();
                for k in PRIVILEGED.iter().chain(CLUSTER_SCOPED) {
                    kinds.add(k);
                }
                kinds
            },
        }
    }
}

/// A plugin's output that broke the policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin}: invalid output ({rule}): {object}: {}{why}", field_prefix(.field))]
pub struct Violation {
    /// The plugin that produced it.
    pub plugin: String,
    /// The object (`desired[i] Kind ns/name`, `status`, `condition X`).
    pub object: String,
    /// The offending field inside the object (`spec.template.spec.hostNetwork`), or empty
    /// when the object as a whole is refused.
    pub field: String,
    /// The rule that refused it.
    pub rule: Rule,
    /// What is wrong.
    pub why: String,
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

/// Who produced an output and what it was allowed.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// The kinds it declared in `info` (`child-kinds`).
    pub declared: &'a [String],
    /// What the operator granted it.
    pub grants: &'a Grants,
    /// What its pods may do.
    pub pods: &'a PodGrants,
    /// The parent's namespace; none for a cluster-scoped parent.
    pub namespace: Option<&'a str>,
    /// The objects earlier plugins produced (as this plugin received them). One passed on
    /// unchanged was checked against its producer's kinds and grants, not this plugin's: a
    /// backup plugin may hand on the storage plugin's Services without declaring Services.
    pub inherited: &'a [Value],
    /// What references by name may point at besides the desired set: the parent's observed
    /// children and the names written in its spec and the plugin's config.
    pub family: &'a Family,
    /// The parent's [`nesting_of`].
    pub nesting: u32,
}

/// A desired object that passed the checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// `group/version/Kind`.
    pub kind: String,
    /// The object's namespace (the parent's when it named none and is namespaced).
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// The object, with its namespace filled in.
    pub object: Value,
}

impl Checked {
    /// Which object this is.
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(&self.kind, self.namespace.as_deref(), &self.name)
    }
}

/// Why one object was refused: (object description suffix, field, rule, why).
type Refusal = (String, String, Rule, String);

impl Policy {
    /// Tells the policy that a kind (a CRD found by discovery) is cluster-scoped.
    pub fn add_cluster_scoped(&mut self, kind: impl Into<String>) {
        let kind = kind.into();
        self.spellings.add(&kind);
        self.cluster_scoped.insert(kind);
    }

    /// Whether objects of `kind` live outside namespaces.
    pub fn is_cluster_scoped(&self, kind: &str) -> bool {
        self.cluster_scoped.contains(kind)
    }

    /// Tells the policy that the host serves `kind` (`group/version/Kind`) as a parent: a plugin
    /// makes objects of it only when granted by name, and only [`Policy::max_nesting`] deep.
    pub fn add_parent_kind(&mut self, kind: impl Into<String>) {
        let kind = kind.into();
        self.spellings.add(&kind);
        self.parent_kinds.insert(kind);
    }

    /// Whether the host serves `kind` as a parent (in any version).
    pub fn is_parent_kind(&self, kind: &str) -> bool {
        let (group, name) = group_kind(kind);
        self.parent_kinds
            .iter()
            .any(|p| group_kind(p) == (group, name))
    }

    /// Parses and checks the desired set a plugin returned.
    ///
    /// # Errors
    /// The first [`Violation`] found, naming the object.
    pub fn check_desired(
        &self,
        who: Subject<'_>,
        desired: &[String],
    ) -> Result<Vec<Checked>, Violation> {
        let fail = |object: String, rule: Rule, why: String| Violation {
            plugin: who.plugin.to_string(),
            object,
            field: String::new(),
            rule,
            why,
        };
        if desired.len() > self.max_objects {
            return Err(fail(
                "desired".into(),
                Rule::OutputTooLarge,
                format!(
                    "{} objects is more than the limit of {}",
                    desired.len(),
                    self.max_objects
                ),
            ));
        }
        let total: usize = desired.iter().map(String::len).sum();
        if total > self.max_total_bytes {
            return Err(fail(
                "desired".into(),
                Rule::OutputTooLarge,
                format!(
                    "{total} bytes is more than the limit of {}",
                    self.max_total_bytes
                ),
            ));
        }
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(desired.len());
        let mut own = Vec::with_capacity(desired.len());
        for (i, text) in desired.iter().enumerate() {
            let (checked, inherited) =
                self.check_object(who, text)
                    .map_err(|(what, field, rule, why)| Violation {
                        plugin: who.plugin.to_string(),
                        object: format!("desired[{i}]{what}"),
                        field,
                        rule,
                        why,
                    })?;
            if !seen.insert(checked.key()) {
                return Err(fail(
                    format!("desired[{i}] {}", describe(&checked)),
                    Rule::Duplicate,
                    "appears more than once in the desired set".into(),
                ));
            }
            out.push(checked);
            own.push(!inherited);
        }
        let mut desired_family = Family::default();
        for c in &out {
            desired_family.add(&c.kind, &c.object);
        }
        let volume_name = who.grants.names(content::VOLUME_NAME);
        for (i, c) in out.iter().enumerate().filter(|(i, _)| own[*i]) {
            let families = [who.family, &desired_family];
            // The same object as an earlier plugin produced it, if this plugin edited one.
            let earlier = who.inherited.iter().find(|e| {
                kind_of(e) == c.kind
                    && e.at("/metadata/name").and_then(Value::as_str) == Some(&c.name)
            });
            if let Err(r) = references::check(&c.kind, &c.object, families, earlier, volume_name) {
                let rule = if r.volume_name {
                    Rule::PrivilegedContent
                } else {
                    Rule::ForeignReference
                };
                return Err(Violation {
                    plugin: who.plugin.to_string(),
                    object: format!("desired[{i}] {} {}", c.kind, c.name),
                    field: r.field,
                    rule,
                    why: r.why,
                });
            }
        }
        let max_pods = who.pods.max_pods();
        let mut pods = 0u64;
        for (i, c) in out.iter().enumerate().filter(|(i, _)| own[*i]) {
            let over = match amplification::pods_at_once(&c.kind, &c.object, max_pods) {
                Ok(n) => {
                    pods += n;
                    (pods > u64::from(max_pods)).then(|| {
                        (String::new(), format!(
                            "with this object the plugin's objects run {pods} Pods at once: more than the {max_pods} it may ask for (the WasmPlugin's limits.maxPods)"
                        ))
                    })
                }
                Err(over) => Some(over),
            };
            if let Some((field, why)) = over {
                return Err(Violation {
                    plugin: who.plugin.to_string(),
                    object: format!("desired[{i}] {}", describe(c)),
                    field,
                    rule: Rule::Amplification,
                    why,
                });
            }
        }
        Ok(out)
    }

    /// Checks one object; the error carries a description of the object (when known), the
    /// field, the rule and why.
    /// Also says whether the object was passed on unchanged from an earlier plugin.
    ///
    /// In order: [`read`] (the object's shape: `InvalidObject`, `InvalidApiVersion`,
    /// `InvalidName`), the rules on its kind ([`KIND_RULES`]), its namespace
    /// ([`namespace_rule`]), then — unless an earlier plugin produced it exactly so — the rules
    /// on its content ([`CONTENT_RULES`]). The first rule that refuses decides.
    fn check_object(&self, who: Subject<'_>, text: &str) -> Result<(Checked, bool), Refusal> {
        let mut c = read(self, &who, text)?;
        for rule in KIND_RULES {
            rule(self, &who, &c)?;
        }
        let namespace = namespace_rule(&who, &c)?;
        if !c.inherited {
            for rule in CONTENT_RULES {
                rule(self, &who, &c, namespace.as_deref().unwrap_or_default())?;
            }
        }
        if let (Some(ns), Some(meta)) = (
            &namespace,
            c.object.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            meta.insert("namespace".into(), Value::String(ns.clone()));
        }
        if c.parent_kind
            && let Some(meta) = c.object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            // The plugin's own value, if any, is replaced: the depth is the host's to count.
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| Value::Object(Default::default()));
            if !annotations.is_object() {
                *annotations = Value::Object(Default::default());
            }
            if let Some(a) = annotations.as_object_mut() {
                a.insert(
                    NESTING_ANNOTATION.into(),
                    Value::String((who.nesting + 1).to_string()),
                );
            }
        }
        Ok((
            Checked {
                kind: c.kind,
                namespace,
                name: c.name,
                object: c.object,
            },
            c.inherited,
        ))
    }

    /// Parses and checks a status fragment.
    ///
    /// # Errors
    /// A [`Violation`] when it is not a JSON object or is too large.
    pub fn check_status(
        &self,
        plugin: &str,
        status: &str,
    ) -> Result<serde_json::Map<String, Value>, Violation> {
        let fail = |rule: Rule, why: String| Violation {
            plugin: plugin.to_string(),
            object: "status".into(),
            field: String::new(),
            rule,
            why,
        };
        if status.len() > self.max_status_bytes {
            return Err(fail(
                Rule::OutputTooLarge,
                format!(
                    "{} bytes is more than the limit of {}",
                    status.len(),
                    self.max_status_bytes
                ),
            ));
        }
        match serde_json::from_str(status) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(fail(Rule::InvalidStatus, "must be a JSON object".into())),
            Err(e) => Err(fail(Rule::InvalidStatus, format!("not valid JSON: {e}"))),
        }
    }

    /// Checks how many conditions and events one call reported.
    ///
    /// # Errors
    /// A [`Violation`] ([`Rule::OutputTooLarge`]) naming the list.
    pub fn check_counts(
        &self,
        plugin: &str,
        conditions: usize,
        events: usize,
    ) -> Result<(), Violation> {
        for (what, n, max) in [
            ("conditions", conditions, MAX_CONDITIONS),
            ("events", events, MAX_EVENTS),
        ] {
            if n > max {
                return Err(Violation {
                    plugin: plugin.to_string(),
                    object: what.into(),
                    field: String::new(),
                    rule: Rule::OutputTooLarge,
                    why: format!("{n} {what} in one call is more than the limit of {max}"),
                });
            }
        }
        Ok(())
    }

    /// Checks a condition's type and reason, and an event's reason, as the API server would.
    ///
    /// # Errors
    /// A [`Violation`] naming the condition or event.
    pub fn check_reason(
        &self,
        plugin: &str,
        what: &str,
        kind: Option<&str>,
        reason: &str,
    ) -> Result<(), Violation> {
        let fail = |field: &str, why: String| Violation {
            plugin: plugin.to_string(),
            object: what.to_string(),
            field: field.to_string(),
            rule: Rule::InvalidReason,
            why,
        };
        if let Some(kind) = kind
            && !is_condition_type(kind)
        {
            return Err(fail(
                "type",
                format!("type {kind:?} must be an UpperCamelCase name of at most 316 characters"),
            ));
        }
        if !is_reason(reason) {
            return Err(fail(
                "reason",
                format!(
                    "reason {reason:?} must start with a letter and hold only letters, digits, '_', ',' and ':' (at most 1024)"
                ),
            ));
        }
        Ok(())
    }
}

/// An object under check, as [`read`] found it before any rule on its kind decided.
struct Candidate {
    object: Value,
    /// `group/version/Kind`.
    kind: String,
    name: String,
    /// Its own `metadata.namespace`, if any.
    namespace: Option<String>,
    /// ` kind name`, as the refusal names it.
    what: String,
    /// Passed on exactly as an earlier plugin produced it: checked against that plugin's
    /// declaration and grants, not this one's.
    inherited: bool,
    cluster_scoped: bool,
    parent_kind: bool,
}

impl Candidate {
    /// A refusal of the whole object (no field).
    fn refuse(&self, rule: Rule, why: String) -> Refusal {
        (self.what.clone(), String::new(), rule, why)
    }

    /// Granted by name, or inherited (granted to the plugin that produced it).
    fn named(&self, who: &Subject<'_>) -> bool {
        self.inherited || who.grants.names(&self.kind)
    }
}

/// A rule on an object's kind: whether this plugin may produce objects of it at all.
type KindRule = fn(&Policy, &Subject<'_>, &Candidate) -> Result<(), Refusal>;

/// The rules on an object's kind, in the order they are checked.
const KIND_RULES: &[KindRule] = &[
    declared,
    privileged_kind,
    cluster_scoped,
    parent_kind,
    granted,
];

/// A rule on an object's content, given the namespace it will have.
type ContentRule = fn(&Policy, &Subject<'_>, &Candidate, &str) -> Result<(), Refusal>;

/// The rules on an object's content, in order; not for an object passed on unchanged.
const CONTENT_RULES: &[ContentRule] = &[privileged_content_rule, pod_security_rule];

/// The object's shape, before any rule on its kind: JSON, an object, apiVersion and kind
/// present and well formed, a known kind's spelling, and a valid `metadata.name`.
fn read(policy: &Policy, who: &Subject<'_>, text: &str) -> Result<Candidate, Refusal> {
    let whole = |what: String, rule: Rule, why: String| (what, String::new(), rule, why);
    let object: Value = serde_json::from_str(text).map_err(|e| {
        whole(
            String::new(),
            Rule::InvalidObject,
            format!("not valid JSON: {e}"),
        )
    })?;
    let Some(map) = object.as_object() else {
        return Err(whole(
            String::new(),
            Rule::InvalidObject,
            "not a JSON object".into(),
        ));
    };
    let field = |name: &str| {
        map.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let api_version = field("apiVersion").ok_or_else(|| {
        whole(
            String::new(),
            Rule::InvalidObject,
            "apiVersion is missing".into(),
        )
    })?;
    let kind_name = field("kind")
        .ok_or_else(|| whole(String::new(), Rule::InvalidObject, "kind is missing".into()))?;
    let kind = format!("{api_version}/{kind_name}");
    if let Err(why) = check_api_version(api_version) {
        return Err((
            format!(" {kind}"),
            "apiVersion".into(),
            Rule::InvalidApiVersion,
            why,
        ));
    }
    if !is_kind_name(kind_name) {
        return Err((
            format!(" {kind}"),
            "kind".into(),
            Rule::InvalidObject,
            format!("{kind_name:?} is not a Kind: an UpperCamelCase name of letters and digits"),
        ));
    }
    if let Err(why) = spelling::check(&kind, &object, &policy.spellings) {
        return Err((format!(" {kind}"), "kind".into(), Rule::InvalidObject, why));
    }
    let metadata = map.get("metadata").and_then(Value::as_object);
    let name = metadata
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            whole(
                format!(" {kind}"),
                Rule::InvalidObject,
                "metadata.name is missing".into(),
            )
        })?
        .to_string();
    let what = format!(" {kind} {name}");
    if let Err(why) = check_name(kind_name, &name) {
        return Err((
            what,
            "metadata.name".into(),
            Rule::InvalidName,
            format!("metadata.name: {why}"),
        ));
    }
    let namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let inherited = who.inherited.contains(&object);
    Ok(Candidate {
        cluster_scoped: policy.is_cluster_scoped(&kind),
        parent_kind: policy.is_parent_kind(&kind),
        object,
        kind,
        name,
        namespace,
        what,
        inherited,
    })
}

/// `KindNotDeclared`: the kind is among the child kinds the plugin declared.
fn declared(_: &Policy, who: &Subject<'_>, c: &Candidate) -> Result<(), Refusal> {
    if c.inherited || who.declared.contains(&c.kind) {
        return Ok(());
    }
    Err(c.refuse(
        Rule::KindNotDeclared,
        format!(
            "kind {} is not among the child kinds the plugin declared in info",
            c.kind
        ),
    ))
}

/// `PrivilegedKind`: a kind that confers privileges only by a grant naming it.
fn privileged_kind(_: &Policy, who: &Subject<'_>, c: &Candidate) -> Result<(), Refusal> {
    if !is_privileged(&c.kind) || c.named(who) {
        return Ok(());
    }
    Err(c.refuse(
        Rule::PrivilegedKind,
        format!(
            "kind {} confers privileges and is not granted by name",
            c.kind
        ),
    ))
}

/// `ClusterScoped`: a cluster-scoped kind only by a grant naming it, and never for a
/// namespaced parent.
fn cluster_scoped(_: &Policy, who: &Subject<'_>, c: &Candidate) -> Result<(), Refusal> {
    if !c.cluster_scoped {
        return Ok(());
    }
    if !c.named(who) {
        return Err(c.refuse(
            Rule::ClusterScoped,
            format!(
                "kind {} is cluster-scoped and is not granted by name",
                c.kind
            ),
        ));
    }
    if who.namespace.is_some() {
        return Err(c.refuse(
            Rule::ClusterScoped,
            format!(
                "kind {} is cluster-scoped and the parent is namespaced: a namespaced owner cannot own it (the garbage collector ignores such owner references), so the host could never clean it up",
                c.kind
            ),
        ));
    }
    Ok(())
}

/// `ParentKind`: a kind the host serves as a parent only by a grant naming it, and only so
/// deep. Inherited or not: the next plugin receives an earlier plugin's output as that plugin
/// wrote it, so the depth is checked (and stamped) on every pass.
fn parent_kind(policy: &Policy, who: &Subject<'_>, c: &Candidate) -> Result<(), Refusal> {
    if !c.parent_kind {
        return Ok(());
    }
    if !c.named(who) {
        return Err(c.refuse(
            Rule::ParentKind,
            format!(
                "kind {} is a kind the host serves as a parent: each such object is reconciled in turn and could make more; it needs a grant by name",
                c.kind
            ),
        ));
    }
    if who.nesting >= policy.max_nesting {
        return Err(c.refuse(
            Rule::ParentKind,
            format!(
                "kind {} is a kind the host serves as a parent, and this parent is already {} deep in parents made by plugins (at most {})",
                c.kind, who.nesting, policy.max_nesting
            ),
        ));
    }
    Ok(())
}

/// `KindNotGranted`: with grants listed, the kind is among them.
fn granted(_: &Policy, who: &Subject<'_>, c: &Candidate) -> Result<(), Refusal> {
    match who.grants {
        Grants::Kinds(kinds) if !c.inherited && !kinds.contains(&c.kind) => Err(c.refuse(
            Rule::KindNotGranted,
            format!("kind {} is not granted to this plugin", c.kind),
        )),
        _ => Ok(()),
    }
}

/// `Namespace`: the namespace the object will have — none for a cluster-scoped kind, the
/// parent's for a namespaced one — or why it cannot have one.
fn namespace_rule(who: &Subject<'_>, c: &Candidate) -> Result<Option<String>, Refusal> {
    let at = |why: String| {
        (
            c.what.clone(),
            "metadata.namespace".to_string(),
            Rule::Namespace,
            why,
        )
    };
    if c.cluster_scoped {
        return match &c.namespace {
            Some(ns) => Err(at(format!("is cluster-scoped but names namespace {ns}"))),
            None => Ok(None),
        };
    }
    match (c.namespace.as_deref(), who.namespace) {
        (Some(ns), Some(parent)) if ns != parent => Err(at(format!(
            "namespace {ns} is not the parent's namespace {parent}"
        ))),
        (Some(ns), None) => Err(at(format!("namespace {ns}: the parent is cluster-scoped"))),
        (_, Some(parent)) => Ok(Some(parent.to_string())),
        (None, None) => Err(c.refuse(
            Rule::Namespace,
            "is namespaced but the parent is cluster-scoped".into(),
        )),
    }
}

/// `PrivilegedContent`: content of an ordinary kind that confers privileges, only by a content
/// grant ([`CONTENT_GRANTS`]).
fn privileged_content_rule(
    _: &Policy,
    who: &Subject<'_>,
    c: &Candidate,
    _namespace: &str,
) -> Result<(), Refusal> {
    privileged_content(&c.kind, &c.object, who.grants)
        .map_err(|(field, why)| (c.what.clone(), field, Rule::PrivilegedContent, why))
}

/// `PodSecurity`: every pod spec in the object, at the granted level ([`pod_security`]).
fn pod_security_rule(
    policy: &Policy,
    who: &Subject<'_>,
    c: &Candidate,
    namespace: &str,
) -> Result<(), Refusal> {
    pod_security::check_object(
        &c.kind,
        namespace,
        &c.object,
        who.pods,
        policy.host_account.as_ref(),
    )
    .map_err(|v| {
        (
            c.what.clone(),
            v.field,
            Rule::PodSecurity,
            format!("{} ({})", v.why, v.rule),
        )
    })
}

/// Cuts `message` to at most `max` bytes on a character boundary, saying so at its end, as the
/// API server would refuse it whole.
pub fn cut_message(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    const MARK: &str = " … [cut by the host]";
    let mut end = max.saturating_sub(MARK.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &message[..end])
}

/// Refuses content of ordinary kinds that confers privileges unless its grant is named
/// ([`CONTENT_GRANTS`], in order): (field, why).
fn privileged_content(kind: &str, object: &Value, grants: &Grants) -> Result<(), (String, String)> {
    let found = CONTENT_GRANTS
        .iter()
        .filter(|c| c.kind == kind && (c.present)(object));
    for c in found {
        if !grants.names(c.grant) {
            return Err((
                c.field.to_string(),
                format!("{}; this needs the grant {} by name", c.why, c.grant),
            ));
        }
    }
    Ok(())
}

/// `apiVersion` as the API server reads it: `version` for the core group, or `group/version`
/// with a DNS-subdomain group; nothing else (`/v1`, `core/v1`, `apps/v1/`, spaces, capitals).
pub fn check_api_version(api_version: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{api_version:?} {why}"));
    let (group, version) = match api_version.split_once('/') {
        None => ("", api_version),
        Some((group, version)) => {
            if group.is_empty() {
                return bad("has an empty group: the core group is written `v1`, without a slash");
            }
            if group == "core" {
                return bad("names the core group: it is written `v1`, without a group");
            }
            (group, version)
        }
    };
    if !group.is_empty() && !group.split('.').all(is_label) {
        return bad("has a group that is not a DNS subdomain");
    }
    if !is_version(version) {
        return bad("has a version that is not of the form v1, v1beta1 or v2alpha3");
    }
    Ok(())
}

/// A Kubernetes API version: `v<N>`, optionally followed by `alpha<N>` or `beta<N>`.
fn is_version(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return false;
    }
    let rest = &rest[digits..];
    if rest.is_empty() {
        return true;
    }
    let Some(n) = rest
        .strip_prefix("alpha")
        .or_else(|| rest.strip_prefix("beta"))
    else {
        return false;
    };
    !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) && !n.starts_with('0')
}

/// A Kind: starts with an uppercase letter, letters and digits only.
fn is_kind_name(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_uppercase()) && k.chars().all(|c| c.is_ascii_alphanumeric())
}

/// `Kind ns/name` for messages.
pub fn describe(c: &Checked) -> String {
    match &c.namespace {
        Some(ns) => format!("{} {ns}/{}", c.kind, c.name),
        None => format!("{} {}", c.kind, c.name),
    }
}

/// Object names: a DNS-1123 subdomain, and a DNS-1035 label for Services (their names become
/// DNS labels).
fn check_name(kind: &str, name: &str) -> Result<(), String> {
    if kind == "Service" {
        if name.len() > 63 {
            return Err(format!("{name:?} is longer than 63 characters"));
        }
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) || !is_label(name) {
            return Err(format!(
                "{name:?} must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter"
            ));
        }
        return Ok(());
    }
    if name.is_empty() || name.len() > 253 {
        return Err(format!("{name:?} must be 1 to 253 characters"));
    }
    if !name.split('.').all(is_label) {
        return Err(format!(
            "{name:?} must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A DNS-1123 label: 1–63 of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

fn is_condition_type(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 316
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn is_reason(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 1024
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_,:".contains(c))
        && !s.ends_with([',', ':'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// docs/SECURITY.md's table of the output policy names every rule the policy refuses by,
    /// once, and no other; `ObjectNotOwned`, decided at apply time, has its own section.
    #[test]
    fn the_security_docs_table_names_every_rule_once() {
        let docs = include_str!("../../../docs/SECURITY.md");
        let start = docs
            .find("### Output policy")
            .expect("docs/SECURITY.md has the output policy section");
        let section = &docs[start..];
        let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
        let mut listed: Vec<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .collect();
        listed.sort_unstable();
        let mut rules: Vec<&str> = Rule::ALL
            .iter()
            .filter(|r| **r != Rule::ObjectNotOwned)
            .map(|r| r.as_str())
            .collect();
        rules.sort_unstable();
        assert_eq!(listed, rules);
        assert!(docs.contains("`ObjectNotOwned`"));
        // Every variant is in ALL: as_str is exhaustive, and ALL holds each name once.
        let mut names: Vec<&str> = Rule::ALL.iter().map(|r| r.as_str()).collect();
        names.dedup();
        assert_eq!(names.len(), Rule::ALL.len());
    }

    /// docs/SECURITY.md's `PrivilegedContent` row names every content grant, and no other.
    #[test]
    fn the_security_docs_name_every_content_grant() {
        let docs = include_str!("../../../docs/SECURITY.md");
        let row = docs
            .lines()
            .find(|l| l.starts_with("| `PrivilegedContent` |"))
            .expect("docs/SECURITY.md has the PrivilegedContent row");
        let granted = row.rsplit('|').nth(1).expect("the row's last column");
        let mut listed: Vec<&str> = granted.split('`').skip(1).step_by(2).collect();
        listed.sort_unstable();
        let mut grants: Vec<&str> = CONTENT_GRANTS.iter().map(|c| c.grant).collect();
        grants.sort_unstable();
        grants.dedup();
        assert_eq!(listed, grants);
    }

    fn declared() -> Vec<String> {
        [
            "apps/v1/StatefulSet",
            "v1/Service",
            "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
            "v1/Namespace",
        ]
        .map(String::from)
        .to_vec()
    }

    fn check(grants: &Grants, objects: &[Value]) -> Result<Vec<Checked>, Violation> {
        let declared = declared();
        let who = Subject {
            plugin: "storage",
            declared: &declared,
            grants,
            pods: &PodGrants::default(),
            namespace: Some("db"),
            inherited: &[],
            family: &Family::default(),
            nesting: 0,
        };
        let texts: Vec<String> = objects.iter().map(Value::to_string).collect();
        Policy::default().check_desired(who, &texts)
    }

    fn sts(name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name}})
    }

    #[test]
    fn a_declared_namespaced_object_gets_the_parents_namespace() {
        let out = check(&Grants::Declared, &[sts("db")]).unwrap();
        assert_eq!(out[0].namespace.as_deref(), Some("db"));
        assert_eq!(out[0].object["metadata"]["namespace"], "db");
        assert_eq!(describe(&out[0]), "apps/v1/StatefulSet db/db");
    }

    #[test]
    fn an_object_in_another_namespace_is_refused_with_its_name() {
        let mut obj = sts("db");
        obj["metadata"]["namespace"] = json!("kube-system");
        let err = check(&Grants::Declared, &[obj]).unwrap_err();
        assert_eq!(err.object, "desired[0] apps/v1/StatefulSet db");
        assert_eq!(
            err.why,
            "namespace kube-system is not the parent's namespace db"
        );
    }

    #[test]
    fn undeclared_kinds_are_refused_even_when_granted() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let grants = Grants::Kinds(["v1/Pod".to_string()].into());
        let err = check(&grants, &[obj]).unwrap_err();
        assert!(
            err.why
                .contains("not among the child kinds the plugin declared"),
            "{err}"
        );
    }

    #[test]
    fn rbac_and_cluster_scoped_kinds_need_a_grant_by_name() {
        let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "admin"}});
        let err = check(&Grants::Declared, std::slice::from_ref(&crb)).unwrap_err();
        assert_eq!(
            err.why,
            "kind rbac.authorization.k8s.io/v1/ClusterRoleBinding confers privileges and is not granted by name"
        );
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}});
        let err = check(&Grants::Declared, &[ns.clone()]).unwrap_err();
        assert!(
            err.why
                .contains("cluster-scoped and is not granted by name"),
            "{err}"
        );
        let grants = Grants::Kinds(["v1/Namespace".to_string()].into());
        // Granted, but the parent is namespaced: it could never own it.
        let err = check(&grants, std::slice::from_ref(&ns)).unwrap_err();
        assert_eq!(err.rule, Rule::ClusterScoped);
        assert!(err.why.contains("the parent is namespaced"), "{err}");
        // A cluster-scoped parent may have it, when granted.
        let declared = declared();
        let who = Subject {
            plugin: "storage",
            declared: &declared,
            grants: &grants,
            pods: &PodGrants::default(),
            namespace: None,
            inherited: &[],
            family: &Family::default(),
            nesting: 0,
        };
        let out = Policy::default()
            .check_desired(who, &[ns.to_string()])
            .unwrap();
        assert_eq!(out[0].namespace, None);
    }

    #[test]
    fn explicit_grants_narrow_what_was_declared() {
        let grants = Grants::Kinds(["v1/Service".to_string()].into());
        let err = check(&grants, &[sts("db")]).unwrap_err();
        assert_eq!(
            err.why,
            "kind apps/v1/StatefulSet is not granted to this plugin"
        );
    }

    #[test]
    fn names_must_be_dns_names() {
        let err = check(&Grants::Declared, &[sts("Bad_Name")]).unwrap_err();
        assert!(
            err.why
                .starts_with("metadata.name: \"Bad_Name\" must be a DNS-1123 subdomain"),
            "{err}"
        );
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1db"}});
        let err = check(&Grants::Declared, &[svc]).unwrap_err();
        assert!(err.why.contains("DNS-1035 label"), "{err}");
        let err = check(
            &Grants::Declared,
            &[json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {}})],
        )
        .unwrap_err();
        assert_eq!(
            (err.object.as_str(), err.why.as_str()),
            ("desired[0] apps/v1/StatefulSet", "metadata.name is missing")
        );
    }

    #[test]
    fn invalid_json_and_missing_type_fields_are_refused() {
        let declared = declared();
        let who = Subject {
            plugin: "p",
            declared: &declared,
            grants: &Grants::Declared,
            pods: &PodGrants::default(),
            namespace: Some("db"),
            inherited: &[],
            family: &Family::default(),
            nesting: 0,
        };
        let err = Policy::default()
            .check_desired(who, &["{not json".to_string()])
            .unwrap_err();
        assert!(err.why.starts_with("not valid JSON"), "{err}");
        assert_eq!(err.to_string().split(':').next(), Some("plugin p"));
        let err = check(&Grants::Declared, &[json!({"kind": "StatefulSet"})]).unwrap_err();
        assert_eq!(err.why, "apiVersion is missing");
        let err = check(&Grants::Declared, &[json!([1, 2])]).unwrap_err();
        assert_eq!(err.why, "not a JSON object");
    }

    #[test]
    fn duplicates_and_oversized_sets_are_refused() {
        let err = check(&Grants::Declared, &[sts("a"), sts("a")]).unwrap_err();
        assert_eq!(err.why, "appears more than once in the desired set");
        let many: Vec<Value> = (0..1_001).map(|i| sts(&format!("s{i}"))).collect();
        let err = check(&Grants::Declared, &many).unwrap_err();
        assert_eq!(err.why, "1001 objects is more than the limit of 1000");
    }

    #[test]
    fn status_must_be_a_small_json_object() {
        let p = Policy::default();
        assert_eq!(
            p.check_status("p", r#"{"phase":"Ready"}"#).unwrap()["phase"],
            "Ready"
        );
        assert_eq!(
            p.check_status("p", "[1]").unwrap_err().why,
            "must be a JSON object"
        );
        let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(70_000));
        assert!(
            p.check_status("p", &big)
                .unwrap_err()
                .why
                .contains("more than the limit")
        );
    }

    #[test]
    fn condition_types_and_reasons_follow_kubernetes_rules() {
        let p = Policy::default();
        assert!(
            p.check_reason("p", "condition", Some("StorageReady"), "WaitingForPods")
                .is_ok()
        );
        assert!(
            p.check_reason("p", "condition", Some("storage ready"), "X")
                .is_err()
        );
        let err = p.check_reason("p", "event", None, "not ok!").unwrap_err();
        assert_eq!(err.object, "event");
    }

    #[test]
    fn objects_passed_on_unchanged_need_no_declaration_but_edited_ones_do() {
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"}});
        let inherited = [service.clone()];
        let declared = vec!["batch/v1/CronJob".to_string()];
        let who = Subject {
            plugin: "backup",
            declared: &declared,
            grants: &Grants::Declared,
            pods: &PodGrants::default(),
            namespace: Some("db"),
            inherited: &inherited,
            family: &Family::default(),
            nesting: 0,
        };
        assert!(
            Policy::default()
                .check_desired(who, &[service.to_string()])
                .is_ok()
        );
        let mut edited = service;
        edited["spec"] = json!({"type": "NodePort"});
        let err = Policy::default()
            .check_desired(who, &[edited.to_string()])
            .unwrap_err();
        assert!(err.why.contains("not among the child kinds"), "{err}");
    }
}

#[cfg(test)]
mod containment_tests {
    use super::*;
    use serde_json::json;

    fn check_as(
        grants: &Grants,
        declared: &[&str],
        object: Value,
    ) -> Result<Vec<Checked>, Violation> {
        check_with(&Policy::default(), grants, declared, 0, &[object])
    }

    #[test]
    fn a_non_canonical_api_version_is_refused_even_when_declared() {
        for api_version in [
            "/v1", "core/v1", "apps/v1/", "V1", "apps/V1", "v1 ", "apps//v1", "v01",
        ] {
            let obj = json!({"apiVersion": api_version, "kind": "ServiceAccount", "metadata": {"name": "x"}});
            let declared = format!("{api_version}/ServiceAccount");
            let err = check_as(&Grants::Declared, &[declared.as_str()], obj).unwrap_err();
            assert_eq!(err.rule, Rule::InvalidApiVersion, "{api_version}: {err}");
            assert_eq!(err.field, "apiVersion");
        }
        for good in [
            "v1",
            "apps/v1",
            "batch/v1",
            "snapshot.storage.k8s.io/v1",
            "example.com/v2beta3",
        ] {
            assert!(check_api_version(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn endpoints_leases_network_policies_ingresses_and_quotas_need_a_grant_by_name_in_any_version()
    {
        for (api_version, kind) in [
            ("v1", "Endpoints"),
            ("discovery.k8s.io/v1", "EndpointSlice"),
            ("coordination.k8s.io/v1", "Lease"),
            ("networking.k8s.io/v1", "NetworkPolicy"),
            ("networking.k8s.io/v1", "Ingress"),
            ("gateway.networking.k8s.io/v1", "HTTPRoute"),
            ("gateway.networking.k8s.io/v1beta1", "HTTPRoute"),
            ("v1", "ResourceQuota"),
            ("v1", "LimitRange"),
            ("rbac.authorization.k8s.io/v1beta1", "Role"),
        ] {
            let key = format!("{api_version}/{kind}");
            let obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
            let err = check_as(&Grants::Declared, &[key.as_str()], obj.clone()).unwrap_err();
            assert_eq!(err.rule, Rule::PrivilegedKind, "{err}");
            let grants = Grants::Kinds([key.clone()].into());
            assert!(check_as(&grants, &[key.as_str()], obj).is_ok());
        }
    }

    #[test]
    fn privileged_content_of_ordinary_kinds_needs_its_own_grant() {
        let cases = [
            (
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t"}, "type": "kubernetes.io/service-account-token"}),
                "type",
                content::TOKEN_SECRET,
            ),
            (
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"externalIPs": ["1.2.3.4"]}}),
                "spec.externalIPs",
                content::EXTERNAL_IPS,
            ),
            (
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": "NodePort"}}),
                "spec.type",
                content::NODE_PORT,
            ),
            (
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": "LoadBalancer"}}),
                "spec.type",
                content::LOAD_BALANCER,
            ),
            (
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": "ExternalName", "externalName": "example.com"}}),
                "spec.type",
                content::EXTERNAL_NAME,
            ),
            (
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": {"volumeName": "pv-1"}}),
                "spec.volumeName",
                content::VOLUME_NAME,
            ),
        ];
        for (obj, field, grant) in cases {
            let kind = kind_of(&obj);
            let err = check_as(&Grants::Declared, &[kind.as_str()], obj.clone()).unwrap_err();
            assert_eq!(
                (err.rule, err.field.as_str()),
                (Rule::PrivilegedContent, field),
                "{err}"
            );
            assert!(err.why.contains(grant), "{err}");
            let grants = Grants::Kinds([kind.clone(), grant.to_string()].into());
            assert!(check_as(&grants, &[kind.as_str()], obj).is_ok(), "{grant}");
        }
        // A plain Service and an opaque Secret need nothing.
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": "ClusterIP"}});
        assert!(check_as(&Grants::Declared, &["v1/Service"], svc).is_ok());
    }

    #[test]
    fn a_privileged_pod_template_is_refused_naming_the_field() {
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"template": {"spec": {"automountServiceAccountToken": false, "hostNetwork": true,
                "containers": [{"name": "c", "image": "i"}]}}}});
        let err = check_as(&Grants::Declared, &["apps/v1/StatefulSet"], sts).unwrap_err();
        assert_eq!(err.rule, Rule::PodSecurity);
        assert_eq!(err.field, "spec.template.spec.hostNetwork");
        assert!(err.to_string().contains("(PodSecurity)"), "{err}");
    }

    #[test]
    fn too_many_conditions_or_events_are_refused_and_long_messages_cut() {
        let p = Policy::default();
        assert!(p.check_counts("p", MAX_CONDITIONS, MAX_EVENTS).is_ok());
        let err = p.check_counts("p", MAX_CONDITIONS + 1, 0).unwrap_err();
        assert_eq!(
            (err.rule, err.object.as_str()),
            (Rule::OutputTooLarge, "conditions")
        );
        let err = p.check_counts("p", 0, 100_000).unwrap_err();
        assert_eq!(err.object, "events");
        let long = "é".repeat(1000);
        let cut = cut_message(&long, MAX_EVENT_NOTE);
        assert!(
            cut.len() <= MAX_EVENT_NOTE && cut.ends_with("[cut by the host]"),
            "{}",
            cut.len()
        );
        assert_eq!(cut_message("short", 10), "short");
    }

    #[test]
    fn reading_secrets_and_privileged_kinds_needs_a_grant_at_load() {
        let p = Policy::default();
        let secret = vec![SECRET.to_string()];
        let err = Grants::Declared.check_reads(&p, &secret).unwrap_err();
        assert!(
            err.starts_with("reads kind v1/Secret, which is not granted"),
            "{err}"
        );
        assert!(Grants::Declared.check_reads(&p, &["v1/Pod".into()]).is_ok());
        let err = Grants::Declared
            .check_reads(&p, &["coordination.k8s.io/v1/Lease".into()])
            .unwrap_err();
        assert!(err.contains("Lease"), "{err}");
        let explicit = Grants::Kinds(["v1/ConfigMap".to_string()].into());
        let err = explicit
            .check_reads(&p, &["apps/v1/StatefulSet".into()])
            .unwrap_err();
        assert!(err.contains("apps/v1/StatefulSet"), "{err}");
        assert!(Grants::Kinds([SECRET.to_string()].into()).reads_secrets());
        assert!(!Grants::Declared.reads_secrets());
    }

    fn check_with(
        policy: &Policy,
        grants: &Grants,
        declared: &[&str],
        nesting: u32,
        objects: &[Value],
    ) -> Result<Vec<Checked>, Violation> {
        let declared: Vec<String> = declared.iter().map(|s| s.to_string()).collect();
        let who = Subject {
            plugin: "p",
            declared: &declared,
            grants,
            pods: &PodGrants::default(),
            namespace: Some("db"),
            inherited: &[],
            family: &Family::default(),
            nesting,
        };
        let texts: Vec<String> = objects.iter().map(Value::to_string).collect();
        policy.check_desired(who, &texts)
    }

    #[test]
    fn events_of_either_group_need_a_grant_by_name() {
        for kind in ["v1/Event", "events.k8s.io/v1/Event"] {
            let (api_version, k) = kind.rsplit_once('/').unwrap();
            let obj = json!({"apiVersion": api_version, "kind": k, "metadata": {"name": "e"}});
            let err = check_as(&Grants::Declared, &[kind], obj.clone()).unwrap_err();
            assert_eq!(err.rule, Rule::PrivilegedKind, "{kind}: {err}");
            let granted = Grants::Kinds([kind.to_string()].into());
            assert!(check_as(&granted, &[kind], obj).is_ok(), "{kind}");
        }
        let capacity = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
            "metadata": {"name": "c"}, "storageClassName": "fast"});
        let err = check_as(
            &Grants::Declared,
            &["storage.k8s.io/v1/CSIStorageCapacity"],
            capacity,
        )
        .unwrap_err();
        assert_eq!(err.rule, Rule::PrivilegedKind, "{err}");
    }

    #[test]
    fn a_list_or_another_spelling_of_a_privileged_kind_is_refused_even_when_declared() {
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "x"}, "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}});
        let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {"name": "l"}, "items": [binding]});
        let err = check_as(&Grants::Declared, &["v1/List"], list).unwrap_err();
        assert_eq!(
            (err.rule, err.field.as_str()),
            (Rule::InvalidObject, "kind")
        );
        let upper = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ROLEBINDING",
            "metadata": {"name": "x"}});
        let err = check_as(
            &Grants::Declared,
            &["rbac.authorization.k8s.io/v1/ROLEBINDING"],
            upper,
        )
        .unwrap_err();
        assert_eq!(err.rule, Rule::InvalidObject, "{err}");
        assert!(err.why.contains("serves RoleBinding"), "{err}");
        assert!(is_privileged("rbac.authorization.k8s.io/v1/ROLEBINDING"));
    }

    #[test]
    fn children_of_a_parent_kind_need_a_grant_and_nest_only_so_deep() {
        let mut policy = Policy::default();
        policy.add_parent_kind("samples.windlass.dev/v1alpha1/SampleDB");
        let kind = "samples.windlass.dev/v1alpha1/SampleDB";
        let child = json!({"apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB",
            "metadata": {"name": "child", "annotations": {NESTING_ANNOTATION: "0"}}});
        let err = check_with(&policy, &Grants::Declared, &[kind], 0, &[child.clone()]).unwrap_err();
        assert_eq!(err.rule, Rule::ParentKind, "{err}");
        // Another version of the same group and kind is the same kind.
        let v2 = json!({"apiVersion": "samples.windlass.dev/v2", "kind": "SampleDB", "metadata": {"name": "c"}});
        let err = check_with(
            &policy,
            &Grants::Declared,
            &["samples.windlass.dev/v2/SampleDB"],
            0,
            &[v2],
        )
        .unwrap_err();
        assert_eq!(err.rule, Rule::ParentKind, "{err}");

        let granted = Grants::Kinds([kind.to_string()].into());
        let out = check_with(&policy, &granted, &[kind], 0, &[child.clone()]).unwrap();
        assert_eq!(
            out[0].object["metadata"]["annotations"][NESTING_ANNOTATION], "1",
            "the host counts the depth, whatever the plugin wrote"
        );
        assert_eq!(nesting_of(&out[0].object), 1);
        assert!(check_with(&policy, &granted, &[kind], 1, &[child.clone()]).is_ok());
        // Passed on unchanged by a later plugin, as the earlier one wrote it: stamped again.
        let declared: Vec<String> = vec![];
        let inherited = [child.clone()];
        let later = Subject {
            plugin: "later",
            declared: &declared,
            grants: &Grants::Declared,
            pods: &PodGrants::default(),
            namespace: Some("db"),
            inherited: &inherited,
            family: &Family::default(),
            nesting: 0,
        };
        let out = policy.check_desired(later, &[child.to_string()]).unwrap();
        assert_eq!(
            out[0].object["metadata"]["annotations"][NESTING_ANNOTATION],
            "1"
        );
        let deep = Subject {
            nesting: 2,
            ..later
        };
        assert_eq!(
            policy
                .check_desired(deep, &[child.to_string()])
                .unwrap_err()
                .rule,
            Rule::ParentKind
        );
        let err = check_with(&policy, &granted, &[kind], 2, &[child]).unwrap_err();
        assert_eq!(err.rule, Rule::ParentKind);
        assert!(err.why.contains("already 2 deep"), "{err}");
    }

    #[test]
    fn the_pods_of_a_plugins_objects_together_are_bounded_too() {
        let sts = |name: &str, replicas: u32| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
                "spec": {"replicas": replicas}})
        };
        let policy = Policy::default();
        let kinds = ["apps/v1/StatefulSet"];
        assert!(
            check_with(
                &policy,
                &Grants::Declared,
                &kinds,
                0,
                &[sts("a", 60), sts("b", 40)]
            )
            .is_ok()
        );
        let err = check_with(
            &policy,
            &Grants::Declared,
            &kinds,
            0,
            &[sts("a", 60), sts("b", 41)],
        )
        .unwrap_err();
        assert_eq!(err.rule, Rule::Amplification);
        assert_eq!(err.object, "desired[1] apps/v1/StatefulSet db/b");
        assert!(err.why.contains("101 Pods at once"), "{err}");
        let err = check_with(
            &policy,
            &Grants::Declared,
            &kinds,
            0,
            &[sts("a", 1_000_000)],
        )
        .unwrap_err();
        assert_eq!(
            (err.rule, err.field.as_str()),
            (Rule::Amplification, "spec.replicas")
        );
    }
}
