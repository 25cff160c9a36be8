//! Publishing: the component, loaded by the runtime first, as a WebAssembly artifact.

use oci_client::{
    client::{Config, ImageLayer},
    manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest},
};

use super::{CONFIG_MEDIA_TYPE, Client, LAYER_MEDIA_TYPE, Pushed, parse_reference};
use windlass_contract::{Engine, LoadOptions, RECONCILER_EXPORT};

use crate::{Error, Result};

impl Client {
    /// Loads `wasm` with `engine` (so only a plugin this host can run is published), then
    /// pushes it to `reference` as a WebAssembly artifact whose config describes the component.
    ///
    /// # Errors
    /// [`Error::InvalidReference`], [`Error::InvalidPlugin`], [`Error::Unreachable`],
    /// [`Error::Unauthorized`], [`Error::Registry`].
    pub async fn push(&self, reference: &str, wasm: &[u8], engine: &dyn Engine) -> Result<Pushed> {
        let r = parse_reference(reference)?;
        let plugin = engine
            .load(reference, wasm, LoadOptions::default())
            .map_err(|e| Error::InvalidPlugin {
                reference: reference.to_string(),
                source: Box::new(e),
            })?;
        let layer_digest = plugin.digest().to_string();
        let info = plugin.info();
        let created = windlass_contract::now_rfc3339();
        // The CNCF wasm OCI artifact config: what a registry UI or another tool needs to know
        // about the component without downloading it.
        let config = serde_json::json!({
            "created": &created,
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [&layer_digest],
            "component": {
                "exports": [RECONCILER_EXPORT],
                "imports": plugin.imports(),
            },
        });
        let config = Config::new(
            config.to_string().into_bytes(),
            CONFIG_MEDIA_TYPE.into(),
            None,
        );
        let layer = ImageLayer::new(wasm.to_vec(), LAYER_MEDIA_TYPE.into(), None);
        let annotations = [
            ("org.opencontainers.image.title", info.name.clone()),
            ("org.opencontainers.image.version", info.version.clone()),
            ("org.opencontainers.image.created", created),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut manifest =
            OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
        manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.into());
        // Serialised here, not by the client, so that the digest printed is the digest of the
        // exact bytes the registry stores.
        let body = serde_json::to_vec(&manifest).map_err(|e| Error::Registry {
            registry: r.registry().to_string(),
            reference: reference.to_string(),
            message: format!("serialising the manifest: {e}"),
        })?;
        let manifest_digest = self
            .push_blobs_and_manifest(
                reference,
                vec![
                    (layer.data, layer_digest.clone()),
                    (config.data, manifest.config.digest.clone()),
                ],
                body,
                OCI_IMAGE_MEDIA_TYPE,
            )
            .await?;
        Ok(Pushed {
            layer_digest,
            pinned_reference: format!("{}/{}@{manifest_digest}", r.registry(), r.repository()),
            manifest_digest,
        })
    }

    /// Pushes `blobs` (each with its `sha256:<hex>` digest), then `manifest`, whose media type
    /// is `media_type`, to `reference`: an artifact the caller assembled (a plugin by
    /// [`Client::push`], the host's container image by `cargo xtask image`). Returns the
    /// manifest's digest, the digest of exactly the bytes given.
    ///
    /// # Errors
    /// [`Error::InvalidReference`], [`Error::Unreachable`], [`Error::Unauthorized`],
    /// [`Error::Registry`].
    pub async fn push_blobs_and_manifest(
        &self,
        reference: &str,
        blobs: Vec<(bytes::Bytes, String)>,
        manifest: Vec<u8>,
        media_type: &'static str,
    ) -> Result<String> {
        let r = parse_reference(reference)?;
        let manifest_digest = windlass_contract::digest(&manifest);
        let fail = |e| self.classify(&r, e);
        self.client
            .store_auth_if_needed(r.resolve_registry(), &self.auth())
            .await;
        for (data, digest) in blobs {
            self.client
                .push_blob(&r, data, &digest)
                .await
                .map_err(fail)?;
        }
        self.client
            .push_manifest_raw(&r, manifest, http::HeaderValue::from_static(media_type))
            .await
            .map_err(fail)?;
        Ok(manifest_digest)
    }
}
