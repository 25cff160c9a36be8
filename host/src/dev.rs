//! `windlass dev`: the embedded default. Starts the devcluster, installs the CRDs, loads the
//! plugins from files into ConfigMaps with a WasmPlugin each (a plugin too big for a ConfigMap,
//! like the ~18 MB Python one, through a `file` source instead), applies the example manifests
//! and runs the operator against it all. [`start_on`] does the same on a cluster that exists
//! (a real control plane), without the devcluster.

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Namespace},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::sync::watch;
use windlass_devcluster::{DevCluster, Options};

use crate::{
    controller::Discovery,
    crd::WasmPlugin,
    operator,
    policy::kind_of,
    render::parse_docs,
    runtime::{Runtime, RuntimeConfig},
};

/// The namespace plugins' ConfigMaps live in.
pub const SYSTEM_NAMESPACE: &str = "windlass-system";

/// The largest plugin stored in a ConfigMap (the API server's limit is 1 MiB for the whole
/// object), as it is stored: a bigger one is stored gzip-compressed, and one that does not fit
/// even so is loaded from its file.
const CONFIGMAP_LIMIT: usize = 1000 * 1024;
/// The largest component compressed to try a ConfigMap (gzip makes a component about a third
/// as large; one above this is loaded from its file without trying).
const COMPRESS_LIMIT: usize = 4 * CONFIGMAP_LIMIT;
/// Above this size a component is taken for a heavy guest (an interpreter or a language runtime
/// inside: the JavaScript plugin is 1.7 MB, the Go one 3.5 MB, the Rust ones about 1 MB) and,
/// unless its manifest says otherwise, runs with its instances kept warm.
const HEAVY_GUEST: usize = 1536 * 1024;

mod sampledb {
    // `SAMPLEDB_PLUGINS`, `is_cargo_package`, `sampledb_component`.
    include!("../../plugins/sampledb_plugins.rs");
}

/// The SampleDB plugins `windlass dev` loads by default, in pipeline order, as (WasmPlugin
/// name, file where `cargo xtask plugins` writes it), relative to the repository.
pub fn sampledb_plugins() -> Vec<(String, PathBuf)> {
    sampledb::SAMPLEDB_PLUGINS
        .iter()
        .map(|(name, source)| {
            let file = sampledb::sampledb_component(name, source);
            (name.to_string(), PathBuf::from("target/wasm").join(file))
        })
        .collect()
}

/// What `windlass dev` runs.
#[derive(Debug, Clone)]
pub struct DevConfig {
    /// Devcluster port; 0 picks one.
    pub port: u16,
    /// Where the kubeconfig is written.
    pub kubeconfig: PathBuf,
    /// Plugins in pipeline order: (WasmPlugin name, parent `apiVersion`, parent kind, file).
    pub plugins: Vec<(String, String, String, PathBuf)>,
    /// CustomResourceDefinitions to create, besides the host's, before any plugin loads (the
    /// kinds of a plugin of one's own).
    pub crds: Vec<PathBuf>,
    /// Manifests to apply once the operator runs.
    pub manifests: Vec<PathBuf>,
    /// The operator's settings.
    pub operator: operator::Config,
    /// The plugin runtime's settings.
    pub runtime: RuntimeConfig,
    /// CronJob time speed-up in the simulator.
    pub cron_speedup: f64,
}

/// A running `windlass dev`.
pub struct Dev {
    /// The devcluster, or None on a cluster that existed before ([`start_on`]).
    pub cluster: Option<DevCluster>,
    /// A client of the cluster (the devcluster's admin, or the one given to [`start_on`]).
    pub client: Client,
    /// The operator.
    pub operator: operator::Handle,
    /// The parents applied from the manifests: (api resource, namespace, name).
    pub parents: Vec<(kube::discovery::ApiResource, String, String)>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Dev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dev")
            .field("cluster", &self.cluster)
            .field("operator", &self.operator)
            .field("parents", &self.parents)
            .finish_non_exhaustive()
    }
}

/// Starts everything.
///
/// # Errors
/// Any step's error, naming the file or object.
pub async fn start(config: DevConfig) -> Result<Dev> {
    let cluster = DevCluster::start(Options {
        port: config.port,
        cron_speedup: config.cron_speedup,
        ..Options::default()
    })
    .await?;
    cluster
        .write_kubeconfig(&config.kubeconfig)
        .with_context(|| format!("writing {}", config.kubeconfig.display()))?;
    let client = cluster.client();
    install(Some(cluster), client, config).await
}

/// Everything [`start`] does but the devcluster, on the cluster `client` talks to (its
/// `port`, `kubeconfig` and `cron_speedup` are not used). Nothing plays the kubelet there
/// unless the caller runs one (`windlass_devcluster::simulator::remote`).
///
/// # Errors
/// Any step's error, naming the file or object.
pub async fn start_on(client: Client, config: DevConfig) -> Result<Dev> {
    install(None, client, config).await
}

/// How long the operator's aborted tasks get to finish before the devcluster stops.
const SETTLE: Duration = Duration::from_millis(200);

/// How long a new CRD may take to be served.
const CRD_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);

/// What [`start_on`] installs before it starts the operator: the CRDs (the host's and
/// `config.crds`), the system namespace, and a WasmPlugin for each plugin, with what `windlass
/// dev` grants it. For a host run elsewhere (`windlass run`) on that cluster.
///
/// # Errors
/// Any step's error, naming the file or object.
pub async fn prepare(client: &Client, config: &DevConfig) -> Result<()> {
    let apply = PatchParams::apply("windlass-dev").force();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut all = crate::crds();
    for path in &config.crds {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for doc in parse_docs(&text, &path.display().to_string())? {
            let crd: CustomResourceDefinition = serde_json::from_value(doc)
                .with_context(|| format!("{}: not a CustomResourceDefinition", path.display()))?;
            all.push(crd);
        }
    }
    for crd in &all {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &apply, &Patch::Apply(crd))
            .await
            .with_context(|| format!("installing CRD {name}"))?;
    }
    // A real API server serves a new kind only once its CRD is Established.
    for crd in &all {
        let name = crd.metadata.name.clone().unwrap_or_default();
        windlass_devcluster::crd::wait_established(&crds, &name, CRD_ESTABLISHED_TIMEOUT)
            .await
            .map_err(anyhow::Error::msg)?;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": SYSTEM_NAMESPACE}}))?;
    namespaces
        .patch(SYSTEM_NAMESPACE, &apply, &Patch::Apply(&ns))
        .await?;
    for (order, (name, api_version, kind, path)) in config.plugins.iter().enumerate() {
        install_plugin(client, name, api_version, kind, path, order).await?;
    }
    Ok(())
}

async fn install(cluster: Option<DevCluster>, client: Client, config: DevConfig) -> Result<Dev> {
    prepare(&client, &config).await?;
    let apply = PatchParams::apply("windlass-dev").force();
    let (stop, stopped) = watch::channel(false);
    let engine = Arc::new(Runtime::new(config.runtime.clone())?);
    let (operator, task) =
        operator::start(client.clone(), config.operator.clone(), engine, stopped).await?;
    // Parents created before the whole pipeline serves would be reconciled by part of it (and
    // then change again as each plugin arrives): wait for every plugin first.
    let names: Vec<&str> = config.plugins.iter().map(|p| p.0.as_str()).collect();
    wait_plugins_ready(&client, &names, PLUGINS_READY_TIMEOUT).await?;
    let discovery = Discovery::new(client.clone());
    let mut parents = Vec::new();
    for path in &config.manifests {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for doc in parse_docs(&text, &path.display().to_string())? {
            let kind = kind_of(&doc);
            let (ar, namespaced) = discovery
                .resolve(&kind)
                .await
                .with_context(|| format!("{}: {kind} is not served", path.display()))?;
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .context("a manifest has no name")?;
            let namespace = doc
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string();
            // A cluster-scoped kind ignores the namespace, as kubectl apply does.
            let scope = namespaced.then_some(namespace.as_str());
            let api = crate::k8s::api(client.clone(), &ar, scope, namespaced)
                .context("no API for the manifest's scope")?;
            api.patch(name, &apply, &Patch::Apply(&doc))
                .await
                .with_context(|| format!("{}: applying {kind} {name}", path.display()))?;
            if config
                .plugins
                .iter()
                .any(|(_, v, k, _)| format!("{v}/{k}") == kind)
            {
                parents.push((ar, namespace, name.to_string()));
            }
        }
    }
    Ok(Dev {
        cluster,
        client,
        operator,
        parents,
        stop,
        task,
    })
}

/// How long `windlass dev` waits for its plugins to load (the Python plugin compiles for
/// seconds the first time; later runs load it from the precompiled cache).
const PLUGINS_READY_TIMEOUT: Duration = Duration::from_secs(300);

/// Waits until every named WasmPlugin reports `Ready=True`.
///
/// # Errors
/// When `timeout` passes first, naming each plugin that is not ready and its last error.
pub async fn wait_plugins_ready(client: &Client, names: &[&str], timeout: Duration) -> Result<()> {
    let api = Api::<WasmPlugin>::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut waiting = Vec::new();
        for name in names {
            let status = api.get_opt(name).await?.and_then(|wp| wp.status);
            let ready = status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            if !ready {
                let why = status
                    .and_then(|s| s.last_error)
                    .unwrap_or_else(|| "loading".into());
                waiting.push(format!("{name}: {why}"));
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "plugins not ready after {timeout:?}: {}",
                waiting.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The SampleDB WasmPlugins as manifests without their source, by name: what each is granted
/// and given (`plugins/<name>/wasmplugin.yaml`). The one place this is written: `windlass dev`
/// applies them, and the Helm preset must say the same (`helm::the_preset_is_the_plugins_manifests`).
pub const SAMPLEDB_MANIFESTS: &[(&str, &str)] = &[
    (
        "sampledb-storage",
        include_str!("../../plugins/sampledb-storage/wasmplugin.yaml"),
    ),
    (
        "sampledb-backup",
        include_str!("../../plugins/sampledb-backup/wasmplugin.yaml"),
    ),
    (
        "sampledb-upgrade",
        include_str!("../../plugins/sampledb-upgrade/wasmplugin.yaml"),
    ),
    (
        "sampledb-primary",
        include_str!("../../plugins/sampledb-primary/wasmplugin.yaml"),
    ),
    (
        "sampledb-conventions",
        include_str!("../../plugins/sampledb-conventions/wasmplugin.yaml"),
    ),
    (
        "sampledb-chaos",
        include_str!("../../plugins/sampledb-chaos/wasmplugin.yaml"),
    ),
];

/// The manifest of the SampleDB WasmPlugin `name` (without a source), if it is one.
///
/// # Panics
/// When a manifest under `plugins/` is not YAML (a test parses every one).
pub fn sampledb_manifest(name: &str) -> Option<Value> {
    SAMPLEDB_MANIFESTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, text)| {
            serde_yaml::from_str(text)
                .unwrap_or_else(|e| panic!("plugins/{n}/wasmplugin.yaml: {e}"))
        })
}

/// A field of a SampleDB WasmPlugin's spec (a JSON pointer below `spec`): what its manifest
/// gives it, for tests and benchmarks that make the WasmPlugin themselves.
///
/// # Panics
/// When there is no such plugin or field.
pub fn sampledb_spec(name: &str, pointer: &str) -> Value {
    sampledb_manifest(name)
        .and_then(|m| m["spec"].pointer(pointer).cloned())
        .unwrap_or_else(|| panic!("plugins/{name}/wasmplugin.yaml has no spec{pointer}"))
}

async fn install_plugin(
    client: &Client,
    name: &str,
    api_version: &str,
    kind: &str,
    path: &PathBuf,
    order: usize,
) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "reading plugin {} (build the plugins first: cargo xtask plugins)",
            path.display()
        )
    })?;
    let apply = PatchParams::apply("windlass-dev").force();
    // A heavy guest's instances are kept warm. A component too big for a ConfigMap is stored
    // compressed (the host inflates it and checks the digest of the component itself), or, too
    // big even so, comes from its file.
    let instance_mode = if bytes.len() > HEAVY_GUEST {
        "Reuse"
    } else {
        "Fresh"
    };
    let bytes = if bytes.len() > CONFIGMAP_LIMIT && bytes.len() <= COMPRESS_LIMIT {
        crate::source::compressed::deflate(&bytes)
    } else {
        bytes
    };
    let source = if bytes.len() <= CONFIGMAP_LIMIT {
        let mut cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": SYSTEM_NAMESPACE}}),
        )?;
        cm.binary_data = Some([("plugin.wasm".to_string(), ByteString(bytes))].into());
        Api::<ConfigMap>::namespaced(client.clone(), SYSTEM_NAMESPACE)
            .patch(name, &apply, &Patch::Apply(&cm))
            .await
            .with_context(|| format!("storing plugin {name}"))?;
        json!({"configMap": {"namespace": SYSTEM_NAMESPACE, "name": name, "key": "plugin.wasm"}})
    } else {
        let path = std::fs::canonicalize(path)
            .with_context(|| format!("resolving plugin {}", path.display()))?;
        json!({"file": {"path": path}})
    };
    // A SampleDB plugin's manifest says what it is granted and given; any other plugin gets
    // what it declares. The parent kind is the one `windlass dev` was given either way.
    let mut wp = sampledb_manifest(name).unwrap_or_else(|| {
        json!({
            "apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": name}, "spec": {"order": order * 10},
        })
    });
    let spec = &mut wp["spec"];
    spec["parent"] = json!({"apiVersion": api_version, "kind": kind});
    spec["source"] = source;
    if spec.get("instanceMode").is_none() {
        spec["instanceMode"] = json!(instance_mode);
    }
    Api::<WasmPlugin>::all(client.clone())
        .patch(name, &apply, &Patch::Apply(&wp))
        .await
        .with_context(|| format!("creating WasmPlugin {name}"))?;
    Ok(())
}

impl Dev {
    /// Waits until every parent from the manifests reports `Reconciled=True`.
    ///
    /// # Errors
    /// When `timeout` passes first, naming the parents that are not reconciled and why.
    pub async fn wait_reconciled(&self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        let client = self.client.clone();
        loop {
            let mut waiting = Vec::new();
            for (ar, ns, name) in &self.parents {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
                let obj = api
                    .get_opt(name)
                    .await?
                    .map(|o| serde_json::to_value(o).unwrap_or_default());
                let reconciled = obj.as_ref().and_then(|o| {
                    o.pointer("/status/conditions")?
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "Reconciled")
                        .cloned()
                });
                match reconciled {
                    Some(c) if c["status"] == "True" => {}
                    Some(c) => waiting.push(format!("{ns}/{name}: {}", c["message"])),
                    None => waiting.push(format!("{ns}/{name}: not reconciled yet")),
                }
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("not reconciled after {timeout:?}: {}", waiting.join("; "));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the operator and the devcluster (a cluster given to [`start_on`] keeps running).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        if let Some(cluster) = self.cluster {
            // The operator's tasks are aborted; their cancellation runs on the workers a moment
            // later. Stopping the devcluster first would let a watch still being polled see the
            // server go, retry and log it.
            tokio::time::sleep(SETTLE).await;
            cluster.shutdown().await;
        }
    }
}
