//! The host's pod-security rules judged against the reference: kube-apiserver's own PodSecurity
//! admission. Pod specs generated from a seeded generator over every field the Pod Security
//! Standards read are judged by `windlass_policy::pod_security::check_object` and by a server
//! dry-run create in namespaces enforcing `restricted` and `baseline`. No spec the host accepts
//! may be denied by the API server at the same level; where the host is stricter on purpose, the
//! rule is listed in [`DELIBERATE`] and the counts are printed.
//!
//! Real control plane only: `#[ignore]`d in the devcluster pass (which has no PodSecurity
//! admission to compare with) and run by `cargo xtask ci`'s real pass with `--include-ignored`.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api,
    api::{PostParams, ResourceExt},
};
use serde_json::{Map, Value, json};
use windlass::policy::{Level, PodGrants, pod_security::check_object};

use crate::support::*;

/// Specs generated per level.
const SPECS: usize = 1500;

/// Whether the host refusing, by `rule`, what upstream's level allows is on purpose
/// (docs/SECURITY.md): `gitRepo` volumes below privileged (CVE-2024-10220, CVE-2025-1767); and,
/// for a pod in a user namespace (`hostUsers: false`), `runAsNonRoot`, `runAsUser` and
/// `procMount`, which upstream relaxes there but the host does not (a plugin's pods may land
/// on nodes without user-namespace support).
fn deliberate(rule: &str, pod: &Value) -> bool {
    let user_namespace = pod["spec"]["hostUsers"] == json!(false);
    rule == "gitRepo"
        || (user_namespace && ["runAsNonRoot", "runAsUser", "procMount"].contains(&rule))
}

/// SplitMix64: a small deterministic generator, so that a failing spec is found again from
/// its seed.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// One of `choices`.
    fn pick<'a>(&mut self, choices: &'a [Value]) -> &'a Value {
        let i = usize::try_from(self.next() % choices.len() as u64).unwrap();
        &choices[i]
    }

    /// Sets `key` in `object` to one of `choices`, where `null` leaves it unset.
    fn maybe(&mut self, object: &mut Map<String, Value>, key: &str, choices: &[Value]) {
        let v = self.pick(choices).clone();
        if !v.is_null() {
            object.insert(key.to_string(), v);
        }
    }
}

/// A security context with any of the fields the Standards read at pod or container level.
fn context(g: &mut Gen, container: bool) -> Value {
    let mut c = Map::new();
    g.maybe(
        &mut c,
        "runAsNonRoot",
        &[Value::Null, json!(true), json!(false)],
    );
    g.maybe(&mut c, "runAsUser", &[Value::Null, json!(0), json!(1000)]);
    g.maybe(
        &mut c,
        "seccompProfile",
        &[
            Value::Null,
            Value::Null,
            json!({"type": "RuntimeDefault"}),
            json!({"type": "Localhost", "localhostProfile": "p.json"}),
            json!({"type": "Unconfined"}),
        ],
    );
    g.maybe(
        &mut c,
        "seLinuxOptions",
        &[
            Value::Null,
            Value::Null,
            json!({"type": "container_t"}),
            json!({"type": "spc_t"}),
            json!({"user": "root"}),
            json!({"level": "s0:c1"}),
        ],
    );
    g.maybe(
        &mut c,
        "appArmorProfile",
        &[
            Value::Null,
            Value::Null,
            json!({"type": "RuntimeDefault"}),
            json!({"type": "Unconfined"}),
            json!({"type": "Localhost", "localhostProfile": "p"}),
        ],
    );
    g.maybe(
        &mut c,
        "windowsOptions",
        &[
            Value::Null,
            Value::Null,
            Value::Null,
            json!({"hostProcess": false}),
        ],
    );
    if container {
        g.maybe(
            &mut c,
            "privileged",
            &[Value::Null, json!(false), json!(true)],
        );
        g.maybe(
            &mut c,
            "allowPrivilegeEscalation",
            &[Value::Null, json!(false), json!(false), json!(true)],
        );
        g.maybe(
            &mut c,
            "capabilities",
            &[
                Value::Null,
                json!({"drop": ["ALL"]}),
                json!({"drop": ["ALL"]}),
                json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}),
                json!({"drop": ["ALL"], "add": ["CHOWN"]}),
                json!({"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
                json!({"add": ["NET_RAW"]}),
                json!({"drop": ["NET_RAW"]}),
            ],
        );
        g.maybe(
            &mut c,
            "procMount",
            &[
                Value::Null,
                Value::Null,
                Value::Null,
                json!("Default"),
                json!("Unmasked"),
            ],
        );
        g.maybe(
            &mut c,
            "readOnlyRootFilesystem",
            &[Value::Null, json!(true)],
        );
    } else {
        g.maybe(
            &mut c,
            "sysctls",
            &[
                Value::Null,
                Value::Null,
                json!([{"name": "kernel.shm_rmid_forced", "value": "0"}]),
                json!([{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]),
                json!([{"name": "kernel.msgmax", "value": "65536"}]),
            ],
        );
        g.maybe(&mut c, "fsGroup", &[Value::Null, json!(2000)]);
    }
    Value::Object(c)
}

fn container(g: &mut Gen, name: &str) -> Value {
    let mut c = Map::new();
    c.insert("name".into(), json!(name));
    c.insert("image".into(), json!("busybox"));
    let ctx = context(g, true);
    if ctx.as_object().is_some_and(|o| !o.is_empty()) {
        c.insert("securityContext".into(), ctx);
    }
    // A port of its own per container: two containers may not share a host port.
    let port = match name {
        "app" => 8080,
        "sidecar" => 8081,
        _ => 8082,
    };
    g.maybe(
        &mut c,
        "ports",
        &[
            Value::Null,
            Value::Null,
            json!([{"containerPort": port}]),
            json!([{"containerPort": port, "hostPort": port}]),
        ],
    );
    Value::Object(c)
}

/// Single-field changes of a pod that meets `restricted`: (path under `spec`, values; `null`
/// removes the field).
fn mutations() -> Vec<(&'static [&'static str], Vec<Value>)> {
    let c = |field: &'static str| -> &'static [&'static str] {
        match field {
            "privileged" => &["containers", "0", "securityContext", "privileged"],
            "allowPrivilegeEscalation" => &[
                "containers",
                "0",
                "securityContext",
                "allowPrivilegeEscalation",
            ],
            "capabilities" => &["containers", "0", "securityContext", "capabilities"],
            "runAsNonRoot" => &["containers", "0", "securityContext", "runAsNonRoot"],
            "runAsUser" => &["containers", "0", "securityContext", "runAsUser"],
            "seccompProfile" => &["containers", "0", "securityContext", "seccompProfile"],
            "procMount" => &["containers", "0", "securityContext", "procMount"],
            "seLinuxOptions" => &["containers", "0", "securityContext", "seLinuxOptions"],
            _ => &["containers", "0", "ports"],
        }
    };
    vec![
        (&["hostNetwork"], vec![json!(true), json!(false)]),
        (&["hostPID"], vec![json!(true)]),
        (&["hostIPC"], vec![json!(true)]),
        (&["hostUsers"], vec![json!(false), json!(true)]),
        (
            &["securityContext", "runAsNonRoot"],
            vec![json!(false), Value::Null],
        ),
        (
            &["securityContext", "runAsUser"],
            vec![json!(0), json!(1000)],
        ),
        (
            &["securityContext", "seccompProfile"],
            vec![
                json!({"type": "Unconfined"}),
                json!({"type": "Localhost", "localhostProfile": "p.json"}),
                Value::Null,
            ],
        ),
        (
            &["securityContext", "seLinuxOptions"],
            vec![
                json!({"type": "spc_t"}),
                json!({"type": "container_init_t"}),
                json!({"role": "r"}),
            ],
        ),
        (
            &["securityContext", "appArmorProfile"],
            vec![
                json!({"type": "Unconfined"}),
                json!({"type": "Localhost", "localhostProfile": "p"}),
            ],
        ),
        (
            &["securityContext", "sysctls"],
            vec![
                json!([{"name": "kernel.shm_rmid_forced", "value": "0"}]),
                json!([{"name": "net.ipv4.ping_group_range", "value": "0 1"}]),
                json!([{"name": "kernel.msgmax", "value": "65536"}]),
            ],
        ),
        (c("privileged"), vec![json!(true), json!(false)]),
        (
            c("allowPrivilegeEscalation"),
            vec![json!(true), Value::Null],
        ),
        (
            c("capabilities"),
            vec![
                json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}),
                json!({"drop": ["ALL"], "add": ["CHOWN"]}),
                json!({"drop": ["NET_RAW"]}),
                Value::Null,
            ],
        ),
        (c("runAsNonRoot"), vec![json!(false)]),
        (c("runAsUser"), vec![json!(0), json!(1000)]),
        (c("seccompProfile"), vec![json!({"type": "Unconfined"})]),
        (c("procMount"), vec![json!("Unmasked")]),
        (
            c("seLinuxOptions"),
            vec![json!({"user": "sys"}), json!({"type": "container_kvm_t"})],
        ),
        (
            c("ports"),
            vec![json!([{"containerPort": 8080, "hostPort": 8080}])],
        ),
        (
            &["volumes"],
            vec![
                json!([{"name": "v", "hostPath": {"path": "/etc"}}]),
                json!([{"name": "v", "gitRepo": {"repository": "https://example.com/r.git"}}]),
                json!([{"name": "v", "nfs": {"server": "nfs", "path": "/"}}]),
                json!([{"name": "v", "csi": {"driver": "d"}}]),
                json!([{"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]),
            ],
        ),
    ]
}

/// Sets the field at `path` (creating objects on the way; a number indexes an array), or
/// removes it for `null`.
fn set(spec: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = spec;
    for key in parents {
        at = match key.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => {
                if at.get(*key).is_none() {
                    at[*key] = json!({});
                }
                &mut at[*key]
            }
        };
    }
    match (at.as_object_mut(), value) {
        (Some(o), Value::Null) => {
            o.remove(*last);
        }
        (Some(o), v) => {
            o.insert((*last).to_string(), v);
        }
        (None, _) => {}
    }
}

/// A pod that meets `restricted`, with one to three fields changed: most specs near the line
/// the levels draw, where a wrong rule shows.
fn near_restricted(g: &mut Gen, n: usize) -> Value {
    let mut spec = json!({
        "automountServiceAccountToken": false,
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": "busybox", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
    });
    let all = mutations();
    for _ in 0..=(g.next() % 3) {
        let i = usize::try_from(g.next() % all.len() as u64).unwrap();
        let (path, values) = &all[i];
        let value = g.pick(values).clone();
        set(&mut spec, path, value);
    }
    let mut spec = spec.as_object().cloned().unwrap_or_default();
    valid(&mut spec);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{n}")}, "spec": spec})
}

/// One Pod: every other one [`near_restricted`]; the rest with each field the Standards read
/// set or not at random. The service-account token is never mounted (a Windlass rule with no
/// PodSecurity counterpart).
fn pod(g: &mut Gen, n: usize) -> Value {
    if n % 2 == 0 {
        return near_restricted(g, n);
    }
    let mut spec = Map::new();
    spec.insert("automountServiceAccountToken".into(), json!(false));
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        g.maybe(
            &mut spec,
            key,
            &[Value::Null, Value::Null, json!(false), json!(true)],
        );
    }
    g.maybe(
        &mut spec,
        "hostUsers",
        &[Value::Null, Value::Null, json!(true), json!(false)],
    );
    let ctx = context(g, false);
    if ctx.as_object().is_some_and(|o| !o.is_empty()) {
        spec.insert("securityContext".into(), ctx);
    }
    let mut containers = vec![container(g, "app")];
    if g.next() % 3 == 0 {
        containers.push(container(g, "sidecar"));
    }
    spec.insert("containers".into(), Value::Array(containers));
    if g.next() % 4 == 0 {
        spec.insert("initContainers".into(), json!([container(g, "init")]));
    }
    g.maybe(
        &mut spec,
        "volumes",
        &[
            Value::Null,
            Value::Null,
            json!([{"name": "v", "emptyDir": {}}]),
            json!([{"name": "v", "configMap": {"name": "c"}}]),
            json!([{"name": "v", "hostPath": {"path": "/etc"}}]),
            json!([{"name": "v", "gitRepo": {"repository": "https://example.com/r.git"}}]),
            json!([{"name": "v", "nfs": {"server": "nfs", "path": "/"}}]),
            json!([{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]),
        ],
    );
    valid(&mut spec);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("p{n}")},
        "spec": spec,
    })
}

/// Takes out the combinations the API server's validation refuses before admission judges
/// them (which would compare nothing): host namespaces, and `privileged` without escalation,
/// with `hostUsers: false`; `procMount: Unmasked` without it.
fn valid(spec: &mut Map<String, Value>) {
    let user_namespace = spec.get("hostUsers") == Some(&json!(false));
    if user_namespace {
        for key in ["hostNetwork", "hostPID", "hostIPC"] {
            spec.remove(key);
        }
    }
    // Namespaced sysctls of a namespace the pod shares with the host are refused.
    let host = |key: &str| spec.get(key) == Some(&json!(true));
    let (net, ipc) = (host("hostNetwork"), host("hostIPC"));
    if let Some(ctx) = spec
        .get_mut("securityContext")
        .and_then(Value::as_object_mut)
        && let Some(Value::Array(sysctls)) = ctx.get("sysctls")
    {
        let shared = sysctls.iter().any(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            (net && name.starts_with("net.")) || (ipc && name.starts_with("kernel."))
        });
        if shared {
            ctx.remove("sysctls");
        }
    }
    for list in ["containers", "initContainers"] {
        let Some(Value::Array(containers)) = spec.get_mut(list) else {
            continue;
        };
        for c in containers {
            let Some(ctx) = c.get_mut("securityContext").and_then(Value::as_object_mut) else {
                continue;
            };
            if ctx.get("privileged") == Some(&json!(true)) {
                if user_namespace {
                    ctx.remove("privileged");
                } else {
                    ctx.remove("allowPrivilegeEscalation");
                }
            }
            if ctx.get("procMount") == Some(&json!("Unmasked")) && !user_namespace {
                ctx.remove("procMount");
            }
        }
    }
}

/// What the API server made of a dry-run create: allowed, denied by PodSecurity (with its
/// message), or refused for another reason (an invalid spec).
enum Server {
    Allowed,
    Denied(String),
    Invalid(String),
}

async fn server(pods: &Api<Pod>, pod: &Value) -> Server {
    let pod: Pod = serde_json::from_value(pod.clone()).expect("a Pod");
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match pods.create(&params, &pod).await {
        Ok(_) => Server::Allowed,
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("PodSecurity") => {
            Server::Denied(s.message)
        }
        Err(e) => Server::Invalid(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real control plane only (its PodSecurity admission is the reference): cargo xtask ci runs it in the real pass"]
async fn the_hosts_pod_security_never_accepts_what_the_api_servers_admission_denies() {
    assert!(
        real_cluster(),
        "run with WINDLASS_TEST_CLUSTER=real: the reference is kube-apiserver's PodSecurity admission"
    );
    let env = Env::start().await;
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    let mut report = String::new();
    let mut failures = Vec::new();
    for level in [Level::Restricted, Level::Baseline] {
        let ns = format!("psa-{}", level.as_str());
        let object: Namespace = serde_json::from_value(json!({"metadata": {
            "name": ns,
            "labels": {
                "pod-security.kubernetes.io/enforce": level.as_str(),
                "pod-security.kubernetes.io/enforce-version": "latest",
            },
        }}))
        .unwrap();
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .expect("namespace created");
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
        let grants = PodGrants {
            level,
            ..PodGrants::default()
        };
        let mut g = Gen(0x5eed_0000 + level as u64);
        let specs: Vec<Value> = (0..SPECS).map(|n| pod(&mut g, n)).collect();
        let verdicts: Vec<Server> = futures::stream::iter(specs.iter().map(|p| server(&pods, p)))
            .buffered(16)
            .collect()
            .await;
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut stricter: BTreeMap<String, usize> = BTreeMap::new();
        for (spec, verdict) in specs.iter().zip(&verdicts) {
            let host = check_object("v1/Pod", &ns, spec, &grants, None);
            match (&host, verdict) {
                (Ok(()), Server::Allowed) => *counts.entry("both allow").or_default() += 1,
                (Err(_), Server::Denied(_)) => *counts.entry("both deny").or_default() += 1,
                (_, Server::Invalid(why)) => {
                    *counts.entry("invalid for the API server").or_default() += 1;
                    if counts["invalid for the API server"] <= 3 {
                        eprintln!("invalid spec (not compared): {why}\n{spec}");
                    }
                }
                (Ok(()), Server::Denied(why)) => {
                    *counts.entry("host allows, server denies").or_default() += 1;
                    failures.push(format!(
                        "level {}: the host accepts a pod the API server denies: {why}\n{spec}",
                        level.as_str()
                    ));
                }
                (Err(v), Server::Allowed) => {
                    *counts.entry("host stricter").or_default() += 1;
                    *stricter.entry(v.rule.to_string()).or_default() += 1;
                    if !deliberate(v.rule, spec) {
                        failures.push(format!(
                            "level {}: the host refuses, by a rule not listed as deliberate, a pod the API server allows: {v}\n{spec}",
                            level.as_str()
                        ));
                    }
                }
            }
        }
        let invalid = counts
            .get("invalid for the API server")
            .copied()
            .unwrap_or(0);
        assert!(
            invalid * 10 < SPECS,
            "level {}: {invalid} of {SPECS} generated specs are invalid: the generator tests too little",
            level.as_str()
        );
        for (what, n) in [("both allow", 0usize), ("both deny", 0)] {
            let got = counts.get(what).copied().unwrap_or(n);
            assert!(
                got * 20 >= SPECS,
                "level {}: only {got} specs where {what}: the generator does not reach both sides",
                level.as_str()
            );
        }
        report.push_str(&format!(
            "level {}: {SPECS} pods: {counts:?}; stricter on purpose, by rule: {stricter:?}\n",
            level.as_str()
        ));
    }
    println!("{report}");
    let shown: Vec<&String> = failures.iter().take(5).collect();
    assert!(
        failures.is_empty(),
        "{} disagreements (first {}):\n{}",
        failures.len(),
        shown.len(),
        shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    // Names read back: nothing was created by the dry runs.
    let left = Api::<Pod>::namespaced(env.client.clone(), "psa-restricted")
        .list(&Default::default())
        .await
        .expect("pods");
    assert!(
        left.items.is_empty(),
        "dry runs created {:?}",
        left.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
}
