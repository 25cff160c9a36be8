//! A component in an OCI registry (the WebAssembly artifact layout): its revision is the
//! manifest digest the reference resolves to (one HEAD request), polled on the interval since
//! tags move; the pull is pinned to that digest's content by the `sha256` pin when one is given.
//! Credentials come from the WasmPlugin's pull secret in the host's namespace, read once per
//! load for the resolve and the pull alike.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use windlass_source::oci;

use super::{LoadError, OciSettings};
use crate::crd::OciSource;

/// `oci REFERENCE`.
pub fn describe(source: &OciSource) -> String {
    format!("oci {}", source.reference)
}

/// Polled: a moved tag is found on the next `oci_poll`.
pub fn watch(_: &OciSource) -> super::Watch {
    super::Watch::Poll
}

/// The OCI options for one WasmPlugin: the host's settings plus its pull secret's credentials.
///
/// # Errors
/// [`LoadError::Source`] when the pull secret cannot be read or holds no credentials for the
/// reference's registry.
pub async fn options(
    client: &Client,
    plugin: &str,
    settings: &OciSettings,
    source: &OciSource,
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

/// The manifest digest the reference resolves to now.
///
/// # Errors
/// [`LoadError::Fetch`] when the registry cannot resolve it.
pub async fn resolve(
    plugin: &str,
    source: &OciSource,
    options: &oci::Options,
) -> Result<String, LoadError> {
    oci::resolve(&source.reference, options)
        .await
        .map_err(|source| LoadError::Fetch {
            plugin: plugin.to_string(),
            source,
        })
}

/// The artifact's layer, checked against `pin` by the registry client as it is pulled. When
/// the host has trusted keys, or the source asks for verification, the manifest `revision`
/// (what the reference resolved to) must be signed by one of the host's keys *and* by one of
/// the source's, and is then pulled by that digest.
///
/// # Errors
/// [`LoadError::Fetch`] when a key is not one, a signature is missing or does not verify,
/// the pull fails, or the layer is not the pinned one.
pub async fn fetch(
    plugin: &str,
    source: &OciSource,
    trusted: &[oci::PublicKey],
    options: &oci::Options,
    pin: Option<&str>,
    revision: Option<&str>,
) -> Result<Vec<u8>, LoadError> {
    let refused = |source| LoadError::Fetch {
        plugin: plugin.to_string(),
        source,
    };
    let mut policies: Vec<Vec<oci::PublicKey>> = Vec::new();
    if !trusted.is_empty() {
        policies.push(trusted.to_vec());
    }
    if let Some(verify) = &source.verify {
        policies.push(
            verify
                .keys
                .iter()
                .map(|k| oci::PublicKey::from_pem(&k.name, &k.public_key))
                .collect::<Result<Vec<_>, _>>()
                .map_err(refused)?,
        );
    }
    let Some((last, first)) = policies.split_last() else {
        return oci::pull(&source.reference, options, pin)
            .await
            .map(|pulled| pulled.bytes)
            .map_err(refused);
    };
    let client = oci::Client::new(options.clone());
    let revision = match revision {
        Some(r) => r.to_string(),
        None => client.resolve(&source.reference).await.map_err(refused)?,
    };
    let mut verified = Vec::new();
    for keys in first {
        verified.push(
            client
                .verify(&source.reference, &revision, keys)
                .await
                .map_err(refused)?,
        );
    }
    let (pulled, by) = client
        .pull_verified(&source.reference, &revision, pin, last)
        .await
        .map_err(refused)?;
    verified.push(by);
    for v in &verified {
        tracing::info!(
            wasm_plugin = plugin,
            manifest = %v.manifest_digest,
            key = %v.key,
            fingerprint = %v.fingerprint,
            "signature verified"
        );
    }
    Ok(pulled.bytes)
}
