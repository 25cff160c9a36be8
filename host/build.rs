//! Generates two files into OUT_DIR:
//! - `embedded.rs`: the plugin templates, the guest SDKs and the WIT, which `windlass plugin new`
//!   writes into a new project (so the binary carries them wherever it is installed);
//! - `conformance_cases.rs`: one `#[test]` per case directory of `tests/cases/<plugin>/`, so that
//!   each case passes or fails under its own name;
//! - `build_info.rs`: what `windlass version` tells — the commit built (`git`, or
//!   `WINDLASS_BUILD_COMMIT` where there is no checkout), the wasmtime version linked (from
//!   Cargo.lock) and the WIT packages served (from `wit/`).

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

    build_info(&root, &out);
}

/// Writes `build_info.rs`: `COMMIT`, `WASMTIME` and `WIT_PACKAGES`.
fn build_info(root: &Path, out: &Path) {
    println!("cargo:rerun-if-env-changed=WINDLASS_BUILD_COMMIT");
    let git = root.join(".git");
    // A new commit moves the ref HEAD names (or HEAD itself when detached). Only files that
    // exist: cargo runs a build script again every time when one it watches is missing.
    let mut watched = vec![git.join("HEAD"), git.join("packed-refs")];
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(reference) = head.trim().strip_prefix("ref: ")
    {
        watched.push(git.join(reference));
    }
    for path in watched.iter().filter(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let commit = std::env::var("WINDLASS_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = std::process::Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(root)
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    let lock = root.join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let lock = std::fs::read_to_string(&lock).expect("Cargo.lock");
    let wasmtime = locked_version(&lock, "wasmtime").expect("wasmtime in Cargo.lock");
    let mut wit = Vec::new();
    let mut files = Vec::new();
    walk(&root.join("wit"), &mut files);
    files.sort();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "wit"))
    {
        let text = std::fs::read_to_string(file).expect("a WIT file");
        wit.extend(text.lines().filter_map(|l| {
            Some(
                l.trim()
                    .strip_prefix("package ")?
                    .trim_end_matches(';')
                    .to_string(),
            )
        }));
    }
    wit.sort();
    wit.dedup();
    let info = format!(
        "/// The commit built.\npub const COMMIT: &str = {commit:?};\n\
         /// The wasmtime version linked.\npub const WASMTIME: &str = {wasmtime:?};\n\
         /// The WIT packages served.\npub const WIT_PACKAGES: &[&str] = &{wit:?};\n"
    );
    std::fs::write(out.join("build_info.rs"), info).expect("writing build_info.rs");
}

/// The version of package `name` in a Cargo.lock.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let wanted = format!("name = {name:?}");
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == wanted {
            let version = lines.next()?.trim().strip_prefix("version = ")?;
            return Some(version.trim_matches('"').to_string());
        }
    }
    None
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
