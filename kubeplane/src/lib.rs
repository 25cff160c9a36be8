//! A real Kubernetes control plane for tests, like controller-runtime's envtest but with
//! controllers: etcd, kube-apiserver and kube-controller-manager, built from source by
//! `tools/kube/build.sh` (pinned versions, cached outside the repository), started on loopback.
//!
//! # What runs
//! - **etcd** on two free loopback ports, its data in a temporary directory (no fsync).
//! - **kube-apiserver** with TLS (a CA and a serving certificate made with `openssl` at each
//!   start), RBAC authorization, the default admission plugins plus `PodSecurity` and
//!   `OwnerReferencesPermissionEnforcement`, service-account token signing (a key pair made at
//!   start), and an admin user (`windlass-admin`, group `system:masters`) by a static token.
//! - **kube-controller-manager** with the controllers in [`CONTROLLERS`]: garbage collector,
//!   namespace, service accounts and their tokens, the root CA publisher, Deployment,
//!   ReplicaSet, StatefulSet, Job, CronJob, TTL-after-finished, claim protection, disruption
//!   budgets and EndpointSlices. No scheduler and no kubelet: Pods stay `Pending`
//!   unless something else (the devcluster's workload simulator) plays those parts.
//!
//! # Guarantees
//! - [`ControlPlane::start`] returns once `/readyz` answers `ok` and the controller manager has
//!   made the `default` ServiceAccount of namespace `default` (its controllers run).
//! - Nothing outlives the test process: every process is started with `PR_SET_PDEATHSIG`
//!   (SIGKILL) from a spawner thread that lives as long as the process, so a test that panics,
//!   aborts or is killed leaves no etcd or kube process behind. A dropped [`ControlPlane`] kills
//!   its processes at once and removes its directory; the shared one's directory is removed by
//!   the next start after its process is gone.
//! - A failure to start names the process and ends with the tail of its log.
//!
//! # Assumptions
//! Linux (for `PR_SET_PDEATHSIG`), `openssl` on the PATH, and either `WINDLASS_KUBE_BIN` naming
//! a directory with the three binaries or Go available for `tools/kube/build.sh` (which takes
//! seconds once its cache is filled, about ten minutes cold).

use std::{
    io,
    net::TcpListener,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Mutex, OnceLock, mpsc},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use serde_json::json;

/// The controllers kube-controller-manager runs.
pub const CONTROLLERS: &[&str] = &[
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    // Takes the `kubernetes.io/pvc-protection` finalizer (which admission puts on every claim)
    // off a deleted claim once no Pod uses it: without it no claim is ever deleted.
    "persistentvolumeclaim-protection-controller",
    "disruption-controller",
    // Endpoints of Services from the Pods they select (bound to a Node that exists: the
    // workload simulator registers one and binds Pods to it).
    "endpointslice-controller",
];

/// The admin user's name (group `system:masters`).
pub const ADMIN_USER: &str = "windlass-admin";

/// The directory holding `etcd`, `kube-apiserver` and `kube-controller-manager`:
/// `WINDLASS_KUBE_BIN` if set, else what `tools/kube/build.sh` prints (it builds them on first
/// use and answers from its cache after that).
///
/// # Errors
/// When the script fails or the directory lacks a binary.
pub fn bin_dir() -> Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| find_bin_dir().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn find_bin_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("WINDLASS_KUBE_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/kube/build.sh");
            let out = Command::new("bash")
                .arg(&script)
                .stderr(Stdio::inherit())
                .output()
                .with_context(|| format!("running {}", script.display()))?;
            if !out.status.success() {
                bail!(
                    "{} failed ({}): the control plane could not be built",
                    script.display(),
                    out.status
                );
            }
            let stdout = String::from_utf8_lossy(&out.stdout);
            PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
        }
    };
    for bin in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        if !dir.join(bin).is_file() {
            bail!("{} has no {bin}", dir.display());
        }
    }
    Ok(dir)
}

/// How a control plane is started; [`ControlPlane::start`] takes the defaults.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// kube-apiserver stores every object in etcd as JSON (`--storage-media-type`) rather than
    /// protobuf, so that a test reading etcd's own watch ([`ControlPlane::etcd_url`]) can decode
    /// what it sees. What the API serves is the same either way.
    pub storage_json: bool,
}

/// A running control plane. Dropping it kills its processes and removes its files.
#[derive(Debug)]
pub struct ControlPlane {
    work: tempfile::TempDir,
    server: String,
    etcd_url: String,
    admin_token: String,
    ca_pem: String,
    children: Mutex<Vec<Process>>,
}

/// One process of the control plane, with what it was started with (to start it again).
#[derive(Debug)]
struct Process {
    name: &'static str,
    child: Child,
    bin: PathBuf,
    args: Vec<String>,
}

impl ControlPlane {
    /// One control plane shared by every test of the process (started on first use; the
    /// processes die with the test process). Tests keep to their own namespaces and names.
    ///
    /// # Panics
    /// When it cannot start: every test that needs it would fail the same way.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| {
            // Started on a thread of its own with its own runtime: the caller may be inside a
            // test's runtime, and the processes must not be tied to a test's thread.
            std::thread::spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime");
                rt.block_on(ControlPlane::start())
            })
            .join()
            .expect("the start thread")
            .unwrap_or_else(|e| panic!("starting the control plane: {e:#}"))
        })
    }

    /// Starts a control plane of its own (a test that restarts or breaks it needs one).
    ///
    /// # Errors
    /// When a process does not come up; the error ends with its log's tail.
    pub async fn start() -> Result<ControlPlane> {
        Self::start_with(Options::default()).await
    }

    /// [`ControlPlane::start`] with options.
    ///
    /// # Errors
    /// When a process does not come up; the error ends with its log's tail.
    pub async fn start_with(options: Options) -> Result<ControlPlane> {
        let bin = bin_dir()?;
        let mut last = None;
        // Free ports are picked before they are bound: another process may take one in
        // between, so a failed start is tried again.
        for _ in 0..3 {
            match Self::try_start(&bin, &options).await {
                Ok(plane) => return Ok(plane),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no attempt made")))
    }

    async fn try_start(bin: &Path, options: &Options) -> Result<ControlPlane> {
        remove_stale_dirs();
        let work = tempfile::Builder::new()
            .prefix(&format!("windlass-kube-{}-", std::process::id()))
            .tempdir()?;
        let dir = work.path().to_path_buf();
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki)?;
        std::fs::create_dir_all(dir.join("logs"))?;
        make_pki(&pki)?;
        let admin_token = random_token()?;
        let kcm_token = random_token()?;
        std::fs::write(
            pki.join("tokens.csv"),
            format!(
                "{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
                 {kcm_token},system:kube-controller-manager,system:kube-controller-manager\n"
            ),
        )?;
        let ca_pem = std::fs::read_to_string(pki.join("ca.crt"))?;
        let [etcd_port, peer_port, api_port, kcm_port] = free_ports()?;
        let server = format!("https://127.0.0.1:{api_port}");
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let plane = ControlPlane {
            work,
            server,
            etcd_url: etcd_url.clone(),
            admin_token,
            ca_pem,
            children: Mutex::new(Vec::new()),
        };
        plane.write_kubeconfig(&plane.kubeconfig(), ADMIN_USER, &plane.admin_token)?;
        let kcm_kubeconfig = dir.join("kube-controller-manager.kubeconfig");
        plane.write_kubeconfig(
            &kcm_kubeconfig,
            "system:kube-controller-manager",
            &kcm_token,
        )?;

        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let p = |name: &str| pki.join(name).display().to_string();
        plane.spawn(
            "etcd",
            bin,
            &[
                "--name=windlass".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=windlass={peer_url}"),
                "--initial-cluster-state=new".into(),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
        )?;
        plane.spawn(
            "kube-apiserver",
            bin,
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                // Else it advertises the host's default-route address.
                "--advertise-address=127.0.0.1".into(),
                // Else it keeps trying to publish 127.0.0.1 as the kubernetes Service's
                // endpoints, which is refused.
                "--endpoint-reconciler-type=none".into(),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                // Room for fleet-scale tests: each SampleDB has a ClusterIP Service, and a /24 was
                // full after 253 of them (every later create failed with "range is full").
                "--service-cluster-ip-range=10.0.0.0/16".into(),
                format!("--token-auth-file={}", p("tokens.csv")),
                format!("--client-ca-file={}", p("ca.crt")),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction,PodSecurity,OwnerReferencesPermissionEnforcement"
                    .into(),
                // Else privileged Pods are refused before Pod Security looks at them.
                "--allow-privileged=true".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                format!("--service-account-key-file={}", p("sa.pub")),
            ]
            .into_iter()
            .chain(
                options
                    .storage_json
                    .then(|| "--storage-media-type=application/json".to_string()),
            )
            .collect::<Vec<_>>(),
        )?;
        let client = plane.client().await?;
        plane.wait_ready(Duration::from_secs(120)).await?;
        let kcm = format!("--kubeconfig={}", kcm_kubeconfig.display());
        plane.spawn(
            "kube-controller-manager",
            bin,
            &[
                kcm.clone(),
                kcm.replace("--kubeconfig", "--authentication-kubeconfig"),
                kcm.replace("--kubeconfig", "--authorization-kubeconfig"),
                // Else it logs every few seconds that it cannot read a ConfigMap it needs only
                // for client certificates.
                "--authentication-skip-lookup".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={kcm_port}"),
                "--leader-elect=false".into(),
                format!("--controllers={}", CONTROLLERS.join(",")),
                "--use-service-account-credentials=true".into(),
                format!("--service-account-private-key-file={}", p("sa.key")),
                format!("--root-ca-file={}", p("ca.crt")),
            ],
        )?;
        let accounts: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(client, "default");
        plane
            .wait(
                "kube-controller-manager (the default ServiceAccount)",
                Duration::from_secs(60),
                || {
                    let accounts = accounts.clone();
                    async move { accounts.get_opt("default").await.ok()?.map(|_| ()) }
                },
            )
            .await?;
        Ok(plane)
    }

    /// etcd's client URL (`http://127.0.0.1:<port>`, plain HTTP on loopback): its v3 API and
    /// the JSON gateway to it (`/v3/watch`, `/v3/kv/range`).
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The API server's URL (`https://127.0.0.1:<port>`).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The cluster CA's certificate (PEM), which the serving certificate chains to.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The admin user's bearer token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The admin kubeconfig (also what `kubectl --kubeconfig` and `helm --kubeconfig` take).
    pub fn kubeconfig(&self) -> PathBuf {
        self.work.path().join("admin.kubeconfig")
    }

    /// Writes a kubeconfig for `user` with bearer `token` (a ServiceAccount's, from a
    /// TokenRequest) to `path`, trusting the cluster's CA.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path, user: &str, token: &str) -> Result<()> {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        // JSON is YAML: kube-rs, kubectl and helm read it.
        let config = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "windlass", "cluster": {"server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "windlass", "context": {"cluster": "windlass", "user": user}}],
            "current-context": "windlass",
        });
        std::fs::write(path, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// A client of the admin user.
    ///
    /// # Errors
    /// When the kubeconfig cannot be read.
    pub async fn client(&self) -> Result<kube::Client> {
        client_for(&self.kubeconfig()).await
    }

    /// The admin user's client configuration (server, CA, token), to make clients from.
    ///
    /// # Errors
    /// When the kubeconfig cannot be read.
    pub async fn config(&self) -> Result<kube::Config> {
        config_for(&self.kubeconfig()).await
    }

    /// The last `lines` lines of a process's log (`etcd`, `kube-apiserver`,
    /// `kube-controller-manager`).
    pub fn log_tail(&self, process: &str, lines: usize) -> String {
        let text =
            std::fs::read_to_string(self.work.path().join("logs").join(format!("{process}.log")))
                .unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Kills every process at once (the tests need no graceful shutdown: the data dies with
    /// them).
    pub fn stop(&self) {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        for p in children.iter_mut().rev() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        children.clear();
    }

    /// Kills one process (`etcd`, `kube-apiserver` or `kube-controller-manager`) with SIGKILL,
    /// waits `down`, starts it again as it was started (etcd on its data directory, so every
    /// object survives) and waits until the API server is ready again (`/readyz`, which checks
    /// etcd too).
    ///
    /// # Errors
    /// When there is no such process, or it does not come back within two minutes.
    pub async fn restart(&self, process: &str, down: Duration) -> Result<()> {
        let (name, bin, args) = {
            let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
            let i = children
                .iter()
                .position(|p| p.name == process)
                .with_context(|| format!("no {process} runs"))?;
            let mut p = children.remove(i);
            let _ = p.child.kill();
            let _ = p.child.wait();
            (p.name, p.bin, p.args)
        };
        tokio::time::sleep(down).await;
        self.spawn(name, &bin, &args)?;
        self.wait_ready(Duration::from_secs(120)).await
    }

    /// The process id of `process`, while it runs.
    pub fn pid(&self, process: &str) -> Option<u32> {
        let children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        children
            .iter()
            .find(|p| p.name == process)
            .map(|p| p.child.id())
    }

    /// Waits until kube-apiserver answers `/readyz` with `ok`.
    async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let client = self.client().await?;
        self.wait("kube-apiserver /readyz", timeout, || {
            let client = client.clone();
            async move {
                let req = http::Request::get("/readyz").body(Vec::new()).ok()?;
                (client.request_text(req).await.ok()?.trim() == "ok").then_some(())
            }
        })
        .await
    }

    fn spawn(&self, name: &'static str, bin: &Path, args: &[String]) -> Result<()> {
        // Appended to: a process started again keeps its earlier log.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work.path().join("logs").join(format!("{name}.log")))?;
        let mut cmd = Command::new(bin.join(name));
        cmd.args(args)
            .current_dir(self.work.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = spawn_tied(cmd).with_context(|| format!("starting {name}"))?;
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Process {
                name,
                child,
                bin: bin.to_path_buf(),
                args: args.to_vec(),
            });
        Ok(())
    }

    /// Polls `ready` until it answers, failing early when a process exited.
    async fn wait<F, Fut>(&self, what: &str, timeout: Duration, ready: F) -> Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Option<()>>,
    {
        let start = Instant::now();
        loop {
            if ready().await.is_some() {
                return Ok(());
            }
            if let Some(dead) = self.exited() {
                bail!(
                    "{dead} exited while waiting for {what}; its log ends:\n{}",
                    self.log_tail(dead, 30)
                );
            }
            if start.elapsed() > timeout {
                bail!(
                    "{what} not ready after {timeout:?}; the kube-apiserver log ends:\n{}",
                    self.log_tail("kube-apiserver", 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The first process that has exited, if any.
    fn exited(&self) -> Option<&'static str> {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        children
            .iter_mut()
            .find_map(|p| p.child.try_wait().ok().flatten().map(|_| p.name))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes the directories of control planes whose test process is gone: the shared one is
/// never dropped (statics are not), so its process cannot remove it.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("windlass-kube-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A client from a kubeconfig file, with rustls' ring provider installed (as the host does).
///
/// # Errors
/// When the kubeconfig cannot be read or is not valid.
pub async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    Ok(kube::Client::try_from(config_for(kubeconfig).await?)?)
}

/// The client configuration a kubeconfig file gives, with rustls' ring provider installed.
///
/// # Errors
/// When the kubeconfig cannot be read or is not valid.
pub async fn config_for(kubeconfig: &Path) -> Result<kube::Config> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    Ok(kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?)
}

/// Starts `cmd` from a thread that lives as long as the process, with `PR_SET_PDEATHSIG`: the
/// child gets SIGKILL when that thread ends, that is when the process does, however it ends.
/// (The signal follows the thread that forked, not the process: a test's own thread would
/// take the shared control plane down with that test.)
fn spawn_tied(cmd: Command) -> io::Result<Child> {
    type Job = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("kubeplane-spawner".into())
            .spawn(move || {
                // The sender is in a static: recv never fails and the thread never ends.
                while let Ok((mut cmd, reply)) = rx.recv() {
                    // SAFETY: runs in the forked child before exec; prctl is async-signal-safe
                    // and nothing here allocates or takes a lock.
                    #[allow(unsafe_code)]
                    unsafe {
                        cmd.pre_exec(|| {
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                                return Err(io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("the spawner thread");
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}

/// Four free loopback ports (bound, then released; see [`ControlPlane::start`]).
fn free_ports() -> Result<[u16; 4]> {
    let listeners: Vec<TcpListener> = (0..4)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<_>>()?;
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<io::Result<_>>()?;
    Ok([ports[0], ports[1], ports[2], ports[3]])
}

fn random_token() -> Result<String> {
    let out = openssl(&["rand", "-hex", "32"], None)?;
    Ok(String::from_utf8(out)?.trim().to_string())
}

/// The cluster CA (EC P-256), the API server's serving certificate for the names clients use
/// (127.0.0.1, localhost, the kubernetes Service), and the service-account signing key pair
/// (RSA, so tokens are RS256).
fn make_pki(pki: &Path) -> Result<()> {
    let path = |name: &str| pki.join(name).display().to_string();
    let ec = [
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
    ];
    openssl(&[&ec[..], &[&path("ca.key")]].concat(), None)?;
    openssl(
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            &path("ca.key"),
            "-subj",
            "/CN=windlass-test-ca",
            "-days",
            "3650",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-out",
            &path("ca.crt"),
        ],
        None,
    )?;
    openssl(&[&ec[..], &[&path("apiserver.key")]].concat(), None)?;
    openssl(
        &[
            "req",
            "-new",
            "-key",
            &path("apiserver.key"),
            "-subj",
            "/CN=kube-apiserver",
            "-out",
            &path("apiserver.csr"),
        ],
        None,
    )?;
    std::fs::write(
        pki.join("apiserver.ext"),
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n\
         subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n",
    )?;
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &path("apiserver.csr"),
            "-CA",
            &path("ca.crt"),
            "-CAkey",
            &path("ca.key"),
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            &path("apiserver.ext"),
            "-out",
            &path("apiserver.crt"),
        ],
        None,
    )?;
    openssl(
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &path("sa.key"),
        ],
        None,
    )?;
    openssl(
        &[
            "pkey",
            "-in",
            &path("sa.key"),
            "-pubout",
            "-out",
            &path("sa.pub"),
        ],
        None,
    )?;
    Ok(())
}

fn openssl(args: &[&str], dir: Option<&Path>) -> Result<Vec<u8>> {
    let mut cmd = Command::new("openssl");
    cmd.args(args);
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let out = cmd.output().context("running openssl (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "openssl {} failed: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}
