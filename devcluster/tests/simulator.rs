//! The workload simulator, observed through kube-rs as an operator would see it.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use std::time::Duration;
use windlass_devcluster::{DevCluster, Options};

async fn start(opts: Options) -> DevCluster {
    DevCluster::start(Options {
        ready_delay: Duration::from_millis(50),
        ..opts
    })
    .await
    .expect("devcluster starts")
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..400 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

fn sts(image: &str, replicas: i32) -> StatefulSet {
    typed(
        json!({"metadata": {"name": "db"}, "spec": {"replicas": replicas, "serviceName": "db",
        "selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": image}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    )
}

/// The ready replicas of the StatefulSet `db`.
async fn ready_replicas(sets: &Api<StatefulSet>) -> Option<i32> {
    sets.get("db")
        .await
        .expect("sts")
        .status
        .and_then(|s| s.ready_replicas)
}

/// `(name, image)` of each Pod not being deleted, by name.
async fn live_images(pods: &Api<Pod>) -> Vec<(String, String)> {
    let mut images: Vec<(String, String)> = pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let image = p.spec.as_ref()?.containers.first()?.image.clone()?;
            Some((p.metadata.name.clone()?, image))
        })
        .collect();
    images.sort();
    images
}

#[tokio::test]
async fn a_statefulset_gets_ordered_pods_bound_claims_and_ready_replicas_and_its_claims_outlive_it()
{
    let dc = start(Options::default()).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(dc.client());
    sets.create(&PostParams::default(), &sts("pg:15", 3))
        .await
        .expect("create");
    eventually("3 ready replicas", || async {
        ready_replicas(&sets).await == Some(3)
    })
    .await;
    let names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(names, vec!["db-0", "db-1", "db-2"]);
    for i in 0..3 {
        let pvc = pvcs.get(&format!("data-db-{i}")).await.expect("claim");
        assert_eq!(pvc.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    }
    let status = sets.get("db").await.expect("sts").status.expect("status");
    assert_eq!(status.current_revision, status.update_revision);

    sets.delete("db", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("pods collected", || async {
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .is_empty()
    })
    .await;
    assert_eq!(
        pvcs.list(&ListParams::default())
            .await
            .expect("claims")
            .items
            .len(),
        3,
        "claims survive the StatefulSet"
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn with_retention_policy_delete_the_claims_carry_the_template_labels_and_go_with_the_statefulset()
 {
    let dc = start(Options::default()).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(dc.client());
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(dc.client());
    let mut set = sts("pg:15", 2);
    let spec = set.spec.as_mut().expect("spec");
    spec.persistent_volume_claim_retention_policy = Some(typed(
        json!({"whenDeleted": "Delete", "whenScaled": "Retain"}),
    ));
    spec.volume_claim_templates.as_mut().expect("claims")[0]
        .metadata
        .labels = Some([("backup".to_string(), "nightly".to_string())].into());
    sets.create(&PostParams::default(), &set)
        .await
        .expect("create");
    eventually("2 claims", || async {
        pvcs.list(&ListParams::default())
            .await
            .expect("claims")
            .items
            .len()
            == 2
    })
    .await;
    let pvc = pvcs.get("data-db-0").await.expect("claim");
    let labels = pvc.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("backup").map(String::as_str), Some("nightly"));
    assert_eq!(labels.get("app").map(String::as_str), Some("db"));
    let owner = &pvc.metadata.owner_references.expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("StatefulSet", Some(false))
    );

    sets.delete("db", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("claims collected with the StatefulSet", || async {
        pvcs.list(&ListParams::default())
            .await
            .expect("claims")
            .items
            .is_empty()
    })
    .await;
    dc.shutdown().await;
}

#[tokio::test]
async fn a_template_change_rolls_every_pod_to_the_new_revision() {
    let dc = start(Options::default()).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    sets.create(&PostParams::default(), &sts("pg:15", 2))
        .await
        .expect("create");
    eventually("2 ready", || async {
        ready_replicas(&sets).await == Some(2)
    })
    .await;
    let before = sets
        .get("db")
        .await
        .expect("sts")
        .status
        .and_then(|s| s.current_revision)
        .expect("revision");
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "db", "image": "pg:16"}]}}}});
    sets.patch("db", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patch");
    eventually("rolled to pg:16", || async {
        let images = live_images(&pods).await;
        let st = sets.get("db").await.expect("sts").status.expect("status");
        images
            .iter()
            .map(|(_, image)| image.as_str())
            .collect::<Vec<_>>()
            == ["pg:16", "pg:16"]
            && st.ready_replicas == Some(2)
            && st.current_revision == st.update_revision
    })
    .await;
    let after = sets
        .get("db")
        .await
        .expect("sts")
        .status
        .and_then(|s| s.current_revision)
        .expect("revision");
    assert_ne!(before, after);
    // The StatefulSet controller's events: its claims and Pods created, and each outdated Pod
    // deleted once.
    let count = |events: &[(String, String, String)], note: &str| {
        events.iter().filter(|(_, _, n)| n == note).count()
    };
    let events = events_on(&dc, "db").await;
    for claim in ["data-db-0 Pod db-0", "data-db-1 Pod db-1"] {
        assert_eq!(
            count(
                &events,
                &format!("Create Claim {claim} in StatefulSet db success")
            ),
            1,
            "{events:?}"
        );
    }
    for pod in ["db-0", "db-1"] {
        assert_eq!(
            count(
                &events,
                &format!("Create Pod {pod} in StatefulSet db successful")
            ),
            2,
            "made, then made again at the new revision: {events:?}"
        );
        assert_eq!(
            count(
                &events,
                &format!("Delete Pod {pod} in StatefulSet db successful")
            ),
            1,
            "{events:?}"
        );
    }
    assert_eq!(events.len(), 8, "{events:?}");
    dc.shutdown().await;
}

#[tokio::test]
async fn a_partition_holds_the_pods_below_it_on_the_current_revision() {
    let dc = start(Options::default()).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    sets.create(&PostParams::default(), &sts("pg:15", 3))
        .await
        .expect("create");
    let images = || live_images(&pods);
    let all_ready = || async { ready_replicas(&sets).await == Some(3) };
    eventually("3 ready", all_ready).await;
    let patch = json!({"spec": {
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
        "template": {"spec": {"containers": [{"name": "db", "image": "pg:16"}]}}}});
    sets.patch("db", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patch");
    let held = vec![
        ("db-0".to_string(), "pg:15".to_string()),
        ("db-1".to_string(), "pg:16".to_string()),
        ("db-2".to_string(), "pg:16".to_string()),
    ];
    eventually("db-2 and db-1 rolled, db-0 held", || async {
        images().await == held && all_ready().await
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(images().await, held, "the partition holds db-0");
    let st = sets.get("db").await.expect("sts").status.expect("status");
    assert_eq!(st.updated_replicas, Some(2));
    assert_ne!(st.current_revision, st.update_revision);
    // A Pod below the partition is made again from the current revision.
    let uid = pods.get("db-0").await.expect("db-0").metadata.uid;
    pods.delete("db-0", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("db-0 made again on pg:15", || async {
        pods.get("db-0").await.is_ok_and(|p| {
            p.metadata.uid != uid
                && p.spec
                    .as_ref()
                    .and_then(|s| s.containers[0].image.as_deref())
                    == Some("pg:15")
                && p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("controller-revision-hash"))
                    == st.current_revision.as_ref()
        })
    })
    .await;
    let patch = json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}});
    sets.patch("db", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patch");
    eventually("db-0 rolled too, the revisions one", || async {
        let st = sets.get("db").await.expect("sts").status.expect("status");
        images().await.iter().all(|(_, image)| image == "pg:16")
            && st.ready_replicas == Some(3)
            && st.current_revision == st.update_revision
    })
    .await;
    dc.shutdown().await;
}

/// (type, reason, note) of the events on `name`, oldest first, read through `events.k8s.io/v1`
/// with the types the host reads them with. Each is one the controllers record as
/// kube-controller-manager's do: no `eventTime`, the controller in `deprecatedSource`.
async fn events_on(dc: &DevCluster, name: &str) -> Vec<(String, String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(dc.client());
    let mut listed = events
        .list(&ListParams::default().fields(&format!("regarding.name={name}")))
        .await
        .expect("events.k8s.io/v1 events list")
        .items;
    listed.sort_by_key(|e| e.metadata.name.clone());
    listed
        .into_iter()
        .map(|e| {
            assert!(e.event_time.is_none(), "{e:?}");
            assert!(
                e.deprecated_source
                    .as_ref()
                    .and_then(|s| s.component.as_deref())
                    .is_some_and(|c| c.ends_with("-controller")),
                "{e:?}"
            );
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

fn job(name: &str, fail: bool) -> Job {
    let annotations = if fail {
        json!({"devcluster.windlass.dev/fail": "true"})
    } else {
        json!({})
    };
    typed(
        json!({"metadata": {"name": name, "annotations": annotations}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]}}}}),
    )
}

fn job_condition(j: &Job) -> Option<String> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Complete" || c.type_ == "Failed")
        .map(|c| c.type_.clone())
}

#[tokio::test]
async fn a_job_completes_and_a_job_annotated_to_fail_fails() {
    let dc = start(Options::default()).await;
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    jobs.create(&PostParams::default(), &job("ok", false))
        .await
        .expect("create");
    jobs.create(&PostParams::default(), &job("bad", true))
        .await
        .expect("create");
    eventually("ok completes", || async {
        job_condition(&jobs.get("ok").await.expect("job")).as_deref() == Some("Complete")
    })
    .await;
    eventually("bad fails", || async {
        job_condition(&jobs.get("bad").await.expect("job")).as_deref() == Some("Failed")
    })
    .await;
    assert_eq!(
        jobs.get("ok")
            .await
            .expect("job")
            .status
            .and_then(|s| s.succeeded),
        Some(1)
    );
    // The Job controller's events, once each.
    let ok = events_on(&dc, "ok").await;
    assert_eq!(ok.len(), 2, "{ok:?}");
    assert_eq!(
        (ok[0].0.as_str(), ok[0].1.as_str()),
        ("Normal", "SuccessfulCreate")
    );
    assert!(ok[0].2.starts_with("Created pod: ok-"), "{ok:?}");
    assert_eq!(
        ok[1],
        ("Normal".into(), "Completed".into(), "Job completed".into())
    );
    let bad = events_on(&dc, "bad").await;
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert_eq!(
        bad[1],
        (
            "Warning".into(),
            "BackoffLimitExceeded".into(),
            "Job has reached the specified backoff limit".into()
        )
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn a_cronjob_runs_jobs_on_a_sped_up_clock() {
    let dc = start(Options {
        cron_speedup: 120.0,
        ..Options::default()
    })
    .await;
    let cjs: Api<CronJob> = Api::default_namespaced(dc.client());
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let cj: CronJob = typed(
        json!({"metadata": {"name": "backup"}, "spec": {"schedule": "* * * * *",
        "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "b", "image": "busybox"}]}}}}}}),
    );
    cjs.create(&PostParams::default(), &cj)
        .await
        .expect("create");
    eventually("a scheduled job", || async {
        !jobs
            .list(&ListParams::default())
            .await
            .expect("jobs")
            .items
            .is_empty()
    })
    .await;
    let j = &jobs.list(&ListParams::default()).await.expect("jobs").items[0];
    assert!(
        j.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("backup-"))
    );
    let made = format!(
        "Created job {}",
        j.metadata.name.as_deref().unwrap_or_default()
    );
    let events = events_on(&dc, "backup").await;
    assert!(
        events.iter().any(|(t, reason, note)| t == "Normal"
            && reason == "SuccessfulCreate"
            && *note == made),
        "{events:?}"
    );
    assert!(
        cjs.get("backup")
            .await
            .expect("cj")
            .status
            .and_then(|s| s.last_schedule_time)
            .is_some()
    );
    dc.shutdown().await;
}

/// Each CronJob prunes its own finished Jobs to its history limit, and only its own (the
/// simulator groups the Jobs by owner once per tick).
#[tokio::test]
async fn each_cronjob_keeps_its_own_finished_jobs_to_its_history_limit() {
    let dc = start(Options::default()).await;
    let cjs: Api<CronJob> = Api::default_namespaced(dc.client());
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    for (name, limit) in [("keep-one", 1), ("keep-three", 3)] {
        // A schedule that does not fire during the test: only the Jobs made below exist.
        let cj = cjs
            .create(
                &PostParams::default(),
                &typed(
                    json!({"metadata": {"name": name}, "spec": {"schedule": "0 0 1 1 *",
                    "successfulJobsHistoryLimit": limit,
                    "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "b", "image": "busybox"}]}}}}}}),
                ),
            )
            .await
            .expect("create");
        for i in 0..4 {
            jobs.create(
                &PostParams::default(),
                &typed(json!({"metadata": {"name": format!("{name}-{i}"),
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": name,
                        "uid": cj.metadata.uid, "controller": true}]},
                    "spec": {"template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "b", "image": "busybox"}]}}}})),
            )
            .await
            .expect("a Job");
        }
    }
    let names = || async {
        let mut names: Vec<String> = jobs
            .list(&ListParams::default())
            .await
            .expect("jobs")
            .items
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect();
        names.sort();
        names
    };
    let expected = ["keep-one-3", "keep-three-1", "keep-three-2", "keep-three-3"];
    eventually("each CronJob's history pruned to its limit", || async {
        names().await == expected
    })
    .await;
    dc.shutdown().await;
}

#[tokio::test]
async fn deployments_claims_services_and_snapshots_reach_their_ready_states() {
    let dc = start(Options::default()).await;
    let deploys: Api<Deployment> = Api::default_namespaced(dc.client());
    let d: Deployment = typed(
        json!({"metadata": {"name": "web"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "w", "image": "nginx"}]}}}}),
    );
    deploys
        .create(&PostParams::default(), &d)
        .await
        .expect("deployment");
    let svcs: Api<Service> = Api::default_namespaced(dc.client());
    svcs.create(
        &PostParams::default(),
        &typed(json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})),
    )
    .await
    .expect("svc");
    let gvk = GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshot");
    let snaps: Api<DynamicObject> = Api::default_namespaced_with(
        dc.client(),
        &ApiResource::from_gvk_with_plural(&gvk, "volumesnapshots"),
    );
    let snap = |name: &str, fail: bool| -> DynamicObject {
        let ann = if fail {
            json!({"devcluster.windlass.dev/fail": "true"})
        } else {
            json!({})
        };
        typed(
            json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": name, "annotations": ann}, "spec": {"source": {"persistentVolumeClaimName": "data-db-0"}}}),
        )
    };
    snaps
        .create(&PostParams::default(), &snap("good", false))
        .await
        .expect("snapshot");
    snaps
        .create(&PostParams::default(), &snap("broken", true))
        .await
        .expect("snapshot");
    eventually("deployment ready", || async {
        deploys
            .get("web")
            .await
            .expect("d")
            .status
            .and_then(|s| s.ready_replicas)
            == Some(2)
    })
    .await;
    eventually("cluster IP", || async {
        svcs.get("web")
            .await
            .expect("svc")
            .spec
            .and_then(|s| s.cluster_ip)
            .is_some_and(|ip| ip.starts_with("10.96."))
    })
    .await;
    eventually("snapshot ready", || async {
        snaps.get("good").await.expect("vs").data["status"]["readyToUse"] == true
    })
    .await;
    eventually("snapshot error", || async {
        snaps.get("broken").await.expect("vs").data["status"]["error"]["message"].is_string()
    })
    .await;
    assert_eq!(
        snaps.get("broken").await.expect("vs").data["status"]["readyToUse"],
        false
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn with_the_simulator_off_nothing_creates_pods() {
    let dc = start(Options {
        simulator: false,
        ..Options::default()
    })
    .await;
    let sets: Api<StatefulSet> = Api::default_namespaced(dc.client());
    sets.create(&PostParams::default(), &sts("pg:15", 1))
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    assert!(
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .is_empty()
    );
    assert!(sets.get("db").await.expect("sts").status.is_none());
    dc.shutdown().await;
}

/// Over the API, the simulator tries a failed write again: a Pod's Running status, refused
/// while the API fails every patch (as while kube-apiserver restarts), lands once it answers,
/// with no other change to the Pod to trigger it again.
#[tokio::test]
async fn over_the_api_the_simulator_writes_again_what_the_api_refused() {
    let dc = start(Options {
        simulator: false,
        ..Options::default()
    })
    .await;
    dc.faults().set_error_rate("patch", 500, 1.0);
    let sim = tokio::spawn(windlass_devcluster::simulator::remote::run(
        dc.config(),
        windlass_devcluster::simulator::Config::from(&Options {
            ready_delay: Duration::from_millis(50),
            ..Options::default()
        }),
    ));
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    pods.create(
        &PostParams::default(),
        &typed(json!({"metadata": {"name": "web"},
            "spec": {"containers": [{"name": "w", "image": "nginx"}]}})),
    )
    .await
    .expect("a Pod");
    let phase = || async {
        pods.get("web")
            .await
            .expect("pod")
            .status
            .and_then(|s| s.phase)
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_ne!(
        phase().await.as_deref(),
        Some("Running"),
        "every patch fails for now"
    );
    dc.faults().clear();
    eventually("the Pod Running once the API answers", || async {
        phase().await.as_deref() == Some("Running")
    })
    .await;
    sim.abort();
    dc.shutdown().await;
}
