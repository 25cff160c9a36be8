//! kubectl (the real binary) against the devcluster: the scenarios of issue 3. Each test
//! starts its own devcluster, writes a kubeconfig for it and runs kubectl with a private
//! discovery cache, every call bounded by `timeout`.
//!
//! kubectl must be installed: these tests fail (they do not skip) when it is missing. With
//! `WINDLASS_TEST_CLUSTER=real` the same scenarios run against a real kube-apiserver.

mod server;

use serde_json::json;
use server::Server;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kubectl");

struct Kubectl {
    dc: Server,
    dir: tempfile::TempDir,
}

fn kubectl_binary() -> PathBuf {
    let candidates = [
        PathBuf::from("/usr/bin/kubectl"),
        PathBuf::from("/usr/local/bin/kubectl"),
    ];
    candidates.into_iter().find(|p| p.exists()).unwrap_or_else(|| {
        panic!("kubectl is not installed (looked in /usr/bin and /usr/local/bin): the kubectl scenario tests need it")
    })
}

impl Kubectl {
    async fn start() -> Self {
        Self::on(Server::start().await)
    }

    /// With the devcluster's simulator playing the controllers (a real control plane has its
    /// own).
    async fn with_controllers() -> Self {
        Self::on(Server::start_with(windlass_devcluster::Options::default()).await)
    }

    fn on(dc: Server) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        dc.write_kubeconfig(&dir.path().join("kubeconfig"));
        Self { dc, dir }
    }

    /// Runs kubectl with `args` (and `stdin`, `env`), at most `secs` seconds.
    async fn run_with(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        env: &[(&str, &str)],
        secs: u32,
    ) -> Output {
        let bin = kubectl_binary();
        let mut cmd = Command::new("timeout");
        cmd.arg(secs.to_string()).arg(bin).args(args);
        cmd.env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .env("HOME", self.dir.path())
            .current_dir(FIXTURES);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let input = stdin.map(String::from);
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().expect("kubectl runs");
            if let Some(mut sin) = child.stdin.take()
                && let Some(text) = input
            {
                sin.write_all(text.as_bytes()).expect("stdin");
            }
            child.wait_with_output().expect("kubectl output")
        })
        .await
        .expect("join")
    }

    async fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, None, &[], 60).await
    }

    /// Runs and expects success; returns stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "kubectl {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        let out = self.run_with(args, Some(stdin), &[], 60).await;
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn with_gadgets(self) -> Self {
        self.ok(&["apply", "-f", "crd.yaml"]).await;
        self.ok(&["apply", "-f", "gadget.yaml"]).await;
        self
    }

    async fn shutdown(self) {
        self.dc.shutdown().await;
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn editor(dir: &Path, sed: &str) -> String {
    let path = dir.join("editor.sh");
    std::fs::write(&path, format!("#!/bin/sh\nsed -i '{sed}' \"$1\"\n")).expect("editor script");
    let _ = Command::new("chmod").arg("+x").arg(&path).status();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_a_crd_and_a_cr_then_get_shows_printer_columns_and_yaml() {
    let k = Kubectl::start().await.with_gadgets().await;
    let table = k.ok(&["get", "gadgets"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        vec!["NAME", "SIZE", "COLOR", "AGE"],
        "{table}"
    );
    assert_eq!(
        lines[1].split_whitespace().take(3).collect::<Vec<_>>(),
        vec!["g1", "3", "red"],
        "{table}"
    );
    let short = k.ok(&["get", "gd", "g1"]).await;
    assert!(short.contains("g1"), "{short}");
    let yaml = k.ok(&["get", "gadget", "g1", "-o", "yaml"]).await;
    let obj: serde_json::Value = serde_yaml::from_str(&yaml).expect("yaml");
    assert_eq!(obj["kind"], "Gadget");
    assert_eq!(obj["spec"]["size"], 3);
    assert!(obj["metadata"]["uid"].is_string() && obj["metadata"]["resourceVersion"].is_string());
    let again = k.ok(&["apply", "-f", "gadget.yaml"]).await;
    assert!(again.contains("unchanged"), "{again}");
    k.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_an_invalid_cr_shows_the_field_errors() {
    let k = Kubectl::start().await.with_gadgets().await;
    let out = k.run(&["apply", "-f", "invalid-gadget.yaml"]).await;
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("The Gadget \"bad\" is invalid"), "{err}");
    assert!(err.contains("spec.size: Invalid value: 42"), "{err}");
    assert!(
        err.contains("spec.color: Unsupported value: \"purple\""),
        "{err}"
    );
    k.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_each_change_until_its_timeout() {
    let k = Kubectl::start().await.with_gadgets().await;
    let client = k.dc.client();
    // Patches keep coming for a few seconds, so that the streamed rows show up even when
    // kubectl is slow to start on a loaded machine.
    let patcher = tokio::spawn(async move {
        let gvk = kube::core::GroupVersionKind::gvk("test.windlass.dev", "v1", "Gadget");
        let ar = kube::core::ApiResource::from_gvk_with_plural(&gvk, "gadgets");
        let api: kube::Api<kube::core::DynamicObject> =
            kube::Api::namespaced_with(client, "default", &ar);
        for size in 4..=8 {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let p = kube::api::Patch::Merge(json!({"spec": {"size": size}}));
            api.patch("g1", &kube::api::PatchParams::default(), &p)
                .await
                .expect("patch");
        }
    });
    let out = k.run_with(&["get", "gadgets", "-w"], None, &[], 7).await;
    patcher.await.expect("patched");
    assert_eq!(
        out.status.code(),
        Some(124),
        "get -w runs until the bound: {}",
        stderr(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], vec!["NAME", "SIZE", "COLOR", "AGE"], "{text}");
    let g1: Vec<&Vec<&str>> = rows.iter().filter(|r| r.first() == Some(&"g1")).collect();
    assert!(
        g1.len() >= 2,
        "the listed row and at least one streamed change: {text}"
    );
    assert_eq!(
        g1.last().map(|r| r[1]),
        Some("8"),
        "the last change is streamed: {text}"
    );
    k.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_with_a_scripted_editor_changes_a_cr_and_a_configmap() {
    let k = Kubectl::start().await.with_gadgets().await;
    k.ok(&["apply", "-f", "configmap.yaml"]).await;
    let ed = editor(k.dir.path(), "s/size: 3/size: 5/");
    let out = k
        .run_with(&["edit", "gadget", "g1"], None, &[("KUBE_EDITOR", &ed)], 60)
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        k.ok(&["get", "gadget", "g1", "-o", "jsonpath={.spec.size}"])
            .await,
        "5"
    );
    let ed = editor(k.dir.path(), "s/mode: fast/mode: slow/");
    let out = k
        .run_with(
            &["edit", "configmap", "settings"],
            None,
            &[("KUBE_EDITOR", &ed)],
            60,
        )
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        k.ok(&["get", "cm", "settings", "-o", "jsonpath={.data.mode}"])
            .await,
        "slow"
    );
    k.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_with_merge_json_and_strategic_types() {
    let k = Kubectl::start().await.with_gadgets().await;
    k.ok(&[
        "patch",
        "gadget",
        "g1",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"size":4}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "gadget",
        "g1",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/color","value":"blue"}]"#,
    ])
    .await;
    assert_eq!(
        k.ok(&[
            "get",
            "gadget",
            "g1",
            "-o",
            "jsonpath={.spec.size} {.spec.color}"
        ])
        .await,
        "4 blue"
    );
    k.ok(&["apply", "-f", "deployment.yaml"]).await;
    let smp =
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.29"}]}}}}"#;
    k.ok(&[
        "patch",
        "deployment",
        "web",
        "--type",
        "strategic",
        "-p",
        smp,
    ])
    .await;
    let images = k
        .ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[*].image}",
        ])
        .await;
    assert_eq!(images, "nginx:1.29 busybox:1", "containers merge by name");
    let bad = k
        .run(&[
            "patch",
            "gadget",
            "g1",
            "--type",
            "json",
            "-p",
            r#"[{"op":"test","path":"/spec/size","value":99}]"#,
        ])
        .await;
    assert!(!bad.status.success());
    k.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_conflicts_until_forced() {
    let k = Kubectl::start().await;
    let manifest =
        std::fs::read_to_string(Path::new(FIXTURES).join("configmap.yaml")).expect("fixture");
    let first = k
        .ok(&["apply", "--server-side", "-f", "configmap.yaml"])
        .await;
    assert!(first.contains("serverside-applied"), "{first}");
    let changed = manifest.replace("fast", "turbo");
    let out = k
        .run_with(
            &["apply", "--server-side", "--field-manager=other", "-f", "-"],
            Some(&changed),
            &[],
            60,
        )
        .await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("conflict with \"kubectl\""),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains(".data.mode"), "{}", stderr(&out));
    k.ok_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        &changed,
    )
    .await;
    assert_eq!(
        k.ok(&["get", "cm", "settings", "-o", "jsonpath={.data.mode}"])
            .await,
        "turbo"
    );
    let managers = k
        .ok(&[
            "get",
            "cm",
            "settings",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ])
        .await;
    assert!(managers.contains("other"), "{managers}");
    k.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_of_an_object_with_a_finalizer_waits_for_the_finalizer() {
    let k = Kubectl::start().await.with_gadgets().await;
    k.ok(&[
        "patch",
        "gadget",
        "g1",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":["test.windlass.dev/hold"]}}"#,
    ])
    .await;
    k.ok(&["delete", "gadget", "g1", "--wait=false"]).await;
    let ts = k
        .ok(&[
            "get",
            "gadget",
            "g1",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ])
        .await;
    assert!(
        !ts.is_empty(),
        "deletionTimestamp is set while the finalizer holds"
    );
    k.ok(&[
        "patch",
        "gadget",
        "g1",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    let gone = k.run(&["get", "gadget", "g1"]).await;
    assert!(
        stderr(&gone).contains("NotFound") || stderr(&gone).contains("not found"),
        "{}",
        stderr(&gone)
    );
    k.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_owner_deletes_its_dependents() {
    let k = Kubectl::start().await;
    k.ok(&["apply", "-f", "configmap.yaml"]).await;
    let uid = k
        .ok(&["get", "cm", "settings", "-o", "jsonpath={.metadata.uid}"])
        .await;
    let dependent = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dependent\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: settings\n    uid: {uid}\n"
    );
    k.ok_stdin(&["apply", "-f", "-"], &dependent).await;
    k.ok(&["delete", "configmap", "settings"]).await;
    let mut gone = false;
    for _ in 0..40 {
        let out = k.run(&["get", "configmap", "dependent"]).await;
        if !out.status.success() && stderr(&out).contains("not found") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the dependent is garbage-collected");
    k.shutdown().await;
}

/// `kubectl auth can-i` and `auth whoami`: the devcluster lets every client do everything as
/// one admin user; a real server answers the same for its admin (group `system:masters`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_can_i_and_whoami_answer_for_the_admin() {
    let k = Kubectl::start().await;
    let yes = k
        .ok(&["auth", "can-i", "create", "statefulsets.apps"])
        .await;
    assert_eq!(yes.trim(), "yes");
    let yes = k
        .ok(&["auth", "can-i", "delete", "secrets", "-n", "kube-system"])
        .await;
    assert_eq!(yes.trim(), "yes");
    let rules = k.ok(&["auth", "can-i", "--list"]).await;
    assert!(
        rules
            .lines()
            .any(|l| l.starts_with("*.*") && l.contains("[*]")),
        "{rules}"
    );
    let me: serde_json::Value =
        serde_json::from_str(&k.ok(&["auth", "whoami", "-o", "json"]).await).expect("JSON");
    assert_eq!(me["kind"], "SelfSubjectReview", "{me}");
    assert!(me["status"]["userInfo"]["username"].is_string(), "{me}");
    assert!(
        me["status"]["userInfo"]["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == "system:masters")),
        "{me}"
    );
    k.shutdown().await;
}

/// `kubectl scale` goes through the `scale` subresource (`autoscaling/v1` Scale); a stale
/// resourceVersion on it is a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_sets_replicas_through_the_scale_subresource() {
    let k = Kubectl::start().await;
    k.ok(&["apply", "-f", "deployment.yaml"]).await;
    k.ok(&["scale", "deployment/web", "--replicas=3"]).await;
    let replicas = k
        .ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await;
    assert_eq!(replicas, "3");
    let scale: serde_json::Value = serde_json::from_str(
        &k.ok(&[
            "get",
            "deployment",
            "web",
            "--subresource=scale",
            "-o",
            "json",
        ])
        .await,
    )
    .expect("a Scale as JSON");
    assert_eq!(scale["kind"], "Scale", "{scale}");
    assert_eq!(scale["apiVersion"], "autoscaling/v1", "{scale}");
    assert_eq!(scale["spec"]["replicas"], 3, "{scale}");
    assert_eq!(scale["status"]["selector"], "app=web", "{scale}");
    // kubectl checks `--resource-version` itself; a PUT of a stale Scale is the server's test.
    let stale_scale = r#"{"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": "1"},
        "spec": {"replicas": 1}}"#;
    let stale = k
        .run_with(
            &[
                "replace",
                "--raw",
                "/apis/apps/v1/namespaces/default/deployments/web/scale",
                "-f",
                "-",
            ],
            Some(stale_scale),
            &[],
            60,
        )
        .await;
    assert!(
        !stale.status.success(),
        "a stale resourceVersion is refused"
    );
    assert!(
        stderr(&stale).contains("the object has been modified"),
        "{}",
        stderr(&stale)
    );
    let replicas = k
        .ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await;
    assert_eq!(replicas, "3", "the refused scale changed nothing");
    k.shutdown().await;
}

/// `kubectl apply --prune` with its default allowlist (which names Endpoints,
/// ReplicationControllers and Ingresses among others) removes what left the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_prune_removes_what_left_the_manifest() {
    let k = Kubectl::start().await;
    let cm = |name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    app: pruned\ndata:\n  k: v\n"
        )
    };
    k.ok_stdin(
        &["apply", "--prune", "-l", "app=pruned", "-f", "-"],
        &format!("{}---\n{}", cm("keep"), cm("drop")),
    )
    .await;
    let out = k
        .ok_stdin(
            &["apply", "--prune", "-l", "app=pruned", "-f", "-"],
            &cm("keep"),
        )
        .await;
    assert!(out.contains("configmap/drop pruned"), "{out}");
    let gone = k.run(&["get", "configmap", "drop"]).await;
    assert!(stderr(&gone).contains("not found"), "{}", stderr(&gone));
    k.ok(&["get", "configmap", "keep"]).await;
    k.shutdown().await;
}

/// An event written through `events.k8s.io/v1` (as the host writes them) is one object: it
/// shows in `kubectl get events` with the real server's columns and in `kubectl events --for`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_k8s_io_event_shows_in_kubectl_get_events_and_events_for() {
    let k = Kubectl::start().await;
    k.ok(&["apply", "-f", "configmap.yaml"]).await;
    let uid = k
        .ok(&["get", "cm", "settings", "-o", "jsonpath={.metadata.uid}"])
        .await;
    let event = format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: settings.applied\n  namespace: default\n\
         eventTime: \"2026-12-01T10:00:00.000000Z\"\nreportingController: windlass.dev/host\n\
         reportingInstance: host-1\naction: Apply\nreason: Applied\ntype: Normal\n\
         note: applied the settings for the test\nregarding:\n  apiVersion: v1\n  kind: ConfigMap\n\
         \x20 name: settings\n  namespace: default\n  uid: {uid}\n"
    );
    k.ok_stdin(&["create", "-f", "-"], &event).await;
    let table = k.ok(&["get", "events", "-n", "default"]).await;
    let header = table.lines().next().unwrap_or_default();
    for column in ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"] {
        assert!(header.contains(column), "{table}");
    }
    assert!(!header.starts_with("NAME"), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains("applied the settings for the test"))
        .unwrap_or_else(|| panic!("the event is listed as a core v1 Event: {table}"));
    assert!(
        row.contains("Normal") && row.contains("Applied") && row.contains("configmap/settings"),
        "{table}"
    );
    let core: serde_json::Value = serde_json::from_str(
        &k.ok(&[
            "get",
            "--raw",
            "/api/v1/namespaces/default/events/settings.applied",
        ])
        .await,
    )
    .expect("JSON");
    assert_eq!(core["apiVersion"], "v1", "{core}");
    assert_eq!(
        core["message"], "applied the settings for the test",
        "{core}"
    );
    assert_eq!(core["involvedObject"]["name"], "settings", "{core}");
    assert_eq!(core["reportingComponent"], "windlass.dev/host", "{core}");
    let for_cm = k.ok(&["events", "--for", "configmap/settings"]).await;
    assert!(
        for_cm.contains("applied the settings for the test"),
        "{for_cm}"
    );
    k.shutdown().await;
}

/// Service and claim tables have the real server's columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_shows_service_ports_and_claim_capacity_columns() {
    let k = Kubectl::start().await;
    // Two ports need a name each, on both servers.
    let unnamed = k
        .run_with(
            &["apply", "-f", "-"],
            Some("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports:\n  - port: 80\n    targetPort: 8080\n  - name: tls\n    port: 443\n"),
            &[],
            60,
        )
        .await;
    assert!(
        stderr(&unnamed).contains("spec.ports[0].name: Required value"),
        "{}",
        stderr(&unnamed)
    );
    k.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports:\n  - name: http\n    port: 80\n    targetPort: 8080\n  - name: tls\n    port: 443\n",
    )
    .await;
    k.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests: {storage: 1Gi}\n",
    )
    .await;
    let svc = k.ok(&["get", "service", "web"]).await;
    let header = svc.lines().next().unwrap_or_default();
    for column in [
        "NAME",
        "TYPE",
        "CLUSTER-IP",
        "EXTERNAL-IP",
        "PORT(S)",
        "AGE",
    ] {
        assert!(header.contains(column), "{svc}");
    }
    assert!(
        svc.contains("80/TCP,443/TCP") && svc.contains("<none>"),
        "{svc}"
    );
    let pvc = k.ok(&["get", "pvc", "data"]).await;
    let header = pvc.lines().next().unwrap_or_default();
    for column in [
        "STATUS",
        "VOLUME",
        "CAPACITY",
        "ACCESS MODES",
        "STORAGECLASS",
    ] {
        assert!(header.contains(column), "{pvc}");
    }
    k.shutdown().await;
}

/// Field selectors name only the fields the server supports for the kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_selector_on_an_unsupported_field_is_refused() {
    let k = Kubectl::start().await;
    k.ok(&["apply", "-f", "configmap.yaml"]).await;
    let out = k
        .run(&["get", "configmaps", "--field-selector", "data.mode=fast"])
        .await;
    assert!(!out.status.success(), "data.mode is not a field label");
    assert!(
        stderr(&out).contains(
            r#""data.mode" is not a known field selector: only "metadata.name", "metadata.namespace""#
        ),
        "{}",
        stderr(&out)
    );
    let out = k
        .run(&["get", "pods", "--field-selector", "spec.containers=x"])
        .await;
    assert!(
        stderr(&out).contains("field label not supported: spec.containers"),
        "{}",
        stderr(&out)
    );
    let named = k
        .ok(&[
            "get",
            "configmaps",
            "--field-selector",
            "metadata.name=settings",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(named.trim(), "configmap/settings");
    let pods = k
        .run(&["get", "pods", "--field-selector", "status.phase=Running"])
        .await;
    assert!(pods.status.success(), "{}", stderr(&pods));
    k.shutdown().await;
}

/// kubectl's `create` generators send protobuf bodies; each object reads back as created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_generators_work_with_their_protobuf_bodies() {
    let k = Kubectl::start().await;
    k.ok(&["create", "namespace", "shop"]).await;
    let n = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-n", "shop"]);
        all.into_iter().map(String::from).collect::<Vec<_>>()
    };
    for args in [
        n(&[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
        ]),
        n(&[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=hunter2",
        ]),
        n(&[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=0",
        ]),
        n(&["create", "service", "clusterip", "db", "--tcp=5432:5433"]),
        n(&["create", "serviceaccount", "robot"]),
        n(&["create", "job", "once", "--image=busybox:1"]),
        n(&[
            "create",
            "cronjob",
            "nightly",
            "--image=busybox:1",
            "--schedule=0 3 * * *",
        ]),
        n(&[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods",
        ]),
        n(&[
            "create",
            "rolebinding",
            "robot-reads",
            "--role=reader",
            "--serviceaccount=shop:robot",
        ]),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        k.ok(&args).await;
    }
    let get = |what: &'static str, path: &'static str| {
        let k = &k;
        async move {
            k.ok(&["get", what, "-n", "shop", "-o", &format!("jsonpath={path}")])
                .await
        }
    };
    assert_eq!(get("configmap/settings", "{.data.mode}").await, "fast");
    assert_eq!(
        get("secret/creds", "{.data.password}").await,
        "aHVudGVyMg=="
    );
    assert_eq!(get("secret/creds", "{.type}").await, "Opaque");
    assert_eq!(get("deployment/web", "{.spec.replicas}").await, "0");
    assert_eq!(
        get(
            "deployment/web",
            "{.spec.template.spec.containers[0].image}"
        )
        .await,
        "nginx:1.27"
    );
    assert_eq!(
        get(
            "service/db",
            "{.spec.ports[0].port}/{.spec.ports[0].targetPort}"
        )
        .await,
        "5432/5433"
    );
    assert_eq!(
        get("job/once", "{.spec.template.spec.restartPolicy}").await,
        "Never"
    );
    assert_eq!(
        get("cronjob/nightly", "{.spec.schedule}").await,
        "0 3 * * *"
    );
    assert_eq!(
        get("role/reader", "{.rules[0].verbs}").await,
        r#"["get","list"]"#
    );
    assert_eq!(
        get(
            "rolebinding/robot-reads",
            "{.subjects[0].name}/{.roleRef.name}"
        )
        .await,
        "robot/reader"
    );
    k.ok(&["get", "serviceaccount", "robot", "-n", "shop"])
        .await;
    k.shutdown().await;
}

/// `kubectl explain` describes built-in kinds field by field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_describes_built_in_kinds() {
    let k = Kubectl::start().await;
    let out = k.ok(&["explain", "deployment.spec.replicas"]).await;
    assert!(out.contains("KIND:       Deployment"), "{out}");
    assert!(out.contains("FIELD: replicas <integer>"), "{out}");
    assert!(out.contains("Number of desired pods"), "{out}");
    let out = k.ok(&["explain", "pods.spec.containers"]).await;
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("image") && l.contains("<string>")),
        "{out}"
    );
    k.shutdown().await;
}

/// `kubectl logs` gets a clear refusal from the devcluster, which runs no containers (a real
/// server answers from the kubelet; the test plane has none, so this is devcluster-only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_say_the_devcluster_runs_no_containers() {
    let k = Kubectl::start().await;
    k.dc.dev_only("a server that runs no containers");
    k.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: web\n    image: nginx:1.27\n",
    )
    .await;
    let out = k.run(&["logs", "web"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("pods/log is not supported by the devcluster"),
        "{}",
        stderr(&out)
    );
    k.shutdown().await;
}

/// `kubectl get` of Pods, StatefulSets and Deployments shows the real server's columns, in its
/// order (the wide ones after AGE), READY as `ready/desired`; and every namespace has its
/// `default` ServiceAccount, as kube-controller-manager makes. On both servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_shows_the_workload_columns_and_namespaces_have_a_default_service_account() {
    let k = Kubectl::start().await;
    // The default ServiceAccount: the real controller makes it a moment after the namespace.
    let mut tries = 0;
    loop {
        let out = k
            .run(&["get", "serviceaccount", "default", "-o", "name"])
            .await;
        if out.status.success() {
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "serviceaccount/default"
            );
            break;
        }
        tries += 1;
        assert!(tries < 60, "no default ServiceAccount: {}", stderr(&out));
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    k.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: fidelity-new\n",
    )
    .await;
    let mut tries = 0;
    while !k
        .run(&["get", "serviceaccount", "default", "-n", "fidelity-new"])
        .await
        .status
        .success()
    {
        tries += 1;
        assert!(tries < 60, "a new namespace got no default ServiceAccount");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    let template = "  template:\n    metadata:\n      labels: {app: fidelity}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n      - name: side\n        image: busybox:1.36\n";
    k.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: fidelity-db\nspec:\n  serviceName: fidelity-db\n  replicas: 2\n  selector:\n    matchLabels: {{app: fidelity}}\n{template}---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: fidelity-web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: fidelity}}\n{template}---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: fidelity-pod\nspec:\n  containers:\n  - name: web\n    image: nginx:1.27\n"
        ),
    )
    .await;
    let columns = |out: &str| -> Vec<String> {
        // Headers are separated by two or more spaces; a header may hold one ("NOMINATED NODE").
        out.lines()
            .next()
            .unwrap_or_default()
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    };
    let cells = |out: &str, name: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let pods = k.ok(&["get", "pod", "fidelity-pod"]).await;
    assert_eq!(
        columns(&pods),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{pods}"
    );
    let row = cells(&pods, "fidelity-pod");
    assert!(row[1].ends_with("/1") && row[3] == "0", "{pods}");
    let wide = k.ok(&["get", "pod", "fidelity-pod", "-o", "wide"]).await;
    assert_eq!(
        columns(&wide),
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES"
        ],
        "{wide}"
    );
    assert_eq!(
        cells(&wide, "fidelity-pod").last().map(String::as_str),
        Some("<none>"),
        "{wide}"
    );

    let sts = k.ok(&["get", "statefulset", "fidelity-db"]).await;
    assert_eq!(columns(&sts), ["NAME", "READY", "AGE"], "{sts}");
    let ready = &cells(&sts, "fidelity-db")[1];
    assert!(ready.ends_with("/2"), "READY is ready/desired: {sts}");
    let wide = k
        .ok(&["get", "statefulset", "fidelity-db", "-o", "wide"])
        .await;
    assert_eq!(
        columns(&wide),
        ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"],
        "{wide}"
    );
    assert!(
        wide.contains("web,side") && wide.contains("nginx:1.27,busybox:1.36"),
        "{wide}"
    );

    let deploy = k.ok(&["get", "deployment", "fidelity-web"]).await;
    assert_eq!(
        columns(&deploy),
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{deploy}"
    );
    assert!(
        cells(&deploy, "fidelity-web")[1].ends_with("/2"),
        "{deploy}"
    );
    let wide = k
        .ok(&["get", "deployment", "fidelity-web", "-o", "wide"])
        .await;
    assert_eq!(
        columns(&wide),
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{wide}"
    );
    assert!(wide.contains("app=fidelity"), "{wide}");
    k.shutdown().await;
}

/// The controllers' own events, recorded through core `v1` with no `eventTime` as
/// kube-controller-manager's are: `kubectl get events --sort-by=.lastTimestamp` shows them, and
/// `events.k8s.io/v1` serves them with `eventTime` null, which the host's event types read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_events_have_no_event_time_and_read_through_events_k8s_io() {
    let k = Kubectl::with_controllers().await;
    k.ok(&["create", "job", "once", "--image=busybox:1"]).await;
    k.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: evdb\nspec:\n  serviceName: evdb\n  replicas: 1\n  selector:\n    matchLabels: {app: evdb}\n  template:\n    metadata:\n      labels: {app: evdb}\n    spec:\n      containers:\n      - name: db\n        image: nginx:1.27\n",
    )
    .await;
    let notes = [
        "Created pod: once-",
        "Create Pod evdb-0 in StatefulSet evdb successful",
    ];
    let mut tries = 0;
    let table = loop {
        let table = k.ok(&["get", "events", "--sort-by=.lastTimestamp"]).await;
        if notes.iter().all(|n| table.contains(n)) {
            break table;
        }
        tries += 1;
        assert!(tries < 60, "the controllers' events: {table}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let row = |note: &str| {
        table
            .lines()
            .find(|l| l.contains(note))
            .unwrap_or_default()
            .to_string()
    };
    let job_row = row(notes[0]);
    assert!(
        job_row.contains("Normal")
            && job_row.contains("SuccessfulCreate")
            && job_row.contains("job/once"),
        "{table}"
    );
    assert!(row(notes[1]).contains("statefulset/evdb"), "{table}");

    let text = k
        .ok(&[
            "get",
            "--raw",
            "/apis/events.k8s.io/v1/namespaces/default/events",
        ])
        .await;
    let raw: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let items = raw["items"].as_array().cloned().unwrap_or_default();
    for (regarding, component) in [
        ("once", "job-controller"),
        ("evdb", "statefulset-controller"),
    ] {
        let event = items
            .iter()
            .find(|e| e["regarding"]["name"] == regarding && e["reason"] == "SuccessfulCreate")
            .unwrap_or_else(|| panic!("{regarding}'s SuccessfulCreate event: {text}"));
        assert_eq!(
            event.get("eventTime"),
            Some(&serde_json::Value::Null),
            "{event}"
        );
        assert_eq!(event["deprecatedSource"]["component"], component, "{event}");
        assert_eq!(event["deprecatedCount"], 1, "{event}");
        assert!(event["deprecatedLastTimestamp"].is_string(), "{event}");
    }
    let typed: k8s_openapi::List<k8s_openapi::api::events::v1::Event> =
        serde_json::from_value(raw).expect("the list reads with the host's event types");
    let created = typed
        .items
        .iter()
        .find(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("once")
                && e.reason.as_deref() == Some("SuccessfulCreate")
        })
        .expect("the Job's event");
    assert!(created.event_time.is_none(), "{created:?}");
    k.shutdown().await;
}
