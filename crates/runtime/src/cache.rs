//! The precompiled cache: native code for each component, on disk, keyed by the component's
//! sha256 and the engine's compatibility hash, so that a restart loads in milliseconds what took
//! seconds to compile (a Python guest compiles for 8–16 s).
//!
//! # Warning
//! Loading a precompiled artifact runs native code from the file without verifying it. The
//! cache directory must be writable only by the host. An artifact is only ever loaded by an
//! engine with the same configuration (the compatibility hash is part of its name, and wasmtime
//! refuses a mismatch on its own as well).

use std::{
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
};

use wasmtime::{Engine, component::Component};

use super::{Error, Result};

/// A directory of precompiled components.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
    engine_key: String,
}

impl Cache {
    /// Opens (creating it if needed) a cache directory for artifacts of `engine`.
    pub fn open(dir: impl Into<PathBuf>, engine: &Engine) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| Error::Cache {
            path: dir.clone(),
            source,
        })?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = format!("{:016x}", hasher.finish());
        Ok(Cache { dir, engine_key })
    }

    /// The directory the cache lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!(
            "{}-{}.cwasm",
            digest.trim_start_matches("sha256:"),
            self.engine_key
        ))
    }

    /// Loads the artifact for `digest`, if one is cached and this engine accepts it. A corrupt
    /// or incompatible artifact is removed and reported as a miss.
    pub(crate) fn load(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest);
        if !path.exists() {
            return None;
        }
        // SAFETY: the file was written by `store` below from `Engine::precompile_component` of a
        // component whose sha256 is in its name, in a directory only the host may write (see
        // the module docs). wasmtime checks the engine configuration and version on load.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize_file(engine, &path) };
        match loaded {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "discarding unusable precompiled artifact");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Writes `artifact` (from `Engine::precompile_component`) for `digest`, atomically so a
    /// crash never leaves a torn file that a later start would try to load.
    pub(crate) fn store(&self, digest: &str, artifact: &[u8]) -> Result<()> {
        let path = self.path(digest);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let io = |source| Error::Cache {
            path: path.clone(),
            source,
        };
        std::fs::write(&tmp, artifact).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }
}
