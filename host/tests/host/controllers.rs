//! Containment, second round: what the cluster's own controllers do with what the host applied.
//! A hostile guest written against the WIT without the SDK (`guest-hostile-controllers`) returns
//! objects that are harmless as written and harmful once a StatefulSet, ReplicaSet, Deployment,
//! Job or CronJob controller acts on them. Each test runs on the devcluster and, in CI's second
//! pass, on a real control plane, where those controllers run; each checks the victim intact
//! afterwards (its uid, labels and owner references).

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet, StatefulSet},
    batch::v1::{CronJob, Job},
    core::v1::{PersistentVolumeClaim, Pod, Service},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use windlass::controller::plan::{ADOPT_RETAINED_ANNOTATION, PARENT_ANNOTATION, PARENT_UID_LABEL};
use windlass_test_guests as guests;

use crate::containment::{hostile_env, reconciled, snapshot};
use crate::support::*;

const PLUGIN: &str = "guest-hostile-controllers";

fn api<K>(env: &Env) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    Api::namespaced(env.client.clone(), "shop")
}

async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .expect("created");
}

/// The Pods the EndpointSlices of Service `service` list, by name, sorted (none on the
/// devcluster, which runs no EndpointSlice controller).
async fn endpoints(env: &Env, service: &str) -> Vec<String> {
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> = api(env);
    let params =
        kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    let mut names: Vec<String> = slices
        .list(&params)
        .await
        .expect("EndpointSlices")
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect();
    names.sort();
    names
}

/// What must not change on a victim: its uid, labels, annotations and owner references.
fn identity(object: &Value) -> Value {
    let meta = &object["metadata"];
    json!({
        "uid": meta["uid"],
        "labels": meta["labels"],
        "annotations": meta["annotations"],
        "ownerReferences": meta["ownerReferences"],
        "deletionTimestamp": meta["deletionTimestamp"],
    })
}

fn value<T: serde::Serialize>(object: T) -> Value {
    serde_json::to_value(object).unwrap()
}

pub(crate) async fn thing_uid(env: &Env, name: &str) -> String {
    env.things()
        .get(name)
        .await
        .expect("the Thing")
        .uid()
        .unwrap()
}

async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{name} gone"), || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Another application's claim, bound to its volume.
async fn victim_claim(env: &Env, name: &str) -> Value {
    let claims: Api<PersistentVolumeClaim> = api(env);
    create(
        &claims,
        json!({"metadata": {"name": name, "labels": {"app": "orders"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    eventually(&format!("{name} bound"), || async {
        let c = claims.get(name).await.ok()?;
        (c.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;
    snapshot(&claims, name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_whose_claim_would_be_another_applications_volume_is_refused_and_the_volume_outlives_the_attacker()
 {
    let env = hostile_env("hostile", guests::HOSTILE_CONTROLLERS, json!({})).await;
    let before = victim_claim(&env, "pgdata-orders-db-0").await;

    env.create_thing("attacker", json!({"hostile": {"attack": "claimName"}}))
        .await;
    let c = reconciled(&env, "attacker", "False").await;
    assert_eq!(c["reason"], "ObjectNotOwned", "{c}");
    assert_eq!(
        c["message"],
        format!(
            "plugin {PLUGIN}: invalid output (ObjectNotOwned): apps/v1/StatefulSet shop/db: spec.volumeClaimTemplates[0]: would make v1/PersistentVolumeClaim shop/pgdata-orders-db-0, which exists and is not this parent's: the StatefulSet controller would take it over"
        )
    );
    assert!(
        api::<StatefulSet>(&env)
            .get_opt("db")
            .await
            .unwrap()
            .is_none(),
        "nothing was written"
    );
    // The attacker's parent goes, with everything it had: the claim stays as it was.
    env.things()
        .delete("attacker", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&env.things(), "attacker").await;
    let claims: Api<PersistentVolumeClaim> = api(&env);
    let after = snapshot(&claims, "pgdata-orders-db-0").await;
    assert_eq!(identity(&after), identity(&before));
    assert_eq!(after["spec"]["volumeName"], before["spec"]["volumeName"]);
    let metrics = env.metrics().await;
    assert!(
        metrics.contains(&format!(
            r#"windlass_policy_refusals_total{{plugin="{PLUGIN}",rule="ObjectNotOwned"}}"#
        )),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_takes_over_the_claims_its_namesake_retained_only_when_it_asks() {
    let env = hostile_env("hostile", guests::HOSTILE_CONTROLLERS, json!({})).await;
    let claims: Api<PersistentVolumeClaim> = api(&env);
    let spec = json!({"hostile": {"attack": "claimName", "name": "keep", "template": "data"}});
    env.create_thing("keep", spec.clone()).await;
    reconciled(&env, "keep", "True").await;
    let first = thing_uid(&env, "keep").await;
    let made = eventually("the StatefulSet's claim", || async {
        let c = serde_json::to_value(claims.get("data-keep-0").await.ok()?).ok()?;
        (c["metadata"]["labels"][PARENT_UID_LABEL] == first.as_str()).then_some(c)
    })
    .await;
    assert_eq!(
        made["metadata"]["annotations"][PARENT_ANNOTATION],
        "Thing.example.com shop/keep"
    );
    // The parent goes; its StatefulSet with it; the claim is retained (the default policy).
    env.things()
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&env.things(), "keep").await;
    wait_gone(&api::<StatefulSet>(&env), "keep").await;
    wait_gone(&api::<Pod>(&env), "keep-0").await;
    let retained = snapshot(&claims, "data-keep-0").await;
    assert_eq!(retained["metadata"]["uid"], made["metadata"]["uid"]);

    // A new parent of that name does not take it over unasked.
    env.create_thing("keep", spec).await;
    let c = reconciled(&env, "keep", "False").await;
    let message = c["message"].as_str().unwrap();
    assert!(
        message.ends_with(&format!("retained by an earlier Thing of this name; the StatefulSet controller would take it over: set the annotation {ADOPT_RETAINED_ANNOTATION}: \"true\" on the parent to take it over on purpose")),
        "{message}"
    );
    assert!(
        api::<StatefulSet>(&env)
            .get_opt("keep")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        identity(&snapshot(&claims, "data-keep-0").await),
        identity(&retained)
    );

    // Asked, it does: the same volume, now labelled as the new parent's.
    env.things()
        .patch(
            "keep",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {ADOPT_RETAINED_ANNOTATION: "true"}}}),
            ),
        )
        .await
        .unwrap();
    reconciled(&env, "keep", "True").await;
    let second = thing_uid(&env, "keep").await;
    assert_ne!(first, second);
    let adopted = snapshot(&claims, "data-keep-0").await;
    assert_eq!(adopted["metadata"]["uid"], made["metadata"]["uid"]);
    assert_eq!(
        adopted["metadata"]["labels"][PARENT_UID_LABEL],
        second.as_str()
    );
    assert!(
        api::<StatefulSet>(&env)
            .get_opt("keep")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_selector_the_host_applies_reaches_only_the_parents_pods() {
    let env = hostile_env("hostile", guests::HOSTILE_CONTROLLERS, json!({})).await;
    let pods: Api<Pod> = api(&env);
    // Another application's bare Pod, which any of these selectors as written would adopt.
    create(
        &pods,
        json!({"metadata": {"name": "billing-0", "labels": {"app": "billing"}},
            "spec": {"containers": [{"name": "c", "image": "billing"}]}}),
    )
    .await;
    let before = snapshot(&pods, "billing-0").await;
    for (name, attack) in [
        ("rs", "adoptReplicaSet"),
        ("deploy", "adoptDeployment"),
        ("job", "adoptJob"),
        ("svc", "serviceSelector"),
    ] {
        env.create_thing(name, json!({"hostile": {"attack": attack, "name": name}}))
            .await;
        reconciled(&env, name, "True").await;
    }
    if real_cluster() {
        // The ReplicaSet and Deployment controllers have synced (adoption is part of a sync).
        eventually("the controllers synced", || async {
            let rs = api::<ReplicaSet>(&env).get("rs").await.ok()?;
            let d = api::<Deployment>(&env).get("deploy").await.ok()?;
            let synced = |generation: Option<i64>, observed: Option<i64>| {
                generation.is_some() && observed == generation
            };
            (synced(rs.metadata.generation, rs.status?.observed_generation)
                && synced(d.metadata.generation, d.status?.observed_generation))
            .then_some(())
        })
        .await;
    }
    // The victim first: had any selector adopted it, it would carry an owner reference now.
    assert_eq!(
        identity(&snapshot(&pods, "billing-0").await),
        identity(&before)
    );
    let narrowed = |object: Value, pointer: &str, parent: &str| {
        assert_eq!(
            object
                .pointer(pointer)
                .and_then(|s| s.get(PARENT_UID_LABEL)),
            Some(&json!(parent)),
            "{pointer}: {object}"
        );
        assert_eq!(object.pointer(pointer).unwrap()["app"], "billing");
    };
    let rs = api::<ReplicaSet>(&env).get("rs").await.unwrap();
    narrowed(
        value(rs),
        "/spec/selector/matchLabels",
        &thing_uid(&env, "rs").await,
    );
    let deploy = api::<Deployment>(&env).get("deploy").await.unwrap();
    narrowed(
        value(deploy),
        "/spec/selector/matchLabels",
        &thing_uid(&env, "deploy").await,
    );
    let job = api::<Job>(&env).get("job").await.unwrap();
    narrowed(
        value(job),
        "/spec/selector/matchLabels",
        &thing_uid(&env, "job").await,
    );
    let svc = api::<Service>(&env).get("svc").await.unwrap();
    narrowed(value(svc), "/spec/selector", &thing_uid(&env, "svc").await);

    // Had a child adopted it anyway (an older host, a hand-made owner reference), the parent
    // still may not label it: an adopted object is not made from the parent's templates.
    let rs_uid = api::<ReplicaSet>(&env)
        .get("rs")
        .await
        .unwrap()
        .uid()
        .unwrap();
    pods.patch(
        "billing-0",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "rs", "uid": rs_uid, "controller": true}]}}),
        ),
    )
    .await
    .unwrap();
    let adopted = snapshot(&pods, "billing-0").await;
    env.things()
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"hostile": {"attack": "labelAdopted", "target": "billing-0"}}}),
            ),
        )
        .await
        .unwrap();
    let c = reconciled(&env, "rs", "False").await;
    assert_eq!(c["reason"], "ObjectNotOwned", "{c}");
    let labels = snapshot(&pods, "billing-0").await["metadata"]["labels"].clone();
    assert_eq!(
        labels, adopted["metadata"]["labels"],
        "the victim was labelled"
    );
    assert_eq!(labels, json!({"app": "billing"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_and_owners_in_templates_never_reach_what_the_controllers_make() {
    let env = hostile_env("hostile", guests::HOSTILE_CONTROLLERS, json!({})).await;
    env.create_thing(
        "held",
        json!({"hostile": {"attack": "templateFinalizers", "name": "held"}}),
    )
    .await;
    reconciled(&env, "held", "True").await;
    let sts = serde_json::to_value(api::<StatefulSet>(&env).get("held").await.unwrap()).unwrap();
    for template in [
        &sts["spec"]["template"]["metadata"],
        &sts["spec"]["volumeClaimTemplates"][0]["metadata"],
    ] {
        assert!(template.get("finalizers").is_none(), "{template}");
        assert!(template.get("ownerReferences").is_none(), "{template}");
    }
    let pods: Api<Pod> = api(&env);
    let claims: Api<PersistentVolumeClaim> = api(&env);
    let pod = eventually("the StatefulSet's Pod", || async {
        pods.get("held-0").await.ok()
    })
    .await;
    let claim = eventually("its claim", || async {
        claims.get("pgdata-orders-held-0").await.ok()
    })
    .await;
    assert!(pod.finalizers().is_empty(), "{:?}", pod.finalizers());
    assert!(
        claim
            .finalizers()
            .iter()
            .all(|f| f.starts_with("kubernetes.io/")),
        "{:?}",
        claim.finalizers()
    );
    assert!(
        pod.owner_references()
            .iter()
            .all(|r| r.kind == "StatefulSet"),
        "{:?}",
        pod.owner_references()
    );
    // Nothing holds the Pod when its parent goes.
    env.things()
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&pods, "held-0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_kinds_amplification_forged_events_foreign_devices_and_git_volumes_are_refused() {
    // At baseline, so that the gitRepo rule, not the restricted volume list, is what refuses.
    let env = hostile_env(
        "hostile",
        guests::HOSTILE_CONTROLLERS,
        json!({"podSecurity": {"level": "baseline"}}),
    )
    .await;
    let services: Api<Service> = api(&env);
    create(
        &services,
        json!({"metadata": {"name": "billing", "labels": {"app": "billing"}},
            "spec": {"selector": {"app": "billing"}, "ports": [{"port": 80}]}}),
    )
    .await;
    let before = snapshot(&services, "billing").await;
    let table: [(&str, &str, &str, &str); 8] = [
        (
            "spawn",
            "parentKind",
            "ParentKind",
            "desired[0] example.com/v1/Thing spawn-spawn: kind example.com/v1/Thing is a kind the host serves as a parent",
        ),
        (
            "wide",
            "replicas",
            "Amplification",
            "desired[0] apps/v1/Deployment shop/wide: spec.replicas: 1000000 is more than the 100 Pods",
        ),
        (
            "par",
            "parallelism",
            "Amplification",
            "desired[0] batch/v1/Job shop/par: spec.parallelism: 1000000 is more than the 100 Pods",
        ),
        (
            "cron",
            "cronAllow",
            "Amplification",
            "desired[0] batch/v1/CronJob shop/cron: spec.concurrencyPolicy: Allow (the default) starts a Job at every tick",
        ),
        (
            "ev1",
            "event",
            "PrivilegedKind",
            "desired[0] v1/Event billing.forged: kind v1/Event confers privileges",
        ),
        (
            "ev2",
            "eventV1",
            "PrivilegedKind",
            "desired[0] events.k8s.io/v1/Event billing.forged: kind events.k8s.io/v1/Event confers privileges",
        ),
        (
            "claim",
            "resourceClaim",
            "ForeignReference",
            "desired[0] batch/v1/Job claim: spec.template.spec.resourceClaims[0].resourceClaimName: names resource.k8s.io/ResourceClaim \"billing\"",
        ),
        (
            "git",
            "gitRepo",
            "PodSecurity",
            "desired[0] batch/v1/Job git: spec.template.spec.volumes[0].gitRepo: a gitRepo volume runs git on the node",
        ),
    ];
    for (name, attack, rule, what) in table {
        env.create_thing(name, json!({"hostile": {"attack": attack, "name": name}}))
            .await;
        let c = reconciled(&env, name, "False").await;
        let message = c["message"].as_str().unwrap();
        let prefix = format!("plugin {PLUGIN}: invalid output ({rule}): {what}");
        assert!(
            message.starts_with(&prefix),
            "{attack}:\n{message}\nwanted\n{prefix}"
        );
        let metrics = env.metrics().await;
        assert!(
            metrics.contains(&format!(
                r#"windlass_policy_refusals_total{{plugin="{PLUGIN}",rule="{rule}"}}"#
            )),
            "{metrics}"
        );
    }
    // Nothing of it reached the cluster.
    assert!(env.things().get_opt("spawn-spawn").await.unwrap().is_none());
    assert!(
        api::<Deployment>(&env)
            .get_opt("wide")
            .await
            .unwrap()
            .is_none()
    );
    assert!(api::<Job>(&env).get_opt("par").await.unwrap().is_none());
    assert!(
        api::<CronJob>(&env)
            .get_opt("cron")
            .await
            .unwrap()
            .is_none()
    );
    assert!(api::<Job>(&env).get_opt("git").await.unwrap().is_none());
    let core_events: Api<k8s_openapi::api::core::v1::Event> = api(&env);
    assert!(
        core_events
            .get_opt("billing.forged")
            .await
            .unwrap()
            .is_none()
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = api(&env);
    assert!(events.get_opt("billing.forged").await.unwrap().is_none());
    assert_eq!(
        identity(&snapshot(&services, "billing").await),
        identity(&before)
    );
    // The same plugin with a harmless attack is still served.
    env.create_thing(
        "ok",
        json!({"hostile": {"attack": "serviceSelector", "name": "ok"}}),
    )
    .await;
    reconciled(&env, "ok", "True").await;
    let things: Vec<DynamicObject> = env.things().list(&Default::default()).await.unwrap().items;
    let names: BTreeMap<String, ()> = things.iter().map(|t| (t.name_any(), ())).collect();
    assert_eq!(
        names.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "claim", "cron", "ev1", "ev2", "git", "ok", "par", "spawn", "wide"
        ],
        "no parent made a parent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_would_join_another_applications_service_or_dns_name_are_refused_naming_it() {
    let env = hostile_env("hostile", guests::HOSTILE_CONTROLLERS, json!({})).await;
    let services: Api<Service> = api(&env);
    for (name, cluster_ip) in [("billing", None), ("billing-headless", Some("None"))] {
        let mut spec = json!({"selector": {"app": "billing"}, "ports": [{"port": 80}]});
        if let Some(ip) = cluster_ip {
            spec["clusterIP"] = json!(ip);
        }
        create(
            &services,
            json!({"metadata": {"name": name, "labels": {"app": "billing"}}, "spec": spec}),
        )
        .await;
    }
    // The victim's own Pod, behind both Services. On the real control plane the EndpointSlice
    // controller lists it; the attacker's pods must never join it there.
    create(
        &api::<Pod>(&env),
        json!({"metadata": {"name": "billing-0", "labels": {"app": "billing"}},
            "spec": {"automountServiceAccountToken": false,
                "containers": [{"name": "db", "image": "busybox"}]}}),
    )
    .await;
    if env.dev().is_none() {
        for service in ["billing", "billing-headless"] {
            eventually(&format!("{service}'s endpoints list billing-0"), || async {
                (endpoints(&env, service).await == ["billing-0"]).then_some(())
            })
            .await;
        }
    }
    // And a NetworkPolicy: only `app: billing-api` pods may reach the database.
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> = api(&env);
    create(
        &policies,
        json!({"metadata": {"name": "billing-db"}, "spec": {
            "podSelector": {"matchLabels": {"app": "billing-db"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "billing-api"}}}]}]}}),
    )
    .await;
    let policy_before = snapshot(&policies, "billing-db").await;
    let before = [
        snapshot(&services, "billing").await,
        snapshot(&services, "billing-headless").await,
    ];
    for (name, attack, what) in [
        (
            "join",
            "joinTraffic",
            "apps/v1/Deployment shop/join: spec.template.metadata.labels: match the selector of Service shop/billing",
        ),
        (
            "peer",
            "joinPolicy",
            "apps/v1/Deployment shop/peer: spec.template.metadata.labels: match an ingress peer (0) of NetworkPolicy shop/billing-db, which is not this parent's: these pods would get the network access it gives another application's pods",
        ),
        (
            "impostor",
            "dnsIdentity",
            "v1/Pod shop/impostor: spec.subdomain: names Service shop/billing-headless, which is not this parent's: these pods would take DNS names under it",
        ),
    ] {
        env.create_thing(name, json!({"hostile": {"attack": attack, "name": name}}))
            .await;
        let c = reconciled(&env, name, "False").await;
        assert_eq!(c["reason"], "ObjectNotOwned", "{c}");
        let message = c["message"].as_str().unwrap();
        let prefix = format!("plugin {PLUGIN}: invalid output (ObjectNotOwned): {what}");
        assert!(message.starts_with(&prefix), "{message}\nwanted\n{prefix}");
    }
    assert!(
        api::<Deployment>(&env)
            .get_opt("join")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        api::<Pod>(&env)
            .get_opt("impostor")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        api::<Deployment>(&env)
            .get_opt("peer")
            .await
            .unwrap()
            .is_none()
    );
    let policy_after = snapshot(&policies, "billing-db").await;
    assert_eq!(identity(&policy_after), identity(&policy_before));
    assert_eq!(policy_after["spec"], policy_before["spec"]);
    for (victim, before) in ["billing", "billing-headless"].into_iter().zip(before) {
        let after = snapshot(&services, victim).await;
        assert_eq!(identity(&after), identity(&before), "{victim}");
        assert_eq!(
            after["spec"]["selector"], before["spec"]["selector"],
            "{victim}"
        );
        if env.dev().is_none() {
            assert_eq!(endpoints(&env, victim).await, ["billing-0"], "{victim}");
        }
    }
    // A Service that selects a parent's pods by the parent's uid chose them: the parent's
    // pods are written, and nobody else's traffic is at stake.
    let uid = thing_uid(&env, "join").await;
    for name in ["billing", "billing-headless"] {
        services
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"selector": {"app": "billing", PARENT_UID_LABEL: uid}}}),
                ),
            )
            .await
            .unwrap();
    }
    reconciled(&env, "join", "True").await;
    assert!(
        api::<Deployment>(&env)
            .get_opt("join")
            .await
            .unwrap()
            .is_some()
    );
}

/// A CronJob names its Jobs `<name>-<minutes>`: with another application's Job of such a name
/// in the namespace, the apply is refused before the CronJob exists, and that Job is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_whose_job_names_another_applications_job_has_is_refused() {
    let env = hostile_env("hostile", guests::HOSTILE_CONTROLLERS, json!({})).await;
    let jobs: Api<Job> = api(&env);
    create(
        &jobs,
        json!({"metadata": {"name": "nightly-29000000", "labels": {"app": "billing"}},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "dump", "image": "busybox"}]}}}}),
    )
    .await;
    let before = snapshot(&jobs, "nightly-29000000").await;
    env.create_thing(
        "nightly",
        json!({"hostile": {"attack": "cronJobName", "name": "nightly"}}),
    )
    .await;
    let c = reconciled(&env, "nightly", "False").await;
    assert_eq!(c["reason"], "ObjectNotOwned", "{c}");
    let message = c["message"].as_str().unwrap();
    let wanted = format!(
        "plugin {PLUGIN}: invalid output (ObjectNotOwned): batch/v1/CronJob shop/nightly: spec.schedule: the CronJob controller names its Jobs nightly-<minutes>; batch/v1/Job shop/nightly-29000000 exists and is not this parent's"
    );
    assert!(message.starts_with(&wanted), "{message}\nwanted\n{wanted}");
    assert!(
        api::<CronJob>(&env)
            .get_opt("nightly")
            .await
            .unwrap()
            .is_none(),
        "nothing is written"
    );
    let after = snapshot(&jobs, "nightly-29000000").await;
    assert_eq!(identity(&after), identity(&before));
    assert_eq!(after["spec"], before["spec"]);
    // Without that Job the same CronJob is the parent's to write.
    jobs.delete("nightly-29000000", &DeleteParams::background())
        .await
        .unwrap();
    wait_gone(&jobs, "nightly-29000000").await;
    reconciled(&env, "nightly", "True").await;
    let cron = api::<CronJob>(&env).get("nightly").await.expect("written");
    assert_eq!(
        cron.labels().get(PARENT_UID_LABEL),
        Some(&thing_uid(&env, "nightly").await)
    );
}
