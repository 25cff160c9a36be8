//! The operator with plugins written in Rust behind the contract's traits
//! (`windlass_contract::testing`), on the embedded devcluster: what the controller does with a
//! plugin's answers, tested without building a component.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Namespace},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::{Value, json};
use tokio::sync::watch;
use windlass_contract::{
    Response,
    testing::{Native, NativeEngine, failed, info},
};
use windlass_devcluster::{DevCluster, Options};
use windlass_operator::{
    controller::{Settings, plan::PARENT_UID_LABEL},
    crd::WasmPlugin,
    operator,
};

const PARENT: &str = "example.com/v1/Thing";

/// A devcluster with the WasmPlugin and Thing CRDs, and the operator running on `engine`.
struct Env {
    _dev: DevCluster,
    client: Client,
    _stop: watch::Sender<bool>,
}

impl Env {
    async fn start(engine: Arc<NativeEngine>) -> Env {
        let dev = DevCluster::start(Options::default())
            .await
            .expect("devcluster starts");
        let client = dev.client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let thing: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Thing", "plural": "things", "singular": "thing"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        }))
        .expect("a CRD");
        use kube::CustomResourceExt as _;
        for crd in [WasmPlugin::crd(), thing] {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("CRD created");
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for ns in ["windlass-system", "shop"] {
            let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            namespaces
                .create(&PostParams::default(), &ns)
                .await
                .expect("namespace created");
        }
        let (stop, shutdown) = watch::channel(false);
        let config = operator::Config {
            admin_addr: "127.0.0.1:0".parse().unwrap(),
            election: None,
            settings: Settings {
                backoff_base: Duration::from_millis(100),
                backoff_max: Duration::from_secs(1),
                ..Settings::default()
            },
            identity: "native-test".into(),
        };
        operator::start(client.clone(), config, engine, shutdown)
            .await
            .expect("the operator starts");
        Env {
            _dev: dev,
            client,
            _stop: stop,
        }
    }

    /// A WasmPlugin whose ConfigMap holds `bytes`: the native plugin added under them.
    async fn put_plugin(&self, name: &str, bytes: &[u8]) {
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), "windlass-system");
        let mut cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        cm.binary_data = Some([("plugin.wasm".to_string(), ByteString(bytes.to_vec()))].into());
        cms.patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .expect("ConfigMap applied");
        let wp = json!({
            "apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": name},
            "spec": {
                "parent": {"apiVersion": "example.com/v1", "kind": "Thing"},
                "source": {"configMap": {"namespace": "windlass-system", "name": name}},
            },
        });
        Api::<WasmPlugin>::all(self.client.clone())
            .patch(
                name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&wp),
            )
            .await
            .expect("WasmPlugin applied");
    }

    fn things(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Thing"));
        Api::namespaced_with(self.client.clone(), "shop", &ar)
    }

    async fn create_thing(&self, name: &str, spec: Value) {
        let thing: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Thing",
            "metadata": {"name": name, "namespace": "shop"}, "spec": spec,
        }))
        .unwrap();
        self.things()
            .create(&PostParams::default(), &thing)
            .await
            .expect("Thing created");
    }

    /// The Thing's `Reconciled` condition once its status is `status`.
    async fn reconciled(&self, name: &str, status: &str) -> Value {
        eventually(&format!("{name} Reconciled={status}"), || async {
            let thing = serde_json::to_value(self.things().get(name).await.ok()?).ok()?;
            thing
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Reconciled" && c["status"] == status)
                .cloned()
        })
        .await
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), "shop")
    }
}

async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A plugin that makes one ConfigMap per parent, `<parent>-data`, holding the parent's
/// `spec.message` — or fails, while `failing` is set.
fn data_plugin(failing: Arc<AtomicBool>) -> Native {
    Native::new(info("data", PARENT, &["v1/ConfigMap"]), move |req| {
        if failing.load(Ordering::SeqCst) {
            return Err(failed("data", "the disk is gone"));
        }
        let parent: Value = serde_json::from_str(&req.parent).expect("the parent is JSON");
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let child = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-data"), "namespace": "shop"},
            "data": {"message": parent["spec"]["message"]},
        });
        Ok(Response {
            desired: vec![child.to_string()],
            status: Some(json!({"message": parent["spec"]["message"]}).to_string()),
            ..Response::default()
        })
    })
}

#[tokio::test]
async fn a_native_plugin_reconciles_a_parent_with_no_component_built() {
    let engine = Arc::new(NativeEngine::new());
    let plugin = engine.add(b"data-v1".to_vec(), data_plugin(Arc::default()));
    let env = Env::start(engine.clone()).await;
    env.put_plugin("data", b"data-v1").await;
    env.create_thing("alpha", json!({"message": "hello"})).await;
    env.reconciled("alpha", "True").await;
    let thing = env.things().get("alpha").await.expect("the Thing");
    let child = env
        .config_maps()
        .get("alpha-data")
        .await
        .expect("the child exists");
    assert_eq!(
        child
            .data
            .as_ref()
            .and_then(|d| d.get("message"))
            .map(String::as_str),
        Some("hello")
    );
    assert_eq!(child.labels().get(PARENT_UID_LABEL), thing.uid().as_ref());
    let owner = child.owner_references();
    assert!(
        owner
            .iter()
            .any(|o| Some(&o.uid) == thing.uid().as_ref() && o.controller == Some(true)),
        "{owner:?}"
    );
    let thing = serde_json::to_value(thing).unwrap();
    assert_eq!(thing["status"]["message"], "hello");
    assert!(plugin.calls() >= 1);
}

#[tokio::test]
async fn a_failing_native_plugin_is_told_on_the_parent_and_prunes_nothing() {
    let failing = Arc::new(AtomicBool::new(false));
    let engine = Arc::new(NativeEngine::new());
    engine.add(b"data-v1".to_vec(), data_plugin(failing.clone()));
    let env = Env::start(engine).await;
    env.put_plugin("data", b"data-v1").await;
    env.create_thing("beta", json!({"message": "kept"})).await;
    env.reconciled("beta", "True").await;
    let before = env
        .config_maps()
        .get("beta-data")
        .await
        .expect("the child exists");
    failing.store(true, Ordering::SeqCst);
    // A spec change makes the reconcile that fails.
    env.things()
        .patch(
            "beta",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"message": "changed"}})),
        )
        .await
        .expect("the Thing patched");
    let condition = env.reconciled("beta", "False").await;
    assert_eq!(condition["reason"], "PluginFailed", "{condition}");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("data") && message.contains("the disk is gone"),
        "{message}"
    );
    let after = env
        .config_maps()
        .get("beta-data")
        .await
        .expect("the child outlives the failure");
    assert_eq!(after.uid(), before.uid(), "the child was replaced");
    assert_eq!(
        after.data, before.data,
        "the child was changed by a failed run"
    );
}
