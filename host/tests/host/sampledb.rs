//! The SampleDB operator end to end: `windlass dev` (devcluster, simulator, CRDs, operator)
//! with the six SampleDB plugins — storage, backup and upgrade in Rust, primary election in
//! Python, conventions in JavaScript, chaos in Go — through a database's whole life.
//!
//! With `WINDLASS_TEST_CLUSTER=real` the same tests run on a real control plane of their own
//! (`windlass_kubeplane`: kube-apiserver with admission, kube-controller-manager's StatefulSet,
//! Job, CronJob, garbage collector and claim-protection controllers) with the devcluster's
//! workload simulator playing the kubelet over the API (`dev::start_on`). CronJobs run on the
//! real clock there, so the backup schedule is every minute instead of every five (sped up 60
//! times on the devcluster).
//!
//! Orderings ("the backup Job completed before the upgrade Job started") are checked on a
//! timeline recorded from watches: the devcluster's resourceVersions are one global counter,
//! and a real API server's are etcd's revision, also one counter for every key of the store,
//! so events of different kinds sort into the order they happened.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::StatefulSet,
    batch::v1::{CronJob, Job},
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service},
    events::v1::Event,
    policy::v1::PodDisruptionBudget,
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
        WatchParams,
    },
    core::{ApiResource, GroupVersionKind},
};
use serde_json::{Value, json};
use windlass::{
    dev::{self, Dev, DevConfig},
    operator,
    runtime::RuntimeConfig,
};
use windlass_kubeplane::ControlPlane;

use crate::support;

use support::{WAIT, eventually, history_since, sampledb_resource, went};

const NS: &str = "default";

/// `windlass dev` on the devcluster or on a real control plane (with the simulator over the
/// API), stopped by [`Harness::shutdown`].
struct Harness {
    dev: Dev,
    real: Option<(ControlPlane, tokio::task::JoinHandle<()>)>,
    /// A kubeconfig for kubectl, as the cluster's admin.
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Harness {
    async fn shutdown(self) {
        self.dev.shutdown().await;
        if let Some((plane, simulator)) = self.real {
            simulator.abort();
            drop(plane);
        }
    }

    /// How long a scheduled backup may take to come: CronJobs fire on the real clock on a
    /// real control plane (every minute there).
    fn backup_wait(&self) -> Duration {
        if self.real.is_some() {
            Duration::from_secs(150)
        } else {
            WAIT
        }
    }

    /// The backup schedule: every five minutes, sped up 60 times on the devcluster; every
    /// minute, the CronJob controller's finest, on a real one.
    /// Runs kubectl as the admin, off the async workers: its stdout, or its stderr as the error.
    async fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = std::process::Command::new(support::tools::kubectl());
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        tokio::task::spawn_blocking(move || support::tools::try_run(&mut cmd, None))
            .await
            .expect("the kubectl task runs")
    }

    fn schedule(&self) -> &'static str {
        if self.real.is_some() {
            "* * * * *"
        } else {
            "*/5 * * * *"
        }
    }
}

/// Starts `windlass dev` with the six plugins, the backup volume and nothing else.
async fn start() -> Harness {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut operator = operator::Config {
        admin_addr: "127.0.0.1:0".parse().expect("address"),
        election: None,
        settings: Default::default(),
        identity: "sampledb-e2e".into(),
    };
    operator.settings.backoff_base = Duration::from_millis(100);
    operator.settings.backoff_max = Duration::from_secs(2);
    // The Python plugin takes seconds to compile: compile it once for every test of the run.
    let runtime = RuntimeConfig {
        cache_dir: Some(root.join("target").join("e2e-plugin-cache")),
        ..RuntimeConfig::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = DevConfig {
        port: 0,
        kubeconfig: dir.path().join("kubeconfig"),
        plugins: support::sampledb_plugins(),
        crds: Vec::new(),
        manifests: vec![],
        operator,
        runtime,
        // CronJobs fire 60 times faster: `*/5 * * * *` every five seconds.
        cron_speedup: 60.0,
    };
    let mut kubeconfig = config.kubeconfig.clone();
    let (dev, real) = if support::real_cluster() {
        let plane = ControlPlane::start()
            .await
            .expect("the real control plane starts");
        let client = plane.client().await.expect("a client");
        windlass_devcluster::simulator::remote::install_snapshot_api(&client)
            .await
            .expect("the snapshot API installed");
        let simulator = tokio::spawn(windlass_devcluster::simulator::remote::run(
            plane.config().await.expect("the admin's configuration"),
            windlass_devcluster::simulator::Config::from(&windlass_devcluster::Options::default()),
        ));
        let dev = dev::start_on(client, config)
            .await
            .expect("windlass dev starts on the real control plane");
        kubeconfig = plane.kubeconfig();
        (dev, Some((plane, simulator)))
    } else {
        (dev::start(config).await.expect("windlass dev starts"), None)
    };
    support::create_backup_volume(&dev.client, NS).await;
    Harness {
        dev,
        real,
        kubeconfig,
        _dir: dir,
    }
}

/// Kubernetes objects of one namespace, by kind.
struct Cluster {
    client: Client,
}

impl Cluster {
    fn new(h: &Harness) -> Self {
        Cluster {
            client: h.dev.client.clone(),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), NS)
    }

    fn dbs(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, &sampledb_resource())
    }

    async fn create_db(&self, name: &str, spec: Value) -> kube::Result<DynamicObject> {
        self.create_db_with(name, spec, json!({})).await
    }

    async fn create_db_with(
        &self,
        name: &str,
        spec: Value,
        annotations: Value,
    ) -> kube::Result<DynamicObject> {
        let db: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB",
            "metadata": {"name": name, "annotations": annotations}, "spec": spec,
        }))
        .expect("SampleDB");
        self.dbs().create(&PostParams::default(), &db).await
    }

    async fn db(&self, name: &str) -> Option<Value> {
        self.dbs()
            .get_opt(name)
            .await
            .expect("get SampleDB")
            .map(|o| serde_json::to_value(o).expect("JSON"))
    }

    async fn patch_spec(&self, name: &str, spec: Value) {
        self.dbs()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .expect("SampleDB patched");
    }

    /// Waits until the SampleDB's status satisfies `ok`, returning it; on a timeout the failure
    /// shows the last status seen.
    async fn status_until(&self, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        self.status_within(WAIT, name, what, ok).await
    }

    /// [`Self::status_until`] with a wait of its own.
    async fn status_within(
        &self,
        wait: Duration,
        name: &str,
        what: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let status = self.db(name).await.map(|db| db["status"].clone());
            if let Some(status) = status.as_ref().filter(|s| ok(s)) {
                return status.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {name}: {what}; last status: {}",
                serde_json::to_string_pretty(&status).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What a chaos round did, for a failure to show: the Job's state, and each Pod's (the
    /// database's and the Job's) uid, phase, readiness, role and deletion.
    async fn chaos_round(&self, job: &str) -> String {
        let job = self
            .get::<Job>(job)
            .await
            .map(|j| serde_json::to_string(&j.status).unwrap_or_default());
        let pods = self
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let pods: Vec<String> = pods
            .iter()
            .map(|p| {
                let status = p.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "Ready")
                    .map(|c| c.status);
                format!(
                    "{} uid {} phase {:?} ready {:?} role {:?} deleting {} {}",
                    p.name_any(),
                    p.uid().unwrap_or_default(),
                    status.phase,
                    ready,
                    p.labels().get(sampledb_api::ROLE_LABEL),
                    p.metadata.deletion_timestamp.is_some(),
                    status.message.unwrap_or_default()
                )
            })
            .collect();
        format!("job status: {job:?}\npods:\n  {}", pods.join("\n  "))
    }

    async fn get<K>(&self, name: &str) -> Option<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        self.api::<K>().get_opt(name).await.expect("get")
    }

    async fn pod_ready(&self, pod: &str, ready: bool) {
        let status = if ready { "True" } else { "False" };
        self.api::<Pod>()
            .patch_status(
                pod,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [
                    {"type": "Ready", "status": status}, {"type": "ContainersReady", "status": status}]}})),
            )
            .await
            .expect("Pod status patched");
    }

    /// The notes of the events with `reason` on the object named `name`.
    async fn event_notes(&self, name: &str, reason: &str) -> Vec<String> {
        support::events_about(&self.api::<Event>(), name, reason)
            .await
            .into_iter()
            .filter_map(|e| e.note)
            .collect()
    }

    async fn role(&self, pod: &str) -> Option<String> {
        self.get::<Pod>(pod)
            .await?
            .labels()
            .get(sampledb_api::ROLE_LABEL)
            .cloned()
    }

    /// Records, in resourceVersion order, what happens to the objects of `kinds` from now on.
    fn record(&self) -> Timeline {
        let timeline = Timeline::default();
        let apis: Vec<(&str, Api<DynamicObject>)> = [
            ("Job", ApiResource::erase::<Job>(&())),
            ("StatefulSet", ApiResource::erase::<StatefulSet>(&())),
            ("Pod", ApiResource::erase::<Pod>(&())),
            (
                "PersistentVolumeClaim",
                ApiResource::erase::<PersistentVolumeClaim>(&()),
            ),
            ("SampleDB", sampledb_resource()),
            (
                "VolumeSnapshot",
                ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshot"),
                    "volumesnapshots",
                ),
            ),
        ]
        .into_iter()
        .map(|(kind, ar)| (kind, Api::namespaced_with(self.client.clone(), NS, &ar)))
        .collect();
        for (kind, api) in apis {
            let events = timeline.events.clone();
            tokio::spawn(async move {
                let mut stream = api
                    .watch(&WatchParams::default(), "0")
                    .await
                    .expect("watch")
                    .boxed();
                while let Some(Ok(event)) = stream.next().await {
                    let (verb, obj) = match event {
                        WatchEvent::Added(o) => ("added", o),
                        WatchEvent::Modified(o) => ("modified", o),
                        WatchEvent::Deleted(o) => ("deleted", o),
                        _ => continue,
                    };
                    let rv: u64 = obj
                        .resource_version()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_default();
                    let value = serde_json::to_value(&obj).expect("JSON");
                    events.lock().expect("timeline").push(Entry {
                        rv,
                        kind,
                        verb,
                        name: obj.name_any(),
                        object: value,
                    });
                }
            });
        }
        timeline
    }
}

#[derive(Debug, Clone)]
struct Entry {
    rv: u64,
    kind: &'static str,
    verb: &'static str,
    name: String,
    object: Value,
}

#[derive(Debug, Clone, Default)]
struct Timeline {
    events: Arc<Mutex<Vec<Entry>>>,
}

impl Timeline {
    /// The resourceVersion at which `kind/name` first satisfied `ok`.
    fn first(&self, kind: &str, name: &str, ok: impl Fn(&Entry) -> bool) -> Option<u64> {
        let mut events = self.events.lock().expect("timeline").clone();
        events.sort_by_key(|e| e.rv);
        events
            .iter()
            .find(|e| e.kind == kind && e.name == name && ok(e))
            .map(|e| e.rv)
    }

    /// What `of` gives for each change of `kind/name` after resourceVersion `after`, in order,
    /// each value once in a row.
    fn values_after(
        &self,
        kind: &str,
        name: &str,
        after: u64,
        of: impl Fn(&Entry) -> Value,
    ) -> Vec<Value> {
        let mut events = self.events.lock().expect("timeline").clone();
        events.sort_by_key(|e| e.rv);
        let mut values: Vec<Value> = events
            .iter()
            .filter(|e| e.kind == kind && e.name == name && e.rv > after)
            .map(of)
            .collect();
        values.dedup();
        values
    }

    fn any(&self, kind: &str, name: &str) -> bool {
        self.first(kind, name, |_| true).is_some()
    }

    /// Whether an object of `kind` whose name starts with `prefix` ever changed.
    fn any_prefixed(&self, kind: &str, prefix: &str) -> bool {
        let events = self.events.lock().expect("timeline");
        events
            .iter()
            .any(|e| e.kind == kind && e.name.starts_with(prefix))
    }

    /// Fails unless `earlier` (when it happened at all) preceded `later`.
    fn assert_before(&self, earlier: (&str, Option<u64>), later: (&str, Option<u64>)) {
        let (a, b) = (
            earlier
                .1
                .unwrap_or_else(|| panic!("{} never happened", earlier.0)),
            later
                .1
                .unwrap_or_else(|| panic!("{} never happened", later.0)),
        );
        assert!(
            a < b,
            "{} (rv {a}) should come before {} (rv {b})",
            earlier.0,
            later.0
        );
    }
}

fn complete(e: &Entry) -> bool {
    has_condition(&e.object, "Complete")
}

fn has_condition(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn image(sts: &StatefulSet) -> String {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn pod_image(e: &Entry) -> String {
    e.object["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn sts_image(e: &Entry) -> String {
    e.object["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sampledb_lives_from_create_through_backup_failover_upgrade_to_a_snapshot_on_delete() {
    let dev = start().await;
    let k = Cluster::new(&dev);
    let timeline = k.record();

    // Invalid specs never get in: the API names the field.
    for (spec, field) in [
        (
            json!({"version": "16.4", "replicas": 0, "storage": {"size": "1Gi"}}),
            "spec.replicas",
        ),
        (
            json!({"version": "latest", "storage": {"size": "1Gi"}}),
            "spec.version",
        ),
        (
            json!({"version": "16.4", "storage": {"size": "1Gi"}, "backup": {"schedule": "every night"}}),
            "spec.backup.schedule",
        ),
    ] {
        let err = k
            .create_db("invalid", spec)
            .await
            .expect_err("an invalid SampleDB is refused");
        let kube::Error::Api(status) = err else {
            panic!("expected an API error, got {err}")
        };
        assert_eq!(status.code, 422, "{}", status.message);
        assert!(
            status.message.contains(field),
            "the error should name {field}: {}",
            status.message
        );
    }

    // A version the operator does not support (the upgrade plugin's config lists them) is
    // refused by a condition naming the supported ones, and nothing runs it.
    k.create_db(
        "future",
        json!({"version": "99.0", "replicas": 1, "storage": {"size": "1Gi"}}),
    )
    .await
    .expect("created: the schema allows any version");
    let status = k
        .status_until("future", "the version refused", |s| {
            condition(s, "Upgrade").is_some_and(|c| c["reason"] == "UnsupportedVersion")
        })
        .await;
    let refused = condition(&status, "Upgrade").expect("Upgrade");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("supported versions: 15.6, 16.2, 16.4, 17.0")),
        "{refused}"
    );
    let ready = condition(&status, "Ready").expect("Ready");
    assert_eq!(ready["status"], "False", "{ready}");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("sampledb-upgrade: spec.version 99.0 is not supported")),
        "Ready names the plugin and why: {ready}"
    );
    assert!(
        k.get::<StatefulSet>("future").await.is_none(),
        "no StatefulSet runs a version that is not supported"
    );
    assert!(status.get("currentVersion").is_none(), "{status}");
    k.dbs()
        .delete("future", &DeleteParams::default())
        .await
        .expect("delete future");

    // Create → Ready with every child.
    k.create_db(
        "orders",
        json!({"version": "16.4", "replicas": 3, "storage": {"size": "1Gi"},
               "config": {"max_connections": "50"},
               "backup": {"schedule": dev.schedule(), "retain": 2}}),
    )
    .await
    .expect("SampleDB created");
    // What `kubectl wait`, Argo CD, Flux and `helm --wait` read: the host's one Ready, from
    // every plugin's say. kubectl waits through Provisioning and Initializing.
    let wait = [
        "wait",
        "--for=condition=Ready",
        "sdb/orders",
        "--namespace",
        NS,
        "--timeout=120s",
    ];
    let (waited, status) = tokio::join!(
        dev.kubectl(&wait),
        k.status_until("orders", "Ready, initialised, with a primary", |s| {
            s["phase"] == "Ready" && s["initialized"] == true && s["primary"].is_string()
        })
    );
    let waited = waited.expect("kubectl wait --for=condition=Ready succeeds");
    assert!(waited.contains("condition met"), "{waited}");
    let ready = condition(&status, "Ready").expect("Ready");
    assert_eq!(ready["status"], "True", "{ready}");
    assert_eq!(ready["reason"], "PluginsReady", "{ready}");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("sampledb-storage: 3/3 replicas ready")),
        "{ready}"
    );
    assert!(
        timeline
            .first("SampleDB", "orders", |e| {
                condition(&e.object["status"], "Ready")
                    .is_some_and(|c| c["status"] == "False" && c["reason"] == "WaitingForReplicas")
            })
            .is_some(),
        "not Ready while replicas came up"
    );
    assert_eq!(status["readyReplicas"], 3);
    assert_eq!(status["currentVersion"], "16.4");
    assert_eq!(status["primary"], "orders-0");
    assert_eq!(
        condition(&status, "Reconciled").expect("Reconciled")["status"],
        "True"
    );
    let db = k.db("orders").await.expect("orders");
    let uid = db["metadata"]["uid"].as_str().expect("uid").to_string();

    let sts: StatefulSet = k.get("orders").await.expect("StatefulSet");
    assert_eq!(image(&sts), "sampledb:16.4");
    // It holds the data and a plugin finalizes: held, not owned, so no garbage collection
    // (a foreground deletion of the SampleDB) reaches its claims before the final snapshots.
    assert!(sts.owner_references().is_empty(), "the StatefulSet is held");
    assert_eq!(sts.labels()["windlass.dev/parent-uid"], uid);
    assert_eq!(sts.labels()["app.kubernetes.io/part-of"], "sampledb");
    let container = &sts
        .spec
        .as_ref()
        .expect("spec")
        .template
        .spec
        .as_ref()
        .expect("pod")
        .containers[0];
    assert!(
        container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .is_some(),
        "conventions gave the database container resource requests"
    );
    let config: ConfigMap = k.get("orders-config").await.expect("ConfigMap");
    let data = config.data.expect("data");
    assert_eq!(data["max_connections"], "50");
    assert_eq!(data["host"], "orders.default.svc");
    let secret: Secret = k.get("orders-credentials").await.expect("Secret");
    assert_eq!(secret.immutable, Some(true));
    let password = secret.data.as_ref().expect("data")["password"].0.clone();
    assert_eq!(password.len(), 32);
    assert!(k.get::<Service>("orders-headless").await.is_some());
    let pdb: PodDisruptionBudget = k.get("orders").await.expect("PodDisruptionBudget");
    assert!(pdb.spec.expect("spec").max_unavailable.is_some());
    assert!(timeline.any("Job", "orders-init"), "the init Job ran");
    // Pruned once recorded: the reconcile that records `initialized` still keeps the Job, the
    // next one (woken by that status write) prunes it. On the devcluster that follows within
    // milliseconds; on a real API server the test can read Ready before it.
    eventually("the finished init Job pruned once recorded", || async {
        k.get::<Job>("orders-init").await.is_none().then_some(())
    })
    .await;
    assert!(
        k.db("orders").await.expect("orders")["status"]["initialized"] == true,
        "the init Job went only once the SampleDB recorded it"
    );
    timeline.assert_before(
        (
            "the init Job completing",
            timeline.first("Job", "orders-init", complete),
        ),
        (
            "orders reporting Ready",
            timeline.first("SampleDB", "orders", |e| {
                e.object["status"]["phase"] == "Ready"
            }),
        ),
    );

    // Primary election: orders-0 labelled primary, the others replicas, the client Service on it.
    assert_eq!(k.role("orders-0").await.as_deref(), Some("primary"));
    eventually("orders-1 and orders-2 labelled replica", || async {
        let r1 = k.role("orders-1").await;
        let r2 = k.role("orders-2").await;
        (r1.as_deref() == Some("replica") && r2.as_deref() == Some("replica")).then_some(())
    })
    .await;
    let client_service: Service = k.get("orders").await.expect("client Service");
    assert_eq!(
        client_service
            .spec
            .expect("spec")
            .selector
            .expect("selector")[sampledb_api::ROLE_LABEL],
        "primary"
    );

    // Backups on schedule; lastBackup follows the Jobs.
    let status = k
        .status_within(dev.backup_wait(), "orders", "a backup", |s| {
            s["lastBackup"].is_string()
        })
        .await;
    let backup = status["lastBackup"].as_str().expect("name").to_string();
    assert!(backup.starts_with("orders-backup-"), "{backup}");
    let job: Job = eventually("the backup Job", || async { k.get::<Job>(&backup).await }).await;
    assert_eq!(
        job.owner_references()[0].kind,
        "CronJob",
        "backups are the CronJob's Jobs"
    );
    let cron: CronJob = k.get("orders-backup").await.expect("CronJob");
    let pod_spec = cron
        .spec
        .expect("spec")
        .job_template
        .spec
        .expect("job")
        .template
        .spec
        .expect("pod");
    let env = serde_json::to_string(&pod_spec.containers[0]).expect("JSON");
    assert!(
        env.contains("orders-config") && env.contains("orders-credentials"),
        "{env}"
    );
    k.status_within(dev.backup_wait(), "orders", "a newer backup", |s| {
        s["lastBackup"].is_string() && s["lastBackup"] != backup.as_str()
    })
    .await;

    // Failover: the primary's Pod stops being ready.
    k.pod_ready("orders-0", false).await;
    k.status_until("orders", "failover to orders-1", |s| {
        s["primary"] == "orders-1"
    })
    .await;
    eventually("orders-1 labelled primary", || async {
        (k.role("orders-1").await.as_deref() == Some("primary")
            && k.role("orders-0").await.as_deref() == Some("replica"))
        .then_some(())
    })
    .await;
    k.pod_ready("orders-0", true).await;
    k.status_until("orders", "all replicas ready again, primary kept", |s| {
        s["readyReplicas"] == 3 && s["primary"] == "orders-1"
    })
    .await;

    // Upgrade 16.4 → 17.0: backup Job, then upgrade Job, then the roll.
    k.patch_spec("orders", json!({"version": "17.0"})).await;
    let status = k
        .status_until("orders", "running 17.0", |s| s["currentVersion"] == "17.0")
        .await;
    // The roll: the replica above the primary (orders-1) first, then a planned switchover to
    // it, then the old primary — one primary change, announced as planned, no failover.
    let asked = timeline
        .first("SampleDB", "orders", |e| {
            e.object["spec"]["version"] == "17.0"
        })
        .expect("the upgrade asked for");
    assert_eq!(
        timeline.values_after("SampleDB", "orders", asked, |e| {
            e.object["status"]["primary"].clone()
        }),
        [json!("orders-1"), json!("orders-2")],
        "one primary change during the upgrade"
    );
    let switched = timeline.first("SampleDB", "orders", |e| {
        e.rv > asked && e.object["status"]["primary"] == "orders-2"
    });
    let replica_rolled = timeline.first("Pod", "orders-2", |e| {
        e.rv > asked && pod_image(e) == "sampledb:17.0" && has_condition(&e.object, "Ready")
    });
    let primary_restarted = timeline.first("Pod", "orders-1", |e| {
        e.rv > asked
            && (e.verb == "deleted" || e.object["metadata"]["deletionTimestamp"].is_string())
    });
    timeline.assert_before(
        ("orders-2 ready on 17.0", replica_rolled),
        ("the switchover to orders-2", switched),
    );
    timeline.assert_before(
        ("the switchover to orders-2", switched),
        (
            "the old primary's Pod orders-1 restarted",
            primary_restarted,
        ),
    );
    let switchovers = eventually("the Switchover event", || async {
        let notes = k.event_notes("orders", "Switchover").await;
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    assert_eq!(
        switchovers,
        ["sampledb-primary: planned switchover from orders-1 to orders-2 for the upgrade to 17.0"]
    );
    assert_eq!(
        k.event_notes("orders", "FailedOver").await,
        ["sampledb-primary: primary moved from orders-0 to orders-1"],
        "the one failover is the one made above"
    );
    // The upgrade is recorded before the data is migrated, and the record is cleared with the
    // new version.
    let recorded = timeline.first("SampleDB", "orders", |e| {
        e.object["status"]["upgradingTo"] == "17.0"
    });
    assert!(status.get("upgradingTo").is_none(), "{status}");
    let sts: StatefulSet = k.get("orders").await.expect("StatefulSet");
    assert_eq!(image(&sts), "sampledb:17.0");
    for i in 0..3 {
        let pod: Pod = k.get(&format!("orders-{i}")).await.expect("Pod");
        assert_eq!(
            pod.spec.expect("spec").containers[0].image.as_deref(),
            Some("sampledb:17.0"),
            "orders-{i} rolled"
        );
    }
    let backup_done = timeline.first("Job", "orders-pre-upgrade-17-0", complete);
    let upgrade_started = timeline.first("Job", "orders-upgrade-17-0", |e| e.verb == "added");
    let upgrade_done = timeline.first("Job", "orders-upgrade-17-0", complete);
    let rolled = timeline.first("StatefulSet", "orders", |e| sts_image(e) == "sampledb:17.0");
    timeline.assert_before(
        ("the pre-upgrade backup completing", backup_done),
        ("the upgrade Job starting", upgrade_started),
    );
    timeline.assert_before(
        ("status.upgradingTo recorded", recorded),
        ("the upgrade Job starting", upgrade_started),
    );
    timeline.assert_before(
        ("the upgrade Job completing", upgrade_done),
        ("the StatefulSet rolling to 17.0", rolled),
    );

    // A downgrade is refused and nothing changes.
    k.patch_spec("orders", json!({"version": "16.4"})).await;
    let status = k
        .status_until("orders", "the downgrade refused", |s| {
            condition(s, "Upgrade").is_some_and(|c| c["reason"] == "DowngradeRefused")
        })
        .await;
    assert_eq!(status["currentVersion"], "17.0");
    let ready = condition(&status, "Ready").expect("Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("DowngradeRefused")),
        "a spec that will not be reached is not Ready: {ready}"
    );
    let sts: StatefulSet = k.get("orders").await.expect("StatefulSet");
    assert_eq!(
        image(&sts),
        "sampledb:17.0",
        "the StatefulSet stays on 17.0"
    );
    k.patch_spec("orders", json!({"version": "17.0"})).await;
    let waited = dev
        .kubectl(&wait)
        .await
        .expect("Ready again once spec.version is back");
    assert!(waited.contains("condition met"), "{waited}");

    // Delete with deletionPolicy Snapshot: snapshots ready before the StatefulSet and PVCs go.
    let uid = k.db("orders").await.expect("orders")["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_string();
    k.dbs()
        .delete("orders", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("orders gone", || async {
        k.db("orders").await.is_none().then_some(())
    })
    .await;
    eventually("the StatefulSet and its PVCs gone", || async {
        let pvcs = k
            .api::<PersistentVolumeClaim>()
            .list(&ListParams::default())
            .await
            .expect("list");
        let left = pvcs
            .items
            .iter()
            .any(|p| p.name_any().starts_with("data-orders-"));
        (k.get::<StatefulSet>("orders").await.is_none() && !left).then_some(())
    })
    .await;
    let snapshots = Api::<DynamicObject>::namespaced_with(
        k.client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshot"),
            "volumesnapshots",
        ),
    );
    for i in 0..3 {
        let name = sampledb_api::names::final_snapshot(&format!("data-orders-{i}"), &uid);
        let snap = snapshots
            .get(&name)
            .await
            .expect("the snapshot outlives the SampleDB");
        assert_eq!(snap.data["status"]["readyToUse"], true);
        timeline.assert_before(
            (
                &format!("{name} ready"),
                timeline.first("VolumeSnapshot", &name, |e| {
                    e.object["status"]["readyToUse"] == true
                }),
            ),
            (
                "the StatefulSet deleted",
                timeline.first("StatefulSet", "orders", |e| {
                    e.verb == "deleted" || e.object["metadata"]["deletionTimestamp"].is_string()
                }),
            ),
        );
        timeline.assert_before(
            (
                &format!("{name} ready"),
                timeline.first("VolumeSnapshot", &name, |e| {
                    e.object["status"]["readyToUse"] == true
                }),
            ),
            (
                "its PVC deleted",
                timeline.first("PersistentVolumeClaim", &format!("data-orders-{i}"), |e| {
                    e.verb == "deleted" || e.object["metadata"]["deletionTimestamp"].is_string()
                }),
            ),
        );
    }

    // The same name again: its final snapshots are its own, beside its predecessor's.
    k.create_db(
        "orders",
        json!({"version": "17.0", "replicas": 1, "storage": {"size": "1Gi"}}),
    )
    .await
    .expect("created again");
    k.status_until("orders", "Ready again", |s| s["phase"] == "Ready")
        .await;
    let again = k.db("orders").await.expect("orders")["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_string();
    k.dbs()
        .delete("orders", &DeleteParams::default())
        .await
        .expect("delete again");
    eventually("the second orders gone after its own snapshot", || async {
        k.db("orders").await.is_none().then_some(())
    })
    .await;
    let own = snapshots
        .get(&sampledb_api::names::final_snapshot(
            "data-orders-0",
            &again,
        ))
        .await
        .expect("the second SampleDB's own snapshot");
    assert_eq!(own.data["status"]["readyToUse"], true);
    let first = snapshots
        .get(&sampledb_api::names::final_snapshot("data-orders-0", &uid))
        .await
        .expect("the first SampleDB's snapshot is still there");
    assert_ne!(own.name_any(), first.name_any());
    dev.shutdown().await;
}

/// The upgrade plugin's `supportedVersions` is checked where it is written, by the plugin at
/// load: an edit to a list that is not one is refused before any SampleDB exists (no reconcile,
/// no canary would have met it), saying so on the WasmPlugin and in a Warning event naming the
/// key; the version with the config it had keeps serving, and a good edit serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_supported_versions_list_that_is_not_one_is_refused_at_load() {
    let dev = start().await;
    let k = Cluster::new(&dev);
    let wps: Api<windlass::crd::WasmPlugin> = Api::all(dev.dev.client.clone());
    let ready = |wp: &windlass::crd::WasmPlugin| {
        wp.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .cloned()
    };
    let serving = eventually("sampledb-upgrade serving", || async {
        let wp = wps.get("sampledb-upgrade").await.ok()?;
        (ready(&wp)?.status == "True").then_some(wp.status?.digest?)
    })
    .await;
    let set_versions = |versions: Value| {
        let wps = wps.clone();
        async move {
            wps.patch(
                "sampledb-upgrade",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"config": {"supportedVersions": versions}}})),
            )
            .await
            .expect("the WasmPlugin's config edited")
        }
    };
    assert!(
        k.dbs()
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty(),
        "no SampleDB exists"
    );
    set_versions(json!(["16.4", "latest"])).await;
    let refused = eventually("the config refused at load", || async {
        let wp = wps.get("sampledb-upgrade").await.ok()?;
        let ready = ready(&wp)?;
        (ready.reason == "InvalidConfig").then_some(ready)
    })
    .await;
    // Ready stays True: a version serves, with the config it had.
    assert_eq!(refused.status, "True", "{}", refused.message);
    assert_eq!(
        refused.message,
        format!(
            "new version refused, still serving {serving}: plugin sampledb-upgrade: invalid \
             config: supportedVersions[1]: \"latest\" is not a version like 16.4"
        )
    );
    let events: Api<Event> = Api::namespaced(dev.dev.client.clone(), NS);
    let warning = eventually("a Warning event on the WasmPlugin", || async {
        support::events_about(&events, "sampledb-upgrade", "InvalidConfig")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.note.as_deref(), Some(refused.message.as_str()));
    // The version with its old config still serves: a version outside the old list is
    // refused, naming the old list.
    k.create_db(
        "future",
        json!({"version": "99.0", "replicas": 1, "storage": {"size": "1Gi"}}),
    )
    .await
    .expect("created");
    let status = k
        .status_until("future", "the version refused by the old list", |s| {
            condition(s, "Upgrade").is_some_and(|c| c["reason"] == "UnsupportedVersion")
        })
        .await;
    let upgrade = condition(&status, "Upgrade").expect("Upgrade");
    assert!(
        upgrade["message"]
            .as_str()
            .is_some_and(|m| m.contains("supported versions: 15.6, 16.2, 16.4, 17.0;")),
        "{upgrade}"
    );
    // A good edit serves, and the SampleDB is judged by it.
    set_versions(json!(["16.4", "17.0", "99.0"])).await;
    eventually("the good config serving", || async {
        let wp = wps.get("sampledb-upgrade").await.ok()?;
        let ready = ready(&wp)?;
        (ready.status == "True" && wp.status?.last_error.is_none()).then_some(())
    })
    .await;
    k.status_until("future", "the version now supported", |s| {
        condition(s, "Upgrade").is_some_and(|c| c["reason"] != "UnsupportedVersion")
    })
    .await;
    dev.shutdown().await;
}

/// With the primary plugin gone, nobody carries out the upgrade's planned switchover: the roll
/// waits `switchoverTimeoutSeconds` for it, then updates the old primary's Pod without one,
/// with a Warning saying so, and the upgrade finishes (it used to hold for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_whose_switchover_never_comes_gives_it_up_and_finishes() {
    let dev = start().await;
    let k = Cluster::new(&dev);
    let wps: Api<windlass::crd::WasmPlugin> = Api::all(dev.dev.client.clone());
    k.create_db(
        "orders",
        json!({"version": "16.4", "replicas": 3, "storage": {"size": "1Gi"}}),
    )
    .await
    .expect("created");
    let status = k
        .status_until("orders", "Ready with a primary", |s| {
            s["phase"] == "Ready" && s["primary"].is_string()
        })
        .await;
    let primary = status["primary"].as_str().expect("primary").to_string();
    wps.patch(
        "sampledb-upgrade",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"config": {"switchoverTimeoutSeconds": 5}}})),
    )
    .await
    .expect("the upgrade's config edited");
    eventually("the new config serving", || async {
        let wp = wps.get("sampledb-upgrade").await.ok()?;
        let status = wp.status?;
        (status.observed_generation == wp.metadata.generation && status.last_error.is_none())
            .then_some(())
    })
    .await;
    wps.delete("sampledb-primary", &DeleteParams::default())
        .await
        .expect("the primary plugin deleted");
    eventually("the primary plugin gone", || async {
        wps.get_opt("sampledb-primary")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    k.patch_spec("orders", json!({"version": "17.0"})).await;
    let status = k
        .status_within(
            WAIT + Duration::from_secs(60),
            "orders",
            "running 17.0",
            |s| s["currentVersion"] == "17.0",
        )
        .await;
    assert_eq!(
        status["primary"], primary,
        "no primary plugin, no primary change"
    );
    let sts: StatefulSet = k.get("orders").await.expect("StatefulSet");
    assert_eq!(image(&sts), "sampledb:17.0");
    let events: Api<Event> = Api::namespaced(dev.dev.client.clone(), NS);
    let gave_up = support::events_about(&events, "orders", "SwitchoverTimedOut").await;
    let notes: Vec<&str> = gave_up.iter().filter_map(|e| e.note.as_deref()).collect();
    assert!(
        !notes.is_empty()
            && notes.iter().all(|n| n.starts_with(&format!(
                "sampledb-upgrade: no switchover from {primary} to orders-"
            )) && n.contains("within 5s of asking")),
        "{notes:?}"
    );
    assert!(
        gave_up
            .iter()
            .all(|e| e.type_.as_deref() == Some("Warning"))
    );
    dev.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restore_runs_before_ready_a_failed_snapshot_or_retain_keeps_the_volumes_and_delete_does_not()
 {
    let dev = start().await;
    let k = Cluster::new(&dev);
    let timeline = k.record();
    let spec = |extra: Value| {
        let mut s = json!({"version": "16.4", "replicas": 1, "storage": {"size": "1Gi"}});
        s.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        s
    };

    // A backup to restore: a database with a backup CronJob (on a schedule that never comes in
    // the test), and a Job from the CronJob's own template, as `kubectl create job
    // --from=cronjob/…` makes one. It writes its dump, named after the Job, on the backup claim.
    k.create_db(
        "source",
        spec(json!({"backup": {"schedule": "0 0 1 1 *", "retain": 2}})),
    )
    .await
    .expect("created");
    // A restore of a backup that was never taken.
    k.create_db("missing", spec(json!({"restoreFrom": "no-such-backup"})))
        .await
        .expect("created");
    // A snapshot that fails, and volumes to retain.
    k.create_db_with(
        "fragile",
        spec(json!({})),
        json!({"devcluster.windlass.dev/fail-snapshot": "true"}),
    )
    .await
    .expect("created");
    k.create_db("kept", spec(json!({"deletionPolicy": "Retain"})))
        .await
        .expect("created");
    k.create_db("dropped", spec(json!({"deletionPolicy": "Delete"})))
        .await
        .expect("created");

    let cron_spec = eventually("source's backup CronJob", || async {
        k.get::<CronJob>("source-backup")
            .await
            .and_then(|c| c.spec)
            .map(|s| s.job_template)
    })
    .await;
    let backup: Job = serde_json::from_value(json!({
        "metadata": {"name": "source-backup-1",
                     "labels": cron_spec.metadata.as_ref().and_then(|m| m.labels.clone())},
        "spec": cron_spec.spec,
    }))
    .expect("a Job");
    k.api::<Job>()
        .create(&PostParams::default(), &backup)
        .await
        .expect("the backup Job");
    eventually("the backup Job complete", || async {
        let job = k.get::<Job>("source-backup-1").await?;
        job.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
            .then_some(())
    })
    .await;

    // Restore on create: the restore Job completes before Ready; no init Job.
    k.create_db("restored", spec(json!({"restoreFrom": "source-backup-1"})))
        .await
        .expect("created");
    let status = k
        .status_until("restored", "Ready after the restore", |s| {
            s["phase"] == "Ready"
        })
        .await;
    assert_eq!(status["restoredFrom"], "source-backup-1");
    assert_eq!(
        condition(&status, "Ready").expect("Ready")["status"],
        "True"
    );
    timeline.assert_before(
        (
            "the restore Job completing",
            timeline.first("Job", "restored-restore", complete),
        ),
        (
            "restored reporting Ready",
            timeline.first("SampleDB", "restored", |e| {
                e.object["status"]["phase"] == "Ready"
            }),
        ),
    );
    assert!(
        timeline
            .first("SampleDB", "restored", |e| e.object["status"]["phase"]
                == "Restoring")
            .is_some(),
        "restored reported Restoring while the restore ran"
    );
    assert!(
        !timeline.any("Job", "restored-init"),
        "a restored database is not initialised again"
    );
    assert!(
        timeline
            .first("SampleDB", "restored", |e| {
                condition(&e.object["status"], "Ready")
                    .is_some_and(|c| c["status"] == "False" && c["reason"] == "Restoring")
            })
            .is_some(),
        "restored was not Ready while the restore ran"
    );

    // A backup that is not there: the restore Job fails as the real tool would (the Job
    // controller retries it twice first on a real control plane), and the database says so,
    // naming the backup, and is never Ready.
    let status = k
        .status_within(
            Duration::from_secs(150),
            "missing",
            "the restore failure reported",
            |s| condition(s, "Restored").is_some_and(|c| c["reason"] == "RestoreFailed"),
        )
        .await;
    let ready = condition(&status, "Ready").expect("Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("RestoreFailed")),
        "{ready}"
    );
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("backup no-such-backup")),
        "{ready}"
    );
    assert_eq!(status["phase"], "Restoring");
    assert!(status.get("restoredFrom").is_none(), "{status}");
    assert!(
        timeline
            .first("SampleDB", "missing", |e| {
                e.object["status"]["phase"] == "Ready"
                    || condition(&e.object["status"], "Ready")
                        .is_some_and(|c| c["status"] == "True")
            })
            .is_none(),
        "a database whose restore failed was never reported Ready"
    );
    let pods = k
        .api::<Pod>()
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=missing-restore"))
        .await
        .expect("the restore Job's Pods");
    let said: Vec<String> = pods
        .items
        .iter()
        .filter_map(|p| {
            p.status.as_ref()?.container_statuses.as_ref()?[0]
                .state
                .as_ref()?
                .terminated
                .as_ref()?
                .message
                .clone()
        })
        .collect();
    assert!(
        said.iter()
            .any(|m| m.contains("/backups/no-such-backup.dump") && m.contains("sampledb-backups")),
        "the restore Pod says which backup is missing where: {said:?}"
    );

    // A failed snapshot keeps everything and says so.
    k.status_until("fragile", "Ready", |s| s["phase"] == "Ready")
        .await;
    k.status_until("kept", "Ready", |s| s["phase"] == "Ready")
        .await;
    let from = k
        .get::<StatefulSet>("fragile")
        .await
        .expect("fragile's StatefulSet")
        .resource_version()
        .expect("resourceVersion");
    k.dbs()
        .delete("fragile", &DeleteParams::default())
        .await
        .expect("delete");
    let status = k
        .status_until("fragile", "the snapshot failure reported", |s| {
            condition(s, "Snapshotted").is_some_and(|c| c["reason"] == "SnapshotFailed")
        })
        .await;
    assert_eq!(
        condition(&status, "Snapshotted").expect("condition")["status"],
        "False"
    );
    // The host writes a parent's status after that reconcile's deletes: nothing of fragile went
    // from before its deletion up to now.
    let (statefulsets, through) = history_since(&k.api::<StatefulSet>(), &from).await;
    assert!(
        !went(&statefulsets, "fragile"),
        "fragile's StatefulSet went by RV {through}"
    );
    let (claims, through) = history_since(&k.api::<PersistentVolumeClaim>(), &from).await;
    assert!(
        !went(&claims, "data-fragile-0"),
        "fragile's volume went by RV {through} though its snapshot failed"
    );
    let db = k
        .db("fragile")
        .await
        .expect("fragile is kept while its snapshot failed");
    assert!(db["metadata"]["deletionTimestamp"].is_string());
    assert!(
        k.get::<StatefulSet>("fragile").await.is_some(),
        "the StatefulSet is kept"
    );
    assert!(
        k.get::<PersistentVolumeClaim>("data-fragile-0")
            .await
            .is_some(),
        "the data volume is kept"
    );

    // Retain: the SampleDB and its StatefulSet go, the volume stays.
    let from = k
        .get::<PersistentVolumeClaim>("data-kept-0")
        .await
        .expect("kept's volume")
        .resource_version()
        .expect("resourceVersion");
    k.dbs()
        .delete("kept", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("kept and its StatefulSet gone", || async {
        (k.db("kept").await.is_none() && k.get::<StatefulSet>("kept").await.is_none()).then_some(())
    })
    .await;
    // Nothing deleted the volume up to now, and nothing can collect it later: no owner.
    let (claims, through) = history_since(&k.api::<PersistentVolumeClaim>(), &from).await;
    assert!(
        !went(&claims, "data-kept-0"),
        "deletionPolicy Retain keeps the data volume; it went by RV {through}"
    );
    let claim = k
        .get::<PersistentVolumeClaim>("data-kept-0")
        .await
        .expect("deletionPolicy Retain keeps the data volume");
    assert!(
        claim.owner_references().is_empty(),
        "the kept volume has owners the garbage collector may follow: {:?}",
        claim.owner_references()
    );

    // Delete: no snapshot, and the volume goes with the StatefulSet.
    k.status_until("dropped", "Ready", |s| s["phase"] == "Ready")
        .await;
    k.dbs()
        .delete("dropped", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("dropped, its StatefulSet and its volume gone", || async {
        (k.db("dropped").await.is_none()
            && k.get::<StatefulSet>("dropped").await.is_none()
            && k.get::<PersistentVolumeClaim>("data-dropped-0")
                .await
                .is_none())
        .then_some(())
    })
    .await;
    assert!(
        !timeline.any_prefixed("VolumeSnapshot", "data-dropped-"),
        "deletionPolicy Delete takes no snapshot"
    );
    dev.shutdown().await;
}

/// A SampleDB deleted with foreground propagation (`kubectl delete --cascade=foreground`, Argo
/// CD's default): the garbage collector deletes the parent's dependents, and theirs, before the
/// parent, while the host's finalizer still holds the parent for its finalize phase. The
/// volumes must still outlive the final snapshots, as with a background deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_foreground_deletion_takes_no_volume_before_its_final_snapshot() {
    let dev = start().await;
    let k = Cluster::new(&dev);
    k.create_db(
        "fg",
        json!({"version": "16.4", "replicas": 2, "storage": {"size": "1Gi"}}),
    )
    .await
    .expect("created");
    k.status_until("fg", "Ready", |s| s["phase"] == "Ready")
        .await;
    let uid = k.db("fg").await.expect("fg")["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_string();
    let timeline = k.record();
    k.dbs()
        .delete("fg", &DeleteParams::foreground())
        .await
        .expect("delete");
    eventually("fg gone", || async {
        k.db("fg").await.is_none().then_some(())
    })
    .await;
    eventually("its PVCs gone", || async {
        let pvcs = k
            .api::<PersistentVolumeClaim>()
            .list(&ListParams::default())
            .await
            .expect("list");
        (!pvcs
            .items
            .iter()
            .any(|p| p.name_any().starts_with("data-fg-")))
        .then_some(())
    })
    .await;
    for i in 0..2 {
        let pvc = format!("data-fg-{i}");
        let name = sampledb_api::names::final_snapshot(&pvc, &uid);
        timeline.assert_before(
            (
                &format!("{name} ready"),
                timeline.first("VolumeSnapshot", &name, |e| {
                    e.object["status"]["readyToUse"] == true
                }),
            ),
            (
                &format!("{pvc} deleted"),
                timeline.first("PersistentVolumeClaim", &pvc, |e| {
                    e.verb == "deleted" || e.object["metadata"]["deletionTimestamp"].is_string()
                }),
            ),
        );
    }
    dev.shutdown().await;
}

/// What a host serving a SampleDB exports is what monitoring expects: `promtool check metrics`
/// finds nothing in it, Prometheus is served OpenMetrics, and every metric and label the chart's
/// dashboard and alerts query is among it (`monitoring::check_queries_against`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_serving_sampledbs_exports_clean_metrics_and_every_query_names_them() {
    let dev = start().await;
    let k = Cluster::new(&dev);
    k.create_db(
        "watched",
        json!({"version": "16.4", "replicas": 2, "storage": {"size": "1Gi"}}),
    )
    .await
    .expect("created");
    k.status_until("watched", "Ready", |s| s["phase"] == "Ready")
        .await;
    let admin = dev.dev.operator.admin_addr;
    let (content_type, text) = crate::monitoring::scrape(admin, "*/*").await;
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let findings = crate::monitoring::promtool_check_metrics(&text)
        .unwrap_or_else(|e| panic!("promtool check metrics: {e}"));
    assert!(
        findings.trim().is_empty(),
        "promtool check metrics: {findings}"
    );
    for series in [
        "controller_runtime_reconcile_total{controller=\"samples.windlass.dev/v1alpha1/SampleDB\"",
        "workqueue_adds_total{name=\"samples.windlass.dev/v1alpha1/SampleDB\"",
        "windlass_plugin_serving{plugin=\"sampledb-primary\"} 1",
    ] {
        assert!(text.contains(series), "{series} missing from {text}");
    }
    let (content_type, openmetrics) = crate::monitoring::scrape(
        admin,
        "application/openmetrics-text;version=1.0.0;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    )
    .await;
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    let checked = crate::monitoring::check_queries_against(&text);
    assert!(checked >= 30, "{checked} selectors checked");
    dev.shutdown().await;
}

/// The StatefulSet is held exactly while a plugin finalizes: owned again when the backup
/// plugin goes, and held again — the next apply drops the owner reference the host set, the
/// path a StatefulSet from before held objects takes — when it comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_statefulset_is_held_exactly_while_a_plugin_finalizes() {
    let dev = start().await;
    let k = Cluster::new(&dev);
    k.create_db(
        "held",
        json!({"version": "16.4", "replicas": 1, "storage": {"size": "1Gi"}}),
    )
    .await
    .expect("created");
    k.status_until("held", "Ready", |s| s["phase"] == "Ready")
        .await;
    let uid = k.db("held").await.expect("held")["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_string();
    let owned = |sts: &StatefulSet| {
        sts.owner_references()
            .iter()
            .any(|r| r.uid == uid && r.controller == Some(true))
    };
    let sts: StatefulSet = k.get("held").await.expect("the StatefulSet");
    assert!(!owned(&sts), "held while the backup plugin finalizes");
    let plugins: Api<windlass::crd::WasmPlugin> = Api::all(k.client.clone());
    let backup = plugins
        .get("sampledb-backup")
        .await
        .expect("the backup WasmPlugin");
    plugins
        .delete("sampledb-backup", &DeleteParams::default())
        .await
        .expect("the backup WasmPlugin deleted");
    eventually("the StatefulSet owned once nothing finalizes", || async {
        owned(&k.get::<StatefulSet>("held").await?).then_some(())
    })
    .await;
    plugins
        .create(
            &PostParams::default(),
            &windlass::crd::WasmPlugin::new("sampledb-backup", backup.spec.clone()),
        )
        .await
        .expect("the backup WasmPlugin back");
    eventually("the StatefulSet held again", || async {
        let sts = k.get::<StatefulSet>("held").await?;
        (!owned(&sts) && sts.labels().get("windlass.dev/parent-uid") == Some(&uid)).then_some(())
    })
    .await;
    dev.shutdown().await;
}

/// Chaos as a SampleDB capability: with `spec.chaos.killPrimaryEvery` the chaos plugin (Go)
/// runs a CronJob whose Pod deletes the primary's Pod through the API, as its own
/// ServiceAccount with a Role that allows just that — kinds and an account the plugin has only
/// by its WasmPlugin's grants. Each time, a new primary is elected and the client Service points
/// at it within `FAILOVER_BOUND`, and no data volume goes. Chaos off prunes all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_kills_the_primary_and_a_new_one_serves_without_losing_a_volume() {
    /// From the chaos Job's start to the new primary labelled and selected.
    const FAILOVER_BOUND: Duration = Duration::from_secs(30);
    let dev = start().await;
    let k = Cluster::new(&dev);
    k.create_db(
        "chaos",
        json!({"version": "16.4", "replicas": 3, "storage": {"size": "1Gi"},
               "chaos": {"killPrimaryEvery": "10m"}}),
    )
    .await
    .expect("created");
    let status = k
        .status_until("chaos", "Ready with a primary and chaos on", |s| {
            s["phase"] == "Ready"
                && s["readyReplicas"] == 3
                && s["primary"].is_string()
                && condition(s, "Chaos").is_some_and(|c| c["status"] == "True")
        })
        .await;
    let mut primary = status["primary"].as_str().expect("primary").to_string();
    // What the grants let the plugin make: an account of the database's own, a Role that may
    // list and delete Pods and nothing else, bound to it, and the CronJob running as it.
    let cron: CronJob = k.get("chaos-chaos").await.expect("the chaos CronJob");
    let cron_spec = cron.spec.expect("spec");
    assert_eq!(cron_spec.schedule, "*/10 * * * *");
    let pod_spec = cron_spec
        .job_template
        .spec
        .clone()
        .expect("job")
        .template
        .spec
        .expect("pod");
    assert_eq!(
        pod_spec.service_account_name.as_deref(),
        Some("chaos-chaos")
    );
    assert_eq!(pod_spec.automount_service_account_token, Some(true));
    let roles: Api<DynamicObject> = Api::namespaced_with(
        k.client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
        )),
    );
    let role = roles.get("chaos-chaos").await.expect("the Role");
    assert_eq!(
        role.data["rules"],
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]}])
    );
    let volumes = |pvcs: Vec<PersistentVolumeClaim>| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = pvcs
            .into_iter()
            .filter(|p| p.name_any().starts_with("data-chaos-"))
            .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
            .collect();
        v.sort();
        v
    };
    let before = volumes(
        k.api::<PersistentVolumeClaim>()
            .list(&ListParams::default())
            .await
            .expect("PVCs")
            .items,
    );
    assert_eq!(before.len(), 3, "{before:?}");

    // Two rounds of chaos. The CronJob fires every ten minutes (every ten seconds in the
    // devcluster, whose CronJobs run 60× faster); to know when each round starts, run its Job
    // now, from the CronJob's own template, as `kubectl create job --from=cronjob/…` does.
    for round in 1..=2 {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": format!("chaos-chaos-now-{round}"),
                         "labels": cron_spec.job_template.metadata.as_ref().and_then(|m| m.labels.clone())},
            "spec": cron_spec.job_template.spec.clone(),
        }))
        .expect("a Job");
        let started = tokio::time::Instant::now();
        k.api::<Job>()
            .create(&PostParams::default(), &job)
            .await
            .expect("the chaos Job");
        let old = primary.clone();
        // Done when the status names a new primary by name and uid, that Pod is live with that
        // uid (one made again under its name is not it), and exactly it has the primary role,
        // which the client Service selects. All read together each time: on the devcluster the
        // CronJob's own schedule also kills a primary every ten seconds, so the one read a
        // moment ago may already have gone.
        let mut seen = String::new();
        loop {
            let status = k.db("chaos").await.map(|db| db["status"].clone());
            let named = status
                .as_ref()
                .and_then(|s| s["primary"].as_str())
                .filter(|p| *p != old.as_str())
                .map(str::to_string);
            if let (Some(s), Some(name)) = (&status, named) {
                let pod: Option<Pod> = k.get(&name).await;
                let labelled: Vec<String> = k
                    .api::<Pod>()
                    .list(&ListParams::default().labels(&format!(
                        "app.kubernetes.io/instance=chaos,{}=primary",
                        sampledb_api::ROLE_LABEL
                    )))
                    .await
                    .expect("Pods")
                    .items
                    .iter()
                    .map(|p| p.name_any())
                    .collect();
                let live_uid = pod.as_ref().and_then(|p| p.uid());
                if live_uid.is_some()
                    && s["primaryUID"].as_str() == live_uid.as_deref()
                    && labelled == [name.clone()]
                {
                    primary = name;
                    break;
                }
                seen = format!(
                    "status primary {name} uid {}; the live Pod's uid {live_uid:?}; \
                     labelled primary {labelled:?}",
                    s["primaryUID"]
                );
            }
            assert!(
                started.elapsed() < FAILOVER_BOUND,
                "round {round}: no new primary serving after {FAILOVER_BOUND:?}; last seen: \
                 {seen}; status: {}\n{}",
                serde_json::to_string_pretty(&status).unwrap_or_default(),
                k.chaos_round(&job.name_any()).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let service: Service = k.get("chaos").await.expect("client Service");
        assert_eq!(
            service.spec.expect("spec").selector.expect("selector")[sampledb_api::ROLE_LABEL],
            "primary"
        );
    }
    // The deleted Pods came back (the StatefulSet's), on the same volumes: none lost.
    k.status_until("chaos", "all replicas ready again", |s| {
        s["readyReplicas"] == 3
    })
    .await;
    let after = volumes(
        k.api::<PersistentVolumeClaim>()
            .list(&ListParams::default())
            .await
            .expect("PVCs")
            .items,
    );
    assert_eq!(after, before, "a data volume was lost or replaced");

    // Chaos off: the CronJob and what it ran as are pruned.
    k.dbs()
        .patch(
            "chaos",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"chaos": null}})),
        )
        .await
        .expect("chaos off");
    k.status_until("chaos", "chaos off", |s| {
        condition(s, "Chaos").is_some_and(|c| c["status"] == "False")
    })
    .await;
    eventually("the chaos objects pruned", || async {
        let cron = k.get::<CronJob>("chaos-chaos").await;
        let role = roles.get_opt("chaos-chaos").await.expect("get Role");
        (cron.is_none() && role.is_none()).then_some(())
    })
    .await;
    dev.shutdown().await;
}
