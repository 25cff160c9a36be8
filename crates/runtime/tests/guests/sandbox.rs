//! Every misbehaving guest is contained with a precise error, and the runtime keeps serving
//! other plugins afterwards.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use windlass_policy::pipeline::{self, Input, Pipeline, Stage};
use windlass_runtime::{
    Error, InstanceMode, Limits, LoadOptions, Phase, Plugin, PluginErrorKind, Request, Runtime,
    RuntimeConfig,
};
use windlass_test_guests as guests;

use crate::support::{
    NOW, assert_still_serving, capture_log, load, load_with, request, runtime, sampledb, thing,
};

/// Runs one plugin, given `config`, through the pipeline (policy included).
fn run_pipeline_with(plugin: Plugin, config: Value) -> Result<pipeline::Outcome, pipeline::Error> {
    let pipeline = Pipeline {
        stages: vec![Stage {
            config,
            ..Stage::new(Arc::new(plugin))
        }],
        policy: Default::default(),
    };
    pipeline.run(Input::new(Phase::Reconcile, &thing(), &[], NOW))
}

#[test]
fn an_infinite_loop_is_interrupted_at_the_time_limit() {
    let limits = Limits {
        timeout: Duration::from_millis(100),
        ..Limits::default()
    };
    let plugin = load_with(
        guests::MISBEHAVE,
        LoadOptions {
            limits,
            ..Default::default()
        },
    );
    let started = Instant::now();
    let err = plugin.call(&request(json!({"do": "loop"}))).unwrap_err();
    assert!(
        matches!(&err, Error::Timeout { plugin, limit } if plugin == "guest-misbehave" && *limit == Duration::from_millis(100)),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "plugin guest-misbehave: timed out after 100ms"
    );
    assert_eq!(err.reason(), "Timeout");
    // At the limit: not before it, and within twice it plus slack for a loaded machine (the
    // interrupt comes within a few epoch ticks).
    let took = started.elapsed();
    let limit = Duration::from_millis(100);
    assert!(took >= limit, "stopped after {took:?}, before the limit");
    assert!(
        took < 2 * limit + Duration::from_millis(500),
        "stopped after {took:?}"
    );
    assert_still_serving();
}

#[test]
fn an_allocation_bomb_hits_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 32 << 20,
        ..Limits::default()
    };
    let plugin = load_with(
        guests::MISBEHAVE,
        LoadOptions {
            limits,
            ..Default::default()
        },
    );
    let err = plugin
        .call(&request(json!({"do": "allocBomb"})))
        .unwrap_err();
    assert!(
        matches!(&err, Error::MemoryLimit { limit, .. } if *limit == 32 << 20),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "plugin guest-misbehave: memory limit of 33554432 bytes exceeded"
    );
    assert_still_serving();
}

#[test]
fn a_panic_is_a_trap_carrying_the_panic_message() {
    let err = load(guests::MISBEHAVE)
        .call(&request(json!({"do": "panic"})))
        .unwrap_err();
    let Error::Trap { plugin, message } = &err else {
        panic!("expected a trap, got {err}")
    };
    assert_eq!(plugin, "guest-misbehave");
    assert!(
        message.contains("cannot reconcile t1: the spec is on fire"),
        "{message}"
    );
    assert!(message.contains("unreachable"), "{message}");
    assert!(!message.contains("RUST_BACKTRACE"), "{message}");
    assert_still_serving();
}

#[test]
fn a_guest_finds_no_files() {
    let err = load(guests::MISBEHAVE)
        .call(&request(json!({"do": "readFile", "path": "/etc/passwd"})))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Plugin { kind: PluginErrorKind::Failed, message, .. } if message == "reading /etc/passwd: NotFound"),
        "{err}"
    );
    let err = load(guests::MISBEHAVE)
        .call(&request(json!({"do": "readFile", "path": "Cargo.toml"})))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Plugin { message, .. } if message == "reading Cargo.toml: NotFound"),
        "{err}"
    );
    assert_still_serving();
}

#[test]
fn a_guest_sees_no_environment_arguments_or_working_directory() {
    let err = load(guests::MISBEHAVE)
        .call(&request(json!({"do": "readEnv"})))
        .unwrap_err();
    let Error::Plugin { kind, message, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*kind, PluginErrorKind::Failed);
    // "/" is the guest's idea of a working directory with no preopens; nothing is behind it.
    assert_eq!(message, "environment: []; arguments: 0; cwd: /");
    assert_still_serving();
}

#[test]
fn a_guest_cannot_open_a_socket() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let err = load(guests::MISBEHAVE)
        .call(&request(json!({"do": "socket", "address": address})))
        .unwrap_err();
    let Error::Plugin { kind, message, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*kind, PluginErrorKind::Failed);
    assert_eq!(
        message,
        &format!("connecting to {address}: PermissionDenied")
    );
    // Nothing reached the listener.
    assert_eq!(
        listener.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    assert_still_serving();
}

#[test]
fn a_hundred_thousand_objects_are_refused_by_the_object_cap() {
    let err = run_pipeline_with(load(guests::MISBEHAVE), json!({"do": "manyObjects"})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin guest-misbehave: invalid output (OutputTooLarge): desired: 100000 objects is more than the limit of 1000"
    );
    assert_eq!(err.reason(), "InvalidOutput");
    assert_still_serving();
}

/// The 8 MiB cap on one plugin's output: 100 ConfigMaps of 90,000 bytes each (under the object
/// cap) are refused whole, naming the size; 90 of them (7.7 MiB) pass.
#[test]
fn nine_mebibytes_of_objects_are_refused_by_the_byte_cap() {
    let big = |count: u64| json!({"do": "manyObjects", "count": count, "bytes": 90_000});
    let Err(err) = run_pipeline_with(load(guests::MISBEHAVE), big(100)) else {
        panic!("100 objects of 90,000 bytes were accepted");
    };
    let message = err.to_string();
    assert!(
        message.starts_with("plugin guest-misbehave: invalid output (OutputTooLarge): desired: 90")
            && message.ends_with(" bytes is more than the limit of 8388608"),
        "{message}"
    );
    assert_eq!(err.reason(), "InvalidOutput");
    let out = run_pipeline_with(load(guests::MISBEHAVE), big(90))
        .unwrap_or_else(|e| panic!("7.7 MiB is refused: {e}"));
    assert_eq!(out.desired.len(), 90);
    assert_still_serving();
}

#[test]
fn a_cluster_role_binding_is_refused_unless_granted() {
    let err = run_pipeline_with(load(guests::MISBEHAVE), json!({"do": "clusterRoleBinding"}))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin guest-misbehave: invalid output (PrivilegedKind): desired[0] rbac.authorization.k8s.io/v1/ClusterRoleBinding i-am-admin: \
         kind rbac.authorization.k8s.io/v1/ClusterRoleBinding confers privileges and is not granted by name"
    );
    assert_eq!(err.plugin(), Some("guest-misbehave"));
    assert_still_serving();
}

#[test]
fn a_misbehaviour_the_guest_does_not_know_is_its_invalid_config() {
    let err = load(guests::MISBEHAVE)
        .call(&request(json!({"do": "fly"})))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Plugin { kind: PluginErrorKind::InvalidConfig, message, .. } if message == "unknown misbehaviour \"fly\""),
        "{err}"
    );
}

#[test]
fn invalid_json_output_is_refused() {
    let err = run_pipeline_with(load(guests::MISBEHAVE), json!({"do": "invalidJson"})).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "plugin guest-misbehave: invalid output (InvalidObject): desired[0]: not valid JSON: "
        ),
        "{msg}"
    );
    assert_still_serving();
}

#[test]
fn a_future_contract_version_is_refused_at_load() {
    let err = runtime()
        .load(
            "future",
            &guests::bytes(guests::FUTURE_CONTRACT),
            LoadOptions::default(),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin future: incompatible contract: it exports windlass:plugin/reconciler@9.0.0; this host supports windlass:plugin/reconciler@0.1.0"
    );
    assert_eq!(err.reason(), "IncompatibleContract");
}

#[test]
fn bytes_that_are_not_a_component_are_refused_at_load() {
    let err = runtime()
        .load("junk", b"\0asm\x01\0\0\0", LoadOptions::default())
        .unwrap_err();
    assert!(
        matches!(&err, Error::Compile { plugin, .. } if plugin == "junk"),
        "{err}"
    );
    let err = runtime()
        .load("text", b"hello", LoadOptions::default())
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("plugin text: not a loadable WebAssembly component"),
        "{err}"
    );
}

#[test]
fn fresh_instances_share_no_state_and_reused_ones_do_until_a_trap() {
    let fresh = load(guests::STATEFUL);
    for _ in 0..3 {
        let resp = fresh.call(&request(json!({}))).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&resp.status.unwrap()).unwrap()["calls"],
            1
        );
    }
    let reused = load_with(
        guests::STATEFUL,
        LoadOptions {
            mode: InstanceMode::Reuse,
            ..Default::default()
        },
    );
    let calls = |p: &Plugin| {
        let (resp, stats) = p.call_measured(&request(json!({})));
        (
            serde_json::from_str::<Value>(&resp.unwrap().status.unwrap()).unwrap()["calls"]
                .as_u64()
                .unwrap(),
            stats.reused,
        )
    };
    assert_eq!(calls(&reused), (1, false));
    assert_eq!(calls(&reused), (2, true));
    let err = reused.call(&request(json!({"panic": true}))).unwrap_err();
    assert!(
        err.to_string().contains("asked to panic on call 3"),
        "{err}"
    );
    // The trapped instance was dropped: the next call starts from a fresh one.
    assert_eq!(calls(&reused), (1, false));
}

#[test]
fn fuel_bounds_instructions_when_enabled() {
    let rt = Runtime::new(RuntimeConfig {
        fuel: true,
        max_instances: 8,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let limits = Limits {
        fuel: Some(5_000_000),
        timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let plugin = rt
        .load(
            "loop",
            &guests::bytes(guests::MISBEHAVE),
            LoadOptions {
                limits,
                ..Default::default()
            },
        )
        .unwrap();
    let err = plugin.call(&request(json!({"do": "loop"}))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin guest-misbehave: fuel limit of 5000000 exhausted"
    );
    let storage = rt
        .load(
            "storage",
            &guests::bytes(guests::STORAGE),
            LoadOptions {
                limits,
                ..Default::default()
            },
        )
        .unwrap();
    let req = Request {
        parent: sampledb().to_string(),
        ..request(json!({}))
    };
    let (resp, stats) = storage.call_measured(&req);
    resp.unwrap();
    assert!(stats.fuel_consumed.unwrap() > 0);
    // Without fuel counting in the engine, a fuel limit is refused rather than ignored.
    let err = runtime()
        .load(
            "loop",
            &guests::bytes(guests::MISBEHAVE),
            LoadOptions {
                limits,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("a fuel limit needs a runtime with fuel enabled"),
        "{err}"
    );
}

#[test]
fn the_precompiled_cache_survives_a_restart_and_heals_a_corrupt_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        max_instances: 8,
        ..RuntimeConfig::default()
    };
    let bytes = guests::bytes(guests::STORAGE);
    let first = Runtime::new(config.clone()).unwrap();
    let plugin = first
        .load("storage", &bytes, LoadOptions::default())
        .unwrap();
    assert_eq!(first.stats().compiled, 1);
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        name.starts_with(plugin.digest().trim_start_matches("sha256:")),
        "{name}"
    );
    drop(first);

    let second = Runtime::new(config.clone()).unwrap();
    second
        .load("storage", &bytes, LoadOptions::default())
        .unwrap();
    assert_eq!((second.stats().compiled, second.stats().cache_hits), (0, 1));
    drop(second);

    std::fs::write(&files[0], b"not native code").unwrap();
    let third = Runtime::new(config).unwrap();
    let plugin = third
        .load("storage", &bytes, LoadOptions::default())
        .unwrap();
    assert_eq!((third.stats().compiled, third.stats().cache_hits), (1, 0));
    assert!(std::fs::metadata(&files[0]).unwrap().len() > 1_000);
    let req = Request {
        parent: sampledb().to_string(),
        ..request(json!({}))
    };
    assert_eq!(plugin.call(&req).unwrap().desired.len(), 5);
}

#[test]
fn plugin_output_is_captured_into_the_log_with_the_plugins_name() {
    let ((), log) = capture_log(|| {
        load(guests::STATEFUL).call(&request(json!({}))).unwrap();
    });
    assert!(
        log.contains("plugin=\"guest-stateful\"") || log.contains("plugin=guest-stateful"),
        "{log}"
    );
    assert!(log.contains("stdout line from call 1"), "{log}");
    assert!(log.contains("log line from call 1"), "{log}");
}

/// Each of a guest's stdout and stderr is kept to 64 KiB a call: a guest printing 1 MiB to
/// each has 64 KiB of each logged, the rest dropped and counted in one warning, and its call
/// still succeeds.
#[test]
fn a_guest_printing_a_mebibyte_has_64_kib_of_each_stream_logged_and_the_rest_counted() {
    let (result, log) = capture_log(|| {
        load(guests::MISBEHAVE).call(&request(json!({"do": "print", "bytes": 1 << 20})))
    });
    result.unwrap_or_else(|e| panic!("{e}"));
    // 64 KiB of 100-byte lines: 655 whole lines and 36 bytes of the next.
    for (stream, letter) in [("stdout", "o"), ("stderr", "e")] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains(&format!("stream=\"{stream}\""))
                    || l.contains(&format!("stream={stream}"))
            })
            .collect();
        let whole = lines
            .iter()
            .filter(|l| l.contains(&letter.repeat(99)))
            .count();
        assert_eq!(whole, 655, "{stream}: whole lines logged");
        assert_eq!(lines.len(), 656, "{stream}: lines logged");
        assert!(
            lines[655].contains(&format!(": {} plugin=", letter.repeat(36))),
            "{stream}: the cut line: {}",
            lines[655]
        );
    }
    let dropped = 2 * ((1 << 20) - (64 << 10));
    assert!(
        log.lines().any(
            |l| l.contains("guest output beyond 65536 bytes per stream was dropped")
                && l.contains(&format!("dropped_bytes={dropped}"))
        ),
        "no warning of {dropped} dropped bytes: {}",
        log.lines().last().unwrap_or_default()
    );
}

#[test]
fn the_storage_plugin_declares_what_it_produces() {
    let storage = load(guests::STORAGE);
    let info = storage.info();
    assert_eq!(info.name, "sampledb-storage");
    assert_eq!(
        info.parent_kinds,
        vec!["samples.windlass.dev/v1alpha1/SampleDB"]
    );
    assert_eq!(
        info.child_kinds,
        vec![
            "v1/Service",
            "apps/v1/StatefulSet",
            "v1/ConfigMap",
            "v1/Secret",
            "batch/v1/Job"
        ]
    );
    assert!(!info.finalizes);
    assert!(storage.digest().starts_with("sha256:") && storage.digest().len() == 71);
    let imports = storage.imports();
    assert!(
        imports.iter().any(|i| i == "windlass:plugin/types@0.1.0"),
        "{imports:?}"
    );
    assert!(
        !imports
            .iter()
            .any(|i| i.starts_with("wasi:sockets") || i.starts_with("wasi:http")),
        "{imports:?}"
    );
    let stateful = load(guests::STATEFUL);
    assert!(
        stateful
            .imports()
            .iter()
            .any(|i| i == "windlass:plugin/log@0.1.0"),
        "{:?}",
        stateful.imports()
    );
}

/// Bytes that are no component are refused as CompileFailed, naming the plugin, on one line (a
/// bad magic number was a multi-line dump of bytes in the condition, the event and the log).
#[test]
fn bytes_that_are_no_component_fail_to_compile_in_one_line_naming_the_plugin() {
    for bytes in [
        &b"\x7fELF\x02\x01\x01\0not wasm at all"[..],
        b"\0asm\x01\0\0\0\xff\xff\xff",
        b"\0asm\x0d\0\x01\0\x01\xff",
        b"",
    ] {
        let Err(e) = runtime().load("corrupt", bytes, LoadOptions::default()) else {
            panic!("{bytes:?} loaded");
        };
        let text = e.to_string();
        assert_eq!(e.reason(), "CompileFailed", "{text}");
        assert!(
            text.starts_with("plugin corrupt: not a loadable WebAssembly component: "),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
        // The case that was a multi-line dump: wasmparser pretty-prints the bytes it expected.
        if bytes.starts_with(b"\x7fELF") {
            assert!(
                text.contains("bad magic number - expected=[ 0x0, 0x61"),
                "{text}"
            );
        }
    }
}
