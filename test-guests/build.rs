//! Builds every plugin and test guest for wasm32-wasip2 with one nested cargo invocation (its
//! own target directory, so it never waits on the outer build's lock) and writes their paths as
//! constants for the tests. Nothing compiled is committed.

use std::{
    env,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

// The SampleDB plugins: `SAMPLEDB_PLUGINS`, `is_cargo_package`, `sampledb_component`.
include!("../plugins/sampledb_plugins.rs");

/// The misbehaving and helper guests, as (constant name, package, artifact stem).
const COMPONENTS: &[(&str, &str, &str)] = &[
    // The misbehaviours a config chooses (`do`): a loop, a panic, memory, files, environment,
    // network, the object cap, a privileged kind, another namespace, output that is not JSON.
    ("MISBEHAVE", "guest-misbehave", "guest_misbehave"),
    ("STATEFUL", "guest-stateful", "guest_stateful"),
    (
        "FUTURE_CONTRACT",
        "guest-future-contract",
        "guest_future_contract",
    ),
    ("CHILDREN", "guest-children", "guest_children"),
    ("CHILDREN_V2", "guest-children-v2", "guest_children_v2"),
    // One plain plugin declaring 50 parent kinds, for the host benchmark's memory per kind.
    ("KINDS", "guest-kinds", "guest_kinds"),
    // Hostile guests written against the WIT without the SDK, one per host hardening rule.
    (
        "HOSTILE_OUTPUT",
        "guest-hostile-output",
        "guest_hostile_output",
    ),
    ("EXFILTRATE", "guest-exfiltrate", "guest_exfiltrate"),
    ("SLEEP_INFO", "guest-sleep-info", "guest_sleep_info"),
    (
        "UNSERVED_KIND",
        "guest-unserved-kind",
        "guest_unserved_kind",
    ),
    (
        "HOSTILE_CONTROLLERS",
        "guest-hostile-controllers",
        "guest_hostile_controllers",
    ),
    (
        "HOSTILE_KINDS",
        "guest-hostile-kinds",
        "guest_hostile_kinds",
    ),
    (
        "HOSTILE_FINALIZE",
        "guest-hostile-finalize",
        "guest_hostile_finalize",
    ),
    (
        "HOSTILE_CONFIG",
        "guest-hostile-config",
        "guest_hostile_config",
    ),
];

/// Guests that wrap a SampleDB plugin (built on their own, see `main`), as in `COMPONENTS`.
const WRAPPERS: &[(&str, &str, &str)] = &[
    (
        "FLAKY_STORAGE",
        "guest-flaky-storage",
        "guest_flaky_storage",
    ),
    // The storage plugin with one more label on its objects: a changed version to replay.
    ("STORAGE_V2", "guest-storage-v2", "guest_storage_v2"),
    // The storage plugin's decision made `repeat` times a call: the runtime benchmark's floor.
    ("STORAGE_LOOP", "guest-storage-loop", "guest_storage_loop"),
];

fn main() {
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .expect("test-guests sits in the workspace root")
        .to_path_buf();
    for dir in ["wit", "guest-sdk", "plugins", "test-guests/guests"] {
        println!("cargo::rerun-if-changed={}", root.join(dir).display());
    }
    println!(
        "cargo::rerun-if-changed={}",
        root.join("Cargo.toml").display()
    );
    println!(
        "cargo::rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );

    let target_dir = root.join("target").join("wasm");
    let mut packages: Vec<&str> = COMPONENTS.iter().map(|(_, package, _)| *package).collect();
    packages.extend(
        SAMPLEDB_PLUGINS
            .iter()
            .filter(|(_, s)| is_cargo_package(s))
            .map(|(_, package)| *package),
    );
    build(&root, &target_dir, &packages);
    // Guests wrapping a SampleDB plugin without its export, in a build and a target dir of
    // their own: built together, cargo would unify the plugin's features (and export both);
    // in the same target dir, building the plugin as a dependency without its export
    // overwrites the plugin's own component.
    let wrappers_dir = root.join("target").join("wasm-wrappers");
    build(
        &root,
        &wrappers_dir,
        &WRAPPERS.iter().map(|(_, p, _)| *p).collect::<Vec<_>>(),
    );

    let out_dir = target_dir.join("wasm32-wasip2").join("wasm");
    let mut consts = String::new();
    let wrappers_out = wrappers_dir.join("wasm32-wasip2").join("wasm");
    let built = COMPONENTS
        .iter()
        .map(|c| (c, &out_dir))
        .chain(WRAPPERS.iter().map(|c| (c, &wrappers_out)));
    for ((name, package, stem), out_dir) in built {
        let path = out_dir.join(format!("{stem}.wasm"));
        assert!(
            path.exists(),
            "{package} did not produce {}",
            path.display()
        );
        writeln!(
            consts,
            "/// The `{package}` component.\npub const {name}: &str = {:?};",
            path.display().to_string()
        )
        .expect("writing to a String");
    }
    // The SampleDB plugins, each as a constant named after it (`sampledb-storage` → `STORAGE`)
    // and all of them in pipeline order. Those in other languages are built by their own
    // toolchains (`cargo xtask plugins`, which installs them), not by cargo: only their paths
    // are known here.
    let mut list = String::new();
    for (name, source) in SAMPLEDB_PLUGINS {
        let path = target_dir.join(sampledb_component(name, source));
        if is_cargo_package(source) {
            assert!(path.exists(), "{source} did not produce {}", path.display());
        }
        let constant = name
            .trim_start_matches("sampledb-")
            .to_uppercase()
            .replace('-', "_");
        writeln!(
            consts,
            "/// The `{name}` plugin's component (from `{source}`).\npub const {constant}: &str = {:?};",
            path.display().to_string()
        )
        .expect("writing to a String");
        writeln!(list, "    ({name:?}, {constant}),").expect("writing to a String");
    }
    writeln!(
        consts,
        "/// The SampleDB plugins in pipeline order, as (WasmPlugin name, component), from\n/// `plugins/sampledb_plugins.rs`.\npub const SAMPLEDB: &[(&str, &str)] = &[\n{list}];"
    )
    .expect("writing to a String");
    let generated =
        Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("components.rs");
    std::fs::write(generated, consts).expect("writing components.rs");
}

/// Builds `packages` for wasm32-wasip2 in one nested cargo invocation.
fn build(root: &Path, target_dir: &Path, packages: &[&str]) {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            // The workspace's `wasm` profile, shared with `cargo xtask plugins`.
            "--profile",
            "wasm",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target_dir);
    for package in packages {
        cmd.args(["-p", package]);
    }
    // The outer build's settings (its target, flags, jobserver, profile) must not leak into the
    // nested one.
    for (key, _) in env::vars() {
        if (key.starts_with("CARGO_") && key != "CARGO_HOME")
            || key.starts_with("RUSTC_")
            || matches!(
                key.as_str(),
                "RUSTFLAGS"
                    | "RUSTDOCFLAGS"
                    | "MAKEFLAGS"
                    | "MFLAGS"
                    | "TARGET"
                    | "HOST"
                    | "OUT_DIR"
                    | "PROFILE"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "NUM_JOBS"
            )
        {
            cmd.env_remove(key);
        }
    }
    let status = cmd
        .status()
        .expect("running cargo for the wasm32-wasip2 guests");
    assert!(
        status.success(),
        "building the wasm32-wasip2 guests failed (is the target installed? `rustup target add wasm32-wasip2`)"
    );
}
