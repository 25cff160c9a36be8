//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), which kubectl sends for
//! `kubectl create namespace|configmap|secret|deployment|service|serviceaccount|job|cronjob|
//! role|rolebinding|clusterrole|clusterrolebinding`: decoded into the JSON the server works on.
//!
//! The body is the 4-byte magic `k8s\0` and a `runtime.Unknown` (`typeMeta` 1 with `apiVersion`
//! 1 and `kind` 2, `raw` 2: the object's own message). The object is decoded by the schema
//! tables below — field numbers and JSON names of the Kubernetes API's protobuf messages, for
//! the kinds above and the fields kubectl's generators write. A body of another kind, or with a
//! field these tables do not know, is refused with 415 and a message naming the message and
//! the field, so that nothing is silently dropped; JSON works for everything.
//!
//! JSON follows the API's Go encoding: scalars at their zero value are left out (they are
//! written for every non-pointer Go field), except for the fields marked as pointers, where
//! zero is a value (`replicas: 0`); empty messages stay (`strategy: {}`); a zero Time is left
//! out; `bytes` become base64; IntOrString becomes a number or a string. Status messages are
//! skipped: the server drops status on create.

use crate::error::{ApiError, Result};
use serde_json::{Map, Value, json};

/// The magic prefix of a Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    Msg(&'static Msg),
    /// `meta.v1.Time`: `seconds` 1, `nanos` 2.
    Time,
    /// `intstr.IntOrString`: `type` 1, `intVal` 2, `strVal` 3.
    IntOrString,
    /// `map<string, string>`.
    MapStr,
    /// `map<string, bytes>`.
    MapBytes,
    /// A message that is skipped (status).
    Skip,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    tag: u64,
    name: &'static str,
    ty: Ty,
    repeated: bool,
    /// A Go pointer: present on the wire only when set, so zero is a value.
    pointer: bool,
}

#[derive(Debug)]
struct Msg {
    name: &'static str,
    fields: &'static [Field],
}

const fn f(tag: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        tag,
        name,
        ty,
        repeated: false,
        pointer: false,
    }
}

/// A repeated field.
const fn rep(tag: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        tag,
        name,
        ty,
        repeated: true,
        pointer: false,
    }
}

/// A pointer field.
const fn ptr(tag: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        tag,
        name,
        ty,
        repeated: false,
        pointer: true,
    }
}

static OWNER_REFERENCE: Msg = Msg {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.OwnerReference",
    fields: &[
        f(1, "kind", Ty::Str),
        f(3, "name", Ty::Str),
        f(4, "uid", Ty::Str),
        f(5, "apiVersion", Ty::Str),
        ptr(6, "controller", Ty::Bool),
        ptr(7, "blockOwnerDeletion", Ty::Bool),
    ],
};

static OBJECT_META: Msg = Msg {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    fields: &[
        f(1, "name", Ty::Str),
        f(2, "generateName", Ty::Str),
        f(3, "namespace", Ty::Str),
        f(4, "selfLink", Ty::Str),
        f(5, "uid", Ty::Str),
        f(6, "resourceVersion", Ty::Str),
        f(7, "generation", Ty::Int),
        f(8, "creationTimestamp", Ty::Time),
        f(9, "deletionTimestamp", Ty::Time),
        ptr(10, "deletionGracePeriodSeconds", Ty::Int),
        f(11, "labels", Ty::MapStr),
        f(12, "annotations", Ty::MapStr),
        rep(13, "ownerReferences", Ty::Msg(&OWNER_REFERENCE)),
        rep(14, "finalizers", Ty::Str),
    ],
};

static LABEL_SELECTOR_REQUIREMENT: Msg = Msg {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement",
    fields: &[
        f(1, "key", Ty::Str),
        f(2, "operator", Ty::Str),
        rep(3, "values", Ty::Str),
    ],
};

static LABEL_SELECTOR: Msg = Msg {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.LabelSelector",
    fields: &[
        f(1, "matchLabels", Ty::MapStr),
        rep(2, "matchExpressions", Ty::Msg(&LABEL_SELECTOR_REQUIREMENT)),
    ],
};

static NAMESPACE_SPEC: Msg = Msg {
    name: "k8s.io.api.core.v1.NamespaceSpec",
    fields: &[rep(1, "finalizers", Ty::Str)],
};

static NAMESPACE: Msg = Msg {
    name: "k8s.io.api.core.v1.Namespace",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&NAMESPACE_SPEC)),
        f(3, "status", Ty::Skip),
    ],
};

static CONFIG_MAP: Msg = Msg {
    name: "k8s.io.api.core.v1.ConfigMap",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "data", Ty::MapStr),
        f(3, "binaryData", Ty::MapBytes),
        ptr(4, "immutable", Ty::Bool),
    ],
};

static SECRET: Msg = Msg {
    name: "k8s.io.api.core.v1.Secret",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "data", Ty::MapBytes),
        f(3, "type", Ty::Str),
        f(4, "stringData", Ty::MapStr),
        ptr(5, "immutable", Ty::Bool),
    ],
};

static SERVICE_PORT: Msg = Msg {
    name: "k8s.io.api.core.v1.ServicePort",
    fields: &[
        f(1, "name", Ty::Str),
        f(2, "protocol", Ty::Str),
        f(3, "port", Ty::Int),
        f(4, "targetPort", Ty::IntOrString),
        f(5, "nodePort", Ty::Int),
        ptr(6, "appProtocol", Ty::Str),
    ],
};

static SERVICE_SPEC: Msg = Msg {
    name: "k8s.io.api.core.v1.ServiceSpec",
    fields: &[
        rep(1, "ports", Ty::Msg(&SERVICE_PORT)),
        f(2, "selector", Ty::MapStr),
        f(3, "clusterIP", Ty::Str),
        f(4, "type", Ty::Str),
        rep(5, "externalIPs", Ty::Str),
        f(7, "sessionAffinity", Ty::Str),
        f(8, "loadBalancerIP", Ty::Str),
        rep(9, "loadBalancerSourceRanges", Ty::Str),
        f(10, "externalName", Ty::Str),
        f(11, "externalTrafficPolicy", Ty::Str),
        f(12, "healthCheckNodePort", Ty::Int),
        f(13, "publishNotReadyAddresses", Ty::Bool),
        ptr(17, "ipFamilyPolicy", Ty::Str),
        rep(18, "clusterIPs", Ty::Str),
        rep(19, "ipFamilies", Ty::Str),
        ptr(20, "allocateLoadBalancerNodePorts", Ty::Bool),
        ptr(21, "loadBalancerClass", Ty::Str),
        ptr(22, "internalTrafficPolicy", Ty::Str),
        ptr(23, "trafficDistribution", Ty::Str),
    ],
};

static SERVICE: Msg = Msg {
    name: "k8s.io.api.core.v1.Service",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&SERVICE_SPEC)),
        f(3, "status", Ty::Skip),
    ],
};

static OBJECT_REFERENCE: Msg = Msg {
    name: "k8s.io.api.core.v1.ObjectReference",
    fields: &[
        f(1, "kind", Ty::Str),
        f(2, "namespace", Ty::Str),
        f(3, "name", Ty::Str),
        f(4, "uid", Ty::Str),
        f(5, "apiVersion", Ty::Str),
        f(6, "resourceVersion", Ty::Str),
        f(7, "fieldPath", Ty::Str),
    ],
};

static LOCAL_OBJECT_REFERENCE: Msg = Msg {
    name: "k8s.io.api.core.v1.LocalObjectReference",
    fields: &[f(1, "name", Ty::Str)],
};

static SERVICE_ACCOUNT: Msg = Msg {
    name: "k8s.io.api.core.v1.ServiceAccount",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        rep(2, "secrets", Ty::Msg(&OBJECT_REFERENCE)),
        rep(3, "imagePullSecrets", Ty::Msg(&LOCAL_OBJECT_REFERENCE)),
        ptr(4, "automountServiceAccountToken", Ty::Bool),
    ],
};

static CONTAINER_PORT: Msg = Msg {
    name: "k8s.io.api.core.v1.ContainerPort",
    fields: &[
        f(1, "name", Ty::Str),
        f(2, "hostPort", Ty::Int),
        f(3, "containerPort", Ty::Int),
        f(4, "protocol", Ty::Str),
        f(5, "hostIP", Ty::Str),
    ],
};

static ENV_VAR: Msg = Msg {
    name: "k8s.io.api.core.v1.EnvVar",
    fields: &[f(1, "name", Ty::Str), f(2, "value", Ty::Str)],
};

static RESOURCE_REQUIREMENTS: Msg = Msg {
    name: "k8s.io.api.core.v1.ResourceRequirements",
    fields: &[],
};

static CONTAINER: Msg = Msg {
    name: "k8s.io.api.core.v1.Container",
    fields: &[
        f(1, "name", Ty::Str),
        f(2, "image", Ty::Str),
        rep(3, "command", Ty::Str),
        rep(4, "args", Ty::Str),
        f(5, "workingDir", Ty::Str),
        rep(6, "ports", Ty::Msg(&CONTAINER_PORT)),
        rep(7, "env", Ty::Msg(&ENV_VAR)),
        f(8, "resources", Ty::Msg(&RESOURCE_REQUIREMENTS)),
        f(13, "terminationMessagePath", Ty::Str),
        f(14, "imagePullPolicy", Ty::Str),
        f(16, "stdin", Ty::Bool),
        f(17, "stdinOnce", Ty::Bool),
        f(18, "tty", Ty::Bool),
        f(20, "terminationMessagePolicy", Ty::Str),
    ],
};

static POD_SPEC: Msg = Msg {
    name: "k8s.io.api.core.v1.PodSpec",
    fields: &[
        rep(2, "containers", Ty::Msg(&CONTAINER)),
        f(3, "restartPolicy", Ty::Str),
        ptr(4, "terminationGracePeriodSeconds", Ty::Int),
        ptr(5, "activeDeadlineSeconds", Ty::Int),
        f(6, "dnsPolicy", Ty::Str),
        f(7, "nodeSelector", Ty::MapStr),
        f(8, "serviceAccountName", Ty::Str),
        f(9, "serviceAccount", Ty::Str),
        f(10, "nodeName", Ty::Str),
        f(11, "hostNetwork", Ty::Bool),
        f(12, "hostPID", Ty::Bool),
        f(13, "hostIPC", Ty::Bool),
        rep(15, "imagePullSecrets", Ty::Msg(&LOCAL_OBJECT_REFERENCE)),
        f(16, "hostname", Ty::Str),
        f(17, "subdomain", Ty::Str),
        f(19, "schedulerName", Ty::Str),
        rep(20, "initContainers", Ty::Msg(&CONTAINER)),
        ptr(21, "automountServiceAccountToken", Ty::Bool),
        f(24, "priorityClassName", Ty::Str),
        ptr(25, "priority", Ty::Int),
        ptr(30, "enableServiceLinks", Ty::Bool),
    ],
};

static POD_TEMPLATE_SPEC: Msg = Msg {
    name: "k8s.io.api.core.v1.PodTemplateSpec",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&POD_SPEC)),
    ],
};

static ROLLING_UPDATE_DEPLOYMENT: Msg = Msg {
    name: "k8s.io.api.apps.v1.RollingUpdateDeployment",
    fields: &[
        f(1, "maxUnavailable", Ty::IntOrString),
        f(2, "maxSurge", Ty::IntOrString),
    ],
};

static DEPLOYMENT_STRATEGY: Msg = Msg {
    name: "k8s.io.api.apps.v1.DeploymentStrategy",
    fields: &[
        f(1, "type", Ty::Str),
        f(2, "rollingUpdate", Ty::Msg(&ROLLING_UPDATE_DEPLOYMENT)),
    ],
};

static DEPLOYMENT_SPEC: Msg = Msg {
    name: "k8s.io.api.apps.v1.DeploymentSpec",
    fields: &[
        ptr(1, "replicas", Ty::Int),
        f(2, "selector", Ty::Msg(&LABEL_SELECTOR)),
        f(3, "template", Ty::Msg(&POD_TEMPLATE_SPEC)),
        f(4, "strategy", Ty::Msg(&DEPLOYMENT_STRATEGY)),
        f(5, "minReadySeconds", Ty::Int),
        ptr(6, "revisionHistoryLimit", Ty::Int),
        f(7, "paused", Ty::Bool),
        ptr(9, "progressDeadlineSeconds", Ty::Int),
    ],
};

static DEPLOYMENT: Msg = Msg {
    name: "k8s.io.api.apps.v1.Deployment",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&DEPLOYMENT_SPEC)),
        f(3, "status", Ty::Skip),
    ],
};

static JOB_SPEC: Msg = Msg {
    name: "k8s.io.api.batch.v1.JobSpec",
    fields: &[
        ptr(1, "parallelism", Ty::Int),
        ptr(2, "completions", Ty::Int),
        ptr(3, "activeDeadlineSeconds", Ty::Int),
        ptr(4, "selector", Ty::Msg(&LABEL_SELECTOR)),
        ptr(5, "manualSelector", Ty::Bool),
        f(6, "template", Ty::Msg(&POD_TEMPLATE_SPEC)),
        ptr(7, "backoffLimit", Ty::Int),
        ptr(8, "ttlSecondsAfterFinished", Ty::Int),
        ptr(9, "completionMode", Ty::Str),
        ptr(10, "suspend", Ty::Bool),
        ptr(12, "backoffLimitPerIndex", Ty::Int),
        ptr(13, "maxFailedIndexes", Ty::Int),
        ptr(14, "podReplacementPolicy", Ty::Str),
        ptr(15, "managedBy", Ty::Str),
    ],
};

static JOB: Msg = Msg {
    name: "k8s.io.api.batch.v1.Job",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&JOB_SPEC)),
        f(3, "status", Ty::Skip),
    ],
};

static JOB_TEMPLATE_SPEC: Msg = Msg {
    name: "k8s.io.api.batch.v1.JobTemplateSpec",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&JOB_SPEC)),
    ],
};

static CRON_JOB_SPEC: Msg = Msg {
    name: "k8s.io.api.batch.v1.CronJobSpec",
    fields: &[
        f(1, "schedule", Ty::Str),
        ptr(2, "startingDeadlineSeconds", Ty::Int),
        f(3, "concurrencyPolicy", Ty::Str),
        ptr(4, "suspend", Ty::Bool),
        f(5, "jobTemplate", Ty::Msg(&JOB_TEMPLATE_SPEC)),
        ptr(6, "successfulJobsHistoryLimit", Ty::Int),
        ptr(7, "failedJobsHistoryLimit", Ty::Int),
        ptr(8, "timeZone", Ty::Str),
    ],
};

static CRON_JOB: Msg = Msg {
    name: "k8s.io.api.batch.v1.CronJob",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&CRON_JOB_SPEC)),
        f(3, "status", Ty::Skip),
    ],
};

static POLICY_RULE: Msg = Msg {
    name: "k8s.io.api.rbac.v1.PolicyRule",
    fields: &[
        rep(1, "verbs", Ty::Str),
        rep(2, "apiGroups", Ty::Str),
        rep(3, "resources", Ty::Str),
        rep(4, "resourceNames", Ty::Str),
        rep(5, "nonResourceURLs", Ty::Str),
    ],
};

static ROLE: Msg = Msg {
    name: "k8s.io.api.rbac.v1.Role",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        rep(2, "rules", Ty::Msg(&POLICY_RULE)),
    ],
};

static ROLE_REF: Msg = Msg {
    name: "k8s.io.api.rbac.v1.RoleRef",
    fields: &[
        f(1, "apiGroup", Ty::Str),
        f(2, "kind", Ty::Str),
        f(3, "name", Ty::Str),
    ],
};

static SUBJECT: Msg = Msg {
    name: "k8s.io.api.rbac.v1.Subject",
    fields: &[
        f(1, "kind", Ty::Str),
        f(2, "apiGroup", Ty::Str),
        f(3, "name", Ty::Str),
        f(4, "namespace", Ty::Str),
    ],
};

static ROLE_BINDING: Msg = Msg {
    name: "k8s.io.api.rbac.v1.RoleBinding",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        rep(2, "subjects", Ty::Msg(&SUBJECT)),
        f(3, "roleRef", Ty::Msg(&ROLE_REF)),
    ],
};

/// The kinds whose protobuf bodies are decoded, by `(apiVersion, kind)`.
fn schema(api_version: &str, kind: &str) -> Option<&'static Msg> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => &NAMESPACE,
        ("v1", "ConfigMap") => &CONFIG_MAP,
        ("v1", "Secret") => &SECRET,
        ("v1", "Service") => &SERVICE,
        ("v1", "ServiceAccount") => &SERVICE_ACCOUNT,
        ("apps/v1", "Deployment") => &DEPLOYMENT,
        ("batch/v1", "Job") => &JOB,
        ("batch/v1", "CronJob") => &CRON_JOB,
        ("rbac.authorization.k8s.io/v1", "Role" | "ClusterRole") => &ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => &ROLE_BINDING,
        _ => return None,
    })
}

fn unsupported(message: String) -> ApiError {
    let mut e = ApiError::unsupported_media_type("application/vnd.kubernetes.protobuf");
    e.message = message;
    e
}

/// One field on the wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
    msg: &'static str,
}

impl<'a> Reader<'a> {
    fn truncated(&self) -> ApiError {
        ApiError::bad_request(format!(
            "the protobuf body is truncated inside {}",
            self.msg
        ))
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.buf.get(self.at).ok_or_else(|| self.truncated())?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.truncated())
    }

    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>> {
        if self.at >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| self.truncated())?;
                let end = self.at.checked_add(len).ok_or_else(|| self.truncated())?;
                let bytes = self.buf.get(self.at..end).ok_or_else(|| self.truncated())?;
                self.at = end;
                Wire::Bytes(bytes)
            }
            1 => {
                self.at += 8;
                Wire::Fixed
            }
            5 => {
                self.at += 4;
                Wire::Fixed
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "the protobuf body has wire type {other} inside {}",
                    self.msg
                )));
            }
        };
        if self.at > self.buf.len() {
            return Err(self.truncated());
        }
        Ok(Some((key >> 3, wire)))
    }
}

fn fields<'a>(buf: &'a [u8], msg: &'static str) -> Result<Vec<(u64, Wire<'a>)>> {
    let mut r = Reader { buf, at: 0, msg };
    let mut out = Vec::new();
    while let Some(field) = r.next()? {
        out.push(field);
    }
    Ok(out)
}

fn wrong_type(msg: &str, field: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the protobuf body has field {field} of {msg} with the wrong wire type"
    ))
}

fn text(bytes: &[u8], msg: &str, field: &str) -> Result<String> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ApiError::bad_request(format!("field {field} of {msg} is not UTF-8")))
}

/// A `map<string, V>` entry: key 1, value 2.
fn entry<'a>(bytes: &'a [u8], msg: &'static str) -> Result<(String, &'a [u8])> {
    let mut key = String::new();
    let mut value: &[u8] = &[];
    for (tag, wire) in fields(bytes, msg)? {
        match (tag, wire) {
            (1, Wire::Bytes(b)) => key = text(b, msg, "map key")?,
            (2, Wire::Bytes(b)) => value = b,
            _ => return Err(wrong_type(msg, "map entry")),
        }
    }
    Ok((key, value))
}

/// The JSON of one field value, or None where Go's JSON leaves it out.
fn value(field: &Field, wire: Wire<'_>, owner: &'static Msg) -> Result<Option<Value>> {
    let keep = |zero: bool| !zero || field.pointer || field.repeated;
    Ok(match (field.ty, wire) {
        (Ty::Str, Wire::Bytes(b)) => {
            let s = text(b, owner.name, field.name)?;
            keep(s.is_empty()).then(|| json!(s))
        }
        (Ty::Int, Wire::Varint(v)) => {
            // int32 and int64 are both sign-extended two's complement varints.
            let n = v as i64;
            keep(n == 0).then(|| json!(n))
        }
        (Ty::Bool, Wire::Varint(v)) => keep(v == 0).then(|| json!(v != 0)),
        (Ty::Msg(m), Wire::Bytes(b)) => Some(decode(b, m)?),
        (Ty::Skip, Wire::Bytes(_)) => None,
        (Ty::Time, Wire::Bytes(b)) => {
            let (mut seconds, mut nanos) = (0i64, 0i64);
            for (tag, wire) in fields(b, "k8s.io.apimachinery.pkg.apis.meta.v1.Time")? {
                match (tag, wire) {
                    (1, Wire::Varint(v)) => seconds = v as i64,
                    (2, Wire::Varint(v)) => nanos = v as i64,
                    _ => return Err(wrong_type("Time", field.name)),
                }
            }
            if seconds == 0 && nanos == 0 {
                None
            } else {
                let t = jiff::Timestamp::from_second(seconds).map_err(|e| {
                    ApiError::bad_request(format!("field {} of {}: {e}", field.name, owner.name))
                })?;
                Some(json!(t.to_string()))
            }
        }
        (Ty::IntOrString, Wire::Bytes(b)) => {
            let (mut kind, mut int, mut string) = (0u64, 0i64, String::new());
            for (tag, wire) in fields(b, "k8s.io.apimachinery.pkg.util.intstr.IntOrString")? {
                match (tag, wire) {
                    (1, Wire::Varint(v)) => kind = v,
                    (2, Wire::Varint(v)) => int = v as i64,
                    (3, Wire::Bytes(s)) => string = text(s, "IntOrString", "strVal")?,
                    _ => return Err(wrong_type("IntOrString", field.name)),
                }
            }
            Some(if kind == 1 { json!(string) } else { json!(int) })
        }
        _ => return Err(wrong_type(owner.name, field.name)),
    })
}

/// Decodes one message by its schema.
fn decode(buf: &[u8], msg: &'static Msg) -> Result<Value> {
    let mut out = Map::new();
    for (tag, wire) in fields(buf, msg.name)? {
        let field = msg.fields.iter().find(|f| f.tag == tag).ok_or_else(|| {
            unsupported(format!(
                "the devcluster does not decode field {tag} of {} from a protobuf body; \
                 send this object as JSON (application/json)",
                msg.name
            ))
        })?;
        match field.ty {
            Ty::MapStr | Ty::MapBytes => {
                let Wire::Bytes(b) = wire else {
                    return Err(wrong_type(msg.name, field.name));
                };
                let (k, v) = entry(b, msg.name)?;
                let v = if matches!(field.ty, Ty::MapStr) {
                    json!(text(v, msg.name, field.name)?)
                } else {
                    serde_json::to_value(k8s_openapi::ByteString(v.to_vec())).unwrap_or_default()
                };
                let map = out
                    .entry(field.name)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(m) = map.as_object_mut() {
                    m.insert(k, v);
                }
            }
            _ if field.repeated => {
                if let Some(v) = value(field, wire, msg)? {
                    let list = out.entry(field.name).or_insert_with(|| json!([]));
                    if let Some(l) = list.as_array_mut() {
                        l.push(v);
                    }
                }
            }
            _ => {
                if let Some(v) = value(field, wire, msg)? {
                    out.insert(field.name.to_string(), v);
                }
            }
        }
    }
    Ok(Value::Object(out))
}

/// The JSON object of a Kubernetes protobuf body.
///
/// # Errors
/// 400 for a body that is not a Kubernetes protobuf envelope or is malformed; 415 for a kind or
/// a field the devcluster does not decode (the message names it).
pub fn decode_body(body: &[u8]) -> Result<Value> {
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request("a protobuf body must start with the Kubernetes magic number k8s\\0")
    })?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    for (tag, wire) in fields(envelope, "k8s.io.apimachinery.pkg.runtime.Unknown")? {
        match (tag, wire) {
            (1, Wire::Bytes(type_meta)) => {
                for (tag, wire) in fields(type_meta, "k8s.io.apimachinery.pkg.runtime.TypeMeta")? {
                    match (tag, wire) {
                        (1, Wire::Bytes(v)) => api_version = text(v, "TypeMeta", "apiVersion")?,
                        (2, Wire::Bytes(k)) => kind = text(k, "TypeMeta", "kind")?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(r)) => raw = Some(r),
            (3 | 4, Wire::Bytes(b)) if !b.is_empty() => {
                return Err(unsupported(
                    "the devcluster does not decode protobuf bodies with a content encoding".into(),
                ));
            }
            _ => {}
        }
    }
    let msg = schema(&api_version, &kind).ok_or_else(|| {
        unsupported(format!(
            "the devcluster decodes protobuf bodies of Namespaces, ConfigMaps, Secrets, \
             Services, ServiceAccounts, Deployments, Jobs, CronJobs and RBAC roles and bindings, \
             not of {kind} ({api_version}); send it as JSON (application/json)"
        ))
    })?;
    let mut obj = decode(raw.unwrap_or_default(), msg)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn ld(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![tag << 3 | 2, u8::try_from(bytes.len()).expect("short")];
        out.extend_from_slice(bytes);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [ld(1, api_version.as_bytes()), ld(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), ld(1, &type_meta), ld(2, raw)].concat()
    }

    #[test]
    fn kubectl_create_namespace_decodes_to_its_json() {
        // What kubectl 1.32 sends for `kubectl create namespace foo` (read off the wire).
        let body = b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1b\n\x13\n\x03foo\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x00\x1a\x02\n\x00\x1a\x00\"\x00";
        let obj = decode_body(body).expect("decodes");
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"}, "spec": {}})
        );
    }

    #[test]
    fn kubectl_create_deployment_with_zero_replicas_keeps_them() {
        // `kubectl create deployment web --image=nginx --replicas=0`, read off the wire.
        let body = b"k8s\x00\n\x15\n\x07apps/v1\x12\nDeployment\x12\xab\x01\n\x1f\n\x03web\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00Z\n\n\x03app\x12\x03web\x12z\x08\x00\x12\x0c\n\n\n\x03app\x12\x03web\x1a`\n\x1c\n\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00Z\n\n\x03app\x12\x03web\x12@\x12\"\n\x05nginx\x12\x05nginx*\x00B\x00j\x00r\x00\x80\x01\x00\x88\x01\x00\x90\x01\x00\xa2\x01\x00\x1a\x002\x00B\x00J\x00R\x00X\x00`\x00h\x00\x82\x01\x00\x8a\x01\x00\x9a\x01\x00\xc2\x01\x00\"\x02\n\x00(\x008\x00\x1a\x0c\x08\x00\x10\x00\x18\x00 \x00(\x008\x00\x1a\x00\"\x00";
        let obj = decode_body(body).expect("decodes");
        assert_eq!(
            obj,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]},
                    },
                    "strategy": {},
                },
            })
        );
    }

    #[test]
    fn maps_bytes_pointers_and_int_or_string_decode_like_the_go_json() {
        let meta = [ld(1, b"s"), ld(11, &[ld(1, b"app"), ld(2, b"db")].concat())].concat();
        let secret = [
            ld(1, &meta),
            ld(2, &[ld(1, b"password"), ld(2, b"hunter2")].concat()),
            ld(3, b"Opaque"),
            vec![5 << 3, 0], // immutable: false, a pointer, so kept
        ]
        .concat();
        let obj = decode_body(&envelope("v1", "Secret", &secret)).expect("decodes");
        assert_eq!(obj["metadata"]["labels"], json!({"app": "db"}));
        assert_eq!(obj["data"]["password"], "aHVudGVyMg==");
        assert_eq!(obj["type"], "Opaque");
        assert_eq!(obj["immutable"], false);

        let port = [
            vec![3 << 3, 80],
            ld(4, &[vec![1 << 3, 1], ld(3, b"http")].concat()),
        ]
        .concat();
        let spec = [ld(1, &port), ld(4, b"ClusterIP"), vec![12 << 3, 0]].concat();
        let svc = [ld(1, &ld(1, b"web")), ld(2, &spec), ld(3, &ld(1, &[]))].concat();
        let obj = decode_body(&envelope("v1", "Service", &svc)).expect("decodes");
        assert_eq!(
            obj["spec"],
            json!({"ports": [{"port": 80, "targetPort": "http"}], "type": "ClusterIP"})
        );
        assert_eq!(obj.get("status"), None, "status is skipped");
    }

    #[test]
    fn an_unknown_kind_or_field_is_refused_naming_it() {
        let err = decode_body(&envelope("v1", "Pod", &[])).expect_err("no Pod schema");
        assert_eq!(err.code, 415);
        assert!(err.message.contains("not of Pod (v1)"), "{}", err.message);
        let cm = [ld(1, &ld(1, b"c")), ld(9, b"?")].concat();
        let err = decode_body(&envelope("v1", "ConfigMap", &cm)).expect_err("field 9");
        assert_eq!(err.code, 415);
        assert!(
            err.message
                .contains("field 9 of k8s.io.api.core.v1.ConfigMap"),
            "{}",
            err.message
        );
        assert_eq!(
            decode_body(b"not protobuf").expect_err("no magic").code,
            400
        );
    }
}
