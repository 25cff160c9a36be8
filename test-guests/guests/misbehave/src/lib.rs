//! One guest, many misbehaviours, chosen by its config's `do` (as Spin's `core-wasi-test`): each
//! tries to get past the sandbox or the output policy one way, and the test that asks for it
//! checks the precise error and that the runtime still serves other plugins.
//!
//! - `allocBomb`: allocates 1 MiB at a time until the memory limit stops it.
//! - `readFile`: reads `path` (default `/etc/passwd`): there is no filesystem.
//! - `readEnv`: reports its environment, arguments and working directory: all empty.
//! - `socket`: connects to `address` (default `127.0.0.1:80`): there is no network.
//! - `manyObjects`: returns `count` ConfigMaps (default 100,000: the object cap), each with
//!   `bytes` bytes of data (default none: the byte cap).
//! - `clusterRoleBinding`: returns a ClusterRoleBinding to cluster-admin: a privileged,
//!   cluster-scoped kind.
//! - `loop`: never returns: the time limit (or the fuel limit) must interrupt it.
//! - `panic`: panics: the host reports the panic message as a trap.
//! - `otherNamespace`: returns a ConfigMap in `kube-system`: children stay in the parent's
//!   namespace.
//! - `print`: writes `bytes` bytes (default 1 MiB) to stdout and to stderr, in lines of 100
//!   (`o`s on stdout, `e`s on stderr), and returns nothing: the per-call capture cap.
//! - `busy`: keeps the CPU busy for `millis` ms (default 50), reports `millis` as the status's
//!   `busyMillis` and asks to run again in a second: a plugin that saturates the host, for the tests of the order reconciles run in.
//! - `invalidJson`: returns a desired object that is not JSON, past the SDK's serializer (the
//!   export below answers it before the SDK sees the call).
//!
//! Any other `do` is `invalid-config`. The operator's tests load this guest as a broken new
//! version of a plugin with a `do` in the WasmPlugin's config.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::{io::Write, net::TcpStream};

use windlass_sdk::{Context, Error, Info, Output, Plugin, Result, Value, json};

struct Misbehave;

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
                let count = config["count"].as_u64().unwrap_or(100_000);
                let padding = "x".repeat(config["bytes"].as_u64().unwrap_or(0) as usize);
                let mut out = ctx.output();
                out.desired_mut().extend((0..count).map(|i| {
                    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}});
                    if !padding.is_empty() {
                        cm["data"] = json!({"padding": padding});
                    }
                    cm
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
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "busy" => {
                let millis = config["millis"].as_u64().unwrap_or(50);
                let busy = std::time::Duration::from_millis(millis);
                let started = std::time::Instant::now();
                while started.elapsed() < busy {
                    std::hint::spin_loop();
                }
                let mut out = ctx.output();
                out.status("busyMillis", millis);
                out.requeue_after(std::time::Duration::from_secs(1));
                Ok(out)
            }
            "panic" => panic!("cannot reconcile {}: the spec is on fire", ctx.name()),
            "print" => {
                let bytes = config["bytes"].as_u64().unwrap_or(1 << 20) as usize;
                for (stream, letter) in [(0, "o"), (1, "e")] {
                    let line = format!("{}\n", letter.repeat(99));
                    let mut left = bytes;
                    while left > 0 {
                        let take = left.min(line.len());
                        let chunk = &line.as_bytes()[line.len() - take..];
                        let written = if stream == 0 {
                            std::io::stdout().write_all(chunk)
                        } else {
                            std::io::stderr().write_all(chunk)
                        };
                        written.map_err(|e| Error::Failed(format!("printing: {e}")))?;
                        left -= take;
                    }
                }
                Ok(ctx.output())
            }
            "otherNamespace" => {
                let mut out = ctx.output();
                out.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "coredns", "namespace": "kube-system"}}))?;
                Ok(out)
            }
            other => Err(Error::InvalidConfig(format!(
                "unknown misbehaviour {other:?}"
            ))),
        }
    }
}

/// The SDK's export, except for `invalidJson`, which no SDK call can produce.
#[cfg(target_arch = "wasm32")]
mod export {
    use windlass_sdk::__private::{Guest, PluginError, PluginInfo, Request, Response};

    struct Raw;

    impl Guest for Raw {
        fn info() -> PluginInfo {
            windlass_sdk::__private::info::<super::Misbehave>()
        }

        fn reconcile(req: Request) -> Result<Response, PluginError> {
            let config: windlass_sdk::Value =
                windlass_sdk::serde_json::from_str(&req.config).unwrap_or_default();
            if config["do"] != "invalidJson" {
                return windlass_sdk::__private::reconcile::<super::Misbehave>(req);
            }
            Ok(Response {
                desired: vec![
                    r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "#
                        .to_string(),
                ],
                status: None,
                conditions: vec![],
                events: vec![],
                requeue_after_secs: None,
                finalized: false,
            })
        }
    }

    impl windlass_sdk::__private::ConfigGuest for Raw {
        fn validate(config: String) -> Result<(), String> {
            windlass_sdk::__private::validate_config::<super::Misbehave>(&config)
        }
    }

    windlass_sdk::__private::export_bindings!(Raw with_types_in windlass_sdk::__private::bindings);
}
