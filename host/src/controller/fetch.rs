//! Fetching a WasmPlugin's component from its source and checking its pin.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use crate::{crd::PluginSource, runtime::Runtime};

use super::Error;

/// A component's bytes and digest, as fetched.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The component.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of the bytes.
    pub digest: String,
}

/// Fetches the component a source names and checks the `sha256` pin.
///
/// # Errors
/// [`Error::Source`] naming the source when it cannot be read, and [`Error::DigestMismatch`]
/// when the pin does not match.
pub async fn fetch(client: &Client, plugin: &str, source: &PluginSource) -> Result<Fetched, Error> {
    source.validate().map_err(|why| Error::Source {
        plugin: plugin.to_string(),
        why,
    })?;
    let fail = |why: String| Error::Source {
        plugin: plugin.to_string(),
        why: format!("{}: {why}", source.describe()),
    };
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
    } else {
        return Err(fail(
            "OCI sources are not supported by this build yet".into(),
        ));
    };
    let digest = Runtime::digest(&bytes);
    if let Some(pin) = &source.sha256 {
        let want = if pin.starts_with("sha256:") {
            pin.clone()
        } else {
            format!("sha256:{pin}")
        };
        if want != digest {
            return Err(Error::DigestMismatch {
                plugin: plugin.to_string(),
                expected: want,
                actual: digest,
            });
        }
    }
    Ok(Fetched { bytes, digest })
}
