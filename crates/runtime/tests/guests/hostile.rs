//! Hostile guests (written against the WIT without the SDK) at the runtime and pipeline level,
//! with no API server: each attack is refused with the precise rule, object, field and reason,
//! or contained by a precise runtime error, and the runtime then still serves the storage
//! plugin.
//!
//! The end-to-end counterparts, on the devcluster, are in host/tests/host/containment.rs.

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use windlass_policy::{
    Grants, HostAccount, Level, PodGrants, Policy, Rule, content,
    pipeline::{self, Input, Outcome, Pipeline, Stage},
};
use windlass_runtime::{Error, InstanceMode, LoadOptions, Phase, Plugin, Request};
use windlass_test_guests as guests;

use crate::support::{
    NOW, assert_still_serving, capture_log, load, load_with, request, runtime, sampledb, thing,
    thing_in, with_timeout,
};

const HOSTILE: &str = "guest-hostile-output";

/// A stage running `plugin` with `config`, the declared kinds granted.
fn stage(plugin: &Arc<Plugin>, config: Value) -> Stage {
    Stage {
        config,
        ..Stage::new(plugin.clone())
    }
}

fn hostile_plugin() -> Arc<Plugin> {
    Arc::new(load(guests::HOSTILE_OUTPUT))
}

fn run(stage: Stage) -> Result<Outcome, pipeline::Error> {
    run_with_policy(stage, Policy::default())
}

fn run_with_policy(stage: Stage, policy: Policy) -> Result<Outcome, pipeline::Error> {
    let pipeline = Pipeline {
        stages: vec![stage],
        policy: Arc::new(policy),
    };
    pipeline.run(Input::new(Phase::Reconcile, &thing(), &[], NOW))
}

/// Exactly these kinds and content grants.
fn granted(names: &[&str]) -> Grants {
    Grants::Kinds(names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>())
}

/// `kind namespace/name` of each desired object, for messages.
fn produced(out: &Outcome) -> Vec<String> {
    out.desired
        .iter()
        .map(|d| {
            let o = &d.object;
            format!(
                "{} {}/{}",
                o.kind,
                o.namespace.as_deref().unwrap_or(""),
                o.name
            )
        })
        .collect()
}

/// The refusal a run must end with.
struct Refusal<'a> {
    plugin: &'a str,
    rule: Rule,
    /// `Violation::object`, exactly.
    object: &'a str,
    /// `Violation::field`, exactly.
    field: &'a str,
    /// Words `Violation::why` must contain.
    why: &'a [&'a str],
}

impl Refusal<'_> {
    /// What differs between `result` and this refusal.
    fn check(&self, result: &Result<Outcome, pipeline::Error>) -> Result<(), String> {
        let rule = self.rule;
        let v = match result {
            Err(pipeline::Error::Output(v)) => v,
            Err(e) => return Err(format!("expected {rule}, got the error: {e}")),
            Ok(out) => return Err(format!("expected {rule}, got {:?}", produced(out))),
        };
        let missing: Vec<&&str> = self.why.iter().filter(|w| !v.why.contains(**w)).collect();
        if (
            v.plugin.as_str(),
            v.rule,
            v.object.as_str(),
            v.field.as_str(),
        ) != (self.plugin, rule, self.object, self.field)
            || !missing.is_empty()
        {
            return Err(format!(
                "expected {rule} from {} of {:?} at {:?} saying {:?}, got {v:?}",
                self.plugin, self.object, self.field, self.why
            ));
        }
        Ok(())
    }

    #[track_caller]
    fn assert(&self, result: &Result<Outcome, pipeline::Error>) {
        if let Err(e) = self.check(result) {
            panic!("{e}");
        }
    }
}

/// Asserts that the run produced exactly one object, of `kind`, named `victim` in `shop`.
#[track_caller]
fn assert_accepted(result: Result<Outcome, pipeline::Error>, kind: &str) {
    let out = result.unwrap_or_else(|e| panic!("expected {kind} to be accepted, got: {e}"));
    assert_eq!(produced(&out), vec![format!("{kind} shop/victim")]);
    assert_eq!(out.desired[0].plugin, HOSTILE);
}

// ---------------------------------------------------------------------------------------------
// guest-hostile-output: object rules

#[test]
fn a_slash_v1_api_version_is_refused_even_when_the_kind_is_granted() {
    let plugin = hostile_plugin();
    let refusal = Refusal {
        plugin: HOSTILE,
        rule: Rule::InvalidApiVersion,
        object: "desired[0] /v1/ServiceAccount",
        field: "apiVersion",
        why: &["\"/v1\"", "empty group", "written `v1`"],
    };
    refusal.assert(&run(stage(&plugin, json!({"attack": "slashV1"}))));
    let granted_stage = Stage {
        grants: granted(&["v1/ServiceAccount"]),
        ..stage(&plugin, json!({"attack": "slashV1"}))
    };
    refusal.assert(&run(granted_stage));
    assert_still_serving();
}

/// `attack` returns one object of the privileged `kind`: refused under the declared grants,
/// accepted when the stage's grants name the kind.
fn assert_privileged_kind(attack: &str, kind: &str) {
    let plugin = hostile_plugin();
    Refusal {
        plugin: HOSTILE,
        rule: Rule::PrivilegedKind,
        object: &format!("desired[0] {kind} victim"),
        field: "",
        why: &[&format!(
            "kind {kind} confers privileges and is not granted by name"
        )],
    }
    .assert(&run(stage(&plugin, json!({"attack": attack}))));
    let granted_stage = Stage {
        grants: granted(&[kind]),
        ..stage(&plugin, json!({"attack": attack}))
    };
    assert_accepted(run(granted_stage), kind);
    assert_still_serving();
}

#[test]
fn endpoints_are_refused_unless_granted_by_name() {
    assert_privileged_kind("endpoints", "v1/Endpoints");
}

#[test]
fn an_endpoint_slice_is_refused_unless_granted_by_name() {
    assert_privileged_kind("endpointSlice", "discovery.k8s.io/v1/EndpointSlice");
}

#[test]
fn a_lease_is_refused_unless_granted_by_name() {
    assert_privileged_kind("lease", "coordination.k8s.io/v1/Lease");
}

#[test]
fn a_network_policy_is_refused_unless_granted_by_name() {
    assert_privileged_kind("networkPolicy", "networking.k8s.io/v1/NetworkPolicy");
}

/// Privileged content of an ordinary kind.
struct Content<'a> {
    attack: &'a str,
    kind: &'a str,
    field: &'a str,
    /// The content grant that admits it.
    grant: &'a str,
    /// A word of the reason.
    word: &'a str,
}

/// Refused under the declared grants and with the kind alone granted; accepted with the kind
/// and the content grant.
fn assert_privileged_content(c: Content<'_>) {
    let plugin = hostile_plugin();
    let config = json!({"attack": c.attack});
    let refusal = Refusal {
        plugin: HOSTILE,
        rule: Rule::PrivilegedContent,
        object: &format!("desired[0] {} victim", c.kind),
        field: c.field,
        why: &[c.word, &format!("this needs the grant {} by name", c.grant)],
    };
    refusal.assert(&run(stage(&plugin, config.clone())));
    let kind_only = Stage {
        grants: granted(&[c.kind]),
        ..stage(&plugin, config.clone())
    };
    refusal.assert(&run(kind_only));
    let both = Stage {
        grants: granted(&[c.kind, c.grant]),
        ..stage(&plugin, config)
    };
    assert_accepted(run(both), c.kind);
    assert_still_serving();
}

#[test]
fn a_service_account_token_secret_is_refused_unless_granted() {
    assert_privileged_content(Content {
        attack: "tokenSecret",
        kind: "v1/Secret",
        field: "type",
        grant: content::TOKEN_SECRET,
        word: "kubernetes.io/service-account-token",
    });
}

#[test]
fn external_ips_are_refused_unless_granted() {
    assert_privileged_content(Content {
        attack: "externalIPs",
        kind: "v1/Service",
        field: "spec.externalIPs",
        grant: content::EXTERNAL_IPS,
        word: "externalIPs capture traffic",
    });
}

#[test]
fn a_node_port_service_is_refused_unless_granted() {
    assert_privileged_content(Content {
        attack: "nodePort",
        kind: "v1/Service",
        field: "spec.type",
        grant: content::NODE_PORT,
        word: "NodePort opens a port on every node",
    });
}

#[test]
fn a_load_balancer_service_is_refused_unless_granted() {
    assert_privileged_content(Content {
        attack: "loadBalancer",
        kind: "v1/Service",
        field: "spec.type",
        grant: content::LOAD_BALANCER,
        word: "LoadBalancer exposes the Service outside the cluster",
    });
}

#[test]
fn a_claim_naming_a_volume_is_refused_unless_granted() {
    assert_privileged_content(Content {
        attack: "pvcVolumeName",
        kind: "v1/PersistentVolumeClaim",
        field: "spec.volumeName",
        grant: content::VOLUME_NAME,
        word: "someone else's data",
    });
}

#[test]
fn an_external_name_service_is_refused_unless_granted() {
    assert_privileged_content(Content {
        attack: "externalName",
        kind: "v1/Service",
        field: "spec.type",
        grant: content::EXTERNAL_NAME,
        word: "ExternalName",
    });
}

#[test]
fn an_object_in_another_namespace_is_refused() {
    let plugin = hostile_plugin();
    Refusal {
        plugin: HOSTILE,
        rule: Rule::Namespace,
        object: "desired[0] v1/ConfigMap victim",
        field: "metadata.namespace",
        why: &["namespace kube-system is not the parent's namespace shop"],
    }
    .assert(&run(stage(&plugin, json!({"attack": "otherNamespace"}))));
    assert_still_serving();
}

// ---------------------------------------------------------------------------------------------
// guest-hostile-output: references to another application's data

/// A workload whose pod names `victim` (`attack`: `mountSecret`, `mountClaim`) is refused in
/// every workload; once the operator names `victim` in the plugin's config, it is accepted.
fn assert_reference_refused(attack: &str, field: &str, what: &str) {
    let plugin = hostile_plugin();
    let failures: Vec<String> = WORKLOADS
        .iter()
        .filter_map(|(workload, kind, prefix)| {
            // The config names the workload `loot`, not the victim: nothing but the plugin's
            // own code points at `victim`.
            let config = json!({"attack": attack, "workload": workload, "name": "loot"});
            let result = run(stage(&plugin, config));
            Refusal {
                plugin: HOSTILE,
                rule: Rule::ForeignReference,
                object: &format!("desired[0] {kind} loot"),
                field: &format!("{prefix}.{field}"),
                why: &[&format!("names {what} \"victim\""), "neither an object of this parent nor named in the parent's spec or the plugin's config"],
            }
            .check(&result)
            .err()
            .map(|e| format!("{attack} in a {workload}: {e}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let named = json!({"attack": attack, "name": "loot", "target": "victim"});
    let out = run(stage(&plugin, named)).expect("a reference the operator named is accepted");
    assert_eq!(produced(&out), vec!["apps/v1/StatefulSet shop/loot"]);
    assert_still_serving();
}

#[test]
fn a_pod_reading_another_applications_secret_is_refused_in_every_workload() {
    assert_reference_refused(
        "mountSecret",
        "containers[0].env[0].valueFrom.secretKeyRef.name",
        "Secret",
    );
}

#[test]
fn a_pod_mounting_another_applications_claim_is_refused_in_every_workload() {
    assert_reference_refused(
        "mountClaim",
        "volumes[0].persistentVolumeClaim.claimName",
        "PersistentVolumeClaim",
    );
}

#[test]
fn a_claim_cloned_from_another_applications_claim_is_refused() {
    let plugin = hostile_plugin();
    Refusal {
        plugin: HOSTILE,
        rule: Rule::ForeignReference,
        object: "desired[0] v1/PersistentVolumeClaim loot",
        field: "spec.dataSource.name",
        why: &["names PersistentVolumeClaim \"victim\""],
    }
    .assert(&run(stage(
        &plugin,
        json!({"attack": "cloneClaim", "name": "loot"}),
    )));
    // A clone of a claim the parent itself observes is its own data.
    let own_claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "victim", "namespace": "shop", "uid": "c1",
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Thing", "name": "t1", "uid": "u1", "controller": true}]}});
    let pipeline = Pipeline {
        stages: vec![stage(
            &plugin,
            json!({"attack": "cloneClaim", "name": "loot"}),
        )],
        policy: Arc::new(Policy::default()),
    };
    let out = pipeline
        .run(Input::new(Phase::Reconcile, &thing(), &[own_claim], NOW))
        .expect("a clone of the parent's own claim is accepted");
    assert_eq!(produced(&out), vec!["v1/PersistentVolumeClaim shop/loot"]);
    assert_still_serving();
}

#[test]
fn a_claim_template_naming_a_volume_is_refused_unless_granted() {
    let plugin = hostile_plugin();
    let config = json!({"attack": "templateVolumeName"});
    let refusal = Refusal {
        plugin: HOSTILE,
        rule: Rule::PrivilegedContent,
        object: "desired[0] apps/v1/StatefulSet victim",
        field: "spec.volumeClaimTemplates[0].spec.volumeName",
        why: &["this needs the grant v1/PersistentVolumeClaim:volumeName by name"],
    };
    refusal.assert(&run(stage(&plugin, config.clone())));
    let both = Stage {
        grants: granted(&["apps/v1/StatefulSet", content::VOLUME_NAME]),
        ..stage(&plugin, config)
    };
    assert_accepted(run(both), "apps/v1/StatefulSet");
    assert_still_serving();
}

// ---------------------------------------------------------------------------------------------
// guest-hostile-output: pod breakouts

/// (workload config value, `group/version/Kind`, path of its pod spec)
const WORKLOADS: &[(&str, &str, &str)] = &[
    ("StatefulSet", "apps/v1/StatefulSet", "spec.template.spec"),
    ("Deployment", "apps/v1/Deployment", "spec.template.spec"),
    ("DaemonSet", "apps/v1/DaemonSet", "spec.template.spec"),
    ("ReplicaSet", "apps/v1/ReplicaSet", "spec.template.spec"),
    ("Job", "batch/v1/Job", "spec.template.spec"),
    (
        "CronJob",
        "batch/v1/CronJob",
        "spec.jobTemplate.spec.template.spec",
    ),
    ("Pod", "v1/Pod", "spec"),
];

/// A pod breakout and how it must be refused at the default (restricted) level.
struct Breakout<'a> {
    attack: &'a str,
    /// The refused field below the pod spec.
    field: &'a str,
    /// The check, as the reason ends: `(<check>)`.
    check: &'a str,
    /// A word of the reason.
    word: &'a str,
}

/// Runs the breakout in every workload and reports every workload where it was not refused as
/// expected, not just the first.
fn assert_breakout_refused(b: Breakout<'_>) {
    let plugin = hostile_plugin();
    let check = format!("({})", b.check);
    let failures: Vec<String> = WORKLOADS
        .iter()
        .filter_map(|(workload, kind, prefix)| {
            let config = json!({"attack": b.attack, "workload": workload});
            let result = run(stage(&plugin, config));
            Refusal {
                plugin: HOSTILE,
                rule: Rule::PodSecurity,
                object: &format!("desired[0] {kind} victim"),
                field: &format!("{prefix}.{}", b.field),
                why: &[b.word, &check],
            }
            .check(&result)
            .err()
            .map(|e| format!("{} in a {workload}: {e}", b.attack))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_still_serving();
}

#[test]
fn a_toleration_of_every_taint_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "tolerateAll",
        field: "tolerations[0]",
        check: "tolerations",
        word: "tolerates every taint",
    });
}

#[test]
fn a_system_priority_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "systemPriority",
        field: "priorityClassName",
        check: "priorityClassName",
        word: "system-node-critical",
    });
}

#[test]
fn a_privileged_container_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "privileged",
        field: "containers[0].securityContext.privileged",
        check: "privileged",
        word: "level restricted does not allow privileged containers",
    });
}

#[test]
fn a_host_path_volume_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "hostPath",
        field: "volumes[0].hostPath",
        check: "hostPathVolumes",
        word: "does not allow hostPath volumes",
    });
}

#[test]
fn the_host_network_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "hostNetwork",
        field: "hostNetwork",
        check: "hostNamespaces",
        word: "hostNetwork is true",
    });
}

#[test]
fn the_host_pid_namespace_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "hostPID",
        field: "hostPID",
        check: "hostNamespaces",
        word: "hostPID is true",
    });
}

#[test]
fn the_host_ipc_namespace_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "hostIPC",
        field: "hostIPC",
        check: "hostNamespaces",
        word: "hostIPC is true",
    });
}

#[test]
fn an_added_capability_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "capabilities",
        field: "containers[0].securityContext.capabilities.add[0]",
        check: "capabilities",
        word: "\"SYS_ADMIN\"",
    });
}

#[test]
fn a_host_port_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "hostPort",
        field: "containers[0].ports[0].hostPort",
        check: "hostPorts",
        word: "does not allow host ports",
    });
}

#[test]
fn running_as_root_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "runAsRoot",
        field: "securityContext.runAsNonRoot",
        check: "runAsNonRoot",
        word: "runAsNonRoot is false",
    });
}

#[test]
fn a_node_name_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "nodeName",
        field: "nodeName",
        check: "nodeName",
        word: "the scheduler places pods",
    });
}

#[test]
fn an_ungranted_service_account_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "serviceAccount",
        field: "serviceAccountName",
        check: "serviceAccount",
        word: "serviceAccountName is \"windlass\"",
    });
}

#[test]
fn a_mounted_service_account_token_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "automount",
        field: "automountServiceAccountToken",
        check: "automountServiceAccountToken",
        word: "automountServiceAccountToken is true; must be false",
    });
}

#[test]
fn an_unconfined_seccomp_profile_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "seccompUnconfined",
        field: "securityContext.seccompProfile.type",
        check: "seccompProfile",
        word: "\"Unconfined\"",
    });
}

#[test]
fn an_unmasked_proc_mount_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "procMount",
        field: "containers[0].securityContext.procMount",
        check: "procMount",
        word: "\"Unmasked\"",
    });
}

#[test]
fn an_unsafe_sysctl_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "sysctls",
        field: "securityContext.sysctls[0].name",
        check: "sysctls",
        word: "\"kernel.msgmax\"",
    });
}

#[test]
fn a_privileged_ephemeral_container_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "ephemeralPrivileged",
        field: "ephemeralContainers[0].securityContext.privileged",
        check: "privileged",
        word: "does not allow privileged containers",
    });
}

#[test]
fn a_privileged_init_container_is_refused_in_every_workload() {
    assert_breakout_refused(Breakout {
        attack: "initPrivileged",
        field: "initContainers[0].securityContext.privileged",
        check: "privileged",
        word: "does not allow privileged containers",
    });
}

#[test]
fn a_compliant_pod_passes_in_every_workload_at_the_restricted_level() {
    let plugin = hostile_plugin();
    let failures: Vec<String> = WORKLOADS
        .iter()
        .filter_map(|(workload, kind, _)| {
            let config = json!({"attack": "compliant", "workload": workload});
            match run(stage(&plugin, config)) {
                Ok(out) if produced(&out) == [format!("{kind} shop/victim")] => None,
                Ok(out) => Some(format!("{workload}: produced {:?}", produced(&out))),
                Err(e) => Some(format!("{workload}: {e}")),
            }
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_still_serving();
}

/// A stage running the hostile guest's `attack` in a StatefulSet with `pods`.
fn pod_stage(plugin: &Arc<Plugin>, attack: &str, pods: PodGrants) -> Stage {
    Stage {
        pods,
        ..stage(plugin, json!({"attack": attack}))
    }
}

#[test]
fn the_baseline_level_admits_running_as_root_but_not_a_host_path() {
    let plugin = hostile_plugin();
    let baseline = PodGrants {
        level: Level::Baseline,
        ..PodGrants::default()
    };
    assert_accepted(
        run(pod_stage(&plugin, "runAsRoot", baseline.clone())),
        "apps/v1/StatefulSet",
    );
    Refusal {
        plugin: HOSTILE,
        rule: Rule::PodSecurity,
        object: "desired[0] apps/v1/StatefulSet victim",
        field: "spec.template.spec.volumes[0].hostPath",
        why: &[
            "level baseline does not allow hostPath volumes",
            "(hostPathVolumes)",
        ],
    }
    .assert(&run(pod_stage(&plugin, "hostPath", baseline)));
    assert_still_serving();
}

#[test]
fn the_privileged_level_admits_a_privileged_container_but_never_a_node_name() {
    let plugin = hostile_plugin();
    let privileged = PodGrants {
        level: Level::Privileged,
        ..PodGrants::default()
    };
    assert_accepted(
        run(pod_stage(&plugin, "privileged", privileged.clone())),
        "apps/v1/StatefulSet",
    );
    Refusal {
        plugin: HOSTILE,
        rule: Rule::PodSecurity,
        object: "desired[0] apps/v1/StatefulSet victim",
        field: "spec.template.spec.nodeName",
        why: &["nodeName is \"node-1\"", "(nodeName)"],
    }
    .assert(&run(pod_stage(&plugin, "nodeName", privileged)));
    assert_still_serving();
}

#[test]
fn the_hosts_own_service_account_is_refused_even_when_granted() {
    let plugin = hostile_plugin();
    let mut policy = Policy::default();
    policy.host_account = Some(HostAccount {
        namespace: "shop".into(),
        name: "windlass".into(),
    });
    let pods = PodGrants {
        service_accounts: vec!["windlass".into(), "db-migrator".into()],
        ..PodGrants::default()
    };
    let as_account = |account: &str| Stage {
        pods: pods.clone(),
        ..stage(
            &plugin,
            json!({"attack": "serviceAccount", "serviceAccount": account}),
        )
    };
    Refusal {
        plugin: HOSTILE,
        rule: Rule::PodSecurity,
        object: "desired[0] apps/v1/StatefulSet victim",
        field: "spec.template.spec.serviceAccountName",
        why: &[
            "\"windlass\" is the Windlass host's own ServiceAccount in namespace \"shop\"",
            "whatever is granted",
            "(hostServiceAccount)",
        ],
    }
    .assert(&run_with_policy(as_account("windlass"), policy.clone()));
    assert_accepted(
        run_with_policy(as_account("db-migrator"), policy),
        "apps/v1/StatefulSet",
    );
    assert_still_serving();
}

// ---------------------------------------------------------------------------------------------
// guest-exfiltrate

/// base64 of `super-secret`.
const PASSWORD: &str = "c3VwZXItc2VjcmV0";
/// base64 of `observed-token`.
const TOKEN: &str = "b2JzZXJ2ZWQtdG9rZW4=";

/// A Secret an earlier plugin produced.
fn db_credentials() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-credentials", "namespace": "shop"},
        "data": {"password": PASSWORD},
    })
}

/// A Secret observed as the parent's child.
fn observed_token() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": "observed-token", "namespace": "shop",
            "labels": {"windlass.dev/parent-uid": "u1"},
        },
        "data": {"token": TOKEN},
    })
}

/// Runs the exfiltrating guest after an earlier plugin's Secret, with a Secret observed.
fn run_exfiltrate(grants: Grants) -> Outcome {
    let pipeline = Pipeline {
        stages: vec![Stage {
            grants,
            ..Stage::new(Arc::new(load(guests::EXFILTRATE)))
        }],
        policy: Default::default(),
    };
    let observed = [observed_token()];
    let earlier = [db_credentials()];
    pipeline
        .run(Input {
            earlier: &earlier,
            ..Input::new(Phase::Reconcile, &thing(), &observed, NOW)
        })
        .expect("the exfiltrating guest's output passes the policy")
}

/// The ConfigMap `loot` the guest produced.
fn loot(out: &Outcome) -> &Value {
    let loot = out
        .desired
        .iter()
        .find(|d| d.object.kind == "v1/ConfigMap" && d.object.name == "loot")
        .unwrap_or_else(|| panic!("no loot ConfigMap in {:?}", produced(out)));
    assert_eq!(loot.plugin, "guest-exfiltrate");
    &loot.object.object["data"]
}

/// Everything the guest wrote that is not the desired Secrets: the loot, status, conditions
/// and events.
fn side_channels(out: &Outcome) -> String {
    let conditions: Vec<&str> = out
        .conditions
        .iter()
        .map(|c| c.item.message.as_str())
        .collect();
    let events: Vec<&str> = out.events.iter().map(|e| e.item.message.as_str()).collect();
    format!(
        "{} {} {conditions:?} {events:?}",
        loot(out),
        Value::Object(out.status.clone())
    )
}

#[test]
fn a_plugin_not_granted_secrets_sees_none_and_passes_earlier_ones_on_unchanged() {
    let (out, log) = capture_log(|| run_exfiltrate(Grants::Declared));
    assert_eq!(loot(&out), &json!({}));
    assert_eq!(Value::Object(out.status.clone()), json!({"loot": {}}));
    assert_eq!(out.conditions.len(), 1);
    assert_eq!(out.conditions[0].item.message, "{}");
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].item.message, "{}");
    let leaks = format!("{} {log}", side_channels(&out));
    for value in [PASSWORD, "super-secret", TOKEN, "observed-token"] {
        assert!(!leaks.contains(value), "{value} leaked: {leaks}");
    }
    // The earlier Secret, withheld from the guest, is passed on past it unchanged.
    let secret = out
        .desired
        .iter()
        .find(|d| d.object.kind == "v1/Secret")
        .unwrap_or_else(|| panic!("the earlier Secret is gone: {:?}", produced(&out)));
    assert_eq!(secret.object.object, db_credentials());
    let mut objects = produced(&out);
    objects.sort();
    assert_eq!(
        objects,
        ["v1/ConfigMap shop/loot", "v1/Secret shop/db-credentials"]
    );
    assert_still_serving();
}

#[test]
fn a_plugin_granted_secrets_by_name_sees_them() {
    let out = run_exfiltrate(granted(&["v1/Secret", "v1/ConfigMap"]));
    let expected = json!({"db-credentials.password": PASSWORD, "observed-token.token": TOKEN});
    assert_eq!(loot(&out), &expected);
    assert_eq!(
        Value::Object(out.status.clone()),
        json!({"loot": expected.clone()})
    );
    assert_eq!(out.events[0].item.message, expected.to_string());
}

#[test]
fn a_secret_withheld_from_a_plugin_keeps_its_producer() {
    // storage produces a Secret with a random password; the exfiltrating guest after it must
    // neither see it nor be recorded as its producer.
    let pipeline = Pipeline {
        stages: vec![
            Stage::new(Arc::new(load(guests::STORAGE))),
            Stage::new(Arc::new(load(guests::EXFILTRATE))),
        ],
        policy: Default::default(),
    };
    let out = pipeline
        .run(Input::new(Phase::Reconcile, &sampledb(), &[], NOW))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loot(&out), &json!({}));
    let secret = out
        .desired
        .iter()
        .find(|d| d.object.kind == "v1/Secret")
        .unwrap_or_else(|| panic!("the storage Secret is gone: {:?}", produced(&out)));
    let password = ["data", "stringData"]
        .iter()
        .find_map(|f| secret.object.object[f]["password"].as_str())
        .expect("the storage Secret holds a password");
    assert!(!side_channels(&out).contains(password));
    let producers: Vec<(String, &str)> = out
        .desired
        .iter()
        .map(|d| {
            (
                format!("{} {}", d.object.kind, d.object.name),
                d.plugin.as_str(),
            )
        })
        .collect();
    for (object, plugin) in &producers {
        let expected = if object == "v1/ConfigMap loot" {
            "guest-exfiltrate"
        } else {
            "sampledb-storage"
        };
        assert_eq!(*plugin, expected, "producer of {object}: {producers:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// guest-hostile-output's floods

/// The flood attack, with `config` (the flood's counts) added to it.
fn flood_config(config: Value) -> Value {
    let mut config = config;
    config["attack"] = json!("flood");
    config
}

fn run_flood(config: Value) -> Result<Outcome, pipeline::Error> {
    run(stage(
        &Arc::new(load(guests::HOSTILE_OUTPUT)),
        flood_config(config),
    ))
}

#[test]
fn seventeen_events_in_one_call_are_refused() {
    Refusal {
        plugin: "guest-hostile-output",
        rule: Rule::OutputTooLarge,
        object: "events",
        field: "",
        why: &["17 events in one call is more than the limit of 16"],
    }
    .assert(&run_flood(json!({"events": 17})));
    assert_still_serving();
}

#[test]
fn thirty_three_conditions_in_one_call_are_refused() {
    Refusal {
        plugin: "guest-hostile-output",
        rule: Rule::OutputTooLarge,
        object: "conditions",
        field: "",
        why: &["33 conditions in one call is more than the limit of 32"],
    }
    .assert(&run_flood(json!({"conditions": 33})));
    assert_still_serving();
}

/// A status fragment is kept to 64 KiB of JSON: one of 70,000 bytes is refused naming its size;
/// one of 60,000 passes.
#[test]
fn a_status_fragment_over_64_kib_is_refused() {
    Refusal {
        plugin: "guest-hostile-output",
        rule: Rule::OutputTooLarge,
        object: "status",
        field: "",
        why: &["70014 bytes is more than the limit of 65536"],
    }
    .assert(&run_flood(json!({"statusBytes": 70_000})));
    let out = run_flood(json!({"statusBytes": 60_000})).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out.status["padding"].as_str().map(str::len),
        Some(60_000),
        "the fragment passed whole"
    );
    assert_still_serving();
}

#[test]
fn long_event_notes_are_cut_to_the_api_servers_limit() {
    let out = run_flood(json!({"events": 3, "messageBytes": 5000})).unwrap();
    assert_eq!(out.events.len(), 3);
    for e in &out.events {
        let message = &e.item.message;
        assert!(message.len() <= 1024, "{} bytes", message.len());
        assert!(message.starts_with("xxxx"), "{message}");
        assert!(message.ends_with("[cut by the host]"), "{message}");
    }
    assert_still_serving();
}

#[test]
fn a_long_condition_message_is_cut_to_32_kib() {
    let out = run_flood(json!({"conditions": 1, "messageBytes": 40_000})).unwrap();
    assert_eq!(out.conditions.len(), 1);
    let message = &out.conditions[0].item.message;
    assert!(message.len() <= 32 * 1024, "{} bytes", message.len());
    assert!(message.len() > 30 * 1024, "{} bytes", message.len());
    assert!(
        message.ends_with("[cut by the host]"),
        "{}",
        &message[32_000..]
    );
    assert_still_serving();
}

#[test]
fn a_flood_of_log_lines_is_capped_and_the_call_still_returns() {
    // Loaded (and compiled) before the clock starts; default limits.
    let flood = Arc::new(load(guests::HOSTILE_OUTPUT));
    let started = Instant::now();
    let (result, log) = capture_log(|| {
        run(stage(
            &flood,
            flood_config(json!({"logLines": 100_000, "logBytes": 100})),
        ))
    });
    let took = started.elapsed();
    println!("100,000 log lines: the call returned after {took:?}");
    result.unwrap_or_else(|e| panic!("{e}"));
    // A safety bound only.
    assert!(took < Duration::from_secs(30), "{took:?}");
    let line = "x".repeat(100);
    let logged = log.lines().filter(|l| l.contains(&line)).count();
    assert_eq!(logged, 200, "log lines kept: the cap, all of it");
    assert!(
        log.contains("more than 200 log lines in one call; dropping the rest"),
        "{}",
        log.lines().last().unwrap_or_default()
    );
    assert_still_serving();
}

/// A log line is kept to 4 KiB; the rest is cut, saying how much.
#[test]
fn a_log_line_longer_than_4_kib_is_cut_saying_how_much() {
    let (result, log) = capture_log(|| run_flood(json!({"logLines": 1, "logBytes": 10_000})));
    result.unwrap_or_else(|e| panic!("{e}"));
    let line = log
        .lines()
        .find(|l| l.contains("xxxx"))
        .expect("the log line");
    let kept = line.split(|c| c != 'x').map(str::len).max().unwrap_or(0);
    assert_eq!(kept, 4096, "bytes kept of the line");
    assert!(
        line.contains(&format!(
            "{} … [5904 more bytes cut by the host] ",
            "x".repeat(4096)
        )),
        "{}",
        &line[line.len().saturating_sub(80)..]
    );
}

#[test]
fn a_guest_log_line_cannot_start_a_line_of_the_hosts_log_nor_rewrite_the_terminal() {
    let guest = Arc::new(load(guests::HOSTILE_CONTROLLERS));
    let (result, log) = capture_log(|| run(stage(&guest, json!({"attack": "logForge"}))));
    result.unwrap_or_else(|e| panic!("{e}"));
    const FORGED: &str = "INFO windlass: plugin version swapped in wasm_plugin=billing";
    let line = log
        .lines()
        .find(|l| l.contains(FORGED))
        .unwrap_or_else(|| panic!("the guest's line was not logged: {log}"));
    assert!(
        line.contains(&format!(r"ok\n{FORGED}\r{FORGED}\u{{1b}}[2K{FORGED}")),
        "{line}"
    );
    assert!(
        line.contains("plugin=\"guest-hostile-controllers\""),
        "{line}"
    );
    // One line, and every line of the log that names the forged text is the guest's own.
    assert_eq!(
        log.lines().filter(|l| l.contains(FORGED)).count(),
        1,
        "{log}"
    );
    assert!(!log.contains('\r') && !log.contains('\u{1b}'), "{log:?}");
}

// ---------------------------------------------------------------------------------------------
// guest-hostile-output's sleeps, guest-sleep-info

const LIMIT: Duration = Duration::from_millis(300);

/// The wall-time bound on a call that waits past its limit: the issue's 2× the limit, plus
/// slack for a loaded test machine.
fn bound() -> Duration {
    2 * LIMIT + Duration::from_millis(500)
}

/// A guest waiting 15 s in `how` is stopped with a timeout, well before 15 s.
fn assert_sleep_stopped_at_its_deadline(how: &str) {
    let plugin = load_with(guests::HOSTILE_OUTPUT, with_timeout(LIMIT));
    let started = Instant::now();
    let err = plugin
        .call(&request(
            json!({"attack": "sleep", "how": how, "ms": 15_000}),
        ))
        .unwrap_err();
    let took = started.elapsed();
    println!("{how}: stopped after {took:?} (limit {LIMIT:?})");
    assert!(
        matches!(&err, Error::Timeout { plugin, limit } if plugin == "guest-hostile-output" && *limit == LIMIT),
        "{how}: {err}"
    );
    assert_eq!(
        err.to_string(),
        "plugin guest-hostile-output: timed out after 300ms"
    );
    assert!(took < bound(), "{how}: the call returned after {took:?}");
    assert_still_serving();
}

#[test]
fn a_guest_in_a_std_sleep_is_stopped_at_its_deadline() {
    assert_sleep_stopped_at_its_deadline("sleep");
}

#[test]
fn a_guest_polling_a_duration_timer_is_stopped_at_its_deadline() {
    assert_sleep_stopped_at_its_deadline("poll");
}

#[test]
fn a_guest_polling_an_instant_timer_is_stopped_at_its_deadline() {
    assert_sleep_stopped_at_its_deadline("instant");
}

#[test]
fn a_guest_blocked_on_a_pollable_is_stopped_at_its_deadline() {
    assert_sleep_stopped_at_its_deadline("block");
}

#[test]
fn a_short_wait_in_every_way_finishes_within_the_limit() {
    let plugin = load_with(guests::HOSTILE_OUTPUT, with_timeout(LIMIT));
    for how in ["sleep", "poll", "instant", "block"] {
        let resp = plugin.call(&request(json!({"attack": "sleep", "how": how, "ms": 1})));
        assert!(resp.is_ok(), "{how}: {}", resp.unwrap_err());
    }
}

#[test]
fn a_guest_sleeping_in_info_times_out_at_load() {
    let load = || {
        let started = Instant::now();
        let err = runtime()
            .load(
                "guest-sleep-info",
                &guests::bytes(guests::SLEEP_INFO),
                with_timeout(LIMIT),
            )
            .unwrap_err();
        (err, started.elapsed())
    };
    // The first load compiles the component too; the second finds it compiled in memory, so
    // its time is the `info` deadline alone.
    for (round, bound) in [("first", Duration::from_secs(10)), ("second", bound())] {
        let (err, took) = load();
        println!("{round} load: stopped after {took:?} (limit {LIMIT:?})");
        assert!(
            matches!(&err, Error::Timeout { plugin, limit } if plugin == "guest-sleep-info" && *limit == LIMIT),
            "{round} load: {err}"
        );
        assert!(took < bound, "{round} load returned after {took:?}");
    }
    assert_still_serving();
}

// ---------------------------------------------------------------------------------------------
// guest-hostile-output's clock and pollables, guest-stateful

#[test]
fn a_guest_reads_the_requests_now_and_no_clock_of_the_hosts() {
    let clock = load(guests::HOSTILE_OUTPUT);
    let status_at = |now: &str| {
        let resp = clock
            .call(&Request {
                now: now.into(),
                ..request(json!({"attack": "clock"}))
            })
            .unwrap();
        serde_json::from_str::<Value>(&resp.status.unwrap()).unwrap()
    };
    let now = "2030-01-02T03:04:05Z";
    let seconds = now.parse::<jiff::Timestamp>().unwrap().as_second();
    assert_eq!(seconds, 1_893_553_445);
    let status = status_at(now);
    assert_eq!(status["wall"], seconds, "{status}");
    assert_eq!(status["wallNanos"], 0, "{status}");
    assert_eq!(status["stdSystemTime"], seconds, "{status}");
    // The monotonic clock starts at one millisecond with each instance (never zero, which Go's
    // runtime refuses), not at the host's uptime.
    let monotonic = status["monotonic"].as_u64().expect("monotonic is a number");
    assert!((1_000_000..10_000_000_000).contains(&monotonic), "{status}");
    let random = status["random"].as_str().expect("random is a string");
    assert!(
        !random.is_empty() && random.parse::<u64>().is_ok(),
        "{status}"
    );

    let later = "2031-06-07T08:09:10Z";
    let status = status_at(later);
    let seconds = later.parse::<jiff::Timestamp>().unwrap().as_second();
    assert_eq!(status["wall"], seconds, "{status}");
    assert_eq!(status["stdSystemTime"], seconds, "{status}");
}

#[test]
fn a_guest_holding_millions_of_pollables_traps_at_the_resource_cap() {
    let err = load(guests::HOSTILE_OUTPUT)
        .call(&request(json!({"attack": "pollables"})))
        .unwrap_err();
    let Error::Trap { plugin, message } = &err else {
        panic!("expected a trap, got {err}")
    };
    assert_eq!(plugin, "guest-hostile-output");
    assert!(message.contains("WASI resources"), "{message}");
    assert!(message.contains("more than 10000"), "{message}");
    assert_eq!(err.reason(), "Trap");
    assert_still_serving();
}

/// The `calls` counter the stateful guest reported, and whether the instance was reused.
fn calls_for(plugin: &Plugin, tenant: &str) -> (u64, bool) {
    let (resp, stats) = plugin.call_for(tenant, &request(json!({})));
    let status: Value = serde_json::from_str(&resp.unwrap().status.unwrap()).unwrap();
    (status["calls"].as_u64().unwrap(), stats.reused)
}

#[test]
fn a_reused_instance_carries_state_within_a_tenant_but_never_across_tenants() {
    let reused = load_with(
        guests::STATEFUL,
        LoadOptions {
            mode: InstanceMode::Reuse,
            ..Default::default()
        },
    );
    assert_eq!(calls_for(&reused, "ns-a"), (1, false));
    assert_eq!(calls_for(&reused, "ns-a"), (2, true));
    assert_eq!(calls_for(&reused, "ns-b"), (1, false));
    assert_eq!(calls_for(&reused, "ns-a"), (3, true));
    assert_eq!(calls_for(&reused, "ns-b"), (2, true));
}

#[test]
fn the_pipeline_keeps_reused_instances_to_the_parents_namespace() {
    let reused = load_with(
        guests::STATEFUL,
        LoadOptions {
            mode: InstanceMode::Reuse,
            ..Default::default()
        },
    );
    let pipeline = Pipeline {
        stages: vec![Stage::new(Arc::new(reused))],
        policy: Default::default(),
    };
    let calls = |namespace: &str| {
        let out = pipeline
            .run(Input::new(Phase::Reconcile, &thing_in(namespace), &[], NOW))
            .unwrap();
        out.status["calls"].as_u64().unwrap()
    };
    assert_eq!(calls("ns-a"), 1);
    assert_eq!(calls("ns-a"), 2);
    assert_eq!(calls("ns-b"), 1);
}

// ---------------------------------------------------------------------------------------------
// guest-hostile-config: the config check at load (contract 0.2.0)

/// `validate` of guest-hostile-config doing `how`, with its wall time.
fn validate(plugin: &Plugin, how: &str) -> (Result<(), Error>, Duration) {
    let started = Instant::now();
    let result = plugin.validate_config(&json!({"validate": how}).to_string());
    (result, started.elapsed())
}

#[test]
fn a_config_check_is_held_to_the_limits_of_a_call() {
    let options = LoadOptions {
        limits: windlass_runtime::Limits {
            timeout: LIMIT,
            memory_bytes: 32 << 20,
            ..windlass_runtime::Limits::default()
        },
        ..LoadOptions::default()
    };
    let plugin = load_with(guests::HOSTILE_CONFIG, options);
    assert!(plugin.checks_config(), "a 0.2.0 plugin checks its config");
    let name = "guest-hostile-config";
    for how in ["loop", "sleep"] {
        let (result, took) = validate(&plugin, how);
        println!("{how}: stopped after {took:?} (limit {LIMIT:?})");
        assert!(
            matches!(&result, Err(Error::Timeout { plugin, limit }) if plugin == name && *limit == LIMIT),
            "{how}: {result:?}"
        );
        assert!(took < bound(), "{how}: the check returned after {took:?}");
    }
    let (result, _) = validate(&plugin, "grow");
    assert!(
        matches!(&result, Err(Error::MemoryLimit { plugin, limit }) if plugin == name && *limit == 32 << 20),
        "grow: {result:?}"
    );
    let (result, _) = validate(&plugin, "panic");
    assert!(
        matches!(&result, Err(Error::Trap { plugin, message }) if plugin == name && message.contains("validate panicked on purpose")),
        "panic: {result:?}"
    );
    let (result, _) = validate(&plugin, "refuse");
    let err = result.unwrap_err();
    assert_eq!(err.reason(), "InvalidConfig");
    assert_eq!(
        err.to_string(),
        "plugin guest-hostile-config: invalid config: validate: refused on purpose"
    );
    // A long refusal comes back whole (it fits the memory limit); the operator cuts it where it
    // writes it (a condition, an event).
    let (result, _) = validate(&plugin, "long");
    assert!(
        matches!(&result, Err(Error::Plugin { message, .. }) if message.len() > 8 << 20),
        "long: {:?}",
        result.map_err(|e| e.reason())
    );
    // Every check runs in a fresh instance: after all that, the plugin accepts a good config
    // and serves a call.
    assert!(validate(&plugin, "ok").0.is_ok());
    let resp = plugin.call(&request(json!({})));
    assert!(resp.is_ok(), "{}", resp.unwrap_err());
    assert_still_serving();
}

/// A 0.1.0 plugin has no check: any config passes at load (it may refuse it in a call).
#[test]
fn a_plugin_of_contract_0_1_accepts_any_config_at_load() {
    let plugin = load(guests::HOSTILE_FINALIZE);
    assert!(!plugin.checks_config());
    assert!(plugin.validate_config("{\"anything\": 1}").is_ok());
    // Plugins built with the Rust SDK speak 0.2.0: the upgrade plugin checks its versions.
    let upgrade = load(guests::UPGRADE);
    assert!(upgrade.checks_config());
    let err = upgrade
        .validate_config(&json!({"supportedVersions": ["16.4", "latest"]}).to_string())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin sampledb-upgrade: invalid config: supportedVersions[1]: \"latest\" is not a version like 16.4"
    );
    assert!(
        upgrade
            .validate_config(&json!({"supportedVersions": ["16.4", "17.0"]}).to_string())
            .is_ok()
    );
}
