//! A WasmPlugin's source: parsed at the CRD boundary into one [`Source`] kind, each kind a
//! module with the same verbs — `describe`, `watch` (what tells the host to look again),
//! resolving a revision (only OCI has one: the manifest digest), and `fetch` — and here the
//! steps every kind shares: the `sha256` pin (its form checked before anything is read, then
//! the digest of what was fetched), and the errors naming the source.
//!
//! Adding a kind of source: a field and its variant in `crd.rs` (and the CEL rule's list), a
//! module here, and its arm in each verb below.

mod config_map;
mod file;
mod oci;

use kube::Client;

use windlass_source::{compressed, oci as registry};

use super::error::LoadError;
use crate::crd::{PluginSource, Source};

/// Where OCI sources are pulled from and with which settings.
#[derive(Debug, Clone, Default)]
pub struct OciSettings {
    /// Registry options (plain-HTTP registries, size limit); credentials come per WasmPlugin.
    pub options: registry::Options,
    /// The namespace of pull secrets (the host's own).
    pub namespace: String,
    /// The host-wide trust policy: when not empty, every OCI plugin must be signed by one of
    /// these keys (cosign's format), whatever its WasmPlugin says; a WasmPlugin's own
    /// `verify.keys` are checked as well, never instead.
    pub trusted_keys: Vec<registry::PublicKey>,
}

/// A component's bytes and digest, as fetched.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The component.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of the bytes.
    pub digest: String,
}

/// What tells the host that a source may have changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    /// A watch on this ConfigMap, by name.
    ConfigMap {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Looking again every `oci_poll` (a tag may move).
    Poll,
    /// Nothing: only a new spec.
    Nothing,
}

/// A source resolved for one load: its revision, if the kind has one, and what the fetch needs
/// from the resolve (the registry credentials, read once).
#[derive(Debug, Default)]
pub struct Resolved {
    /// The manifest digest an OCI reference resolves to; none for the other kinds.
    pub revision: Option<String>,
    registry: Option<registry::Options>,
}

/// The one source a WasmPlugin names.
///
/// # Errors
/// [`LoadError::Source`] naming the field when none or several are given.
pub fn parse<'a>(plugin: &str, source: &'a PluginSource) -> Result<Source<'a>, LoadError> {
    source.parse().map_err(|why| LoadError::Source {
        plugin: plugin.to_string(),
        why,
    })
}

impl Source<'_> {
    /// A short description for messages (`configMap ns/name[key]`, `oci REF`, `file PATH`).
    pub fn describe(&self) -> String {
        match self {
            Source::ConfigMap(s) => config_map::describe(s),
            Source::Oci(s) => oci::describe(s),
            Source::File(s) => file::describe(s),
        }
    }

    /// What tells the host to look at the source again.
    pub fn watch(&self) -> Watch {
        match self {
            Source::ConfigMap(s) => config_map::watch(s),
            Source::Oci(s) => oci::watch(s),
            Source::File(s) => file::watch(s),
        }
    }

    /// The source's current revision, where its kind has one.
    ///
    /// # Errors
    /// When the revision cannot be read (an OCI pull secret or the registry).
    pub async fn resolve(
        &self,
        client: &Client,
        plugin: &str,
        settings: &OciSettings,
    ) -> Result<Resolved, LoadError> {
        match self {
            Source::Oci(s) => {
                let options = oci::options(client, plugin, settings, s).await?;
                let revision = oci::resolve(plugin, s, &options).await?;
                Ok(Resolved {
                    revision: Some(revision),
                    registry: Some(options),
                })
            }
            Source::ConfigMap(_) | Source::File(_) => Ok(Resolved::default()),
        }
    }

    /// Fetches the component and checks the `sha256` pin: its form before anything is read,
    /// then the digest of what was fetched. A ConfigMap's or a file's gzip-compressed component
    /// is inflated first (up to the registry's layer limit), and its digest is the inflated
    /// component's.
    ///
    /// # Errors
    /// [`LoadError::Source`] naming the source when it cannot be read; [`LoadError::Fetch`]
    /// when the pin is malformed, does not match, a registry pull fails, or a compressed
    /// component is corrupt or inflates past the limit.
    pub async fn fetch(
        &self,
        client: &Client,
        plugin: &str,
        settings: &OciSettings,
        resolved: Resolved,
        sha256: Option<&str>,
    ) -> Result<Fetched, LoadError> {
        let refused = |source| LoadError::Fetch {
            plugin: plugin.to_string(),
            source,
        };
        let unreadable = |why: String| LoadError::Source {
            plugin: plugin.to_string(),
            why: format!("{}: {why}", self.describe()),
        };
        let pin = sha256
            .map(windlass_source::parse_pin)
            .transpose()
            .map_err(refused)?;
        let bytes = match self {
            Source::ConfigMap(s) => config_map::fetch(client, s).await.map_err(unreadable)?,
            Source::File(s) => file::fetch(s).await.map_err(unreadable)?,
            Source::Oci(s) => {
                let options = match resolved.registry {
                    Some(options) => options,
                    None => oci::options(client, plugin, settings, s).await?,
                };
                oci::fetch(
                    plugin,
                    s,
                    &settings.trusted_keys,
                    &options,
                    pin.as_deref(),
                    resolved.revision.as_deref(),
                )
                .await?
            }
        };
        let bytes = match self {
            // A registry's layer is the component itself (the artifact layout's media type).
            Source::Oci(_) => bytes,
            // Inflating up to the limit (64 MiB) is work for a blocking thread, not the
            // executor's, which the watches and reconciles share.
            Source::ConfigMap(_) | Source::File(_) if compressed::is_gzip(&bytes) => {
                let (limit, name) = (settings.options.max_layer_bytes, self.describe());
                tokio::task::spawn_blocking(move || compressed::inflate(bytes, limit, &name))
                    .await
                    .map_err(LoadError::Join)?
                    .map_err(refused)?
            }
            Source::ConfigMap(_) | Source::File(_) => bytes,
        };
        let digest = windlass_contract::digest(&bytes);
        if let Some(pin) = pin
            && pin != digest
        {
            return Err(refused(windlass_source::Error::DigestMismatch {
                source_name: self.describe(),
                expected: pin,
                actual: digest,
                hint: "",
            }));
        }
        Ok(Fetched { bytes, digest })
    }
}
