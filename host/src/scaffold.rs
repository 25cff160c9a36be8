//! `windlass plugin new`: a plugin project from a template, in any of the languages Windlass
//! has an SDK for. The binary carries the templates, the SDKs and the WIT (generated into
//! `embedded.rs` by the build script), so a project comes out the same wherever `windlass` is
//! installed.
//!
//! A project holds the language's template (`templates/<lang>/`), what every language shares
//! (`templates/common/`: the Greeting CRD and example for `windlass dev`, and the cases for
//! `windlass plugin test`), the WIT (`wit/`) and the language's SDK. In template files
//! `{{name}}` is the plugin's name and `{{module}}` the same with `_` for `-`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
}

/// A language with a template and an SDK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with `windlass-sdk` (`cargo test`, `cargo build --target wasm32-wasip2`).
    Rust,
    /// Python, built with componentize-py (`python3 -m unittest`).
    Python,
    /// JavaScript, built with jco's QuickJS backend (`node --test`).
    Js,
    /// Go (mainline, `GOOS=wasip1`), componentized with the WASI reactor adapter (`go test`).
    Go,
}

impl Lang {
    /// Every language.
    pub const ALL: [Lang; 4] = [Lang::Rust, Lang::Python, Lang::Js, Lang::Go];

    /// Its name on the command line and in `templates/`.
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::Go => "go",
        }
    }

    /// Where its SDK is in the repository, and where it goes in a project.
    fn sdk(self) -> (&'static str, &'static str) {
        match self {
            Lang::Rust => ("guest-sdk/src/", "windlass-sdk/src/"),
            Lang::Python => ("guest-sdk/python/windlass/", "windlass/"),
            Lang::Js => ("guest-sdk/js/", "windlass/"),
            Lang::Go => ("guest-sdk/go/", "windlass/"),
        }
    }
}

/// Whether an SDK file is the SDK's own test, which a project does not need.
fn sdk_test(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "test.sh"
        || name.starts_with("test_")
        || name.ends_with(".test.js")
        || name.ends_with("_test.go")
        || name == "typecheck.ts"
}

/// Checks that `name` can name a plugin: a DNS-1123 label starting with a letter.
///
/// # Errors
/// Saying what is wrong with it.
pub fn check_name(name: &str) -> Result<()> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if name.is_empty() || name.len() > 63 {
        bail!("plugin name {name:?}: must be 1 to 63 characters");
    }
    if !ok_chars || !name.starts_with(|c: char| c.is_ascii_lowercase()) || name.ends_with('-') {
        bail!(
            "plugin name {name:?}: must be lowercase letters, digits and '-', start with a letter \
             and not end with '-' (a DNS-1123 label)"
        );
    }
    Ok(())
}

/// The files of a new `lang` project named `name`: (path in the project, contents).
///
/// # Errors
/// When `name` cannot name a plugin.
pub fn files(lang: Lang, name: &str) -> Result<Vec<(String, String)>> {
    check_name(name)?;
    let module = name.replace('-', "_");
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{module}}", &module)
    };
    let common = "templates/common/";
    let own = format!("templates/{}/", lang.as_str());
    let (sdk_from, sdk_to) = lang.sdk();
    let mut out = Vec::new();
    for (path, text) in embedded::FILES {
        if let Some(rel) = path
            .strip_prefix(common)
            .or_else(|| path.strip_prefix(own.as_str()))
        {
            out.push((fill(rel), fill(text)));
        } else if let Some(rel) = path.strip_prefix(sdk_from)
            && !sdk_test(rel)
        {
            out.push((format!("{sdk_to}{rel}"), text.to_string()));
        } else if path.starts_with("wit/") {
            out.push((path.to_string(), text.to_string()));
        }
    }
    if !out.iter().any(|(p, _)| p == "build.sh") {
        bail!("no template for {} in this build", lang.as_str());
    }
    Ok(out)
}

/// Writes a new project into `dir`, which must not exist or be empty; returns the paths
/// written.
///
/// # Errors
/// When `dir` holds anything, or a file cannot be written.
pub fn generate(lang: Lang, name: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    let files = files(lang, name)?;
    if dir
        .read_dir()
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
    {
        bail!("{}: not empty; choose a new directory", dir.display());
    }
    let mut written = Vec::new();
    for (rel, text) in files {
        let path = dir.join(&rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        #[cfg(unix)]
        if rel.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()))?;
        }
        written.push(path);
    }
    Ok(written)
}
