//! Generates two files into OUT_DIR:
//! - `embedded.rs`: the plugin templates, the guest SDKs and the WIT, which `windlass plugin new`
//!   writes into a new project (so the binary carries them wherever it is installed);
//! - `conformance_cases.rs`: one `#[test]` per case directory of `tests/cases/<plugin>/`, so that
//!   each case passes or fails under its own name.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let root = manifest.parent().expect("repository root").to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("out dir"));

    let mut embedded =
        String::from("/// Files `windlass plugin new` may write: (repository path, contents).\n");
    embedded.push_str("pub static FILES: &[(&str, &str)] = &[\n");
    for dir in ["templates", "guest-sdk", "wit"] {
        let path = root.join(dir);
        println!("cargo:rerun-if-changed={}", path.display());
        let mut files = Vec::new();
        walk(&path, &mut files);
        files.sort();
        for file in files {
            let rel = file.strip_prefix(&root).expect("under the root");
            let rel = rel.to_string_lossy().replace('\\', "/");
            if !embeddable(&rel) {
                continue;
            }
            writeln!(
                embedded,
                "    ({rel:?}, include_str!({:?})),",
                file.display()
            )
            .unwrap();
        }
    }
    embedded.push_str("];\n");
    std::fs::write(out.join("embedded.rs"), embedded).expect("writing embedded.rs");

    let cases = manifest.join("tests/cases");
    println!("cargo:rerun-if-changed={}", cases.display());
    let mut tests = String::new();
    let mut count = 0;
    for plugin in sorted_dirs(&cases) {
        let plugin_name = file_name(&plugin);
        writeln!(tests, "mod {} {{", ident(&plugin_name)).unwrap();
        for case in sorted_dirs(&plugin) {
            let case_name = file_name(&case);
            writeln!(
                tests,
                "    #[test]\n    fn {}() {{\n        super::case({plugin_name:?}, {case_name:?});\n    }}",
                ident(&case_name)
            )
            .unwrap();
            count += 1;
        }
        tests.push_str("}\n");
    }
    writeln!(
        tests,
        "/// How many cases there are.\nconst CASES: usize = {count};"
    )
    .unwrap();
    std::fs::write(out.join("conformance_cases.rs"), tests).expect("writing conformance_cases.rs");
}

/// Sources, not what builds and tests leave behind.
fn embeddable(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let skipped_dir = parts.iter().any(|p| {
        matches!(
            *p,
            "target" | "node_modules" | "__pycache__" | ".pytest_cache" | "bindings"
        )
    });
    let name = parts.last().copied().unwrap_or_default();
    // The Rust SDK is written from its sources; its own manifest uses the workspace's.
    let rust_sdk_manifest = rel == "guest-sdk/Cargo.toml";
    let hidden = name.starts_with('.') && name != ".gitignore";
    !skipped_dir
        && !rust_sdk_manifest
        && !hidden
        && !name.ends_with(".wasm")
        && !name.ends_with(".pyc")
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else if std::fs::read_to_string(&path).is_ok() {
            out.push(path);
        }
    }
}

fn sorted_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned()
}

/// A Rust identifier for a directory name.
fn ident(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    id
}
