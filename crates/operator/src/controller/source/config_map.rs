//! A component in a ConfigMap's `binaryData` key: read by name (least privilege: no
//! cluster-wide ConfigMap list), watched by name, no revision of its own — a change of the
//! ConfigMap triggers a load through its watch.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use crate::crd::ConfigMapSource;

/// `configMap ns/name[key]`.
pub fn describe(source: &ConfigMapSource) -> String {
    format!(
        "configMap {}/{}[{}]",
        source.namespace, source.name, source.key
    )
}

/// The ConfigMap, watched by name.
pub fn watch(source: &ConfigMapSource) -> super::Watch {
    super::Watch::ConfigMap {
        namespace: source.namespace.clone(),
        name: source.name.clone(),
    }
}

/// The key's bytes.
///
/// # Errors
/// Why they cannot be read, for [`super::LoadError::Source`].
pub async fn fetch(client: &Client, source: &ConfigMapSource) -> Result<Vec<u8>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &source.namespace);
    let found = api.get_opt(&source.name).await.map_err(|e| e.to_string())?;
    let found = found.ok_or_else(|| "the ConfigMap does not exist".to_string())?;
    let bytes = found
        .binary_data
        .as_ref()
        .and_then(|d| d.get(&source.key))
        .map(|b| b.0.clone());
    bytes.ok_or_else(|| {
        let keys: Vec<&String> = found.binary_data.iter().flat_map(|d| d.keys()).collect();
        format!("binaryData has no key {:?} (it has {keys:?})", source.key)
    })
}
