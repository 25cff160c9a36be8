//! The operator end to end against the devcluster: WasmPlugins from ConfigMaps, parents and
//! their children, hot swap, broken versions, finalize, leader failover, API faults.

use crate::support;

use std::{sync::atomic::Ordering, time::Duration};

use k8s_openapi::api::{apps::v1::StatefulSet, events::v1::Event};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::{Value, json};
use support::*;
use tokio::sync::watch;
use windlass::leader::Election;
use windlass_test_guests as guests;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampledb_gets_owned_labelled_children_and_becomes_ready() {
    let mut env = Env::start().await;
    env.put_plugin_bytes("storage", guests::bytes(guests::STORAGE))
        .await;
    // The storage plugin keeps the credentials Secret it generated: it must be granted Secrets.
    env.put_wasm_plugin(
        "sampledb-storage",
        ("samples.windlass.dev/v1alpha1", "SampleDB"),
        "storage",
        json!({"grants": windlass::dev::sampledb_spec("sampledb-storage", "/grants")}),
    )
    .await;
    env.run_operator().await;
    let sdb_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("samples.windlass.dev", "v1alpha1", "SampleDB"),
        "sampledbs",
    );
    let sdbs: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), "shop", &sdb_resource);
    let example: Value =
        windlass::render::parse_docs(include_str!("../../../examples/sampledb.yaml"), "example")
            .unwrap()
            .remove(0);
    let mut sdb: DynamicObject = serde_json::from_value(example).unwrap();
    sdb.metadata.namespace = Some("shop".into());
    let created = sdbs
        .create(&PostParams::default(), &sdb)
        .await
        .expect("SampleDB created");
    let uid = created.uid().unwrap();

    let sts_api: Api<StatefulSet> = Api::namespaced(env.client.clone(), "shop");
    let sts = eventually("the StatefulSet", || async {
        sts_api.get_opt("example-database").await.ok().flatten()
    })
    .await;
    let labels = sts.labels();
    assert_eq!(labels["windlass.dev/parent-uid"], uid);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "windlass");
    let owner = &sts.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("SampleDB", uid.as_str(), Some(true))
    );
    assert!(sts.annotations()["windlass.dev/produced-by"].starts_with("sampledb-storage@sha256:"));
    let template_labels = sts
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(template_labels["windlass.dev/parent-uid"], uid);

    // The simulator makes the replicas ready; the plugin sees it through the watch cache.
    let ready = eventually("phase Ready", || async {
        let sdb = serde_json::to_value(sdbs.get("example-database").await.ok()?).ok()?;
        (sdb.pointer("/status/phase")? == "Ready").then_some(sdb)
    })
    .await;
    assert_eq!(ready["status"]["readyReplicas"], 3);
    assert_eq!(ready["status"]["observedGeneration"], 1);
    assert_eq!(condition(&ready, "Reconciled").unwrap()["status"], "True");
    assert_eq!(condition(&ready, "StorageReady").unwrap()["status"], "True");
    let metrics = &env.operator.as_ref().unwrap().health.metrics;
    assert!(
        metrics
            .encode()
            .contains(r#"windlass_plugin_calls_total{plugin="sampledb-storage",outcome="ok"}"#)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_the_spec_updates_children_and_prunes_stale_ones() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing_with_children("t1", json!({"names": ["a", "b"], "value": "one"}), 2)
        .await;
    env.things()
        .patch(
            "t1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"names": ["a"], "value": "two"}})),
        )
        .await
        .unwrap();
    let children = eventually("b pruned and a updated", || async {
        let c = env.children_of("t1").await;
        (c.len() == 1 && data(&c[0], "value") == "two").then_some(c)
    })
    .await;
    assert_eq!(children[0].name_any(), "t1-a");
}

/// A kind's pipeline runs only when every WasmPlugin of the kind serves: with one not serving
/// (its source missing, as at a host's start before it loaded, or refused with no earlier
/// version), the parent is not reconciled — nothing applied, nothing pruned — and says which
/// plugin it waits for. Found by the chaos suite: a restarted host ran the SampleDB pipeline
/// without the backup plugin, still loading, and pruned the backup CronJobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_missing_a_wasm_plugin_prunes_nothing_until_it_serves() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing_with_children("t1", json!({"names": ["a", "b"], "value": "one"}), 2)
        .await;
    // A second WasmPlugin of the kind whose source does not exist: it cannot serve.
    env.put_wasm_plugin(
        "later",
        ("example.com/v1", "Thing"),
        "no-such-config-map",
        json!({"order": 20}),
    )
    .await;
    let from = current_rv(&env.config_maps()).await;
    env.things()
        .patch(
            "t1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"names": ["a"], "value": "two"}})),
        )
        .await
        .unwrap();
    let status = env
        .thing_condition("t1", "Reconciled", "PluginsNotServing")
        .await;
    assert!(
        status["message"].as_str().unwrap_or("").contains("later"),
        "{status}"
    );
    // Meanwhile nothing is applied or pruned: b stays, a keeps the old value. The refusal is
    // written where the applies and prunes would have been, after them: none up to now.
    let (history, through) = history_since(&env.config_maps(), &from).await;
    let written = written(&history, |name| name.starts_with("t1-"));
    assert!(
        written.is_empty(),
        "t1's children written by RV {through}: {written:?}"
    );
    let children = env.children_of("t1").await;
    assert_eq!(children.len(), 2, "{children:?}");
    assert!(children.iter().all(|c| data(c, "value") == "one"));
    // Once the pipeline is whole again (here: that WasmPlugin deleted), the spec is acted on.
    Api::<windlass::crd::WasmPlugin>::all(env.client.clone())
        .delete("later", &DeleteParams::default())
        .await
        .expect("WasmPlugin deleted");
    let children = eventually("b pruned and a updated", || async {
        let c = env.children_of("t1").await;
        (c.len() == 1 && data(&c[0], "value") == "two").then_some(c)
    })
    .await;
    assert_eq!(children[0].name_any(), "t1-a");
}

/// A kind whose only WasmPlugin cannot serve (here: its ConfigMap does not exist) still gets
/// its controller: each parent says which plugin it waits for, by condition and Warning event,
/// instead of showing nothing. Once the plugin serves, the parent is reconciled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_with_no_serving_plugin_tells_its_parents_why() {
    let mut env = Env::start().await;
    env.run_operator().await;
    env.put_wasm_plugin(
        "lonely",
        ("example.com/v1", "Thing"),
        "no-such-config-map",
        json!({"order": 10}),
    )
    .await;
    env.create_thing("t1", json!({"names": ["a"], "value": "one"}))
        .await;
    let status = env
        .thing_condition("t1", "Reconciled", "PluginsNotServing")
        .await;
    assert_eq!(status["status"], "False");
    assert!(
        status["message"].as_str().unwrap_or("").contains("lonely"),
        "{status}"
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), "shop");
    eventually("a Warning event naming the plugin", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("PluginsNotServing")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("t1")
                    && e.note.as_deref().is_some_and(|n| n.contains("lonely"))
            })
            .then_some(())
    })
    .await;
    assert!(env.children_of("t1").await.is_empty());
}

/// The value of one series of the operator's `windlass_writes_total`.
fn writes(env: &Env, kind: &str, outcome: &str) -> u64 {
    let text = env.operator.as_ref().unwrap().health.metrics.encode();
    let series = format!(r#"windlass_writes_total{{kind="{kind}",outcome="{outcome}"}} "#);
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_that_changes_nothing_writes_nothing_and_drift_is_put_back() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing("t1", json!({"names": ["a"], "value": "one"}))
        .await;
    eventually("the child", || async {
        let c = env.children_of("t1").await;
        (c.len() == 1 && data(&c[0], "value") == "one").then_some(())
    })
    .await;
    let applied = writes(&env, "v1/ConfigMap", "applied");
    assert!(applied >= 1, "the child was applied once");

    // A change to the parent that leaves the desired child as it is: the parent is
    // reconciled again, but neither the child nor the status is written.
    let unchanged = writes(&env, "v1/ConfigMap", "unchanged");
    env.things()
        .patch(
            "t1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    eventually("a reconcile that found the child up to date", || async {
        (writes(&env, "v1/ConfigMap", "unchanged") > unchanged).then_some(())
    })
    .await;
    assert_eq!(writes(&env, "v1/ConfigMap", "applied"), applied);
    // Exactly once in all: the reconciles that followed the create (its own watch event among
    // them) found it up to date, the uid precondition on later applies notwithstanding.
    assert_eq!(applied, 1, "the child was written again after its create");
    assert!(writes(&env, "status", "unchanged") >= 1);

    // Someone else changes a value the plugin sets: the host puts it back.
    env.config_maps()
        .patch(
            "t1-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"value": "tampered"}})),
        )
        .await
        .unwrap();
    eventually("the drifted value put back", || async {
        let c = env.children_of("t1").await;
        (c.len() == 1 && data(&c[0], "value") == "one").then_some(())
    })
    .await;
    assert!(writes(&env, "v1/ConfigMap", "applied") > applied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updating_the_plugins_config_map_swaps_the_logic_without_a_restart() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    env.wait_for_child_version("t1", "1.0.0").await;
    env.put_plugin_bytes("children", guests::bytes(guests::CHILDREN_V2))
        .await;
    env.wait_for_child_version("t1", "2.0.0").await;
    let wp = env.wasm_plugin("children").await;
    let status = wp.status.unwrap();
    assert_eq!(status.version.as_deref(), Some("2.0.0"));
    assert_eq!(
        status.digest.as_deref(),
        Some(windlass::runtime::digest(&guests::bytes(guests::CHILDREN_V2)).as_str())
    );
}

/// Swaps in a broken version and checks that v1 keeps serving and nothing is deleted.
/// `spec` (when given) is applied over the WasmPlugin's spec first and waited for, so the
/// broken version is judged with it. Returns the Ready condition's message.
async fn broken_version_is_refused(bytes: Vec<u8>, spec: Option<Value>, reason: &str) -> String {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing_with_children("t1", json!({"names": ["a", "b"], "value": "v"}), 2)
        .await;
    let good = windlass::runtime::digest(&guests::bytes(guests::CHILDREN));
    let ready_since = |status: &windlass::crd::WasmPluginStatus| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "True")
            .map(|c| c.last_transition_time.clone())
    };
    let loaded = eventually("Ready", || async {
        ready_since(&env.wasm_plugin("children").await.status?)
    })
    .await;
    // A later status write in another second must keep the transition time: Ready stays True.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    if let Some(spec) = spec {
        env.put_wasm_plugin("children", ("example.com/v1", "Thing"), "children", spec)
            .await;
        let generation = env.wasm_plugin("children").await.metadata.generation;
        eventually("the new spec seen by the loader", || async {
            let status = env.wasm_plugin("children").await.status?;
            (status.observed_generation == generation).then_some(())
        })
        .await;
    }
    env.put_plugin_bytes("children", bytes).await;
    let status = eventually("the refusal on the WasmPlugin", || async {
        let status = env.wasm_plugin("children").await.status?;
        status.last_error.is_some().then_some(status)
    })
    .await;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, reason, "{}", ready.message);
    assert!(
        ready
            .message
            .starts_with(&format!("new version refused, still serving {good}")),
        "{}",
        ready.message
    );
    assert_eq!(status.digest.as_deref(), Some(good.as_str()));
    assert_eq!(ready_since(&status), Some(loaded), "Ready never flipped");
    // kubectl shows it too: a Warning event on the WasmPlugin saying what Ready says.
    let events: Api<Event> = Api::namespaced(env.client.clone(), "default");
    let event = eventually("a Warning event on the WasmPlugin", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("WasmPlugin") && r.name.as_deref() == Some("children")
                }) && e.reason.as_deref() == Some(reason)
            })
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    // The same message, cut to what an event's note holds.
    assert_eq!(
        event.note,
        Some(windlass_policy::cut_message(
            &ready.message,
            windlass_policy::MAX_EVENT_NOTE
        ))
    );
    // The old version still serves: a new parent gets its children.
    env.create_thing("t2", json!({"names": ["x"], "value": "v"}))
        .await;
    env.wait_for_child_version("t2", "1.0.0").await;
    assert_eq!(env.children_of("t1").await.len(), 2, "no child was deleted");
    ready.message.clone()
}

/// The children WasmPlugin's source, pinned to `pin`.
fn pin_spec(pin: &str) -> Value {
    json!({"source": {
        "configMap": {"namespace": "windlass-system", "name": "children"}, "sha256": pin}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_traps_is_refused_and_the_old_one_keeps_serving() {
    broken_version_is_refused(
        guests::bytes(guests::MISBEHAVE),
        Some(json!({"config": {"do": "panic"}})),
        "Trap",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_times_out_is_refused_and_the_old_one_keeps_serving() {
    broken_version_is_refused(
        guests::bytes(guests::MISBEHAVE),
        Some(json!({"config": {"do": "loop"}})),
        "Timeout",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_with_forbidden_output_is_refused_and_the_old_one_keeps_serving() {
    broken_version_is_refused(
        guests::bytes(guests::MISBEHAVE),
        Some(json!({"config": {"do": "otherNamespace"}})),
        "InvalidOutput",
    )
    .await;
}

/// The config check (contract 0.2.0) runs at load under the limits of a call: one that never
/// returns is a timeout, and the old version keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_whose_config_check_never_returns_is_refused_and_the_old_one_keeps_serving() {
    broken_version_is_refused(
        guests::bytes(guests::HOSTILE_CONFIG),
        Some(json!({"config": {"validate": "loop"}})),
        "Timeout",
    )
    .await;
}

/// A version that refuses its config is refused as `InvalidConfig`, its 8 MiB message cut to
/// what a condition holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_refuses_its_config_is_refused_with_its_message_cut() {
    let message = broken_version_is_refused(
        guests::bytes(guests::HOSTILE_CONFIG),
        Some(json!({"config": {"validate": "long"}})),
        "InvalidConfig",
    )
    .await;
    assert!(
        message.contains("plugin guest-hostile-config: invalid config: validate: xxx"),
        "{}",
        &message[..200]
    );
    assert!(
        message.len() <= windlass_policy::MAX_CONDITION_MESSAGE,
        "{} bytes",
        message.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_with_the_wrong_digest_is_refused_and_the_old_one_keeps_serving() {
    let pin = windlass::runtime::digest(&guests::bytes(guests::CHILDREN));
    broken_version_is_refused(
        guests::bytes(guests::CHILDREN_V2),
        Some(pin_spec(&pin)),
        "DigestMismatch",
    )
    .await;
}

/// A component too big for a ConfigMap is stored gzip-compressed: the host inflates it, and
/// its digest — the one it reports and the one a pin is checked against — is the component's,
/// however it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_compressed_component_loads_under_the_digest_of_the_component() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    env.wait_for_child_version("t1", "1.0.0").await;
    let v2 = guests::bytes(guests::CHILDREN_V2);
    let packed = windlass::source::compressed::deflate(&v2);
    assert!(
        packed.len() < v2.len() / 2,
        "{} of {}",
        packed.len(),
        v2.len()
    );
    let digest = windlass::runtime::digest(&v2);
    env.put_wasm_plugin(
        "children",
        ("example.com/v1", "Thing"),
        "children",
        pin_spec(&digest),
    )
    .await;
    env.put_plugin_bytes("children", packed).await;
    env.wait_for_child_version("t1", "2.0.0").await;
    let status = env.wasm_plugin("children").await.status.unwrap();
    assert_eq!(status.version.as_deref(), Some("2.0.0"));
    assert_eq!(status.digest.as_deref(), Some(digest.as_str()));
    assert!(status.last_error.is_none(), "{:?}", status.last_error);
}

/// A gzip stream that would inflate to 256 MiB (of zeros, in well under 1 MiB) is refused at
/// the 64 MiB limit, naming the ConfigMap, and the old version keeps serving. (That reading
/// stops at the limit is the unit tests' part: compressed.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_component_that_inflates_past_the_limit_is_refused() {
    let bomb = windlass::source::compressed::deflate(&vec![0u8; 256 << 20]);
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    let message = broken_version_is_refused(bomb, None, "InflateFailed").await;
    assert!(
        message.contains(
            "configMap windlass-system/children[plugin.wasm]: refusing the plugin: the gzip-compressed component inflates to more than the limit of 67108864 bytes"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_pin_on_a_config_map_source_is_refused_as_such() {
    // Checked before the ConfigMap is read, as for a registry: not a digest mismatch.
    broken_version_is_refused(
        guests::bytes(guests::CHILDREN_V2),
        Some(pin_spec("sha256:not-a-digest")),
        "InvalidPin",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_plugin_sets_a_condition_naming_it_and_deletes_nothing() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    eventually("a child", || async {
        (env.children_of("t1").await.len() == 1).then_some(())
    })
    .await;
    // A spec the plugin cannot read: it fails on this parent only.
    env.things()
        .patch(
            "t1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"names": "not-a-list"}})),
        )
        .await
        .unwrap();
    let thing = eventually("the failure condition", || async {
        let t = serde_json::to_value(env.things().get("t1").await.ok()?).ok()?;
        (condition(&t, "Reconciled")?["status"] == "False").then_some(t)
    })
    .await;
    let reconciled = condition(&thing, "Reconciled").unwrap();
    assert_eq!(reconciled["reason"], "InvalidParent");
    assert!(
        reconciled["message"]
            .as_str()
            .unwrap()
            .starts_with("plugin guest-children: invalid parent: spec:"),
        "{reconciled}"
    );
    assert_eq!(env.children_of("t1").await.len(), 1, "nothing was pruned");
    let events: Api<Event> = Api::namespaced(env.client.clone(), "shop");
    eventually("a Warning event", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("InvalidParent")
            })
            .then_some(())
    })
    .await;
}

/// A prune deletes only the child the host observed: its delete carries a precondition on that
/// child's uid, so an object deleted and made again under the same name by someone else while
/// the prune was on its way is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_leaves_alone_an_object_made_again_under_the_childs_name() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing_with_children("t1", json!({"names": ["a", "b"], "value": "v"}), 2)
        .await;
    // The host's delete of t1-b is held in flight ...
    let held = env
        .dev_only("holding a request in flight")
        .faults()
        .hold(|r| r.verb == "delete" && r.resource == "configmaps" && r.name == "t1-b");
    env.things()
        .patch(
            "t1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"names": ["a"]}})),
        )
        .await
        .unwrap();
    let held = tokio::time::timeout(WAIT, held)
        .await
        .expect("the prune of t1-b")
        .expect("held");
    // ... while someone else deletes t1-b and makes their own under that name.
    let config_maps = env.config_maps();
    config_maps
        .delete("t1-b", &DeleteParams::default())
        .await
        .unwrap();
    let theirs: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "t1-b", "labels": {"app": "someone-else"}},
        "data": {"value": "theirs"},
    }))
    .unwrap();
    let theirs = config_maps
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let before = serde_json::to_value(&theirs).unwrap();
    drop(held);
    // The host's reconcile ends (its prune refused by the precondition, or done): t1 says so
    // after it. Then theirs is untouched.
    eventually("t1 reconciled after the prune", || async {
        let t = serde_json::to_value(env.things().get("t1").await.ok()?).ok()?;
        let generation = t["metadata"]["generation"].as_i64()?;
        let c = condition(&t, "Reconciled")?;
        (c["observedGeneration"].as_i64() == Some(generation)).then_some(())
    })
    .await;
    let (history, through) = history_since(
        &config_maps,
        before["metadata"]["resourceVersion"].as_str().unwrap(),
    )
    .await;
    assert!(
        !went(&history, "t1-b"),
        "their t1-b was deleted by RV {through}"
    );
    let now = serde_json::to_value(config_maps.get("t1-b").await.unwrap()).unwrap();
    assert_eq!(now, before, "their t1-b changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_parent_finalizes_first_then_its_children_go() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    let thing = eventually("the finalizer", || async {
        let t = env.things().get("t1").await.ok()?;
        t.finalizers()
            .contains(&"windlass.dev/finalize".to_string())
            .then_some(t)
    })
    .await;
    assert!(
        thing
            .finalizers()
            .contains(&"windlass.dev/finalize".to_string())
    );
    eventually("a child", || async {
        (env.children_of("t1").await.len() == 1).then_some(())
    })
    .await;
    let from = env
        .things()
        .get("t1")
        .await
        .unwrap()
        .resource_version()
        .unwrap();
    env.things()
        .delete("t1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the parent gone", || async {
        env.things()
            .get_opt("t1")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually("its children collected", || async {
        env.children_of("t1").await.is_empty().then_some(())
    })
    .await;
    // The order, from the resourceVersions of the writes (one order on both planes): the
    // plugin's finalize phase told its end, then the parent went, then its children.
    let (parents, _) = history_since(&env.things(), &from).await;
    let parent_gone = parents
        .iter()
        .find_map(|e| match e {
            WatchEvent::Deleted(o) if o.name_any() == "t1" => {
                Some(rv_number(o.metadata.resource_version.as_ref()))
            }
            _ => None,
        })
        .expect("t1's deletion in the watch history");
    let events: Api<Event> = Api::namespaced(env.client.clone(), "shop");
    let list = events.list(&ListParams::default()).await.unwrap();
    let finalized = list
        .items
        .iter()
        .find(|e| {
            e.reason.as_deref() == Some("Finalized")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("t1")
        })
        .expect("a Finalized event for t1");
    let finalized = rv_number(finalized.metadata.resource_version.as_ref());
    assert!(
        finalized < parent_gone,
        "the finalize phase's end (RV {finalized}) came after the parent went (RV {parent_gone})"
    );
    let (config_maps, _) = history_since(&env.config_maps(), &from).await;
    let children_gone: Vec<(String, u64)> = config_maps
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Deleted(o) if o.name_any().starts_with("t1-") => Some((
                o.name_any(),
                rv_number(o.metadata.resource_version.as_ref()),
            )),
            _ => None,
        })
        .collect();
    // t1-a, and t1-final, which the plugin's finalize phase wrote.
    let mut names: Vec<&str> = children_gone.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["t1-a", "t1-final"],
        "t1's children deleted, once each"
    );
    assert!(
        children_gone.iter().all(|(_, rv)| *rv > parent_gone),
        "a child (RVs {children_gone:?}) went before its parent (RV {parent_gone})"
    );
}

/// The election of these tests: the Lease `windlass-system/windlass-leader`, valid for 3 s,
/// renewed 1 s before it lapses.
fn election(identity: &str) -> Election {
    Election {
        namespace: "windlass-system".into(),
        name: "windlass-leader".into(),
        identity: identity.into(),
        duration: Duration::from_secs(3),
        grace: Duration::from_secs(1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_when_the_leader_stops() {
    let env = Env::start().await;
    env.install_children_plugin().await;
    let (stop_a, a, task_a) = env.start_host("a", Some(election("a"))).await;
    eventually("a leads", || async {
        a.health.leading.load(Ordering::Relaxed).then_some(())
    })
    .await;
    let (stop_b, b, _task_b) = env.start_host("b", Some(election("b"))).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !b.health.leading.load(Ordering::Relaxed),
        "b stands by while a leads"
    );
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    eventually("a reconciles", || async {
        (env.children_of("t1").await.len() == 1).then_some(())
    })
    .await;

    stop_a.send(true).unwrap();
    let _ = task_a.await;
    let stopped = std::time::Instant::now();
    eventually("b takes over", || async {
        b.health.leading.load(Ordering::Relaxed).then_some(())
    })
    .await;
    // a freed the Lease on its way out: b need not wait the 3 s of a lapse.
    assert!(
        stopped.elapsed() < Duration::from_secs(2),
        "b took over {:?} after a stopped",
        stopped.elapsed()
    );
    env.create_thing("t2", json!({"names": ["x"], "value": "v"}))
        .await;
    eventually("b reconciles", || async {
        (env.children_of("t2").await.len() == 1).then_some(())
    })
    .await;
    let _ = stop_b.send(true);
}

/// A host reconciling Things one at a time, each reconcile kept busy `millis` by the plugin,
/// letting the running reconciles finish for `drain` when it stops: its stop switch (send
/// `true`), its handle and its task.
async fn busy_host(
    env: &Env,
    millis: u64,
    drain: Duration,
) -> (
    watch::Sender<bool>,
    windlass::operator::Handle,
    tokio::task::JoinHandle<()>,
) {
    env.put_plugin_bytes("busy", guests::bytes(guests::MISBEHAVE))
        .await;
    env.put_wasm_plugin(
        "busy",
        ("example.com/v1", "Thing"),
        "busy",
        json!({"config": {"do": "busy", "millis": millis}, "limits": {"timeoutMs": 20_000}}),
    )
    .await;
    let mut config = operator_config("test", None);
    config.settings.concurrency = 1;
    config.settings.drain = drain;
    let (stop, stopped) = watch::channel(false);
    let (handle, task) = windlass::operator::start(env.client.clone(), config, engine(), stopped)
        .await
        .expect("the host starts");
    // Serving (its smoke call is as busy): a Thing's reconcile runs the plugin.
    eventually("the busy plugin serving", || async {
        handle
            .health
            .metrics
            .encode()
            .contains(r#"windlass_plugin_serving{plugin="busy"} 1"#)
            .then_some(())
    })
    .await;
    (stop, handle, task)
}

/// Creates the Thing `name` and waits until its reconcile runs (the only one: one at a time).
async fn reconcile_running(env: &Env, metrics: &windlass::metrics::Metrics, name: &str) {
    env.create_thing(name, json!({})).await;
    eventually(&format!("{name}'s reconcile running"), || async {
        metrics
            .encode()
            .contains(r#"controller_runtime_active_workers{controller="example.com/v1/Thing"} 1"#)
            .then_some(())
    })
    .await;
}

/// `windlass run` told to stop (SIGTERM on a rolling update) while a reconcile runs: that
/// reconcile finishes — its status written, counted as what it returned — and the parent
/// waiting for its turn does not start; the host stops as soon as the running one ended, not
/// after the whole drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_host_lets_the_running_reconcile_finish_and_starts_no_other() {
    let env = Env::start().await;
    let (stop, host, task) = busy_host(&env, 1500, Duration::from_secs(20)).await;
    reconcile_running(&env, &host.health.metrics, "running").await;
    env.create_thing("waiting", json!({})).await;
    let stopped = std::time::Instant::now();
    stop.send(true).unwrap();
    task.await.unwrap();
    let took = stopped.elapsed();
    let status = |name: &'static str| {
        let things = env.things();
        async move { serde_json::to_value(things.get(name).await.unwrap()).unwrap()["status"].clone() }
    };
    assert_eq!(
        status("running").await["busyMillis"],
        1500,
        "the running reconcile wrote its status before the host stopped"
    );
    assert_eq!(
        status("waiting").await,
        Value::Null,
        "a reconcile started while the host stopped"
    );
    let metrics = host.health.metrics.encode();
    let reconciles = |result: &str| {
        format!(
            r#"controller_runtime_reconcile_total{{controller="example.com/v1/Thing",result="{result}"}} 1"#
        )
    };
    assert!(metrics.contains(&reconciles("requeue_after")), "{metrics}");
    assert!(!metrics.contains("cancelled"), "{metrics}");
    assert!(
        took < Duration::from_secs(10),
        "the host stopped {took:?} after it was told: it waited out the drain"
    );
    println!("stopped {took:?} after it was told");
}

/// A reconcile still running when the drain is over is stopped halfway: it writes nothing more,
/// and it is counted as `cancelled` (its span says so too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_outlasting_the_drain_is_cancelled_and_says_so() {
    let env = Env::start().await;
    let (stop, host, task) = busy_host(&env, 3000, Duration::from_millis(300)).await;
    reconcile_running(&env, &host.health.metrics, "slow").await;
    let stopped = std::time::Instant::now();
    stop.send(true).unwrap();
    task.await.unwrap();
    let took = stopped.elapsed();
    let metrics = host.health.metrics.encode();
    assert!(
        metrics.contains(
            r#"controller_runtime_reconcile_total{controller="example.com/v1/Thing",result="cancelled"} 1"#
        ),
        "{metrics}"
    );
    // Past the point the plugin's status would have been written, had the reconcile gone on.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let thing = serde_json::to_value(env.things().get("slow").await.unwrap()).unwrap();
    assert_eq!(thing["status"]["busyMillis"], Value::Null, "{thing}");
    println!("stopped {took:?} after it was told");
}

/// A holder whose clock runs a minute behind this one (equally: a standby whose clock runs a
/// minute ahead): each `renewTime` it writes looks long expired here. While it goes on renewing,
/// a standby does not take the Lease; once it stops, the standby takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_leaves_a_lease_its_holder_renews_whatever_the_clocks_say() {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = Env::start().await;
    env.install_children_plugin().await;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "windlass-system");
    let behind = || {
        let t = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
        json!(t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
    };
    leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "windlass-leader"},
                "spec": {"holderIdentity": "skewed", "leaseDurationSeconds": 3,
                         "acquireTime": behind(), "renewTime": behind()},
            }))
            .unwrap(),
        )
        .await
        .expect("the skewed holder's Lease");
    let (renewing, mut stop_renewing) = watch::channel(false);
    let renewer = {
        let leases = leases.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop_renewing.wait_for(|s| *s) => return,
                    () = tokio::time::sleep(Duration::from_millis(1000)) => {}
                }
                let patch = Patch::Merge(json!({"spec": {"renewTime": behind()}}));
                let _ = leases
                    .patch("windlass-leader", &PatchParams::default(), &patch)
                    .await;
            }
        })
    };
    let (stop_b, b, _task_b) = env.start_host("b", Some(election("b"))).await;
    // Three lease durations and more: the renewals are seen, the clocks not compared.
    for _ in 0..100 {
        assert!(
            !b.health.leading.load(Ordering::Relaxed),
            "the standby took a Lease its holder renews"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lease = leases.get("windlass-leader").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("skewed"),
        "the Lease stays with its holder"
    );
    renewing.send(true).unwrap();
    renewer.await.unwrap();
    eventually("the standby takes over once the renewals stop", || async {
        b.health.leading.load(Ordering::Relaxed).then_some(())
    })
    .await;
    let lease = leases.get("windlass-leader").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("b")
    );
    let _ = stop_b.send(true);
}

/// With the API slow rather than down (every request held for ten seconds), the leader's
/// renewal hangs: it stops leading on time all the same — at most the lease's duration less
/// half the grace after its last renewal, which was sent before the API slowed down — not
/// when the hanging renewal gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_hang_stops_leading_on_time() {
    let env = Env::start().await;
    env.dev_only("injected API latency");
    env.install_children_plugin().await;
    let (stop, a, _task) = env.start_host("a", Some(election("a"))).await;
    eventually("a leads", || async {
        a.health.leading.load(Ordering::Relaxed).then_some(())
    })
    .await;
    env.dev_only("injected API latency")
        .faults()
        .set_latency(Duration::from_secs(10));
    let slowed = std::time::Instant::now();
    while a.health.leading.load(Ordering::Relaxed) {
        assert!(slowed.elapsed() < Duration::from_secs(10), "still leading");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Valid for 3 s less half the grace after the last renewal, sent before the API slowed
    // down; stopping the controllers takes a moment more. (Here: 2.42 s; the election that
    // checked only after each renewal returned, 2.92 s.)
    let stepped_down = slowed.elapsed();
    println!("stopped leading {stepped_down:?} after the API slowed down");
    assert!(
        stepped_down <= Duration::from_millis(2500 + 250),
        "stopped leading {stepped_down:?} after the API slowed down"
    );
    env.dev_only("injected API latency").faults().clear();
    let _ = stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_started_during_an_api_outage_loads_its_plugins_once_the_api_is_back() {
    // The ConfigMap cannot be read while the API fails every get: the load fails as a source
    // that is unavailable for now, and is tried again on its own backoff (1 s, 2 s, 4 s, … up
    // to 30 s), without any change to the WasmPlugin or the ConfigMap, and long before the OCI
    // poll (an hour here) would look again.
    let mut env = Env::start().await;
    env.dev_only("injected API faults");
    env.put_plugin_bytes("children", guests::bytes(guests::CHILDREN))
        .await;
    env.dev_only("injected API faults")
        .faults()
        .set_error_rate("get", 500, 1.0);
    let mut config = operator_config("test", None);
    config.settings.oci_poll = Duration::from_secs(3600);
    env.run_operator_with(config).await;
    env.put_wasm_plugin(
        "children",
        ("example.com/v1", "Thing"),
        "children",
        json!({}),
    )
    .await;
    let failed = eventually("the failed load", || async {
        // The test's own reads fail too; list instead of get.
        let wps: Api<windlass::crd::WasmPlugin> = Api::all(env.client.clone());
        let wp = wps.list(&ListParams::default()).await.ok()?.items.pop()?;
        wp.status?.last_error
    })
    .await;
    assert!(
        failed.contains("configMap windlass-system/children"),
        "{failed}"
    );
    // Tried again while the API still fails: at 1 s and 3 s after the first failure.
    let unavailable = r#"hot_swaps_total{plugin="children",outcome="SourceUnavailable"}"#;
    let tries = eventually("three failed loads", || async {
        let metrics = env.metrics().await;
        let line = metrics.lines().find(|l| l.contains(unavailable))?;
        let n: f64 = line.rsplit(' ').next()?.parse().ok()?;
        (n >= 3.0).then_some(n)
    })
    .await;
    let retrying = r#"tracked{kind="WasmPlugin",what="load_retries"} 1"#;
    assert!(
        env.metrics().await.contains(retrying),
        "{tries} tries, no retry held"
    );
    env.dev_only("injected API faults").faults().clear();
    let back = std::time::Instant::now();
    let good = windlass::runtime::digest(&guests::bytes(guests::CHILDREN));
    eventually("the plugin loaded once the API is back", || async {
        let status = env.wasm_plugin("children").await.status?;
        (status.digest.as_deref() == Some(good.as_str()) && status.last_error.is_none())
            .then_some(())
    })
    .await;
    // After n failures the next try waits 2^(n-1) s (one more failure may have come between
    // the count and the API's return): far from the hour of the OCI poll.
    let bound = Duration::from_secs(2u64.pow(tries as u32).min(30) + 2);
    assert!(
        back.elapsed() < bound,
        "loaded {:?} after the API came back, {tries} failures before",
        back.elapsed()
    );
    let retired = r#"tracked{kind="WasmPlugin",what="load_retries"} 0"#;
    assert!(
        env.metrics().await.contains(retired),
        "a retry is still held after the load"
    );
}

/// An upgrade from a host that wrote WasmPlugin status with merge patches: every field it wrote
/// is owned by an `Update` entry, which server-side apply alone would never remove. The new host
/// hands those fields to its own apply first, so the old error goes with its first status write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_an_older_host_wrote_by_merge_patch_is_taken_over_and_its_stale_error_goes() {
    let mut env = Env::start().await;
    env.install_children_plugin().await;
    let wps: Api<windlass::crd::WasmPlugin> = Api::all(env.client.clone());
    let condition = json!({"type": "Ready", "status": "False", "reason": "Trap",
        "message": "plugin guest-children: trapped", "lastTransitionTime": "2026-01-01T00:00:00Z"});
    wps.patch_status(
        "children",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "digest": "sha256:0000", "plugin": "guest-old", "version": "0.9.0",
            "childKinds": ["v1/Secret"], "lastError": "an error from before the upgrade",
            "observedGeneration": 1, "conditions": [condition],
        }})),
    )
    .await
    .expect("the old host's status write");
    let status_entries = |wp: &windlass::crd::WasmPlugin| -> Vec<(String, String)> {
        wp.managed_fields()
            .iter()
            .filter(|e| e.subresource.as_deref() == Some("status"))
            .map(|e| {
                (
                    e.manager.clone().unwrap_or_default(),
                    e.operation.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    let before = status_entries(&env.wasm_plugin("children").await);
    assert!(
        before.iter().any(|(_, op)| op == "Update"),
        "the old write is an Update entry: {before:?}"
    );

    env.run_operator().await;
    let good = windlass::runtime::digest(&guests::bytes(guests::CHILDREN));
    let wp = eventually("the new host's status, without the old error", || async {
        let wp = env.wasm_plugin("children").await;
        let status = wp.status.as_ref()?;
        (status.digest.as_deref() == Some(good.as_str()) && status.last_error.is_none())
            .then_some(wp)
    })
    .await;
    let status = wp.status.clone().unwrap();
    assert_eq!(status.plugin.as_deref(), Some("guest-children"));
    assert_eq!(status.version.as_deref(), Some("1.0.0"));
    assert_eq!(status.child_kinds, ["v1/ConfigMap"]);
    let ready: Vec<_> = status
        .conditions
        .iter()
        .filter(|c| c.type_ == "Ready")
        .collect();
    assert_eq!(ready.len(), 1, "{:?}", status.conditions);
    assert_eq!(
        (ready[0].status.as_str(), ready[0].reason.as_str()),
        ("True", "Loaded")
    );
    assert_eq!(
        status_entries(&wp),
        [("windlass/loader".to_string(), "Apply".to_string())],
        "the loader's apply owns the whole status"
    );

    // From then on a refusal (a plugin of another parent kind) sets the error and the next
    // good version takes it away again.
    env.put_plugin_bytes("children", guests::bytes(guests::STORAGE))
        .await;
    eventually("the refusal", || async {
        env.wasm_plugin("children").await.status?.last_error
    })
    .await;
    env.put_plugin_bytes("children", guests::bytes(guests::CHILDREN))
        .await;
    eventually("the error gone with the good version", || async {
        let status = env.wasm_plugin("children").await.status?;
        (status.last_error.is_none() && status.digest.as_deref() == Some(good.as_str()))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_parent_converges_through_api_faults() {
    let mut env = Env::start().await;
    env.dev_only("injected API faults");
    env.with_children_plugin().await;
    let faults = env.dev_only("injected API faults").faults();
    faults.set_error_rate("patch", 500, 0.2);
    faults.set_error_rate("create", 429, 0.2);
    faults.set_error_rate("update", 409, 0.2);
    faults.set_watch_cut(Some(Duration::from_secs(2)));
    for i in 0..10 {
        let thing: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": format!("f{i}")},
            "spec": {"names": ["a", "b"], "value": "v"},
        }))
        .unwrap();
        // The test's own writes retry through the faults too.
        eventually("the Thing created", || async {
            env.things()
                .create(&PostParams::default(), &thing)
                .await
                .ok()
                .map(|_| ())
        })
        .await;
    }
    faults.restart();
    for i in 0..10 {
        let name = format!("f{i}");
        eventually(&format!("{name} converged"), || async {
            let t = serde_json::to_value(env.things().get(&name).await.ok()?).ok()?;
            let ok = condition(&t, "Reconciled").is_some_and(|c| c["status"] == "True")
                && t["status"]["count"] == 2;
            (ok && env.children_of(&name).await.len() == 2).then_some(())
        })
        .await;
    }
    faults.clear();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_start_with_many_existing_parents_reconciles_them_all() {
    // Parents exist before the operator starts, and fewer reconciles may run at once than
    // there are parents: the watch caches must fill regardless of the controller's
    // back-pressure (a restart of a busy operator).
    let mut env = Env::start().await;
    env.install_children_plugin().await;
    for i in 0..20 {
        env.create_thing(&format!("p{i}"), json!({"names": ["a"], "value": "v"}))
            .await;
    }
    let mut config = operator_config("test", None);
    config.settings.concurrency = 2;
    env.run_operator_with(config).await;
    // The queue depth, sampled while the backlog drains: 20 parents wait for 2 slots.
    let metrics = env.operator.as_ref().unwrap().health.metrics.clone();
    let sampler = tokio::spawn(async move {
        let mut deepest = 0;
        for _ in 0..2_000 {
            deepest = deepest.max(queue_depth(&metrics.encode()));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        deepest
    });
    for i in 0..20 {
        let name = format!("p{i}");
        eventually(&format!("{name} reconciled"), || async {
            let t = serde_json::to_value(env.things().get(&name).await.ok()?).ok()?;
            (condition(&t, "Reconciled")?["status"] == "True").then_some(())
        })
        .await;
    }
    let deepest = sampler.await.unwrap();
    assert!(
        deepest >= 5,
        "the backlog showed in the queue depth: {deepest}"
    );
    let metrics = &env.operator.as_ref().unwrap().health.metrics;
    eventually("an empty queue once every parent is reconciled", || async {
        (queue_depth(&metrics.encode()) == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_saturation_new_changed_and_swapped_parents_go_before_requeues() {
    // One reconcile at a time, and 40 parents that each keep it busy 50 ms and ask to run
    // again a second later: twice the work due that can be done, so requeues queue up (about
    // 2 s each). A new parent, a changed one and a hot swap must not wait behind them.
    let mut env = Env::start().await;
    env.put_plugin_bytes("busy", guests::bytes(guests::MISBEHAVE))
        .await;
    let busy = |millis: u64| json!({"config": {"do": "busy", "millis": millis}});
    env.put_wasm_plugin("busy", ("example.com/v1", "Thing"), "busy", busy(50))
        .await;
    let mut config = operator_config("test", None);
    config.settings.concurrency = 1;
    env.run_operator_with(config).await;
    for i in 0..40 {
        env.create_thing(&format!("s{i}"), json!({})).await;
    }
    let status_of = |name: String| {
        let things = env.things();
        async move {
            let t = serde_json::to_value(things.get(&name).await.ok()?).ok()?;
            Some(t["status"].clone())
        }
    };
    for i in 0..40 {
        eventually(&format!("s{i} reconciled once"), || async {
            (status_of(format!("s{i}")).await?["observedGeneration"] == 1).then_some(())
        })
        .await;
    }
    // The backlog builds up: requeues wait longer than a second for their turn.
    let metrics = env.operator.as_ref().unwrap().health.metrics.clone();
    eventually("requeues waiting over a second on average", || async {
        let (sum, count) = wait_seconds(&metrics.encode(), "resync");
        (count >= 40.0 && sum / count > 1.0).then_some(())
    })
    .await;
    let (sum, count) = wait_seconds(&metrics.encode(), "resync");
    println!(
        "requeues waited {:.2} s on average ({count} of them)",
        sum / count
    );

    let created = std::time::Instant::now();
    env.create_thing("late", json!({})).await;
    eventually("the new parent reconciled", || async {
        (status_of("late".into()).await?["observedGeneration"] == 1).then_some(())
    })
    .await;
    let new_waited = created.elapsed();

    let changed = std::time::Instant::now();
    env.things()
        .patch(
            "s7",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"edited": true}})),
        )
        .await
        .unwrap();
    eventually("the changed parent reconciled", || async {
        (status_of("s7".into()).await?["observedGeneration"] == 2).then_some(())
    })
    .await;
    let changed_waited = changed.elapsed();

    let swapped = std::time::Instant::now();
    env.put_wasm_plugin("busy", ("example.com/v1", "Thing"), "busy", busy(20))
        .await;
    let first_flip = std::cell::Cell::new(None);
    eventually("every parent on the new logic", || async {
        let mut flipped = 0;
        for name in (0..40).map(|i| format!("s{i}")).chain(["late".to_string()]) {
            flipped += usize::from(status_of(name).await?["busyMillis"] == 20);
        }
        if flipped > 0 && first_flip.get().is_none() {
            first_flip.set(Some(swapped.elapsed()));
        }
        (flipped == 41).then_some(())
    })
    .await;
    let first_flip = first_flip.get().expect("a parent flipped");
    println!(
        "new parent {new_waited:?}, changed parent {changed_waited:?}, first parent on the \
         swapped logic {first_flip:?}, all {:?}",
        swapped.elapsed()
    );
    assert!(
        new_waited < Duration::from_secs(1),
        "the new parent waited {new_waited:?} behind requeues"
    );
    assert!(
        changed_waited < Duration::from_secs(1),
        "the changed parent waited {changed_waited:?} behind requeues"
    );
    assert!(
        first_flip < Duration::from_secs(1),
        "the first parent ran the swapped logic after {first_flip:?}"
    );
}

/// The sum and count of the Thing kind's queue waits in `lane`.
fn wait_seconds(metrics: &str, lane: &str) -> (f64, f64) {
    let series = |what: &str| {
        let prefix = format!(
            r#"windlass_queue_wait_seconds_{what}{{kind="example.com/v1/Thing",lane="{lane}"}} "#
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    };
    (series("sum"), series("count"))
}

/// The Thing kind's `workqueue_depth`.
fn queue_depth(metrics: &str) -> i64 {
    let series =
        r#"workqueue_depth{name="example.com/v1/Thing",controller="example.com/v1/Thing"} "#;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .map_or(-1, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_catches_up_on_parents_that_already_have_children() {
    // The restart case of the host benchmark: every parent has children when the new process
    // starts, so its watch caches must list them while reconciles (fewer slots than parents)
    // wait for those caches.
    let mut env = Env::start().await;
    env.install_children_plugin().await;
    let (stop_first, _, first) = env.start_host("first", None).await;
    for i in 0..20 {
        env.create_thing(
            &format!("r{i}"),
            json!({"names": ["a", "b"], "value": "before"}),
        )
        .await;
    }
    for i in 0..20 {
        let name = format!("r{i}");
        eventually(&format!("{name}'s children"), || async {
            (env.children_of(&name).await.len() == 2).then_some(())
        })
        .await;
    }
    stop_first.send(true).unwrap();
    let _ = first.await;
    for i in 0..20 {
        env.things()
            .patch(
                &format!("r{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"value": "after"}})),
            )
            .await
            .unwrap();
    }
    let mut config = operator_config("second", None);
    config.settings.concurrency = 2;
    env.run_operator_with(config).await;
    for i in 0..20 {
        let name = format!("r{i}");
        eventually(
            &format!("{name}'s children updated by the restarted operator"),
            || async {
                let children = env.children_of(&name).await;
                (children.len() == 2 && children.iter().all(|c| data(c, "value") == "after"))
                    .then_some(())
            },
        )
        .await;
    }
}

/// One gauge series of the operator's metrics (`name{labels}`), -1 when absent.
fn gauge(metrics: &str, series: &str) -> i64 {
    let series = format!("{series} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(-1, |v| v.trim().parse().unwrap())
}

const PARENTS: &str = r#"windlass_tracked{kind="example.com/v1/Thing",what="parents"}"#;
const BACKOFFS: &str = r#"windlass_tracked{kind="example.com/v1/Thing",what="backoffs"}"#;
const WATCHES: &str = r#"windlass_tracked{kind="WasmPlugin",what="config_map_watches"}"#;
const TASKS: &str = "windlass_tasks";
/// Rounds of the soak test.
const ROUNDS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_host_forgets_deleted_parents_and_unused_sources() {
    // A soak in small: parents (half of them failing, so they are in backoff) and WasmPlugins
    // with ConfigMaps of their own come and go in rounds. What the host keeps per parent and
    // per source must go with them, and its task count must come back to where it was.
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing("warm", json!({"names": ["a"], "value": "v"}))
        .await;
    eventually("the first parent reconciled", || async {
        (env.children_of("warm").await.len() == 1).then_some(())
    })
    .await;
    env.things()
        .delete("warm", &DeleteParams::default())
        .await
        .unwrap();
    eventually("nothing remembered after the warm-up", || async {
        (gauge(&env.metrics().await, PARENTS) == 0).then_some(())
    })
    .await;
    let wasm_plugins: Api<windlass::crd::WasmPlugin> = Api::all(env.client.clone());
    // The task count after each round. Pooled connections (each with a task on both ends: the
    // devcluster runs in this process) make it climb for a round or two; a leak makes it climb
    // with every round.
    let mut tasks = Vec::new();
    for round in 0..ROUNDS {
        for i in 0..6 {
            // Odd parents fail: `names` must be a list.
            let names = if i % 2 == 0 {
                json!(["a"])
            } else {
                json!("not-a-list")
            };
            env.create_thing(
                &format!("r{round}-{i}"),
                json!({"names": names, "value": "v"}),
            )
            .await;
        }
        for extra in 0..2 {
            let name = format!("extra-{round}-{extra}");
            env.put_plugin_bytes(&name, guests::bytes(guests::CHILDREN))
                .await;
            // A parent kind nobody serves: the plugin is loaded (and its ConfigMap watched)
            // without joining the Things' pipeline.
            env.put_wasm_plugin(&name, ("example.com/v1", "Unserved"), &name, json!({}))
                .await;
        }
        eventually(
            "every parent remembered, the failing ones in backoff",
            || async {
                let m = env.metrics().await;
                (gauge(&m, PARENTS) == 6 && gauge(&m, BACKOFFS) == 3 && gauge(&m, WATCHES) == 3)
                    .then_some(())
            },
        )
        .await;
        for i in 0..6 {
            env.things()
                .delete(&format!("r{round}-{i}"), &DeleteParams::default())
                .await
                .unwrap();
        }
        for extra in 0..2 {
            wasm_plugins
                .delete(&format!("extra-{round}-{extra}"), &DeleteParams::default())
                .await
                .unwrap();
        }
        eventually(
            "nothing remembered of the deleted parents and plugins",
            || async {
                let m = env.metrics().await;
                (gauge(&m, PARENTS) == 0 && gauge(&m, BACKOFFS) == 0 && gauge(&m, WATCHES) == 1)
                    .then_some(())
            },
        )
        .await;
        // Let aborted watches and closed connections wind down.
        tokio::time::sleep(Duration::from_millis(500)).await;
        tasks.push(gauge(&env.metrics().await, TASKS));
    }
    eprintln!("tasks after each round: {tasks:?}");
    // Each round starts and stops two ConfigMap watches. Leaked, each keeps a task and its
    // connection (a task at each end): measured, the count then climbs 8 to 10 tasks a round
    // (57 -> 123 in 8 rounds); without a leak, pooled connections move it about 1.5 a round.
    let per_round = (tasks[ROUNDS - 1] - tasks[0]) as f64 / (ROUNDS - 1) as f64;
    assert!(
        per_round < 4.0,
        "the task count grows by {per_round:.1} a round: {tasks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_host_reconciles_nothing_more() {
    // Stopping (shutdown, or the lease lost) ends every controller the host started: none may
    // go on reconciling beside the next leader.
    let env = Env::start().await;
    env.install_children_plugin().await;
    let (stop, _handle, task) = env.start_host("a", None).await;
    let started = std::time::Instant::now();
    env.create_thing_with_children("t1", json!({"names": ["a"], "value": "v"}), 1)
        .await;
    let running_took = started.elapsed();
    stop.send(true).unwrap();
    task.await.unwrap();
    let from = current_rv(&env.config_maps()).await;
    env.create_thing("t2", json!({"names": ["a"], "value": "v"}))
        .await;
    // A stopped process gives no sign that it does nothing: the window is ten times what the
    // running host took for t1 (at least 2 s), so a slow machine widens it; then nothing of
    // t2's may be in the watch history up to the RV at its end.
    tokio::time::sleep((running_took * 10).max(Duration::from_secs(2))).await;
    let (history, through) = history_since(&env.config_maps(), &from).await;
    let written = written(&history, |name| name.starts_with("t2-"));
    assert!(
        written.is_empty(),
        "a stopped host reconciled a new parent by RV {through} ({running_took:?} when it ran): {written:?}"
    );
}

/// A WasmPlugin naming two sources is refused where it is written: by the API server's CEL
/// rule on the CRD (the real control plane), or — where no rule runs, as on the devcluster —
/// by the host when it parses the source, naming `spec.source`, with nothing loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_naming_two_sources_is_refused_naming_the_field() {
    let mut env = Env::start().await;
    env.put_plugin_bytes("children", guests::bytes(guests::CHILDREN))
        .await;
    let wp: windlass::crd::WasmPlugin = serde_json::from_value(json!({
        "apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "two-sources"},
        "spec": {
            "parent": {"apiVersion": "example.com/v1", "kind": "Thing"},
            "source": {
                "configMap": {"namespace": "windlass-system", "name": "children"},
                "file": {"path": "/nonexistent/plugin.wasm"},
            },
        },
    }))
    .expect("a WasmPlugin");
    let api: Api<windlass::crd::WasmPlugin> = Api::all(env.client.clone());
    let created = api.create(&PostParams::default(), &wp).await;
    if real_cluster() {
        let Err(kube::Error::Api(status)) = created else {
            panic!("the API server accepted two sources: {created:?}");
        };
        assert_eq!(status.code, 422, "{status:?}");
        assert!(
            status
                .message
                .contains("exactly one of configMap, oci or file is required"),
            "{}",
            status.message
        );
        assert!(api.get_opt("two-sources").await.unwrap().is_none());
    } else {
        created.expect("the devcluster runs no CEL rules");
        assert_refused_by_the_host(&mut env, &api).await;
    }
}

async fn assert_refused_by_the_host(env: &mut Env, api: &Api<windlass::crd::WasmPlugin>) {
    env.run_operator().await;
    let ready = eventually("the two-source WasmPlugin's Ready condition", || async {
        let wp = api.get("two-sources").await.ok()?;
        wp.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason != "NotLoaded")
    })
    .await;
    assert_eq!(ready.reason, "SourceUnavailable");
    assert!(
        ready
            .message
            .contains("spec.source: only one of configMap, oci or file may be given"),
        "{}",
        ready.message
    );
    let wp = api.get("two-sources").await.expect("the WasmPlugin");
    assert!(
        wp.status.and_then(|s| s.digest).is_none(),
        "a version serves"
    );
}
