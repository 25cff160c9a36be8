//! Pod Security Standards, and the Windlass rules on identity and placement, for the pod specs
//! inside the objects a plugin produces.
//!
//! # Guarantees
//! Every pod spec that [`pod_specs`] finds (in a Pod, a PodTemplate, or the template of a
//! Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController, Job or CronJob) meets
//! the granted [`Level`] of the
//! [Pod Security Standards](https://kubernetes.io/docs/concepts/security/pod-security-standards/),
//! over `containers`, `initContainers` and `ephemeralContainers` alike. At every level,
//! `privileged` included, the pod runs as `default` or a ServiceAccount granted by name, never
//! as the host's own; it is not bound to a node by `nodeName`; and it gets no ServiceAccount
//! token (`automountServiceAccountToken: false`, no projected token) unless granted one. Below
//! `privileged`, it tolerates neither every taint nor the control plane's and takes no
//! `system-*` priority class. A spec that is set but not an object is refused. The first refused field comes back as a
//! [`PodViolation`]: its JSON path, the check (the word upstream uses) and what to change.
//!
//! # Why
//! Pod specs are where a namespace-level permission becomes a node-level one: a plugin that may
//! create a Deployment could otherwise start a root shell on every node. The cluster's own Pod
//! Security Admission may be off, or looser than what one plugin is granted, so the host checks
//! before it applies anything. The Windlass rules close what the Standards leave open: a token
//! carries the RBAC of its ServiceAccount (the host's can do what every plugin can), and
//! `nodeName` bypasses the scheduler, its taints and its admission checks.
//!
//! # Assumptions
//! The checks follow upstream's `k8s.io/pod-security-admission/policy` but never relax:
//! `os.name: windows` and `hostUsers: false` pods are checked like any other, `image` volumes
//! are not in the restricted allow-list and the sysctl allow-list is v1.29's. Values of the
//! wrong JSON type are read as unset: the API server refuses them at apply, so they cannot hide
//! a setting.

use std::str::FromStr;

use serde_json::{Map, Value};

type Object = Map<String, Value>;

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub enum Level {
    /// No Standards checks; the Windlass rules still apply.
    Privileged,
    /// Known privilege escalations refused.
    Baseline,
    /// Current pod hardening best practice.
    #[default]
    Restricted,
}

impl Level {
    /// The name Kubernetes uses in `pod-security.kubernetes.io/*` labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

impl FromStr for Level {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "privileged" => Ok(Self::Privileged),
            "baseline" => Ok(Self::Baseline),
            "restricted" => Ok(Self::Restricted),
            other => Err(format!(
                "unknown pod security level {other:?}: expected privileged, baseline or restricted"
            )),
        }
    }
}

/// What a WasmPlugin grants the pods its plugin produces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodGrants {
    pub level: Level,
    /// ServiceAccount names pods may run as (besides leaving it unset / "default"). In a name,
    /// [`PARENT`] stands for the name of the parent being reconciled: `{parent}-chaos` lets the
    /// pods made for the parent `orders` run as `orders-chaos`, and no other parent's.
    pub service_accounts: Vec<String>,
    /// Whether pods may mount a ServiceAccount token (else automountServiceAccountToken must be
    /// false explicitly in the pod spec).
    pub automount_token: bool,
    /// Pods one workload may ask for, and the plugin's objects together
    /// ([`crate::amplification`]); `None`: [`crate::amplification::DEFAULT_MAX_PODS`].
    pub max_pods: Option<u32>,
}

/// In a granted ServiceAccount name, the name of the parent being reconciled.
pub const PARENT: &str = "{parent}";

impl PodGrants {
    /// [`PodGrants::max_pods`], or the default.
    pub fn max_pods(&self) -> u32 {
        self.max_pods
            .unwrap_or(crate::amplification::DEFAULT_MAX_PODS)
    }

    /// The grants for one parent: [`PARENT`] in a ServiceAccount name replaced by its name.
    pub fn for_parent(&self, parent: &str) -> std::borrow::Cow<'_, PodGrants> {
        if !self.service_accounts.iter().any(|a| a.contains(PARENT)) {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(PodGrants {
            service_accounts: self
                .service_accounts
                .iter()
                .map(|a| a.replace(PARENT, parent))
                .collect(),
            ..self.clone()
        })
    }
}

/// The host's own ServiceAccount, never allowed to a plugin's pods, whatever is granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAccount {
    pub namespace: String,
    pub name: String,
}

/// One refused field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why} ({rule})")]
pub struct PodViolation {
    /// JSON path of the offending field inside the object, e.g.
    /// `spec.template.spec.containers[0].securityContext.privileged`.
    pub field: String,
    /// The check, one stable lowerCamel word as upstream names it (`privileged`, `runAsNonRoot`,
    /// …) or a Windlass rule (`serviceAccount`, `hostServiceAccount`, `nodeName`,
    /// `automountServiceAccountToken`, `tolerations`, `priorityClassName`); `podSpec` when the
    /// spec is not an object.
    pub rule: &'static str,
    /// A sentence a user can act on: what is set, what the level allows.
    pub why: String,
}

/// Capabilities a baseline container may add: the container runtimes' default set.
#[rustfmt::skip]
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
];

/// Sysctls namespaced to the pod, so safe at baseline.
#[rustfmt::skip]
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types a container may run as; `""` keeps the runtime's default.
#[rustfmt::skip]
const SELINUX_TYPES: &[&str] =
    &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

/// Volume sources a restricted pod may use: none reaches the node or storage the pod was not
/// given through the API.
#[rustfmt::skip]
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
];

/// The deprecated per-container AppArmor annotation, still honoured by older kubelets.
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Where a probe or lifecycle hook may name a host for the kubelet to connect to.
#[rustfmt::skip]
const PROBE_HOSTS: &[&str] = &[
    "livenessProbe", "readinessProbe", "startupProbe", "lifecycle.postStart", "lifecycle.preStop",
];

const TRUE: Value = Value::Bool(true);
const FALSE: Value = Value::Bool(false);

/// A Pod Security Standards check, named as upstream's check IDs are (camelCase): the
/// `rule` of a [`PodViolation`]. [`CHECKS`] says of each its level, where it looks and what it
/// wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// `privileged`.
    Privileged,
    /// `hostNamespaces`.
    HostNamespaces,
    /// `hostPathVolumes`.
    HostPathVolumes,
    /// `hostPorts`.
    HostPorts,
    /// `hostProbesAndHostLifecycle`.
    HostProbesAndHostLifecycle,
    /// `capabilities`.
    Capabilities,
    /// `capabilitiesRestricted`.
    CapabilitiesRestricted,
    /// `seccompProfile`.
    SeccompProfile,
    /// `appArmorProfile`.
    AppArmorProfile,
    /// `seLinuxOptions`.
    SeLinuxOptions,
    /// `procMount`.
    ProcMount,
    /// `sysctls`.
    Sysctls,
    /// `windowsHostProcess`.
    WindowsHostProcess,
    /// `restrictedVolumes`.
    RestrictedVolumes,
    /// `allowPrivilegeEscalation`.
    AllowPrivilegeEscalation,
    /// `runAsNonRoot`.
    RunAsNonRoot,
    /// `runAsUser`.
    RunAsUser,
}

/// What the host says of one [`Check`].
#[derive(Debug)]
pub struct CheckInfo {
    /// The check.
    pub check: Check,
    /// Its name, upstream's.
    pub name: &'static str,
    /// The lowest level that runs it (a baseline check runs at restricted too).
    pub level: Level,
    /// Where it looks.
    pub scope: &'static str,
    /// What the level wants, as the refusal says it; `{}` stands for [`CheckInfo::list`].
    pub wants: &'static str,
    /// The values it allows, where it names them.
    pub list: &'static [&'static str],
    /// What the restricted level wants instead, where it wants more.
    pub restricted: Option<&'static str>,
}

/// SELinux types a container may name (besides leaving it unset).
#[rustfmt::skip]
const SELINUX_NAMED_TYPES: &[&str] =
    &["container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

const fn info(
    check: Check,
    name: &'static str,
    level: Level,
    scope: &'static str,
    wants: &'static str,
) -> CheckInfo {
    CheckInfo {
        check,
        name,
        level,
        scope,
        wants,
        list: &[],
        restricted: None,
    }
}

/// Every Standards check, in the order of [`Check`]: the table docs/SECURITY.md shows
/// (`the_security_docs_show_the_checks_table`).
pub const CHECKS: &[CheckInfo] = &[
    info(
        Check::Privileged,
        "privileged",
        Level::Baseline,
        "container",
        "does not allow privileged containers",
    ),
    info(
        Check::HostNamespaces,
        "hostNamespaces",
        Level::Baseline,
        "pod",
        "does not allow the node's network, PID or IPC namespace",
    ),
    info(
        Check::HostPathVolumes,
        "hostPathVolumes",
        Level::Baseline,
        "pod volumes",
        "does not allow hostPath volumes",
    ),
    info(
        Check::HostPorts,
        "hostPorts",
        Level::Baseline,
        "container",
        "does not allow host ports",
    ),
    info(
        Check::HostProbesAndHostLifecycle,
        "hostProbesAndHostLifecycle",
        Level::Baseline,
        "container probes and hooks",
        "does not allow probes or hooks to name a host",
    ),
    CheckInfo {
        list: BASELINE_CAPABILITIES,
        ..info(
            Check::Capabilities,
            "capabilities",
            Level::Baseline,
            "container",
            "allows adding only {}",
        )
    },
    info(
        Check::CapabilitiesRestricted,
        "capabilitiesRestricted",
        Level::Restricted,
        "container",
        "requires dropping ALL and adding only NET_BIND_SERVICE",
    ),
    CheckInfo {
        restricted: Some(
            "requires a RuntimeDefault or Localhost seccompProfile on the pod or container",
        ),
        ..info(
            Check::SeccompProfile,
            "seccompProfile",
            Level::Baseline,
            "pod or container",
            "allows only a RuntimeDefault or Localhost seccompProfile",
        )
    },
    info(
        Check::AppArmorProfile,
        "appArmorProfile",
        Level::Baseline,
        "pod or container, and pod annotations",
        "allows only a RuntimeDefault or Localhost AppArmor profile",
    ),
    CheckInfo {
        list: SELINUX_NAMED_TYPES,
        ..info(
            Check::SeLinuxOptions,
            "seLinuxOptions",
            Level::Baseline,
            "pod or container",
            "allows no SELinux user or role and only the types {}",
        )
    },
    info(
        Check::ProcMount,
        "procMount",
        Level::Baseline,
        "container",
        "allows only the Default /proc mount",
    ),
    CheckInfo {
        list: SAFE_SYSCTLS,
        ..info(
            Check::Sysctls,
            "sysctls",
            Level::Baseline,
            "pod",
            "allows only the sysctls {}",
        )
    },
    info(
        Check::WindowsHostProcess,
        "windowsHostProcess",
        Level::Baseline,
        "pod or container",
        "does not allow Windows HostProcess containers",
    ),
    CheckInfo {
        list: RESTRICTED_VOLUMES,
        ..info(
            Check::RestrictedVolumes,
            "restrictedVolumes",
            Level::Restricted,
            "pod volumes",
            "allows only the volume types {}",
        )
    },
    info(
        Check::AllowPrivilegeEscalation,
        "allowPrivilegeEscalation",
        Level::Restricted,
        "container",
        "requires allowPrivilegeEscalation false",
    ),
    info(
        Check::RunAsNonRoot,
        "runAsNonRoot",
        Level::Restricted,
        "pod or container",
        "requires runAsNonRoot true on the pod or every container",
    ),
    info(
        Check::RunAsUser,
        "runAsUser",
        Level::Restricted,
        "pod or container",
        "does not allow running as user 0 (root)",
    ),
];

impl Check {
    /// What the host says of this check.
    pub fn info(self) -> &'static CheckInfo {
        &CHECKS[self as usize]
    }

    /// Its name, upstream's.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// What `level` wants of the field, for [`PodViolation::why`].
    fn wants(self, level: Level) -> String {
        let info = self.info();
        let text = match info.restricted {
            Some(restricted) if level == Level::Restricted => restricted,
            _ => info.wants,
        };
        text.replace("{}", &info.list.join(", "))
    }
}

/// The path of the pod spec inside an object of this `group/version/Kind`, any version.
fn spec_prefix(kind: &str) -> Option<&'static str> {
    let key = crate::KindKey::parse(kind)?;
    Some(match (key.group, key.kind) {
        ("", "Pod") => "spec",
        ("", "PodTemplate") => "template.spec",
        ("", "ReplicationController")
        | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job") => "spec.template.spec",
        ("batch", "CronJob") => "spec.jobTemplate.spec.template.spec",
        _ => return None,
    })
}

/// The pod specs inside an object of kind `kind` (`group/version/Kind`, core as `v1/Pod`), with
/// the JSON path prefix of each: `v1/Pod` → `spec`; apps Deployment, StatefulSet, DaemonSet,
/// ReplicaSet, v1 ReplicationController, batch Job → `spec.template.spec`; batch CronJob →
/// `spec.jobTemplate.spec.template.spec`; `v1/PodTemplate` → `template.spec`. Other kinds:
/// empty.
///
/// A spec that is unset or `null` is not returned: nothing in it could run, and the API server
/// refuses a Pod, or a new workload, without one.
pub fn pod_specs<'a>(kind: &str, object: &'a Value) -> Vec<(String, &'a Value)> {
    let spec = |prefix: &str| Some((prefix.to_string(), lookup(object, prefix)?));
    spec_prefix(kind).and_then(spec).into_iter().collect()
}

/// Checks every pod spec of `object` (namespace `namespace`) against `grants`; returns the first
/// violation. The Windlass rules come first, then the pod-level checks, then each container's.
///
/// # Errors
/// A [`PodViolation`] for the first refused field. The privileged level skips the Standards
/// checks but not the Windlass rules (`serviceAccount`, `hostServiceAccount`, `nodeName`,
/// `automountServiceAccountToken`).
pub fn check_object(
    kind: &str,
    namespace: &str,
    object: &Value,
    grants: &PodGrants,
    host: Option<&HostAccount>,
) -> Result<(), PodViolation> {
    let level = grants.level;
    let deny = |scope: &Scope<'_>, (rel, rule, value): Finding<'_>| {
        let what = rel.strip_prefix("securityContext.").unwrap_or(&rel);
        let why = format!(
            "{what} is {}; level {} {}",
            shown(value),
            level.as_str(),
            rule.wants(level)
        );
        Err(refuse(format!("{}.{rel}", scope.path), rule.name(), why))
    };
    for (prefix, spec) in pod_specs(kind, object) {
        if !spec.is_object() {
            let why = format!("{prefix} is not an object; a pod spec must be one");
            return Err(refuse(prefix, "podSpec", why));
        }
        let pod = Scope::new(prefix, spec);
        windlass(&pod, namespace, grants, host)?;
        if level == Level::Privileged {
            continue;
        }
        let restricted = level == Level::Restricted;
        let found = baseline_pod(&pod)
            .or_else(|| baseline_context(&pod))
            .or_else(|| restricted.then(|| restricted_pod(&pod)).flatten());
        if let Some(finding) = found {
            return deny(&pod, finding);
        }
        for c in containers(&pod) {
            let found = baseline_context(&c)
                .or_else(|| baseline_container(&c))
                .or_else(|| restricted.then(|| restricted_container(&c, &pod)).flatten());
            if let Some(finding) = found {
                return deny(&c, finding);
            }
        }
        // Pod annotations live beside the spec: `spec` → `metadata`, `….spec` → `….metadata`.
        let meta_path = format!(
            "{}metadata",
            pod.path.strip_suffix("spec").unwrap_or_default()
        );
        if let Some(meta) = lookup(object, &meta_path)
            && let Some(finding) = apparmor_annotations(meta)
        {
            return deny(&Scope::new(meta_path, meta), finding);
        }
    }
    Ok(())
}

/// The pod spec or one of its containers: fields, one of them a `securityContext`.
struct Scope<'a> {
    path: String,
    fields: &'a Value,
}

impl<'a> Scope<'a> {
    fn new(path: String, fields: &'a Value) -> Self {
        Self { path, fields }
    }

    /// `securityContext.<key>`, unless unset or null.
    fn sc(&self, key: &str) -> Option<&'a Value> {
        at(self.fields.get("securityContext"), key)
    }

    /// The objects in the list `key`, with their indices.
    fn list(&self, key: &str) -> impl Iterator<Item = (usize, &'a Object)> + use<'a> {
        items(self.fields.get(key)).filter_map(|(i, v)| Some((i, v.as_object()?)))
    }
}

/// The init, regular and ephemeral containers of a pod, in that order.
fn containers<'a>(pod: &Scope<'a>) -> impl Iterator<Item = Scope<'a>> {
    let lists = ["initContainers", "containers", "ephemeralContainers"];
    lists.into_iter().flat_map(|list| {
        let path = format!("{}.{list}", pod.path);
        let entries = items(pod.fields.get(list)).filter(|(_, c)| c.is_object());
        entries.map(move |(i, c)| Scope::new(format!("{path}[{i}]"), c))
    })
}

/// A failed Standards check: the field below its scope, the check, and the value found there
/// (`None`: unset).
type Finding<'a> = (String, Check, Option<&'a Value>);
type Found<'a> = Option<Finding<'a>>;

fn found<'a>(rel: impl Into<String>, rule: Check, v: Option<&'a Value>) -> Found<'a> {
    Some((rel.into(), rule, v))
}

fn refuse(field: String, rule: &'static str, why: String) -> PodViolation {
    PodViolation { field, rule, why }
}

/// `serviceAccount`, `hostServiceAccount`, `nodeName`, `automountServiceAccountToken`.
fn windlass(
    pod: &Scope<'_>,
    namespace: &str,
    grants: &PodGrants,
    host: Option<&HostAccount>,
) -> Result<(), PodViolation> {
    let spec = pod.fields;
    // The API server falls back to the deprecated `serviceAccount` when `serviceAccountName`
    // is empty; check both rather than guess. Unset is `default`, which is the host's own
    // account when the host runs as `default`.
    let mut accounts: Vec<(&str, &str)> = ["serviceAccountName", "serviceAccount"]
        .into_iter()
        .filter_map(|key| Some((key, spec.get(key)?.as_str()?)))
        .filter(|(_, name)| !name.is_empty())
        .collect();
    if accounts.is_empty() {
        accounts.push(("serviceAccountName", "default"));
    }
    for (key, name) in accounts {
        let field = format!("{}.{key}", pod.path);
        if host.is_some_and(|h| h.name == name && h.namespace == namespace) {
            let why = format!(
                "{key} {name:?} is the Windlass host's own ServiceAccount in namespace \
                 {namespace:?}; no plugin's pods may run as it, whatever is granted"
            );
            return Err(refuse(field, "hostServiceAccount", why));
        }
        if name != "default" && !grants.service_accounts.iter().any(|g| g == name) {
            let why = format!(
                "{key} is {name:?}; pods may run as \"default\" or a ServiceAccount the \
                 WasmPlugin grants by name (granted: {:?})",
                grants.service_accounts
            );
            return Err(refuse(field, "serviceAccount", why));
        }
    }
    if let Some(node) = present(spec.get("nodeName")).filter(|n| n.as_str() != Some("")) {
        let why = format!("nodeName is {node}; the scheduler places pods, a plugin may not");
        return Err(refuse(format!("{}.nodeName", pod.path), "nodeName", why));
    }
    if grants.level != Level::Privileged {
        placement(pod)?;
        git_repo(pod)?;
    }
    if grants.automount_token {
        return Ok(());
    }
    let rule = "automountServiceAccountToken";
    let automount = spec.get(rule);
    if automount != Some(&FALSE) {
        let why = format!(
            "automountServiceAccountToken is {}; must be false: pods get no ServiceAccount token \
             unless granted",
            shown(automount)
        );
        return Err(refuse(format!("{}.{rule}", pod.path), rule, why));
    }
    // A projected token is a token too, mounted whatever automountServiceAccountToken says.
    for (i, volume) in pod.list("volumes") {
        for (j, source) in items(at(volume.get("projected"), "sources")) {
            if present(source.get("serviceAccountToken")).is_some() {
                let rel = format!("volumes[{i}].projected.sources[{j}].serviceAccountToken");
                let why = "a projected volume mounts a ServiceAccount token; pods get no \
                           ServiceAccount token unless granted";
                return Err(refuse(format!("{}.{rel}", pod.path), rule, why.into()));
            }
        }
    }
    Ok(())
}

/// Taints keep pods off nodes for a reason: below `privileged`, a pod may not tolerate every
/// taint (an empty key with `Exists`) nor the control plane's, and may not take the
/// `system-node-critical` or `system-cluster-critical` priority, which evicts other pods.
fn placement(pod: &Scope<'_>) -> Result<(), PodViolation> {
    const CONTROL_PLANE: &[&str] = &[
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
    ];
    for (i, toleration) in pod.list("tolerations") {
        let key = toleration.get("key").and_then(Value::as_str).unwrap_or("");
        let exists = toleration.get("operator").and_then(Value::as_str) == Some("Exists");
        let why = if key.is_empty() && exists {
            "tolerates every taint (no key, operator Exists)".to_string()
        } else if CONTROL_PLANE.contains(&key) {
            format!("tolerates {key}, the control plane's taint")
        } else {
            continue;
        };
        let why = format!("{why}; only the privileged level may place pods past such taints");
        let field = format!("{}.tolerations[{i}]", pod.path);
        return Err(refuse(field, "tolerations", why));
    }
    if let Some(class) = pod
        .fields
        .get("priorityClassName")
        .and_then(Value::as_str)
        .filter(|c| c.starts_with("system-"))
    {
        let why = format!(
            "priorityClassName is {class:?}, a system priority that preempts other pods; only \
             the privileged level may use it"
        );
        let field = format!("{}.priorityClassName", pod.path);
        return Err(refuse(field, "priorityClassName", why));
    }
    Ok(())
}

/// Below `privileged`, no `gitRepo` volume: the kubelet runs `git` on the node for it, and a
/// repository can make that `git` run hooks as root (CVE-2024-10220; CVE-2025-1767 is fixed in
/// no version). Upstream's baseline still admits it; the host does not.
fn git_repo(pod: &Scope<'_>) -> Result<(), PodViolation> {
    for (i, volume) in pod.list("volumes") {
        if present(volume.get("gitRepo")).is_some() {
            let why = "a gitRepo volume runs git on the node as root for the pod \
                       (CVE-2024-10220, CVE-2025-1767); only the privileged level may use it";
            let field = format!("{}.volumes[{i}].gitRepo", pod.path);
            return Err(refuse(field, "gitRepo", why.into()));
        }
    }
    Ok(())
}

/// Baseline checks on pod-level fields.
fn baseline_pod<'a>(pod: &Scope<'a>) -> Found<'a> {
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        let shared = pod.fields.get(key);
        if shared == Some(&TRUE) {
            return found(key, Check::HostNamespaces, shared);
        }
    }
    for (i, volume) in pod.list("volumes") {
        if let Some(path) = present(volume.get("hostPath")) {
            return found(
                format!("volumes[{i}].hostPath"),
                Check::HostPathVolumes,
                Some(path),
            );
        }
    }
    for (i, sysctl) in items(pod.sc("sysctls")) {
        let name = sysctl.get("name");
        if !one_of(name, SAFE_SYSCTLS) {
            return found(
                format!("securityContext.sysctls[{i}].name"),
                Check::Sysctls,
                name,
            );
        }
    }
    None
}

/// Baseline checks on a `securityContext`, the pod's or a container's.
fn baseline_context<'a>(s: &Scope<'a>) -> Found<'a> {
    // Each check is named after its field.
    for check in [Check::SeccompProfile, Check::AppArmorProfile] {
        let field = check.name();
        let kind = obj(s.sc(field)).map(|profile| profile.get("type"));
        if let Some(kind) = kind.filter(|k| !one_of(*k, &["RuntimeDefault", "Localhost"])) {
            return found(format!("securityContext.{field}.type"), check, kind);
        }
    }
    let selinux = s.sc("seLinuxOptions");
    let kind = at(selinux, "type");
    if kind.is_some() && !one_of(kind, SELINUX_TYPES) {
        return found(
            "securityContext.seLinuxOptions.type",
            Check::SeLinuxOptions,
            kind,
        );
    }
    for key in ["user", "role"] {
        let value = at(selinux, key);
        if value.is_some_and(|v| v.as_str() != Some("")) {
            let rel = format!("securityContext.seLinuxOptions.{key}");
            return found(rel, Check::SeLinuxOptions, value);
        }
    }
    let host_process = at(s.sc("windowsOptions"), "hostProcess");
    if host_process == Some(&TRUE) {
        let rel = "securityContext.windowsOptions.hostProcess";
        return found(rel, Check::WindowsHostProcess, host_process);
    }
    None
}

/// Baseline checks on a container's own fields.
fn baseline_container<'a>(c: &Scope<'a>) -> Found<'a> {
    let privileged = c.sc("privileged");
    if privileged == Some(&TRUE) {
        return found("securityContext.privileged", Check::Privileged, privileged);
    }
    for (i, cap) in items(at(c.sc("capabilities"), "add")) {
        if !one_of(Some(cap), BASELINE_CAPABILITIES) {
            let rel = format!("securityContext.capabilities.add[{i}]");
            return found(rel, Check::Capabilities, Some(cap));
        }
    }
    for (i, port) in items(c.fields.get("ports")) {
        let host_port = port.get("hostPort");
        if host_port.and_then(Value::as_f64).is_some_and(|p| p != 0.0) {
            return found(format!("ports[{i}].hostPort"), Check::HostPorts, host_port);
        }
    }
    let mount = c.sc("procMount");
    if mount.is_some() && !one_of(mount, &["Default"]) {
        return found("securityContext.procMount", Check::ProcMount, mount);
    }
    // The kubelet would connect to that host, from the node's network.
    for handler in PROBE_HOSTS {
        for kind in ["httpGet", "tcpSocket"] {
            let rel = format!("{handler}.{kind}.host");
            let host = lookup(c.fields, &rel);
            if host.is_some_and(|h| h.as_str() != Some("")) {
                return found(rel, Check::HostProbesAndHostLifecycle, host);
            }
        }
    }
    None
}

/// The deprecated AppArmor annotations on a pod's metadata.
fn apparmor_annotations(meta: &Value) -> Found<'_> {
    for (key, value) in obj(meta.get("annotations")).into_iter().flatten() {
        let profile = value.as_str();
        let allowed = profile
            .is_some_and(|v| v.is_empty() || v == "runtime/default" || v.starts_with("localhost/"));
        if key.starts_with(APPARMOR_ANNOTATION) && !allowed {
            return found(
                format!("annotations[{key}]"),
                Check::AppArmorProfile,
                Some(value),
            );
        }
    }
    None
}

/// Restricted checks on pod-level fields.
fn restricted_pod<'a>(pod: &Scope<'a>) -> Found<'a> {
    for (i, volume) in pod.list("volumes") {
        let source = volume.iter().find(|(kind, v)| {
            *kind != "name" && !v.is_null() && !RESTRICTED_VOLUMES.contains(&kind.as_str())
        });
        if let Some((kind, v)) = source {
            return found(
                format!("volumes[{i}].{kind}"),
                Check::RestrictedVolumes,
                Some(v),
            );
        }
    }
    run_as_root(pod)
}

/// Restricted checks on a container; `pod` supplies what the container leaves unset.
fn restricted_container<'a>(c: &Scope<'a>, pod: &Scope<'a>) -> Found<'a> {
    let escalation = c.sc("allowPrivilegeEscalation");
    if escalation != Some(&FALSE) {
        let rel = "securityContext.allowPrivilegeEscalation";
        return found(rel, Check::AllowPrivilegeEscalation, escalation);
    }
    if let Some(finding) = run_as_root(c) {
        return Some(finding);
    }
    let nonroot = c.sc("runAsNonRoot");
    if nonroot != Some(&TRUE) && pod.sc("runAsNonRoot") != Some(&TRUE) {
        return found("securityContext.runAsNonRoot", Check::RunAsNonRoot, nonroot);
    }
    if obj(c.sc("seccompProfile")).is_none() && obj(pod.sc("seccompProfile")).is_none() {
        return found(
            "securityContext.seccompProfile",
            Check::SeccompProfile,
            None,
        );
    }
    let caps = c.sc("capabilities");
    let drop = at(caps, "drop");
    if !items(drop).any(|(_, cap)| cap.as_str() == Some("ALL")) {
        let rel = "securityContext.capabilities.drop";
        return found(rel, Check::CapabilitiesRestricted, drop);
    }
    for (i, cap) in items(at(caps, "add")) {
        if !one_of(Some(cap), &["NET_BIND_SERVICE"]) {
            let rel = format!("securityContext.capabilities.add[{i}]");
            return found(rel, Check::CapabilitiesRestricted, Some(cap));
        }
    }
    None
}

/// `runAsNonRoot: false` or `runAsUser: 0`, on the pod or a container.
fn run_as_root<'a>(s: &Scope<'a>) -> Found<'a> {
    let nonroot = s.sc("runAsNonRoot");
    if nonroot == Some(&FALSE) {
        return found("securityContext.runAsNonRoot", Check::RunAsNonRoot, nonroot);
    }
    // `0.0` is user 0 to the API server too.
    let user = s.sc("runAsUser");
    if user.is_some_and(|u| u.as_f64() == Some(0.0)) {
        return found("securityContext.runAsUser", Check::RunAsUser, user);
    }
    None
}

/// Whether `value` is a string in `allowed`.
fn one_of(value: Option<&Value>, allowed: &[&str]) -> bool {
    value
        .and_then(Value::as_str)
        .is_some_and(|v| allowed.contains(&v))
}

/// `value` unless it is unset or null (the API server reads `null` as unset).
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

fn obj(value: Option<&Value>) -> Option<&Object> {
    value?.as_object()
}

/// `value.<key>`, unless unset or null.
fn at<'a>(value: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    present(value?.get(key))
}

/// The value at a dotted path of keys, unless unset or null.
fn lookup<'a>(value: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(value, |v, key| at(Some(v), key))
}

/// The elements of a list with their indices; nothing when it is unset or not a list.
fn items(value: Option<&Value>) -> impl Iterator<Item = (usize, &Value)> {
    let list = value.and_then(Value::as_array);
    list.into_iter().flatten().enumerate()
}

/// A value for a message: `unset`, `set` for objects and lists, else its JSON, cut short.
fn shown(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "unset".into(),
        Some(Value::Object(_) | Value::Array(_)) => "set".into(),
        Some(v) => {
            let text = v.to_string();
            match text.char_indices().nth(64) {
                Some((cut, _)) => format!("{}…", &text[..cut]),
                None => text,
            }
        }
    }
}

/// The checks as the table in docs/SECURITY.md shows them.
pub fn checks_table() -> String {
    let mut out =
        String::from("| check | from level | where | the level |\n| --- | --- | --- | --- |\n");
    for c in CHECKS {
        let wants = c.check.wants(c.level);
        let wants = match c.restricted {
            Some(r) if c.level != Level::Restricted => format!("{wants}; restricted {r}"),
            _ => wants,
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {wants} |\n",
            c.name,
            c.level.as_str(),
            c.scope
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_checks_table_is_in_the_order_of_the_checks_and_names_each_once() {
        for (i, c) in CHECKS.iter().enumerate() {
            assert_eq!(c.check as usize, i, "{} is out of place", c.name);
            assert_eq!(c.check.name(), c.name);
            assert!(
                c.level != Level::Privileged,
                "{}: privileged runs no check",
                c.name
            );
            assert_eq!(
                c.wants.contains("{}"),
                !c.list.is_empty(),
                "{}: a list and its place in the text go together",
                c.name
            );
        }
        assert_eq!(SELINUX_NAMED_TYPES, &SELINUX_TYPES[1..]);
    }

    #[test]
    fn the_security_docs_show_the_checks_table() {
        let docs = include_str!("../../../docs/SECURITY.md");
        let table = checks_table();
        assert!(
            docs.contains(&table),
            "docs/SECURITY.md must hold the Pod Security Standards checks as the code has them:\n{table}"
        );
    }

    // Fixtures: a restricted-compliant spec, wrapped in each kind with a pod spec; each test
    // breaks one field and checks the violation.

    fn container(name: &str) -> Value {
        json!({
            "name": name,
            "image": "registry.example/app:1",
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
        })
    }

    fn spec() -> Value {
        json!({
            "automountServiceAccountToken": false,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 999,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container("app")],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        })
    }

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"metadata": {"labels": {"app": "d"}}, "spec": spec}}})
    }

    fn stateful_set(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
            "spec": {"template": {"spec": spec}}})
    }

    fn cron_job(spec: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}})
    }

    /// Appends `item` to the list at `list`.
    fn push(list: &mut Value, item: Value) {
        list.as_array_mut().expect("a list").push(item);
    }

    /// Removes `key` from the object `object`.
    fn remove(object: &mut Value, key: &str) {
        object.as_object_mut().expect("an object").remove(key);
    }

    fn grants(level: Level) -> PodGrants {
        PodGrants {
            level,
            ..PodGrants::default()
        }
    }

    fn host() -> HostAccount {
        HostAccount {
            namespace: "windlass".into(),
            name: "windlass-host".into(),
        }
    }

    /// Checks `object` (its kind read from it) in namespace `ns` with `grants`.
    fn check_in(ns: &str, object: &Value, grants: &PodGrants) -> Result<(), PodViolation> {
        let api = object["apiVersion"].as_str().unwrap_or_default();
        let kind = format!("{api}/{}", object["kind"].as_str().unwrap_or_default());
        check_object(&kind, ns, object, grants, Some(&host()))
    }

    fn check(object: &Value, level: Level) -> Result<(), PodViolation> {
        check_in("apps", object, &grants(level))
    }

    /// The violation `object` gets at `level`, as (rule, field).
    fn refused(object: &Value, level: Level) -> (&'static str, String) {
        let v = check(object, level).expect_err("a violation");
        assert!(!v.why.is_empty());
        (v.rule, v.field)
    }

    const D: &str = "spec.template.spec";
    const CJ: &str = "spec.jobTemplate.spec.template.spec";

    #[test]
    fn a_restricted_compliant_pod_passes_at_every_level_in_every_workload() {
        for object in [
            pod(spec()),
            deployment(spec()),
            stateful_set(spec()),
            cron_job(spec()),
        ] {
            for level in [Level::Restricted, Level::Baseline, Level::Privileged] {
                assert_eq!(check(&object, level), Ok(()), "{level:?} {object}");
            }
        }
    }

    #[test]
    fn pod_specs_are_found_at_each_kinds_prefix_in_any_version() {
        let o = json!({"spec": {"template": {"spec": {"a": 1}}, "jobTemplate": {"spec": {"template": {"spec": {"b": 1}}}}}, "template": {"spec": {"c": 1}}});
        let prefix = |kind| {
            pod_specs(kind, &o)
                .into_iter()
                .map(|(p, _)| p)
                .collect::<Vec<_>>()
        };
        assert_eq!(prefix("v1/Pod"), ["spec"]);
        assert_eq!(prefix("apps/v1beta2/Deployment"), [D]);
        assert_eq!(prefix("v1/ReplicationController"), [D]);
        assert_eq!(prefix("batch/v1/Job"), [D]);
        assert_eq!(prefix("batch/v1beta1/CronJob"), [CJ]);
        assert_eq!(prefix("v1/PodTemplate"), ["template.spec"]);
        assert_eq!(pod_specs("batch/v1/CronJob", &o)[0].1, &json!({"b": 1}));
        for other in [
            "v1/ConfigMap",
            "example.com/v1/Deployment",
            "Pod",
            "a/b/c/Pod",
        ] {
            assert!(prefix(other).is_empty(), "{other}");
        }
    }

    #[test]
    fn a_non_object_spec_is_refused_at_its_prefix_and_a_missing_one_has_nothing_to_check() {
        let mut d = deployment(spec());
        d["spec"]["template"]["spec"] = json!([1]);
        assert_eq!(refused(&d, Level::Privileged), ("podSpec", D.to_string()));
        // The API server refuses a Pod without a spec; there is nothing here that could run.
        let bare = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert_eq!(check(&bare, Level::Restricted), Ok(()));
        assert_eq!(
            check(
                &json!({"apiVersion": "v1", "kind": "ConfigMap"}),
                Level::Restricted
            ),
            Ok(())
        );
    }

    #[test]
    fn non_object_fields_are_read_as_unset_without_panicking() {
        let mut s = spec();
        s["securityContext"] = json!("root");
        s["containers"] = json!([7, {"name": "x", "securityContext": null}]);
        s["volumes"] = json!({"not": "a list"});
        // Only the second entry is a container, and it sets nothing.
        let field = "spec.containers[1].securityContext.allowPrivilegeEscalation".to_string();
        assert_eq!(
            refused(&pod(s.clone()), Level::Restricted),
            ("allowPrivilegeEscalation", field)
        );
        assert_eq!(check(&pod(s), Level::Baseline), Ok(()));
    }

    #[test]
    fn a_privileged_container_is_refused_at_baseline_and_allowed_at_privileged() {
        let mut s = spec();
        s["containers"][0]["securityContext"]["privileged"] = json!(true);
        let v = check(&deployment(s.clone()), Level::Restricted).unwrap_err();
        assert_eq!(
            (v.rule, v.field.as_str()),
            (
                "privileged",
                "spec.template.spec.containers[0].securityContext.privileged"
            )
        );
        assert_eq!(
            v.why,
            "privileged is true; level restricted does not allow privileged containers"
        );
        assert_eq!(
            refused(&deployment(s.clone()), Level::Baseline).0,
            "privileged"
        );
        assert_eq!(check(&deployment(s), Level::Privileged), Ok(()));
    }

    #[test]
    fn host_namespaces_are_refused() {
        for key in ["hostNetwork", "hostPID", "hostIPC"] {
            let mut s = spec();
            s[key] = json!(true);
            assert_eq!(
                refused(&stateful_set(s), Level::Baseline),
                ("hostNamespaces", format!("{D}.{key}"))
            );
        }
    }

    #[test]
    fn baseline_allows_what_restricted_refuses_but_refuses_host_path() {
        let mut s = spec();
        s["securityContext"] = json!({});
        s["containers"][0]["securityContext"] = json!({"capabilities": {"add": ["CHOWN"]}});
        s["volumes"][0] = json!({"name": "n", "nfs": {"server": "s", "path": "/"}});
        assert_eq!(check(&deployment(s.clone()), Level::Baseline), Ok(()));
        assert_eq!(
            refused(&deployment(s.clone()), Level::Restricted),
            ("restrictedVolumes", format!("{D}.volumes[0].nfs"))
        );
        push(
            &mut s["volumes"],
            json!({"name": "root", "hostPath": {"path": "/"}}),
        );
        assert_eq!(
            refused(&deployment(s), Level::Baseline),
            ("hostPathVolumes", format!("{D}.volumes[1].hostPath"))
        );
    }

    #[test]
    fn a_host_port_is_refused_but_zero_is_not() {
        let mut s = spec();
        s["containers"][0]["ports"] =
            json!([{"containerPort": 80, "hostPort": 0}, {"containerPort": 22, "hostPort": 22}]);
        assert_eq!(
            refused(&cron_job(s), Level::Baseline),
            ("hostPorts", format!("{CJ}.containers[0].ports[1].hostPort"))
        );
    }

    #[test]
    fn capabilities_beyond_the_default_set_are_refused_at_baseline() {
        let mut s = spec();
        s["containers"][0]["securityContext"]["capabilities"]["add"] =
            json!(["NET_BIND_SERVICE", "SYS_ADMIN"]);
        let field = "spec.containers[0].securityContext.capabilities.add[1]";
        assert_eq!(
            refused(&pod(s), Level::Baseline),
            ("capabilities", field.to_string())
        );
    }

    #[test]
    fn restricted_capabilities_must_drop_all_and_add_only_net_bind_service() {
        let mut s = spec();
        s["containers"][0]["securityContext"]["capabilities"]["add"] =
            json!(["NET_BIND_SERVICE", "CHOWN"]);
        let add = format!("{D}.containers[0].securityContext.capabilities.add[1]");
        assert_eq!(
            refused(&deployment(s.clone()), Level::Restricted),
            ("capabilitiesRestricted", add)
        );
        s["containers"][0]["securityContext"]["capabilities"] =
            json!({"drop": ["NET_RAW"], "add": ["NET_BIND_SERVICE"]});
        let drop = format!("{D}.containers[0].securityContext.capabilities.drop");
        assert_eq!(
            refused(&deployment(s), Level::Restricted),
            ("capabilitiesRestricted", drop)
        );
    }

    #[test]
    fn unconfined_seccomp_is_refused_at_baseline_on_pod_or_container() {
        let mut s = spec();
        s["containers"][0]["securityContext"]["seccompProfile"] = json!({"type": "Unconfined"});
        let field = format!("{D}.containers[0].securityContext.seccompProfile.type");
        assert_eq!(
            refused(&stateful_set(s.clone()), Level::Baseline),
            ("seccompProfile", field)
        );
        s["securityContext"]["seccompProfile"]["type"] = json!("Unconfined");
        let field = format!("{D}.securityContext.seccompProfile.type");
        assert_eq!(
            refused(&stateful_set(s), Level::Baseline),
            ("seccompProfile", field)
        );
    }

    #[test]
    fn restricted_seccomp_is_required_on_the_pod_or_every_container() {
        let mut s = spec();
        remove(&mut s["securityContext"], "seccompProfile");
        push(&mut s["containers"], container("second"));
        s["containers"][0]["securityContext"]["seccompProfile"] =
            json!({"type": "Localhost", "localhostProfile": "p.json"});
        let field = "spec.containers[1].securityContext.seccompProfile".to_string();
        assert_eq!(
            refused(&pod(s.clone()), Level::Restricted),
            ("seccompProfile", field)
        );
        assert_eq!(check(&pod(s.clone()), Level::Baseline), Ok(()));
        s["containers"][1]["securityContext"]["seccompProfile"] = json!({"type": "RuntimeDefault"});
        assert_eq!(check(&pod(s), Level::Restricted), Ok(()));
    }

    #[test]
    fn an_unconfined_app_armor_profile_or_annotation_is_refused() {
        let mut s = spec();
        s["containers"][0]["securityContext"]["appArmorProfile"] = json!({"type": "Unconfined"});
        let field = format!("{D}.containers[0].securityContext.appArmorProfile.type");
        assert_eq!(
            refused(&deployment(s), Level::Baseline),
            ("appArmorProfile", field)
        );

        let mut d = deployment(spec());
        let key = "container.apparmor.security.beta.kubernetes.io/app";
        d["spec"]["template"]["metadata"]["annotations"] = json!({key: "localhost/mine"});
        assert_eq!(check(&d, Level::Restricted), Ok(()));
        d["spec"]["template"]["metadata"]["annotations"][key] = json!("unconfined");
        let field = format!("spec.template.metadata.annotations[{key}]");
        assert_eq!(refused(&d, Level::Baseline), ("appArmorProfile", field));
        let mut p = pod(spec());
        p["metadata"]["annotations"] = json!({key: "unconfined"});
        assert_eq!(
            refused(&p, Level::Baseline),
            ("appArmorProfile", format!("metadata.annotations[{key}]"))
        );
    }

    #[test]
    fn selinux_options_allow_only_container_types_and_no_user_or_role() {
        let mut s = spec();
        s["securityContext"]["seLinuxOptions"] =
            json!({"type": "container_init_t", "level": "s0:c1"});
        assert_eq!(check(&pod(s.clone()), Level::Restricted), Ok(()));
        s["securityContext"]["seLinuxOptions"]["role"] = json!("sysadm_r");
        let role = "spec.securityContext.seLinuxOptions.role".to_string();
        assert_eq!(
            refused(&pod(s.clone()), Level::Baseline),
            ("seLinuxOptions", role)
        );
        s["containers"][0]["securityContext"]["seLinuxOptions"] = json!({"type": "spc_t"});
        remove(&mut s["securityContext"], "seLinuxOptions");
        let kind = "spec.containers[0].securityContext.seLinuxOptions.type".to_string();
        assert_eq!(refused(&pod(s), Level::Baseline), ("seLinuxOptions", kind));
    }

    #[test]
    fn an_unmasked_proc_mount_is_refused() {
        let mut s = spec();
        s["hostUsers"] = json!(false);
        s["containers"][0]["securityContext"]["procMount"] = json!("Unmasked");
        let field = format!("{CJ}.containers[0].securityContext.procMount");
        assert_eq!(refused(&cron_job(s), Level::Baseline), ("procMount", field));
    }

    #[test]
    fn only_safe_sysctls_are_allowed() {
        let mut s = spec();
        s["securityContext"]["sysctls"] = json!([{"name": "net.ipv4.tcp_syncookies", "value": "1"}, {"name": "kernel.msgmax", "value": "1"}]);
        let field = "spec.securityContext.sysctls[1].name".to_string();
        assert_eq!(refused(&pod(s), Level::Baseline), ("sysctls", field));
    }

    #[test]
    fn a_probe_or_hook_naming_a_host_is_refused() {
        let mut s = spec();
        s["containers"][0]["readinessProbe"] = json!({"httpGet": {"path": "/", "port": 80}});
        s["containers"][0]["lifecycle"] =
            json!({"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 22}}});
        let field = format!("{D}.containers[0].lifecycle.preStop.tcpSocket.host");
        assert_eq!(
            refused(&deployment(s), Level::Baseline),
            ("hostProbesAndHostLifecycle", field)
        );
    }

    #[test]
    fn a_windows_host_process_is_refused() {
        let mut s = spec();
        s["securityContext"]["windowsOptions"] = json!({"hostProcess": true});
        let field = format!("{D}.securityContext.windowsOptions.hostProcess");
        assert_eq!(
            refused(&deployment(s), Level::Baseline),
            ("windowsHostProcess", field)
        );
    }

    #[test]
    fn privilege_escalation_must_be_explicitly_false_at_restricted() {
        let mut s = spec();
        remove(
            &mut s["containers"][0]["securityContext"],
            "allowPrivilegeEscalation",
        );
        let field = format!("{D}.containers[0].securityContext.allowPrivilegeEscalation");
        assert_eq!(
            refused(&stateful_set(s.clone()), Level::Restricted),
            ("allowPrivilegeEscalation", field)
        );
        assert_eq!(check(&stateful_set(s), Level::Baseline), Ok(()));
    }

    #[test]
    fn run_as_non_root_is_needed_on_the_pod_or_every_container_and_false_is_refused() {
        let mut s = spec();
        remove(&mut s["securityContext"], "runAsNonRoot");
        let field = "spec.containers[0].securityContext.runAsNonRoot".to_string();
        assert_eq!(
            refused(&pod(s.clone()), Level::Restricted),
            ("runAsNonRoot", field.clone())
        );
        s["containers"][0]["securityContext"]["runAsNonRoot"] = json!(true);
        assert_eq!(check(&pod(s.clone()), Level::Restricted), Ok(()));
        // A container's false overrides the pod's true.
        s["securityContext"]["runAsNonRoot"] = json!(true);
        s["containers"][0]["securityContext"]["runAsNonRoot"] = json!(false);
        assert_eq!(
            refused(&pod(s.clone()), Level::Restricted),
            ("runAsNonRoot", field)
        );
        s["securityContext"]["runAsNonRoot"] = json!(false);
        let pod_field = "spec.securityContext.runAsNonRoot".to_string();
        assert_eq!(
            refused(&pod(s), Level::Restricted),
            ("runAsNonRoot", pod_field)
        );
    }

    #[test]
    fn run_as_user_zero_is_refused_on_pod_or_container() {
        let mut s = spec();
        s["containers"][0]["securityContext"]["runAsUser"] = json!(0);
        let field = format!("{CJ}.containers[0].securityContext.runAsUser");
        assert_eq!(
            refused(&cron_job(s.clone()), Level::Restricted),
            ("runAsUser", field)
        );
        s["securityContext"]["runAsUser"] = json!(0.0);
        let field = format!("{CJ}.securityContext.runAsUser");
        assert_eq!(
            refused(&cron_job(s), Level::Restricted),
            ("runAsUser", field)
        );
    }

    #[test]
    fn init_and_ephemeral_container_violations_are_found_by_list_and_index() {
        let mut s = spec();
        s["initContainers"] = json!([container("init-0"), container("init-1")]);
        s["initContainers"][1]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        let field = format!("{D}.initContainers[1].securityContext.allowPrivilegeEscalation");
        assert_eq!(
            refused(&deployment(s), Level::Restricted),
            ("allowPrivilegeEscalation", field)
        );

        let mut s = spec();
        s["ephemeralContainers"] = json!([container("debug")]);
        s["ephemeralContainers"][0]["securityContext"]["privileged"] = json!(true);
        let field = "spec.ephemeralContainers[0].securityContext.privileged".to_string();
        assert_eq!(refused(&pod(s), Level::Baseline), ("privileged", field));
    }

    #[test]
    fn a_service_account_must_be_default_or_granted() {
        let mut s = spec();
        s["serviceAccountName"] = json!("admin");
        let field = format!("{D}.serviceAccountName");
        assert_eq!(
            refused(&deployment(s.clone()), Level::Privileged),
            ("serviceAccount", field)
        );
        let granted = PodGrants {
            service_accounts: vec!["admin".into()],
            ..PodGrants::default()
        };
        assert_eq!(check_in("apps", &deployment(s.clone()), &granted), Ok(()));
        s["serviceAccountName"] = json!("default");
        assert_eq!(check(&deployment(s.clone()), Level::Restricted), Ok(()));
        // The deprecated spelling is checked too.
        s["serviceAccount"] = json!("admin");
        assert_eq!(
            refused(&deployment(s), Level::Restricted),
            ("serviceAccount", format!("{D}.serviceAccount"))
        );
    }

    #[test]
    fn a_granted_account_may_be_named_after_the_parent() {
        let mut s = spec();
        // A name with `{parent}` grants the account named after the parent, and only that.
        let per_parent = PodGrants {
            service_accounts: vec!["{parent}-chaos".into()],
            ..PodGrants::default()
        };
        s["serviceAccountName"] = json!("orders-chaos");
        assert_eq!(
            check_in(
                "apps",
                &deployment(s.clone()),
                &per_parent.for_parent("orders")
            ),
            Ok(())
        );
        let v = check_in(
            "apps",
            &deployment(s.clone()),
            &per_parent.for_parent("billing"),
        )
        .unwrap_err();
        assert_eq!(
            (v.rule, v.field.as_str()),
            ("serviceAccount", format!("{D}.serviceAccountName").as_str())
        );
        assert!(v.why.contains("billing-chaos"), "{}", v.why);
        let v = check_in("apps", &deployment(s.clone()), &per_parent).unwrap_err();
        assert_eq!(
            v.rule, "serviceAccount",
            "unsubstituted, the placeholder grants nothing"
        );
    }

    #[test]
    fn the_hosts_service_account_is_refused_even_when_granted_and_privileged() {
        let mut s = spec();
        s["serviceAccountName"] = json!("windlass-host");
        let all = PodGrants {
            level: Level::Privileged,
            service_accounts: vec!["windlass-host".into()],
            automount_token: true,
            ..Default::default()
        };
        let v = check_in("windlass", &pod(s.clone()), &all).unwrap_err();
        assert_eq!(
            (v.rule, v.field.as_str()),
            ("hostServiceAccount", "spec.serviceAccountName")
        );
        // The same name in another namespace is another account.
        assert_eq!(check_in("apps", &pod(s), &all), Ok(()));
    }

    #[test]
    fn an_unset_service_account_is_the_hosts_when_the_host_runs_as_default() {
        let host = HostAccount {
            namespace: "ops".into(),
            name: "default".into(),
        };
        let v = check_object(
            "v1/Pod",
            "ops",
            &pod(spec()),
            &PodGrants::default(),
            Some(&host),
        )
        .unwrap_err();
        assert_eq!(
            (v.rule, v.field.as_str()),
            ("hostServiceAccount", "spec.serviceAccountName")
        );
        assert_eq!(
            check_object(
                "v1/Pod",
                "apps",
                &pod(spec()),
                &PodGrants::default(),
                Some(&host)
            ),
            Ok(())
        );
        assert_eq!(
            check_object("v1/Pod", "ops", &pod(spec()), &PodGrants::default(), None),
            Ok(())
        );
    }

    #[test]
    fn privileged_level_allows_privileged_containers_but_still_refuses_node_name() {
        let mut s = spec();
        s["containers"][0]["securityContext"] = json!({"privileged": true});
        s["hostNetwork"] = json!(true);
        assert_eq!(check(&stateful_set(s.clone()), Level::Privileged), Ok(()));
        s["nodeName"] = json!("control-plane-0");
        assert_eq!(
            refused(&stateful_set(s), Level::Privileged),
            ("nodeName", format!("{D}.nodeName"))
        );
    }

    #[test]
    fn the_token_must_be_explicitly_unmounted_unless_granted() {
        for value in [None, Some(json!(true)), Some(json!("false"))] {
            let mut s = spec();
            match value {
                Some(v) => s["automountServiceAccountToken"] = v,
                None => remove(&mut s, "automountServiceAccountToken"),
            }
            let v = check(&pod(s.clone()), Level::Privileged).unwrap_err();
            assert_eq!(
                (v.rule, v.field.as_str()),
                (
                    "automountServiceAccountToken",
                    "spec.automountServiceAccountToken"
                )
            );
            assert!(
                v.why
                    .contains("must be false: pods get no ServiceAccount token unless granted"),
                "{}",
                v.why
            );
            let granted = PodGrants {
                automount_token: true,
                ..PodGrants::default()
            };
            assert_eq!(check_in("apps", &pod(s), &granted), Ok(()));
        }
    }

    #[test]
    fn a_projected_token_is_refused_unless_the_token_is_granted() {
        let mut s = spec();
        push(
            &mut s["volumes"],
            json!({"name": "t", "projected": {"sources": [{"configMap": {"name": "c"}}, {"serviceAccountToken": {"path": "token"}}]}}),
        );
        let field = format!("{CJ}.volumes[1].projected.sources[1].serviceAccountToken");
        assert_eq!(
            refused(&cron_job(s.clone()), Level::Restricted),
            ("automountServiceAccountToken", field)
        );
        let granted = PodGrants {
            automount_token: true,
            ..PodGrants::default()
        };
        assert_eq!(check_in("apps", &cron_job(s), &granted), Ok(()));
    }

    #[test]
    fn levels_parse_from_their_names_and_refuse_anything_else() {
        for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
            assert_eq!(level.as_str().parse::<Level>(), Ok(level));
        }
        let err = "root".parse::<Level>().unwrap_err();
        for word in ["\"root\"", "privileged", "baseline", "restricted"] {
            assert!(err.contains(word), "{err}");
        }
        assert_eq!(Level::default(), Level::Restricted);
        assert!(Level::Privileged < Level::Baseline && Level::Baseline < Level::Restricted);
    }

    #[test]
    fn broad_tolerations_and_system_priorities_are_refused_below_privileged() {
        let pod = |extra: Value| {
            let mut spec = serde_json::json!({"automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c", "image": "i", "securityContext": {
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]});
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::json!({"spec": spec})
        };
        let check = |object: &Value, level: Level| {
            let grants = PodGrants {
                level,
                ..PodGrants::default()
            };
            check_object("v1/Pod", "ns", object, &grants, None)
        };
        let fine = pod(
            serde_json::json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db"}],
            "priorityClassName": "high"}),
        );
        assert!(check(&fine, Level::Restricted).is_ok());
        for (extra, field, rule) in [
            (
                serde_json::json!({"tolerations": [{"key": "a"}, {"operator": "Exists"}]}),
                "spec.tolerations[1]",
                "tolerations",
            ),
            (
                serde_json::json!({"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}),
                "spec.tolerations[0]",
                "tolerations",
            ),
            (
                serde_json::json!({"priorityClassName": "system-node-critical"}),
                "spec.priorityClassName",
                "priorityClassName",
            ),
        ] {
            let object = pod(extra);
            let v = check(&object, Level::Baseline).unwrap_err();
            assert_eq!((v.field.as_str(), v.rule), (field, rule), "{}", v.why);
            assert!(check(&object, Level::Privileged).is_ok());
        }
    }

    #[test]
    fn a_git_repo_volume_is_refused_below_privileged() {
        let mut s = spec();
        s["volumes"] =
            json!([{"name": "src", "gitRepo": {"repository": "https://example.com/x.git"}}]);
        for level in [Level::Restricted, Level::Baseline] {
            let v =
                check_object("v1/Pod", "db", &pod(s.clone()), &grants(level), None).unwrap_err();
            assert_eq!(
                (v.rule, v.field.as_str()),
                ("gitRepo", "spec.volumes[0].gitRepo"),
                "{level:?}"
            );
        }
        assert!(check_object("v1/Pod", "db", &pod(s), &grants(Level::Privileged), None).is_ok());
    }
}
