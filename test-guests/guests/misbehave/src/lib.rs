//! One guest, many misbehaviours, chosen by its config's `do` (as Spin's `core-wasi-test`): each
//! tries to get past the sandbox or the output policy one way, and the test that asks for it
//! checks the precise error and that the runtime still serves other plugins.
//!
//! - `allocBomb`: allocates 1 MiB at a time until the memory limit stops it.
//! - `readFile`: reads `path` (default `/etc/passwd`): there is no filesystem.
//! - `readEnv`: reports its environment, arguments and working directory: all empty.
//! - `socket`: connects to `address` (default `127.0.0.1:80`): there is no network.
//! - `manyObjects`: returns 100,000 ConfigMaps: the object cap.
//! - `clusterRoleBinding`: returns a ClusterRoleBinding to cluster-admin: a privileged,
//!   cluster-scoped kind.
//!
//! Any other `do` is `invalid-config`.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::{io::Write, net::TcpStream};

use windlass_sdk::{Context, Error, Info, Output, Plugin, Result, Value, json};

struct Misbehave;

windlass_sdk::export!(Misbehave);

impl Plugin for Misbehave {
    fn info() -> Info {
        Info::new("guest-misbehave", "0.0.0")
            .parent("example.com/v1/Thing")
            .child_kind("v1/ConfigMap")
            .child_kind("rbac.authorization.k8s.io/v1/ClusterRoleBinding")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let config = ctx.config::<Value>()?;
        let text = |key: &str, default: &str| config[key].as_str().unwrap_or(default).to_string();
        match config["do"].as_str().unwrap_or_default() {
            "allocBomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "readFile" => {
                let path = text("path", "/etc/passwd");
                match std::fs::read_to_string(&path) {
                    Ok(text) => {
                        let mut out = ctx.output();
                        out.status("leaked", text);
                        Ok(out)
                    }
                    Err(e) => Err(Error::Failed(format!("reading {path}: {:?}", e.kind()))),
                }
            }
            "readEnv" => {
                let vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
                let args = std::env::args().count();
                let cwd = std::env::current_dir()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|e| format!("{:?}", e.kind()));
                Err(Error::Failed(format!(
                    "environment: {vars:?}; arguments: {args}; cwd: {cwd}"
                )))
            }
            "socket" => {
                let addr = text("address", "127.0.0.1:80");
                match TcpStream::connect(&addr) {
                    Ok(mut stream) => {
                        let _ = stream.write_all(b"escaped the sandbox\n");
                        let mut out = ctx.output();
                        out.status("connected", addr);
                        Ok(out)
                    }
                    Err(e) => Err(Error::Failed(format!(
                        "connecting to {addr}: {:?}",
                        e.kind()
                    ))),
                }
            }
            "manyObjects" => {
                let mut out = ctx.output();
                out.desired_mut().extend((0..100_000).map(|i| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}})
                }));
                Ok(out)
            }
            "clusterRoleBinding" => {
                let mut out = ctx.output();
                out.apply(&json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "i-am-admin"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}],
                }))?;
                Ok(out)
            }
            other => Err(Error::InvalidConfig(format!(
                "unknown misbehaviour {other:?}"
            ))),
        }
    }
}
