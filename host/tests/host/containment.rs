//! Containment end to end: hostile plugins (written against the WIT without the SDK) run by the
//! operator on the devcluster. Each attack is refused with the precise rule, the victim is
//! byte-for-byte intact afterwards, and the host goes on serving other parents.
//!
//! The hostile guest takes its attack from its config, overridden per parent by
//! `spec.hostile`, so one pipeline can hold a victim parent and an attacker.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Secret, events::v1::Event};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};
use serde_json::{Value, json};
use support::*;
use windlass::policy::HostAccount;
use windlass_test_guests as guests;

pub(crate) const THING: (&str, &str) = ("example.com/v1", "Thing");

/// An operator with the hostile guest as the Thing pipeline, the host's ServiceAccount being
/// `shop/windlass` (so a pod asking for it is in reach).
pub(crate) async fn hostile_env(plugin: &str, path: &str, extra: Value) -> Env {
    hostile_env_with(plugin, path, extra, operator_config("test", None)).await
}

/// [`hostile_env`] with the host's configuration given.
pub(crate) async fn hostile_env_with(
    plugin: &str,
    path: &str,
    extra: Value,
    mut config: windlass::operator::Config,
) -> Env {
    let mut env = Env::start().await;
    env.put_plugin_bytes(plugin, guests::bytes(path)).await;
    env.put_wasm_plugin(plugin, THING, plugin, extra).await;
    config.settings.host_account = Some(HostAccount {
        namespace: "shop".into(),
        name: "windlass".into(),
    });
    env.run_operator_with(config).await;
    eventually("the hostile plugin to load", || async {
        let wp = env.wasm_plugin(plugin).await;
        wp.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    env
}

/// The parent's `Reconciled` condition once it has the given status.
pub(crate) async fn reconciled(env: &Env, name: &str, status: &str) -> Value {
    eventually(&format!("{name} Reconciled={status}"), || async {
        let t = serde_json::to_value(env.things().get(name).await.ok()?).ok()?;
        let c = condition(&t, "Reconciled")?;
        (c["status"] == status).then(|| c.clone())
    })
    .await
}

/// An object as JSON, to compare byte for byte.
pub(crate) async fn snapshot<K>(api: &Api<K>, name: &str) -> Value
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    serde_json::to_value(api.get(name).await.expect("victim exists")).unwrap()
}

/// That nothing happened to the victim `name` after its snapshot `before` up to the server's
/// resourceVersion now (its watch history is empty there), and it is still byte for byte
/// `before`: uid, data, owner references and resourceVersion. Called once the attacker's
/// reconcile has written its status, which the host writes after its applies and prunes.
pub(crate) async fn untouched<K>(api: &Api<K>, name: &str, before: &Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let from = before["metadata"]["resourceVersion"]
        .as_str()
        .expect("the snapshot's resourceVersion");
    let (history, through) = history_since(api, from).await;
    let touched = written(&history, |n| n == name);
    assert!(
        touched.is_empty(),
        "{name} was written between RV {from} and RV {through}: {touched:?}"
    );
    assert_eq!(&snapshot(api, name).await, before, "{name} changed");
}

/// Turns the attacker `name` harmless (`omit`: it wants nothing) and waits until it reconciles
/// cleanly: its prune, if any, is done by then.
async fn omit(env: &Env, name: &str) {
    env.things()
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"hostile": {"attack": "omit"}}})),
        )
        .await
        .unwrap();
    reconciled(env, name, "True").await;
}

/// The WasmPlugin `name`'s `Ready` condition once it is False: its refusal.
async fn refusal(
    env: &Env,
    name: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    eventually(&format!("{name} refused"), || async {
        let status = env.wasm_plugin(name).await.status?;
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        (ready.status == "False").then_some(ready)
    })
    .await
}

/// After an attack: a parent with a harmless spec is still served.
pub(crate) async fn still_serves_other_parents(env: &Env) {
    env.create_thing(
        "bystander",
        json!({"hostile": {"attack": "takeover-configmap", "name": "bystander-data"}}),
    )
    .await;
    reconciled(env, "bystander", "True").await;
    let cm = env
        .config_maps()
        .get("bystander-data")
        .await
        .expect("created");
    assert_eq!(
        cm.owner_references()[0].name,
        "bystander",
        "a new object is created with the parent as its controller"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_over_another_applications_secret_is_refused_and_it_stays_intact() {
    let env = hostile_env("hostile", guests::HOSTILE_OUTPUT, json!({})).await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "shop");
    let victim: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-secret", "labels": {"app": "billing"}},
        "data": {"password": "czNjcjN0"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &victim)
        .await
        .unwrap();
    let before = snapshot(&secrets, "app-secret").await;

    env.create_thing(
        "attacker",
        json!({"hostile": {"attack": "takeover", "name": "app-secret"}}),
    )
    .await;
    let c = reconciled(&env, "attacker", "False").await;
    assert_eq!(c["reason"], "ObjectNotOwned", "{c}");
    assert_eq!(
        c["message"],
        "plugin guest-hostile-output: invalid output (ObjectNotOwned): v1/Secret shop/app-secret: exists and is not this parent's child"
    );
    // Leaving it out of the desired set afterwards does not prune it either.
    omit(&env, "attacker").await;
    untouched(&secrets, "app-secret", &before).await;
    let metrics = env.metrics().await;
    assert!(
        metrics.contains(
            r#"windlass_policy_refusals_total{plugin="guest-hostile-output",rule="ObjectNotOwned"}"#
        ),
        "{metrics}"
    );
    still_serves_other_parents(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_parents_child_is_neither_taken_over_nor_pruned() {
    let env = hostile_env("hostile", guests::HOSTILE_OUTPUT, json!({})).await;
    env.create_thing(
        "owner",
        json!({"hostile": {"attack": "takeover-configmap", "name": "owner-data"}}),
    )
    .await;
    reconciled(&env, "owner", "True").await;
    let before = snapshot(&env.config_maps(), "owner-data").await;

    env.create_thing(
        "thief",
        json!({"hostile": {"attack": "takeover-configmap", "name": "owner-data"}}),
    )
    .await;
    let c = reconciled(&env, "thief", "False").await;
    assert_eq!(c["reason"], "ObjectNotOwned", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .ends_with("v1/ConfigMap shop/owner-data: exists and is not this parent's child"),
        "{c}"
    );
    // The thief then drops it from its desired set: its reconcile succeeds, and its prune does
    // not take what it never controlled.
    omit(&env, "thief").await;
    untouched(&env.config_maps(), "owner-data", &before).await;
    assert_eq!(
        env.config_maps()
            .get("owner-data")
            .await
            .unwrap()
            .owner_references()[0]
            .name,
        "owner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_pods_are_refused_naming_the_field_and_nothing_is_created() {
    let env = hostile_env("hostile", guests::HOSTILE_OUTPUT, json!({})).await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(env.client.clone(), "shop");
    for (name, attack, field, check) in [
        (
            "p1",
            "privileged",
            "spec.template.spec.containers[0].securityContext.privileged",
            "privileged",
        ),
        (
            "p2",
            "hostPath",
            "spec.template.spec.volumes[0].hostPath",
            "hostPathVolumes",
        ),
        (
            "p3",
            "hostNetwork",
            "spec.template.spec.hostNetwork",
            "hostNamespaces",
        ),
        ("p4", "nodeName", "spec.template.spec.nodeName", "nodeName"),
        (
            "p5",
            "serviceAccount",
            "spec.template.spec.serviceAccountName",
            "hostServiceAccount",
        ),
        (
            "p6",
            "runAsRoot",
            "spec.template.spec.securityContext.runAsNonRoot",
            "runAsNonRoot",
        ),
        (
            "p7",
            "capabilities",
            "spec.template.spec.containers[0].securityContext.capabilities",
            "capabilities",
        ),
    ] {
        env.create_thing(name, json!({"hostile": {"attack": attack, "name": name}}))
            .await;
        let c = reconciled(&env, name, "False").await;
        let message = c["message"].as_str().unwrap();
        assert!(message.contains("(PodSecurity)"), "{attack}: {message}");
        assert!(message.contains(field), "{attack}: {message}");
        assert!(message.contains(check), "{attack}: {message}");
        assert!(
            statefulsets.get_opt(name).await.unwrap().is_none(),
            "{attack}: applied"
        );
    }
    // The same workload without the attack is admitted under the default `restricted` level.
    env.create_thing(
        "ok",
        json!({"hostile": {"attack": "compliant", "name": "ok"}}),
    )
    .await;
    reconciled(&env, "ok", "True").await;
    assert!(statefulsets.get_opt("ok").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_reading_another_applications_secret_is_refused_and_nothing_is_created() {
    let env = hostile_env("hostile", guests::HOSTILE_OUTPUT, json!({})).await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "shop");
    let victim: Secret = serde_json::from_value(json!({
        "metadata": {"name": "victim", "labels": {"app": "billing"}},
        "data": {"password": "czNjcjN0"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &victim)
        .await
        .unwrap();
    let before = snapshot(&secrets, "victim").await;
    // The guest's own code names `victim`; neither the parent's spec nor the config does.
    env.create_thing(
        "reader",
        json!({"hostile": {"attack": "mountSecret", "name": "loot"}}),
    )
    .await;
    let c = reconciled(&env, "reader", "False").await;
    assert_eq!(c["reason"], "InvalidOutput", "{c}");
    assert_eq!(
        c["message"],
        "plugin guest-hostile-output: invalid output (ForeignReference): desired[0] apps/v1/StatefulSet loot: spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.name: names Secret \"victim\", which is neither an object of this parent nor named in the parent's spec or the plugin's config"
    );
    let statefulsets: Api<StatefulSet> = Api::namespaced(env.client.clone(), "shop");
    assert!(statefulsets.get_opt("loot").await.unwrap().is_none());
    assert_eq!(
        snapshot(&secrets, "victim").await,
        before,
        "the victim changed"
    );
    let metrics = env.metrics().await;
    assert!(
        metrics.contains(
            r#"windlass_policy_refusals_total{plugin="guest-hostile-output",rule="ForeignReference"}"#
        ),
        "{metrics}"
    );
    // The parent's last run, as `windlass trace` shows it, names the call and the rule.
    let uid = env
        .things()
        .get("reader")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let runs = env.operator.as_ref().unwrap().health.runs.clone();
    let run = eventually("the refused run recorded", || {
        let run = runs.get(&uid);
        async move { run.filter(|r| r.plugins.iter().any(|p| p.rule.is_some())) }
    })
    .await;
    assert_eq!(run.result, "InvalidOutput", "{run:#?}");
    let call = run
        .plugins
        .iter()
        .find(|p| p.name == "guest-hostile-output")
        .unwrap();
    assert_eq!(
        (call.result.as_str(), call.rule.as_deref()),
        ("InvalidOutput", Some("ForeignReference"))
    );
    assert!(
        call.message
            .as_deref()
            .unwrap_or_default()
            .contains("names Secret \"victim\""),
        "{call:#?}"
    );
    still_serves_other_parents(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_token_secret_is_refused_unless_granted() {
    let env = hostile_env("hostile", guests::HOSTILE_OUTPUT, json!({})).await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "shop");
    env.create_thing(
        "minter",
        json!({"hostile": {"attack": "tokenSecret", "name": "minted"}}),
    )
    .await;
    let c = reconciled(&env, "minter", "False").await;
    let message = c["message"].as_str().unwrap();
    assert!(
        message.contains("invalid output (PrivilegedContent)"),
        "{message}"
    );
    assert!(
        message.contains("v1/Secret:service-account-token"),
        "{message}"
    );
    assert!(secrets.get_opt("minted").await.unwrap().is_none());
    still_serves_other_parents(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_events_in_one_call_is_refused_whole() {
    let env = hostile_env(
        "flood",
        guests::HOSTILE_OUTPUT,
        json!({"config": {"attack": "flood", "events": 100_000}}),
    )
    .await;
    env.create_thing("flooder", json!({})).await;
    let c = reconciled(&env, "flooder", "False").await;
    assert_eq!(
        c["message"],
        "plugin guest-hostile-output: invalid output (OutputTooLarge): events: 100000 events in one call is more than the limit of 16"
    );
    let metrics = env.metrics().await;
    assert!(
        metrics.contains(
            r#"windlass_policy_refusals_total{plugin="guest-hostile-output",rule="OutputTooLarge"}"#
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_asking_to_run_again_at_once_is_held_to_the_rate_and_its_events_to_a_burst() {
    // 10 events of 5,000 bytes per call and a requeue after 0 s; the requeue floor taken away
    // (the next test has it), so that the rate limit alone holds the parent.
    let config = json!({"config":
        {"attack": "flood", "events": 10, "messageBytes": 5000, "requeueAfter": 0}});
    // A burst of 1, so that the window below measures the rate alone whatever a reconcile
    // takes on a loaded machine (the burst itself is the default's 10).
    let mut host = operator_config("test", None);
    host.settings.min_requeue = Duration::ZERO;
    host.settings.reconcile_burst = 1;
    let env = hostile_env_with("flood", guests::HOSTILE_OUTPUT, config, host).await;
    env.create_thing("flooder", json!({})).await;
    reconciled(&env, "flooder", "True").await;
    // A rate needs a window: 5 s of calls.
    let started = Instant::now();
    let before = calls(&env).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rate = (calls(&env).await - before) / started.elapsed().as_secs_f64();
    // The rate limit: 2 a second (and more than none: the parent is not starved).
    assert!(
        (0.5..=2.5).contains(&rate),
        "{rate} reconciles a second, with a limit of 2"
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), "shop");
    let flood: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Flood"))
        .collect();
    let count: i32 = flood
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1)))
        .sum();
    assert!(!flood.is_empty() && count <= 25, "{count} events");
    assert!(
        flood
            .iter()
            .all(|e| e.note.as_deref().unwrap_or_default().len() <= 1024)
    );
    let metrics = env.metrics().await;
    assert!(
        metrics.contains(
            r#"windlass_policy_refusals_total{plugin="guest-hostile-output",rule="EventRate"}"#
        ),
        "{metrics}"
    );
}

/// The floor on `requeue-after`, 1 s: with the per-parent rate limit out of the way (a burst of
/// 1,000, then one per 10 ms), a plugin that asks to run again at once runs about once a
/// second, not a hundred times. (The test above has the floor taken away.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_asking_to_run_again_at_once_waits_the_one_second_floor() {
    let mut config = operator_config("test", None);
    config.settings.reconcile_burst = 1000;
    config.settings.reconcile_every = Duration::from_millis(10);
    let env = hostile_env_with(
        "flood",
        guests::HOSTILE_OUTPUT,
        json!({"config": {"attack": "flood", "requeueAfter": 0}}),
        config,
    )
    .await;
    env.create_thing("eager", json!({})).await;
    reconciled(&env, "eager", "True").await;
    // A rate needs a window: 4 s of calls.
    let (before, started) = (calls(&env).await, Instant::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let rate = (calls(&env).await - before) / started.elapsed().as_secs_f64();
    assert!(
        (0.5..=1.3).contains(&rate),
        "{rate} reconciles a second, with a floor of 1 s"
    );
}

/// Calls of the flooding plugin so far.
async fn calls(env: &Env) -> f64 {
    let metrics = env.metrics().await;
    metrics
        .lines()
        .find(|l| {
            l.starts_with(
                r#"windlass_plugin_calls_total{plugin="guest-hostile-output",outcome="ok"}"#,
            )
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_asleep_in_a_host_call_is_stopped_at_its_deadline() {
    let limit = json!({"timeoutMs": 300});
    let env = hostile_env(
        "sleep",
        guests::HOSTILE_OUTPUT,
        json!({"limits": limit, "config": {"attack": "sleep", "how": "sleep", "ms": 15_000}}),
    )
    .await;
    let started = Instant::now();
    env.create_thing("sleeper", json!({})).await;
    let c = reconciled(&env, "sleeper", "False").await;
    assert_eq!(c["reason"], "Timeout", "{c}");
    assert_eq!(
        c["message"],
        "plugin guest-hostile-output: timed out after 300ms"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // New versions that wait in a poll or a blocking pollable are stopped in the canary and
    // never serve.
    for how in ["poll", "block", "instant"] {
        env.put_wasm_plugin(
            "sleep",
            THING,
            "sleep",
            json!({"limits": limit, "config": {"attack": "sleep", "how": how, "ms": 15_000, "variant": how}}),
        )
        .await;
        let generation = env.wasm_plugin("sleep").await.metadata.generation;
        let error = eventually(&format!("the {how} version refused"), || async {
            let status = env.wasm_plugin("sleep").await.status?;
            (status.observed_generation == generation).then_some(status.last_error?)
        })
        .await;
        assert!(
            error.contains("canary reconcile of shop/sleeper failed"),
            "{how}: {error}"
        );
        assert!(
            error.ends_with("plugin guest-hostile-output: timed out after 300ms"),
            "{how}: {error}"
        );
    }
}

/// A refused plugin never stops the controllers of other parent kinds: a WasmPlugin for a kind
/// the server does not serve, added while Thing's controller runs, is refused, and Thing's
/// parents go on being reconciled, a changed one and a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_plugin_of_another_kind_leaves_the_other_kinds_controller_running() {
    let mut env = Env::start().await;
    env.with_children_plugin().await;
    env.create_thing("t1", json!({"names": ["a"], "value": "one"}))
        .await;
    eventually("t1's child", || async {
        (env.children_of("t1").await.len() == 1).then_some(())
    })
    .await;
    env.put_plugin_bytes("gizmo", guests::bytes(guests::CHILDREN))
        .await;
    env.put_wasm_plugin("gizmo", ("example.com/v1", "Gizmo"), "gizmo", json!({}))
        .await;
    let refused = refusal(&env, "gizmo").await;
    assert!(refused.message.contains("Gizmo"), "{}", refused.message);
    env.things()
        .patch(
            "t1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"value": "two"}})),
        )
        .await
        .unwrap();
    env.create_thing("t2", json!({"names": ["b"], "value": "new"}))
        .await;
    eventually("t1 changed and t2 made", || async {
        let t1 = env.children_of("t1").await;
        let t2 = env.children_of("t2").await;
        (t1.len() == 1 && data(&t1[0], "value") == "two" && t2.len() == 1).then_some(())
    })
    .await;
    // Still refused, not retried into serving.
    let status = env.wasm_plugin("gizmo").await.status.expect("status");
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_declaring_a_kind_the_server_does_not_serve_is_refused_at_load() {
    let mut env = Env::start().await;
    env.put_plugin_bytes("unserved", guests::bytes(guests::UNSERVED_KIND))
        .await;
    env.put_wasm_plugin("unserved", THING, "unserved", json!({}))
        .await;
    env.install_children_plugin().await;
    env.run_operator().await;
    let wp = refusal(&env, "unserved").await;
    assert_eq!(wp.reason, "KindNotServed");
    assert!(
        wp.message.contains("example.com/v1/Nothing"),
        "{}",
        wp.message
    );
    // The kind's pipeline is incomplete without it: its parents wait, naming it, and nothing
    // is applied.
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    let waiting = env
        .thing_condition("t1", "Reconciled", "PluginsNotServing")
        .await;
    assert!(
        waiting["message"]
            .as_str()
            .unwrap_or("")
            .contains("unserved"),
        "{waiting}"
    );
    assert!(env.children_of("t1").await.is_empty());
    // With `failurePolicy: Ignore` the rest of the pipeline runs without it, and prunes nothing.
    env.put_wasm_plugin(
        "unserved",
        THING,
        "unserved",
        json!({"failurePolicy": "Ignore"}),
    )
    .await;
    eventually("a child", || async {
        (env.children_of("t1").await.len() == 1).then_some(())
    })
    .await;
    let skipped = env
        .thing_condition("t1", "Reconciled", "PluginSkipped")
        .await;
    assert!(
        skipped["message"]
            .as_str()
            .unwrap_or("")
            .contains("unserved"),
        "{skipped}"
    );
}
