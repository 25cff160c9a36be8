//! A finalize phase that never completes: said after the threshold (condition, Warning event,
//! metric, each naming the plugin), released by an administrator keeping every data-bearing
//! child, and a WasmPlugin's deletion that waits for its kind's deleting parents. The plugin is
//! `guest-hostile-finalize`, written against the WIT without the SDK. Run on the devcluster and,
//! in CI's second pass, on a real control plane, where the garbage collector and the
//! StatefulSet controller decide what goes with a parent.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{ConfigMap, PersistentVolumeClaim, Secret},
    events::v1::Event,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use windlass_test_guests as guests;

use crate::containment::{hostile_env_with, reconciled};
use crate::controllers::thing_uid;
use crate::support::*;

/// The plugin's name, and its WasmPlugin's (so that both ways the host names it agree).
const PLUGIN: &str = "guest-hostile-finalize";

/// The host with the stuck-finalize threshold at 2 s.
async fn env() -> Env {
    let mut config = operator_config("test", None);
    config.settings.finalize_stuck_after = Duration::from_secs(2);
    hostile_env_with(PLUGIN, guests::HOSTILE_FINALIZE, json!({}), config).await
}

fn shop<K>(env: &Env) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    Api::namespaced(env.client.clone(), "shop")
}

/// A Thing whose finalize phase does as `mode` says, reconciled, with its children made.
async fn thing(env: &Env, name: &str, mode: &str) -> String {
    env.create_thing(name, json!({"hostile": {"finalize": mode}}))
        .await;
    reconciled(env, name, "True").await;
    let sets: Api<StatefulSet> = shop(env);
    eventually(&format!("{name}'s StatefulSet"), || async {
        sets.get_opt(&format!("{name}-db")).await.ok().flatten()
    })
    .await;
    thing_uid(env, name).await
}

async fn thing_json(env: &Env, name: &str) -> Option<Value> {
    let t = env.things().get_opt(name).await.ok()??;
    serde_json::to_value(t).ok()
}

/// The value of the `windlass_finalize_stuck` series of the plugin, 0 when absent.
async fn stuck_gauge(env: &Env) -> i64 {
    let text = env.metrics().await;
    let series =
        format!("windlass_finalize_stuck{{kind=\"example.com/v1/Thing\",plugin=\"{PLUGIN}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().expect("a gauge value"))
}

/// The Warning events of `reason` about the Thing `name`.
async fn warnings(env: &Env, name: &str, reason: &str) -> Vec<Event> {
    events_about(&shop(env), name, reason)
        .await
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect()
}

/// What a kept child must still be: the same object, no owner reference to the parent.
fn kept(object: &Value, uid_before: &str, parent_uid: &str) {
    assert_eq!(object["metadata"]["uid"], uid_before, "{object}");
    let refs = object["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        refs.iter().all(|r| r["uid"] != parent_uid),
        "a kept child still names the released parent as an owner: {object}"
    );
    assert!(
        object["metadata"]["deletionTimestamp"].is_null(),
        "{object}"
    );
}

async fn annotate(env: &Env, name: &str, value: &str) {
    env.things()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"windlass.dev/release": value}}})),
        )
        .await
        .expect("annotated");
}

/// Both ways a finalize phase can hang — a plugin that reports not finalized forever, and one
/// that traps — are said after the threshold, and the administrator's release keeps the data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalize_that_never_completes_is_said_and_the_release_keeps_the_data() {
    let env = env().await;
    for (name, mode, reason) in [("never", "never", "NotFinalized"), ("trap", "trap", "Trap")] {
        let parent_uid = thing(&env, name, mode).await;
        let sets: Api<StatefulSet> = shop(&env);
        let secrets: Api<Secret> = shop(&env);
        let maps: Api<ConfigMap> = shop(&env);
        let set = serde_json::to_value(sets.get(&format!("{name}-db")).await.unwrap()).unwrap();
        let secret = eventually("the Secret", || async {
            secrets
                .get_opt(&format!("{name}-password"))
                .await
                .ok()
                .flatten()
        })
        .await;
        let secret = serde_json::to_value(secret).unwrap();
        let map = eventually("the ConfigMap", || async {
            maps.get_opt(&format!("{name}-settings"))
                .await
                .ok()
                .flatten()
        })
        .await;
        assert!(
            map.owner_references().iter().any(|r| r.uid == parent_uid),
            "the ConfigMap is the parent's dependent"
        );
        env.things()
            .delete(name, &DeleteParams::default())
            .await
            .expect("deleted");

        // Said after the threshold: the condition names the plugin and the way out.
        let stuck = eventually(&format!("{name}: FinalizeStuck"), || async {
            let t = thing_json(&env, name).await?;
            let c = condition(&t, "FinalizeStuck")?;
            (c["status"] == "True").then(|| c.clone())
        })
        .await;
        assert_eq!(stuck["reason"], reason, "{stuck}");
        let message = stuck["message"].as_str().unwrap();
        assert!(message.contains(&format!("plugin {PLUGIN}")), "{message}");
        assert!(
            message.contains("windlass.dev/release=keep-data"),
            "{message}"
        );
        let events = eventually("the FinalizeStuck event", || async {
            let w = warnings(&env, name, "FinalizeStuck").await;
            (!w.is_empty()).then_some(w)
        })
        .await;
        assert!(
            events[0]
                .note
                .as_deref()
                .unwrap_or_default()
                .contains(PLUGIN),
            "{:?}",
            events[0].note
        );
        eventually("the stuck gauge counts the parent", || async {
            (stuck_gauge(&env).await == 1).then_some(())
        })
        .await;
        // It stays: nothing the host does on its own lets the parent go.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(thing_json(&env, name).await.is_some(), "{name} went");

        // A release the host does not know is refused, naming the annotation; nothing goes.
        annotate(&env, name, "yes").await;
        let refused = eventually("the release refused", || async {
            let t = thing_json(&env, name).await?;
            let c = condition(&t, "Reconciled")?;
            (c["reason"] == "ReleaseRefused").then(|| c.clone())
        })
        .await;
        assert_eq!(refused["reason"], "ReleaseRefused", "{refused}");
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains("windlass.dev/release"),
            "{refused}"
        );
        assert!(thing_json(&env, name).await.is_some());

        // The release: the parent goes, every data-bearing child stays, the rest goes with it.
        annotate(&env, name, "keep-data").await;
        eventually(&format!("{name} released"), || async {
            thing_json(&env, name).await.is_none().then_some(())
        })
        .await;
        let set_after =
            serde_json::to_value(sets.get(&format!("{name}-db")).await.expect("kept")).unwrap();
        kept(
            &set_after,
            set["metadata"]["uid"].as_str().unwrap(),
            &parent_uid,
        );
        let secret_after = serde_json::to_value(
            secrets
                .get(&format!("{name}-password"))
                .await
                .expect("kept"),
        )
        .unwrap();
        kept(
            &secret_after,
            secret["metadata"]["uid"].as_str().unwrap(),
            &parent_uid,
        );
        assert_eq!(secret_after["data"], secret["data"], "the Secret's data");
        eventually("the ConfigMap goes with the parent", || async {
            maps.get_opt(&format!("{name}-settings"))
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
        // The StatefulSet's claim, made by the StatefulSet controller, is still there and
        // still the StatefulSet's.
        let claims: Api<PersistentVolumeClaim> = shop(&env);
        let claim = eventually("the StatefulSet's claim", || async {
            claims
                .get_opt(&format!("data-{name}-db-0"))
                .await
                .ok()
                .flatten()
        })
        .await;
        assert!(claim.metadata.deletion_timestamp.is_none());
        let released = warnings(&env, name, "Released").await;
        let note = released
            .first()
            .and_then(|e| e.note.clone())
            .expect("a Released event");
        assert!(note.contains(&format!("{name}-password")), "{note}");
        assert!(note.contains(&format!("{name}-db")), "{note}");
        assert!(!note.contains("settings"), "{note}");
        eventually("the stuck gauge back at 0", || async {
            (stuck_gauge(&env).await == 0).then_some(())
        })
        .await;
    }
}

/// Deleting the WasmPlugin while a parent of its kind is being deleted waits for that
/// parent's finalize phase, and the plugin keeps serving it; when the last WasmPlugin of the
/// kind goes, the host's finalizer leaves the live parents, so none is left undeletable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_wasm_plugin_waits_for_the_parents_it_finalizes() {
    let env = env().await;
    let plugins: Api<windlass::crd::WasmPlugin> = Api::all(env.client.clone());
    eventually("the host's finalizer on the WasmPlugin", || async {
        let wp = plugins.get(PLUGIN).await.ok()?;
        wp.finalizers()
            .iter()
            .any(|f| f == "windlass.dev/in-use")
            .then_some(())
    })
    .await;
    thing(&env, "leaving", "never").await;
    let live_uid = thing(&env, "staying", "never").await;
    env.things()
        .delete("leaving", &DeleteParams::default())
        .await
        .expect("deleted");
    plugins
        .delete(PLUGIN, &DeleteParams::default())
        .await
        .expect("WasmPlugin deleted");
    let retiring = eventually("the WasmPlugin's Retiring condition", || async {
        let wp = serde_json::to_value(plugins.get(PLUGIN).await.ok()?).ok()?;
        condition(&wp, "Retiring").cloned()
    })
    .await;
    assert_eq!(retiring["reason"], "WaitingForParents", "{retiring}");
    assert!(
        retiring["message"]
            .as_str()
            .unwrap()
            .contains("shop/leaving"),
        "{retiring}"
    );
    // The plugin still serves the deleting parent: it is stuck in the plugin, not unloaded.
    let stuck = eventually("leaving: FinalizeStuck", || async {
        let t = thing_json(&env, "leaving").await?;
        condition(&t, "FinalizeStuck").cloned()
    })
    .await;
    assert_eq!(stuck["reason"], "NotFinalized", "{stuck}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        plugins.get_opt(PLUGIN).await.unwrap().is_some(),
        "the WasmPlugin went while a parent's finalize phase needed it"
    );
    // The parent's finalize phase completes with the plugin: then both go.
    env.things()
        .patch(
            "leaving",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"hostile": {"finalize": "done"}}})),
        )
        .await
        .expect("patched");
    eventually("leaving finalized", || async {
        thing_json(&env, "leaving").await.is_none().then_some(())
    })
    .await;
    let sets: Api<StatefulSet> = shop(&env);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = sets.get_opt("leaving-db").await.unwrap();
        if s.as_ref()
            .is_none_or(|s| s.metadata.deletion_timestamp.is_some())
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the held StatefulSet not deleted by the completed finalize: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually("the WasmPlugin gone", || async {
        plugins.get_opt(PLUGIN).await.ok()?.is_none().then_some(())
    })
    .await;
    // It was the kind's last WasmPlugin: the live parent no longer holds the host's
    // finalizer, and deleting it now does not hang; its held StatefulSet stays.
    let staying = eventually("the host's finalizer off the live parent", || async {
        let t = thing_json(&env, "staying").await.expect("staying lives");
        t["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| !f.iter().any(|f| f == "windlass.dev/finalize"))
            .then_some(t)
    })
    .await;
    assert_eq!(staying["metadata"]["uid"], live_uid.as_str());
    env.things()
        .delete("staying", &DeleteParams::default())
        .await
        .expect("deleted");
    eventually("staying gone", || async {
        thing_json(&env, "staying").await.is_none().then_some(())
    })
    .await;
    let set = sets
        .get("staying-db")
        .await
        .expect("the held StatefulSet stays");
    assert!(set.metadata.deletion_timestamp.is_none());
}
