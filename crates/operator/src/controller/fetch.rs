//! Fetching a WasmPlugin's component from its source and checking its pin.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

use windlass_source::oci;

use crate::crd::PluginSource;

use super::error::LoadError;

/// Where OCI sources are pulled from and with which settings.
#[derive(Debug, Clone, Default)]
pub struct OciSettings {
    /// Registry options (plain-HTTP registries, size limit); credentials come per WasmPlugin.
    pub options: oci::Options,
    /// The namespace of pull secrets (the host's own).
    pub namespace: String,
}

/// A component's bytes and digest, as fetched.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The component.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of the bytes.
    pub digest: String,
}

/// The OCI options for one WasmPlugin: the host's settings plus its pull secret's credentials.
///
/// # Errors
/// [`LoadError::Source`] when the pull secret cannot be read or holds no credentials for the
/// reference's registry.
pub async fn oci_options(
    client: &Client,
    plugin: &str,
    settings: &OciSettings,
    source: &crate::crd::OciSource,
) -> Result<oci::Options, LoadError> {
    let mut options = settings.options.clone();
    let Some(secret_name) = &source.pull_secret else {
        return Ok(options);
    };
    let fail = |why: String| LoadError::Source {
        plugin: plugin.to_string(),
        why: format!("pull secret {}/{secret_name}: {why}", settings.namespace),
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let secret = secrets
        .get_opt(secret_name)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let secret = secret.ok_or_else(|| fail("does not exist".into()))?;
    let json = secret
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .ok_or_else(|| fail("has no .dockerconfigjson key".into()))?;
    let registry = oci::registry_of(&source.reference).map_err(|e| fail(e.to_string()))?;
    let auth = oci::RegistryAuth::from_docker_config(&json.0, &registry)
        .map_err(|e| fail(e.to_string()))?;
    options.auth = Some(auth.ok_or_else(|| fail(format!("has no credentials for {registry}")))?);
    Ok(options)
}

/// Fetches the component a source names and checks the `sha256` pin. `registry` is the OCI
/// options when the caller has them already ([`oci_options`] reads the pull secret); without
/// them they are made here.
///
/// # Errors
/// [`LoadError::Source`] naming the source when it cannot be read; [`LoadError::Fetch`] when the pin is
/// malformed (checked before anything is read, whatever the source), does not match, or a
/// registry pull fails.
pub async fn fetch(
    client: &Client,
    plugin: &str,
    source: &PluginSource,
    settings: &OciSettings,
    registry: Option<oci::Options>,
) -> Result<Fetched, LoadError> {
    source.validate().map_err(|why| LoadError::Source {
        plugin: plugin.to_string(),
        why,
    })?;
    let fail = |why: String| LoadError::Source {
        plugin: plugin.to_string(),
        why: format!("{}: {why}", source.describe()),
    };
    let refused = |source| LoadError::Fetch {
        plugin: plugin.to_string(),
        source,
    };
    let pin = source
        .sha256
        .as_deref()
        .map(windlass_source::parse_pin)
        .transpose()
        .map_err(refused)?;
    let bytes = if let Some(cm) = &source.config_map {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cm.namespace);
        let found = api
            .get_opt(&cm.name)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let found = found.ok_or_else(|| fail("the ConfigMap does not exist".into()))?;
        let bytes = found
            .binary_data
            .as_ref()
            .and_then(|d| d.get(&cm.key))
            .map(|b| b.0.clone());
        bytes.ok_or_else(|| {
            let keys: Vec<&String> = found.binary_data.iter().flat_map(|d| d.keys()).collect();
            fail(format!(
                "binaryData has no key {:?} (it has {keys:?})",
                cm.key
            ))
        })?
    } else if let Some(file) = &source.file {
        tokio::fs::read(&file.path)
            .await
            .map_err(|e| fail(e.to_string()))?
    } else if let Some(reference) = &source.oci {
        let options = match registry {
            Some(options) => options,
            None => oci_options(client, plugin, settings, reference).await?,
        };
        let pulled = oci::pull(&reference.reference, &options, pin.as_deref())
            .await
            .map_err(refused)?;
        pulled.bytes
    } else {
        return Err(fail("no source".into()));
    };
    let digest = windlass_contract::digest(&bytes);
    if let Some(pin) = pin
        && pin != digest
    {
        return Err(refused(windlass_source::Error::DigestMismatch {
            source_name: source.describe(),
            expected: pin,
            actual: digest,
            hint: "",
        }));
    }
    Ok(Fetched { bytes, digest })
}
