// The SampleDB operator's plugins, in pipeline order: the one list of them. `include!`d by
// xtask (which builds them), by test-guests/build.rs (which builds the Rust ones for the tests
// and names each component: `windlass_test_guests::SAMPLEDB`) and by `windlass dev` (which
// loads them by default); the end-to-end, conformance and Helm tests take theirs from
// `windlass_test_guests::SAMPLEDB`.

/// (WasmPlugin name, source): a cargo package, or a directory whose `build.sh OUT` builds the
/// component with its own toolchain.
pub const SAMPLEDB_PLUGINS: &[(&str, &str)] = &[
    ("sampledb-storage", "sampledb-storage"),
    ("sampledb-backup", "sampledb-backup"),
    ("sampledb-upgrade", "sampledb-upgrade"),
    ("sampledb-primary", "plugins/sampledb-primary"),
    ("sampledb-conventions", "plugins/sampledb-conventions"),
    // Last: what it produces is its own, and the conventions would otherwise edit its
    // ServiceAccount, Role and RoleBinding, kinds they do not declare.
    ("sampledb-chaos", "plugins/sampledb-chaos"),
];

/// Whether a source is a cargo package (else a directory with a `build.sh`).
pub fn is_cargo_package(source: &str) -> bool {
    !source.contains('/')
}

/// Where a plugin's component is built, relative to the `target/wasm` directory.
pub fn sampledb_component(name: &str, source: &str) -> String {
    if is_cargo_package(source) {
        format!("wasm32-wasip2/wasm/{}.wasm", source.replace('-', "_"))
    } else {
        format!("plugins/{name}.wasm")
    }
}
