//! Pods run as local processes from their images, against a real control plane: what a kubelet
//! and a container runtime would do for the Pods of chosen workloads (the Helm chart's host, in
//! the install test), where every other Pod is only marked Running.
//!
//! For a Pod whose labels match [`RunPods::selector`]:
//! - the image is pulled with `skopeo` into a directory and its layers unpacked with `tar`; the
//!   container's command is the Pod's `command`/`args` over the image's `Entrypoint`/`Cmd`, as a
//!   container runtime resolves them, run from the unpacked layer;
//! - the Pod gets a network namespace of its own (its ports cannot clash with another Pod's),
//!   where only loopback exists: the API server is reached at the `kubernetes` Service's address
//!   ([`SERVICE_HOST`]:443, which the API server's certificate names), and the loopback ports in
//!   [`RunPods::forward_ports`] (a registry) at the same ports, each forwarded to this machine;
//! - a mount namespace of its own: its volumes bind-mounted where the container mounts them —
//!   `emptyDir` (owned by the Pod's user or `fsGroup`), `configMap`, `secret` and `projected`
//!   (a ServiceAccount token from a TokenRequest for the Pod's account, the `kube-root-ca.crt`
//!   ConfigMap, the namespace), so the in-cluster configuration works unchanged — and `/`
//!   remounted read-only for `readOnlyRootFilesystem`;
//! - the environment of the image, then the container's (`value`, `fieldRef`,
//!   `configMapKeyRef`, `secretKeyRef`), with `KUBERNETES_SERVICE_HOST`/`PORT` and `HOSTNAME`;
//! - run as `runAsUser`/`runAsGroup` (the Pod's or the container's, else the image's `User`);
//! - the readiness probe (`httpGet` or `tcpSocket`, through the Pod's namespace) sets `Ready`,
//!   the liveness probe restarts the container, and a container that exits is restarted
//!   (`restartCount`);
//! - when the Pod is deleted, the process gets SIGTERM, SIGKILL after the grace period, and the
//!   Pod is removed as its kubelet would remove it.
//!
//! What a container runtime does and this does not: no chroot (the binary runs from the
//! unpacked layer on this machine's root, so a dynamically linked binary finds its libraries),
//! no cgroups (resources are not enforced), one container per Pod, no init containers. The
//! mount points of the volumes are made on this machine's root (empty directories) before the
//! Pod's mount namespace covers them. Needs root (namespaces, mounts, `setpriv`) and, on the
//! PATH: `skopeo`, `tar`, `ip`, `nsenter`, `unshare`, `mount`, `setpriv`.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    os::{
        fd::AsRawFd,
        unix::fs::{PermissionsExt, chown},
    },
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{ConfigMap, Pod, Secret, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use tokio::{sync::Notify, task::JoinHandle};

use super::{Sim, ns_name};
use crate::store::EventType;

/// The `kubernetes` Service's address (the first of the real control plane's service range):
/// a Pod reaches the API server there, as in a cluster.
pub const SERVICE_HOST: &str = "10.0.0.1";

/// Which Pods run as processes, and what they may reach.
#[derive(Debug, Clone)]
pub struct RunPods {
    /// A Pod runs as a process when its labels include all of these.
    pub selector: BTreeMap<String, String>,
    /// Where images are unpacked, volumes kept and each Pod's output written
    /// (`<namespace>_<pod>.log`). Made reachable (0755) for the Pods' users; its parents must let
    /// them through.
    pub dir: PathBuf,
    /// Loopback ports of this machine a Pod reaches at the same port of its own loopback (a
    /// registry on 127.0.0.1).
    pub forward_ports: Vec<u16>,
    /// Pull images over plain HTTP (a local registry).
    pub plain_http: bool,
}

/// The Pods running, and the images pulled.
pub(crate) struct Runner {
    options: RunPods,
    client: Client,
    /// The API server on this machine.
    api: SocketAddr,
    pods: Mutex<HashMap<String, Running>>,
    images: tokio::sync::Mutex<HashMap<String, Arc<Image>>>,
}

/// A Pod being run: told to stop through `stop`.
struct Running {
    stop: Arc<Notify>,
    _task: JoinHandle<()>,
}

/// An image unpacked.
#[derive(Debug)]
struct Image {
    root: PathBuf,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    env: Vec<(String, String)>,
    user: Option<(u32, Option<u32>)>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// A runner for the API server `kube` names (its address must be on this machine).
    pub(crate) fn new(options: RunPods, kube: &kube::Config) -> Result<Self, String> {
        let host = kube.cluster_url.host().unwrap_or_default();
        let port = kube.cluster_url.port_u16().unwrap_or(443);
        let api: SocketAddr = format!("{host}:{port}")
            .parse()
            .map_err(|e| format!("the API server {host}:{port} is no local address: {e}"))?;
        std::fs::create_dir_all(&options.dir)
            .and_then(|()| {
                std::fs::set_permissions(&options.dir, std::fs::Permissions::from_mode(0o755))
            })
            .map_err(|e| format!("{}: {e}", options.dir.display()))?;
        Ok(Runner {
            client: Client::try_from(kube.clone()).map_err(|e| e.to_string())?,
            options,
            api,
            pods: Mutex::new(HashMap::new()),
            images: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Whether `pod` is one this runner runs.
    pub(crate) fn runs(&self, pod: &Value) -> bool {
        let labels = &pod["metadata"]["labels"];
        self.options
            .selector
            .iter()
            .all(|(k, v)| labels[k].as_str() == Some(v))
    }

    /// A change of one of its Pods: start it once, stop it when it goes.
    pub(crate) fn pod_event(self: &Arc<Self>, sim: &Arc<Sim>, kind: EventType, pod: &Value) {
        let Some(uid) = pod["metadata"]["uid"].as_str().map(str::to_string) else {
            return;
        };
        let live = kind != EventType::Deleted && pod["metadata"].get("deletionTimestamp").is_none();
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        if live {
            let done = matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
            if done || pods.contains_key(&uid) {
                return;
            }
            let stop = Arc::new(Notify::new());
            let task = tokio::spawn(self.clone().run_pod(sim.clone(), pod.clone(), stop.clone()));
            pods.insert(uid, Running { stop, _task: task });
        } else if let Some(running) = pods.get(&uid) {
            // The task removes it once the process is gone.
            running.stop.notify_one();
        } else if kind != EventType::Deleted
            && pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
        {
            // Nothing runs for it (the simulator started after the Pod stopped, say).
            let (ns, name) = ns_name(pod);
            sim.terminate(&ns, &name, &uid);
        }
    }

    /// Runs one Pod until it is deleted, then removes it.
    async fn run_pod(self: Arc<Self>, sim: Arc<Sim>, pod: Value, stop: Arc<Notify>) {
        let (ns, name) = ns_name(&pod);
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            sim.bind(&ns, &name);
        }
        let ip = sim.ip();
        let started = crate::api::now();
        match self.prepare(&pod, &ip).await {
            Ok(container) => container.supervise(&self, &pod, &ip, &started, &stop).await,
            Err(message) => {
                tracing::warn!(namespace = %ns, pod = %name, %message, "simulated Pod cannot start");
                self.note(
                    &ns,
                    &name,
                    &format!("ERROR the Pod cannot start: {message}"),
                );
                let waiting =
                    json!({"waiting": {"reason": "CreateContainerError", "message": message}});
                self.write_status(&pod, &status(&pod, &ip, &started, false, 0, waiting, None))
                    .await;
                stop.notified().await;
            }
        }
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&uid);
        sim.terminate(&ns, &name, &uid);
    }

    /// Everything a container needs before it starts: its image, namespace, volumes, command,
    /// environment and user.
    async fn prepare(&self, pod: &Value, ip: &str) -> Result<Container, String> {
        let (ns, name) = ns_name(pod);
        let containers = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let [container] = containers.as_slice() else {
            return Err(format!(
                "Pod {ns}/{name} has {} containers; the simulator runs Pods of one",
                containers.len()
            ));
        };
        let reference = container["image"]
            .as_str()
            .ok_or("a container without an image")?;
        let image = self.image(reference).await?;
        let pod_dir = self.options.dir.join(format!("{ns}_{name}"));
        std::fs::create_dir_all(&pod_dir).map_err(|e| format!("{}: {e}", pod_dir.display()))?;

        // Who it runs as.
        let security = |field: &str| {
            container["securityContext"][field]
                .as_u64()
                .or_else(|| pod["spec"]["securityContext"][field].as_u64())
                .map(|v| v as u32)
        };
        let uid = security("runAsUser")
            .or(image.user.map(|(u, _)| u))
            .unwrap_or(0);
        let gid = security("runAsGroup")
            .or(image.user.and_then(|(_, g)| g))
            .unwrap_or(uid);
        let fs_group = pod["spec"]["securityContext"]["fsGroup"]
            .as_u64()
            .map(|v| v as u32);
        let read_only_root = container["securityContext"]["readOnlyRootFilesystem"] == true;
        let non_root = container["securityContext"]["runAsNonRoot"]
            .as_bool()
            .or_else(|| pod["spec"]["securityContext"]["runAsNonRoot"].as_bool())
            == Some(true);
        if non_root && uid == 0 {
            // What the kubelet says for such a container.
            return Err("container has runAsNonRoot and image will run as root".into());
        }

        // Volumes, as the kubelet would fill them.
        let mut mounts = Vec::new();
        let volumes = pod["spec"]["volumes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let volume_name = mount["name"].as_str().unwrap_or_default();
            let target = mount["mountPath"]
                .as_str()
                .ok_or_else(|| format!("volumeMount {volume_name} without a mountPath"))?;
            let volume = volumes
                .iter()
                .find(|v| v["name"] == volume_name)
                .ok_or_else(|| format!("volumeMount {volume_name}: no such volume"))?;
            let source = pod_dir.join("volumes").join(volume_name);
            if !source.exists() {
                std::fs::create_dir_all(&source)
                    .map_err(|e| format!("{}: {e}", source.display()))?;
                self.fill(&ns, &name, pod, volume, &source).await?;
                let owner = if volume.get("emptyDir").is_some() {
                    Some((uid, fs_group.unwrap_or(gid)))
                } else {
                    fs_group.map(|g| (0, g))
                };
                own(&source, owner)?;
            }
            mounts.push((source, PathBuf::from(target), mount["readOnly"] == true));
        }

        // The command, as a container runtime resolves it.
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array().map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
        };
        let (command, args) = match strings(&container["command"]) {
            Some(command) => (command, strings(&container["args"]).unwrap_or_default()),
            None => (
                image.entrypoint.clone(),
                strings(&container["args"]).unwrap_or_else(|| image.cmd.clone()),
            ),
        };
        let Some((program, first_args)) = command.split_first() else {
            return Err(format!("{reference}: no command and no entrypoint"));
        };
        let program = if program.starts_with('/') {
            image.root.join(program.trim_start_matches('/'))
        } else {
            PathBuf::from(program)
        };
        let mut argv: Vec<String> = vec![program.display().to_string()];
        argv.extend(first_args.iter().cloned());
        argv.extend(args);

        // The environment.
        let mut env: Vec<(String, String)> = image.env.clone();
        env.push(("HOSTNAME".into(), name.clone()));
        env.push(("KUBERNETES_SERVICE_HOST".into(), SERVICE_HOST.into()));
        env.push(("KUBERNETES_SERVICE_PORT".into(), "443".into()));
        env.push(("KUBERNETES_SERVICE_PORT_HTTPS".into(), "443".into()));
        for var in container["env"].as_array().into_iter().flatten() {
            let key = var["name"].as_str().unwrap_or_default().to_string();
            let value = self.env_value(&ns, pod, ip, var).await?;
            env.retain(|(k, _)| *k != key);
            env.push((key, value));
        }

        // Its network namespace: loopback, the API server's address, forwarded ports.
        let netns = Netns::new()?;
        for args in [
            &["link", "set", "lo", "up"][..],
            &["addr", "add", &format!("{SERVICE_HOST}/32"), "dev", "lo"],
        ] {
            let mut cmd = std::process::Command::new(tool("nsenter"));
            cmd.arg(format!("--net={}", netns.path()))
                .arg("ip")
                .args(args);
            let out = output(cmd).await?;
            if !out.status.success() {
                return Err(format!(
                    "ip {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        let mut forwards = vec![forward(
            &netns,
            format!("{SERVICE_HOST}:443").parse().expect("an address"),
            self.api,
        )?];
        for port in &self.options.forward_ports {
            let addr: SocketAddr = ([127, 0, 0, 1], *port).into();
            forwards.push(forward(&netns, addr, addr)?);
        }

        // The script its mount namespace runs before the container's process: the volumes, a
        // read-only root, then the Pod's user.
        let mount = quote(&tool("mount").display().to_string());
        let setpriv = quote(&tool("setpriv").display().to_string());
        let mut script = String::from("set -e\n");
        for (source, target, read_only) in &mounts {
            std::fs::create_dir_all(target).map_err(|e| format!("{}: {e}", target.display()))?;
            script += &format!(
                "{mount} --bind {} {}\n",
                quote(&source.display().to_string()),
                quote(&target.display().to_string())
            );
            if *read_only {
                script += &format!(
                    "{mount} -o remount,bind,ro {}\n",
                    quote(&target.display().to_string())
                );
            }
        }
        if read_only_root {
            script += &format!("{mount} -o remount,bind,ro /\n");
        }
        script += &format!(
            "exec {setpriv} --reuid={uid} --regid={gid} --clear-groups --pdeathsig KILL -- \"$@\"\n"
        );
        let ports: HashMap<String, u16> = container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["name"].as_str()?.to_string(),
                    p["containerPort"].as_u64()? as u16,
                ))
            })
            .collect();
        Ok(Container {
            netns,
            _forwards: Forwards(forwards),
            script,
            argv,
            env,
            log: self.options.dir.join(format!("{ns}_{name}.log")),
            readiness: Probe::of(&container["readinessProbe"], &ports),
            liveness: Probe::of(&container["livenessProbe"], &ports),
            grace: Duration::from_secs(
                pod["spec"]["terminationGracePeriodSeconds"]
                    .as_u64()
                    .unwrap_or(30)
                    .min(60),
            ),
        })
    }

    /// Pulls and unpacks an image once.
    async fn image(&self, reference: &str) -> Result<Arc<Image>, String> {
        let mut images = self.images.lock().await;
        if let Some(image) = images.get(reference) {
            return Ok(image.clone());
        }
        let n = images.len();
        let dir = self.options.dir.join("images").join(n.to_string());
        let blobs = dir.join("blobs");
        let root = dir.join("root");
        for d in [&dir, &root] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let mut copy = std::process::Command::new(tool("skopeo"));
        copy.arg("copy");
        if self.options.plain_http {
            copy.arg("--src-tls-verify=false");
        }
        copy.arg(format!("docker://{reference}"))
            .arg(format!("dir:{}", blobs.display()));
        let out = output(copy).await?;
        if !out.status.success() {
            return Err(format!(
                "pulling {reference}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let read_json = |name: &str| -> Result<Value, String> {
            let path = blobs.join(name);
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
        };
        let blob = |digest: &Value| {
            digest
                .as_str()
                .unwrap_or_default()
                .trim_start_matches("sha256:")
                .to_string()
        };
        let manifest = read_json("manifest.json")?;
        let config = read_json(&blob(&manifest["config"]["digest"]))?;
        for layer in manifest["layers"].as_array().into_iter().flatten() {
            let mut tar = std::process::Command::new(tool("tar"));
            tar.arg("-xzf")
                .arg(blobs.join(blob(&layer["digest"])))
                .arg("-C")
                .arg(&root);
            let out = output(tar).await?;
            if !out.status.success() {
                return Err(format!(
                    "unpacking a layer of {reference}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        let config = &config["config"];
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        let user = config["User"].as_str().and_then(|u| {
            let mut parts = u.splitn(2, ':');
            let uid = parts.next()?.parse().ok()?;
            Some((uid, parts.next().and_then(|g| g.parse().ok())))
        });
        let image = Arc::new(Image {
            root,
            entrypoint: strings(&config["Entrypoint"]),
            cmd: strings(&config["Cmd"]),
            env: strings(&config["Env"])
                .into_iter()
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.to_string()))
                })
                .collect(),
            user,
        });
        tracing::info!(reference, ?image, "simulator unpacked an image");
        images.insert(reference.to_string(), image.clone());
        Ok(image)
    }

    /// Writes a volume's files into `dir`.
    async fn fill(
        &self,
        ns: &str,
        pod_name: &str,
        pod: &Value,
        volume: &Value,
        dir: &Path,
    ) -> Result<(), String> {
        let name = volume["name"].as_str().unwrap_or_default();
        let write = |path: &str, bytes: &[u8]| -> Result<(), String> {
            let file = dir.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            std::fs::write(&file, bytes).map_err(|e| format!("{}: {e}", file.display()))?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
                .map_err(|e| format!("{}: {e}", file.display()))
        };
        if volume.get("emptyDir").is_some() {
            Ok(())
        } else if let Some(cm) = volume.get("configMap") {
            self.store_files(Store::ConfigMap, ns, cm, &write).await
        } else if let Some(secret) = volume.get("secret") {
            self.store_files(Store::Secret, ns, secret, &write).await
        } else if let Some(projected) = volume.get("projected") {
            for source in projected["sources"].as_array().into_iter().flatten() {
                if let Some(token) = source.get("serviceAccountToken") {
                    let account = pod["spec"]["serviceAccountName"]
                        .as_str()
                        .unwrap_or("default");
                    let token_value = self.token(ns, account, token).await?;
                    write(
                        token["path"].as_str().unwrap_or("token"),
                        token_value.as_bytes(),
                    )?;
                } else if let Some(cm) = source.get("configMap") {
                    self.store_files(Store::ConfigMap, ns, cm, &write).await?;
                } else if let Some(secret) = source.get("secret") {
                    self.store_files(Store::Secret, ns, secret, &write).await?;
                } else if let Some(downward) = source.get("downwardAPI") {
                    for item in downward["items"].as_array().into_iter().flatten() {
                        let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or_default();
                        let value = field_value(pod, field, "").ok_or_else(|| {
                            format!("volume {name}: downwardAPI field {field} is not simulated")
                        })?;
                        write(item["path"].as_str().unwrap_or_default(), value.as_bytes())?;
                    }
                } else {
                    return Err(format!(
                        "volume {name}: a projected source the simulator does not fill: {source}"
                    ));
                }
            }
            Ok(())
        } else {
            Err(format!(
                "volume {name} of Pod {ns}/{pod_name}: a kind the simulator does not fill"
            ))
        }
    }

    /// The keys of ConfigMap or Secret `name` in `ns` and their bytes (a ConfigMap's `data`
    /// and `binaryData` together).
    async fn keys(
        &self,
        store: Store,
        ns: &str,
        name: &str,
    ) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let what = store.kind();
        let failed = |e: kube::Error| format!("{what} {ns}/{name}: {e}");
        Ok(match store {
            Store::ConfigMap => {
                let cm = Api::<ConfigMap>::namespaced(self.client.clone(), ns)
                    .get(name)
                    .await
                    .map_err(failed)?;
                let text = cm.data.unwrap_or_default().into_iter();
                let binary = cm.binary_data.unwrap_or_default().into_iter();
                text.map(|(k, v)| (k, v.into_bytes()))
                    .chain(binary.map(|(k, v)| (k, v.0)))
                    .collect()
            }
            Store::Secret => Api::<Secret>::namespaced(self.client.clone(), ns)
                .get(name)
                .await
                .map_err(failed)?
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        })
    }

    /// Writes the items of a `configMap` or `secret` volume source.
    async fn store_files(
        &self,
        store: Store,
        ns: &str,
        source: &Value,
        write: &impl Fn(&str, &[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        // A Secret volume names it `secretName`, a projected Secret source `name`.
        let name = source["secretName"]
            .as_str()
            .or_else(|| source["name"].as_str())
            .unwrap_or_default();
        write_items(source, &self.keys(store, ns, name).await?, write)
    }

    /// A token of `account`, as the kubelet asks for the projected volume.
    async fn token(&self, ns: &str, account: &str, source: &Value) -> Result<String, String> {
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: source["audience"]
                    .as_str()
                    .map(|a| vec![a.to_string()])
                    .unwrap_or_default(),
                expiration_seconds: source["expirationSeconds"].as_i64(),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        Api::<ServiceAccount>::namespaced(self.client.clone(), ns)
            .create_token_request(account, &PostParams::default(), &request)
            .await
            .map_err(|e| format!("a token for ServiceAccount {ns}/{account}: {e}"))?
            .status
            .map(|s| s.token)
            .ok_or_else(|| format!("a token for ServiceAccount {ns}/{account}: no status"))
    }

    async fn env_value(
        &self,
        ns: &str,
        pod: &Value,
        ip: &str,
        var: &Value,
    ) -> Result<String, String> {
        let key = var["name"].as_str().unwrap_or_default();
        if let Some(value) = var["value"].as_str() {
            return Ok(value.to_string());
        }
        let from = &var["valueFrom"];
        if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
            return field_value(pod, field, ip)
                .ok_or_else(|| format!("env {key}: fieldRef {field} is not simulated"));
        }
        for (field, store) in [
            ("configMapKeyRef", Store::ConfigMap),
            ("secretKeyRef", Store::Secret),
        ] {
            let Some(r) = from.get(field) else { continue };
            let (name, k) = (
                r["name"].as_str().unwrap_or_default(),
                r["key"].as_str().unwrap_or_default(),
            );
            let mut keys = self
                .keys(store, ns, name)
                .await
                .map_err(|e| format!("env {key}: {e}"))?;
            return keys
                .remove(k)
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .ok_or_else(|| format!("env {key}: {} {ns}/{name} has no key {k}", store.kind()));
        }
        if var.get("valueFrom").is_none() {
            return Ok(String::new());
        }
        Err(format!(
            "env {key}: a valueFrom the simulator does not resolve"
        ))
    }

    /// Adds a line of the simulator's own to the Pod's log (`<namespace>_<pod>.log`).
    fn note(&self, ns: &str, name: &str, line: &str) {
        use std::io::Write as _;
        let path = self.options.dir.join(format!("{ns}_{name}.log"));
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "simulator: {line}");
        }
    }

    /// Writes a Pod's status (a merge patch, awaited, so that writes land in order).
    async fn write_status(&self, pod: &Value, status: &Value) {
        let (ns, name) = ns_name(pod);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let params = PatchParams {
            field_manager: Some("devcluster-simulator".into()),
            ..PatchParams::default()
        };
        for attempt in 0..5 {
            match api
                .patch_status(&name, &params, &Patch::Merge(status))
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                Err(e) => {
                    tracing::debug!(namespace = %ns, pod = %name, error = %e, attempt, "simulated Pod status");
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                }
            }
        }
    }
}

/// A container ready to start, and what it holds (its namespace, the forwarders).
struct Container {
    netns: Netns,
    _forwards: Forwards,
    script: String,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    readiness: Option<Probe>,
    liveness: Option<Probe>,
    grace: Duration,
}

impl Container {
    /// Starts the container's process: in the Pod's network namespace, a mount namespace of
    /// its own, as the Pod's user, with SIGKILL when the thread that started it ends (a tokio
    /// worker: the process does not outlive the runtime, however the test ends).
    fn spawn(&self) -> Result<Process, String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut child = std::process::Command::new(tool("nsenter"))
            .arg(format!("--net={}", self.netns.path()))
            .arg(tool("unshare"))
            .args(["--mount", "--propagation", "private"])
            .arg(tool("sh"))
            .arg("-c")
            .arg(&self.script)
            .arg("sh")
            .args(&self.argv)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.argv[0]))?;
        let pid = child.id();
        let (tx, exited) = tokio::sync::oneshot::channel();
        let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reaped = gone.clone();
        std::thread::spawn(move || {
            let code = child.wait().map(|s| s.code().unwrap_or(137)).unwrap_or(-1);
            reaped.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = tx.send(code);
        });
        Ok(Process { pid, gone, exited })
    }

    /// Runs the container, restarting it when it exits or its liveness probe fails, and keeps
    /// the Pod's status; returns once the Pod is deleted and the process is gone.
    async fn supervise(
        &self,
        runner: &Runner,
        pod: &Value,
        ip: &str,
        started: &str,
        stop: &Notify,
    ) {
        let (ns, name) = ns_name(pod);
        let mut restarts = 0u32;
        let mut last: Option<Value> = None;
        loop {
            let mut process = match self.spawn() {
                Ok(child) => child,
                Err(message) => {
                    tracing::warn!(namespace = %ns, pod = %name, %message, "simulated container cannot start");
                    runner.note(
                        &ns,
                        &name,
                        &format!("ERROR the container cannot start: {message}"),
                    );
                    let waiting = json!({"waiting": {"reason": "StartError", "message": message}});
                    runner
                        .write_status(
                            pod,
                            &status(pod, ip, started, false, restarts, waiting, last.clone()),
                        )
                        .await;
                    stop.notified().await;
                    return;
                }
            };
            let since = crate::api::now();
            tracing::info!(namespace = %ns, pod = %name, pid = process.pid, restarts, "simulated container started");
            let running = json!({"running": {"startedAt": since}});
            runner
                .write_status(
                    pod,
                    &status(
                        pod,
                        ip,
                        started,
                        false,
                        restarts,
                        running.clone(),
                        last.clone(),
                    ),
                )
                .await;
            let began = Instant::now();
            for probe in self.readiness.iter().chain(&self.liveness) {
                probe.reset();
            }
            let mut ready = false;
            let (mut ready_ok, mut ready_fail, mut live_fail) = (0u32, 0u32, 0u32);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let outcome = loop {
                tokio::select! {
                    () = stop.notified() => break None,
                    code = &mut process.exited => break Some(code.unwrap_or(-1)),
                    _ = tick.tick() => {}
                }
                let elapsed = began.elapsed();
                if let Some(probe) = &self.liveness
                    && probe.due(elapsed)
                {
                    if probe.check(&self.netns).await {
                        live_fail = 0;
                    } else {
                        live_fail += 1;
                        if live_fail >= probe.failure_threshold {
                            tracing::info!(namespace = %ns, pod = %name, "liveness probe failed; restarting");
                            runner.note(
                                &ns,
                                &name,
                                "WARN the liveness probe failed: restarting the container",
                            );
                            process.terminate(self.grace).await;
                            break Some(137);
                        }
                    }
                }
                let now_ready = match &self.readiness {
                    None => true,
                    Some(probe) if probe.due(elapsed) => {
                        if probe.check(&self.netns).await {
                            ready_fail = 0;
                            ready_ok += 1;
                            ready || ready_ok >= probe.success_threshold
                        } else {
                            ready_ok = 0;
                            ready_fail += 1;
                            ready && ready_fail < probe.failure_threshold
                        }
                    }
                    Some(_) => ready,
                };
                if now_ready != ready {
                    ready = now_ready;
                    runner
                        .write_status(
                            pod,
                            &status(
                                pod,
                                ip,
                                started,
                                ready,
                                restarts,
                                running.clone(),
                                last.clone(),
                            ),
                        )
                        .await;
                }
            };
            match outcome {
                None => {
                    process.terminate(self.grace).await;
                    return;
                }
                Some(code) => {
                    tracing::info!(namespace = %ns, pod = %name, code, "simulated container exited; restarting");
                    runner.note(
                        &ns,
                        &name,
                        &format!("WARN the container exited with {code}: restarting it"),
                    );
                    let finished = crate::api::now();
                    last = Some(
                        json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "startedAt": since, "finishedAt": finished}}),
                    );
                    restarts += 1;
                    let waiting = json!({"waiting": {"reason": "CrashLoopBackOff"}});
                    runner
                        .write_status(
                            pod,
                            &status(pod, ip, started, false, restarts, waiting, last.clone()),
                        )
                        .await;
                    let backoff = Duration::from_secs(u64::from(restarts.min(5)) * 2);
                    tokio::select! {
                        () = stop.notified() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                }
            }
        }
    }
}

/// A container's process, reaped by a thread of its own.
struct Process {
    pid: u32,
    /// Set once reaped: its pid may be another process's then.
    gone: Arc<std::sync::atomic::AtomicBool>,
    /// Its exit code.
    exited: tokio::sync::oneshot::Receiver<i32>,
}

impl Process {
    fn signal(&self, signal: i32) {
        if !self.gone.load(std::sync::atomic::Ordering::SeqCst) {
            #[allow(unsafe_code)]
            // SAFETY: kill(2) of our own child, not yet reaped (`gone` is set after wait).
            unsafe {
                libc::kill(self.pid as i32, signal);
            }
        }
    }

    /// SIGTERM, then SIGKILL after `grace`; returns once it is gone.
    async fn terminate(&mut self, grace: Duration) {
        self.signal(libc::SIGTERM);
        if tokio::time::timeout(grace, &mut self.exited).await.is_err() {
            self.signal(libc::SIGKILL);
            let _ = (&mut self.exited).await;
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// Runs `cmd` to its end off the async workers; its output, or an error naming it.
/// Where a volume or an environment variable takes keys from.
#[derive(Clone, Copy)]
enum Store {
    ConfigMap,
    Secret,
}

impl Store {
    fn kind(self) -> &'static str {
        match self {
            Store::ConfigMap => "ConfigMap",
            Store::Secret => "Secret",
        }
    }
}

async fn output(mut cmd: std::process::Command) -> Result<std::process::Output, String> {
    let name = format!("{:?}", cmd.get_program());
    tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(|e| format!("{name}: {e}"))?
        .map_err(|e| format!("{name}: {e}"))
}

/// A Pod's status: Running, Ready or not, its one container in `state`.
fn status(
    pod: &Value,
    ip: &str,
    started: &str,
    ready: bool,
    restarts: u32,
    state: Value,
    last: Option<Value>,
) -> Value {
    let container = &pod["spec"]["containers"][0];
    let now = crate::api::now();
    let flag = if ready { "True" } else { "False" };
    let running = state.get("running").is_some();
    json!({"status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "hostIP": "10.0.0.1",
        "startTime": started,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
            {"type": "Initialized", "status": "True", "lastTransitionTime": started},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
            {"type": "Ready", "status": flag, "lastTransitionTime": now}],
        "containerStatuses": [{
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": ready,
            "started": running,
            "restartCount": restarts,
            "state": state,
            "lastState": last.unwrap_or_else(|| json!({})),
        }],
    }})
}

/// A field a `fieldRef` names.
fn field_value(pod: &Value, field: &str, ip: &str) -> Option<String> {
    let meta = &pod["metadata"];
    Some(match field {
        "metadata.name" => meta["name"].as_str()?.to_string(),
        "metadata.namespace" => meta["namespace"].as_str()?.to_string(),
        "metadata.uid" => meta["uid"].as_str()?.to_string(),
        "spec.serviceAccountName" => pod["spec"]["serviceAccountName"].as_str()?.to_string(),
        "spec.nodeName" => pod["spec"]["nodeName"].as_str()?.to_string(),
        "status.podIP" => ip.to_string(),
        _ => return None,
    })
}

/// A ConfigMap's or Secret's files: every key, or the `items` asked for.
fn write_items(
    source: &Value,
    files: &BTreeMap<String, Vec<u8>>,
    write: &impl Fn(&str, &[u8]) -> Result<(), String>,
) -> Result<(), String> {
    match source["items"].as_array() {
        Some(items) => {
            for item in items {
                let key = item["key"].as_str().unwrap_or_default();
                let bytes = files
                    .get(key)
                    .ok_or_else(|| format!("no key {key} for a volume item"))?;
                write(item["path"].as_str().unwrap_or(key), bytes)?;
            }
            Ok(())
        }
        None => files.iter().try_for_each(|(k, v)| write(k, v)),
    }
}

/// Owns a volume's directory tree (the emptyDir's user, an fsGroup), and lets others read it.
fn own(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), String> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        chown(&path, Some(uid), Some(gid)).map_err(|e| format!("{}: {e}", path.display()))?;
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))? {
                stack.push(entry.map_err(|e| e.to_string())?.path());
            }
        }
    }
    Ok(())
}

/// A program on this process's PATH, by its full path (the Pods' environment has its own).
fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// `s` quoted for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A network namespace of its own, alive while this handle (or a process in it) is.
struct Netns {
    file: std::fs::File,
}

impl Netns {
    fn new() -> Result<Self, String> {
        std::thread::spawn(|| {
            #[allow(unsafe_code)]
            // SAFETY: unshare(2) on this short-lived thread only; it changes this thread's
            // network namespace, and the thread ends right after.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(format!(
                    "a network namespace (root needed): {}",
                    std::io::Error::last_os_error()
                ));
            }
            std::fs::File::open("/proc/thread-self/ns/net")
                .map(|file| Netns { file })
                .map_err(|e| format!("/proc/thread-self/ns/net: {e}"))
        })
        .join()
        .map_err(|_| "the namespace thread panicked".to_string())?
    }

    /// A path to the namespace that other processes (nsenter) can open.
    fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.file.as_raw_fd())
    }

    /// Runs `f` on a thread inside the namespace (sockets it makes stay there).
    fn within<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let file = self.file.try_clone().map_err(|e| e.to_string())?;
        std::thread::spawn(move || {
            #[allow(unsafe_code)]
            // SAFETY: setns(2) with an open namespace descriptor, on this short-lived thread
            // only; the thread ends when `f` returns.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
            f()
        })
        .join()
        .map_err(|_| "the namespace thread panicked".to_string())?
        .map_err(|e| e.to_string())
    }
}

/// The forwarders of a Pod's namespace: stopped with it.
struct Forwards(Vec<JoinHandle<()>>);

impl Drop for Forwards {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Accepts connections at `inside` in `netns` and joins each to `outside` on this machine.
fn forward(
    netns: &Netns,
    inside: SocketAddr,
    outside: SocketAddr,
) -> Result<JoinHandle<()>, String> {
    let listener = netns
        .within(move || {
            let listener = std::net::TcpListener::bind(inside)?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .map_err(|e| format!("listening at {inside} in the Pod's namespace: {e}"))?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
    Ok(tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((mut inbound, _)) = listener.accept().await {
            conns.spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(outside).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
            while conns.try_join_next().is_some() {}
        }
    }))
}

/// A readiness or liveness probe.
struct Probe {
    /// `Some(path)` for httpGet, `None` for tcpSocket.
    path: Option<String>,
    port: u16,
    initial_delay: Duration,
    period: Duration,
    failure_threshold: u32,
    success_threshold: u32,
    timeout: Duration,
    next: Mutex<Duration>,
}

impl Probe {
    fn of(probe: &Value, ports: &HashMap<String, u16>) -> Option<Probe> {
        let (path, port) = if let Some(get) = probe.get("httpGet") {
            (
                Some(get["path"].as_str().unwrap_or("/").to_string()),
                &get["port"],
            )
        } else if let Some(tcp) = probe.get("tcpSocket") {
            (None, &tcp["port"])
        } else {
            return None;
        };
        let port = port
            .as_u64()
            .map(|p| p as u16)
            .or_else(|| ports.get(port.as_str()?).copied())?;
        let secs = |field: &str, default: u64| {
            Duration::from_secs(probe[field].as_u64().unwrap_or(default))
        };
        let initial_delay = secs("initialDelaySeconds", 0);
        Some(Probe {
            path,
            port,
            initial_delay,
            period: secs("periodSeconds", 10).max(Duration::from_secs(1)),
            failure_threshold: probe["failureThreshold"].as_u64().unwrap_or(3) as u32,
            success_threshold: probe["successThreshold"].as_u64().unwrap_or(1) as u32,
            timeout: secs("timeoutSeconds", 1),
            next: Mutex::new(initial_delay),
        })
    }

    /// Starts over, for a container that (re)started.
    fn reset(&self) {
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = self.initial_delay;
    }

    /// Whether the probe is due `elapsed` after the container started (and schedules the next).
    fn due(&self, elapsed: Duration) -> bool {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        if elapsed < *next {
            return false;
        }
        *next = elapsed + self.period;
        true
    }

    /// One probe through the Pod's namespace: a 2xx/3xx answer, or a connection.
    async fn check(&self, netns: &Netns) -> bool {
        let (port, path, timeout) = (self.port, self.path.clone(), self.timeout);
        let Ok(file) = netns.file.try_clone() else {
            return false;
        };
        let probe = Netns { file };
        tokio::task::spawn_blocking(move || {
            probe
                .within(move || {
                    use std::io::{Read as _, Write as _};
                    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
                    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
                    let Some(path) = path else {
                        return Ok(true);
                    };
                    stream.set_read_timeout(Some(timeout))?;
                    stream.set_write_timeout(Some(timeout))?;
                    write!(
                        stream,
                        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/simulated\r\nConnection: close\r\n\r\n"
                    )?;
                    let mut head = [0u8; 12];
                    stream.read_exact(&mut head)?;
                    let code: u16 = std::str::from_utf8(&head[9..12])
                        .ok()
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0);
                    Ok((200..400).contains(&code))
                })
                .unwrap_or(false)
        })
        .await
        .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_due_after_its_initial_delay_then_every_period() {
        let probe = Probe::of(
            &json!({"httpGet": {"path": "/readyz", "port": "admin"}, "initialDelaySeconds": 2, "periodSeconds": 5}),
            &HashMap::from([("admin".to_string(), 8080)]),
        )
        .expect("a probe");
        assert_eq!(probe.port, 8080);
        assert!(!probe.due(Duration::from_secs(1)));
        assert!(probe.due(Duration::from_secs(2)));
        assert!(!probe.due(Duration::from_secs(6)));
        assert!(probe.due(Duration::from_secs(7)));
    }

    #[test]
    fn quoting_survives_a_quote() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
    }
}
